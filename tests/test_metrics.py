"""Metrics (06_metrics): the paper's worked example, policies on hand-checked cases, agreement with the plain
reference implementation (tests/test_metrics_reference.py) on random interval sets, and invariants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstudy import config, metrics, relevance
from test_metrics_reference import Chunk, coverage_gains, dcg, is_relevant, reference_metrics

DEFAULTS = {k: v.default for k, v in config.SCHEMA["metrics"].items()}
NAMES = ["cov-nDCG@10", "recall@50", "MRR", "nDCG@10", "budget-cov@512", "budget-cov@1024", "budget-cov@2048"]


# ---- table builders -------------------------------------------------------------------------------------------

def chunk_table(by_condition: dict[str, list[Chunk]], prefix: str = "") -> pd.DataFrame:
    rows = [{"condition": cond, "doc_id": c.doc_id, "chunk_id": c.chunk_id, "start": c.start, "end": c.end,
             "prefix": prefix, "n_content_tokens": c.n_content_tokens, "n_prefix_tokens": c.n_prefix_tokens,
             "route_key": c.doc_id} for cond, cs in by_condition.items() for c in cs]
    return pd.DataFrame(rows)


def query_table(qs: dict[str, tuple[str, list[tuple[int, int]]]]) -> pd.DataFrame:
    return pd.DataFrame({"query_id": list(qs), "doc_id": [d for d, _ in qs.values()], "qtype": "factoid",
                         "text": "?", "spans": [[list(s) for s in spans] for _, spans in qs.values()]})


def run_table(lists: dict[tuple[str, str, str, str], list[str]]) -> pd.DataFrame:
    rows = [{"embedder": e, "reranker": r, "condition": c, "query_id": q, "rank": i + 1, "chunk_id": cid,
             "score": float(len(ids) - i)} for (e, r, c, q), ids in lists.items() for i, cid in enumerate(ids)]
    cols = ["embedder", "reranker", "condition", "query_id", "rank", "chunk_id", "score"]
    return pd.DataFrame(rows, columns=cols)


def value(scores: pd.DataFrame, metric: str, query_id: str = "q", condition: str = "X", embedder: str = "strong"):
    v = scores[(scores.metric == metric) & (scores.query_id == query_id) & (scores.condition == condition)
               & (scores.embedder == embedder)]["value"]
    assert len(v) == 1
    return float(v.iloc[0])


def one_list(chunks: list[Chunk], ranked: list[str], spans, params=None, extra_chunks=()):
    tables = (run_table({("strong", "none", "X", "q"): ranked}), chunk_table({"X": list(chunks) + list(extra_chunks)}),
              query_table({"q": ("d", spans)}))
    return metrics.score_runs(*tables, config.record("metrics", params), "demo"), tables


# ---- the paper's worked example (appendix "Coverage-nDCG") ----------------------------------------------------

WORKED = [Chunk("a", "d", 0, 60, 10), Chunk("b", "d", 40, 100, 10), Chunk("c", "d", 200, 300, 10)]


def test_worked_example_dcg_0852_and_score_1():
    scores, tables = one_list(WORKED, ["a", "b", "c"], [(0, 100)])
    walk = metrics.coverage_walk(*tables, config.record("metrics"), embedder="strong", reranker="none", condition="X",
                                 query_id="q")
    assert walk["gain"].tolist()[:3] == pytest.approx([0.60, 0.40, 0.0])
    assert walk.attrs["dcg"] == pytest.approx(0.60 + 0.40 / math.log2(3))
    assert round(walk.attrs["dcg"], 3) == 0.852
    assert walk.attrs["idcg"] == pytest.approx(walk.attrs["dcg"])
    assert walk["ideal_chunk_id"].tolist()[:2] == ["a", "b"]
    assert value(scores, "cov-nDCG@10") == pytest.approx(1.0)
    assert walk.attrs["score"] == pytest.approx(1.0)


def test_worked_example_with_a_whole_span_chunk_scores_below_one():
    whole = Chunk("w", "d", 0, 100, 10)
    scores, tables = one_list(WORKED, ["a", "b", "c"], [(0, 100)], extra_chunks=[whole])
    # the ideal ranks [0,100) first: IDCG = 1.0, so the score is the DCG itself
    assert value(scores, "cov-nDCG@10") == pytest.approx(0.60 + 0.40 / math.log2(3))
    assert value(scores, "cov-nDCG@10") < 1.0
    walk = metrics.coverage_walk(*tables, config.record("metrics"), embedder="strong", reranker="none", condition="X",
                                 query_id="q")
    assert walk["ideal_chunk_id"].iloc[0] == "w" and walk.attrs["idcg"] == pytest.approx(1.0)


def test_redundant_chunk_earns_only_new_characters():
    # [0,100) first, then [40,100): the second adds nothing although it is relevant by the rule
    chunks = [Chunk("w", "d", 0, 100), Chunk("b", "d", 40, 100)]
    scores, tables = one_list(chunks, ["w", "b"], [(0, 100)])
    walk = metrics.coverage_walk(*tables, config.record("metrics"), embedder="strong", reranker="none", condition="X",
                                 query_id="q")
    assert walk["gain"].tolist()[:2] == [1.0, 0.0]
    assert walk["relevant"].tolist()[:2] == [True, True]
    assert value(scores, "nDCG@10") == pytest.approx(1.0)


def test_two_spans_average_their_fractions():
    # spans of 100 and 10 chars; chunk 'a' covers half of the first only: gain (0.5 + 0) / 2 = 0.25
    chunks = [Chunk("a", "d", 0, 50), Chunk("b", "d", 50, 200), Chunk("c", "d", 200, 210)]
    _, tables = one_list(chunks, ["a", "c", "b"], [(0, 100), (200, 210)])
    walk = metrics.coverage_walk(*tables, config.record("metrics"), embedder="strong", reranker="none", condition="X",
                                 query_id="q")
    assert walk["gain"].tolist()[:3] == pytest.approx([0.25, 0.5, 0.25])
    assert walk["ideal_gain"].tolist()[:3] == pytest.approx([0.5, 0.25, 0.25])


# ---- relevance rule --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk, span, expected", [
    ((0, 50), (0, 100), True),     # exactly 50% of the span
    ((0, 49), (0, 100), True),     # 49% of the span, but the whole chunk lies inside it
    ((0, 60), (10, 59), True),     # 49 of 60 chunk chars inside, but 100% of the span covered
    ((0, 100), (51, 200), False),  # 49 of 100 chunk chars, 49 of 149 span chars
    ((10, 60), (0, 1000), True),   # 5% of the span but the whole chunk inside
    ((0, 5), (1, 1000), True),     # 4 of 5 chunk chars inside = exactly 80% (0.8*5 in floating point)
    ((0, 10), (3, 1000), False),   # 70% of the chunk, 0.7% of the span
    ((0, 10), (10, 20), False),    # touching, no overlap
    ((90, 200), (0, 100), False),  # 10% of the span, 10/110 of the chunk
])
def test_relevance_rule_thresholds(chunk, span, expected):
    got = relevance.relevant(chunk[0], chunk[1], span[0], span[1], 0.5, 0.8)
    assert bool(got) is expected


def test_relevance_rule_span_side_only():
    # chunk [0,140) covers 60% of span [80,180) but only 43% of it lies inside: the span rule decides
    assert bool(relevance.relevant(0, 140, 80, 180, 0.5, 0.8))
    assert not bool(relevance.relevant(0, 140, 80, 180, 0.7, 0.8))


# ---- secondary metrics on hand-checked cases ------------------------------------------------------------------

def test_mrr_ndcg_and_recall_hand_checked():
    chunks = [Chunk(str(i), "d", 10 * i, 10 * i + 10) for i in range(10)]
    # spans: [20,30) = chunk 2 exactly; [55,75) holds chunk 6 wholly (relevant by the chunk rule) and a quarter
    # of it lies in chunk 5 (25% of the span, 50% of the chunk: not relevant) and chunk 7 alike
    scores, _ = one_list(chunks, ["0", "6", "1", "2", "5"], [(20, 30), (55, 75)])
    assert value(scores, "MRR") == pytest.approx(0.5)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)              # relevant at ranks 2 and 4
    assert value(scores, "nDCG@10") == pytest.approx(dcg / (1 + 1 / math.log2(3)))   # two relevant chunks exist
    assert value(scores, "recall@50") == pytest.approx(1.0)
    scores, _ = one_list(chunks, ["0", "6", "2"], [(20, 30), (55, 75)], {"recall_k": 2})
    assert value(scores, "recall@2") == pytest.approx(0.5)     # chunk 6 covers exactly 50% of span 2


def test_recall_counts_a_span_covered_only_by_the_union():
    # no single chunk covers >= 50% of [0,100) (chunks of 30 chars straddle it), but two together do
    chunks = [Chunk("a", "d", 0, 30), Chunk("b", "d", 30, 60), Chunk("c", "d", 60, 90), Chunk("e", "d", 90, 130)]
    scores, _ = one_list(chunks, ["a", "b"], [(0, 100)], {"span_frac": 0.5, "chunk_frac": 1.0})
    assert value(scores, "recall@50") == 1.0
    scores, _ = one_list(chunks, ["a"], [(0, 100)], {"span_frac": 0.5, "chunk_frac": 1.0})
    assert value(scores, "recall@50") == 0.0


BUDGET_CHUNKS = [
    Chunk("a", "d", 0, 50, n_content_tokens=300, n_prefix_tokens=100),   # 400 tokens
    Chunk("b", "d", 50, 100, n_content_tokens=200, n_prefix_tokens=0),   # 200 tokens: does not fit after a
    Chunk("c", "d", 100, 140, n_content_tokens=50, n_prefix_tokens=10),  # 60 tokens: fits after a if b is skipped
]


@pytest.mark.parametrize("policy, expected", [
    ("truncate", (50 + 28) / 140),   # b keeps floor(50 * 112 / 200) = 28 chars, then the window is full
    ("stop", 50 / 140),              # b ends the walk
    ("skip", (50 + 40) / 140),       # b is left out, c still fits (460 <= 512)
])
def test_budget_partial_policies(policy, expected):
    scores, _ = one_list(BUDGET_CHUNKS, ["a", "b", "c"], [(0, 140)], {"budgets": [512], "budget_partial": policy})
    assert value(scores, "budget-cov@512") == pytest.approx(expected)


def test_budget_charges_prefix_tokens_and_foreign_chunks():
    # the same content, with a 100-token prefix on 'a', fits less; a foreign chunk uses budget but covers nothing
    foreign = Chunk("z", "other", 0, 500, n_content_tokens=400)
    params = {"budgets": [512], "budget_partial": "stop"}
    plain = [Chunk("a", "d", 0, 50, 300), Chunk("b", "d", 50, 100, 200)]
    scores, _ = one_list(plain, ["a", "b"], [(0, 100)], params)
    assert value(scores, "budget-cov@512") == 1.0
    prefixed = [Chunk("a", "d", 0, 50, 300, 100), Chunk("b", "d", 50, 100, 200)]
    scores, _ = one_list(prefixed, ["a", "b"], [(0, 100)], params)
    assert value(scores, "budget-cov@512") == 0.5
    scores, _ = one_list(plain, ["z", "a", "b"], [(0, 100)], params, extra_chunks=[foreign])
    assert value(scores, "budget-cov@512") == 0.0


def test_budget_uses_union_of_gold_characters():
    # overlapping spans [0,60) and [40,100): 100 gold characters, not 120
    chunks = [Chunk("a", "d", 0, 50, 10), Chunk("b", "d", 50, 100, 10)]
    scores, _ = one_list(chunks, ["a"], [(0, 60), (40, 100)], {"budgets": [512]})
    assert value(scores, "budget-cov@512") == pytest.approx(0.5)


# ---- table shape, zero results, errors -------------------------------------------------------------------------

def test_scores_table_shape_and_zero_result_queries():
    chunks = {"X": [Chunk("x1", "d", 0, 100)], "Y": [Chunk("y1", "d", 0, 100)]}
    runs = run_table({("strong", "none", "X", "q"): ["x1"], ("weak", "none", "Y", "q2"): ["y1"]})
    queries = query_table({"q": ("d", [(0, 50)]), "q2": ("d", [(50, 100)])})
    scores = metrics.score_runs(runs, chunk_table(chunks), queries, config.record("metrics", DEFAULTS), "demo")
    assert list(scores.columns[:7]) == metrics.SCORE_COLUMNS
    assert sorted(scores.metric.unique()) == sorted(NAMES)
    # two cell-conditions x two queries x seven metrics; q2 has no list under (strong, X): all zero
    assert len(scores) == 2 * 2 * 7
    assert (scores[(scores.condition == "X") & (scores.query_id == "q2")].value == 0).all()
    assert (scores[(scores.condition == "X") & (scores.query_id == "q")].value == 1).all()
    assert set(scores.doc_id) == {"d"} and set(scores.corpus) == {"demo"}


def test_metric_names_follow_parameters():
    assert metrics.metric_names(config.record("metrics", DEFAULTS)) == NAMES
    assert metrics.metric_names(config.record("metrics", {"cutoff": 5, "recall_k": 20, "budgets": [256]})) == [
        "cov-nDCG@5", "recall@20", "MRR", "nDCG@5", "budget-cov@256"]
    with pytest.raises(config.ConfigError, match="budget_partial"):
        metrics.metric_names(config.record("metrics", {"budget_partial": "round"}))
    with pytest.raises(config.ConfigError, match="unknown key"):
        metrics.metric_names(config.record("metrics", {"cutof": 5}))


@pytest.mark.parametrize("mutate, message", [
    (lambda r, c, q: (r.assign(chunk_id=["a", "nope", "c"]), c, q), "not in the chunks table"),
    (lambda r, c, q: (r.assign(chunk_id=["a", "a", "c"]), c, q), "ranked twice"),
    (lambda r, c, q: (r.assign(rank=[1, 1, 2]), c, q), "appears twice"),
    (lambda r, c, q: (r.assign(query_id="q9"), c, q), "not in the queries"),
    (lambda r, c, q: (r, c, q.assign(spans=[[]])), "no gold spans"),
    (lambda r, c, q: (r, c, q.assign(spans=[[[5, 5]]])), "0 <= start < end"),
    (lambda r, c, q: (r.assign(condition="Z"), c, q), "has no chunks"),
    (lambda r, c, q: (r, c.assign(chunk_id="a"), q), "appears twice in one condition"),
    (lambda r, c, q: (r.drop(columns="rank"), c, q), "missing columns"),
])
def test_bad_inputs_raise_with_names(mutate, message):
    _, tables = one_list(WORKED, ["a", "b", "c"], [(0, 100)])
    with pytest.raises(metrics.MetricsInputError, match=message):
        metrics.score_runs(*mutate(*tables), config.record("metrics"), "demo")


def test_inputs_are_not_mutated():
    _, tables = one_list(WORKED, ["c", "b", "a"], [(0, 100)])
    copies = [t.copy(deep=True) for t in tables]
    metrics.score_runs(*tables, config.record("metrics"), "demo")
    for before, after in zip(copies, tables):
        pd.testing.assert_frame_equal(before, after)


# ---- the vectorised novelty term against sets --------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 15)), max_size=30))
def test_new_coverage_matches_sets(rows):
    rows = sorted(rows, key=lambda r: r[0])         # stable: order inside a group = list order
    group = np.array([r[0] for r in rows], dtype=np.int64)
    lo = np.array([r[1] for r in rows], dtype=np.int64)
    hi = lo + np.array([r[2] for r in rows], dtype=np.int64)
    got = metrics.new_coverage(group, lo, hi)
    seen: dict[int, set] = {}
    want = []
    for g, a, b in zip(group, lo, hi):
        s = seen.setdefault(int(g), set())
        want.append(len(set(range(a, b)) - s))
        s |= set(range(a, b))
    assert got.tolist() == want


# ---- agreement with the reference on random interval sets (hypothesis) ----------------------------------------

@st.composite
def cases(draw, tiling: bool):
    """A small random corpus: 1-3 documents, 1-2 conditions (tilings, or arbitrary overlapping intervals),
    1-2 queries per document with 1-3 gold spans, two embedders with random run lists, random parameters."""
    docs = {f"d{i}": draw(st.integers(5, 160)) for i in range(draw(st.integers(1, 3)))}
    conds = ["X", "Y"][:draw(st.integers(1, 2))]
    tokens = st.tuples(st.integers(0, 60), st.integers(0, 20))
    by_cond: dict[str, list[Chunk]] = {}
    for cond in conds:
        for doc, n in docs.items():
            if tiling:
                cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=min(8, n - 1))))
                bounds = list(zip([0] + cuts, cuts + [n]))
            else:
                bounds = [tuple(sorted(draw(st.tuples(st.integers(0, n), st.integers(0, n)))))
                          for _ in range(draw(st.integers(1, 7)))]
            for i, (s, e) in enumerate(bounds):
                nc, npx = draw(tokens)
                by_cond.setdefault(cond, []).append(Chunk(f"{cond}-{doc}-{i}", doc, s, e, nc, npx))
    queries = {}
    for doc, n in docs.items():
        for j in range(draw(st.integers(1, 2))):
            spans = []
            for _ in range(draw(st.integers(1, 3))):
                s = draw(st.integers(0, n - 1))
                spans.append((s, draw(st.integers(s + 1, n))))
            queries[f"q-{doc}-{j}"] = (doc, spans)
    lists = {}
    for emb in ("strong", "weak"):
        for cond in conds:
            for qid in queries:
                pool = [c.chunk_id for c in by_cond[cond]]
                ids = draw(st.permutations(pool))[:draw(st.integers(0, min(12, len(pool))))]
                if ids:
                    lists[(emb, "none", cond, qid)] = ids
    params = {"cutoff": draw(st.integers(1, 5)), "recall_k": draw(st.integers(1, 8)),
              "budgets": sorted(draw(st.sets(st.integers(1, 150), min_size=1, max_size=2))),
              "span_frac": draw(st.sampled_from([0.5, 0.25, 1.0, 0.3])),
              "chunk_frac": draw(st.sampled_from([0.8, 0.5, 1.0, 0.7])),
              "budget_partial": draw(st.sampled_from(["truncate", "stop", "skip"]))}
    return by_cond, queries, lists, params


def check_against_reference(by_cond, queries, lists, params):
    scores = metrics.score_runs(run_table(lists), chunk_table(by_cond), query_table(queries),
                                config.record("metrics", params), "t")
    names = metrics.metric_names(config.record("metrics", params))
    lookup = {c.chunk_id: c for cs in by_cond.values() for c in cs}
    got = scores.set_index(["embedder", "condition", "query_id", "metric"])["value"]
    # every (embedder, condition) with at least one list is scored for every query (a query it did not retrieve for
    # scores 0), each on every metric: no more, no fewer rows
    present = {(emb, cond) for emb, _, cond, _ in lists}
    want_keys = {(emb, cond, qid, m) for emb, cond in present for qid in queries for m in names}
    assert set(got.index) == want_keys and len(got) == len(want_keys)
    for (emb, cond, qid, metric), v in got.items():
        doc, spans = queries[qid]
        ranked = [lookup[i] for i in lists.get((emb, "none", cond, qid), [])]
        own = [c for c in by_cond[cond] if c.doc_id == doc]
        want = reference_metrics(ranked, own, doc, spans, params)
        assert set(want) == set(names)
        assert v == pytest.approx(want[metric], abs=1e-12), (emb, cond, qid, metric)
    return scores


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=True))
def test_agrees_with_reference_on_tilings(case):
    scores = check_against_reference(*case)
    assert scores.value.between(0.0, 1.0).all()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=False))
def test_agrees_with_reference_on_overlapping_intervals(case):
    check_against_reference(*case)


def best_ordering_dcg(own: list[Chunk], doc: str, spans, k: int) -> float:
    """The largest DCG@k over every ordering of ``min(k, n)`` of ``own``, exactly: the gain of the chunk at rank i
    depends only on the *set* of chunks above it (what they already cover), so the best DCG of each set of m chunks
    is the best, over its members c, of the best DCG of the set without c plus c's gain at rank m (dynamic
    programming over the subsets, as the brute force over permutations but without repeating shared prefixes)."""
    n, m = len(own), min(k, len(own))
    best = {0: 0.0}  # bitmask of the chunks ranked so far -> the best DCG of any ordering of them
    for size in range(1, m + 1):
        nxt: dict[int, float] = {}
        for mask, value in best.items():
            above = [own[i] for i in range(n) if mask >> i & 1]
            for i in range(n):
                if not mask >> i & 1:
                    got = value + float(coverage_gains(above + [own[i]], doc, spans)[-1]) / math.log2(size + 1)
                    nxt[mask | 1 << i] = max(nxt.get(mask | 1 << i, -1.0), got)
        best = nxt
    return max(best.values())


def test_best_ordering_dcg_equals_the_brute_force_over_permutations():
    """The oracle's dynamic programme against the literal maximum over permutations, on tilings and on overlapping
    chunks (where the order of the chunks above changes nothing but the set does)."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 7))
        own = [Chunk(f"c{i}", "d", int(s), int(s + rng.integers(1, 40))) for i, s in enumerate(rng.integers(0, 80, n))]
        spans = [(int(s), int(s + rng.integers(1, 50))) for s in rng.integers(0, 90, int(rng.integers(1, 4)))]
        k = int(rng.integers(1, 6))
        brute = max(dcg(coverage_gains(list(p), "d", spans), k) for p in itertools.permutations(own, min(k, n)))
        assert best_ordering_dcg(own, "d", spans, k) == pytest.approx(brute, abs=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=True))
