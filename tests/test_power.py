"""Power analysis (07; issue 18 §2): the simulation against a literal nested bootstrap built from stats'
own functions, against the analytic design-effect approximation on synthetic data, the dz shift, the joint
(Holm-family) resampling, the inner-count sampler's distribution, and the tables 07/08 build.
"""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy import config, design, paper, stats
from chunkstudy.significance import BootstrapTest
from chunkstudy.stats import power

STATS = {k: v.default for k, v in config.SCHEMA["stats"].items()}
PRIMARY = design.PrimaryCell("cov-nDCG@10", "strong", "none")  # the primary cell of the simulated runs


def synthetic_population(n_docs: int, m: int, icc: float, seed: int, k: int = 4) -> tuple[np.ndarray, ...]:
    """Per-query deltas δ = u_d + e (sd 1, ICC ``icc``) for ``k`` contrasts over ``n_docs`` documents of ``m``
    queries, as per-query arrays and per-document (sums, counts) of shape (G, k)."""
    rng = np.random.default_rng(seed)
    docs = np.repeat(np.arange(n_docs), m)
    deltas = (rng.normal(0, math.sqrt(icc), (n_docs, k))[docs]
              + rng.normal(0, math.sqrt(1 - icc), (docs.size, k)))
    sums = np.stack([np.bincount(docs, weights=deltas[:, j]) for j in range(k)], axis=1)
    counts = np.full((n_docs, k), float(m))
    return deltas, docs, sums, counts


def literal_power(deltas, docs, shifts, n, *, n_sims, test):
    """What the module docstring describes, written out with the study's test object: per study draw n documents
    with replacement (each draw a new cluster), run the test's document-clustered bootstrap per contrast
    (BootstrapTest.resample), Holm over the family and the test's rejection rule, and count rejections with the
    target's sign."""
    rng = np.random.default_rng(test.seed)
    g = docs.max() + 1
    by_doc = [np.flatnonzero(docs == d) for d in range(g)]
    shifted = deltas + shifts[None, :]
    signs = np.sign(shifted.mean(axis=0))
    hits = np.zeros(deltas.shape[1])
    for s in range(n_sims):
        draw = rng.integers(0, g, n)
        rows = np.concatenate([by_doc[d] for d in draw])
        clusters = np.repeat(np.arange(n), [by_doc[d].size for d in draw])
        study = BootstrapTest(test.n_boot, test.seed + 1 + s, test.alpha, test.min_docs)
        boots = [study.resample(shifted[rows, j], clusters) for j in range(deltas.shape[1])]
        reject = study.reject(study.adjust([b.p for b in boots]))
        hits += reject & (np.sign([b.estimate for b in boots]) == signs)
    return hits / n_sims


# ------------------------------------------------------------------------------------------------ the oracle

@pytest.mark.parametrize("n", [6, 60])  # 6: inner counts from slot indices; 60 > 4·G: from the multinomial
def test_simulation_matches_the_literal_nested_bootstrap(n):
    """Demo-like population (10 documents × 6 queries, ICC 0.2): the vectorised simulation and a literal loop over
    stats.cluster_bootstrap + stats.holm estimate the same power within Monte Carlo error (independent draws:
    the SE of the difference is sqrt(2)·SE; 3.5 SE allowed)."""
    deltas, docs, sums, counts = synthetic_population(10, 6, 0.2, seed=11)
    mean = deltas.mean(axis=0)
    shifts = np.array([0.25, 0.12, -0.2, 0.0]) - mean  # means 0.25, 0.12, -0.2, 0 after the shift
    n_sims, n_boot = 300, 300
    fast = power.simulate(sums, counts, shifts[None, :], n, n_sims=n_sims, test=BootstrapTest(n_boot, 5, 0.05, 2))
    slow = literal_power(deltas, docs, shifts, n, n_sims=n_sims, test=BootstrapTest(n_boot, 99, 0.05, 2))
    se = np.sqrt(np.maximum(fast["power"][0] * (1 - fast["power"][0]), 0.02) / n_sims) * math.sqrt(2)
    assert np.all(np.abs(fast["power"][0] - slow) <= 3.5 * se), (fast["power"][0], slow)
    assert fast["power"].shape == (1, 4)


