"""BEIR/TREC exports and the import of an outside TREC run (chunkstudy.export), checked by an outside implementation:
ir_measures (pytrec_eval, i.e. trec_eval) on the exported qrels and runs gives the study's binary nDCG@10 and MRR per
query, and nDCG@10 on the graded qrels gives cov-nDCG@10 for chunk sets that tile their documents. On random
synthetic runs here; on every cell of a real run in tests/test_byo_pipeline.py (tiny plus user conditions) and, as a
slow test, of the demo."""

from __future__ import annotations

import io

import ir_measures
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_measures import RR, R, nDCG

from chunkstudy import config, export, metrics

MP = config.record("metrics", {})


def _chunks(cuts: dict[str, list[int]], condition: str = "X") -> pd.DataFrame:
    rows = []
    for d, edges in cuts.items():
        for i, (s, e) in enumerate(zip(edges, edges[1:])):
            rows.append({"condition": condition, "doc_id": d, "chunk_id": f"{condition}|{d}|{i:04d}", "start": s,
                         "end": e, "n_content_tokens": max(1, (e - s) // 4), "n_prefix_tokens": 0})
    return pd.DataFrame(rows)


def test_qrels_follow_the_papers_rule_and_the_coverage_weights():
    chunks = _chunks({"d": [0, 10, 30, 100]})
    queries = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "qtype": ["f"],
                            "spans": [[[5, 15], [40, 50]]]})  # span 1 split 5/5 over chunks 0 and 1
    q = export.qrels(chunks, queries, "X", MP).set_index("chunk_id")
    # chunk 0 [0,10): 5 of span 1 = 50% of it (span_frac 0.5): relevant; gain (5/10)/2
    # chunk 1 [10,30): 5 of span 1: relevant; gain (5/10)/2; chunk 2 [30,100): all of span 2: relevant; gain 1/2
    assert q["relevant"].to_dict() == {"X|d|0000": True, "X|d|0001": True, "X|d|0002": True}
    assert q["gain"].to_dict() == pytest.approx({"X|d|0000": 0.25, "X|d|0001": 0.25, "X|d|0002": 0.5})
    small = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "qtype": ["f"], "spans": [[[0, 30]]]})
    q2 = export.qrels(_chunks({"d": [0, 3, 30, 100]}), small, "X", MP).set_index("chunk_id")
    # [0,3) is 10% of the span but 100% of itself (chunk_frac 0.8): relevant; [3,30) 90% of the span: relevant
    assert q2["relevant"].all() and q2["gain"].sum() == pytest.approx(1.0)


def test_run_lines_encode_the_rank_as_the_score():
    runs = pd.DataFrame({"query_id": ["q1", "q1", "q2"], "chunk_id": ["b", "a", "c"], "rank": [2, 1, 1],
                         "score": [0.9, 0.1, 0.5]})  # a reranked list: scores not monotone in rank
    text = export.trec_run_text(runs, "X.strong.none", k=50)
    assert text.splitlines() == ["q1 Q0 a 1 50 X.strong.none", "q1 Q0 b 2 49 X.strong.none",
                                 "q2 Q0 c 1 50 X.strong.none"]


def _agreement(chunks, queries, runs, k):
    """Per query: (ours, ir_measures') for nDCG@10, MRR, cov-nDCG@10 (graded qrels) and recall@50 / R@50."""
    ours = metrics.score_runs(runs, chunks, queries, MP, "c")
    ours = ours.pivot_table(index="query_id", columns="metric", values="value")
    qr = export.qrels(chunks, queries, "X", MP)
    binary = [ir_measures.Qrel(q, c, 1) for q, c in zip(qr.loc[qr["relevant"], "query_id"],
                                                        qr.loc[qr["relevant"], "chunk_id"])]
    grades = np.rint(qr["gain"] * export.GRADE_SCALE).astype(int)
    graded = [ir_measures.Qrel(q, c, int(g)) for q, c, g in zip(qr["query_id"], qr["chunk_id"], grades) if g > 0]
    run = list(ir_measures.read_trec_run(io.StringIO(export.trec_run_text(runs, "t", k))))
    theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc([nDCG@10, RR, R@50], binary, run)}
    graded_nd = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG@10], graded, run)}
    return ours, theirs, graded_nd