def test_ideal_is_the_best_ordering_by_brute_force(case):
    """An oracle independent of the greedy algorithm (which metrics and the reference share): the largest DCG@k over
    every ordering of k of the condition's own chunks (:func:`best_ordering_dcg`, checked against the literal
    maximum over permutations above). On a tiling greedy is optimal, so IDCG must equal it."""
    by_cond, queries, _, params = case
    k = params["cutoff"]
    chunks = chunk_table(by_cond)
    for cond, own_all in by_cond.items():
        for qid, (doc, spans) in queries.items():
            own = [c for c in own_all if c.doc_id == doc]
            best = best_ordering_dcg(own, doc, spans, k)
            walk = metrics.coverage_walk(run_table({("e", "none", cond, qid): [own[0].chunk_id]}), chunks,
                                         query_table(queries), config.record("metrics", params), embedder="e",
                                         reranker="none", condition=cond, query_id=qid)
            assert walk.attrs["idcg"] == pytest.approx(best, abs=1e-12)


def test_greedy_ideal_can_miss_the_optimum_on_overlapping_chunks():
    """Why the appendix calls greedy a stand-in: with overlapping chunks it can be beaten. Gold [0, 100), k = 2,
    chunks a = [20, 80), b = [0, 50), c = [50, 100). Greedy takes a (0.6), then b or c (0.2 new): IDCG = 0.6 +
    0.2/log2(3) = 0.726; the best ordering, b then c, reaches 0.5 + 0.5/log2(3) = 0.815, so that ranking scores
    0.815 / 0.726 = 1.12 — the score can exceed 1 for overlapping chunk sets, as the metrics docstring says."""
    own = [Chunk("a", "d", 20, 80), Chunk("b", "d", 0, 50), Chunk("c", "d", 50, 100)]
    spans = [(0, 100)]
    best = max(dcg(coverage_gains(list(p), "d", spans), 2) for p in itertools.permutations(own, 2))
    assert best == pytest.approx(0.5 + 0.5 / math.log2(3))
    walk = metrics.coverage_walk(run_table({("e", "none", "X", "q"): ["b", "c"]}), chunk_table({"X": own}),
                                 query_table({"q": ("d", spans)}), config.record("metrics", {"cutoff": 2}),
                                 embedder="e", reranker="none", condition="X", query_id="q")
    assert walk.attrs["idcg"] == pytest.approx(0.6 + 0.2 / math.log2(3))
    assert walk.attrs["dcg"] == pytest.approx(best)
    assert walk.attrs["score"] == pytest.approx(best / (0.6 + 0.2 / math.log2(3)))
    assert walk.attrs["score"] > 1.0