def test_inner_counts_are_multinomial_by_either_path(monkeypatch):
    """Both samplers of the inner bootstrap counts draw Multinomial(n, c/n): mean n·p, variance n·p(1−p),
    covariance −n·p_i·p_j; each row sums to n."""
    outer = np.array([[3, 0, 1, 4, 2]])
    n, b = int(outer.sum()), 40_000
    p = outer[0] / n
    for factor in (100, 0):  # 100: slot indices; 0: multinomial
        monkeypatch.setattr(power, "_SLOT_FACTOR", factor)
        m = power._inner_counts(np.random.default_rng(1), outer, n, b)[:, 0, :]
        assert m.shape == (b, 5) and np.all(m.sum(axis=1) == n)
        assert np.all(m[:, 1] == 0)  # a document not in the study is never drawn
        np.testing.assert_allclose(m.mean(axis=0), n * p, atol=0.04)
        np.testing.assert_allclose(m.var(axis=0), n * p * (1 - p), rtol=0.04, atol=1e-12)
        np.testing.assert_allclose(np.cov(m[:, 0], m[:, 3])[0, 1], -n * p[0] * p[3], rtol=0.06)


# ------------------------------------------------------------------------------------------------ analytic check

def analytic_vs_simulated(n_grid, n_sims, n_boot, seed):
    """The tested contrast C1 at dz 0.25 in a population of 80 documents × 5 queries with ICC 0.3; C2..C4 far
    from null (dz 3: their p are 0, so Holm leaves C1's p as is and its alpha is 0.05)."""
    deltas, docs, sums, counts = synthetic_population(80, 5, 0.3, seed=seed)
    sd1 = deltas.std(axis=0, ddof=1)
    shifts = np.array([power.shift_to_dz(deltas[:, j].mean(), sd1[j], dz) for j, dz in
                       enumerate([0.25, 3.0, 3.0, 3.0])])
    deff, icc, m = power.design_effect(deltas[:, 0], docs)
    dz0 = 0.25 * sd1[0] / deltas[:, 0].std()  # the analytic formula's σ is the population's (ddof = 0)
    rows = []
    for n in n_grid:
        res = power.simulate(sums, counts, shifts[None, :], n, n_sims=n_sims, test=BootstrapTest(n_boot, 1, 0.05, 2))
        rows.append((n, res["power"][0, 0], res["mc_se"][0, 0], res["power"][0, 1:],
                     power.analytic_power(dz0, n, m, 1 + (m - 1) * icc, 0.05, small_sample=True),
                     power.analytic_power(dz0, n, m, 1.0, 0.05, small_sample=True),
                     power.analytic_power(dz0, n, m, 1 + (m - 1) * icc, 0.05)))
    return rows, icc


def test_simulation_agrees_with_the_design_effect_approximation():
    """Acceptance ("Power"): on synthetic normal deltas with a document random effect, the simulated power of the
    clustered-bootstrap + Holm test agrees with the normal approximation with design effect 1 + (m−1)ρ within 3
    Monte Carlo SE at every size; the same approximation without the design effect (queries as independent)
    does not — the check can tell clustering from none."""
    rows, icc = analytic_vs_simulated([20, 40, 80], n_sims=400, n_boot=500, seed=3)
    assert 0.2 < icc < 0.4  # the population's ICC (the generating ρ is 0.3)
    for n, sim, se, others, analytic, naive, textbook in rows:
        assert np.all(others == 1.0)
        assert abs(sim - analytic) <= 3 * max(se, 0.01), (n, sim, analytic)
        assert abs(sim - textbook) <= 3 * max(se, 0.01), (n, sim, textbook)  # the plain z form, too, from 20 docs
        assert abs(sim - naive) > 3 * max(se, 0.01), (n, sim, naive)
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)  # power grows with N here


@pytest.mark.slow
def test_simulation_agrees_with_the_design_effect_approximation_closely():
    """The same check with 2,000 studies per size (MC SE ≤ 0.011) over more sizes and another population. From
    15 documents the t form (N − 1 df, the bootstrap's ddof-0 spread) is needed: the plain z form is 3.6 SE below
    the simulation at 15 documents and 4.4 SE at 25, where the percentile bootstrap is anti-conservative."""
    rows, _ = analytic_vs_simulated([15, 25, 40, 60, 90, 130], n_sims=2000, n_boot=1000, seed=8)
    for n, sim, se, _others, analytic, _naive, _textbook in rows:
        assert abs(sim - analytic) <= 3 * max(se, 0.005), (n, sim, analytic)


