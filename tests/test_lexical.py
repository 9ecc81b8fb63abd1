"""The lexical and hybrid retrieval modes (stage 05; docs/beyond.md, "Retrieval modes"): BM25 scores against bm25s
and a hand computation, the exact top-k with ties against a brute-force sort, the tokenizer's declared options,
routing by section BM25 scores, reciprocal-rank and convex fusion against hand-worked examples and a brute-force
fuser, two-stage hybrid routing, the store of dense searches (a BM25 parameter never searches a vector again), and
the property the study rests on: a prefix in the lexical index moves chunks, never relevance."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import bm25s
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from chunkstudy import config, design, metrics, retrieve
from chunkstudy.params import Bm25Params, FusionParams
from chunkstudy.retrieve import cache as search_cache
from chunkstudy.retrieve import fusion, lexical, modes

P = Bm25Params()
DOCS = ["The cat sat on the mat.", "A dog chased the cat around the garden garden.",
        "Quantum chromodynamics of gluons", "", "cats and dogs living together",
        "the mat was red and the cat was grey"]
QUERIES = ["cat on a mat", "garden dog dog", "nothing matches zzz", "mat mat cat grey"]


def bm25s_scores(tokens, query_tokens, method, k1=1.5, b=0.75, delta=0.5):
    """bm25s's own scores (its index, its float32 per-query sum), zeros for a query with no indexed token."""
    model = bm25s.BM25(method=method, k1=k1, b=b, delta=delta)
    model.index([list(t) for t in tokens], show_progress=False)
    out = []
    for q in query_tokens:
        known = [t for t in q if t in model.vocab_dict]
        out.append(model.get_scores(known).astype(np.float64) if known else np.zeros(len(tokens)))
    return np.array(out)


# ------------------------------------------------------------------------------------------------------- scores


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_scores_equal_bm25s_for_every_variant(method):
    p = replace(P, method=method)
    tokens, q = lexical.tokenize(DOCS, p), lexical.tokenize(QUERIES, p)
    index = lexical.build_index(tokens, p)
    ours, matched = lexical.score_block(index, lexical.query_counts(index, q))
    theirs = bm25s_scores(tokens, q, method)
    if method in ("bm25l", "bm25+"):  # bm25s adds the non-occurrence weight to every document, matched or not
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=0)
    want = np.array([[any(t in set(doc) for t in qq) for doc in tokens] for qq in q])
    np.testing.assert_array_equal(matched, want)


def test_lucene_bm25_by_hand():
    """'cat on a mat' against document 0 ('cat sat mat' after stopwords, |d| = 3 tokens): 'cat' is in 3 of the 6
    documents ('cats' is another token), 'mat' in 2; avgdl = 20 / 6; k1 1.5, b 0.75."""
    tokens = lexical.tokenize(DOCS, P)
    index = lexical.build_index(tokens, P)
    n, avgdl, k1, b = 6, sum(map(len, tokens)) / 6, 1.5, 0.75
    assert avgdl == pytest.approx(20 / 6)

    def idf(df):
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def tfc(tf, length):
        return tf / (tf + k1 * (1 - b + b * length / avgdl))

    s, _ = lexical.score_block(index, lexical.query_counts(index, lexical.tokenize(["cat on a mat"], P)))
    assert s[0, 0] == pytest.approx(idf(3) * tfc(1, 3) + idf(2) * tfc(1, 3), rel=1e-6)
    assert s[0, 5] == pytest.approx(idf(3) * tfc(1, 4) + idf(2) * tfc(1, 4), rel=1e-6)
    assert s[0, 0] == pytest.approx(0.7215776, rel=1e-6)
    # a repeated query token counts again (bm25s's sum over the query's tokens)
    s2, _ = lexical.score_block(index, lexical.query_counts(index, [["mat", "mat"]]))
    assert s2[0, 0] == pytest.approx(2 * idf(2) * tfc(1, 3), rel=1e-6)


def oracle_top(scores, matched, ids, k):
    """Plain Python: the matched documents sorted by (-score, id), first k."""
    out = []
    for s, m in zip(scores, matched):
        rows = sorted((j for j in range(len(s)) if m[j]), key=lambda j: (-s[j], ids[j]))[:k]
        out.append(rows)
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), k=st.integers(1, 15),
       method=st.sampled_from(["lucene", "atire", "bm25+"]))
