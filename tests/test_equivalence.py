"""TOST from the clustered bootstrap's draws (chunkstudy.stats.equivalence; docs/beyond.md, "Equivalence"): a hand
example, statsmodels' ttost_paired on unclustered data as the oracle, and the verdict's properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy.stats import equivalence as eq
from chunkstudy.significance import cluster_bootstrap

ALPHA = 0.05


def test_hand_example():
    """21 replicates -0.10, -0.09, ..., 0.10. The 5th/95th percentiles (numpy's linear rule: positions 0.05 x 20 = 1
    and 19) are -0.09 and 0.09, so the 90% CI is [-0.09, 0.09]."""
    r = np.arange(-10, 11) / 100
    t = eq.tost(r, 0.12, alpha=ALPHA)
    assert (t.ci_low, t.ci_high) == pytest.approx((-0.09, 0.09))
    assert t.p_lower == t.p_upper == pytest.approx(1 / 22)  # no replicate at or beyond ±0.12: (1 + 0) / (1 + 21)
    assert t.p_tost == pytest.approx(1 / 22) and t.verdict == eq.EQUIVALENT and t.n_boot == 21
    # the Monte Carlo margin: the CI lies inside ±0.095 though one replicate lies beyond each bound, p = 2/22 > α
    t = eq.tost(r, 0.095, alpha=ALPHA)
    assert t.verdict == eq.EQUIVALENT and t.p_tost == pytest.approx(2 / 22)
    # the CI straddles ±0.05: 6 replicates at or below -0.05, p_lower = 7/22
    t = eq.tost(r, 0.05, alpha=ALPHA)
    assert t.verdict == eq.INCONCLUSIVE and t.p_lower == pytest.approx(7 / 22)
    # shifted by 0.2 the CI is [0.11, 0.29]: wholly above +0.1, not equivalent; p_upper = (1 + 21)/22 = 1
    t = eq.tost(r + 0.2, 0.1, alpha=ALPHA)
    assert (t.ci_low, t.ci_high) == pytest.approx((0.11, 0.29))
    assert t.verdict == eq.NOT_EQUIVALENT and t.p_upper == pytest.approx(1.0) and t.p_lower == pytest.approx(1 / 22)
    # ... and a CI touching the bound from outside still counts as outside (ci_low >= +sesoi)
    assert eq.verdict(0.11, 0.29, 0.11) == eq.NOT_EQUIVALENT
    assert eq.verdict(0.109, 0.29, 0.11) == eq.INCONCLUSIVE


def _paired(mean: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.8, n)
    return base + rng.normal(mean, 0.1, n), base


@pytest.mark.parametrize("mean, sesoi", [(0.0, 0.012), (0.004, 0.01), (-0.006, 0.01), (0.01, 0.02),
                                         (0.003, 0.008)])
def test_bootstrap_tost_agrees_with_statsmodels_ttost_paired_on_unclustered_data(mean, sesoi):
    """One document per query, 400 queries: the clustered bootstrap is the ordinary paired bootstrap, whose one-sided
    p-values approach the paired t test's (the bootstrap's spread is the sample's with ddof 0; B = 20,000 puts the
    Monte Carlo SE of a p below 0.0036). Tolerance 0.02 on each p, and 6% of the standard error on the CI (the 5th percentile of 20,000 draws has a Monte
    Carlo SE of about 1.5% of it; the sample's skewness moves a percentile interval a little more)."""
    from scipy import stats as sps
    from statsmodels.stats.weightstats import ttost_paired

    x1, x2 = _paired(mean, 400, seed=int(1000 * (mean + 1) + 100 * sesoi))
    d = x1 - x2
    b = cluster_bootstrap(d, [f"doc{i:04d}" for i in range(len(d))], 20_000, seed=7, alpha=ALPHA)
    t = eq.tost(b.replicates, sesoi, alpha=ALPHA)
    p, (_, p_low, _), (_, p_upp, _) = ttost_paired(x1, x2, -sesoi, sesoi)
    assert 0.02 < p < 0.98  # the scenarios are chosen where the p-values say something
    assert t.p_lower == pytest.approx(p_low, abs=0.02)
    assert t.p_upper == pytest.approx(p_upp, abs=0.02)
    assert t.p_tost == pytest.approx(p, abs=0.02)
    se = d.std(ddof=1) / np.sqrt(len(d))
    half = sps.t.ppf(1 - ALPHA, len(d) - 1) * se
    assert t.ci_low == pytest.approx(d.mean() - half, abs=0.06 * se)
    assert t.ci_high == pytest.approx(d.mean() + half, abs=0.06 * se)


@pytest.mark.parametrize("mean, sesoi, want", [(0.0, 0.05, eq.EQUIVALENT), (0.1, 0.05, eq.NOT_EQUIVALENT),
                                               (-0.1, 0.05, eq.NOT_EQUIVALENT), (0.05, 0.05, eq.INCONCLUSIVE)])
def test_clear_cases_get_the_verdict_statsmodels_implies(mean, sesoi, want):
    """Equivalent where ttost_paired rejects non-equivalence (p < α); not equivalent where the t test of H0:
    δ ≤ +sesoi (or δ ≥ −sesoi) rejects at α — statsmodels' one-sided p of the *other* direction near 1; else
    inconclusive."""
    from statsmodels.stats.weightstats import ttost_paired

    x1, x2 = _paired(mean, 400, seed=11)
    d = x1 - x2
    t = eq.tost(cluster_bootstrap(d, np.arange(len(d)), 5_000, seed=3, alpha=ALPHA).replicates, sesoi, alpha=ALPHA)
    p, (_, p_low, _), (_, p_upp, _) = ttost_paired(x1, x2, -sesoi, sesoi)
    implied = (eq.EQUIVALENT if p < ALPHA else eq.NOT_EQUIVALENT if min(1 - p_low, 1 - p_upp) < ALPHA
               else eq.INCONCLUSIVE)
    assert implied == want and t.verdict == want


replicate_sets = st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=1, max_size=300).map(np.array)


