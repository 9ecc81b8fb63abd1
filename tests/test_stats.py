"""Statistics (07): Holm, dz, the document-clustered bootstrap, the contrast/MixedLM/exploratory tables.

Oracles: statsmodels ``multipletests(method="holm")``, ``scipy.stats.ttest_rel``, ``scipy.stats.bootstrap``,
``numpy.polyfit``/``scipy.stats.linregress``, ``scipy.stats.sem``. Worked examples are computed by hand in the
comments. Properties (hypothesis): identical conditions give 0/[0, 0]/p = 1; swapping the conditions negates the
effect; the same seed gives identical tables.
"""

import gc
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from chunkstudy import config, design, significance, stats
from chunkstudy.metrics import paired

PRIMARY = design.PrimaryCell("cov-nDCG@10", "strong", "none")  # the primary cell of the simulated runs
PARAMS = {"n_boot": 2000, "seed": 20260710, "alpha": 0.05, "primary_metric": "cov-nDCG@10",
          "primary_reranker": "none",
          "contrasts": {"C1": ["A3", "A1"], "C2": ["A3", "P"], "C3": ["G3", "A3"], "C4": ["A4", "A3"]},
          "mixedlm": True}
EFFECTS = {"A0": 0.0, "A1": 0.01, "A2": 0.02, "A3-d1": 0.03, "A3-d2": 0.04, "A3": 0.05, "P": 0.02, "A4": 0.03,
           "G2": 0.02, "G3": 0.06, "G4": 0.03}


@pytest.fixture(scope="module")
def sim():
    """Two embedders × two reranker settings × two metrics, 120 queries over 40 documents."""
    return stats.simulate_scores(40, 120, EFFECTS, seed=7, embedders=("strong", "weak"), rerankers=("none", "xenc"),
                                 metrics=("cov-nDCG@10", "recall@50"))


# ------------------------------------------------------------------------------------------------ Holm

def test_holm_worked_example():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    got = stats.holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02])


# multipletests calls gc.collect() on every call: a full collection of the test process's heap (0.1-0.5 s in a
# full suite, a third of this module's time); the oracle's numbers do not depend on it, so it is skipped here
@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 0.05, 0.2, 1.0])), min_size=1, max_size=12))
def test_holm_matches_statsmodels(p):
    with mock.patch.object(gc, "collect", lambda *_: 0):
        expected = multipletests(p, method="holm")[1]
    np.testing.assert_allclose(stats.holm(p), expected, rtol=1e-12, atol=1e-15)


def test_holm_missing_p_stays_nan_and_keeps_the_family_size():
    got = stats.holm([0.01, np.nan, 0.02, 0.03])
    full = stats.holm([0.01, 1.0, 0.02, 0.03])
    assert np.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2, 3]], full[[0, 2, 3]])
    np.testing.assert_allclose(got[[0, 2, 3]], [0.04, 0.06, 0.06])  # m = 4, not 3


def test_holm_rejects_out_of_range():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.holm([0.5, 1.2])


# ------------------------------------------------------------------------------------------------ dz

@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-1, 1), st.floats(-1, 1)), min_size=3, max_size=60))
def test_dz_matches_paired_t(pairs):
    a, b = np.array(pairs).T
    assume(np.std(a - b, ddof=1) > 1e-6)
    t = scipy.stats.ttest_rel(a, b).statistic
    assert stats.cohens_dz(a - b) * np.sqrt(len(a)) == pytest.approx(t, rel=1e-9, abs=1e-9)


