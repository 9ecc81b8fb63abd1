"""The whole pipeline in the default suite: the eight notebooks on params/tiny.yaml (three demo documents, both
stand-in embedders, no reranker) through the runner, in a scratch copy of the project; the headline numbers against
tests/golden/tiny.json; a second run skips every stage; and every notebook executed again the way JupyterLab runs
it — kernel working directory ``notebooks/``, a relative ``params_file``, no runner environment.

About 2-3 minutes on 2 CPU cores (embedding ~140 texts twice, eight kernel starts, twice). A deliberate change that
moves the tiny numbers re-pins with ``.venv/bin/python -m chunkstudy.golden tiny --write`` in a commit that says why.
"""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import figure_cell

from chunkstudy import artifacts, config, golden, runner

ROOT = Path(__file__).resolve().parents[1]
STAGES = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))]


def test_all_eight_stages_run_and_a_second_run_skips_them(tiny_project):
    project, first = tiny_project
    assert [(s, status) for s, status, _ in first] == [(s, "ran") for s in STAGES]
    again = runner.run(project / "params" / "tiny.yaml", project, log=lambda *_: None)
    assert [(s, status) for s, status, _ in again] == [(s, "skipped") for s in STAGES]
    figures = project / "figures" / "tiny"
    assert (figures / "report.md").is_file() and (figures / "report.html").is_file()
    assert len(list(figures.glob("*.png"))) >= 8


def test_headline_matches_the_pinned_tiny_run(tiny_project):
    project, _ = tiny_project
    cfg = config.load(project / "params" / "tiny.yaml", root=project)
    got = golden.headline(cfg)
    assert golden.compare(json.loads(golden.golden_path(ROOT, "tiny").read_text()), got) == []
    # the pipeline's own consistency: a contrast is a paired mean difference over the same queries, so it equals
    # the difference of the two conditions' means in the primary cell (every query is scored under every condition)
    for name, (a, b) in cfg.data["stats"]["contrasts"].items():
        assert got["contrasts"][name]["mean_delta"] == pytest.approx(
            got["condition_means"][a] - got["condition_means"][b], abs=1e-12)


def test_manifests_and_report_say_how_each_encoder_ran(tiny_project):
    """04's and 05's manifests carry their encoder reports (``records``): tiny pins float32, and the suite's kernels
    see no hardware bfloat16 (tests/conftest.py), so no agreement check ran; the report prints the same."""
    project, _ = tiny_project
    cfg = config.load(project / "params" / "tiny.yaml", root=project)
    m4 = artifacts.read_manifest(cfg, "04_chunk_embed")
    rows = m4["records"]["embedding_report"]
    assert rows == artifacts.read_json(cfg, "04_chunk_embed", "embedding_report")
    assert [(r["embedder"], r["runtime"], r["dtype"], r["cpu_bf16"], r["agreement_n"]) for r in rows] == \
        [("strong", "torch", "float32", None, None), ("weak", "torch", "float32", None, None)]
    assert m4["environment"]["cpu_bf16"] is None and m4["environment"]["cpu_features_env"] == ""
    # tiny has no reranker and no lexical mode (retrieve.modes: its dense default)
    assert artifacts.read_manifest(cfg, "05_retrieve")["records"] == {"rerank_report": [], "lexical_report": {}}
    lines = (project / "figures" / "tiny" / "report.md").read_text().splitlines()
    for key in ("strong", "weak"):
        (row,) = [ln for ln in lines if ln.startswith(f"| embedder '{key}' ")]
        assert row.rstrip(" |").endswith("| torch, float32")
    assert sum(", bf16: none |" in ln for ln in lines) >= 8  # every stage's CPU, as its process saw it


def test_each_document_is_segmented_once_in_the_run(tiny_project):
    """02 segments every document's sentence bounds and keeps them (data/<corpus>/cache/sentence_bounds/); 03 and
    04 read them back instead of segmenting again: each stage's stats count both."""
    project, _ = tiny_project
    cfg = config.load(project / "params" / "tiny.yaml", root=project)
    n = len(artifacts.read(cfg, "documents"))
    counts = {"02_induce": artifacts.read_json(cfg, "02_induce", "induction_stats")["sentence_bounds"],
              "03_queries": artifacts.read_json(cfg, "03_queries", "bm25")["sentence_bounds"],
              "04_chunk_embed": artifacts.read_json(cfg, "04_chunk_embed", "summary")["sentence_bounds"]}
    assert counts == {"02_induce": {"texts": n, "segmented": n, "from_store": 0},
                      "03_queries": {"texts": n, "segmented": 0, "from_store": n},
                      "04_chunk_embed": {"texts": n, "segmented": 0, "from_store": n}}
    (store,) = (artifacts.cache_dir(cfg, "sentence_bounds", create=False)).glob("*.jsonl")
    assert len(store.read_text().splitlines()) == n


def _state(project: Path, corpus: str) -> dict[str, tuple[int, int, str]]:
    """What a headless run left: ``{path: (size, mtime_ns, sha256)}`` of every file under ``data/<corpus>/`` (its
    caches left out: keyed by content, no stage's key) and ``figures/<corpus>/``."""
    out = {}
    for top in (project / "data" / corpus, project / "figures" / corpus):
        for f in sorted(p for p in top.rglob("*") if p.is_file() and "cache" not in p.relative_to(top).parts):
            st = f.stat()
            out[str(f.relative_to(project))] = (st.st_size, st.st_mtime_ns, artifacts.file_hash(f))
    return out