# ---- invariants ------------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=True))
def test_perfect_ranking_scores_one(case):
    by_cond, queries, _, params = case
    params = dict(params, recall_k=50)
    lists, has_rel = {}, {}
    for cond, chunks in by_cond.items():
        for qid, (doc, spans) in queries.items():
            own = [c for c in chunks if c.doc_id == doc]
            # a tiling's greedy ideal is its chunks by descending coverage gain: that order is the perfect ranking
            gain = {c.chunk_id: sum(len(set(range(c.start, c.end)) & set(range(s, e))) / (e - s) for s, e in spans)
                    for c in own}
            lists[("cov", "none", cond, qid)] = sorted(gain, key=lambda i: -gain[i])
            # for the binary metrics the perfect ranking puts the relevant chunks first
            rel = [c.chunk_id for c in own if is_relevant(c, doc, spans, params["span_frac"], params["chunk_frac"])]
            lists[("bin", "none", cond, qid)] = rel + [c.chunk_id for c in own if c.chunk_id not in rel]
            has_rel[(cond, qid)] = bool(rel)
    scores = metrics.score_runs(run_table(lists), chunk_table(by_cond), query_table(queries),
                                config.record("metrics", params), "t")
    k = params["cutoff"]
    for embedder, metric in [("cov", f"cov-nDCG@{k}"), ("cov", "recall@50"), ("bin", "MRR"), ("bin", f"nDCG@{k}"),
                             ("bin", "recall@50")]:
        got = scores[(scores.metric == metric) & (scores.embedder == embedder)]
        # a query none of whose chunks passes the relevance rule has no relevant chunk to rank first (and its
        # binary ideal is 0): it scores 0 on MRR/nDCG by definition
        want = [1.0 if metric.startswith(("cov", "recall")) or has_rel[(c, q)] else 0.0
                for c, q in zip(got.condition, got.query_id)]
        np.testing.assert_allclose(got.value, want, err_msg=metric)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=True), st.integers(0, 10 ** 6))
