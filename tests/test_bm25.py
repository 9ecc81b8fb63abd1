"""BM25 diagnostic: bm25s against a brute-force Lucene BM25, the gold-chunk rule, and a worked corpus."""

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy.queries import bm25

#: the paper's relevance rule (span_frac 0.5, chunk_frac 0.8) and BM25's usual k1/b: the worked examples below are
#: computed at these values, stated here because the functions take them from the caller (no code defaults)
REL = {"span_frac": 0.5, "chunk_frac": 0.8}
KW = {"k1": 1.5, "b": 0.75, **REL, "scope": "document"}


def brute_bm25(corpus_tokens, query_tokens, k1=1.5, b=0.75):
    """Lucene BM25 written out from the formula: Σ_t idf(t)·tf/(tf + k1(1 − b + b·|d|/avgdl)),
    idf = ln(1 + (N − df + 0.5)/(df + 0.5)); a repeated query token counts again."""
    n = len(corpus_tokens)
    avgdl = sum(len(d) for d in corpus_tokens) / n
    df = Counter(t for d in corpus_tokens for t in set(d))
    out = []
    for d in corpus_tokens:
        tf = Counter(d)
        s = 0.0
        for t in query_tokens:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return np.array(out)


VOCAB = ["apollo", "moon", "crew", "orbit", "launch", "rocket", "lunar", "earth", "ocean", "ship"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=12), min_size=2, max_size=12),
       st.lists(st.sampled_from(VOCAB + ["zebra"]), min_size=1, max_size=5),
       st.sampled_from([(1.5, 0.75), (0.9, 0.4), (1.2, 1.0)]))
def test_bm25s_matches_brute_force(corpus, query, params):
    k1, b = params
    index = bm25.build_index(corpus, k1=k1, b=b)
    np.testing.assert_allclose(bm25.scores(index, query), brute_bm25(corpus, query, k1, b), rtol=1e-5, atol=1e-6)


def test_tokenisation_is_the_stated_one():
    assert bm25.tokenize(["The Crew of Apollo-8 orbited THE moon, a 2nd time."]) == [
        ["crew", "apollo", "orbited", "moon", "2nd", "time"]]  # stopwords and 1-char tokens gone, no stemming


def test_overlap_counts_union_once():
    assert bm25.chars_in_spans(0, 100, [[10, 30], [20, 40], [90, 150]]) == 30 + 10
    assert bm25.chars_in_spans(50, 60, [[0, 10]]) == 0


def test_relevance_rule_both_arms():
    assert bm25.is_relevant(0, 100, [[0, 50]], **REL)            # covers 100% of the span
    assert bm25.is_relevant(0, 100, [[50, 150]], **REL)          # covers exactly 50% of the span
    assert not bm25.is_relevant(0, 100, [[51, 200]], **REL)      # 49 of 149 chars, and 49% of the chunk
    assert bm25.is_relevant(0, 10, [[2, 1000]], **REL)           # 80% of the chunk lies inside the span
    assert not bm25.is_relevant(0, 10, [[3, 1000]], **REL)
    assert bm25.is_relevant(0, 15, [[3, 1000]], **REL)           # 12 of 15 = 80%, though 0.8 * 15 > 12 in floats


def test_gold_chunk_largest_overlap_ties_to_earlier():
    chunks = pd.DataFrame({"start": [0, 10, 20], "end": [10, 20, 30]})
    assert bm25.gold_chunk(chunks, [[5, 15]]) == 0       # 5 vs 5 characters: the earlier chunk
    assert bm25.gold_chunk(chunks, [[8, 30]]) == 1       # 2, 10, 10
    assert bm25.gold_chunk(chunks, [[0, 2], [21, 30]]) == 2
    assert bm25.gold_chunk(chunks, [[40, 50]]) == -1


def test_rank_ties_go_to_the_earlier_index():
    v = np.array([1.0, 3.0, 3.0, 0.5])
    assert [bm25.rank_of(v, i) for i in range(4)] == [3, 1, 2, 4]


def _corpus():
    docs = pd.DataFrame({"doc_id": ["d1", "d2"], "text": [
        "Apollo rocket launch from Florida.\n\nThe crew saw the lunar far side.",
        "Oceans cover most of Earth.\n\nShips cross oceans carrying cargo and crew."]})
    t1, t2 = docs.at[0, "text"], docs.at[1, "text"]
    chunks = pd.DataFrame({
        "doc_id": ["d1", "d1", "d2", "d2"], "chunk_id": ["d1#0", "d1#1", "d2#0", "d2#1"],
        "start": [0, t1.index("The"), 0, t2.index("Ships")],
        "end": [t1.index("\n\n"), len(t1), t2.index("\n\n"), len(t2)]})
    queries = pd.DataFrame({
        "query_id": ["q1", "q2", "q3", "q4", "q5"], "doc_id": ["d1", "d1", "d2", "d2", "d2"],
        "qtype": ["factoid", "factoid", "structural", "factoid", "structural"],
        "text": ["which rocket launch", "crew", "vessels at sea", "oceans cover Earth", "crew"],
        "spans": [[[0, 10]], [[t1.index("The"), len(t1)]], [[t2.index("Ships"), len(t2)]], [[0, 27]],
                  [[t2.index("Ships"), len(t2)]]]})
    return docs, chunks, queries