def test_design_effect_with_equal_clusters_is_one_plus_m_minus_one_rho():
    deltas, docs, _, _ = synthetic_population(4000, 4, 0.25, seed=2, k=1)
    deff, icc, m = power.design_effect(deltas[:, 0], docs)
    assert m == 4
    assert icc == pytest.approx(0.25, abs=0.03)
    assert deff == pytest.approx(1 + 3 * icc)
    # one query per document: no clustering
    deff1, icc1, m1 = power.design_effect([0.1, 0.5, -0.2, 0.4], ["a", "b", "c", "d"])
    assert (deff1, m1) == (pytest.approx(1.0), 1.0) and math.isnan(icc1)
    # worked example: docs a = {1, 3}, b = {2}: ȳ = 2, σ² = 2/3, m = 1.5; S − n·ȳ = (4 − 4, 2 − 2) = (0, 0) →
    # deff 0 (the document totals carry no spread at all), icc = (0 − 1)/(1.5 − 1) = −2
    assert power.design_effect([1.0, 3.0, 2.0], ["a", "a", "b"]) == (0.0, pytest.approx(-2.0), 1.5)


def test_analytic_power_small_sample_form_tends_to_the_normal_one():
    z = power.analytic_power(0.05, 20_000, 3, 1.5, 0.05)
    assert power.analytic_power(0.05, 20_000, 3, 1.5, 0.05, small_sample=True) == pytest.approx(z, abs=1e-3)
    # with 8 documents the t form's heavier tails and smaller critical value differ visibly
    assert abs(power.analytic_power(0.3, 8, 3, 1.5, 0.05, small_sample=True)
               - power.analytic_power(0.3, 8, 3, 1.5, 0.05)) > 0.01


def test_analytic_power_worked_example():
    # dz 0.2, 50 docs × 4 queries, deff 2: z = 0.2 / sqrt(2/200) = 2; Φ(2 − 1.959964) = Φ(0.040036) = 0.51597
    assert power.analytic_power(0.2, 50, 4, 2.0, 0.05) == pytest.approx(0.515967, abs=1e-5)
    # two-sided without the sign: + Φ(−2 − 1.96) ≈ 3.7e-5
    assert power.analytic_power(-0.2, 50, 4, 2.0, 0.05, require_sign=False) == pytest.approx(0.516004, abs=1e-5)


# ------------------------------------------------------------------------------------------------ mechanics

@settings(max_examples=50)
@given(st.lists(st.floats(-1, 1), min_size=3, max_size=40), st.floats(-0.5, 0.5))
def test_shift_reaches_the_target_dz(deltas, target):
    d = np.array(deltas)
    sd = float(np.std(d, ddof=1))
    shift = power.shift_to_dz(float(d.mean()), sd, target)
    if sd < 1e-9:
        assert math.isnan(shift) or sd > 0
        return
    assert stats.cohens_dz(d + shift) == pytest.approx(target, abs=1e-9)


def test_contrasts_share_every_draw():
    """Two contrasts with the same deltas get the same p in every study (joint outer and inner draws); a third,
    absent contrast stays in the Holm family with p NaN, so the others' Holm p use m = 4."""
    _, _, sums, counts = synthetic_population(12, 3, 0.2, seed=4)
    sums[:, 1], counts[:, 1] = sums[:, 0], counts[:, 0]
    sums[:, 3], counts[:, 3] = 0.0, 0.0
    res = power.simulate(sums, counts, np.array([[0.05, 0.05, 0.0, np.nan]]), 30, n_sims=50,
                         test=BootstrapTest(200, 2, 0.05, 2))
    np.testing.assert_array_equal(res["p"][0, :, 0], res["p"][0, :, 1])
    assert np.isnan(res["p"][0, :, 3]).all() and np.isnan(res["power"][0, 3])
    for s in range(50):
        np.testing.assert_allclose(res["p_holm"][0, s], stats.holm(res["p"][0, s]))
    holm3 = np.array([stats.holm(p[:3]) for p in res["p"][0]])
    assert np.any(res["p_holm"][0, :, :3] > holm3)  # the family of four is the stricter one


def test_same_seed_same_result_and_sizes_are_independent_streams():
    _, _, sums, counts = synthetic_population(10, 4, 0.2, seed=6)
    a = power.simulate(sums, counts, np.zeros((1, 4)), 25, n_sims=40, test=BootstrapTest(100, 3, 0.05, 2))
    b = power.simulate(sums, counts, np.zeros((1, 4)), 25, n_sims=40, test=BootstrapTest(100, 3, 0.05, 2))
    c = power.simulate(sums, counts, np.zeros((1, 4)), 25, n_sims=40, test=BootstrapTest(100, 4, 0.05, 2))
    np.testing.assert_array_equal(a["p"], b["p"])
    assert not np.array_equal(a["p"], c["p"])


