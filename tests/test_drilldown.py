"""The per-query drill-down (06 computes, 08 formats): the picked queries are the extremes of the paired deltas, the
per-rank gains add up (with the discount) to each query's DCG and score, and the gold characters per chunk equal
an independent character-set overlap."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy import config, design, metrics
from chunkstudy.metrics import drilldown, paired
from chunkstudy.report import drilldown as drill_view
from test_figures import build_synthetic_run

STATS = {k: v.default for k, v in config.SCHEMA["stats"].items()}
METRICS = {k: v.default for k, v in config.SCHEMA["metrics"].items()}
N = 3
PRIMARY = design.PrimaryCell("cov-nDCG@10", "strong", "none")  # the default primary cell of the synthetic runs


@functools.lru_cache(maxsize=1)
def synthetic_run() -> dict:
    """One small synthetic run (every table of stages 01-07), built once per session for this module and
    test_report_html. Read-only: a test that needs a changed table changes a copy."""
    return build_synthetic_run(n_docs=3)


@pytest.fixture(scope="module")
def run() -> dict:
    return synthetic_run()


@pytest.fixture(scope="module")
def drill(run) -> pd.DataFrame:
    return drilldown.drilldown(run["runs"], run["chunks"], run["queries"], run["documents"], run["scores"],
                               STATS["contrasts"], PRIMARY, config.record("metrics", METRICS),
                               "synthetic", N)


# ------------------------------------------------------------------------------------------------ picking queries

def test_pick_queries_worked_example():
    deltas = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4", "q5", "q6", "q7"],
                           "delta": [0.5, -0.2, 0.0, 0.5, 0.1, -0.7, -0.2]})
    got = drilldown.pick_queries(deltas, 2)
    assert got[["direction", "pick", "query_id"]].values.tolist() == [
        ["gain", 1, "q1"], ["gain", 2, "q4"],       # tie at 0.5: the smaller query_id first
        ["loss", 1, "q6"], ["loss", 2, "q2"]]       # -0.7 first; tie at -0.2 to q2; q3 (delta 0) is neither
    assert drilldown.pick_queries(deltas, 0).empty
    with pytest.raises(drilldown.DrilldownError, match="drilldown_queries"):
        drilldown.pick_queries(deltas, -1)


@given(st.lists(st.integers(-5, 5), min_size=0, max_size=30), st.integers(0, 6))
def test_pick_queries_are_the_extremes_of_the_deltas(values, n):
    deltas = pd.DataFrame({"query_id": [f"q{i:02d}" for i in range(len(values))],
                           "delta": [v / 4 for v in values]})
    got = drilldown.pick_queries(deltas, n)
    for direction, sign in (("gain", 1), ("loss", -1)):
        picked = got[got["direction"] == direction]
        # brute force: every query of that sign, most extreme first, ties by query_id
        pool = sorted(((-sign * d, q) for q, d in zip(deltas["query_id"], deltas["delta"]) if sign * d > 0))
        assert [q for _, q in pool[:n]] == picked["query_id"].tolist()
        assert picked["pick"].tolist() == list(range(1, len(picked) + 1))


# ------------------------------------------------------------------------------------------------ the table

def test_rank_gains_sum_to_every_lists_score(run):
    """metrics.rank_gains: Σ gain/log2(rank+1) over the top k, over the list's IDCG, is score_runs' cov-nDCG."""
    ranked = metrics.rank_gains(run["runs"], run["chunks"], run["queries"], config.record("metrics", METRICS))
    keys = ["embedder", "reranker", "condition", "query_id"]
    assert (ranked["rank"] <= 10).all()
    assert np.allclose(ranked["discounted_gain"], ranked["gain"] / np.log2(ranked["rank"] + 1))
    per_list = ranked.groupby(keys).agg(dcg=("discounted_gain", "sum"), last=("dcg", "last"), idcg=("idcg", "first"),
                                        ndcg=("ndcg", "first"))
    assert np.allclose(per_list["dcg"], per_list["last"])
    recomputed = np.where(per_list["idcg"] > 0, per_list["dcg"] / per_list["idcg"].where(per_list["idcg"] > 0, 1), 0)
    assert np.allclose(recomputed, per_list["ndcg"])
    cov = run["scores"][run["scores"]["metric"] == "cov-nDCG@10"].set_index(keys)["value"]
    assert np.allclose(per_list["ndcg"], cov.reindex(per_list.index))
    assert (per_list["ndcg"] > 0).any() and (per_list["ndcg"] < 1).any()   # the check is not vacuous
    # and one list rank by rank against coverage_walk
    key = per_list[(per_list["ndcg"] > 0) & (per_list["ndcg"] < 1)].index[0]
    walk = metrics.coverage_walk(run["runs"], run["chunks"], run["queries"], config.record("metrics", METRICS),
                                 **dict(zip(keys, key)))
    one = ranked.set_index(keys).loc[key]
    assert one["gain"].tolist() == pytest.approx(walk["gain"].iloc[:len(one)].tolist())
    assert one["idcg"].iloc[0] == pytest.approx(walk.attrs["idcg"])


def test_drilldown_picks_the_extremes_of_each_contrasts_paired_deltas(run, drill):
    assert set(drill.columns) == set(drilldown.COLUMNS)
    for name, (a, b) in STATS["contrasts"].items():
        deltas = paired.paired_deltas(run["scores"], run["queries"], a, b, corpus="synthetic", metric="cov-nDCG@10",
                                     embedder="strong", reranker="none")
        ranked = deltas.sort_values(["delta", "query_id"], ascending=[False, True])
        want_gain = ranked[ranked["delta"] > 0]["query_id"].head(N).tolist()
        want_loss = deltas.sort_values(["delta", "query_id"])[lambda d: d["delta"] < 0]["query_id"].head(N).tolist()
        got = drill[drill["contrast"] == name].drop_duplicates(["direction", "pick"])
        assert got[got["direction"] == "gain"]["query_id"].tolist() == want_gain
        assert got[got["direction"] == "loss"]["query_id"].tolist() == want_loss
        assert len(want_gain) + len(want_loss) > 0
        one = deltas.set_index("query_id")
        for r in got.itertuples():
            assert (r.value_a, r.value_b, r.delta) == pytest.approx(tuple(one.loc[r.query_id, ["value_a", "value_b",
                                                                                               "delta"]]))


def test_drilldown_gains_sum_with_the_discount_to_each_querys_dcg(run, drill):
    """For every picked query and side: Σ gain/log2(rank+1) = DCG, and DCG / IDCG = the score the contrast used."""
    for (_, _, _, side), rows in drill.groupby(["contrast", "direction", "pick", "side"]):
        assert rows["rank"].tolist() == list(range(1, len(rows) + 1))
        dcg = float((rows["gain"] / np.log2(rows["rank"] + 1)).sum())
        assert dcg == pytest.approx(rows["dcg"].iloc[-1])
        score = dcg / rows["idcg"].iloc[0] if rows["idcg"].iloc[0] > 0 else 0.0
        want = rows["value_a" if side == "A" else "value_b"].iloc[0]
        assert score == pytest.approx(want, abs=1e-12)
        assert rows["condition"].iloc[0] == rows["condition_a" if side == "A" else "condition_b"].iloc[0]


def test_drilldown_rows_are_the_runs_and_chunks_of_the_primary_cell(run, drill):
    runs = run["runs"]
    prim = runs[(runs["embedder"] == "strong") & (runs["reranker"] == "none")]
    got = drill.merge(prim, on=["condition", "query_id", "rank"], suffixes=("", "_run"))
    assert len(got) == len(drill)
    assert (got["chunk_id"] == got["chunk_id_run"]).all() and np.allclose(got["score"], got["score_run"])
    chunks = run["chunks"].set_index(["condition", "chunk_id"])
    for r in drill.itertuples():
        c = chunks.loc[(r.condition, r.chunk_id)]
        assert (r.start, r.end, r.prefix, r.chunk_doc_id) == (c["start"], c["end"], c["prefix"], c["doc_id"])


def test_gold_characters_per_chunk_equal_an_independent_overlap(run, drill):
    text = run["documents"].set_index("doc_id")["text"]
    spans = run["queries"].set_index("query_id")["spans"]
    assert (drill["gold_chars"] > 0).any()
    for r in drill.itertuples():
        gold = {i for s, e in spans[r.query_id] for i in range(int(s), int(e))} if r.chunk_doc_id == r.doc_id else set()
        covered = gold & set(range(r.start, r.end))
        assert r.gold_chars == len(covered)
        assert {r.start + i for lo, hi in r.gold_ranges for i in range(lo, hi)} == covered
        assert r.content == text[r.chunk_doc_id][r.start:r.end]
        pieces = drill_view.highlight_segments(r.content, r.gold_ranges)
        assert "".join(p for p, _ in pieces) == r.content
        assert sum(len(p) for p, g in pieces if g) == r.gold_chars
    first = drill.drop_duplicates("query_id").iloc[0]
    assert first["gold_text"] == [text[first["doc_id"]][s:e] for s, e in first["gold_spans"]]


def test_merge_spans_and_gold_ranges():
    assert drilldown.merge_spans([[10, 20], [0, 5], [15, 30], [30, 31]]) == [(0, 5), (10, 31)]
    assert drilldown.gold_ranges(12, 40, [(0, 5), (10, 31)]) == [[0, 19]]
    assert drilldown.gold_ranges(5, 10, [(0, 5), (10, 31)]) == []
    assert drill_view.highlight_segments("abcdef", [[1, 3], [4, 9]]) == [("a", False), ("bc", True), ("d", False),
                                                                         ("ef", True)]


def test_a_contrast_with_an_absent_condition_has_no_rows_and_a_note(run):
    sp = dict(STATS, contrasts={"C1": ["A3", "A1"], "CX": ["A3", "Z9"]})
    d = drilldown.drilldown(run["runs"], run["chunks"], run["queries"], run["documents"], run["scores"],
                            sp["contrasts"], PRIMARY, config.record("metrics", METRICS),
                            "synthetic", 1)
    assert set(d["contrast"]) == {"C1"}
    params = config.record("", {"stats": sp, "metrics": METRICS})
    table, drills = drill_view.report_parts(d, params)
    assert [c.contrast for c in drills] == ["C1", "CX"] and drills[1].queries == ()
    assert "absent" in drills[1].notes[0]
    assert set(table.display["Contrast"]) == {"C1"}


# ------------------------------------------------------------------------------------------------ 08's views

def test_report_parts_round_only_for_display(drill):
    params = config.record("", {"stats": STATS, "metrics": METRICS})
    table, drills = drill_view.report_parts(drill, params)
    assert [c.contrast for c in drills] == list(STATS["contrasts"])
    assert drills[0].title == "C1: A3 \u2212 A1 (organization vs. contextualization)"
    assert len(table.display) == drill.drop_duplicates(["contrast", "direction", "pick"]).shape[0]
    q = drills[0].queries[0]
    assert q.direction == "gain" and q.table.display.shape == (10, 13)
    assert list(q.table.display.columns[:4]) == ["Rank", "A3: chunk", "A3: score", "A3: prefix"]
    rows = q.table.data
    a1 = rows[rows["side"] == "A"].iloc[0]
    assert q.table.display["A3: gain"].iat[0] == f"{a1['gain']:.3f}"
    assert q.table.display["A3: chunk"].iat[0].split(" ")[0] == a1["chunk_id"].split("|")[-1]
    assert ("(other doc: " in q.table.display["A3: chunk"].iat[0]) == (a1["chunk_doc_id"] != a1["doc_id"])
    assert drill_view.short_chunk_id("A3|doc|0002", "A3", "doc") == "0002"
    assert drill_view.short_chunk_id("A3|doc|0002", "A1", "doc") == "A3|doc|0002"
    assert q.table.display["A3: prefix"].iat[0] == " ".join(a1["prefix"].split())
    assert q.table.data["gain"].iat[0] == a1["gain"]            # the data view keeps the unrounded values
    dcg = float(rows[rows["side"] == "A"]["discounted_gain"].sum())
    assert f"DCG@10 = \u03a3 gain/log\u2082(rank+1) = {dcg:.3f}" in q.table.notes[0]
    assert "\u03b4 = " + f"{q.table.data['delta'].iat[0]:+.4f}" in q.title


def test_overview_has_one_row_per_picked_query(drill):
    ov = drilldown.overview(drill)
    assert len(ov) == drill.drop_duplicates(["contrast", "direction", "pick"]).shape[0]
    assert (ov["ranks_A"] == 10).all() and math.isclose(ov["gold_chars_A"].sum(),
                                                         drill[drill["side"] == "A"]["gold_chars"].sum())