@settings(max_examples=40, derandomize=True, deadline=None)
@given(st.integers(0, 10_000))
def test_ir_measures_agrees_with_the_study_on_random_runs(seed):
    rng = np.random.default_rng(seed)
    cuts = {d: [0, *sorted(rng.choice(np.arange(5, 395), size=int(rng.integers(3, 12)), replace=False)), 400]
            for d in ("d1", "d2", "d3")}
    chunks = _chunks(cuts)
    qs = []
    for i in range(6):
        d = f"d{rng.integers(1, 4)}"
        spans = sorted({(int(s), int(s + rng.integers(5, 80))) for s in rng.integers(0, 300, int(rng.integers(1, 4)))})
        qs.append({"query_id": f"q{i}", "doc_id": d, "qtype": "f", "spans": [list(s) for s in spans]})
    queries = pd.DataFrame(qs)
    k = 12
    rows = []
    for q in queries["query_id"]:
        picked = rng.permutation(chunks["chunk_id"].to_numpy())[:int(rng.integers(1, k + 1))]
        rows += [{"embedder": "e", "reranker": "none", "condition": "X", "query_id": q, "rank": r + 1,
                  "chunk_id": c, "score": float(rng.random())} for r, c in enumerate(picked)]
    runs = pd.DataFrame(rows)
    ours, theirs, graded_nd = _agreement(chunks, queries, runs, k)
    for q in queries["query_id"]:
        for metric, m in (("nDCG@10", "nDCG@10"), ("MRR", "RR")):
            assert theirs.get((q, m), 0.0) == pytest.approx(ours.loc[q, metric], abs=1e-9), (q, metric)
        # graded qrels: cov-nDCG@10 up to the grades' rounding (these chunk sets tile their documents)
        assert graded_nd.get(q, 0.0) == pytest.approx(ours.loc[q, "cov-nDCG@10"], abs=1e-5)


def test_recall_differs_by_definition_when_two_chunks_share_a_span():
    """The study's recall@50 is span-level (a gold span half covered by the union of the top chunks counts); R@50
    is chunk-level. A span split evenly over two chunks, only one of them retrieved: the study's recall is 1
    (50% covered), ir_measures' R@50 is 1/2 (one of two relevant chunks)."""
    chunks = _chunks({"d": [0, 10, 20, 100]})
    queries = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "qtype": ["f"], "spans": [[[5, 15]]]})
    runs = pd.DataFrame({"embedder": "e", "reranker": "none", "condition": "X", "query_id": "q", "rank": [1],
                         "chunk_id": ["X|d|0000"], "score": [1.0]})
    ours, theirs, _ = _agreement(chunks, queries, runs, 50)
    assert ours.loc["q", "recall@50"] == 1.0 and theirs[("q", "R@50")] == 0.5


def test_an_outside_run_is_scored_by_the_studys_metrics():
    chunks = _chunks({"d1": [0, 50, 100], "d2": [0, 60, 120]})
    queries = pd.DataFrame({"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "qtype": ["f", "f"],
                            "spans": [[[10, 40]], [[70, 110]]]})
    trec = ("q1 Q0 X|d2|0000 1 3.5 bm25\nq1 Q0 X|d1|0000 2 2.0 bm25\n"
            "q2 Q0 X|d2|0001 7 9.0 bm25\n")  # q2's rank column is ignored: trec_eval orders by score
    got = export.score_trec_run(io.StringIO(trec), chunks, queries, "X", MP, "c", k=50)
    assert set(got["reranker"]) == {export.IMPORTED} and set(got["embedder"]) == {"bm25"}
    v = got.pivot_table(index="query_id", columns="metric", values="value")
    assert v.loc["q1", "MRR"] == 0.5 and v.loc["q2", "MRR"] == 1.0
    assert v.loc["q1", "cov-nDCG@10"] == pytest.approx(1 / np.log2(3))  # the only useful chunk at rank 2
    with pytest.raises(export.ExportError, match=r"not chunks of X, e.g. 'Y\|d1\|0000'"):
        export.score_trec_run(io.StringIO("q1 Q0 Y|d1|0000 1 1 t\n"), chunks, queries, "X", MP, "c", k=50)
    with pytest.raises(export.ExportError, match="line 2: expected 'qid Q0 docid rank score tag'"):
        export.read_trec_run(io.StringIO("q1 Q0 a 1 1 t\nq1 a 2\n"))


@pytest.mark.slow
def test_ir_measures_reproduces_every_cell_of_the_demo(root, tmp_path):
    """The acceptance check on the demo (slow: runs ./run_all.sh demo, stages already current are skipped): every
    cell (condition × embedder × reranker, the untrained reranker's included) exported and scored by ir_measures
    equals the study's nDCG@10 and MRR per query to 1e-9."""
    from chunkstudy import runner

    runner.run(root / "params" / "demo.yaml", root, log=print)
    cfg = config.load(root / "params" / "demo.yaml", root=root)
    check = export.check_with_ir_measures(cfg, export.export_run(cfg, tmp_path))
    # every embedder unreranked, and each reranker over the strong embedder's lists
    assert len(check) == len(cfg.data["chunking"]["conditions"]) * (len(cfg.data["embed"]["embedders"])
                                                              + len(cfg.data["retrieve"]["rerankers"]))
    assert check["max_diff_nDCG"].max() <= 1e-9 and check["max_diff_RR"].max() <= 1e-9
    assert check["max_diff_graded_nDCG"].max() <= 1e-5