def test_top_k_is_the_matched_documents_by_score_then_id(seed, n, k, method):
    # a vocabulary of 6 words and short documents: many equal scores, so the order among ties is the id's
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]
    tokens = [list(rng.choice(words, size=rng.integers(0, 5))) for _ in range(n)]
    q = [list(rng.choice(words, size=rng.integers(0, 4))) for _ in range(6)]
    ids = [f"c{v:04d}" for v in rng.permutation(n)]
    p = replace(P, method=method)
    index = lexical.build_index(tokens, p)
    idx, scores, filled = lexical.flat_search(index, q, ids, k)
    s, m = lexical.score_block(index, lexical.query_counts(index, q))
    want = oracle_top(s, m, ids, k)
    for row, w in enumerate(want):
        assert filled[row] == len(w)
        assert idx[row, :filled[row]].tolist() == w
        np.testing.assert_array_equal(scores[row, :filled[row]], s[row, w])
    if any(tokens):  # bm25s cannot index a corpus without a token; ours matches nothing then
        np.testing.assert_allclose(s, bm25s_scores(tokens, q, method), rtol=2e-6, atol=2e-6)
    else:
        assert not m.any() and (filled == 0).all()


def test_the_score_sums_do_not_depend_on_the_hash_seed():
    """bm25s numbers its vocabulary in a Python set's order; the index renumbers it in sorted order, so the float
    sums, and the tables, are bit for bit the same under any PYTHONHASHSEED."""
    code = ("import hashlib; from chunkstudy.params import Bm25Params; from chunkstudy.retrieve import lexical;"
            f"docs = {DOCS!r} * 7; p = Bm25Params(); t = lexical.tokenize(docs, p); ix = lexical.build_index(t, p);"
            f"s, _ = lexical.score_block(ix, lexical.query_counts(ix, lexical.tokenize({QUERIES!r}, p)));"
            "print(hashlib.sha256(s.tobytes()).hexdigest())")
    out = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin"},
                          capture_output=True, text=True, check=True).stdout for seed in ("1", "2", "3")}
    assert len(out) == 1


def test_the_tokenizer_follows_its_declaration():
    text = ["The Runners were running; THE end"]
    assert lexical.tokenize(text, P) == [["runners", "were", "running", "end"]]  # bm25s's list keeps "were"
    assert lexical.tokenize(text, replace(P, stopwords="none")) == [["the", "runners", "were", "running", "the",
                                                                     "end"]]
    assert lexical.tokenize(text, replace(P, stemmer="porter")) == [["runner", "were", "run", "end"]]
    assert lexical.tokenize(text, replace(P, lowercase=False, stopwords="none"))[0][:2] == ["The", "Runners"]
    assert lexical.tokenize(["a b cd"], replace(P, token_pattern=r"(?u)\b\w+\b", stopwords="none")) == \
        [["a", "b", "cd"]]
    with pytest.raises(TypeError):
        lexical.tokenize("one string", P)


# ------------------------------------------------------------------------------------------------------ routing


def _routed_corpus(seed):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    n = 30
    tokens = [list(rng.choice(words, size=rng.integers(1, 6))) for _ in range(n)]
    labels = np.array([f"d{i % 4}\x1fs{(i // 4) % 3}" for i in range(n)])
    q = [list(rng.choice(words, size=rng.integers(1, 4))) for _ in range(8)]
    ids = [f"c{v:04d}" for v in rng.permutation(n)]
    return tokens, labels, q, ids


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 30), n_sections=st.integers(1, 4))
def test_bm25_routing_keeps_the_best_sections_then_backfills_in_flat_order(seed, k, n_sections):
    tokens, labels, q, ids = _routed_corpus(seed)
    index = lexical.build_index(tokens, P)
    keys, docs, codes = lexical.section_documents(tokens, labels)
    sections = lexical.build_index(docs, P)
    got = lexical.two_stage(index, sections, keys, codes, q, ids, k, n_sections)
    f_idx, _, f_n = lexical.flat_search(index, q, ids, k)
    ss, sm = lexical.score_block(sections, lexical.query_counts(sections, q))
    s, m = lexical.score_block(index, lexical.query_counts(index, q))
    for row in range(len(q)):
        # stage 1: the matched sections by (-section score, key), the section score bm25s's over the concatenation
        want_sec = sorted((j for j in range(len(keys)) if sm[row, j]), key=lambda j: (-ss[row, j], keys[j]))
        assert got.routed[row, :got.n_sections[row]].tolist() == [keys[j] for j in want_sec[:n_sections]]
        inside = {j for j in range(len(ids)) if labels[j] in set(got.routed[row, :got.n_sections[row]])}
        lst = got.idx[row, :got.n[row]].tolist()
        nr = got.n_routed[row]
        assert lst[:nr] == sorted((j for j in inside if m[row, j]), key=lambda j: (-s[row, j], ids[j]))[:k]
        flat_rest = [j for j in f_idx[row, :f_n[row]].tolist() if j not in inside]
        assert lst[nr:] == flat_rest[:k - nr] and len(set(lst)) == len(lst)
    np.testing.assert_allclose(ss, bm25s_scores(docs, q, "lucene"), rtol=2e-6)