def test_scenarios_share_draws_and_a_huge_effect_is_always_found():
    _, _, sums, counts = synthetic_population(10, 4, 0.2, seed=6)
    mean = sums.sum(0) / counts.sum(0)
    shifts = np.vstack([np.zeros(4), 10 - mean])  # scenario 2: every mean delta = 10 (sd ≈ 1)
    # 200 resamples, not 100: the Monte-Carlo-correct p is at least 2/(B + 1), so Holm over four can reject only
    # when 8/(B + 1) < 0.05 (B >= 160; config refuses a smaller stats.power_n_boot)
    res = power.simulate(sums, counts, shifts, 20, n_sims=30, test=BootstrapTest(200, 1, 0.05, 2))
    np.testing.assert_allclose(res["power"][1], 1.0)
    np.testing.assert_allclose(res["estimate"][1] - res["estimate"][0], np.broadcast_to(shifts[1], (30, 4)))


def test_wrong_sign_rejections_do_not_count_as_power():
    _, _, sums, counts = synthetic_population(10, 4, 0.2, seed=6)
    mean = sums.sum(0) / counts.sum(0)
    shifts = (np.array([0.02, 0.02, 0.02, 0.02]) - mean)[None, :]
    kw = dict(n_sims=300, test=BootstrapTest(200, 1, 0.05, 2))
    signed = power.simulate(sums, counts, shifts, 5, require_sign=True, **kw)
    either = power.simulate(sums, counts, shifts, 5, require_sign=False, **kw)
    assert np.all(signed["power"] <= either["power"]) and np.any(signed["power"] < either["power"])


def test_simulate_rejects_bad_input():
    _, _, sums, counts = synthetic_population(5, 2, 0.2, seed=1)
    with pytest.raises(ValueError, match="n_docs must be ≥ 2"):
        power.simulate(sums, counts, np.zeros((1, 4)), 1, n_sims=5, test=BootstrapTest(5, 1, 0.05, 2))
    with pytest.raises(ValueError, match="disagree"):
        power.simulate(sums, counts, np.zeros((1, 3)), 5, n_sims=5, test=BootstrapTest(5, 1, 0.05, 2))
    counts[0, 2] = 0
    with pytest.raises(ValueError, match="every present contrast"):
        power.simulate(sums, counts, np.zeros((1, 4)), 5, n_sims=5, test=BootstrapTest(5, 1, 0.05, 2))


# ------------------------------------------------------------------------------------------------ N needed

def test_docs_needed_interpolates_in_log_n():
    # 0.6 at 100, 1.0 at 400: 0.8 is halfway in log N → sqrt(100·400) = 200
    assert power.docs_needed([50, 100, 400], [0.3, 0.6, 1.0]) == (pytest.approx(200.0), "interpolated")
    # the first crossing counts, not a later dip and recovery
    assert power.docs_needed([10, 20, 40, 80], [0.5, 0.8, 0.79, 0.9])[0] == pytest.approx(20.0)
    assert power.docs_needed([10, 20], [0.85, 0.9]) == (10.0, "at_or_below_smallest")
    n, status = power.docs_needed([10, 20], [0.1, 0.2])
    assert math.isnan(n) and status == "above_largest"
    assert power.docs_needed([10, 20], [np.nan, np.nan])[1] == "undefined"


# ------------------------------------------------------------------------------------------------ 07 table

@pytest.fixture(scope="module")
def demo_like():
    effects = {"A1": 0.0, "A3": 0.03, "P": 0.01, "G3": 0.035, "A4": 0.0}
    return stats.simulate_scores(10, 61, effects, seed=3, corpus="demo")


def small_params(**kw):
    return {**STATS, "power_n_docs": [5, 20, 80], "power_n_sims": 60, "power_n_boot": 200, **kw}


