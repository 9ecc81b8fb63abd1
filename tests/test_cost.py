"""The cost of a condition (chunkstudy.stats.cost; docs/beyond.md, "Cost"): hand-computed tables, the macro windows'
token count against the late-pooling rules themselves, and the Pareto front's dominance properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunkstudy.chunks import late
from chunkstudy.stats import cost

RECORDS = [
    {"key": "k1", "tag": "induce:Apollo_8:0:r0", "text": "x" * 400, "seconds": 2.0, "cuts": 0,
     "params": {"max_tokens": 512}, "prompt_chars": 8000},
    {"key": "k2", "tag": "induce:Apollo_8:0:r1", "text": "y" * 40, "seconds": 1.0, "cuts": 2,
     "params": {"max_tokens": 100}, "prompt_chars": 4000},
    {"key": "k3", "tag": "a1:Apollo_8:0:350", "text": "ctx", "seconds": 0.5, "params": {"max_tokens": 128},
     "usage": {"prompt_tokens": 900, "completion_tokens": 60}},
    {"key": "k4", "tag": "a1:doc:with:colons:350:700", "text": "c" * 80, "seconds": 0.25,
     "params": {"max_tokens": 128}},
    {"key": "k5", "tag": "queries:gen:q7", "text": "q" * 8, "seconds": 0.1, "params": {"max_tokens": 64}},
]


def test_the_chars_per_token_estimate_is_the_plans():
    from chunkstudy import plan

    assert cost.CHARS_PER_TOKEN == plan.CHARS_PER_TOKEN


def test_call_records_become_calls_with_tokens_counted_or_estimated():
    t = cost.llm_calls_from_records(RECORDS, prompt_chars={"k4": 2000})
    assert t["use"].tolist() == ["induce", "induce", "a1", "a1", "queries"]
    assert t["doc_id"].tolist() == ["Apollo_8", "Apollo_8", "Apollo_8", "doc:with:colons", ""]
    assert t["calls"].tolist() == [1, 3, 1, 1, 1]
    # k1: 8000 / 4 prompt, 400 / 4 reply; k2: (4000 / 4) x 3 attempts, 40 / 4 + 100 x (2^2 - 1) cut replies
    assert t["prompt_tokens"].tolist()[:4] == [2000.0, 3000.0, 900.0, 500.0]
    assert math.isnan(t["prompt_tokens"].iloc[4])  # no size known for it
    assert t["reply_tokens"].tolist() == [100.0, 10.0 + 300.0, 60.0, 20.0, 2.0]
    assert t["tokens_counted"].tolist() == ["estimate", "estimate", "usage", "estimate", "estimate"]


def test_llm_cost_charges_each_condition_the_calls_it_needs():
    calls = cost.llm_calls_from_records(RECORDS, prompt_chars={"k4": 2000})
    t = cost.llm_cost(calls, {"A2": ["induce"], "A1": ["induce", "a1"], "G3": [], "(queries)": ["queries"]})
    rows = t.set_index("condition")
    assert rows.loc["A2", ["llm_calls", "llm_prompt_tokens", "llm_reply_tokens", "llm_seconds"]].tolist() == \
        [4, 5000.0, 410.0, 3.0]
    assert rows.loc["A1", ["llm_calls", "llm_prompt_tokens", "llm_reply_tokens"]].tolist() == [6, 6400.0, 490.0]
    assert rows.loc["A1", "llm_tokens_counted"] == "mixed" and rows.loc["A2", "llm_tokens_counted"] == "estimate"
    assert rows.loc["G3", ["llm_calls", "llm_prompt_tokens", "llm_reply_tokens"]].tolist() == [0, 0.0, 0.0]
    assert rows.loc["G3", "llm_tokens_counted"] == ""
    assert math.isnan(rows.loc["(queries)", "llm_prompt_tokens"])  # unknown stays unknown, never 0


CHUNKS = pd.DataFrame({
    "condition": ["A2", "A2", "A2", "A3", "A3", "A3", "A4", "A4", "A4"],
    "text_row": [0, 1, 0, 2, 3, 2, 2, 3, 2],  # A2's third chunk repeats its first text; A4 shares A3's texts
    "n_content_tokens": [100, 300, 100, 100, 300, 100, 100, 300, 100],
    "n_prefix_tokens": [0, 0, 0, 10, 12, 10, 10, 12, 10],
    "route_key": ["d|s1", "d|s2", "d|s3"] * 3,
})


def test_embedding_cost_counts_each_distinct_text_once():
    t = cost.embedding_cost(CHUNKS).set_index("condition")
    assert t.loc["A2", ["n_chunks", "n_texts", "content_tokens", "prefix_tokens", "tokens_embedded"]].tolist() == \
        [3, 2, 400, 0, 400]
    assert t.loc["A3", ["n_texts", "tokens_embedded"]].tolist() == [2, 422]
    assert t.loc["A3", "prefix_share"] == pytest.approx(22 / 422) and t.loc["A2", "prefix_share"] == 0.0
    assert t.loc["A4"].tolist() == t.loc["A3"].tolist()  # the same texts, so the same work


def test_index_cost_counts_vectors_routes_and_capped_reads():
    shape = cost.EncoderShape(dim=384, bytes_per_value=4, max_seq_length=256, special_tokens=2)
    late_reads = pd.DataFrame({"condition": ["A2"], "embedder": ["strong"], "tokens_read": [1024.0]})
    t = cost.index_cost(CHUNKS, {"strong": shape, "weak": cost.EncoderShape(384, 4, 128, 2)}, two_stage={"A4"},
                        tokens_read=late_reads)
    rows = t.set_index(["condition", "embedder"])
    # A3's distinct texts: 110 + 2 = 112, and 312 + 2 cut at 256 (strong) or 128 (weak)
    assert rows.loc[("A3", "strong"), "tokens_read"] == 112 + 256
    assert rows.loc[("A3", "weak"), "tokens_read"] == 112 + 128
    assert rows.loc[("A2", "strong"), "tokens_read"] == 1024.0  # the late-pooled reads as given
    assert rows.loc[("A2", "weak"), "tokens_read"] == 102 + 128
    assert rows.loc[("A3", "strong"), ["n_vectors", "n_route_vectors", "index_bytes"]].tolist() == \
        [3, 0, 3 * 384 * 4]
    assert rows.loc[("A4", "strong"), ["n_vectors", "n_route_vectors", "index_bytes"]].tolist() == \
        [3, 3, 6 * 384 * 4]


@given(st.lists(st.integers(0, 5000), max_size=8), st.integers(3, 700), st.data())
def test_the_macro_windows_token_count_is_the_windows_own(lengths, window, data):
    special = data.draw(st.integers(0, 2))
    overlap = data.draw(st.integers(0, window - special - 1))
    want = sum(sum(b - a + special for a, b in late.macro_windows(n, window - special, overlap)) for n in lengths)
    assert cost.late_window_tokens(lengths, window, overlap, special) == want


def test_timing_uses_this_runs_rate_per_mode_and_the_median_of_the_search_repeats():
    per = pd.DataFrame({"condition": ["A2", "A3", "L"], "embedder": ["strong"] * 3,
                        "embedding": ["independent", "independent", "late"],
                        "tokens_read": [1000.0, 3000.0, 5000.0]})
    rates = pd.DataFrame({"embedder": ["strong", "strong"], "tokens": [6000.0, 2000.0], "seconds": [3.0, 1.0],
                          "embedding": [None, "late"]})
    runs = pd.DataFrame({"embedder": ["strong"] * 3, "condition": ["A2", "A3", "A3"], "n_queries": [40] * 3,
                         "seconds": [0.2, 0.3, 0.1], "seconds_min": [0.1, 0.2, 0.05],
                         "seconds_max": [0.4, 0.5, 0.2]})
    t = cost.timing_cost(per, rates, runs)
    # independent: 6000 tokens / 3 s = 2000 tokens/s; late: 2000 tokens / 1 s, so L's 5000 tokens take 2.5 s
    assert t["embed_seconds"].tolist() == [0.5, 1.5, 2.5]
    assert t["latency_ms_per_query"].iloc[:2].tolist() == pytest.approx([5.0, 10.0])
    assert t["latency_ms_min"].iloc[:2].tolist() == pytest.approx([2.5, 6.25])
    assert t["latency_ms_max"].iloc[:2].tolist() == pytest.approx([10.0, 17.5])
    assert math.isnan(t["latency_ms_per_query"].iloc[2])
    bare = cost.timing_cost(per, None, None)
    assert bare["embed_seconds"].isna().all() and bare["latency_ms_per_query"].isna().all()
    old = cost.timing_cost(per, rates, runs.drop(columns=["seconds_min", "seconds_max"]))  # one timing per cell
    assert old["latency_ms_min"].iloc[:2].tolist() == old["latency_ms_per_query"].iloc[:2].tolist()


def test_a_late_condition_is_charged_its_own_windows_whatever_an_earlier_one_left_in_the_store():
    """L3 and L4 are the same chunks (late(A3), late(A4)): L3 ran first and encoded every window, L4 read them
    back (tokens_run 0), LREC-fixed found 6 of its 8 windows stored. Each is charged its own tokens read at the late
    rate this run measured (3 encoded windows' worth per second here), never the independent rate, and never only
    what it encoded."""
    chunks = pd.DataFrame({"condition": ["L3", "L4", "LRF", "A0"], "text_row": [0, 1, 2, 3],
                           "n_content_tokens": [10, 10, 10, 10], "n_prefix_tokens": [0, 0, 0, 0],
                           "route_key": ["s"] * 4})
    quality = pd.DataFrame({"condition": ["L3", "L4", "LRF", "A0"], "embedder": ["e"] * 4,
                            "quality": [0.5, 0.5, 0.4, 0.3]})
    late_report = pd.DataFrame({"condition": ["L3", "L4", "LRF"], "embedder": ["e"] * 3,
                                "tokens_read": [4608, 4608, 4096], "tokens_run": [4608, 0, 1024],
                                "seconds": [3.21, 0.0, 0.79]})
    embed_report = pd.DataFrame({"embedder": ["e"], "n_tokens": [1000], "seconds": [1.25]})
    t = cost.cost_table(chunks, quality, cost.llm_calls_from_records([]), {c: [] for c in quality["condition"]},
                        {"e": cost.EncoderShape(8, 4, 16, 2)}, two_stage=set(), late_report=late_report,
                        embed_report=embed_report).set_index("condition")
    rate = (4608 + 1024) / (3.21 + 0.79)
    assert t.loc["L3", "embed_seconds"] == pytest.approx(4608 / rate)
    assert t.loc["L4", "embed_seconds"] == t.loc["L3", "embed_seconds"]  # the same work, the same charge
    assert t.loc["LRF", "embed_seconds"] == pytest.approx(4096 / rate)
    assert t.loc["A0", "embed_seconds"] == pytest.approx(12 / 800)  # independent: 1000 tokens / 1.25 s


def test_estimated_seconds_divide_the_work_by_the_rate_range():
    t = pd.DataFrame({"llm_prompt_tokens": [34_000.0, 0.0], "tokens_read": [500_000.0, 62_000.0]})
    out = cost.estimated_seconds(t, {"llm_prompt_tokens": (34e3, 45e3), "tokens_read": (62e3, 5e5)})
    assert out["est_seconds_high"].tolist() == pytest.approx([1 + 500_000 / 62_000, 1.0])
    assert out["est_seconds_low"].tolist() == pytest.approx([34 / 45 + 1, 62 / 500])
    with pytest.raises(ValueError, match="low <= high"):
        cost.estimated_seconds(t, {"tokens_read": (5e5, 62e3)})
    with pytest.raises(KeyError, match="llm_reply_tokens"):
        cost.estimated_seconds(t, {"llm_reply_tokens": (1.0, 2.0)})


def test_pareto_front_hand_example():
    t = pd.DataFrame({"condition": ["A0", "A1", "A3", "P", "L", "X", "Y"],
                      "q": [0.50, 0.60, 0.62, 0.55, 0.60, np.nan, 0.62],
                      "tokens": [100, 180, 120, 120, 110, 10, 120]})
    front = cost.pareto_front(t, "q", "tokens")
    # A1 is beaten by A3 (better and cheaper); P by A3 (same cost, worse); X has no quality; A3 and Y tie: both stay
    assert dict(zip(t["condition"], front)) == {"A0": True, "A1": False, "A3": True, "P": False, "L": True,
                                                "X": False, "Y": True}
    # a second cost on which P is the cheapest: no row is now better on both, so P joins the front
    t2 = t.assign(latency=[5, 5, 5, 1, 5, 5, 5])
    two = cost.pareto_front(t2, "q", ["tokens", "latency"])
    assert dict(zip(t2["condition"], two)) == {**dict(zip(t["condition"], front)), "P": True}
    with pytest.raises(KeyError, match="latency"):
        cost.pareto_front(t, "q", "latency")


def _dominates(b: np.ndarray, a: np.ndarray) -> bool:
    """b dominates a: quality (column 0) at least a's and every cost at most a's, one of them strictly."""
    ge = b[0] >= a[0] and (b[1:] <= a[1:]).all()
    return bool(ge and (b[0] > a[0] or (b[1:] < a[1:]).any()))


@given(st.lists(st.tuples(st.sampled_from([0.1, 0.2, 0.3, 0.4, np.nan]), st.integers(0, 5), st.integers(0, 5)),
                min_size=1, max_size=25))
def test_pareto_front_is_exactly_the_undominated_rows(rows):
    t = pd.DataFrame(rows, columns=["q", "c1", "c2"])
    front = cost.pareto_front(t, "q", ["c1", "c2"]).to_numpy()
    pts = t.to_numpy(dtype=float)
    ok = ~np.isnan(pts).any(axis=1)
    for i in range(len(t)):
        if not ok[i]:
            assert not front[i]
            continue
        dominated = any(_dominates(pts[j], pts[i]) for j in range(len(t)) if ok[j] and j != i)
        assert front[i] == (not dominated)
        if dominated:  # then some row of the front dominates it (dominance is transitive and the rows finite)
            assert any(_dominates(pts[j], pts[i]) for j in np.flatnonzero(front))
    # no row of the front dominates another row of the front
    f = np.flatnonzero(front)
    assert not any(_dominates(pts[a], pts[b]) for a in f for b in f if a != b)


# ------------------------------------------------------------------------------------------- 07's cost table

def _chunks() -> pd.DataFrame:
    """Two conditions on one document: X (two texts, one shared by two chunks), L (late: rows of its own)."""
    return pd.DataFrame({"condition": ["X", "X", "X", "L", "L"], "text_row": [0, 1, 1, 2, 3],
                         "n_content_tokens": [10, 20, 20, 10, 40], "n_prefix_tokens": [2, 3, 3, 0, 0],
                         "route_key": ["s1", "s1", "s2", "s1", "s2"]})


def test_cost_table_joins_quality_llm_work_tokens_index_and_time_by_hand():
    chunks = _chunks()
    quality = pd.DataFrame({"condition": ["X", "L"], "embedder": ["e", "e"], "quality": [0.5, 0.6]})
    calls = cost.llm_calls_from_records(RECORDS, prompt_chars={"k4": 2000})
    late_report = pd.DataFrame({"condition": ["L"], "embedder": ["e"], "tokens_read": [300], "tokens_run": [300],
                                "seconds": [3.0]})
    embed_report = pd.DataFrame({"embedder": ["e"], "n_tokens": [1000], "seconds": [2.0]})
    t = cost.cost_table(chunks, quality, calls, {"X": ["induce"], "L": []}, {"e": cost.EncoderShape(8, 4, 16, 2)},
                        two_stage={"X"}, late_report=late_report, embed_report=embed_report).set_index("condition")
    assert list(t.reset_index().columns) == cost.COST_COLUMNS
    assert t.loc["X", "embedding"] == "independent" and t.loc["L", "embedding"] == "late"
    # X: texts 0 and 1 -> content 30, prefix 5; read min(12 + 2, 16) + min(23 + 2, 16) = 14 + 16
    assert t.loc["X", ["n_chunks", "n_texts", "content_tokens", "prefix_tokens", "tokens_embedded"]].tolist() == \
        [3, 2, 30, 5, 35]
    assert t.loc["X", "tokens_read"] == 30.0 and t.loc["L", "tokens_read"] == 300.0
    # index: X two-stage, 3 chunks + 2 centroids; L flat, 2 chunks; x 8 dims x 4 bytes
    assert t.loc["X", "index_bytes"] == 5 * 32 and t.loc["L", "index_bytes"] == 2 * 32
    # time: X at the embedder's measured 500 tokens/s; L at the late rate, 300 tokens / 3 s
    assert t.loc["X", "embed_seconds"] == pytest.approx(30 / 500) and t.loc["L", "embed_seconds"] == 3.0
    assert t.loc["X", "llm_tokens"] == 5000.0 + 410.0 and t.loc["L", "llm_tokens"] == 0.0
    # L is better and uses no LLM: alone on the LLM front; on tokens X is cheaper, so both are on that front
    assert t["pareto_llm"].to_dict() == {"X": False, "L": True}
    assert t["pareto_tokens"].to_dict() == {"X": True, "L": True}


def test_llm_uses_follow_the_section_tables_a_condition_is_built_from():
    from types import SimpleNamespace as NS

    conds = [NS(name="A0", prefix="none", needs=lambda: ("sections_induced",)),
             NS(name="A1", prefix="context", needs=lambda: ("sections_induced",)),
             NS(name="G3", prefix="path", needs=lambda: ("sections_gold",)),
             NS(name="SEM", prefix="none", needs=lambda: ())]
    assert cost.llm_uses(conds, induce_llm=True, contexts_llm=True) == \
        {"A0": ["induce"], "A1": ["induce", "a1"], "G3": [], "SEM": []}
    assert cost.llm_uses(conds, induce_llm=False, contexts_llm=False) == {c.name: [] for c in conds}


def test_the_call_records_are_read_as_the_cache_keeps_them(tmp_path):
    from chunkstudy.llm import cache

    assert cost.LLM_CALLS_FILE == cache.CACHE_FILE
    path = tmp_path / cost.LLM_CALLS_FILE
    c = cache.CallCache(tmp_path)
    for rec in RECORDS[:3]:
        c.put(dict(rec))
    with path.open("a") as f:
        f.write('{"key": "torn", "te')  # a torn tail: skipped, never repaired
    got = cost.read_call_records(path)
    assert sorted(r["key"] for r in got) == ["k1", "k2", "k3"]
    assert path.read_text().endswith('"te') and cost.read_call_records(tmp_path / "none.jsonl") == []


def test_a_lexical_mode_is_charged_its_bm25_index_and_a_hybrid_both_by_hand():
    """retrieve.modes [dense, bm25, hybrid]: BM25 rows read the bm25s tokens of 05's lexical_report and its index's
    bytes (and, routed, its sections'), the hybrid rows add the embedder's dense row to them; both mode rows take
    their latency from 05's timing of their own search."""
    from chunkstudy import design

    chunks = _chunks()
    quality = pd.DataFrame({"condition": ["X", "L"] * 3, "embedder": ["e", "e", "bm25", "bm25", "hybrid-e",
                                                                      "hybrid-e"], "quality": [0.5, 0.6] * 3})
    lexical = {"conditions": [
        {"condition": "X", "n_chunks": 3, "n_tokens": 70, "n_vocab": 20, "nnz": 40, "index_bytes": 404,
         "n_sections": 2, "section_bytes": 300, "index_seconds": 0.5},
        {"condition": "L", "n_chunks": 2, "n_tokens": 50, "n_vocab": 15, "nnz": 30, "index_bytes": 304,
         "n_sections": 0, "section_bytes": 0, "index_seconds": 0.25}]}
    timing = pd.DataFrame({"embedder": ["e", "bm25", "hybrid-e"], "condition": ["X"] * 3, "n_queries": [10] * 3,
                           "seconds": [0.01, 0.02, 0.04]})
    embed_report = pd.DataFrame({"embedder": ["e"], "n_tokens": [1000], "seconds": [2.0]})
    t = cost.cost_table(chunks, quality, cost.llm_calls_from_records([]), {"X": [], "L": []},
                        {"e": cost.EncoderShape(8, 4, 16, 2)}, two_stage={"X"}, embed_report=embed_report,
                        retrieval=timing, lexical=lexical,
                        retrievers=design.retrievers(["dense", "bm25", "hybrid"], ["e"])
                        ).set_index(["condition", "embedder"])
    assert list(t.reset_index().columns) == cost.COST_COLUMNS
    bm, hy, de = t.loc[("X", "bm25")], t.loc[("X", "hybrid-e")], t.loc[("X", "e")]
    assert bm["embedding"] == "none" and hy["embedding"] == "independent"
    assert t.loc[("L", "bm25"), "embedding"] == "none"
    assert (bm["tokens_read"], bm["n_vectors"], bm["n_route_vectors"], bm["dim"], bm["index_bytes"]) == \
        (70.0, 3, 2, 0, 704)
    assert bm["embed_seconds"] == 0.5 and bm["latency_ms_per_query"] == pytest.approx(2.0)
    assert hy["tokens_read"] == 70.0 + de["tokens_read"] and hy["index_bytes"] == 704 + de["index_bytes"]
    assert (hy["n_vectors"], hy["n_route_vectors"], hy["dim"]) == (3, 2 + 2, 8)
    assert hy["embed_seconds"] == pytest.approx(0.5 + de["embed_seconds"]) and hy["latency_ms_per_query"] == 4.0
    # the condition's own columns are the same in every mode; each mode has its own Pareto front
    assert (t.xs("X", level="condition")["tokens_embedded"] == 35).all()
    assert t.groupby(level="embedder")["pareto_tokens"].any().all()
