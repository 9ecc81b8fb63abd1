"""Real data (../shared/data): span sampling on the local Wikipedia articles, the harvested QASPER test split and
the BM25 diagnostic over its gold structural chunks (G2), cross-checked against a brute-force scorer."""

import json
from pathlib import Path

import numpy as np
import pytest

from chunkstudy import config, queries
from chunkstudy.chunks import chunking
from chunkstudy.queries import bm25
from chunkstudy.corpus import build

from test_bm25 import brute_bm25
from test_queries import check_invariants

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.realdata
def test_span_sampling_invariants_on_real_wikipedia_articles(local_cfg, tmp_path):
    cfg = local_cfg("wikipedia_local", tmp_path, max_docs=12)
    out = build.build_corpus(cfg)
    docs, paras, secs = out["documents"], out["paragraphs"], out["sections_gold"]
    assert len(docs) >= 5
    p = dict(cfg.data["queries"])
    samples = queries.sample_spans(docs, paras, secs, config.record("queries", p))
    check_invariants(docs, paras, secs, samples, p)
    # articles passing the study's filters (>= 12 sections, depth >= 3) offer every type; sentence runs at full
    # per_doc (structural is capped by the number of top-level sections)
    counts = samples.groupby(["doc_id", "qtype"]).size().unstack(fill_value=0)
    assert (counts[list(queries.QTYPES)] >= 1).all().all(), counts
    assert (counts["factoid"] == p["per_doc"]).all() and (counts["multihop"] == p["per_doc"]).all()


@pytest.mark.slow
@pytest.mark.realdata
def test_qasper_harvested_queries_and_bm25_against_brute_force(local_cfg, tmp_path):
    cfg = local_cfg("qasper_local", tmp_path, max_docs=40)
    out = build.build_corpus(cfg)
    docs, paras, secs = out["documents"], out["paragraphs"], out["sections_gold"]
    res = queries.build_queries(docs, paras, secs, out["harvested"], cfg.params("queries"))
    q = res["queries"]
    assert len(q) == len(out["harvested"]) and set(q["qtype"]) <= {"extractive", "abstractive", "boolean"}
    texts = dict(zip(docs["doc_id"], docs["text"]))
    assert all(0 <= a < b <= len(texts[d]) for d, sp in zip(q["doc_id"], q["spans"]) for a, b in sp)
    # human questions are far from their evidence: the median sits well under the 0.35 threshold
    assert res["summary"]["rouge_l"]["median"] < 0.2
    assert json.loads(q["provenance"].iat[0])["source"] == "harvested"

    cp, qp, mp = cfg.params("chunking"), cfg.params("queries"), cfg.params("metrics")
    ch = chunking.structural_chunks(docs, paras, secs, chunking.load_counter(cp.tokenizer), cp.max_chunk_tokens,
                                    cp.min_chunk_tokens, "regex")
    per_q, summary = bm25.diagnostic(docs, ch, q, scope="document", k1=qp.bm25_k1, b=qp.bm25_b,
                                     span_frac=mp.span_frac, chunk_frac=mp.chunk_frac)
    assert summary["n_queries"] == len(q) and 0 < summary["gold_top1_share"] < 1
    # oracle: the document-scope top chunk of a sample of queries, recomputed by brute force
    ch = ch.assign(chunk_id=[f"{d}#{i}" for d, i in zip(ch["doc_id"], ch.groupby("doc_id").cumcount())])
    rng = np.random.default_rng(0)
    for i in rng.choice(len(q), size=min(25, len(q)), replace=False):
        row, pq = q.iloc[i], per_q.iloc[i]
        dc = ch[ch["doc_id"] == row["doc_id"]]
        toks = bm25.tokenize([texts[row["doc_id"]][s:e] for s, e in zip(dc["start"], dc["end"])])
        sv = brute_bm25(toks, bm25.tokenize([row["text"]])[0])
        if sv.max() > 0 and (np.sort(sv)[-1] - np.sort(sv)[-2] if len(sv) > 1 else 1) > 1e-4:  # no float32 near-tie
            assert dc["chunk_id"].iat[int(np.argmax(sv))] == pq["top1_chunk_id_document"]
        gold_pos = list(dc["chunk_id"]).index(pq["gold_chunk_id"])
        ov = [bm25.chars_in_spans(int(s), int(e), row["spans"]) for s, e in zip(dc["start"], dc["end"])]
        assert ov[gold_pos] == max(ov) > 0