def test_other_document_chunks_contribute_nothing(case, seed):
    by_cond, queries, lists, params = case
    # a twin document with identical offsets: its chunks overlap the gold offsets but belong elsewhere
    twin = {cond: cs + [Chunk("twin-" + c.chunk_id, "twin-" + c.doc_id, c.start, c.end, c.n_content_tokens,
                              c.n_prefix_tokens) for c in cs] for cond, cs in by_cond.items()}
    foreign_lists = {key: ["twin-" + i for i in ids] for key, ids in lists.items()}
    scores = metrics.score_runs(run_table(foreign_lists), chunk_table(twin), query_table(queries),
                                config.record("metrics", params), "t")
    assert (scores.value == 0).all()
    # inserting foreign chunks after the cutoff/recall depth changes none of the rank-cut metrics
    base = metrics.score_runs(run_table(lists), chunk_table(twin), query_table(queries),
                              config.record("metrics", params), "t")
    depth = max(params["cutoff"], params["recall_k"])
    rng = np.random.default_rng(seed)
    padded = {}
    for key, ids in lists.items():
        pad = [i for i in rng.permutation(foreign_lists[key]).tolist()]
        padded[key] = ids[:depth] + pad + ids[depth:]
    more = metrics.score_runs(run_table(padded), chunk_table(twin), query_table(queries),
                              config.record("metrics", params), "t")
    keep = ~base.metric.str.startswith("budget") & (base.metric != "MRR")
    np.testing.assert_allclose(more[keep].value.to_numpy(), base[keep].value.to_numpy())
    # appended at the very end, they change no relevance metric at all (MRR included)
    tail = {key: ids + foreign_lists[key] for key, ids in lists.items()}
    more = metrics.score_runs(run_table(tail), chunk_table(twin), query_table(queries),
                              config.record("metrics", params), "t")
    keep = ~base.metric.str.startswith("budget")
    np.testing.assert_allclose(more[keep].value.to_numpy(), base[keep].value.to_numpy())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(tiling=True), st.integers(1, 200))