def test_power_table_structure_and_targets(demo_like):
    scores, queries = demo_like
    st_ = small_params()
    tab = power.power_table(scores, queries, config.record("stats", st_), PRIMARY, "demo",
                            {"C1": 0.09, "C2": 0.09, "C3": math.nan, "C4": -0.17},
                            "paper (wikipedia)")
    assert list(tab.columns) == power.POWER_COLUMNS
    assert sorted(tab["n_docs"].unique()) == [5, 10, 20, 80]  # the grid plus this corpus's 10 documents
    assert len(tab) == 2 * 4 * 4 and set(tab["scenario"]) == {"observed", "paper"}
    contrasts = stats.contrasts_table(scores, queries, config.record("stats", {**st_, "n_boot": 50}), PRIMARY,
                                      "demo").query("confirmatory")
    obs = tab[(tab.scenario == "observed") & (tab.n_docs == 10)].set_index("contrast")
    np.testing.assert_allclose(obs["target_dz"], contrasts.set_index("contrast")["dz"])
    np.testing.assert_allclose(obs["shift"], 0.0)
    pap = tab[(tab.scenario == "paper") & (tab.n_docs == 10)].set_index("contrast")
    assert pap.loc["C4", "target_dz"] == -0.17 and pap.loc["C4", "target_mean"] < 0
    assert math.isnan(pap.loc["C3", "power"]) and "states no dz" in pap.loc["C3", "note"]
    assert tab.loc[tab.contrast != "C3", "power"].between(0, 1).all()
    assert (tab["n_docs_observed"] == 10).all() and (tab["n_queries_observed"] == 61).all()


def test_power_table_is_deterministic_and_reads_its_params(demo_like):
    scores, queries = demo_like
    a = power.power_table(scores, queries, config.record("stats", small_params()), PRIMARY, "demo")
    b = power.power_table(scores, queries, config.record("stats", small_params()), PRIMARY, "demo")
    pd.testing.assert_frame_equal(a, b)
    assert set(a["scenario"]) == {"observed"}
    c = power.power_table(scores, queries, config.record("stats", small_params(seed=1)), PRIMARY, "demo")
    assert not np.array_equal(a["power"].to_numpy(), c["power"].to_numpy())


def test_power_params_errors_name_the_key(demo_like):
    scores, queries = demo_like
    with pytest.raises(ValueError, match="stats.power_n_docs"):
        power.power_table(scores, queries, config.record("stats", small_params(power_n_docs=[1, 10])), PRIMARY,
                          "demo")
    with pytest.raises(ValueError, match="stats.power_n_docs"):
        power.params(config.record("stats", small_params(power_n_docs="10")))
    with pytest.raises(ValueError, match="stats.power_target"):
        power.params(config.record("stats", small_params(power_target=1.5)))
    with pytest.raises(ValueError, match=r"\['C9'\]"):
        power.power_table(scores, queries, config.record("stats", small_params()), PRIMARY, "demo", {"C9": 0.1})


def test_absent_contrast_is_noted(demo_like):
    scores, queries = demo_like
    no_g3 = scores[scores["condition"] != "G3"]
    tab = power.power_table(no_g3, queries, config.record("stats", small_params()), PRIMARY, "demo")
    c3 = tab[tab.contrast == "C3"]
    assert c3["power"].isna().all() and c3["note"].str.contains("absent").all()
    assert tab.loc[tab.contrast != "C3", "power"].notna().all()


def test_paper_corpus_choice():
    assert power.paper_corpus(config.record("stats", {"power_paper_corpus": None}), "qasper") == "qasper"
    assert power.paper_corpus(config.record("stats", {"power_paper_corpus": None}), "demo") == "wikipedia"
    assert power.paper_corpus(config.record("stats", {"power_paper_corpus": "qasper"}), "demo") == "qasper"
    assert set(paper.effects_dz("wikipedia")) == set(STATS["contrasts"])


def test_needed_table_from_a_power_table():
    rows = []
    common = dict(corpus="x", contrast="C2", condition_a="A3", condition_b="P", mc_se=0.01, target_power=0.8,
                  n_docs_observed=40, design_effect=1.5, icc=0.1, alpha=0.05, n_sims=200, note="")
    for n, p_obs, p_pap, size in [(10, 0.2, 0.5, 0.2), (40, 0.5, 0.9, 0.12), (160, 0.8, 1.0, 0.05)]:
        rows += [dict(scenario="observed", effect_source="observed", target_dz=0.1, n_docs=n, power=p_obs,
                      null_rejection=size, **common),
                 dict(scenario="paper", effect_source="paper (qasper)", target_dz=0.11, n_docs=n, power=p_pap,
                      null_rejection=size, **common)]
    need = power.needed_table(pd.DataFrame(rows)).set_index("scenario")
    assert list(need.columns) == [c for c in power.NEEDED_COLUMNS if c != "scenario"]
    assert need.loc["observed", "n_docs_needed"] == pytest.approx(160.0) and need.loc["observed", "status"] == \
        "interpolated"
    # 0.5 at 10, 0.9 at 40: log-interpolated 10·4^(0.75) = 28.28
    assert need.loc["paper", "n_docs_needed"] == pytest.approx(10 * 4 ** 0.75)
    assert need.loc["paper", "power_at_observed"] == 0.9 and need.loc["paper", "largest_simulated"] == 160
    # the size at the first simulated N ≥ the N needed: 0.12 at 40 > 0.05 + 2·sqrt(0.05·0.95/200) = 0.081
    assert need.loc["paper", "null_rejection_at_needed"] == 0.12 and need.loc["paper", "oversized"]
    assert need.loc["observed", "null_rejection_at_needed"] == 0.05 and not need.loc["observed", "oversized"]


