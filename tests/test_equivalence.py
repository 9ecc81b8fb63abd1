"""TOST from the clustered bootstrap's draws (chunkstudy.stats.equivalence; docs/beyond.md, "Equivalence"): a hand
example, statsmodels' ttost_paired on unclustered data as the oracle, Holm within a family (statsmodels'
multipletests as the oracle) and the family-wise rate of false verdicts at the bound by simulation, and the
verdict's properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy.stats import equivalence as eq
from chunkstudy.stats.verdict.tost import TostVerdict
from chunkstudy.significance import cluster_bootstrap

ALPHA = 0.05


def test_hand_example():
    """99 replicates -0.49, -0.48, ..., 0.49. The 5th/95th percentiles (numpy's linear rule: positions 0.05 x 98 = 4.9
    and 93.1) are -0.441 and 0.441, so the 90% CI is [-0.441, 0.441]; the verdict reads the p-values."""
    r = np.arange(-49, 50) / 100
    t = eq.tost(r, 0.5, alpha=ALPHA)
    assert (t.ci_low, t.ci_high) == pytest.approx((-0.441, 0.441))
    assert t.p_lower == t.p_upper == pytest.approx(1 / 100)  # no replicate at or beyond ±0.5: (1 + 0) / (1 + 99)
    assert t.p_tost == pytest.approx(1 / 100) and t.verdict == eq.EQUIVALENT and t.n_boot == 99
    assert t.p_met == 1.0  # every replicate inside ±0.5: no sign of an effect beyond it
    # the Monte Carlo margin: the 90% CI lies inside ±0.445, but 5 replicates lie at or beyond each bound, so
    # p_tost = (1 + 5)/100 = 0.06 > alpha: not shown equivalent (the verdict follows the p, not the interval)
    t = eq.tost(r, 0.445, alpha=ALPHA)
    assert -0.445 < t.ci_low and t.ci_high < 0.445
    assert t.p_tost == pytest.approx(6 / 100) and t.verdict == eq.INCONCLUSIVE
    # shifted by 0.6 every replicate exceeds +0.055: p_met = 2 (1 + 0)/100 = 0.02 < alpha, not equivalent
    t = eq.tost(r + 0.6, 0.055, alpha=ALPHA)
    assert t.p_met == pytest.approx(2 / 100) and t.p_upper == pytest.approx(1.0) and t.p_lower == pytest.approx(0.01)
    assert t.verdict == eq.NOT_EQUIVALENT
    # shifted by 0.5 the 90% CI [0.059, 0.941] lies beyond +0.055 (the one-sided rule of before called that "not
    # equivalent"), but 5 replicates (0.01 ... 0.05) do not: p_met = 2 (1 + 5)/100 = 0.12, the 95% CI reaches 0.0345
    t = eq.tost(r + 0.5, 0.055, alpha=ALPHA)
    assert t.ci_low == pytest.approx(0.059) and t.p_met == pytest.approx(0.12) and t.verdict == eq.INCONCLUSIVE
    assert eq.verdict_of(0.049, 1.0, ALPHA) == eq.EQUIVALENT and eq.verdict_of(0.05, 1.0, ALPHA) == eq.INCONCLUSIVE
    assert eq.verdict_of(1.0, 0.01, ALPHA) == eq.NOT_EQUIVALENT and eq.verdict_of(np.nan, np.nan, ALPHA) == \
        eq.INCONCLUSIVE


def test_holm_holds_the_family_where_each_contrast_alone_would_be_called_equivalent():
    """Four contrasts of 199 replicates, 3, 5, 7 and 8 of them at +sesoi and none at −sesoi: alone each is
    equivalent (p_tost = 0.02, 0.03, 0.04, 0.045 < 0.05); as a family Holm's smallest adjusted p is 4 x 0.02 = 0.08,
    so none is (the step-down stops at the first). The family's columns are statsmodels' Holm of the raw p-values."""
    from types import SimpleNamespace as NS

    from statsmodels.stats.multitest import multipletests

    from chunkstudy.significance import BootstrapTest

    sesoi = 0.02
    family = [NS(replicates=np.r_[np.zeros(199 - k), np.full(k, sesoi)], inference=True) for k in (3, 5, 7, 8)]
    alone = [eq.tost(f.replicates, sesoi, alpha=ALPHA) for f in family]
    assert [a.verdict for a in alone] == [eq.EQUIVALENT] * 4
    assert [a.p_tost for a in alone] == pytest.approx([0.02, 0.03, 0.04, 0.045])
    rows = TostVerdict(sesoi).decide(BootstrapTest(199, 1, ALPHA, 2), family)
    assert [r["equivalence"] for r in rows] == [eq.INCONCLUSIVE] * 4
    want = multipletests([a.p_tost for a in alone], method="holm")[1]
    assert [r["p_tost_holm"] for r in rows] == pytest.approx(list(want))
    assert [r["p_tost"] for r in rows] == [a.p_tost for a in alone]
    # two of them alone: Holm 2 x 0.02 = 0.04 and max(0.04, 0.03) = 0.04, both equivalent
    two = TostVerdict(sesoi).decide(BootstrapTest(199, 1, ALPHA, 2), family[:2])
    assert [r["equivalence"] for r in two] == [eq.EQUIVALENT] * 2
    assert [r["p_tost_holm"] for r in two] == pytest.approx([0.04, 0.04])


def test_the_family_wise_rate_of_false_verdicts_at_the_bound_is_held_at_alpha():
    """Six independent contrasts, each at the bound (|δ| = sesoi, so both "equivalent" and "not equivalent" are
    false), 40 documents of 2 queries, 1,000 resamples, 200 simulated studies: without the adjustment at least one
    contrast is called equivalent in about 1 − (1 − α)^6 = 26% of studies; Holm within the family brings it to α
    (within 2 Monte Carlo SEs: 1.5 points here). bench/bench_tost_family.py prints the rates with more studies."""
    from chunkstudy.significance import BootstrapTest
    from chunkstudy.stats import simulate

    rates = simulate.tost_family_rates(BootstrapTest(1000, 7, ALPHA, 2), 0.02, 6, n_docs=40, queries_per_doc=2,
                                       n_sims=200, seed=43)
    assert rates["raw_equivalent"] > 3 * ALPHA  # the per-contrast rule: the family's error is not held
    assert rates["holm_equivalent"] <= ALPHA + 2 * rates["mc_se"]
    assert rates["holm_not_equivalent"] <= ALPHA + 2 * rates["mc_se"]


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
def test_the_verdict_reads_the_p_values_and_implies_its_interval(r, sesoi, alpha):
    from chunkstudy.significance import bootstrap_p

    t = eq.tost(r, sesoi, alpha=alpha)
    lo, hi = np.percentile(r, [100 * alpha, 100 * (1 - alpha)])
    assert (t.ci_low, t.ci_high) == (float(lo), float(hi))
    assert t.verdict == eq.verdict_of(t.p_tost, t.p_met, alpha)
    if t.p_tost < alpha:  # both one-sided tests reject: the (1 - 2 alpha) interval lies inside the bounds
        assert -sesoi < lo and hi < sesoi
    if t.p_met < alpha:  # the minimum-effect test rejects: the (1 - alpha) interval lies beyond one bound
        lo95, hi95 = np.percentile(r, [50 * alpha, 100 - 50 * alpha])
        assert lo95 > sesoi or hi95 < -sesoi
    assert not (t.p_tost < alpha and t.p_met < alpha)  # never both
    assert 0 < t.p_lower <= 1 and 0 < t.p_upper <= 1 and t.p_tost == max(t.p_lower, t.p_upper)
    assert 0 < t.p_met <= 1
    # with the bound at 0 the minimum-effect test is the study's two-sided test of δ = 0
    if not ((r != 0) & (np.abs(r) <= 1e-300)).any():
        assert eq.tost(r, 1e-300, alpha=alpha).p_met == pytest.approx(bootstrap_p(r))


@given(replicate_sets, st.floats(1e-3, 0.6))
def test_mirroring_the_replicates_swaps_the_one_sided_tests_and_keeps_the_verdict(r, sesoi):
    a, b = eq.tost(r, sesoi, alpha=ALPHA), eq.tost(-r, sesoi, alpha=ALPHA)
    assert (a.p_lower, a.p_upper) == (b.p_upper, b.p_lower)
    assert a.p_met == b.p_met and a.verdict == b.verdict


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

    from chunkstudy.significance import BootstrapTest

    rng = np.random.default_rng(3)
    inside = rng.normal(0.0, 0.002, 2000)
    far = rng.normal(0.1, 0.002, 2000)
    family = [NS(replicates=inside, inference=True), NS(replicates=far, inference=True),
              NS(replicates=inside, inference=False), NS(replicates=np.empty(0), inference=True)]
    test = BootstrapTest(2000, 1, 0.05, 2)
    rows = TostVerdict(0.02).decide(test, family)
    assert [tuple(r) for r in rows] == [eq.TOST_COLUMNS] * 4
    assert [r["equivalence"] for r in rows] == ["equivalent", "not equivalent", "", ""]
    e = eq.tost(inside, 0.02, alpha=0.05)
    assert (rows[0]["tost_ci_low"], rows[0]["tost_ci_high"], rows[0]["p_tost"]) == (e.ci_low, e.ci_high, e.p_tost)
    # the untested two count in the family (ranked last): 4 x the smallest p
    assert rows[0]["p_tost_holm"] == pytest.approx(min(1.0, 4 * e.p_tost))
    assert np.isnan(rows[2]["p_tost"]) and np.isnan(rows[2]["p_tost_holm"]) and rows[2]["sesoi"] == 0.02
    blank = TostVerdict(None).decide(test, family)  # no bound declared for this family's metric
    assert [r["equivalence"] for r in blank] == [""] * 4 and all(np.isnan(r["sesoi"]) for r in blank)
    with pytest.raises(ValueError, match="sesoi"):
        TostVerdict(0.0)
