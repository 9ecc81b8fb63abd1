"""Oracle tests: binary nDCG@10, MRR and recall@50 agree with trec_eval (ir_measures over pytrec_eval) on
hundreds of random runs. Scores are distinct, so trec_eval's score order equals our rank order (trec_eval breaks
ties by document id). Relevance judgements (qrels) come from the plain reference rule in
tests/test_metrics_reference.py, not from the library."""

from __future__ import annotations

import ir_measures
import numpy as np
import pandas as pd
import pytest
from ir_measures import RR, R, nDCG

from chunkstudy import config, metrics
from test_metrics_reference import Chunk, is_relevant

N_DOCS, N_QUERIES, DEPTH = 40, 400, 50


def random_corpus(rng: np.random.Generator, spans_are_chunks: bool):
    """40 documents tiled into 20-80 chunks each; 400 queries with 1-4 gold spans; one run of 50 chunks per query
    (about a third from the query's document, the rest from other documents) with distinct scores."""
    chunks, by_doc = [], {}
    for d in range(N_DOCS):
        n = int(rng.integers(20, 81))
        sizes = rng.integers(20, 400, n)
        ends = np.cumsum(sizes)
        doc = [Chunk(f"d{d}-c{i}", f"d{d}", int(e - s), int(e), int(s // 4), 0) for i, (s, e) in enumerate(zip(sizes, ends))]
        by_doc[f"d{d}"] = doc
        chunks += doc
    queries, runs = {}, {}
    for qn in range(N_QUERIES):
        doc = f"d{int(rng.integers(N_DOCS))}"
        own = by_doc[doc]
        length = own[-1].end
        n_spans = int(rng.integers(1, 5))
        if spans_are_chunks:
            picked = rng.choice(len(own), size=min(n_spans, len(own)), replace=False)
            spans = [(own[i].start, own[i].end) for i in picked]
        else:
            starts = rng.integers(0, length - 1, n_spans)
            spans = [(int(s), int(min(length, s + rng.integers(1, 1500)))) for s in starts]
        qid = f"q{qn}"
        queries[qid] = (doc, spans)
        n_own = int(rng.integers(0, 25))
        mine = set(rng.choice(len(own), size=min(n_own, len(own)), replace=False).tolist())
        near = [i for i, c in enumerate(own) if any(c.start < e and s < c.end for s, e in spans)]
        if rng.random() < 0.7:                              # most runs find some evidence
            mine.add(int(rng.choice(near)))
        others = rng.choice(len(chunks), size=DEPTH, replace=False)
        ids = [own[i].chunk_id for i in mine] + [chunks[i].chunk_id for i in others if chunks[i].doc_id != doc]
        runs[qid] = [ids[i] for i in rng.permutation(len(ids))][:DEPTH]
    return chunks, by_doc, queries, runs


def tables(chunks, queries, runs):
    chunk_df = pd.DataFrame({"condition": "X", "doc_id": [c.doc_id for c in chunks],
                             "chunk_id": [c.chunk_id for c in chunks], "start": [c.start for c in chunks],
                             "end": [c.end for c in chunks], "prefix": "",
                             "n_content_tokens": [c.n_content_tokens for c in chunks], "n_prefix_tokens": 0,
                             "route_key": ""})
    query_df = pd.DataFrame({"query_id": list(queries), "doc_id": [d for d, _ in queries.values()],
                             "qtype": "factoid", "text": "?",
                             "spans": [[list(s) for s in sp] for _, sp in queries.values()]})
    run_df = pd.DataFrame([{"embedder": "strong", "reranker": "none", "condition": "X", "query_id": q, "rank": i + 1,
                            "chunk_id": c, "score": float(DEPTH - i) + 0.5} for q, ids in runs.items()
                           for i, c in enumerate(ids)])
    return run_df, chunk_df, query_df


def trec(qrels: dict, runs: dict, measures) -> dict[tuple[str, str], float]:
    run = {q: {c: float(DEPTH - i) + 0.5 for i, c in enumerate(ids)} for q, ids in runs.items()}
    return {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(measures, qrels, run)}


def ours(run_df, chunk_df, query_df) -> dict[tuple[str, str], float]:
    scores = metrics.score_runs(run_df, chunk_df, query_df, config.record("metrics", {}), "oracle")
    return {(q, m): v for q, m, v in zip(scores.query_id, scores.metric, scores.value)}


@pytest.mark.parametrize("seed", [1, 2])
def test_ndcg10_and_mrr_agree_with_trec_eval(seed):
    rng = np.random.default_rng(seed)
    chunks, by_doc, queries, runs = random_corpus(rng, spans_are_chunks=False)
    qrels = {q: {c.chunk_id: int(is_relevant(c, doc, spans, 0.5, 0.8)) for c in by_doc[doc]}
             for q, (doc, spans) in queries.items()}
    assert all(any(r.values()) for r in qrels.values())   # every span overlaps a relevant chunk of a tiling
    want = trec(qrels, runs, [nDCG @ 10, RR])
    got = ours(*tables(chunks, queries, runs))
    nonzero, found = 0, 0
    for q in queries:
        assert got[(q, "nDCG@10")] == pytest.approx(want[(q, "nDCG@10")], abs=1e-12), q
        assert got[(q, "MRR")] == pytest.approx(want[(q, "RR")], abs=1e-12), q
        nonzero += want[(q, "nDCG@10")] > 0
        found += want[(q, "RR")] > 0
    assert nonzero > N_QUERIES // 5 and found > N_QUERIES // 2      # the check is not vacuous


@pytest.mark.parametrize("seed", [3, 4])
def test_recall50_agrees_with_trec_eval_when_spans_are_chunks(seed):
    # When every gold span is one whole chunk of a tiling, "span >= 50% covered by the union of the top 50"
    # is "that chunk is in the top 50": trec_eval's R@50 with the span chunks as the relevant documents.
    rng = np.random.default_rng(seed)
    chunks, by_doc, queries, runs = random_corpus(rng, spans_are_chunks=True)
    qrels = {q: {c.chunk_id: int((c.start, c.end) in spans) for c in by_doc[doc]}
             for q, (doc, spans) in queries.items()}
    want = trec(qrels, runs, [R @ 50])
    got = ours(*tables(chunks, queries, runs))
    values = [want[(q, "R@50")] for q in queries]
    for q in queries:
        assert got[(q, "recall@50")] == pytest.approx(want[(q, "R@50")], abs=1e-12), q
    assert 0 < np.mean(values) < 1
