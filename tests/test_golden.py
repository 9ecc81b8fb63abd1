"""The golden demo run: headline numbers pinned in tests/golden/demo.json (changed only in a commit that says why)."""

import json
import math

import pytest

from chunkstudy import config, golden, runner


def test_compare_finds_drift_and_respects_tolerance():
    pinned = {"contrasts": {"C1": {"mean_delta": 0.01, "p": 0.04}}, "queries": 61}
    assert golden.compare(pinned, {"contrasts": {"C1": {"mean_delta": 0.0100000001, "p": 0.04}}, "queries": 61}) == []
    diffs = golden.compare(pinned, {"contrasts": {"C1": {"mean_delta": 0.02, "p": 0.04}}, "queries": 60})
    assert diffs == ["contrasts.C1.mean_delta: pinned 0.01, got 0.02", "queries: pinned 61, got 60"]
    assert golden.compare({"a": 1}, {"b": 1}) == ["a: missing", "b: unexpected"]
    assert golden.compare({"x": math.nan}, {"x": math.nan}) == []


@pytest.mark.slow
def test_demo_run_reproduces_the_pinned_headline(root):
    """Runs ./run_all.sh demo (stages already current are skipped) and compares with the pinned numbers."""
    runner.run(root / "params" / "demo.yaml", root, log=print)
    cfg = config.load(root / "params" / "demo.yaml", root=root)
    assert golden.compare(json.loads(golden.golden_path(root, "demo").read_text()), golden.headline(cfg)) == []


@pytest.mark.slow
@pytest.mark.realdata
def test_qasper_sample_run_reproduces_the_pinned_headline(root, shared_data, tmp_path):
    """The first real result (README 'What the offline stand-ins show on real QASPER'): ./run_all.sh qasper_sample
    (a seeded sample of 150 papers of the mirrored QASPER test split, offline stand-ins), compared with
    tests/golden/qasper_sample.json. It runs in the project's own data/qasper_sample/ so its caches are reused: about
    an hour on 2 CPU cores from nothing (nearly all embedding), minutes when the embedding store is there, seconds
    when every stage is current."""
    params = root / "params" / "qasper_sample.yaml"
    if shared_data != root.parent / "shared" / "data":  # CHUNKSTUDY_SHARED_DATA: the same run, another mirror
        params = tmp_path / "qasper_sample.yaml"
        params.write_text(f"base: {root / 'params' / 'qasper_sample.yaml'}\n"
                          f"corpus: {{name: qasper_sample, mirror: {shared_data / 'qasper'}}}\n")
    runner.run(params, root, log=print)
    cfg = config.load(params, root=root)
    pinned = json.loads(golden.golden_path(root, "qasper_sample").read_text())
    assert golden.compare(pinned, golden.headline(cfg)) == []
