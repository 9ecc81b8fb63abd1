"""The papermill runner on a tiny notebook pair: second run skips, a changed parameter reruns only what reads it,
a failing cell is named, an interrupted stage reruns."""

import json
import shutil

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
