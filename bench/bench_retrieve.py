"""Retrieval throughput: queries/s of exact flat search (numpy and faiss IndexFlatIP backends, with exact float64
rescoring and (-score, chunk_id) tie-breaking) and two-stage search, against plain numpy (``q @ C.T`` +
argpartition + sort of the top k), printed as ratios measured in one run; and the QASPER-scale stage (every
condition x both embedders) beside its matrix-product floor.

Random unit vectors stand in for embeddings (only shapes matter for speed). Each method is timed ``--repeats``
times, interleaved with the others in an order that rotates each repeat (so a burst of load from other processes,
or running first, favours no method), and the fastest run counts. "plain numpy, flat's blocks" is the baseline
again at flat_search's block size: when the blocks are equal (512 queries) its gap to the first line shows the
run's noise.

    .venv/bin/python bench/bench_retrieve.py                 # 100k chunks x 500 queries, d = 384 and 1024
    .venv/bin/python bench/bench_retrieve.py --qasper        # + the QASPER-scale line (several minutes)
    .venv/bin/python bench/bench_retrieve.py --chunks 20000 --queries 200 --dims 384   # quick

The QASPER-scale line (paper, Corpora): 4,303 queries, 11 conditions x 2 embedders (bge-large d = 1024, bge-small
d = 384), about 36k chunks per condition, and for the two two-stage conditions about 22,000 sections. Its floor is
the float32 products alone (``q @ C.T`` in the same query blocks, plus ``q @ centroids.T`` for two-stage cells),
measured cell by cell right before the search of that cell.
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


def matmul_floor(q, c, cent=None, batch=None):
    """The float32 products a search cannot avoid, in the blocks flat search uses (results discarded)."""
    step = retrieve.search._block_rows(len(c), batch)
    ct = c.T
    for lo in range(0, len(q), step):
        qb = q[lo:lo + step]
        qb @ ct
    if cent is not None:
        step = retrieve.search._block_rows(len(cent), batch)
        for lo in range(0, len(q), step):
            q[lo:lo + step] @ cent.T


def timed(fn):
    t = time.perf_counter()
    res = fn()
    return time.perf_counter() - t, res


def micro(a, rng, ids, keys):
    for d in a.dims:
        c, q = unit(rng, a.chunks, d), unit(rng, a.queries, d)
        methods = {
            "plain numpy (baseline)": lambda: plain_numpy(q, c, a.k),
            "plain numpy, flat's blocks": lambda: plain_numpy(q, c, a.k, batch=retrieve.search._block_rows(len(c), None)),
            "faiss IndexFlatIP, raw": lambda: faiss_raw(q, c, a.k),
            "flat_search backend=numpy": lambda: retrieve.flat_search(q, c, ids, a.k, backend="numpy"),
            "flat_search backend=faiss": lambda: retrieve.flat_search(q, c, ids, a.k, backend="faiss"),
            "two_stage_search (numpy)": lambda: retrieve.two_stage_search(q, c, ids, keys, a.k, n_sections=5,
                                                                          backend="numpy"),
            "two_stage_search (faiss)": lambda: retrieve.two_stage_search(q, c, ids, keys, a.k, n_sections=5,
                                                                          backend="faiss"),
        }
        best = {name: float("inf") for name in methods}
        results = {}
        names = list(methods)
        for r in range(a.repeats):  # the order rotates each repeat, so no method always runs first or last
            for name in names[r % len(names):] + names[:r % len(names)]:
                t, results[name] = timed(methods[name])
                best[name] = min(best[name], t)
        fn_, ff_ = results["flat_search backend=numpy"], results["flat_search backend=faiss"]
        agree = np.array_equal(fn_[0], ff_[0]) and np.array_equal(fn_[1], ff_[1])
        tn, tf = results["two_stage_search (numpy)"], results["two_stage_search (faiss)"]
        agree2 = all(np.array_equal(x, y) for x, y in zip(tn, tf))
        base = results["plain numpy (baseline)"]
        overlap = np.mean([len(set(x) & set(y)) / a.k for x, y in zip(fn_[0], base)])
        print(f"\nd = {d}: flat numpy == faiss backend: {agree}; two-stage numpy == faiss: {agree2}; top-{a.k} sets "
              f"shared with the baseline: {overlap:.4f} (differences = ties/rounding at the cut)")
        print(f"  {'method':30s} {'queries/s':>12s} {'ratio vs plain numpy':>22s}")
        base_t = best["plain numpy (baseline)"]
        for name, t in best.items():
            print(f"  {name:30s} {a.queries / t:12.1f} {base_t / t:22.2f}x")


def faiss_raw(q, c, k):
    import faiss

    index = faiss.IndexFlatIP(c.shape[1])
    index.add(c)
    return index.search(q, k)[1]


def qasper_scale(a, rng):
    """11 conditions x 2 embedders at the paper's QASPER shapes: search wall time beside the matmul floor."""
    n_q, n_c, n_sec, conds, two_stage = a.qasper_queries, a.qasper_chunks, a.qasper_sections, 11, 2
    print(f"\nQASPER scale: {n_q:,} queries x {conds} conditions x 2 embedders (d = 1024, 384), {n_c:,} chunks per "
          f"condition, {two_stage} two-stage conditions with {n_sec:,} sections; backend={a.qasper_backend}")
    ids = np.array([f"c{i:07d}" for i in rng.permutation(n_c)])
    keys = np.array([f"s{v:06d}" for v in rng.integers(0, n_sec, n_c)])
    total = {"floor": 0.0, "search": 0.0}
    per = {}
    for d in (1024, 384):
        q = unit(rng, n_q, d)
        for ci in range(conds):
            c = unit(rng, n_c, d)
            routed = ci >= conds - two_stage
            cent = retrieve.section_centroids(c, keys)[1] if routed else None
            t_floor, _ = timed(lambda: matmul_floor(q, c, cent))
            if routed:
                t_search, _ = timed(lambda: retrieve.two_stage_search(q, c, ids, keys, a.k, 5,
                                                                      backend=a.qasper_backend))
            else:
                t_search, _ = timed(lambda: retrieve.flat_search(q, c, ids, a.k, backend=a.qasper_backend))
            total["floor"] += t_floor
            total["search"] += t_search
            key = (d, "two-stage" if routed else "flat")
            f0, s0 = per.get(key, (0.0, 0.0))
            per[key] = (f0 + t_floor, s0 + t_search)
    for (d, kind), (f, s) in per.items():
        print(f"  d = {d:4d} {kind:9s}: search {s:7.1f} s, matmul floor {f:7.1f} s, ratio {s / f:5.2f}x")
    print(f"  all 22 cells     : search {total['search']:7.1f} s, matmul floor {total['floor']:7.1f} s, "
          f"ratio {total['search'] / total['floor']:5.2f}x  (target <= 2x)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--dims", type=int, nargs="+", default=[384, 1024])
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--sections", type=int, default=22_000, help="top-level sections for two-stage routing")
    ap.add_argument("--repeats", type=int, default=4, help="timed runs per method (interleaved); the fastest counts")
    ap.add_argument("--qasper", action="store_true", help="add the QASPER-scale line (several minutes)")
    ap.add_argument("--qasper-only", action="store_true", help="only the QASPER-scale line")
    ap.add_argument("--qasper-queries", type=int, default=4_303)
    ap.add_argument("--qasper-chunks", type=int, default=36_000)
    ap.add_argument("--qasper-sections", type=int, default=22_000)
    ap.add_argument("--qasper-backend", default="numpy", choices=["numpy", "faiss"])
    ap.add_argument("--seed", type=int, default=20260710)
    ap.add_argument("--faiss-threads", type=int, default=None, help="OpenMP threads for faiss (default: its own)")
    a = ap.parse_args(argv)
    import faiss

    if a.faiss_threads:
        faiss.omp_set_num_threads(a.faiss_threads)
    print(f"chunks={a.chunks:,} queries={a.queries:,} k={a.k} sections={a.sections:,}  cpu cores={os.cpu_count()} "
          f"faiss threads={faiss.omp_get_max_threads()} repeats={a.repeats}")
    rng = np.random.default_rng(a.seed)
    ids = np.array([f"c{i:07d}" for i in rng.permutation(a.chunks)])
    keys = np.array([f"s{v:06d}" for v in rng.integers(0, a.sections, a.chunks)])
    if not a.qasper_only:
        micro(a, rng, ids, keys)
    if a.qasper or a.qasper_only:
        qasper_scale(a, rng)


if __name__ == "__main__":
    main()