def test_every_notebook_runs_as_jupyterlab_runs_it_and_leaves_the_run_as_it_was(tiny_project, tmp_path,
                                                                                 monkeypatch):
    """JupyterLab starts the kernel in ``notebooks/`` and names the notebook in ``JPY_SESSION_NAME``: the parameters
    cell's relative path must still name ``params/<x>.yaml`` of the project, and nothing may land in
    ``notebooks/data/``. Running the notebooks there rewrote the run's files (08: its PDFs, report.md and
    report.html differ at every run), so the next ``./run_all.sh`` reran 08 without saying why. Now a notebook run
    in JupyterLab reads the run's files and writes under build/lab/ (chunkstudy.artifacts.place): every file of the
    run keeps its bytes and its mtime, the same numbers land under build/lab/, and the next headless run skips
    every stage. (On main the run's files were rewritten and 08 reran.)"""
    import jupytext
    import papermill as pm

    project = tmp_path / "project"
    shutil.copytree(tiny_project[0], project, symlinks=True)
    monkeypatch.delenv("CHUNKSTUDY_ROOT", raising=False)
    cfg = config.load(project / "params" / "tiny.yaml", root=project)
    # the copy's own run first: 01 records its source files relative to the project, and the copy lies elsewhere
    runner.run(project / "params" / "tiny.yaml", project, log=lambda *_: None)
    before = _state(project, "tiny")
    out = project / "interactive"
    out.mkdir()
    for stage in STAGES:
        nb = jupytext.read(project / "notebooks" / f"{stage}.py")
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        src = out / f"{stage}.ipynb"
        jupytext.write(nb, src, fmt="ipynb")
        monkeypatch.setenv("JPY_SESSION_NAME", str(project / "notebooks" / f"{stage}.py"))  # as jupyter_server
        pm.execute_notebook(str(src), str(out / f"{stage}.out.ipynb"), parameters={"params_file": "params/tiny.yaml"},
                            cwd=str(project / "notebooks"), kernel_name="python3", progress_bar=False,
                            log_output=False)
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert not (project / "notebooks" / "data").exists()
    assert not (project / "notebooks" / "figures").exists()
    assert _state(project, "tiny") == before
    lab = project / "build" / "lab"
    assert pd.read_parquet(lab / "data/tiny/07_stats/contrasts.parquet").equals(artifacts.read(cfg, "contrasts"))
    assert (lab / "figures/tiny/report.md").is_file() and (lab / "figures/tiny/report.html").is_file()
    lines: list[str] = []
    again = runner.run(project / "params" / "tiny.yaml", project, log=lines.append)
    assert [(s, status) for s, status, _ in again] == [(s, "skipped") for s in STAGES], lines


def test_the_executed_08_shows_every_figure_as_an_image(tiny_project):
    """08's figure cells printed ``<Figure size 800x400 with 1 Axes>``: ``build/executed/<corpus>/08_figures.ipynb``
    held text and no ``image/png``, so its HTML export had no figures either, and the report cell linked
    ``<name>.png``, which resolves only beside report.md. Now each ``bundle.figures[...]`` cell has one PNG, the
    figure 08 wrote (same aspect), the report cell embeds every figure of report.md, and the HTML shows them all."""
    import base64
    import io
    import re

    import nbformat
    from matplotlib.image import imread

    project, _ = tiny_project
    executed, figures = project / "build" / "executed" / "tiny", project / "figures" / "tiny"
    nb = nbformat.read(executed / "08_figures.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    cells = {found: c for c in code if (found := figure_cell(c.source)) is not None}
    assert any(not required for _, required in cells)  # bundle.figures.get(...) is checked too
    shown = {name: c for (name, required), c in cells.items() if required or (figures / f"{name}.png").is_file()}
    assert len(shown) >= 8
    for (name, required), cell in cells.items():
        if name not in shown:  # a .get(...) of a figure this run does not draw (tiny declares no multiverse)
            assert [o for o in cell.outputs if o.get("data")] == [], name
    for name, cell in shown.items():
        pngs = [o["data"]["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(pngs) == 1, (name, [sorted(o.get("data", {})) for o in cell.outputs])
        got, written = imread(io.BytesIO(base64.b64decode(pngs[0])), format="png"), imread(figures / f"{name}.png")
        aspect = (got.shape[1] / got.shape[0]) / (written.shape[1] / written.shape[0])
        assert 0.9 < aspect < 1.1, name  # the shown PNG is cropped tight
    report_md = (figures / "report.md").read_text()
    linked = re.findall(r"!\[[^]]*\]\((\w+)\.png\)", report_md)
    assert set(shown) <= set(linked)
    (report_cell,) = [c for c in code if "report.render(" in c.source]
    (out,) = report_cell.outputs
    text = out["data"]["text/markdown"]
    assert text.count("](data:image/png;base64,") == len(linked) and not re.search(r"\]\(\w+\.png\)", text)
    html = (executed / "08_figures.html").read_text()
    assert html.count('src="data:image/png;base64,') == len(shown) + len(linked)