def test_bm25_routing_every_section_is_flat_search():
    tokens, labels, q, ids = _routed_corpus(3)
    index = lexical.build_index(tokens, P)
    keys, docs, codes = lexical.section_documents(tokens, labels)
    got = lexical.two_stage(index, lexical.build_index(docs, P), keys, codes, q, ids, 10, len(keys))
    idx, scores, n = lexical.flat_search(index, q, ids, 10)
    np.testing.assert_array_equal(got.idx, idx)
    np.testing.assert_array_equal(got.scores, scores)
    np.testing.assert_array_equal(got.n, n)


# ------------------------------------------------------------------------------------------------------- fusion


def test_reciprocal_rank_fusion_by_hand():
    """Dense a, b, c; BM25 c, a, d (rows 0..3 = a..d), rrf_k 60: a = 1/61 + 1/62, c = 1/63 + 1/61, b = 1/62,
    d = 1/63, so a, c, b, d; weighted 3 : 1, a = 3/61 + 1/62 > c = 3/63 + 1/61 > b = 3/62 > d = 1/63; with BM25
    weighted 0 the dense order stays and d, in the BM25 list only, comes last at 0."""
    dense = fusion.lists(np.array([[0, 1, 2]]), np.array([[0.9, 0.8, 0.7]]))
    bm = fusion.lists(np.array([[2, 0, 3]]), np.array([[5.0, 4.0, 3.0]]))
    qi, rows, score = fusion.fuse(dense, bm, FusionParams(), 1)
    assert rows.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(score, [1 / 61 + 1 / 62, 1 / 62, 1 / 63 + 1 / 61, 1 / 63], rtol=0, atol=1e-15)
    tie = np.arange(4)
    idx, s, n = fusion.fused_top(dense, bm, FusionParams(), tie, 1, 4)
    assert idx[0].tolist() == [0, 2, 1, 3] and n.tolist() == [4]
    idx, s, _ = fusion.fused_top(dense, bm, FusionParams(dense_weight=3.0, bm25_weight=1.0), tie, 1, 4)
    assert idx[0].tolist() == [0, 2, 1, 3]
    np.testing.assert_allclose(s[0], [3 / 61 + 1 / 62, 3 / 63 + 1 / 61, 3 / 62, 1 / 63], atol=1e-15)
    idx, s, _ = fusion.fused_top(dense, bm, FusionParams(bm25_weight=0.0), tie, 1, 4)
    assert idx[0].tolist() == [0, 1, 2, 3] and s[0, 3] == 0.0
    # depth 2 cuts each list first: d leaves, c keeps its BM25 rank 1 only
    idx, s, n = fusion.fused_top(fusion.lists(np.array([[0, 1, 2]]), np.zeros((1, 3)), cut=2),
                                 fusion.lists(np.array([[2, 0, 3]]), np.zeros((1, 3)), cut=2), FusionParams(),
                                 tie, 1, 4)
    assert idx[0, :n[0]].tolist() == [0, 2, 1] and s[0, 1] == pytest.approx(1 / 61)