def test_prefix_changes_no_relevance(case, extra_prefix_tokens):
    by_cond, queries, lists, params = case
    base = metrics.score_runs(run_table(lists), chunk_table(by_cond), query_table(queries),
                              config.record("metrics", params), "t")
    longer = {cond: [Chunk(c.chunk_id, c.doc_id, c.start, c.end, c.n_content_tokens,
                           c.n_prefix_tokens + extra_prefix_tokens) for c in cs] for cond, cs in by_cond.items()}
    prefixed = metrics.score_runs(run_table(lists), chunk_table(longer, prefix="[Title › Section]\n\n"),
                                  query_table(queries), config.record("metrics", params), "t")
    relevance = ~base.metric.str.startswith("budget")
    np.testing.assert_array_equal(prefixed[relevance].value.to_numpy(), base[relevance].value.to_numpy())
    # the budget metric is the only one prefixes touch; under `truncate` and `stop` only downwards. `skip` is not
    # monotone in prefix cost (test_skip_budget_is_not_monotone_in_prefix_cost), so no direction is asserted there
    if params["budget_partial"] in ("truncate", "stop"):
        assert (prefixed[~relevance].value.to_numpy() <= base[~relevance].value.to_numpy() + 1e-12).all()


def test_skip_budget_is_not_monotone_in_prefix_cost():
    """The counterexample that broke the old property: budget 10, gold [0, 10), ranking a = [0, 1) at 6 tokens then
    b = [1, 10) at 5 tokens. Without prefixes `skip` takes a (6), cannot fit b (11 > 10): coverage 0.1. With 5 prefix
    tokens on every chunk a costs 11 and is skipped, b costs 10 and fits: coverage 0.9. `truncate` and `stop` only
    fall."""
    spans = [(0, 10)]
    bare = [Chunk("a", "d", 0, 1, 6, 0), Chunk("b", "d", 1, 10, 5, 0)]
    prefixed = [Chunk("a", "d", 0, 1, 6, 5), Chunk("b", "d", 1, 10, 5, 5)]
    got = {}
    for policy in ("skip", "truncate", "stop"):
        params = {"budgets": [10], "budget_partial": policy}
        for name, chunks in (("bare", bare), ("prefixed", prefixed)):
            scores, _ = one_list(chunks, ["a", "b"], spans, params)
            got[(policy, name)] = value(scores, "budget-cov@10")
    assert got[("skip", "bare")] == pytest.approx(0.1)
    assert got[("skip", "prefixed")] == pytest.approx(0.9)
    # truncate: bare a (6) then 4 of b's 5 content tokens -> 1 + floor(9 * 4 / 5) = 8 characters; prefixed: a is
    # charged 5 + 5 of its 6 content tokens -> floor(1 * 5 / 6) = 0 characters, and the budget is full
    assert got[("truncate", "bare")] == pytest.approx(0.8)
    assert got[("truncate", "prefixed")] == pytest.approx(0.0)
    assert got[("stop", "bare")] == pytest.approx(0.1)
    assert got[("stop", "prefixed")] == pytest.approx(0.0)


def test_cell_means_is_wide_by_metric():
    chunks = {"X": [Chunk("x1", "d", 0, 100)]}
    runs = run_table({("strong", "none", "X", "q"): ["x1"], ("strong", "none", "X", "q2"): []})
    queries = query_table({"q": ("d", [(0, 50)]), "q2": ("d", [(50, 100)])})
    means = metrics.cell_means(metrics.score_runs(runs, chunk_table(chunks), queries,
                                                  config.record("metrics", DEFAULTS), "demo"))
    assert list(means.columns) == NAMES
    assert means.loc[("strong", "none", "X"), "cov-nDCG@10"] == pytest.approx(0.5)
