"""Retrieval throughput at QASPER scale: queries/s of exact flat search (faiss IndexFlatIP and numpy backends, with
exact float64 rescoring and (-score, chunk_id) tie-breaking) and two-stage search, against plain numpy
(``q @ C.T`` + argpartition + sort of the top k), printed as ratios measured in one run.

Random unit vectors stand in for embeddings (only shapes matter for speed). The full study's QASPER run is about
100k chunks x 5k queries per condition, with about 22k top-level sections.

    .venv/bin/python bench/bench_retrieve.py                 # 100k chunks x 500 queries, d = 384 and 1024
    .venv/bin/python bench/bench_retrieve.py --full          # 100k x 5,000 (the study's scale)
    .venv/bin/python bench/bench_retrieve.py --chunks 20000 --queries 200 --dims 384   # quick
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from chunkstudy import retrieve


def unit(rng, n, d):
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def plain_numpy(q, c, k, batch=512):
    """The baseline: float32 matmul, argpartition, sort the k best by score (no tie policy, no exact rescoring)."""
    out = np.empty((len(q), k), dtype=np.int64)
    for lo in range(0, len(q), batch):
        s = q[lo:lo + batch] @ c.T
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(s, part, axis=1), axis=1)
        out[lo:lo + batch] = np.take_along_axis(part, order, axis=1)
    return out


def faiss_raw(q, c, k):
    import faiss

    index = faiss.IndexFlatIP(c.shape[1])
    index.add(c)
    return index.search(q, k)[1]


def timed(fn):
    t = time.perf_counter()
    res = fn()
    return time.perf_counter() - t, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 1024])
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--sections", type=int, default=22_000, help="top-level sections for two-stage routing")
    ap.add_argument("--full", action="store_true", help="5,000 queries (the study's QASPER scale)")
    ap.add_argument("--seed", type=int, default=20260710)
    ap.add_argument("--faiss-threads", type=int, default=None, help="OpenMP threads for faiss (default: its own)")
    a = ap.parse_args(argv)
    if a.full:
        a.queries = 5_000
    import faiss

    if a.faiss_threads:
        faiss.omp_set_num_threads(a.faiss_threads)
    print(f"chunks={a.chunks:,} queries={a.queries:,} k={a.k} sections={a.sections:,}  cpu cores={os.cpu_count()} "
          f"faiss threads={faiss.omp_get_max_threads()}")
    rng = np.random.default_rng(a.seed)
    ids = np.array([f"c{i:07d}" for i in rng.permutation(a.chunks)])
    keys = np.array([f"s{v:06d}" for v in rng.integers(0, a.sections, a.chunks)])
    for d in a.dims:
        c, q = unit(rng, a.chunks, d), unit(rng, a.queries, d)
        base_t, base = timed(lambda: plain_numpy(q, c, a.k))
        rows = [("plain numpy (baseline)", base_t)]
        raw_t, raw = timed(lambda: faiss_raw(q, c, a.k))
        rows.append(("faiss IndexFlatIP, raw", raw_t))
        ff_t, (ff, _) = timed(lambda: retrieve.flat_search(q, c, ids, a.k, backend="faiss"))
        rows.append(("flat_search backend=faiss", ff_t))
        fn_t, (fn, _) = timed(lambda: retrieve.flat_search(q, c, ids, a.k, backend="numpy"))
        rows.append(("flat_search backend=numpy", fn_t))
        ts_t, _ = timed(lambda: retrieve.two_stage_search(q, c, ids, keys, a.k, n_sections=5, backend="faiss"))
        rows.append(("two_stage_search (faiss)", ts_t))
        agree = (ff == fn).all()
        overlap = np.mean([len(set(x) & set(y)) / a.k for x, y in zip(ff, base)])
        print(f"\nd = {d}: flat_search faiss == numpy backend: {agree}; top-{a.k} sets shared with the baseline: "
              f"{overlap:.4f} (differences = ties/rounding at the cut)")
        print(f"  {'method':30s} {'queries/s':>12s} {'ratio vs plain numpy':>22s}")
        for name, t in rows:
            print(f"  {name:30s} {a.queries / t:12.1f} {base_t / t:22.2f}x")


if __name__ == "__main__":
    main()
