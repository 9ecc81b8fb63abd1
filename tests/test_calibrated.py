"""The calibrated test of a contrast (chunkstudy.stats.calibrated) against oracles: the wild cluster bootstrap-t
against ``wildboottest`` (the WCR11 bootstrap of an intercept-only OLS with errors clustered by document), CR2 and
its Bell–McCaffrey degrees of freedom against a hand-worked example, the general matrix formulas and the classical
t test on cluster means."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps

from chunkstudy.stats import calibrated as cal


def _design(g: int, seed: int, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Zero-inflated, skewed deltas (as a real contrast's) over ``g`` documents of 1-5 queries each."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, g)
    docs = np.repeat([f"doc{i:02d}" for i in range(g)], sizes)
    deltas = rng.choice([0.0, 0.0, 0.0, 0.1, -0.05, 0.3, -0.2], size=docs.size) + shift
    return deltas, docs


def _wildboottest(deltas: np.ndarray, docs: np.ndarray, n_boot: int, beta0: float, v: np.ndarray | None = None):
    """wildboottest's WCR11 of the intercept of ``deltas − beta0`` (it tests β = 0 only, so the null β = β0 is the
    null β = 0 of the shifted data): rademacher weights enumerated when 2^G < B, or the weights ``v`` given."""
    wb_mod = pytest.importorskip("wildboottest.wildboottest")
    _, codes = np.unique(docs, return_inverse=True)
    wb = wb_mod.WildboottestCL(X=np.ones((deltas.size, 1)), Y=deltas - beta0, cluster=codes, R=np.array([1.0]),
                               B=n_boot, seed=1, parallel=False)
    wb.get_scores(bootstrap_type="11", impose_null=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if v is None:
            wb.get_weights(weights_type="rademacher")
        else:
            wb.v, wb.B = v.T.copy(), v.shape[0]
        wb.get_numer()
        wb.get_denom()
    wb.get_tboot()
    wb.get_vcov()
    wb.get_tstat()
    wb.get_pvalue(pval_type="two-tailed")
    return wb


@pytest.mark.parametrize("g, seed, shift, beta0", [(5, 1, 0.02, 0.0), (8, 2, -0.03, 0.0), (11, 3, 0.0, 0.05),
                                                   (9, 4, 0.1, -0.04)])
def test_wild_bootstrap_matches_wildboottest_under_full_enumeration(g, seed, shift, beta0):
    """Every weight vector enumerated (2^G < B): the observed t, the whole distribution of t* and the p-value are
    wildboottest's. Its p counts |t*| > |t| strictly; ours counts |t*| ≥ |t| (the replicate v = 1 is the observed
    sample itself, and v = −1 its mirror), so ours is its p plus the ties, which we count from its own t*."""
    deltas, docs = _design(g, seed, shift)
    n_boot = 2 ** g + 1
    wb = _wildboottest(deltas, docs, n_boot, beta0)
    ours = cal.WildT.of(cal.Clusters.of(deltas, docs), n_boot, seed=0, kind="rademacher")
    assert ours.enumerated and ours.n_boot == 2 ** g
    t_theirs = float(np.ravel(wb.t_stat)[0])
    assert ours.t(beta0) == pytest.approx(t_theirs, rel=1e-12)
    np.testing.assert_allclose(np.sort(ours.t_star(beta0)), np.sort(np.ravel(wb.t_boot)), rtol=1e-10, atol=1e-12)
    t_boot = np.ravel(wb.t_boot)
    ties = np.isclose(np.abs(t_boot), abs(t_theirs), rtol=1e-9)
    assert ties.sum() >= 2  # the observed sample and its mirror
    assert ours.p(beta0) == pytest.approx(np.mean((np.abs(t_boot) > abs(t_theirs)) | ties), abs=1e-15)
    assert float(wb.pvalue) <= ours.p(beta0) <= float(wb.pvalue) + ties.mean() + 1e-15


def test_wild_bootstrap_matches_wildboottest_on_drawn_webb_weights():
    """Webb's six-point weights, drawn (6^G > B): given the same weight matrix, wildboottest's t* are ours, one
    for one, at β0 = 0 and at a shifted β0."""
    deltas, docs = _design(7, 5, 0.04)
    c = cal.Clusters.of(deltas, docs)
    v, enumerated = cal.weights(c.g, 999, seed=11, kind="webb")
    assert not enumerated and set(np.unique(np.abs(v)).round(6)) == set(np.abs(cal.WEBB_POINTS).round(6))
    ours = cal.WildT.of(c, 999, seed=11, kind="webb")
    for beta0 in (0.0, 0.03):
        wb = _wildboottest(deltas, docs, 999, beta0, v=v)
        np.testing.assert_allclose(ours.t_star(beta0), np.ravel(wb.t_boot), rtol=1e-10, atol=1e-12)


def test_cr2_and_bell_mccaffrey_df_on_a_worked_example():
    """Three documents of 1, 2 and 3 queries, deltas [1], [2, 4], [0, 1, 2]: N = 6, δ̄ = 5/3, residual sums
    −2/3, 8/3, −2, leverages 1/6, 1/3, 1/2, so V₂ = ((4/9)/(5/6) + (64/9)/(2/3) + 4/(1/2)) / 36 = 19.2/36 = 8/15;
    Σλ = 1/N = 1/6 and Σλ² = 1/60 (worked term by term in the module's formula), so ν = (1/36)/(1/60) = 5/3."""
    c = cal.Clusters.of([1.0, 2.0, 4.0, 0.0, 1.0, 2.0], ["a", "b", "b", "c", "c", "c"])
    t = cal.cr2(c)
    assert c.estimate == pytest.approx(5 / 3)
    assert t.se ** 2 == pytest.approx(8 / 15, rel=1e-12)
    assert t.df == pytest.approx(5 / 3, rel=1e-12)
    assert t.p() == pytest.approx(2 * sps.t.sf((5 / 3) / math.sqrt(8 / 15), 5 / 3), rel=1e-12)


def _cr2_by_matrices(deltas: np.ndarray, docs: np.ndarray) -> tuple[float, float]:
    """CR2 variance and Bell–McCaffrey df of the intercept from the general formulas (Imbens & Kolesár 2016):
    ``A_g = (I − H_gg)^{-1/2}`` by eigendecomposition, ``V = Σ (X_gᵀ A_g e_g)² / (XᵀX)²``, and the df from the
    eigenvalues of ``Gᵀ G`` with ``G[:, g] = M Eᵍ A_g X_g (XᵀX)⁻¹`` (the residual maker M, Eᵍ the rows of g)."""
    n = deltas.size
    x = np.ones((n, 1))
    hat = x @ x.T / n
    resid = deltas - deltas.mean()
    maker = np.eye(n) - hat
    meat, cols = 0.0, []
    for d in np.unique(docs):
        rows = docs == d
        vals, vecs = np.linalg.eigh(np.eye(rows.sum()) - hat[np.ix_(rows, rows)])
        a_g = vecs @ np.diag(vals ** -0.5) @ vecs.T
        meat += float((x[rows].T @ a_g @ resid[rows])[0]) ** 2
        col = np.zeros(n)
        col[rows] = (a_g @ x[rows]).ravel() / n
        cols.append(maker @ col)
    lam = np.linalg.eigvalsh(np.column_stack(cols).T @ np.column_stack(cols))
    return meat / n ** 2, lam.sum() ** 2 / (lam ** 2).sum()


@pytest.mark.parametrize("g, seed", [(3, 1), (6, 2), (15, 3)])
def test_cr2_closed_form_equals_the_general_matrix_formulas(g, seed):
    deltas, docs = _design(g, seed, 0.01)
    var, df = _cr2_by_matrices(deltas, docs)
    t = cal.cr2(cal.Clusters.of(deltas, docs))
    assert t.se ** 2 == pytest.approx(var, rel=1e-10)
    assert t.df == pytest.approx(df, rel=1e-10)


def test_cr2_with_equal_cluster_sizes_is_the_t_test_on_cluster_means():
    """Equal sizes: V₂ = G/(G−1)·V₀, ν = G − 1, and the CR2 t test is scipy's one-sample t test of the documents'
    means (CR1 with G − 1 df is the same test there)."""
    rng = np.random.default_rng(7)
    g, k = 9, 4
    docs = np.repeat(np.arange(g), k)
    deltas = rng.gamma(0.7, 0.1, g * k) - 0.05
    c = cal.Clusters.of(deltas, docs)
    t2, t1 = cal.cr2(c), cal.cr1(c)
    v0 = float(np.sum(c.residual_sums() ** 2)) / c.n ** 2
    assert t2.se ** 2 == pytest.approx(g / (g - 1) * v0, rel=1e-12)
    assert t2.df == pytest.approx(g - 1, rel=1e-12)
    oracle = sps.ttest_1samp(deltas.reshape(g, k).mean(axis=1), 0.0)
    assert t2.t() == pytest.approx(oracle.statistic, rel=1e-10)
    assert t2.p() == pytest.approx(oracle.pvalue, rel=1e-10)
    assert t1.p() == pytest.approx(oracle.pvalue, rel=1e-10)


def test_wild_ci_is_the_inversion_of_its_test():
    """At each end of the interval the p-value steps across alpha: just inside p ≥ alpha, just outside p < alpha;
    and the interval holds the estimate."""
    deltas, docs = _design(30, 8, 0.03)
    w = cal.WildT.of(cal.Clusters.of(deltas, docs), 1999, seed=3)
    lo, hi = w.ci(0.05)
    eps = 1e-9 * (hi - lo)
    assert lo < w.clusters.estimate < hi
    assert w.p(lo + eps) >= 0.05 > w.p(lo - eps)
    assert w.p(hi - eps) >= 0.05 > w.p(hi + eps)


def test_one_sided_p_values_sum_to_one_plus_the_ties_and_halve_the_two_sided():
    deltas, docs = _design(10, 9, 0.05)
    w = cal.WildT.of(cal.Clusters.of(deltas, docs), 9999, seed=1, kind="rademacher")
    assert w.enumerated
    for beta0 in (-0.02, 0.0, 0.04):
        ts, t = w.t_star(beta0), w.t(beta0)
        ties = np.isclose(ts, t, rtol=1e-9).mean()
        assert w.p_greater(beta0) + w.p_less(beta0) == pytest.approx(1 + ties, abs=1e-12)
    # with enumerated Rademacher weights t* is symmetric about 0: the two-sided p is twice the smaller one-sided
    assert w.p(0.0) == pytest.approx(min(1.0, 2 * min(w.p_greater(0.0), w.p_less(0.0))), abs=1e-12)


def test_identical_conditions_give_p_one_and_a_point_interval():
    docs = np.repeat(["a", "b", "c", "d"], 3)
    w = cal.WildT.of(cal.Clusters.of(np.zeros(12), docs), 999, seed=1)
    assert w.p(0.0) == 1.0
    assert w.ci(0.05) == (0.0, 0.0)
    assert cal.cr2(cal.Clusters.of(np.zeros(12), docs)).p() == 1.0


def test_webb_weights_below_a_dozen_documents_let_five_documents_reject():
    """With Rademacher weights five documents have 32 sign vectors, and the observed sample and its mirror always
    reach |t|: p ≥ 2/32 > 0.05 whatever the data. Webb's 6^5 = 7,776 vectors can reject a clear effect."""
    docs = np.repeat(list("abcde"), 3)
    deltas = np.array([0.30, 0.31, 0.29, 0.20, 0.22, 0.21, 0.40, 0.41, 0.39, 0.25, 0.24, 0.26, 0.33, 0.35, 0.34])
    c = cal.Clusters.of(deltas, docs)
    assert cal.default_weights(5) == "webb"
    assert cal.WildT.of(c, 9999, seed=1, kind="rademacher").p() == pytest.approx(2 / 32)
    webb = cal.WildT.of(c, 9999, seed=1)
    assert webb.enumerated and webb.n_boot == 6 ** 5
    assert webb.p() < 0.05


def test_weights_are_seeded_and_refuse_an_unknown_kind():
    a, _ = cal.weights(20, 50, seed=4, kind="rademacher")
    b, _ = cal.weights(20, 50, seed=4, kind="rademacher")
    assert np.array_equal(a, b) and set(np.unique(a)) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="unknown kind 'mammen'; known"):
        cal.weights(5, 10, seed=1, kind="mammen")


def test_deltas_with_no_spread_still_count_the_sample_itself_at_a_shifted_null():
    """Three documents whose deltas are all 0: at β0 = ±0.02 the observed t is infinite, and so is the replicate
    v = 1 (and every constant weight vector); they count as reaching it, so the one-sided p is the share of constant
    positive (negative) vectors, never 0."""
    c = cal.Clusters.of(np.zeros(9), np.repeat(["a", "b", "c"], 3))
    w = cal.WildT.of(c, 999, seed=1)
    assert w.enumerated and w.kind == "webb" and w.n_boot == 216
    assert w.t(-0.02) == np.inf and w.p_greater(-0.02) == pytest.approx(3 / 216)
    assert w.t(0.02) == -np.inf and w.p_less(0.02) == pytest.approx(3 / 216)
    assert w.p(0.02) == pytest.approx(6 / 216)