def test_convex_fusion_by_hand():
    """minmax: dense a 0.9, b 0.5, c 0.1 -> 1, 0.5, 0; BM25 c 10, a 4 -> 1, 0 (b absent: BM25's lowest, 0).
    Equal weights: a (1 + 0)/2 = 0.5, b 0.25, c 0.5: a and c tie, ids decide. zscore (population sd)."""
    dense = fusion.lists(np.array([[0, 1, 2]]), np.array([[0.9, 0.5, 0.1]]))
    bm = fusion.lists(np.array([[2, 0]]), np.array([[10.0, 4.0]]))
    p = FusionParams(method="convex")
    _, rows, score = fusion.fuse(dense, bm, p, 1)
    np.testing.assert_allclose(score, [0.5, 0.25, 0.5], atol=1e-15)
    idx, _, _ = fusion.fused_top(dense, bm, p, np.array([2, 0, 1]), 1, 3)  # ids: b < c < a
    assert idx[0].tolist() == [2, 0, 1]
    z = (np.array([0.9, 0.5, 0.1]) - 0.5) / np.std([0.9, 0.5, 0.1])
    zb = np.array([1.0, -1.0])  # two values: +-1
    _, _, score = fusion.fuse(dense, bm, replace(p, normalisation="zscore", dense_weight=2.0), 1)
    want = [(2 * z[0] + zb[1]) / 3, (2 * z[1] + zb.min()) / 3, (2 * z[2] + zb[0]) / 3]
    np.testing.assert_allclose(score, want, atol=1e-12)
    # a query whose BM25 list is empty fuses its dense list alone (minmax, weighted by its share)
    empty = fusion.lists(np.zeros((1, 2), dtype=np.int64), np.zeros((1, 2)), np.array([0]))
    _, rows, score = fusion.fuse(dense, empty, p, 1)
    np.testing.assert_allclose(score, [0.5, 0.25, 0.0], atol=1e-15)


def brute_rrf(dense_rows, bm_rows, k, wd, wl):
    out = {}
    for w, rows in ((wd, dense_rows), (wl, bm_rows)):
        for r, row in enumerate(rows, 1):
            out[row] = out.get(row, 0.0) + w / (k + r)
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(1, 12), rrf_k=st.integers(1, 100))
def test_rrf_equals_a_brute_force_fuser_and_ignores_the_scores(seed, depth, rrf_k):
    rng = np.random.default_rng(seed)
    n, nq = 25, 5
    d_idx = np.array([rng.permutation(n)[:depth] for _ in range(nq)])
    l_idx = np.array([rng.permutation(n)[:depth] for _ in range(nq)])
    l_n = rng.integers(0, depth + 1, size=nq)
    p = FusionParams(rrf_k=rrf_k, dense_weight=float(rng.integers(1, 4)), bm25_weight=1.0)
    tie = rng.permutation(n)
    idx, score, filled = fusion.fused_top(fusion.lists(d_idx, rng.random((nq, depth))),
                                          fusion.lists(l_idx, rng.random((nq, depth)), l_n), p, tie, nq, n)
    for q in range(nq):
        want = brute_rrf(d_idx[q].tolist(), l_idx[q, :l_n[q]].tolist(), rrf_k, p.dense_weight, 1.0)
        order = sorted(want, key=lambda r: (-want[r], tie[r]))
        assert idx[q, :filled[q]].tolist() == order
        np.testing.assert_allclose(score[q, :filled[q]], [want[r] for r in order], rtol=1e-15)


def test_hybrid_routing_every_section_is_the_flat_hybrid_list():
    """With every section routed, stage 2 ranks every chunk in both modes: the fused list is the flat one."""
    tokens, labels, q_tokens, ids = _routed_corpus(11)
    rng = np.random.default_rng(11)
    c = rng.normal(size=(len(ids), 8)).astype(np.float32)
    q = rng.normal(size=(len(q_tokens), 8)).astype(np.float32)
    index = lexical.build_index(tokens, P)
    keys, docs, _ = lexical.section_documents(tokens, labels)
    p, k, depth = FusionParams(), 12, 30
    dense = retrieve.flat_search(q, c, ids, k=depth, backend="numpy")
    flat = fusion.flat(dense, lexical.flat_search(index, q_tokens, ids, depth), ids, p, k, depth)
    routed = fusion.two_stage(q, c, ids, labels, index, lexical.build_index(docs, P), q_tokens, flat, p, k,
                              len(keys), depth, "numpy")
    np.testing.assert_array_equal(routed.idx, flat.idx)
    np.testing.assert_allclose(routed.scores, flat.scores, rtol=0, atol=0)
    assert (routed.n_routed == routed.n).all()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_sections=st.integers(1, 3))
