"""Benchmark: late pooling (chunkstudy.chunks.late) against independent chunk embedding, on the demo corpus, with the
demo's strong embedder (all-MiniLM-L6-v2): seconds, chunk vectors per second, tokens the encoder reads, and how far
the late vectors move from the independent ones (cosine). One process, the same texts, both modes in turn and
``--repeats`` times (the best time of each is kept). Wall seconds and the process's CPU seconds (all its threads)
are both shown: on a shared machine the CPU seconds' ratio is the steadier one; absolute rates hold for neither.

    .venv/bin/python bench/bench_late.py [--window 512] [--overlaps 64 128] [--repeats 2]

The corpus is built in memory (01's code); the chunk sets A0, A2 and A3 come from 04's ``chunk_sets.build_all``
with the gold outline standing in for the induced one (as ``chunkstudy.plan`` does before 02 has run).
Independent embedding goes through the embedding store (a fresh temporary folder: every distinct text embedded
once, in the store's token order, at the embedder's ``max_seq_length`` of 256); late pooling through
``late.late_vectors`` (A0 and A2 share their documents' sequences, so one pass serves both; A3's heading paths are
interleaved into its sequences, one pass per document).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from chunkstudy import config, embed, embed_store  # noqa: E402
from chunkstudy.chunks import chunk_sets, late  # noqa: E402
from chunkstudy.corpus import build  # noqa: E402
from chunkstudy.stats import cost  # noqa: E402

CONDITIONS = ["A0", "A2", "A3"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--overlaps", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()

    import torch

    tmp = Path(tempfile.mkdtemp(prefix="bench-late-"))
    cfg = config.load(ROOT / "params" / "demo.yaml", root=tmp)
    corpus = build.build_corpus(cfg)
    documents, paragraphs, gold = corpus["documents"], corpus["paragraphs"], corpus["sections_gold"]
    chunking = dataclasses.replace(cfg.params("chunking"), conditions=tuple(CONDITIONS))
    built = chunk_sets.build_all(documents, paragraphs, gold, gold, None, chunking)
    chunks, texts = built["chunks"], built["texts"]
    spec = cfg.params("embed").embedders["strong"]
    e = embed.load_embedder(spec, "strong")
    print(f"demo corpus: {len(documents)} documents, {len(chunks)} chunks of {CONDITIONS}, {len(texts)} distinct "
          f"texts; torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")

    counts = dict(zip(range(len(texts)), e.token_counts(texts)))  # tokens with [CLS]/[SEP], not cut

    def independent(rows: list[int]) -> tuple[float, float, np.ndarray]:
        """Best wall and CPU seconds of embedding these distinct texts through a fresh store, and their vectors."""
        best, cpu, vec = float("inf"), float("inf"), np.zeros(0)
        for _ in range(a.repeats):
            store = embed_store.EmbeddingStore(tmp / f"store-{time.perf_counter_ns()}", flush_every=1024)
            t0, c0 = time.perf_counter(), time.process_time()
            vec = store.embed(e, [texts[r] for r in rows])
            best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        return best, cpu, vec

    docs_of = {c: late.documents_from_chunks(chunks[chunks["condition"] == c], documents, with_prefixes=(c == "A3"))
               for c in CONDITIONS}
    print(f"late pooling, window {a.window} (the encoder's {late.encoder_window(e)} positions); independent "
          f"embedding at max_seq_length {e.max_seq_length}")
    print(f"{'set':>6} {'mode':>12} {'vectors':>7} {'texts':>5} {'windows':>7} {'tokens':>8} {'seconds':>7} "
          f"{'vec/s':>6} {'tok/s':>6} {'time':>6} {'cpu s':>6} {'cpu':>6} {'cos mean':>8} {'cos min':>7}")
    for label, conds in (("A0+A2", ["A0", "A2"]), ("A3", ["A3"])):
        sel = chunks[chunks["condition"].isin(conds)]
        rows = list(dict.fromkeys(sel["text_row"].tolist()))
        t_ind, c_ind, v_ind = independent(rows)
        read = sum(min(counts[r], e.max_seq_length) for r in rows)
        print(f"{label:>6} {'independent':>12} {len(sel):>7} {len(rows):>5} {'':>7} {read:>8,} {t_ind:>7.1f} "
              f"{len(sel) / t_ind:>6.1f} {read / t_ind:>6,.0f} {1.0:>5.2f}x {c_ind:>6.1f} {1.0:>5.2f}x")
        vec_of = dict(zip(rows, v_ind))
        docs = [d for c in conds for d in docs_of[c][0]]
        order = np.concatenate([np.flatnonzero((chunks["condition"] == c).to_numpy())[docs_of[c][1]] for c in conds])
        for overlap in a.overlaps:
            t_late, c_late, enc, got = float("inf"), float("inf"), None, np.zeros(0)
            for _ in range(a.repeats):
                enc = late.LateEncoder(e, window=a.window, overlap=overlap)
                t0, c0 = time.perf_counter(), time.process_time()
                got = np.concatenate(late.late_vectors(enc, docs))
                t_late, c_late = min(t_late, time.perf_counter() - t0), min(c_late, time.process_time() - c0)
            assert enc is not None
            seqs = list(dict.fromkeys(late.compose(d).text for d in docs))
            lengths = [len(x) for x in enc.tokenizer(seqs, add_special_tokens=False, verbose=False)["input_ids"]]
            assert cost.late_window_tokens(lengths, a.window, overlap, sum(enc.layout)) == enc.n_tokens
            ind = np.stack([vec_of[r] for r in chunks["text_row"].to_numpy()[order]])
            cos = (got * ind).sum(axis=1)
            print(f"{label:>6} {f'late o{overlap}':>12} {len(got):>7} {enc.n_sequences:>5} {enc.n_windows:>7} "
                  f"{enc.n_tokens:>8,} {t_late:>7.1f} {len(got) / t_late:>6.1f} {enc.n_tokens / t_late:>6,.0f} "
                  f"{t_late / t_ind:>5.2f}x {c_late:>6.1f} {c_late / c_ind:>5.2f}x {cos.mean():>8.3f} {cos.min():>7.3f}")


if __name__ == "__main__":
    main()
