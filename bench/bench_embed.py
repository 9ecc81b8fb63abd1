"""Benchmark: the embedding stage (EmbeddingStore over every condition's texts) against calling the model directly
on the same unique texts, and the share of unique texts across conditions. Ratios measured in one run.

    .venv/bin/python bench/bench_embed.py [--params params/qasper_local.yaml] [--docs 3] [--embedder weak]

Documents come from the parameter file's corpus (``corpus.max_docs`` = ``--docs``); the gold structure stands in
for the induced one and a fixed sentence stands in for the A1 context (this measures the embedding layer, not
02_induce). Prints:

* ``unique share``: distinct embedded texts / chunk rows, overall and per condition pair that shares texts;
* ``store / direct``: first run through the store (hashing, dedupe, longest-first groups of ``embed.flush_every``,
  checksummed shard writes) over the model called once on the unique texts (``SentenceTransformer.encode``, same
  batch size and max_seq_length);
* ``rerun / direct``: the store answering every text from disk (zero model calls, every shard's checksum verified);
* ``no-dedupe / direct``: embedding every chunk row, estimated from the direct per-text rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from chunkstudy import chunking, conditions, config, embed, models  # noqa: E402
from chunkstudy.corpus import build  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", default="params/qasper_local.yaml")
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--embedder", default="weak")
    ap.add_argument("--flush-every", type=int, default=None, help="store group size (default: embed.flush_every)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each (interleaved); the fastest counts")
    a = ap.parse_args()

    cfg = config.load(ROOT / a.params, overrides={"corpus": {"max_docs": a.docs}})
    corpus = build.build_corpus(cfg)
    docs, paras, gold = corpus["documents"].head(a.docs), corpus["paragraphs"], corpus["sections_gold"]
    prm = dict(cfg["chunking"])
    a0 = chunking.a0_windows(docs, paras, gold, prm)
    ctx = a0[["doc_id", "start", "end"]].assign(context="This chunk is from a paper about language models.")
    out = conditions.build_all(docs, paras, gold, gold, ctx, prm)
    ch, texts = out["chunks"], out["texts"]
    all_texts = list(conditions.embedded_texts(ch, docs))
    print(f"{len(docs)} documents, {len(ch)} chunk rows over {ch.condition.nunique()} conditions, "
          f"{len(texts)} unique texts")
    print(f"unique share (unique texts / chunk rows): {len(texts) / len(ch):.3f}")
    rows = ch.groupby("condition", sort=False).text_row.apply(set)
    for x, y in (("A3", "A4"), ("G3", "G4"), ("A0", "A2"), ("A2", "G2"), ("A3", "G3")):
        if x in rows and y in rows:
            print(f"  texts shared {x}~{y}: {len(rows[x] & rows[y]) / len(rows[y]):.3f} of {y}'s")

    spec = cfg["embed"]["embedders"][a.embedder]
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(models.resolve(spec["model"]), device=spec["device"])
    model.max_seq_length = spec["max_seq_length"]
    model.encode(["warm up"], batch_size=spec["batch_size"])

    def direct_run() -> float:
        t = time.perf_counter()
        model.encode(texts, batch_size=spec["batch_size"], normalize_embeddings=True, show_progress_bar=False)
        return time.perf_counter() - t

    e = embed.load_embedder(spec, a.embedder)
    e._model = model  # the same loaded model: the comparison is the stage's overhead, not loading
    flush = a.flush_every or cfg["embed"]["flush_every"]
    direct = first = rerun = float("inf")
    for _ in range(a.repeats):  # interleaved, fastest of each counts: load from other processes hits both alike
        direct = min(direct, direct_run())
        with tempfile.TemporaryDirectory() as d:
            store = embed.EmbeddingStore(d, flush)
            t = time.perf_counter()
            store.embed(e, all_texts)
            first = min(first, time.perf_counter() - t)
            again = embed.EmbeddingStore(d, flush)
            t = time.perf_counter()
            again.embed(e, all_texts)
            rerun = min(rerun, time.perf_counter() - t)
    print(f"direct model on {len(texts)} unique texts: {direct:.2f}s ({len(texts) / direct:.1f} texts/s)")
    print(f"store / direct (first run, {store.n_embedded} embedded in {store.n_calls} calls of up to {flush}): "
          f"{first / direct:.3f}")
    print(f"rerun / direct ({again.n_embedded} embedded): {rerun / direct:.4f}")
    print(f"no-dedupe / direct (estimated, {len(all_texts)} rows): {len(all_texts) / len(texts):.3f}")


if __name__ == "__main__":
    main()