@given(replicate_sets, st.floats(1e-4, 0.6), st.sampled_from([0.01, 0.05, 0.1, 0.25]))
def test_the_verdict_reads_the_one_interval(r, sesoi, alpha):
    t = eq.tost(r, sesoi, alpha=alpha)
    lo, hi = np.percentile(r, [100 * alpha, 100 * (1 - alpha)])
    assert (t.ci_low, t.ci_high) == (float(lo), float(hi))
    if -sesoi < lo and hi < sesoi:
        assert t.verdict == eq.EQUIVALENT
    elif lo >= sesoi or hi <= -sesoi:
        assert t.verdict == eq.NOT_EQUIVALENT
    else:
        assert t.verdict == eq.INCONCLUSIVE
    if t.p_tost <= alpha:  # both one-sided tests reject: then the interval lies inside the bounds
        assert t.verdict == eq.EQUIVALENT
    assert 0 < t.p_lower <= 1 and 0 < t.p_upper <= 1 and t.p_tost == max(t.p_lower, t.p_upper)


@given(replicate_sets, st.floats(1e-3, 0.6))
def test_mirroring_the_replicates_swaps_the_one_sided_tests_and_keeps_the_verdict(r, sesoi):
    a, b = eq.tost(r, sesoi, alpha=ALPHA), eq.tost(-r, sesoi, alpha=ALPHA)
    assert (a.p_lower, a.p_upper) == (b.p_upper, b.p_lower)
    assert a.verdict == b.verdict


def test_equivalent_and_significantly_different_can_both_hold():
    """A mean delta of 0.01 cov-nDCG with a small spread over 400 documents: the two-sided test rejects δ = 0, and the
    90% CI lies inside ±0.03: a real difference too small to matter."""
    rng = np.random.default_rng(5)
    d = rng.normal(0.01, 0.02, 400)
    b = cluster_bootstrap(d, np.arange(400), 5_000, seed=1, alpha=ALPHA)
    t = eq.tost(b.replicates, 0.03, alpha=ALPHA)
    assert b.p < ALPHA and b.ci_low > 0
    assert t.verdict == eq.EQUIVALENT and t.p_tost < ALPHA
    assert eq.reading(t.verdict, different=True).startswith("a difference smaller than the smallest effect")
    assert eq.reading(eq.INCONCLUSIVE, different=False).endswith("the data cannot tell")


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="sesoi must be a positive"):
        eq.tost(np.zeros(5), 0.0, alpha=ALPHA)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 0.5\)"):
        eq.tost(np.zeros(5), 0.1, alpha=0.5)
    with pytest.raises(ValueError, match="NaN"):
        eq.tost(np.array([0.0, np.nan]), 0.1, alpha=ALPHA)
    with pytest.raises(ValueError, match="no replicates"):
        eq.tost(np.array([]), 0.1, alpha=ALPHA)
    with pytest.raises(ValueError, match="unknown verdict"):
        eq.reading("maybe", different=False)


def test_the_tost_verdict_fills_its_columns_per_contrast_and_none_without_inference():
    from types import SimpleNamespace as NS

    rng = np.random.default_rng(3)
    inside = rng.normal(0.0, 0.002, 2000)
    far = rng.normal(0.1, 0.002, 2000)
    family = [NS(replicates=inside, inference=True), NS(replicates=far, inference=True),
              NS(replicates=inside, inference=False), NS(replicates=np.empty(0), inference=True)]
    rows = eq.TostVerdict(0.02).decide(NS(alpha=0.05), family)
    assert [tuple(r) for r in rows] == [eq.TOST_COLUMNS] * 4
    assert [r["equivalence"] for r in rows] == ["equivalent", "not equivalent", "", ""]
    e = eq.tost(inside, 0.02, alpha=0.05)
    assert (rows[0]["tost_ci_low"], rows[0]["tost_ci_high"], rows[0]["p_tost"]) == (e.ci_low, e.ci_high, e.p_tost)
    assert np.isnan(rows[2]["p_tost"]) and rows[2]["sesoi"] == 0.02
    with pytest.raises(ValueError, match="sesoi"):
        eq.TostVerdict(0.0)