def test_dz_worked_example_and_undefined_cases():
    # deltas 1, 2, 3: mean 2, sd (ddof=1) 1 → dz 2
    assert stats.cohens_dz([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    assert np.isnan(stats.cohens_dz([0.0, 0.0, 0.0]))
    assert np.isnan(stats.cohens_dz([0.3]))


# ------------------------------------------------------------------------------------------------ bootstrap

def test_cluster_bootstrap_worked_example():
    # doc a holds deltas 1, 2 (sum 3, count 2); doc b holds 3 (sum 3, count 1). Drawing two documents:
    # (a,a) → 6/4 = 1.5, (b,b) → 6/2 = 3, (a,b)/(b,a) → 6/3 = 2, with probabilities 1/4, 1/4, 1/2.
    boot = stats.cluster_bootstrap([1.0, 2.0, 3.0], ["a", "a", "b"], n_boot=8000, seed=1, alpha=0.05)
    assert boot.estimate == 2.0 and boot.n == 3 and boot.n_clusters == 2
    values, counts = np.unique(boot.replicates, return_counts=True)
    np.testing.assert_allclose(values, [1.5, 2.0, 3.0])
    np.testing.assert_allclose(counts / 8000, [0.25, 0.5, 0.25], atol=0.02)
    assert (boot.ci_low, boot.ci_high) == (1.5, 3.0)
    assert boot.p == 2 / 8001  # no replicate ≤ 0: the Monte Carlo floor 2·(1 + 0)/(1 + B), never 0


def test_one_query_per_document_is_the_ordinary_paired_bootstrap():
    rng = np.random.default_rng(3)
    deltas = rng.normal(0.02, 0.1, 300)
    docs = [f"d{i:03d}" for i in range(300)]  # sorted labels: same order as the deltas
    boot = stats.cluster_bootstrap(deltas, docs, n_boot=3000, seed=11, alpha=0.05)
    # the ordinary paired bootstrap, written out: resample queries with replacement, same generator and draws
    draws = np.random.default_rng(11).integers(0, 300, size=(3000, 300))
    ordinary = deltas[draws].mean(axis=1)
    np.testing.assert_allclose(boot.replicates, ordinary, rtol=1e-12)
    assert boot.p == pytest.approx(min(1.0, 2 * (1 + min(np.sum(ordinary <= 0), np.sum(ordinary >= 0))) / 3001))
    # and statistically against an independent implementation (scipy, its own random stream)
    ref = scipy.stats.bootstrap((deltas,), np.mean, n_resamples=3000, method="percentile",
                                rng=np.random.default_rng(5)).confidence_interval
    width = ref.high - ref.low
    assert boot.ci_low == pytest.approx(ref.low, abs=0.1 * width)
    assert boot.ci_high == pytest.approx(ref.high, abs=0.1 * width)


def test_bootstrap_p_is_monte_carlo_correct_and_never_zero():
    # North, Curtis & Sham (2002): p = (r + 1)/(n + 1); two-sided: twice the smaller side, clipped to 1.
    # 10 replicates, 2 of them ≤ 0 and 8 ≥ 0: p = 2·(1 + 2)/(1 + 10) = 6/11.
    r = np.array([-0.2, -0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert stats.bootstrap_p(r) == pytest.approx(6 / 11)
    # a replicate exactly at 0 counts on both sides: 1 ≤ 0 and 10 ≥ 0 -> 2·(1 + 1)/11
    assert stats.bootstrap_p(np.r_[0.0, r[2:], 0.9]) == pytest.approx(4 / 11)
    # no replicate crosses 0: never 0 (the plain share 2·min(mean(r≤0), mean(r≥0)) was exactly 0 here)
    for b in (1, 10, 999):
        assert stats.bootstrap_p(np.ones(b)) == pytest.approx(2 / (b + 1)) and stats.bootstrap_p(np.ones(b)) > 0
    assert stats.bootstrap_p(np.zeros(7)) == 1.0  # clipped
    np.testing.assert_allclose(stats.mc_p_two_sided(np.array([0, 3, 600]), np.array([1000, 997, 400]), 1000),
                               [2 / 1001, 8 / 1001, 802 / 1001])
    with pytest.raises(ValueError, match="n_boot"):
        stats.mc_p_two_sided(0, 0, 0)


def test_n_boot_1_cannot_give_significance():
    # the probe: n_boot 10 on 3 documents gave "Holm p < 0.1 *"; with one resample a CI even excluded its own Δ.
    # The Monte-Carlo p of B resamples is at least 2/(B + 1): B = 10 gives ≥ 0.18, Holm over four ≥ 0.73.
    boot = stats.cluster_bootstrap([1.0, 2.0, 3.0, 4.0], ["a", "b", "c", "d"], n_boot=10, seed=1, alpha=0.05)
    assert boot.p >= 2 / 11
    assert stats.holm([boot.p] * 4).min() >= 4 * 2 / 11 - 1e-12


def test_significance_needs_enough_documents_and_resamples():
    # the probe: n_boot 10 on 3 documents gave reject_holm true for three contrasts. A huge effect on 3 documents
    # (or on 40 documents with 500 resamples) is written, but nothing is marked significant and the note says why.
    effects = {"A1": 0.0, "A3": 0.3, "P": 0.0, "G3": 0.6, "A4": 0.3}
    few = stats.contrasts_table(*stats.simulate_scores(3, 30, effects, seed=1),
                                config.record("stats", {**PARAMS, "n_boot": 2000}),
                                PRIMARY, "sim")
    assert not few["inference"].any() and not few["reject_holm"].any()
    floor = f"fewer than stats.min_docs = {significance.CALIBRATED_FROM}"  # the default: the calibrated test's floor
    assert few["p"].notna().all() and (few["note"] == f"no inference: 3 documents, {floor}").all()
    many = stats.contrasts_table(*stats.simulate_scores(40, 120, effects, seed=1),
                                 config.record("stats", {**PARAMS, "n_boot": 500}),
                                 PRIMARY, "sim")
    assert not many["reject_holm"].any() and (many["p"] < 0.05).sum() >= 2
    assert (many["note"] == "no inference: stats.n_boot = 500, below the floor of 1,000 resamples").all()
    ok = stats.contrasts_table(*stats.simulate_scores(40, 120, effects, seed=1),
                               config.record("stats", {**PARAMS, "n_boot": stats.MIN_BOOT, "min_docs": 40}), PRIMARY,
                               "sim")
    assert ok["inference"].all() and ok["reject_holm"].sum() >= 2 and (ok["note"] == "").all()
    assert stats.inference_problem(9, 1000, 10) and not stats.inference_problem(10, 1000, 10)
    for table in (stats.per_type, stats.dose_response):
        t = table(*stats.simulate_scores(3, 30, EFFECTS, seed=1), config.record("stats", {**PARAMS, "n_boot": 2000}),
                  PRIMARY, "sim")
        assert not t["inference"].any() and t["note"].str.contains(floor).all()


def test_clustering_widens_the_interval():
    # 60 documents × 5 queries whose deltas share a document effect (sd 0.1) over small noise (sd 0.02): the design
    # effect is about 1 + 4·0.1²/(0.1² + 0.02²) ≈ 4.8, so the clustered CI is about √4.8 ≈ 2.2× the ordinary one.
    rng = np.random.default_rng(0)
    docs = np.repeat(np.arange(60), 5)
    deltas = rng.normal(0, 0.1, 60)[docs] + rng.normal(0, 0.02, 300)
    clustered = stats.cluster_bootstrap(deltas, docs, 4000, seed=1, alpha=0.05)
    ordinary = stats.cluster_bootstrap(deltas, np.arange(300), 4000, seed=1, alpha=0.05)
    ratio = (clustered.ci_high - clustered.ci_low) / (ordinary.ci_high - ordinary.ci_low)
    assert 1.8 < ratio < 2.7


def test_cluster_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="n_boot"):
        stats.cluster_bootstrap([1.0], ["a"], 0, 1, alpha=0.05)
    with pytest.raises(ValueError, match="no observations"):
        stats.cluster_bootstrap([], [], 10, 1, alpha=0.05)
    with pytest.raises(ValueError, match="NaN"):
        stats.cluster_bootstrap([1.0, np.nan], ["a", "b"], 10, 1, alpha=0.05)


def test_cluster_se_with_one_query_per_document_is_the_ordinary_se():
    y = np.random.default_rng(2).normal(size=50)
    assert stats.cluster_se(y, np.arange(50)) == pytest.approx(scipy.stats.sem(y))


# ------------------------------------------------------------------------------------------------ contrasts table

def test_contrasts_table_structure_and_values(sim):
    scores, queries = sim
    table = stats.contrasts_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert len(table) == 8 * 4  # 2 metrics × 2 embedders × 2 rerankers, 4 contrasts each
    primary = table[table["confirmatory"]]
    assert primary["cell"].unique().tolist() == ["cov-nDCG@10|strong|none"]
    assert primary["contrast"].tolist() == ["C1", "C2", "C3", "C4"]
    assert set(table.loc[~table["confirmatory"], "label"]) == {"exploratory"}
    assert set(primary["label"]) == {"confirmatory"}
    assert table.index[:4].tolist() == primary.index.tolist()  # Table 1 first
    # mean delta and dz from the raw scores
    s = scores[(scores.metric == "cov-nDCG@10") & (scores.embedder == "strong") & (scores.reranker == "none")]
    wide = s.pivot(index="query_id", columns="condition", values="value")
    delta = wide["A4"] - wide["A3"]
    c4 = primary.set_index("contrast").loc["C4"]
    assert c4["mean_delta"] == pytest.approx(delta.mean())
    assert c4["dz"] == pytest.approx(delta.mean() / delta.std(ddof=1))
    assert c4["mean_a"] - c4["mean_b"] == pytest.approx(c4["mean_delta"])
    assert (c4["n_queries"], c4["n_docs"]) == (120, 40)
    assert c4["ci_low"] < c4["mean_delta"] < c4["ci_high"]
    # Holm within each cell's family of four
    for _, cell in table.groupby("cell"):
        np.testing.assert_allclose(cell["p_holm"], stats.holm(cell["p"].to_numpy()))
    assert (table["reject_holm"] == (table["p_holm"] < 0.05)).all()


def test_tost_is_run_only_on_the_metrics_a_bound_was_declared_for(sim):
    """stats.sesoi is a bound in the primary metric's units: recall@50 gets blank TOST columns and a note saying
    why, until stats.sesoi_by_metric declares its own bound; each cell's verdicts are Holm-adjusted within it."""
    scores, queries = sim
    table = stats.contrasts_table(scores, queries, config.record("stats", {**PARAMS, "sesoi": 0.02}), PRIMARY, "sim")
    cov, rec = table[table["metric"] == "cov-nDCG@10"], table[table["metric"] == "recall@50"]
    assert (cov["sesoi"] == 0.02).all() and cov["equivalence"].isin(["equivalent", "inconclusive",
                                                                      "not equivalent"]).all()
    assert rec["sesoi"].isna().all() and (rec["equivalence"] == "").all() and rec["p_tost"].isna().all()
    assert rec["note"].str.contains("no smallest effect of interest declared for recall@50").all()
    assert not cov["note"].str.contains("TOST").any()
    both = stats.contrasts_table(scores, queries, config.record("stats", {
        **PARAMS, "sesoi": 0.02, "sesoi_by_metric": {"recall@50": 0.05}}), PRIMARY, "sim")
    rec = both[both["metric"] == "recall@50"]
    assert (rec["sesoi"] == 0.05).all() and (rec["equivalence"] != "").all()
    for _, cell in both.groupby("cell"):
        np.testing.assert_allclose(cell["p_tost_holm"], stats.holm(cell["p_tost"].to_numpy()))
    none = stats.contrasts_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert "equivalence" not in none and "sesoi" not in none  # no bound declared: no TOST column at all


def test_unpaired_queries_are_left_out(sim):
    scores, queries = sim
    gone = queries["query_id"].iloc[:10]
    cut = scores[~((scores.condition == "A1") & scores.query_id.isin(gone))].copy()
    cut.loc[(cut.condition == "A1") & (cut.query_id == queries["query_id"].iloc[10]), "value"] = np.nan
    table = stats.contrasts_table(cut, queries, config.record("stats", PARAMS), PRIMARY,
                                  "sim").set_index(["cell", "contrast"])
    assert table.loc[("cov-nDCG@10|strong|none", "C1"), "n_queries"] == 109
    assert table.loc[("cov-nDCG@10|strong|none", "C2"), "n_queries"] == 120


def test_missing_condition_is_noted_not_fatal(sim):
    scores, queries = sim
    no_gold = scores[~scores.condition.str.startswith("G")]
    table = stats.contrasts_table(no_gold, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    c3 = table[table.contrast == "C3"]
    assert c3["mean_delta"].isna().all() and c3["p_holm"].isna().all() and (c3["n_queries"] == 0).all()
    assert c3["note"].str.contains("G3").all()
    # the family stays four: the others are adjusted as if C3's p were 1
    primary = table[table.confirmatory]
    np.testing.assert_allclose(primary["p_holm"], stats.holm(primary["p"].to_numpy()), equal_nan=True)
    assert (table.loc[table.contrast != "C3", "note"] == "").all()


@st.composite
def paired_tables(draw):
    n_docs = draw(st.integers(2, 8))
    per_doc = draw(st.lists(st.integers(1, 4), min_size=n_docs, max_size=n_docs))
    docs = np.repeat([f"d{i}" for i in range(n_docs)], per_doc)
    n = len(docs)
    values = draw(st.lists(st.floats(0, 1), min_size=2 * n, max_size=2 * n))
    qids = [f"q{i}" for i in range(n)]
    queries = pd.DataFrame({"query_id": qids, "doc_id": docs, "qtype": "factoid"})
    scores = pd.DataFrame({"corpus": "c", "embedder": "strong", "reranker": "none", "metric": "cov-nDCG@10",
                           "query_id": qids * 2, "condition": ["A3"] * n + ["A1"] * n, "value": values})
    return scores, queries


ONE = {**PARAMS, "n_boot": 300, "contrasts": {"C1": ["A3", "A1"]}}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paired_tables())
def test_identical_conditions_give_zero_and_p_one(tables):
    scores, queries = tables
    copy = scores[scores.condition == "A3"].assign(condition="A1")
    same = pd.concat([scores[scores.condition == "A3"], copy], ignore_index=True)
    row = stats.contrasts_table(same, queries, config.record("stats", ONE), PRIMARY, "c").iloc[0]
    assert row["mean_delta"] == 0.0 and (row["ci_low"], row["ci_high"]) == (0.0, 0.0)
    assert row["p"] == 1.0 and row["p_holm"] == 1.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paired_tables())
def test_swapping_conditions_negates_the_contrast(tables):
    scores, queries = tables
    forward = stats.contrasts_table(scores, queries, config.record("stats", ONE), PRIMARY, "c").iloc[0]
    backward = stats.contrasts_table(scores, queries,
                                     config.record("stats",
                                                   {**ONE, "contrasts": {"C1": ["A1", "A3"]}}), PRIMARY, "c").iloc[0]
    assert backward["mean_delta"] == pytest.approx(-forward["mean_delta"], abs=1e-12)
    assert backward["ci_low"] == pytest.approx(-forward["ci_high"], abs=1e-9)
    assert backward["ci_high"] == pytest.approx(-forward["ci_low"], abs=1e-9)
    assert backward["p"] == forward["p"]


def test_same_seed_same_tables_other_seed_differs(sim):
    scores, queries = sim
    for fn in (stats.contrasts_table, stats.dose_response, stats.per_type):
        p = config.record("stats", PARAMS)
        first, again = fn(scores, queries, p, PRIMARY, "sim"), fn(scores, queries, p, PRIMARY, "sim")
        pd.testing.assert_frame_equal(first, again)
        other = fn(scores, queries, config.record("stats", {**PARAMS, "seed": 1}), PRIMARY, "sim")
        assert not np.allclose(first["ci_low"], other["ci_low"], equal_nan=True)


def test_input_errors_name_the_table(sim):
    scores, queries = sim
    with pytest.raises(ValueError, match="duplicated"):
        stats.contrasts_table(pd.concat([scores, scores.iloc[:1]]), queries, config.record("stats", PARAMS), PRIMARY,
                              "sim")
    with pytest.raises(ValueError, match="no row in queries"):
        stats.contrasts_table(scores, queries.iloc[1:], config.record("stats", PARAMS), PRIMARY, "sim")
    with pytest.raises(ValueError, match=r"corpora present: \['sim'\]"):
        stats.contrasts_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "qasper")
    with pytest.raises(ValueError, match="stats.contrasts.C1"):
        stats.contrasts_table(scores, queries, config.record("stats", {**PARAMS, "contrasts": {"C1": ["A3"]}}),
                              PRIMARY, "sim")


def test_inputs_not_mutated(sim):
    scores, queries = sim
    before_s, before_q = scores.copy(), queries.copy()
    stats.contrasts_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    stats.condition_means(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    pd.testing.assert_frame_equal(scores, before_s)
    pd.testing.assert_frame_equal(queries, before_q)


def test_paired_deltas(sim):
    scores, queries = sim
    d = paired.paired_deltas(scores, queries, "A3", "A1", corpus="sim", metric="recall@50", embedder="weak",
                            reranker="xenc")
    assert len(d) == 120 and (d["delta"] == d["value_a"] - d["value_b"]).all()
    assert d.merge(queries, on="query_id")["doc_id_x"].eq(d.merge(queries, on="query_id")["doc_id_y"]).all()
    empty = paired.paired_deltas(scores, queries, "A3", "ZZ", corpus="sim", metric="recall@50", embedder="weak",
                                reranker="xenc")
    assert empty.empty and "delta" in empty.columns


# ------------------------------------------------------------------------------------------------ MixedLM

def test_mixedlm_recovers_a_planted_effect():
    # A3 − A1 = 0.04 planted, with document and query intercepts much larger than the effect
    scores, queries = stats.simulate_scores(150, 450, {"A3": 0.04, "A1": 0.0}, seed=3, noise_sd=0.05)
    params = {**PARAMS, "contrasts": {"C1": ["A3", "A1"]}}
    table = stats.mixedlm_table(scores, queries, config.record("stats", params), PRIMARY, "sim")
    row = table.iloc[0]
    assert row["converged"]
    assert abs(row["coef"] - 0.04) < 3 * row["se"] and row["ci_low"] < 0.04 < row["ci_high"]
    assert row["p"] < 1e-3 and row["z"] == pytest.approx(row["coef"] / row["se"])
    assert (row["n_obs"], row["n_queries"], row["n_docs"]) == (900, 450, 150)
    # each document holds every query under both conditions, so the GLS coefficient is the mean paired delta
    mean_delta = stats.contrasts_table(scores, queries, config.record("stats", params), PRIMARY,
                                       "sim").iloc[0]["mean_delta"]
    assert row["coef"] == pytest.approx(mean_delta, abs=1e-8)
    assert "misspecified" in row["note"]


def test_mixedlm_skips_missing_and_can_be_switched_off(sim):
    scores, queries = sim
    few = scores[(scores.metric == "cov-nDCG@10") & (scores.embedder == "strong") & (scores.reranker == "none")
                 & scores.condition.isin(["A3", "A1"])]
    table = stats.mixedlm_table(few, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert table["contrast"].tolist() == ["C1", "C2", "C3", "C4"]
    assert table.loc[1:, "coef"].isna().all() and table.loc[1:, "note"].str.contains("skipped").all()
    assert np.isfinite(table.loc[0, "coef"])
    off = stats.mixedlm_table(scores, queries, config.record("stats", {**PARAMS, "mixedlm": False}), PRIMARY, "sim")
    assert off.empty and "coef" in off.columns


def _paired_data(seed: int, doc_condition_sd: float) -> tuple[np.ndarray, np.ndarray]:
    scores, queries = stats.simulate_scores(60, 240, {"A": 0.03, "B": 0.0}, seed=seed,
                                            doc_condition_sd=doc_condition_sd)
    values = scores["value"].to_numpy().reshape(240, 2)
    return values[:, 0] - values[:, 1], queries["doc_id"].to_numpy()


@pytest.mark.parametrize("seed, doc_condition_sd", [(1, 0.03), (2, 0.06), (3, 0.0)])
def test_the_paired_mixedlm_is_statsmodels_reml_fit(seed, doc_condition_sd):
    """The closed-form REML of the one-way model against statsmodels' MixedLM (REML, Powell's method, on the deltas
    divided by their SD: its default optimiser fails on this model in some studies): the same coefficient and
    variances, and the SE is the GLS one, sqrt(σ² / Σ n_g w_g), of statsmodels' own variance estimates (its
    Hessian-based bse differs by about 1%)."""
    import warnings

    import statsmodels.api as sm

    d, g = _paired_data(seed, doc_condition_sd)
    got = stats.fit_paired_mixedlm(d, g, alpha=0.05)
    s = d.std()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sm.MixedLM(d / s, np.ones((d.size, 1)), groups=g).fit(reml=True, method="powell")
    doc_var, resid_var = s * s * float(np.asarray(r.cov_re)[0, 0]), s * s * float(r.scale)
    assert got["coef"] == pytest.approx(s * float(r.fe_params[0]), rel=1e-4, abs=1e-7)
    assert got["resid_var"] == pytest.approx(resid_var, rel=1e-4)
    assert got["doc_var"] == pytest.approx(doc_var, rel=1e-3, abs=1e-7)
    n = pd.Series(g).value_counts().to_numpy(float)
    assert got["se"] == pytest.approx(np.sqrt(resid_var / (n / (1 + doc_var / resid_var * n)).sum()), rel=1e-3)
    assert got["se"] == pytest.approx(s * float(r.bse_fe[0]), rel=0.03)
    assert got["ci_low"] < got["coef"] < got["ci_high"] and got["z"] == pytest.approx(got["coef"] / got["se"])
    assert got["converged"] and (got["note"] != "") == (got["doc_var"] == 0)


def test_the_paired_mixedlm_covers_a_known_contrast_at_its_nominal_rate():
    """1,000 studies of 60 documents and 240 queries with known document, query, document x condition and noise
    SDs: the correctly specified model's 95% CI covers the planted contrast in 93-97% of them (Monte Carlo SE 0.7
    points), its mean SE is the spread of its estimates, and it recovers the variances of the deltas (document:
    2 x 0.03^2; residual: 2 x 0.1^2). bench/bench_mixed_coverage.py prints it beside the pre-registered model's."""
    from chunkstudy.stats import simulate

    cov = simulate.mixed_coverage(1000, n_docs=60, n_queries=240, effect=0.03, seed=43, alpha=0.05)
    assert 0.93 <= cov["paired"] <= 0.97
    assert cov["paired_se"] == pytest.approx(cov["sd_estimate"], rel=0.1)
    assert cov["doc_var"] == pytest.approx(cov["true_doc_var"], rel=0.15)
    assert cov["resid_var"] == pytest.approx(cov["true_resid_var"], rel=0.05)


def test_the_paired_mixedlm_table_is_the_family_with_holm_and_says_what_it_is(sim):
    scores, queries = sim
    table = stats.paired_mixedlm_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert table.columns.tolist() == stats.PAIRED_MIXEDLM_COLUMNS and table["contrast"].tolist() == ["C1", "C2",
                                                                                                     "C3", "C4"]
    np.testing.assert_allclose(table["p_holm"], stats.holm(table["p"].to_numpy()))
    assert table["note"].str.startswith("secondary, correctly specified").all()
    s = scores[(scores.metric == "cov-nDCG@10") & (scores.embedder == "strong") & (scores.reranker == "none")]
    wide = s.pivot(index="query_id", columns="condition", values="value").join(queries.set_index("query_id"))
    want = stats.fit_paired_mixedlm((wide["A4"] - wide["A3"]).to_numpy(), wide["doc_id"].to_numpy(), alpha=0.05)
    c4 = table.set_index("contrast").loc["C4"]
    assert (c4["coef"], c4["se"], c4["n_queries"], c4["n_docs"]) == pytest.approx((want["coef"], want["se"], 120,
                                                                                    40))
    few = s[s.condition.isin(["A3", "A1"])]
    part = stats.paired_mixedlm_table(few, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert np.isfinite(part.loc[0, "coef"]) and part.loc[1:, "coef"].isna().all()
    same = s.assign(condition=s["condition"].replace({"A1": "X"}))
    same = pd.concat([same, s[s.condition == "A3"].assign(condition="A1")])  # A1 = A3: every delta 0
    failed = stats.paired_mixedlm_table(same, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert failed.loc[0, "note"].endswith("every paired delta is the same: no variance to model")
    off = stats.paired_mixedlm_table(scores, queries, config.record("stats", {**PARAMS, "mixedlm": False}), PRIMARY,
                                     "sim")
    assert off.empty and "coef" in off.columns


# ------------------------------------------------------------------------------------------------ exploratory

def test_per_query_slopes_match_polyfit_and_pooled_ols():
    rng = np.random.default_rng(4)
    y = rng.normal(size=(30, 4))
    depths = [0, 1, 2, 3]
    expected = np.array([np.polyfit(depths, row, 1)[0] for row in y])
    slopes = stats.per_query_slopes(y, depths)
    np.testing.assert_allclose(slopes, expected)
    pooled = scipy.stats.linregress(np.tile(depths, 30), y.ravel()).slope
    assert slopes.mean() == pytest.approx(pooled)


def test_dose_response_recovers_a_planted_slope():
    # effects rise by 0.01 per level: A2 0, A3-d1 0.01, A3-d2 0.02, A3 0.03
    ladder = {"A2": 0.0, "A3-d1": 0.01, "A3-d2": 0.02, "A3": 0.03}
    scores, queries = stats.simulate_scores(200, 600, ladder, seed=9, embedders=("strong", "weak"),
                                            doc_condition_sd=0.005, noise_sd=0.02)
    table = stats.dose_response(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert table["embedder"].tolist() == ["strong", "weak"]
    for _, row in table.iterrows():
        assert row["ci_low"] < 0.01 < row["ci_high"] and row["p"] < 0.01
        assert row["mean_d3"] - row["mean_d0"] == pytest.approx(0.03, abs=0.005)
        assert row["label"] == "exploratory" and row["levels"] == "A2,A3-d1,A3-d2,A3"


def test_dose_response_with_a_missing_level(sim):
    scores, queries = sim
    table = stats.dose_response(scores[scores.condition != "A3-d2"], queries, config.record("stats", PARAMS), PRIMARY,
                                "sim")
    assert table["note"].str.contains("A3-d2").all() and np.isnan(table["mean_d2"]).all()
    assert np.isfinite(table["slope"]).all()
    assert (table["metric"] == "cov-nDCG@10").all() and len(table) == 4


def test_per_type_partitions_the_queries(sim):
    scores, queries = sim
    table = stats.per_type(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    overall = stats.contrasts_table(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    assert set(table["metric"]) == {"cov-nDCG@10"} and set(table["label"]) == {"exploratory"}
    merged = table.groupby(["cell", "contrast"]).apply(
        lambda g: pd.Series({"n": g["n_queries"].sum(), "mean": np.average(g["mean_delta"], weights=g["n_queries"])}),
        include_groups=False)
    ref = overall.set_index(["cell", "contrast"]).loc[merged.index]
    np.testing.assert_array_equal(merged["n"], ref["n_queries"])
    np.testing.assert_allclose(merged["mean"], ref["mean_delta"])
    assert set(table["qtype"]) == {"factoid", "multihop", "structural"}


def test_condition_means(sim):
    scores, queries = sim
    table = stats.condition_means(scores, queries, config.record("stats", PARAMS), PRIMARY, "sim")
    ref = scores.groupby(["metric", "embedder", "reranker", "condition"])["value"].mean()
    got = table.set_index(["metric", "embedder", "reranker", "condition"])["mean"]
    np.testing.assert_allclose(got.loc[ref.index], ref)
    primary = table[table.primary_cell]
    assert primary["condition"].tolist() == ["A0", "A1", "A2", "A3-d1", "A3-d2", "A3", "P", "A4", "G2", "G3", "G4"]
    assert set(table["metric"]) == {"cov-nDCG@10", "recall@50"} and (table["n_docs"] == 40).all()
    row = table.iloc[0]
    s = scores[(scores.metric == row.metric) & (scores.embedder == row.embedder) & (scores.reranker == row.reranker)
               & (scores.condition == row.condition)].merge(queries, on="query_id")
    assert row["se_cluster"] == pytest.approx(stats.cluster_se(s["value"], s["doc_id"]))