def test_diagnostic_on_a_worked_corpus():
    docs, chunks, queries = _corpus()
    per_q, summary = bm25.diagnostic(docs, chunks, queries, condition="G2", **{**KW, "scope": "document"})
    got = per_q.set_index("query_id")
    # q1: only d1#0 holds "rocket"/"launch"; it is also the gold chunk (both scopes)
    assert got.at["q1", "top1_chunk_id_corpus"] == "d1#0" and got.at["q1", "gold_top1_corpus"]
    assert got.at["q1", "gold_top1_document"]
    # q2: "crew" occurs in d1#1 (gold) and d2#1; d1#1 is shorter (5 vs 6 tokens), so BM25 ranks it first
    assert got.at["q2", "top1_chunk_id_corpus"] == "d1#1" and got.at["q2", "gold_top1_corpus"]
    # q5: the same words, gold in d2: the corpus scope puts d1#1 first, the document scope only sees d2's chunks
    assert got.at["q5", "top1_chunk_id_corpus"] == "d1#1" and got.at["q5", "gold_rank_corpus"] == 2
    assert not got.at["q5", "gold_top1_corpus"] and not got.at["q5", "relevant_top1_corpus"]
    assert got.at["q5", "top1_chunk_id_document"] == "d2#1" and got.at["q5", "gold_top1_document"]
    # q3 shares no indexed token: every score is 0, nothing is ranked first
    for sc in ("corpus", "document"):
        assert got.at["q3", f"top1_score_{sc}"] == 0 and not got.at["q3", f"gold_top1_{sc}"]
    # q4: "oceans" is in both d2 chunks; "cover"/"earth" only in d2#0 = gold
    assert got.at["q4", "gold_top1_corpus"] and got.at["q4", "gold_rank_corpus"] == 1
    assert summary["scope"] == "document" and summary["gold_top1_share"] == 0.8
    assert summary["document"]["gold_top1_share"] == 0.8 and summary["corpus"]["gold_top1_share"] == 0.6
    assert summary["n_queries"] == 5 and summary["n_chunks"] == 4
    assert summary["corpus"]["by_qtype"]["structural"]["gold_top1_share"] == 0.0
    assert summary["corpus"]["by_qtype"]["factoid"]["gold_top1_share"] == 1.0
    # brute-force cross-check of the corpus ranking and of the document index (idf over d2's chunks alone)
    text = docs.set_index("doc_id")["text"]
    toks = bm25.tokenize([text[d][s:e] for d, s, e in zip(chunks.doc_id, chunks.start, chunks.end)])
    want = brute_bm25(toks, bm25.tokenize(["crew"])[0])
    assert int(np.argmax(want)) == 1 and got.at["q2", "gold_score_corpus"] == pytest.approx(want[1], rel=1e-5)
    want_d2 = brute_bm25(toks[2:], bm25.tokenize(["crew"])[0])
    assert got.at["q5", "gold_score_document"] == pytest.approx(want_d2[1], rel=1e-5)
    # the headline follows the scope parameter
    assert bm25.diagnostic(docs, chunks, queries, **{**KW, "scope": "corpus"})[1]["gold_top1_share"] == 0.6


def test_chunk_ids_are_derived_when_absent():
    docs, chunks, queries = _corpus()
    per_q, _ = bm25.diagnostic(docs, chunks.drop(columns="chunk_id"), queries, **KW)
    assert list(per_q["gold_chunk_id"]) == ["d1#0", "d1#1", "d2#1", "d2#0", "d2#1"]


def test_diagnostic_does_not_mutate_inputs():
    docs, chunks, queries = _corpus()
    before = [x.copy(deep=True) for x in (docs, chunks, queries)]
    bm25.diagnostic(docs, chunks, queries, **KW)
    for a, b in zip(before, (docs, chunks, queries)):
        pd.testing.assert_frame_equal(a, b)


def test_diagnostic_errors_name_the_query():
    docs, chunks, queries = _corpus()
    bad = queries.assign(doc_id=["d1", "d1", "d9", "d2", "d2"])
    with pytest.raises(ValueError, match="q3.*d9"):
        bm25.diagnostic(docs, chunks, bad, **KW)
    with pytest.raises(ValueError, match="q1"):
        bm25.diagnostic(docs, chunks, queries.assign(spans=[[], [[0, 1]], [[0, 1]], [[0, 1]], [[0, 1]]]), **KW)
    with pytest.raises(ValueError, match="bm25_scope"):
        bm25.diagnostic(docs, chunks, queries, **{**KW, "scope": "web"})


def test_chunk_structure():
    assert bm25.chunk_structure("G2") == "sections_gold"
    assert bm25.chunk_structure("A2") == "sections_induced"
    with pytest.raises(ValueError, match="A0") as err:
        bm25.chunk_structure("A0")
    assert "G4" in str(err.value) and "A3-d2" in str(err.value)  # the message lists every accepted condition


def test_summary_table_rows():
    docs, chunks, queries = _corpus()
    _, summary = bm25.diagnostic(docs, chunks, queries, **KW)
    t = bm25.summary_table(summary).set_index(["scope", "qtype"])
    assert list(t.index) == [(sc, q) for sc in ("document", "corpus") for q in ("all", "factoid", "structural")]
    assert t.at[("corpus", "all"), "gold_top1_share"] == 0.6 and t.at[("corpus", "structural"), "n_queries"] == 2
    assert t.at[("document", "structural"), "gold_top1_share"] == 0.5
