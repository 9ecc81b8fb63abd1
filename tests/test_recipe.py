"""Anthropic's recipe under the study's controls (07's ``recipe``; docs/beyond.md, "Anthropic's recipe"): the ratio
bootstrap draws the study's documents (the same draws as every contrast), resamples the ratio itself (an oracle loop
over the same draws), gives the paired failure delta's p, leaves out a draw whose baseline never fails; the table's
steps, reductions and notes on a hand-made score table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from chunkstudy import config, design, paper, significance
from chunkstudy.stats import recipe

STATS = config.record("stats", {"n_boot": 1000, "min_docs": 3, "recipe_k": 20})
TEST = significance.BootstrapTest.of(STATS)


def _study(seed, n_docs=12, per_doc=3, p_base=0.4, p_step=0.25):
    rng = np.random.default_rng(seed)
    docs = np.repeat([f"d{i:02d}" for i in range(n_docs)], per_doc)
    base = (rng.random(len(docs)) < p_base).astype(float)
    step = (rng.random(len(docs)) < p_step).astype(float)
    return step, base, docs


def test_the_reduction_is_resampled_as_a_ratio_on_the_study_s_draws():
    step, base, docs = _study(1)
    got = recipe.ratio_bootstrap(step, base, docs, TEST)
    assert got.estimate == pytest.approx(1 - step.mean() / base.mean())
    # the oracle: the very document draws of significance.cluster_bootstrap, each replicate's two means recomputed
    labels = np.unique(docs)
    rng = np.random.default_rng(TEST.seed)
    idx = rng.integers(0, len(labels), size=(TEST.n_boot, len(labels)))
    want = []
    for row in idx:
        take = np.concatenate([np.flatnonzero(docs == labels[j]) for j in row])
        want.append(1 - step[take].mean() / base[take].mean() if base[take].sum() > 0 else np.nan)
    np.testing.assert_allclose(got.replicates, want, rtol=1e-12, equal_nan=True)
    defined = np.array(want)[~np.isnan(want)]
    assert (got.ci_low, got.ci_high) == pytest.approx(tuple(np.percentile(defined, [2.5, 97.5])))
    assert got.undefined == int(np.isnan(want).sum())
    # the numerator's replicate means are cluster_bootstrap's own (common random numbers with every contrast)
    boot_step = significance.cluster_bootstrap(step, docs, TEST.n_boot, TEST.seed, alpha=0.05)
    boot_base = significance.cluster_bootstrap(base, docs, TEST.n_boot, TEST.seed, alpha=0.05)
    ok = ~np.isnan(got.replicates)
    np.testing.assert_allclose(got.replicates[ok], 1 - boot_step.replicates[ok] / boot_base.replicates[ok],
                               rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(3, 30))
def test_its_p_is_the_paired_failure_delta_s_bootstrap_p(seed, n_docs):
    """R* <= 0 exactly when the drawn documents fail at least as often under the step: the ratio's two-sided p is
    the study's p of the paired delta step - baseline, whenever every draw has a ratio."""
    step, base, docs = _study(seed, n_docs=n_docs, p_base=0.9)
    got = recipe.ratio_bootstrap(step, base, docs, TEST)
    if got.undefined == 0 and not math.isnan(got.estimate):
        assert got.p == TEST.test(step - base, docs).p
    assert math.isnan(got.ci_low) or got.ci_low <= got.ci_high


def test_a_baseline_that_never_fails_has_no_reduction():
    step, _, docs = _study(2)
    got = recipe.ratio_bootstrap(step, np.zeros_like(step), docs, TEST)
    assert math.isnan(got.estimate) and math.isnan(got.p) and got.undefined == TEST.n_boot
    one = recipe.ratio_bootstrap(np.array([1.0, 0.0]), np.array([1.0, 1.0]), np.array(["d", "d"]), TEST)
    assert one.estimate == 0.5 and math.isnan(one.ci_low) and one.n_clusters == 1


def _scores(rows):
    """recipe_scores rows: (condition, retriever, reranker, recall per query), two queries per document."""
    out = []
    for cond, emb, rr, values in rows:
        for i, v in enumerate(values):
            out.append({"corpus": "c", "embedder": emb, "reranker": rr, "condition": cond, "query_id": f"q{i}",
                        "metric": "recall@20", "value": v, "doc_id": f"d{i // 2}", "qtype": "t"})
    return pd.DataFrame(out)


def test_the_recipe_table_by_hand():
    base = [0, 0, 1, 0.5, 0, 1, 0, 0]  # failures 1, 1, 0, 0.5, 1, 0, 1, 1: mean 0.6875
    best = [1, 1, 1, 1, 0, 1, 1, 1]    # failures: one of 8 -> 0.125; reduction 1 - 0.125 / 0.6875
    rows = [("A0", "strong", "none", base), ("A0", "bm25", "none", base), ("A0", "hybrid-strong", "none", base),
            ("A1", "strong", "none", best), ("A1", "bm25", "none", base), ("A1", "hybrid-strong", "none", best),
            ("A1", "hybrid-strong", "xr", [1] * 8), ("A1", "hybrid-strong", "ar", best),
            ("A1", "weak", "none", [0] * 8)]
    t = recipe.recipe_table(_scores(rows), STATS, "strong", "c")
    assert list(zip(t["step"], t["reranker"])) == [("R0", "none"), ("R1", "none"), ("R2", "none"), ("R3", "none"),
                                                   ("R4", "none"), ("R5", "none"), ("R6", "ar"), ("R6", "xr")]
    t = t.set_index(["step", "reranker"])
    assert t.loc[("R0", "none"), "reduction"] == 0.0 and not t.loc[("R0", "none"), "inference"]
    assert t.loc[("R3", "none"), "failure"] == pytest.approx(0.125)
    assert t.loc[("R3", "none"), "baseline_failure"] == pytest.approx(0.6875)
    assert t.loc[("R3", "none"), "reduction"] == pytest.approx(1 - 0.125 / 0.6875)
    assert t.loc[("R1", "none"), "reduction"] == 0.0 and t.loc[("R6", "xr"), "reduction"] == 1.0
    assert t.loc[("R3", "none"), "anthropic"] == paper.value("study", "anthropic", "contextual_embeddings") == 0.35
    assert t.loc[("R5", "none"), "anthropic"] == 0.49 and math.isnan(t.loc[("R4", "none"), "anthropic"])
    assert t.loc[("R3", "none"), "inference"] and t.loc[("R3", "none"), "n_docs"] == 4
    assert (t["k"] == 20).all() and (t["label"] == "exploratory").all()
    assert t.loc[("R3", "none"), "description"] == next(s.label for s in design.RECIPE if s.name == "R3")


def test_a_step_the_run_lacks_is_said_not_run_and_no_scores_no_table():
    rows = [("A0", "strong", "none", [0, 1, 0, 1]), ("A1", "strong", "none", [1, 1, 0, 1])]
    t = recipe.recipe_table(_scores(rows), STATS, "strong", "c").set_index("step")
    assert "not run: no bm25 x none lists of A0" in t.loc["R1", "note"] and math.isnan(t.loc["R1", "failure"])
    assert "R6" not in t.index  # no reranker in the scores: the reranked step has no cell
    assert "fewer than stats.min_docs" in t.loc["R3", "note"] and not t.loc["R3", "inference"]
    assert recipe.recipe_table(pd.DataFrame(columns=["condition"]), STATS, "strong", "c").empty
