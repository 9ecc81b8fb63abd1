"""Notebook 05_retrieve end to end on a small hand-built store (real MiniLM embeddings, real untrained
cross-encoder architecture): it runs, writes schema-valid runs and section_recall, and a rerun replays the
reranker and query embeddings from their caches."""

import json

import numpy as np
import pandas as pd
import pytest

from chunkstudy import artifacts, config, embed, embed_store, runner
from chunkstudy.chunks import chunk_sets
from chunkstudy.rerank import ScoreStore

TOPICS = {
    "rail": ["The railway climbs the mountain in tight spirals.", "Steam locomotives were replaced by diesels.",
             "The summit station sits above the tree line."],
    "salt": ["Saltwrights boiled brine in lead pans.", "The guild guarded its recipes jealously.",
             "Salt taxes funded the harbour walls."],
    "river": ["The river floods each spring after the thaw.", "Otters returned once the mills closed.",
              "A ferry crossed at the old ford."],
}


def build_store(cfg):
    docs, chunk_rows = [], []
    for d, (topic, sents) in enumerate(TOPICS.items()):
        paras = [f"{s} " * 3 for s in sents] * 2  # six paragraphs, two per section
        text = "\n\n".join(p.strip() for p in paras)
        docs.append(dict(doc_id=f"doc{d}", title=topic.title(), text=text, source="test"))
        starts = [0]
        for p in paras[:-1]:
            starts.append(starts[-1] + len(p.strip()) + 2)
        ends = [s + len(p.strip()) for s, p in zip(starts, paras)]
        for i in range(6):
            sec = i // 2
            start = starts[i]
            end = starts[i + 1] if i < 5 else ends[i]
            for cond in ("A0", "A3", "A4"):
                chunk_rows.append(dict(condition=cond, doc_id=f"doc{d}", chunk_id=f"{cond}|doc{d}|{i:04d}",
                                       start=start, end=end,
                                       prefix="" if cond == "A0" else f"[{topic.title()} › Part {sec}]\n\n",
                                       n_content_tokens=20, n_prefix_tokens=0 if cond == "A0" else 6,
                                       route_key=f"doc{d}#s{sec}", section_id=f"doc{d}#s{sec}"))
    documents = pd.DataFrame(docs)
    chunks = pd.DataFrame(chunk_rows)
    texts = chunk_sets.embedded_texts(chunks, documents)
    rows, uniq = chunk_sets.text_rows(texts)
    chunks["text_row"] = rows
    store = embed_store.EmbeddingStore(artifacts.cache_dir(cfg, cfg.params("embed").store), cfg.params("embed").flush_every)
    for key, spec in cfg.params("embed").embedders.items():
        artifacts.write_vectors(cfg, key, store.embed(embed.load_embedder(spec, key), uniq))
    queries = pd.DataFrame({
        "query_id": ["q0", "q1", "q2"], "doc_id": ["doc0", "doc1", "doc2"], "qtype": "factoid",
        "text": ["What replaced the steam engines?", "How was brine boiled?", "When does the river flood?"],
        "spans": [[[0, 20]]] * 3,  # inside each document's first section
    })
    artifacts.write(cfg, "documents", documents)
    artifacts.write(cfg, "chunks", chunks)
    artifacts.write(cfg, "queries", queries)
    return chunks, queries


@pytest.mark.slow
def test_notebook_05_runs_and_replays_from_caches(tmp_path, root):
    cfg = config.load(root / "params" / "demo.yaml", root=tmp_path)
    chunks, queries = build_store(cfg)
    stage = runner.Stage("05_retrieve", root / "notebooks" / "05_retrieve.py")
    runner.execute(cfg, stage, tmp_path / "executed")
    runs = artifacts.read(cfg, "runs")
    recall = artifacts.read(cfg, "section_recall")
    n_chunks = chunks.groupby("condition").size().to_dict()  # 18 per condition < k: every chunk is listed
    assert set(runs["reranker"]) == {"none", "xenc-untrained"}
    first = runs[runs["reranker"] == "none"]
    assert len(first) == 2 * 3 * sum(n_chunks.values())
    rr = runs[runs["reranker"] == "xenc-untrained"]
    assert set(rr["embedder"]) == {"strong"} and set(rr["condition"]) == {"A0", "A3", "A4"}
    top_n = cfg.data["retrieve"]["rerankers"]["xenc-untrained"]["top_n"]
    assert rr.groupby(["condition", "query_id"])["reranked"].sum().eq(min(top_n, 18)).all()  # 18 chunks each
    assert set(recall["condition"]) == {"A4"} and len(recall) == 2 * 3
    a4 = first[first["condition"] == "A4"]
    # 5 of the 9 sections routed, 2 chunks each: 10 routed entries, then 8 from the backfill
    assert a4.groupby(["embedder", "query_id"])["source"].apply(
        lambda s: list(s) == ["routed"] * 10 + ["backfill"] * 8).all()
    executed = json.loads((tmp_path / "executed" / "05_retrieve.ipynb").read_text())
    assert any("in_routed" in "".join(o.get("data", {}).get("text/plain", ""))
               for c in executed["cells"] for o in c.get("outputs", []))
    # rerun: identical tables, nothing recomputed (the score store holds every pair)
    n_scores = len(ScoreStore(artifacts.cache_dir(cfg, "rerank")))
    runner.execute(cfg, stage, tmp_path / "executed")
    pd.testing.assert_frame_equal(artifacts.read(cfg, "runs"), runs)
    pd.testing.assert_frame_equal(artifacts.read(cfg, "section_recall"), recall)
    assert len(ScoreStore(artifacts.cache_dir(cfg, "rerank"))) == n_scores
    assert np.isfinite(rr.loc[rr["reranked"], "score"]).all()