def test_hybrid_routing_lists_routed_chunks_first_then_the_flat_hybrid_order(seed, n_sections):
    tokens, labels, q_tokens, ids = _routed_corpus(seed)
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(len(ids), 6)).astype(np.float32)
    q = rng.normal(size=(len(q_tokens), 6)).astype(np.float32)
    index = lexical.build_index(tokens, P)
    keys, docs, _ = lexical.section_documents(tokens, labels)
    p, k, depth = FusionParams(), 10, 10
    flat = fusion.flat(retrieve.flat_search(q, c, ids, k=depth, backend="numpy"),
                       lexical.flat_search(index, q_tokens, ids, depth), ids, p, k, depth)
    got = fusion.two_stage(q, c, ids, labels, index, lexical.build_index(docs, P), q_tokens, flat, p, k,
                           n_sections, depth, "numpy")
    for row in range(len(q)):
        kept = {keys[j] for j in got.routed[row] if j >= 0}
        assert 1 <= len(kept) <= n_sections
        lst = got.idx[row, :got.n[row]].tolist()
        nr = got.n_routed[row]
        assert all(labels[j] in kept for j in lst[:nr]) and len(set(lst)) == len(lst)
        rest = [j for j in flat.idx[row, :flat.n[row]].tolist() if labels[j] not in kept]
        assert lst[nr:] == rest[:k - nr]


# ---------------------------------------------------------------------------------- the stage, and its store


def _stage_inputs(seed=5, n_docs=4):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    rows, texts = [], []
    for cond, prefix in (("A3", "[Doc › Part]\n\n"), ("A2", "")):
        for d in range(n_docs):
            for j in range(5):
                rows.append({"condition": cond, "doc_id": f"d{d}", "chunk_id": f"{cond}|d{d}|{j:04d}",
                             "start": 10 * j, "end": 10 * j + 10, "route_key": f"s{j // 2}", "text_row": len(texts)})
                texts.append(prefix + " ".join(rng.choice(words, size=5)))
    chunks = pd.DataFrame(rows)
    queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(6)], "doc_id": [f"d{i % n_docs}" for i in range(6)],
                            "spans": [[[0, 10]]] * 6, "text": [" ".join(rng.choice(words, size=3)) for _ in range(6)]})
    vectors = {"strong": rng.normal(size=(len(texts), 8)).astype(np.float32)}
    qv = {"strong": rng.normal(size=(6, 8)).astype(np.float32)}
    return chunks, texts, vectors, qv, queries


def test_every_retriever_is_a_cell_and_a_bm25_parameter_searches_no_vector_again(tmp_path):
    chunks, texts, vectors, qv, queries = _stage_inputs()
    p = config.record("retrieve", {"k": 6, "modes": ["dense", "bm25", "hybrid"], "two_stage_conditions": ["A3"],
                                   "route_sections": 1, "timing_repeats": 0})
    store = search_cache.SearchCache(tmp_path)
    out = retrieve.retrieve_all(chunks, vectors, qv, queries, p, texts, store)
    runs = out["runs"]
    assert list(dict.fromkeys(runs["embedder"])) == ["strong", "bm25", "hybrid-strong"]
    assert set(out["section_recall"]["embedder"]) == {"strong", "bm25", "hybrid-strong"}
    # searched: dense A2 (flat), dense A3 (routed), hybrid A3's flat dense half; hybrid A2's dense half at depth = k
    # is the dense A2 cell's own search, read back
    assert (store.hits, store.misses) == (1, 3)
    dense_only = retrieve.retrieve_all(chunks, vectors, qv, queries, replace(p, modes=("dense",)))
    pd.testing.assert_frame_equal(runs[runs["embedder"] == "strong"].reset_index(drop=True), dense_only["runs"])
    bm = runs[(runs["embedder"] == "bm25") & (runs["condition"] == "A2")]
    cc = chunks[chunks["condition"] == "A2"].reset_index(drop=True)
    index = lexical.build_index(lexical.tokenize([texts[i] for i in cc["text_row"]], P), P)
    idx, scores, n = lexical.flat_search(index, lexical.tokenize(queries["text"].tolist(), P), cc["chunk_id"], 6)
    assert bm["chunk_id"].tolist() == [cc["chunk_id"][j] for q in range(6) for j in idx[q, :n[q]]]
    report = out["lexical"]
    assert {r["condition"] for r in report["conditions"]} == {"A2", "A3"} and report["method"] == "lucene"
    assert next(r for r in report["conditions"] if r["condition"] == "A3")["n_sections"] == 4 * 3
    again = retrieve.retrieve_all(chunks, vectors, qv, queries, replace(p, bm25=replace(p.bm25, k1=0.9)), texts,
                                  store)
    assert (store.hits, store.misses) == (5, 3)  # a BM25 parameter changed: every dense search read back
    pd.testing.assert_frame_equal(again["runs"][again["runs"]["embedder"] == "strong"].reset_index(drop=True),
                                  dense_only["runs"])
    assert not again["runs"][again["runs"]["embedder"] == "bm25"].equals(runs[runs["embedder"] == "bm25"])


