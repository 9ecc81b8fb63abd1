"""Retrieval: exact flat search (oracle: numpy argsort), two-stage invariants (hypothesis), section recall on
hand-made documents, and the whole stage on a small synthetic corpus."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from chunkstudy import artifacts, config, retrieve


def unit(rng, n, d):
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def shuffled_ids(rng, n):
    """Chunk ids whose sort order differs from row order, so tie-breaking by id is visible."""
    return np.array([f"c{v:06d}" for v in rng.permutation(n)])


def oracle(q, c, ids, k):
    """Plain numpy: float64 score matrix, full sort by (-score, chunk_id)."""
    s = q.astype(np.float64) @ c.astype(np.float64).T
    order = np.array([np.lexsort((ids, -row))[:k] for row in s])
    return order, np.take_along_axis(s, order, axis=1)


# ---------------------------------------------------------------------------------------------- flat search


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), d=st.integers(1, 12), k=st.integers(1, 60),
       backend=st.sampled_from(["faiss", "numpy"]))
def test_flat_equals_numpy_argsort_with_ties(seed, n, d, k, backend):
    # entries in {-1, -1/2, 0, 1/2, 1}: every inner product is exact in float32 and float64, and many are equal,
    # so the order among ties is decided by chunk_id alone
    rng = np.random.default_rng(seed)
    c = (rng.integers(-2, 3, size=(n, d)) / 2).astype(np.float32)
    q = (rng.integers(-2, 3, size=(7, d)) / 2).astype(np.float32)
    ids = shuffled_ids(rng, n)
    idx, scores = retrieve.flat_search(q, c, ids, k=k, backend=backend)
    want_idx, want_scores = oracle(q, c, ids, min(k, n))
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(scores, want_scores)


@pytest.mark.parametrize("backend", ["faiss", "numpy"])
def test_flat_equals_numpy_argsort_on_unit_vectors(backend):
    rng = np.random.default_rng(1)
    c, q = unit(rng, 3000, 64), unit(rng, 200, 64)
    ids = shuffled_ids(rng, 3000)
    idx, scores = retrieve.flat_search(q, c, ids, k=50, backend=backend)
    want_idx, want_scores = oracle(q, c, ids, 50)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-12)


def test_a_tie_group_larger_than_the_candidate_list_is_cut_by_chunk_id():
    # 200 copies of one vector: every query ties on all of them; faiss' heap keeps an arbitrary subset, the
    # result must still be the 10 smallest chunk ids of the group
    rng = np.random.default_rng(2)
    c = unit(rng, 500, 16)
    c[100:300] = c[0]
    ids = shuffled_ids(rng, 500)
    q = np.repeat(c[:1], 3, axis=0)
    idx, scores = retrieve.flat_search(q, c, ids, k=10, backend="faiss")
    group = np.r_[0, np.arange(100, 300)]
    want = group[np.argsort(ids[group])][:10]
    for row in idx:
        np.testing.assert_array_equal(row, want)
    assert (scores == scores[0, 0]).all()


def test_backends_agree_exactly():
    rng = np.random.default_rng(3)
    c, q = unit(rng, 2000, 48), unit(rng, 100, 48)
    c[500:520] = c[3]
    ids = shuffled_ids(rng, 2000)
    a, b = retrieve.flat_search(q, c, ids, 30, "faiss"), retrieve.flat_search(q, c, ids, 30, "numpy")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_flat_k_larger_than_corpus_and_input_errors():
    rng = np.random.default_rng(4)
    c, q = unit(rng, 5, 8), unit(rng, 2, 8)
    idx, scores = retrieve.flat_search(q, c, list("abcde"), k=50, backend="numpy")
    assert idx.shape == (2, 5) and sorted(idx[0]) == [0, 1, 2, 3, 4]
    assert (np.diff(scores, axis=1) <= 0).all()
    with pytest.raises(ValueError, match="occurs more than once"):
        retrieve.flat_search(q, c, list("abcda"), k=3, backend="numpy")
    with pytest.raises(ValueError, match="dimension"):
        retrieve.flat_search(unit(rng, 2, 4), c, list("abcde"), k=3, backend="numpy")
    with pytest.raises(ValueError, match="5 chunk vectors"):
        retrieve.flat_search(q, c, list("abcd"), k=3, backend="numpy")
    with pytest.raises(ValueError, match="not one of"):
        retrieve.flat_search(q, c, list("abcde"), k=3, backend="annoy")
    bad = c.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="row 2"):
        retrieve.flat_search(q, bad, list("abcde"), k=3, backend="numpy")


# ---------------------------------------------------------------------------------------------- two-stage


def test_centroid_is_the_renormalised_mean_of_the_same_vectors():
    rng = np.random.default_rng(5)
    c = unit(rng, 40, 8)
    keys = np.array(["b", "a", "c", "a"] * 10)
    uniq, cent, codes = retrieve.section_centroids(c, keys)
    assert list(uniq) == ["a", "b", "c"]
    for j, key in enumerate(uniq):
        mean = c[keys == key].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(cent[j], mean / np.linalg.norm(mean), atol=1e-6)
        assert (codes[keys == key] == j).all()
    zero = np.vstack([c[:1], -c[:1]])
    with pytest.raises(ValueError, match="'x'.*sum to zero"):
        retrieve.section_centroids(zero, ["x", "x"])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), n_keys=st.integers(1, 15), k=st.integers(1, 40),
       n_sections=st.integers(1, 6), backend=st.sampled_from(["faiss", "numpy"]))
def test_two_stage_invariants(seed, n, n_keys, k, n_sections, backend):
    rng = np.random.default_rng(seed)
    c, q = unit(rng, n, 6), unit(rng, 5, 6)
    ids = shuffled_ids(rng, n)
    keys = np.array([f"s{v}" for v in rng.integers(0, n_keys, n)])
    res = retrieve.two_stage_search(q, c, ids, keys, k=k, n_sections=n_sections, backend=backend)
    g_idx, g_scores = retrieve.flat_search(q, c, ids, k=min(k, n), backend=backend)
    uniq, cent, _ = retrieve.section_centroids(c, keys)
    kk = min(k, n)
    assert res.idx.shape == (5, kk)  # backfill fills the list to k (or to all chunks)
    for i in range(5):
        row = res.idx[i]
        assert len(set(row)) == kk  # no chunk twice
        # stage 1 = top sections by centroid score, ties by key (oracle: numpy on the centroids)
        sec_scores = cent.astype(np.float64) @ q[i].astype(np.float64)
        want_routed = uniq[np.lexsort((uniq, -sec_scores))][:n_sections]
        assert list(res.routed[i]) == list(want_routed)
        in_routed = np.isin(keys[row], res.routed[i])
        m = res.n_routed[i]
        # routed chunks first, then only backfill, and every routed chunk is listed when they fit in k
        assert in_routed[:m].all() and not in_routed[m:].any()
        assert m == min(kk, np.isin(keys, res.routed[i]).sum())
        # the routed part is ranked by (-score, chunk_id)
        assert list(np.lexsort((ids[row[:m]], -res.scores[i, :m]))) == list(range(m))
        # the backfill is the global ranking in its order, minus chunks already listed
        listed = set(row[:m])
        want_fill = [j for j in g_idx[i] if j not in listed][:kk - m]
        assert list(row[m:]) == want_fill
        # scores are the very scores flat search gives these chunks
        flat_full = retrieve.flat_search(q[i:i + 1], c, ids, k=n, backend=backend)
        score_of = dict(zip(flat_full[0][0], flat_full[1][0]))
        assert [score_of[j] for j in row] == list(res.scores[i])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 200), n_keys=st.integers(1, 5), k=st.integers(1, 60))
def test_two_stage_equals_flat_when_routing_keeps_every_section(seed, n, n_keys, k):
    rng = np.random.default_rng(seed)
    c, q = unit(rng, n, 8), unit(rng, 9, 8)
    c[: n // 3] = c[0]  # ties too
    ids = shuffled_ids(rng, n)
    keys = rng.integers(0, n_keys, n).astype(str)
    res = retrieve.two_stage_search(q, c, ids, keys, k=k, n_sections=5, backend="numpy")
    idx, scores = retrieve.flat_search(q, c, ids, k=k, backend="numpy")
    np.testing.assert_array_equal(res.idx, idx)
    np.testing.assert_array_equal(res.scores, scores)
    assert (res.n_routed == min(k, n)).all()


# ---------------------------------------------------------------------------------------------- section recall


def hand_chunks():
    """Doc 'D' (500 chars): lead [0,102), s1 = [102,200)+[200,302), s2 = [302,400), and s1 again at [400,500)
    (a chunk merged across, so s1's extent has a gap). Doc 'E' reuses the route_key 's1' for its own section."""
    return pd.DataFrame({
        "condition": "A4",
        "doc_id": ["D", "D", "D", "D", "D", "E", "E"],
        "chunk_id": ["d0", "d1", "d2", "d3", "d4", "e0", "e1"],
        "start": [0, 102, 200, 302, 400, 0, 50],
        "end": [102, 200, 302, 400, 500, 50, 90],
        "route_key": ["lead", "s1", "s1", "s2", "s1", "lead", "s1"],
    })


def test_section_extents_union_of_chunks():
    ext = retrieve.section_extents(hand_chunks())
    got = sorted(map(tuple, ext[["doc_id", "route_key", "start", "end"]].to_numpy().tolist()))
    assert got == [("D", "lead", 0, 102), ("D", "s1", 102, 302), ("D", "s1", 400, 500), ("D", "s2", 302, 400),
                   ("E", "lead", 0, 50), ("E", "s1", 50, 90)]


def routed_frame(rows):
    return pd.DataFrame(rows, columns=["query_id", "route_rank", "doc_id", "route_key"])


def test_section_recall_hand_made():
    queries = pd.DataFrame({
        "query_id": ["q_in", "q_miss", "q_edge", "q_touch", "q_other_doc", "q_two", "q_gap", "q_empty"],
        "doc_id": ["D", "D", "D", "D", "D", "D", "D", "D"],
        "spans": [[[150, 160]],            # inside s1
                  [[150, 160]],            # inside s1, but only s2 is routed
                  [[300, 310]],            # straddles s1|s2: s1 shares chars 300-301
                  [[302, 310]],            # starts where s1's extent ends (half-open): s2 only
                  [[150, 160]],            # s1 of doc E is routed: another document's section never counts
                  [[10, 20], [350, 360]],  # two spans: lead and s2
                  [[310, 320]],            # inside s2 (s1's gap at [302, 400) must not count for s1)
                  []],                     # no evidence: recall undefined
    })
    routed = routed_frame([
        ("q_in", 1, "D", "s2"), ("q_in", 2, "D", "s1"),
        ("q_miss", 1, "D", "s2"),
        ("q_edge", 1, "D", "s1"),
        ("q_touch", 1, "D", "s1"),
        ("q_other_doc", 1, "E", "s1"), ("q_other_doc", 2, "D", "lead"),
        ("q_two", 1, "D", "s1"), ("q_two", 2, "D", "s2"), ("q_two", 3, "D", "lead"),
        ("q_gap", 1, "D", "s1"),
        ("q_empty", 1, "D", "s1"),
    ])
    out = retrieve.section_recall(routed, queries, hand_chunks()).set_index("query_id")
    got = out["section_recall"]
    want = {"q_in": True, "q_miss": False, "q_edge": True, "q_touch": False, "q_other_doc": False, "q_two": True,
            "q_gap": False}
    assert {q: bool(got[q]) for q in want} == want
    assert pd.isna(got["q_empty"])
    assert out.loc["q_in", "first_gold_route_rank"] == 2
    assert out.loc["q_edge", "n_gold_sections"] == 2 and out.loc["q_edge", "n_routed_gold"] == 1
    assert out.loc["q_two", "n_gold_sections"] == 2 and out.loc["q_two", "n_routed_gold"] == 2
    assert out.loc["q_two", "first_gold_route_rank"] == 2
    assert pd.isna(out.loc["q_miss", "first_gold_route_rank"])
    assert out.loc["q_empty", "n_gold_sections"] == 0


# ---------------------------------------------------------------------------------------------- the whole stage


def synthetic_stage(rng, n_docs=6, sections_per_doc=4, chunks_per_section=3, d=256):
    """Chunks for A3 and A4 (same texts, so same text_row and vectors; distinct chunk ids) and A0 (own rows)."""
    rows, text_row = [], 0
    for doc in range(n_docs):
        pos = 0
        for sec in range(sections_per_doc):
            for ch in range(chunks_per_section):
                for cond in ("A3", "A4"):
                    rows.append(dict(condition=cond, doc_id=f"doc{doc}", chunk_id=f"{cond}:doc{doc}:{sec}:{ch}",
                                     start=pos, end=pos + 100, route_key=f"doc{doc}#s{sec}", text_row=text_row))
                text_row += 1
                pos += 100
    chunks = pd.DataFrame(rows)
    a0 = chunks[chunks["condition"] == "A3"].assign(
        condition="A0", chunk_id=lambda f: "A0" + f["chunk_id"].str[2:],
        text_row=lambda f: np.arange(text_row, text_row + len(f)))
    chunks = pd.concat([chunks, a0], ignore_index=True)
    vectors = {e: unit(rng, 2 * text_row, d) for e in ("strong", "weak")}
    return chunks, vectors


def test_retrieve_all_runs_and_section_recall():
    rng = np.random.default_rng(7)
    chunks, vectors = synthetic_stage(rng)
    a3 = chunks[chunks["condition"] == "A3"].reset_index(drop=True)
    # each query is the vector of one A3 chunk: its own section must route first and the chunk rank first
    picks = [0, 17, 40, 71]
    queries = pd.DataFrame({
        "query_id": [f"q{i}" for i in range(len(picks))],
        "doc_id": a3.loc[picks, "doc_id"].to_numpy(),
        "qtype": "factoid",
        "text": "x",
        "spans": [[[int(s) + 10, int(s) + 20]] for s in a3.loc[picks, "start"]],
    })
    qv = {e: v[a3.loc[picks, "text_row"].to_numpy()] for e, v in vectors.items()}
    params = {"k": 20, "route_sections": 2, "backend": "faiss", "two_stage_conditions": ["A4"]}
    out = retrieve.retrieve_all(chunks, vectors, qv, queries, config.record("retrieve", params))
    runs, sr = out["runs"], out["section_recall"]
    artifacts.check_schema(runs, "runs")
    artifacts.check_schema(sr, "section_recall")
    assert len(runs) == 2 * 3 * 4 * 20
    assert set(runs["reranker"]) == {"none"}
    per_list = runs.groupby(["embedder", "condition", "query_id"])["rank"]
    assert (per_list.apply(lambda r: list(r) == list(range(1, 21)))).all()
    top = runs[runs["rank"] == 1].set_index(["embedder", "condition", "query_id"])["chunk_id"]
    for i, p in enumerate(picks):
        assert top[("strong", "A3", f"q{i}")] == a3.loc[p, "chunk_id"]
        assert top[("strong", "A4", f"q{i}")] == "A4" + a3.loc[p, "chunk_id"][2:]
    # A4: 2 routed sections x 3 chunks = 6 routed entries, then backfill
    a4 = runs[runs["condition"] == "A4"]
    assert (a4.groupby(["embedder", "query_id"])["source"].apply(
        lambda s: list(s) == ["routed"] * 6 + ["backfill"] * 14)).all()
    assert set(runs.loc[runs["condition"] != "A4", "source"]) == {"flat"}
    # same vectors: A4's scores are A3's scores for the same chunk text
    a3s = runs[runs["condition"] == "A3"].assign(key=lambda f: f["chunk_id"].str[3:])
    a4s = a4.assign(key=lambda f: f["chunk_id"].str[3:])
    both = a4s.merge(a3s, on=["embedder", "query_id", "key"], suffixes=("_4", "_3"))
    np.testing.assert_array_equal(both["score_4"], both["score_3"])
    # section recall only for A4; every query's own section routed first
    assert set(sr["condition"]) == {"A4"} and len(sr) == 2 * 4
    assert sr["section_recall"].astype(bool).all()
    assert (sr["first_gold_route_rank"] == 1).all()
    assert [r[0] for r in sr["routed_route_keys"]] == list(a3.loc[picks, "route_key"]) * 2
    # every cell timed: the median of retrieve.timing_repeats (default 5) searches after the one that ranked
    timing = out["timing"]
    assert len(timing) == 2 * 3 and set(timing["repeats"]) == {5}  # these searches take far less than a second
    assert (timing["seconds_min"] <= timing["seconds"]).all() and (timing["seconds"] <= timing["seconds_max"]).all()


def test_a_timed_call_gives_its_first_result_and_the_median_of_its_repeats():
    """Timing a sub-millisecond search once measures the timer and the warm-up (A0 0.52 ms beside A1 0.034 ms on
    identical 17-vector indexes): progress.timed keeps the first call's result and times the repeats after it."""
    from chunkstudy import progress

    calls = []

    def search() -> int:
        calls.append(1)
        return len(calls)

    got, t = progress.timed(search, 4)
    assert got == 1 and len(calls) == 5 and t["repeats"] == 4
    assert 0 <= t["seconds_min"] <= t["seconds"] <= t["seconds_max"]
    calls.clear()
    got, t = progress.timed(search, 4, budget_s=0.0)  # a budget spent at once: one timed repeat
    assert got == 1 and len(calls) == 2 and t["repeats"] == 1
    calls.clear()
    got, t = progress.timed(search, 0)
    assert got == 1 and len(calls) == 1 and t["seconds_min"] == t["seconds"] == t["seconds_max"]


def test_retrieve_all_routing_everything_equals_flat_and_errors():
    rng = np.random.default_rng(8)
    chunks, vectors = synthetic_stage(rng, n_docs=1, sections_per_doc=3)
    queries = pd.DataFrame({"query_id": ["a", "b"], "doc_id": "doc0", "qtype": "factoid", "text": "x",
                            "spans": [[[0, 5]], [[250, 260]]]})
    qv = {e: unit(rng, 2, 256) for e in vectors}
    params = {"k": 50, "route_sections": 5, "backend": "numpy", "two_stage_conditions": ["A4"]}
    runs = retrieve.retrieve_all(chunks, vectors, qv, queries, config.record("retrieve", params))["runs"]
    a3 = runs[runs["condition"] == "A3"].reset_index(drop=True)
    a4 = runs[runs["condition"] == "A4"].reset_index(drop=True)
    assert list(a3["chunk_id"].str[3:]) == list(a4["chunk_id"].str[3:])
    np.testing.assert_array_equal(a3["score"], a4["score"])
    bad = chunks.copy()
    bad.loc[0, "text_row"] = 10_000
    with pytest.raises(IndexError, match="text_row 10000"):
        retrieve.retrieve_all(bad, vectors, qv, queries, config.record("retrieve", params))
    with pytest.raises(ValueError, match="3 rows for 2 queries"):
        retrieve.retrieve_all(chunks, vectors, {e: unit(rng, 3, 256) for e in vectors}, queries,
                              config.record("retrieve", params))
    with pytest.raises(ValueError, match="have dimension 32, 04's chunk vectors 256: the model changed"):
        retrieve.retrieve_all(chunks, vectors, {e: unit(rng, 2, 32) for e in vectors}, queries,
                              config.record("retrieve", params))  # issue 42: was a bare numpy matmul error
    dup = pd.concat([chunks, chunks.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match="more than once"):
        retrieve.retrieve_all(dup, vectors, qv, queries, config.record("retrieve", params))


def test_display_helpers():
    rng = np.random.default_rng(9)
    chunks, vectors = synthetic_stage(rng, n_docs=2)
    documents = pd.DataFrame({"doc_id": ["doc0", "doc1"], "text": ["a" * 1200, "b" * 1200]})
    queries = pd.DataFrame({"query_id": ["q"], "doc_id": "doc1", "qtype": "factoid", "text": "x",
                            "spans": [[[150, 250]]]})
    a3 = chunks[chunks["condition"] == "A3"].reset_index(drop=True)
    qv = {e: v[a3.loc[[13], "text_row"].to_numpy()] for e, v in vectors.items()}
    out = retrieve.retrieve_all(chunks, vectors, qv, queries,
                                config.record("retrieve", {"k": 10, "route_sections": 1}))
    view = retrieve.query_view(out["runs"], out["section_recall"], chunks, queries, documents, "q",
                               conditions=("A3", "A4"), reranker="none", embedder="strong", n=3)
    assert list(view["condition"]) == ["A3"] * 3 + ["A4"] * 3
    assert view.loc[view["condition"] == "A4", "in_routed"].tolist() == [True, True, True]
    assert view.loc[view["condition"] == "A3", "in_routed"].isna().all()
    assert view.loc[0, "chunk_id"] == a3.loc[13, "chunk_id"] and view.loc[0, "snippet"].startswith("b")
    # chunk 13 = doc1, section 0, chunk 1: [100, 200) overlaps the span [150, 250) by 50 characters
    assert view.loc[0, "gold_chars"] == 50
    routed = retrieve.routed_sections(out["section_recall"], "q")
    assert routed["route_key"].tolist() == ["doc1#s0", "doc1#s0"] and routed["route_rank"].tolist() == [1, 1]
    summary = retrieve.section_recall_summary(out["section_recall"])
    assert summary["section_recall"].tolist() == [1.0, 1.0] and summary["n_queries"].tolist() == [1, 1]


# ---------------------------------------------------------------------------------------------- exactness of the fast path


def exact_oracle(q, c, ids, k):
    """The definition: every pair's exact score (one query row at a time), full sort by (-score, chunk_id)."""
    kk = min(k, len(c))
    idx = np.zeros((len(q), kk), dtype=np.int64)
    sc = np.zeros((len(q), kk))
    for i in range(len(q)):
        s = retrieve.exact_scores(q[i], c)
        order = np.lexsort((ids, -s))[:kk]
        idx[i], sc[i] = order, s[order]
    return idx, sc


def near_tie_corpus(rng, n=4000, d=96):
    """Unit vectors plus a cluster of 300 copies of one vector nudged by ~1e-7 (float32 cannot order them the
    way the exact scores do) and 40 exact duplicates: the cut at k falls inside both for queries near them."""
    c = unit(rng, n, d)
    base = c[7].copy()
    c[100:400] = base + rng.normal(scale=1e-7, size=(300, d)).astype(np.float32)
    c[500:540] = base
    q = np.vstack([np.repeat(base[None], 3, axis=0) + rng.normal(scale=1e-6, size=(3, d)).astype(np.float32),
                   unit(rng, 40, d)])
    return q.astype(np.float32), c


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
@pytest.mark.parametrize("batch_size", [None, 5])
def test_flat_search_is_bit_identical_to_exact_scores_of_every_pair(backend, batch_size):
    rng = np.random.default_rng(11)
    q, c = near_tie_corpus(rng)
    ids = shuffled_ids(rng, len(c))
    want_idx, want_scores = exact_oracle(q, c, ids, 50)
    idx, scores = retrieve.flat_search(q, c, ids, k=50, backend=backend, batch_size=batch_size)
    np.testing.assert_array_equal(scores, want_scores)  # bit for bit, not approximately
    np.testing.assert_array_equal(idx, want_idx)
    # the near-tie queries really cut inside the cluster (so the widening path ran)
    assert set(idx[0]) <= set(range(100, 400)) | set(range(500, 540)) | {7}


def test_flat_search_k_at_or_above_the_corpus_and_a_zero_query():
    rng = np.random.default_rng(12)
    c = unit(rng, 30, 8)
    ids = shuffled_ids(rng, 30)
    q = np.vstack([unit(rng, 2, 8), np.zeros((1, 8), np.float32)])  # a zero query ties every chunk at 0.0
    for k in (29, 30, 31):
        idx, scores = retrieve.flat_search(q, c, ids, k=k, backend="numpy")
        want_idx, want_scores = exact_oracle(q, c, ids, k)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(scores, want_scores)
    idx, _ = retrieve.flat_search(q, c, ids, k=5, backend="numpy")
    assert list(idx[2]) == list(np.argsort(ids)[:5])  # all scores 0: the five smallest chunk ids


def test_exact_scores_are_float64_sums_of_exact_products():
    rng = np.random.default_rng(13)
    a, b = unit(rng, 50, 300), unit(rng, 50, 300)
    want = (a.astype(np.float64) * b.astype(np.float64)).sum(axis=-1)
    np.testing.assert_array_equal(retrieve.exact_scores(a, b), want)
    # a row scores the same alone, in a 2-D batch and in a 3-D block
    np.testing.assert_array_equal(retrieve.exact_scores(a[3], b)[3], want[3])
    np.testing.assert_array_equal(retrieve.exact_scores(a[:, None, :], b[None, :5, :])[:5, 0],
                                  retrieve.exact_scores(a[:5], np.repeat(b[:1], 5, axis=0)))


@pytest.mark.parametrize("n,d,n_keys", [(5000, 16, 40), (3000, 8, 3), (2000, 32, 1500), (300, 4, 1)])
def test_section_sums_equal_numpy_reduceat_bit_for_bit(n, d, n_keys):
    # sections of 1 to ~2000 chunks: numpy's pairwise blocks (8 and 128) are crossed
    rng = np.random.default_rng(14)
    c = (unit(rng, n, d) * rng.choice([1, 1e3, 1e-3], size=(n, 1))).astype(np.float32)
    keys = np.array([f"s{v}" for v in rng.integers(0, n_keys, n)])
    uniq, cent, codes = retrieve.section_centroids(c, keys)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(len(uniq)))
    sums = np.add.reduceat(c[order].astype(np.float64), starts, axis=0)
    np.testing.assert_array_equal(retrieve.routing._section_sums(c, codes, len(uniq)), sums)
    np.testing.assert_array_equal(cent, (sums / np.sqrt((sums ** 2).sum(axis=1))[:, None]).astype(np.float32))


def two_stage_reference(q, c, ids, keys, k, n_sections):
    """Two-stage search as the paper states it, one query at a time (exact scores of every routed chunk)."""
    uniq, cent, codes = retrieve.section_centroids(c, keys)
    sec_idx, _ = exact_oracle(q, cent, uniq, n_sections)
    g_idx, g_scores = exact_oracle(q, c, ids, k)
    kk = min(k, len(c))
    idx, sc, n_routed = np.zeros((len(q), kk), np.int64), np.zeros((len(q), kk)), np.zeros(len(q), np.int64)
    for i in range(len(q)):
        rows = np.flatnonzero(np.isin(codes, sec_idx[i]))
        s = retrieve.exact_scores(q[i], c[rows])
        top = np.lexsort((ids[rows], -s))[:kk]
        m = len(top)
        idx[i, :m], sc[i, :m], n_routed[i] = rows[top], s[top], m
        fill = [j for j in range(kk) if not np.isin(g_idx[i, j], rows)][:kk - m]
        idx[i, m:], sc[i, m:] = g_idx[i, fill], g_scores[i, fill]
    return idx, sc, uniq[sec_idx], n_routed


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
@pytest.mark.parametrize("n_keys", [4, 60, 3000])
def test_two_stage_is_bit_identical_to_the_per_query_definition(backend, n_keys):
    # few keys: routed sections hold far more than k chunks (the float32 preselection decides); many keys: the
    # list is mostly backfill
    rng = np.random.default_rng(15)
    q, c = near_tie_corpus(rng, n=3000, d=32)
    ids = shuffled_ids(rng, len(c))
    keys = np.array([f"s{v}" for v in rng.integers(0, n_keys, len(c))])
    res = retrieve.two_stage_search(q, c, ids, keys, k=40, n_sections=3, backend=backend, batch_size=17)
    idx, sc, routed, n_routed = two_stage_reference(q, c, ids, keys, 40, 3)
    np.testing.assert_array_equal(res.idx, idx)
    np.testing.assert_array_equal(res.scores, sc)
    np.testing.assert_array_equal(res.routed, routed)
    np.testing.assert_array_equal(res.n_routed, n_routed)


def test_the_default_backend_is_numpy():
    from chunkstudy import config

    assert config.SCHEMA["retrieve"]["backend"].default == "numpy"
    import inspect

    # the default lives in the schema alone: the search functions take k, the backend and the routed sections from
    # their caller (retrieve_all reads the retrieve record), so no code default can differ from the parameter file
    for fn in (retrieve.flat_search, retrieve.two_stage_search):
        params = inspect.signature(fn).parameters
        assert all(params[n].default is inspect.Parameter.empty for n in ("k", "backend") if n in params)
    assert inspect.signature(retrieve.two_stage_search).parameters["n_sections"].default is inspect.Parameter.empty
