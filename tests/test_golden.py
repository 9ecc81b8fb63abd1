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
