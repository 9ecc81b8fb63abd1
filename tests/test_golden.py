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
@pytest.mark.parametrize("corpus", ["qasper_sample", "qasper_local"])
def test_qasper_run_reproduces_the_pinned_headline(corpus, root, shared_data, tmp_path):
    """The real results of docs/results.md, offline stand-ins on the mirrored
    QASPER test split, compared with tests/golden/<corpus>.json:

    * ``qasper_sample``: a seeded sample of 150 of the 416 papers, the quick check (``-k qasper_sample``); about half
      an hour on 2 CPU cores from nothing (nearly all embedding);
    * ``qasper_local``: the whole split, 416 papers (``-k qasper_local``); about two hours on 2 CPU cores from nothing.

    Each runs in the project's own data/<corpus>/, so its caches are reused: minutes when the embedding store is
    there, seconds when every stage is current."""
    params = root / "params" / f"{corpus}.yaml"
    if shared_data != root.parent / "shared" / "data":  # CHUNKSTUDY_SHARED_DATA: the same run, another mirror
        params = tmp_path / f"{corpus}.yaml"
        params.write_text(f"base: {root / 'params' / f'{corpus}.yaml'}\n"
                          f"corpus: {{name: {corpus}, mirror: {shared_data / 'qasper'}}}\n")
    runner.run(params, root, log=print)
    cfg = config.load(params, root=root)
    pinned = json.loads(golden.golden_path(root, corpus).read_text())
    assert golden.compare(pinned, golden.headline(cfg)) == []


def test_optional_sections_are_compared_only_where_the_golden_pins_them():
    old = {"queries": 61}
    new = {"queries": 61, "cost": {"A0 / strong": {"tokens_read": 10.0}}, "tost": {"C1": {"equivalence": "x"}}}
    assert golden.compare(old, new) == []  # a golden pinned before these sections existed
    assert golden.compare(new, new) == []
    drift = {**new, "cost": {"A0 / strong": {"tokens_read": 11.0}}}
    assert golden.compare(new, drift) == ["cost.A0 / strong.tokens_read: pinned 10.0, got 11.0"]
    assert golden.compare(new, old) == ["cost: missing", "tost: missing"]  # pinned, then gone: a failure
    assert golden.compare({"a": 1}, {"a": 1, "b": 2}) == ["b: unexpected"]  # other sections stay strict
