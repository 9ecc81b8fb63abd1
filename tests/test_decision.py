"""Who decides (chunkstudy.stats.decision): the rule (stats.decision, contrasts.decision), the calibrated test as
a verdict beside Holm's in 07's tables, TOST by the test that decided, 07's check of its own tests
(chunkstudy.stats.size_check), and the report's sentences on all of them."""

from __future__ import annotations

import numpy as np
import pytest

from chunkstudy import config, design, significance, stats
from chunkstudy.report import tables
from chunkstudy.stats import calibrated, calibration, decision, equivalence, size_check

PRIMARY = design.PrimaryCell("cov-nDCG@10", "strong", "none")
PARAMS = {"n_boot": 2000, "seed": 20260710, "alpha": 0.05, "primary_metric": "cov-nDCG@10",
          "primary_reranker": "none",
          "contrasts": {"C1": ["A3", "A1"], "C2": ["A3", "P"], "C3": ["G3", "A3"], "C4": ["A4", "A3"]},
          "mixedlm": False, "min_docs": 5}  # below the default floor: these families are small on purpose
EFFECTS = {"A1": 0.0, "A3": 0.04, "P": 0.0, "G3": 0.04, "A4": 0.04}


@pytest.fixture(scope="module")
def twelve():
    """12 documents, 40 queries, seed 5: the percentile bootstrap's Holm rejects C1 (Holm p 0.016) where the
    calibrated test does not (0.114)."""
    return stats.simulate_scores(12, 40, EFFECTS, seed=5, doc_condition_sd=0.03)


def _table(data, **stats_kw):
    return stats.contrasts_table(*data, config.record("stats", {**PARAMS, **stats_kw}), PRIMARY, "sim")


def test_the_rule_reads_the_family_s_documents_only_under_auto():
    assert decision.rule("auto", significance.PERCENTILE_FROM - 1) == decision.CALIBRATED
    assert decision.rule("auto", significance.PERCENTILE_FROM) == decision.PERCENTILE
    assert decision.rule("percentile", 3) == decision.PERCENTILE and decision.rule("calibrated", 10 ** 6) == "calibrated"
    with pytest.raises(ValueError, match="expected one of \\['auto', 'percentile', 'calibrated'\\], got 'bca'"):
        decision.rule("bca", 10)
    fam = [significance.Tested(0.0, 0, 0, 1, 5, n, True) for n in (40, 12, 1)]
    assert decision.family_docs(fam) == 12  # the fewest any contrast rests on; one document is no family member
    with pytest.raises(config.ConfigError, match="stats.decision"):
        config.record("stats", {**PARAMS, "decision": "bca"})


def test_auto_lets_the_calibrated_test_decide_a_small_family_and_says_where_they_disagree(twelve):
    t = _table(twelve)
    prim = t[t["confirmatory"]].set_index("contrast")
    assert (prim["decided_by"] == "calibrated").all() and (prim["decision"] == "auto").all()
    assert (prim["significant"] == prim["reject_holm_cal"]).all()
    assert prim.loc["C1", "reject_holm"] and not prim.loc["C1", "reject_holm_cal"]
    # the calibrated columns are the wild cluster bootstrap-t's, Holm within the family
    q = twelve[1].set_index("query_id")
    s = twelve[0][(twelve[0]["metric"] == PRIMARY.metric)].pivot(index="query_id", columns="condition", values="value")
    delta = s["A3"] - s["A1"]
    w = calibrated.WildT.of(calibrated.Clusters.of(delta.to_numpy(), q.loc[delta.index, "doc_id"].to_numpy()), 2000,
                            PARAMS["seed"])
    assert prim.loc["C1", "p_cal"] == pytest.approx(w.p(0.0)) and prim.loc["C1", "ci_low_cal"] == pytest.approx(
        w.ci(0.05)[0])
    assert prim["p_holm_cal"].tolist() == pytest.approx(stats.holm(prim["p_cal"].to_numpy()).tolist())
    # Table 1: the star sits on the calibrated Holm p (none here for C1), never on the percentile's; the notes say
    # why the calibrated test decides and where the two disagree
    t1 = tables.table1(t)
    row = t1.display.set_index("Contrast").loc["C1"]
    assert "*" not in row["Holm p"] and "*" not in row["Calibrated Holm p"] and row["Decided by"] == "calibrated"
    notes = " ".join(t1.notes)
    assert f"The calibrated test decides: with 12 documents, fewer than the {significance.PERCENTILE_FROM:,}" in notes
    assert ("C1: the percentile bootstrap rejects (Holm p 0.016) where the calibrated test does not reject (Holm p "
            "0.114); the calibrated test decides.") in notes