# ------------------------------------------------------------------------------------------------ 08 displays

def hand_power_table() -> pd.DataFrame:
    rows = []
    common = dict(corpus="x", condition_a="A3", condition_b="P", mc_se=0.01, target_power=0.8, n_docs_observed=40,
                  design_effect=1.5, icc=0.1, alpha=0.05, n_sims=200, n_boot=1000, require_sign=True, note="")
    for n, p_obs, p_pap, size in [(10, 0.2, 0.5, 0.2), (40, 0.5, 0.9, 0.12), (160, 0.8, 1.0, 0.05)]:
        for contrast in ("C2", "C4"):
            rows += [dict(scenario="observed", effect_source="observed (this run)", contrast=contrast,
                          target_dz=-0.14, n_docs=n, power=p_obs, null_rejection=size, **common),
                     dict(scenario="paper", effect_source="paper (wikipedia)", contrast=contrast,
                          target_dz=0.09 if contrast == "C2" else np.nan, n_docs=n,
                          power=p_pap if contrast == "C2" else np.nan, null_rejection=size, **common)]
    return pd.DataFrame(rows)


def test_power_table_display_and_report_sentences():
    from chunkstudy.report import report, tables

    hand = hand_power_table()
    t = tables.power(power.needed_table(hand), hand)   # 07 writes needed_table's result; 08 formats it
    shown = t.display.set_index(["Contrast", "Effect"])
    assert shown.loc[("C2", "paper (Wikipedia-FA)"), "Docs for 80% power"] == "\u2248 28 \u2020"
    assert shown.loc[("C2", "observed (this run)"), "Docs for 80% power"] == "\u2248 160"
    assert shown.loc[("C4", "paper (Wikipedia-FA)"), "Docs for 80% power"] == "\u2014"
    assert shown.loc[("C2", "paper (Wikipedia-FA)"), "Power at this corpus"] == "90% \u00b1 1%"
    assert shown.loc[("C2", "paper (Wikipedia-FA)"), "dz"] == "+0.09"
    assert "\\bottomrule" in t.latex()
    sentences = report.power_sentences(t.data)
    assert sentences == [
        "- **C2** (A3 \u2212 P) at the paper's effect (Wikipedia-FA, dz +0.09) needs about 28 documents for 80% power "
        "(optimistic: at that size the test rejects a zero effect more often than alpha); this corpus has 40. At "
        "this run's effect (dz -0.14) it needs about 160 documents.",
        "- **C4** (A3 \u2212 P): the paper states no dz for Wikipedia-FA; this corpus has 40. At this run's effect "
        "(dz -0.14) it needs about 160 documents."]
    only_observed = report.power_sentences(t.data[t.data.scenario == "observed"])
    assert only_observed[0] == ("- **C2** (A3 \u2212 P) at this run's effect (dz -0.14) needs about 160 documents "
                                "for 80% power; this corpus has 40.")
    beyond = t.data.assign(status="above_largest", oversized=False)
    assert "needs more than 160 documents for 80% power (the largest size simulated); this corpus has 40. At this " \
        "run's effect (dz -0.14) it needs more than 160 documents (the largest size simulated)." \
        in report.power_sentences(beyond)[0]


def test_power_figure_has_a_panel_per_scenario_and_a_line_per_contrast():
    import io

    from chunkstudy.report import figures

    fig = figures.power_curves(hand_power_table())
    assert len(fig.axes) == 2
    assert [len(ax.get_lines()) for ax in fig.axes] == [2 + 2, 1 + 2]  # contrasts + target and corpus-size lines
    assert "Wikipedia-FA" in fig.axes[1].get_title(loc="left")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60)
    assert buf.tell() > 5000
    empty = figures.power_curves(hand_power_table().assign(power=np.nan))
    assert "no simulated power" in " ".join(t.get_text() for ax in empty.axes for t in ax.texts)
