"""The worked example of docs/chunker.md, end to end in the default suite: params/tiny_byo.yaml (the
tiny run plus two library chunkers, chonkie's RecursiveChunker and langchain's RecursiveCharacterTextSplitter, and
one custom function, examples/paragraph_chunker.py, each with a size-matched twin) through the runner, offline.

It checks what the feature promises: the paper's numbers are those pinned for tiny (tests/golden/tiny.json); each
user condition's chunks are exactly what its chunker cuts, placed on the document text; each twin is the A0 rule
applied to its condition's per-document means; the user's contrasts are a Holm family of their own; the report
and the HTML report show them, marked user-added, and say they were declared before the run (stage 01's manifest
holds the same declaration); an edit of the custom chunker's file reruns 04.

About 4-6 minutes on 2 loaded CPU cores (the tiny run's embedding, plus ~150 more texts per embedder).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chunkstudy import artifacts, codehash, config, design, golden, runner, stats
from chunkstudy import prefix_kinds as prefixes
from chunkstudy.chunks import chunkers, chunking
from chunkstudy.metrics import paired
from conftest import scratch_project, seed_embeddings

ROOT = Path(__file__).resolve().parents[1]
STAGES = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))]
USER = ["REC", "REC-fixed", "LC", "LC-fixed", "PARA", "PARA-fixed"]


@pytest.fixture(scope="module")
def byo(tmp_path_factory, tiny_project):
    """A scratch project (as tests/test_pipeline_tiny.py's, plus a copy of examples/) that has run
    ``./run_all.sh tiny_byo`` once, its embedding store seeded from the tiny run's (the paper's conditions are
    tiny's chunks: only the user's are embedded); returns (project root, its Config, runner results)."""
    project = scratch_project(tmp_path_factory)
    seed_embeddings(tiny_project[0], "tiny", project, "tiny_byo")
    results = runner.run(project / "params" / "tiny_byo.yaml", project, log=lambda *_: None)
    return project, config.load(project / "params" / "tiny_byo.yaml", root=project), results


def test_every_stage_runs_and_the_papers_numbers_are_the_pinned_tiny_ones(byo):
    _, cfg, results = byo
    assert [(s, status) for s, status, _ in results] == [(s, "ran") for s in STAGES]
    got = golden.headline(cfg)
    assert set(got["chunks_per_condition"]) == set(cfg.data["chunking"]["conditions"]) | set(USER)
    paper = set(design.CONDITION_NAMES)
    got = {**got, "corpus": "tiny", **{k: {c: v for c, v in got[k].items() if c in paper}
                                       for k in ("chunks_per_condition", "condition_means")}}
    # 07's check of its own tests measures the user's family too; the paper's family's size is tiny's
    got["size_check"] = {k: v for k, v in got.get("size_check", {}).items() if k.startswith("confirmatory / ")}
    assert golden.compare(json.loads(golden.golden_path(ROOT, "tiny").read_text()), got) == []


def test_user_chunks_are_exactly_what_their_chunkers_cut(byo):
    project, cfg, _ = byo
    chunks, documents = artifacts.read(cfg, "chunks"), artifacts.read(cfg, "documents")
    counter = chunking.load_counter(cfg.data["chunking"]["tokenizer"])
    text = dict(zip(documents["doc_id"], documents["text"]))
    titles = dict(zip(documents["doc_id"], documents["title"]))
    for name in ("REC", "LC", "PARA"):
        spec = cfg.params("conditions").extra[name]
        fn = chunkers.load(spec.chunker, spec.options, counter=counter, params_dir=project / "params")
        want, report = chunkers.chunk_documents(documents, fn, name=name, chunker=spec.chunker, overlap=False,
                                                unaligned="error")
        got = chunks[chunks["condition"] == name]
        assert report["unplaced"] == report["dropped_chars"] == 0
        assert got[["doc_id", "start", "end"]].reset_index(drop=True).equals(want.reset_index(drop=True))
        assert got["n_content_tokens"].tolist() == counter([chunking.content(text[d], s, e) for d, s, e in
                                                             zip(got["doc_id"], got["start"], got["end"])])
    # the prefix kinds: none, the title, the real induced heading path
    assert set(chunks.loc[chunks["condition"] == "REC", "prefix"]) == {""}
    lc = chunks[chunks["condition"] == "LC"]
    assert lc["prefix"].tolist() == [prefixes.render_prefix(titles[d], []) for d in lc["doc_id"]]
    para = chunks[chunks["condition"] == "PARA"]
    assert para["prefix"].str.startswith("[").all() and (
        para["prefix_depth"] == max(cfg.params("chunking").depths)).all()
    # every user chunk was embedded and retrieved like the paper's
    runs = artifacts.read(cfg, "runs")
    assert set(USER) <= set(runs["condition"]) and set(USER) <= set(artifacts.read(cfg, "scores")["condition"])


def test_twins_are_the_a0_rule_on_their_conditions_means(byo):
    _, cfg, _ = byo
    chunks, documents = artifacts.read(cfg, "chunks"), artifacts.read(cfg, "documents")
    counter = chunking.load_counter(cfg.data["chunking"]["tokenizer"])
    summary = artifacts.read_json(cfg, "04_chunk_embed", "summary")["extra"]
    for name in ("REC", "LC", "PARA"):
        own = chunks[chunks["condition"] == name]
        twin = chunks[chunks["condition"] == name + "-fixed"]
        want = chunking.fixed_windows(documents, chunking.doc_means(own), counter,
                                      cfg.params("chunking").sentence_splitter)
        assert twin[["doc_id", "start", "end"]].reset_index(drop=True).equals(
            want[["doc_id", "start", "end"]].reset_index(drop=True))
        a, b = chunking.doc_means(twin), chunking.doc_means(own)
        gap = max(abs(a[d] - b[d]) for d in b)
        assert summary[name]["size_gap"]["max_abs_doc_gap"] == pytest.approx(gap)
        assert gap <= 4.0  # the paper's size-matching bound (paper §3.2), per document here
        assert set(twin["prefix"]) == set(own["prefix"]) or name == "PARA"  # same prefix kind (paths differ)


def test_user_contrasts_are_an_exploratory_holm_family_of_their_own(byo):
    _, cfg, _ = byo
    user = artifacts.read(cfg, "user_contrasts")
    paper = artifacts.read(cfg, "contrasts")
    assert set(user["contrast"]) == {"U1", "U2", "U3", "U4"} and set(paper["contrast"]) == {"C1", "C2", "C3", "C4"}
    assert not user["confirmatory"].any() and set(user["label"]) == {stats.USER_ADDED}
    assert (user.loc[user["contrast"] == "U2", ["condition_a", "condition_b"]].drop_duplicates().values.tolist()
            == [["REC", "REC-fixed"]])
    for _, g in user.groupby("cell"):
        assert g["p_holm"].tolist() == pytest.approx(stats.holm(g["p"].to_numpy()).tolist(), nan_ok=True)
    # the same numbers as the paired deltas (an independent path through metrics.paired.paired_deltas)
    s, q = artifacts.read(cfg, "scores"), artifacts.read(cfg, "queries")
    row = user[(user["contrast"] == "U3") & (user["cell"] == "cov-nDCG@10|strong|none")].iloc[0]
    d = paired.paired_deltas(s, q, "LC", "LC-fixed", corpus=cfg.corpus, metric="cov-nDCG@10", embedder="strong",
                            reranker="none")
    assert row["mean_delta"] == pytest.approx(d["delta"].mean(), abs=1e-12)
    assert set(artifacts.read(cfg, "user_power")["contrast"]) == {"U1", "U2", "U3", "U4"}


def test_the_report_shows_them_marked_and_declared_before_the_run(byo):
    project, cfg, _ = byo
    m1 = artifacts.read_manifest(cfg, "01_corpus")
    assert m1["user_declared"]["contrasts"] == ["U1", "U2", "U3", "U4"]
    md = (project / "figures" / "tiny_byo" / "report.md").read_text()
    html = (project / "figures" / "tiny_byo" / "report.html").read_text()
    assert "## Your chunkers and contrasts (user-added §, exploratory)" in md
    assert "Declared in the parameter file before the run" in md and "not pre-registered" not in md
    for name in USER:  # Table 2 and the conditions table
        assert f"| {name} §" in md
    assert "| U2 §       | REC − REC-fixed   | boundary placement vs. chunk size" in md
    assert "Your contrasts (user-added, exploratory)" in html and "REC-fixed §" in html
    assert (project / "figures" / "tiny_byo" / "tables" / "user_contrasts.tex").is_file()
    # the drill-down reads the user's contrasts too, after the paper's, each with its own picks
    drill = artifacts.read(cfg, "drilldown")
    order = list(dict.fromkeys(drill["contrast"]))  # C4 (A4 - A3) has no row: no tiny query differs under it
    assert order == ["C1", "C2", "C3", "U1", "U2", "U3", "U4"]
    assert "U2: REC − REC-fixed (boundary placement vs. chunk size (size-matched twin)) § user-added" in html


def test_editing_the_custom_chunker_reruns_04(byo, tmp_path):
    """04's skip key holds the hash of the custom chunker's file (outside the package, so the library hash cannot
    see it): an edit changes the key, and the runner reruns 04 (and what follows) instead of skipping it."""
    # on a copy: the edit is a change the runner must see, so the shared project would no longer be the run the
    # other tests read (its 04 key and its chunker's file disagree) for a test that runs after this one (random
    # order: .ci/run's second pass); as tests/test_pipeline_tiny.py's JupyterLab rerun
    project = tmp_path / "project"
    shutil.copytree(byo[0], project, symlinks=True)
    cfg = config.load(project / "params" / "tiny_byo.yaml", root=project)
    stage = next(s for s in runner.discover(project / "notebooks") if s.name == "04_chunk_embed")
    lib = codehash.library_hash(stage.notebook)
    before = runner.stage_key(cfg, stage, lib)
    assert list(before["chunker_sources"]) == ["PARA"]
    f = project / "examples" / "paragraph_chunker.py"
    f.write_text(f.read_text() + "\n# edited: the same function, another file\n")
    after = runner.stage_key(cfg, stage, lib)
    assert after["chunker_sources"]["PARA"] != before["chunker_sources"]["PARA"]
    assert {k: v for k, v in after.items() if k != "chunker_sources"} == \
        {k: v for k, v in before.items() if k != "chunker_sources"}


def test_ir_measures_on_the_export_reproduces_every_cell(byo, tmp_path):
    """The BEIR/TREC export of the whole run (the paper's conditions and the user's), read back by ir_measures:
    per query, nDCG@10 and RR equal the study's nDCG@10 and MRR to 1e-9 in every cell (embedder × reranker ×
    condition); R@50 equals the study's recall@50 wherever no gold span is shared by two relevant chunks (the
    definitions differ, chunkstudy.export), and nDCG@10 on the graded qrels equals cov-nDCG@10 up to the grades'
    rounding (no condition here overlaps itself)."""
    from chunkstudy import export

    _, cfg, _ = byo
    written = export.export_run(cfg, tmp_path)
    check = export.check_with_ir_measures(cfg, written)
    cells = artifacts.read(cfg, "scores")[["condition", "embedder", "reranker"]].drop_duplicates()
    assert len(check) == len(cells) == 11 * 2 + 6 * 2  # every condition (the paper's 11, the user's 6) x embedder
    assert check["max_diff_nDCG"].max() <= 1e-9 and check["max_diff_RR"].max() <= 1e-9
    assert check["max_diff_graded_nDCG"].max() <= 1e-5  # rounding of the grades; no condition overlaps itself
    # the files a BEIR loader reads
    rec = (tmp_path / "REC" / "corpus.jsonl").read_text().splitlines()
    assert len(rec) == int((artifacts.read(cfg, "chunks")["condition"] == "REC").sum())
    assert (tmp_path / "REC" / "qrels" / "test.tsv").read_text().startswith("query-id\tcorpus-id\tscore\n")