def test_a_declared_rule_decides_whatever_the_size(twelve):
    pct = _table(twelve, decision="percentile")
    prim = pct[pct["confirmatory"]].set_index("contrast")
    assert (prim["decided_by"] == "percentile").all() and (prim["significant"] == prim["reject_holm"]).all()
    t1 = tables.table1(pct)
    assert t1.display.set_index("Contrast").loc["C1", "Holm p"].endswith(" *")
    assert "The percentile test decides, as the parameter file declares (decision: percentile)." in t1.notes
    # the user's family under its own rule (contrasts.decision), apart from the confirmatory four's
    user = stats.user_contrasts_table(*twelve, config.record("stats", {**PARAMS, "decision": "percentile"}),
                                      PRIMARY, "sim", {"U1": ["A3", "A1"]}, "calibrated")
    assert set(user["decided_by"]) == {"calibrated"} and set(user["decision"]) == {"calibrated"}


def test_tost_is_decided_by_the_calibrated_test_where_it_decides(twelve):
    t = _table(twelve, sesoi=0.05)
    prim = t[t["confirmatory"]].set_index("contrast")
    q = twelve[1].set_index("query_id")
    s = twelve[0][(twelve[0]["metric"] == PRIMARY.metric)].pivot(index="query_id", columns="condition", values="value")
    delta = s["G3"] - s["A3"]
    w = calibrated.WildT.of(calibrated.Clusters.of(delta.to_numpy(), q.loc[delta.index, "doc_id"].to_numpy()), 2000,
                            PARAMS["seed"])
    e = equivalence.tost_calibrated(w, 0.05, alpha=0.05)
    assert prim.loc["C3", "p_tost"] == pytest.approx(e.p_tost) and prim.loc["C3", "tost_ci_low"] == pytest.approx(
        e.ci_low)
    assert e.p_tost == max(w.p_greater(-0.05), w.p_less(0.05))
    pct = _table(twelve, sesoi=0.05, decision="percentile").set_index("contrast")
    assert not np.isclose(pct.loc["C3", "p_tost"], prim.loc["C3", "p_tost"])  # the bootstrap's own TOST
    assert "from the calibrated test's one-sided p-values" in " ".join(tables.table1(t).notes)


def test_each_run_checks_its_own_tests_and_the_report_says_so(twelve):
    t = _table(twelve)
    sp = config.record("stats", {**PARAMS, "mixedlm": True, "check_sims": 300, "check_n_boot": 199,
                                 "check_mixed_sims": 20})
    checked = size_check.size_check_table(*twelve, sp, PRIMARY, "sim",
                                          {stats.CONFIRMATORY: (PARAMS["contrasts"], t),
                                           stats.USER_ADDED: ({}, t.iloc[:0])})
    assert list(checked.columns) == size_check.SIZE_CHECK_COLUMNS
    fw = checked[checked["measure"] == "family-wise size"].set_index("rule")
    assert fw.loc["calibrated", "decided"] and not fw.loc["percentile", "decided"]
    assert (checked["n_docs"] == 12).all() and set(checked["family"]) == {stats.CONFIRMATORY}
    pool = calibration.pool_from_scores(*twelve, PARAMS["contrasts"], tuple(PRIMARY), "sim")
    again = calibration.rates(pool, 12, "wild", n_sims=300, n_boot=199, seed=PARAMS["seed"], alpha=0.05)
    assert fw.loc["calibrated", "rate"] == again["familywise"]
    each = checked[(checked["rule"] == "percentile") & (checked["measure"] == "size")]
    assert each["contrast"].tolist() == list(PARAMS["contrasts"])
    assert (checked[checked["measure"] == "CI coverage"]["rule"] == "paired MixedLM").all()
    note = " ".join(tables.table1(t, size_check=checked).notes)
    rate, se = fw.loc["calibrated", "rate"], fw.loc["calibrated", "mc_se"]
    assert (f"Measured size at this run's structure: {100 * rate:.1f}% (\u00b1 {100 * se:.1f}%) for the calibrated "
            "test that decided") in note
    # a family whose pool cannot be built gets one row saying why
    broken = size_check.size_check_table(*twelve, sp, PRIMARY, "sim",
                                         {stats.CONFIRMATORY: ({"X": ("A3", "ZZ")}, t)})
    assert len(broken) == 1 and broken["note"].iat[0].startswith("not checked:") and "ZZ" in broken["note"].iat[0]
    assert "not checked" in tables.size_check_note(broken, stats.CONFIRMATORY)[0]


def test_the_paired_model_s_note_says_it_weights_documents(twelve):
    t = _table(twelve, mixedlm=True)
    paired = stats.paired_mixedlm_table(*twelve, config.record("stats", {**PARAMS, "mixedlm": True}), PRIMARY, "sim")
    notes = " ".join(tables.table1(t, paired=paired).notes)
    assert "Its estimate weights each document by its precision (GLS)" in notes
    assert "so it is not \u0394, Table 1's mean over queries" in notes


def test_below_the_floor_nothing_is_decided_and_the_note_says_so(twelve):
    t = _table(twelve, min_docs=20)  # 12 documents: no inference
    notes = " ".join(tables.table1(t).notes)
    assert not t["significant"].any()
    assert ("Nothing is decided here (no row supports inference; see its note). The calibrated test would decide: "
            "with 12 documents") in notes
    assert "the percentile bootstrap rejects" not in notes  # no disagreement is reported without inference