def test_a_lexical_mode_needs_the_indexed_texts_and_a_torn_store_entry_is_searched_again(tmp_path):
    chunks, texts, vectors, qv, queries = _stage_inputs()
    p = config.record("retrieve", {"k": 6, "modes": ["dense", "bm25"], "timing_repeats": 0})
    with pytest.raises(ValueError, match="lexical mode indexes each chunk's text"):
        retrieve.retrieve_all(chunks, vectors, qv, queries, p)
    store = search_cache.SearchCache(tmp_path)
    first = retrieve.retrieve_all(chunks, vectors, qv, queries, p, texts, store)["runs"]
    for f in tmp_path.glob("*.npz"):
        f.write_bytes(b"torn")
    store2 = search_cache.SearchCache(tmp_path)
    second = retrieve.retrieve_all(chunks, vectors, qv, queries, p, texts, store2)["runs"]
    assert store2.misses == 2 and store2.hits == 0
    pd.testing.assert_frame_equal(first, second)


def test_modes_are_served_by_exactly_their_registered_functions():
    assert tuple(modes.FUNCTIONS) == design.MODES
    assert list(design.retrievers(["dense", "bm25", "hybrid"], ["strong", "weak"])) == [
        "strong", "weak", "bm25", "hybrid-strong", "hybrid-weak"]
    assert modes.reranked_retrievers(design.retrievers(["dense", "bm25", "hybrid"], ["strong", "weak"]),
                                     "strong") == ["strong", "bm25", "hybrid-strong"]


# ------------------------------------------------------------------------ prefixes can never create relevance


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_prefix_in_the_lexical_index_moves_chunks_never_relevance(seed):
    """Each chunk that lies outside the query's gold span gets the query's own words as its prefix, so BM25 ranks
    those chunks first; their content does not overlap the evidence, so none is relevant and every metric counts
    only the chunks whose content offsets cover the span, exactly as if the prefixes were empty."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]
    n = 12
    chunks = pd.DataFrame({"condition": "X", "doc_id": "d", "chunk_id": [f"X|d|{i:04d}" for i in range(n)],
                           "start": np.arange(n) * 10, "end": np.arange(n) * 10 + 10,
                           "n_content_tokens": 5, "n_prefix_tokens": 0})
    gold = int(rng.integers(0, n))
    query = " ".join(rng.choice(words, size=3))
    queries = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "spans": [[[gold * 10, gold * 10 + 10]]],
                            "qtype": ["t"], "text": [query]})
    contents = [" ".join(rng.choice(words, size=4)) for _ in range(n)]
    texts = [(query + "\n\n" if i != gold else "") + c for i, c in enumerate(contents)]
    index = lexical.build_index(lexical.tokenize(texts, P), P)
    idx, scores, filled = lexical.flat_search(index, lexical.tokenize([query], P), chunks["chunk_id"], n)
    ranked = idx[0, :filled[0]].tolist()
    runs = pd.DataFrame({"embedder": "bm25", "reranker": "none", "condition": "X", "query_id": "q",
                         "rank": np.arange(1, len(ranked) + 1), "chunk_id": chunks["chunk_id"].to_numpy()[ranked],
                         "score": scores[0, :filled[0]]})
    mp = config.record("metrics", {"budgets": [512], "recall_k": 5, "cutoff": 5})
    gains = metrics.rank_gains(runs, chunks.assign(prefix=[t[:-len(c)] for t, c in zip(texts, contents)]), queries,
                               mp)
    assert set(gains.loc[gains["relevant"], "chunk_id"]) <= {f"X|d|{gold:04d}"}
    with_prefix = metrics.score_runs(runs, chunks, queries, mp, "c")
    plain = metrics.score_runs(runs, chunks.assign(n_prefix_tokens=0), queries, mp, "c")
    pd.testing.assert_frame_equal(with_prefix, plain)
    if ranked and ranked[0] != gold and f"X|d|{gold:04d}" not in set(runs["chunk_id"].head(5)):
        assert with_prefix.loc[with_prefix["metric"] == "cov-nDCG@5", "value"].item() == 0.0
