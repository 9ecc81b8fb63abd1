"""Benchmark: score a QASPER-sized run table with every metric, and compare with the plain reference.

Synthetic but realistic intervals (paper Section 4: 4,303 questions over 1,508 papers, 2.10 spans/question, 43%
multi-span): 1,508 documents, 11 conditions each tiling every document into 40-80 chunks (about 60), 4,303
queries with 1-8 gold spans (mean about 2.1), and for each of 4 cells (2 embedders x 2 reranker settings) x 11
conditions x query a list of 50 chunks: about 10 from the query's document, the rest from other documents.
That is 4,303 x 11 x 4 = 189,332 lists, 9.5 million run rows.

Prints the wall and CPU time (the machine may be shared: CPU time is the comparable number) of :func:`chunkstudy.metrics.score_runs` for all seven metrics and the speed-up over the
plain reference implementation (tests/test_metrics_reference.py, character sets). The reference is far too slow
for all lists, so it is timed on a random subsample of lists and extrapolated linearly (it scores one list at a
time, so its cost is linear in the number of lists); the subsample's values are also checked to agree.

    .venv/bin/python bench/bench_metrics.py [--scale 1.0] [--ref-lists 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "lib"))

from chunkstudy import config, design, metrics  # noqa: E402
from test_metrics_reference import Chunk, reference_metrics  # noqa: E402

CELLS = [("strong", "none"), ("strong", "xenc"), ("weak", "none"), ("weak", "xenc")]


def synthetic(n_docs: int, n_queries: int, depth: int, rng: np.random.Generator):
    # documents: lengths follow 60 chunks of ~700 characters (about 150 tokens)
    doc_len = rng.integers(30_000, 55_000, n_docs)
    cond_col, doc_col, start_col, end_col, ids = [], [], [], [], []
    for c in range(len(design.CONDITION_NAMES)):
        n_chunks = rng.integers(40, 81, n_docs)
        for d in range(n_docs):
            cuts = np.sort(rng.choice(np.arange(1, doc_len[d]), n_chunks[d] - 1, replace=False))
            bounds = np.r_[0, cuts, doc_len[d]]
            start_col.append(bounds[:-1])
            end_col.append(bounds[1:])
            cond_col.append(np.full(n_chunks[d], c))
            doc_col.append(np.full(n_chunks[d], d))
            ids += [f"{design.CONDITION_NAMES[c]}|d{d}|{i}" for i in range(n_chunks[d])]
    cond, doc = np.concatenate(cond_col), np.concatenate(doc_col)
    start, end = np.concatenate(start_col), np.concatenate(end_col)
    n_content = np.maximum(1, (end - start) // 5)
    n_prefix = np.where(np.isin(cond, [1]), 80, np.where(np.isin(cond, [3, 4, 5, 6, 7, 9, 10]), 12, 0))
    chunk_id = np.asarray(ids, dtype=object)
    chunks = pd.DataFrame({"condition": np.asarray(design.CONDITION_NAMES, dtype=object)[cond],
                           "doc_id": np.char.add("d", doc.astype(str)).astype(object), "chunk_id": chunk_id,
                           "start": start, "end": end, "prefix": "", "n_content_tokens": n_content,
                           "n_prefix_tokens": n_prefix, "route_key": ""})
    # queries: 57% single-span, the rest 2 + Poisson(1.56) spans: mean about 2.1; spans are paragraph-like
    q_doc = rng.integers(0, n_docs, n_queries)
    n_spans = np.where(rng.random(n_queries) < 0.57, 1, np.minimum(2 + rng.poisson(1.56, n_queries), 8))
    spans = []
    for d, k in zip(q_doc, n_spans):
        s = rng.integers(0, doc_len[d] - 1600, k)
        spans.append([[int(a), int(a + rng.integers(200, 1500))] for a in s])
    queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(n_queries)],
                            "doc_id": np.char.add("d", q_doc.astype(str)).astype(object),
                            "qtype": "factoid", "text": "?", "spans": spans})
    # runs: per (cell, condition, query) ~10 chunks of the query's document + others, shuffled
    per_cd = pd.Series(np.arange(len(cond))).groupby(cond * n_docs + doc).agg(["min", "max"])
    lo = per_cd["min"].to_numpy()
    hi = per_cd["max"].to_numpy() + 1
    n_lists = len(CELLS) * len(design.CONDITION_NAMES) * n_queries
    cell_of = np.repeat(np.arange(len(CELLS)), len(design.CONDITION_NAMES) * n_queries)
    cond_of = np.tile(np.repeat(np.arange(len(design.CONDITION_NAMES)), n_queries), len(CELLS))
    q_of = np.tile(np.arange(n_queries), len(CELLS) * len(design.CONDITION_NAMES))
    g = cond_of * n_docs + q_doc[q_of]
    own = rng.integers(0, 1 << 30, (n_lists, depth)) % (hi[g] - lo[g])[:, None] + lo[g][:, None]
    other_doc = rng.integers(0, n_docs, (n_lists, depth))
    go = cond_of[:, None] * n_docs + other_doc
    other = rng.integers(0, 1 << 30, (n_lists, depth)) % (hi[go] - lo[go]) + lo[go]
    pick = np.where(rng.random((n_lists, depth)) < 0.2, own, other)
    # drop repeats inside a list (a retrieval never returns a chunk twice): replace them by fresh foreign chunks
    while True:
        order = np.argsort(pick, axis=1, kind="stable")
        srt = np.take_along_axis(pick, order, axis=1)
        dup = np.zeros(pick.shape, dtype=bool)
        dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
        if not dup.any():
            break
        np.put_along_axis(pick, order, np.where(dup, _same_cond(pick.shape, cond_of, lo, hi, n_docs, rng), srt), axis=1)
    runs = pd.DataFrame({
        "embedder": np.asarray([e for e, _ in CELLS], dtype=object)[np.repeat(cell_of, depth)],
        "reranker": np.asarray([r for _, r in CELLS], dtype=object)[np.repeat(cell_of, depth)],
        "condition": np.asarray(design.CONDITION_NAMES, dtype=object)[np.repeat(cond_of, depth)],
        "query_id": queries["query_id"].to_numpy(dtype=object)[np.repeat(q_of, depth)],
        "rank": np.tile(np.arange(1, depth + 1), n_lists),
        "chunk_id": chunk_id[pick.ravel()],
        "score": np.tile(np.linspace(1.0, 0.0, depth), n_lists)})
    return runs, chunks, queries


def _same_cond(shape, cond_of, lo, hi, n_docs, rng):
    """Random chunks (row indices) of each list's own condition, any document."""
    g = cond_of[:, None] * n_docs + rng.integers(0, n_docs, shape)
    return lo[g] + rng.integers(0, 1 << 30, shape) % (hi[g] - lo[g])


def reference_lists(runs, chunks, queries, params, keys):
    lookup = {(c, i): Chunk(i, d, int(s), int(e), int(nc), int(npx)) for c, i, d, s, e, nc, npx in zip(
        chunks.condition, chunks.chunk_id, chunks.doc_id, chunks.start, chunks.end, chunks.n_content_tokens,
        chunks.n_prefix_tokens)}
    own = {}
    for (c, i), ch in lookup.items():
        own.setdefault((c, ch.doc_id), []).append(ch)
    qinfo = {q: (d, [tuple(s) for s in sp]) for q, d, sp in zip(queries.query_id, queries.doc_id, queries.spans)}
    grouped = {k: g.sort_values("rank").chunk_id.tolist() for k, g in
               runs.set_index(["embedder", "reranker", "condition", "query_id"]).loc[keys].reset_index()
               .groupby(["embedder", "reranker", "condition", "query_id"])}
    t0 = time.process_time()
    out = {}
    for (e, r, c, q), ids in grouped.items():
        doc, spans = qinfo[q]
        out[(e, r, c, q)] = reference_metrics([lookup[(c, i)] for i in ids], own[(c, doc)], doc, spans, params)
    return out, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 1,508 documents / 4,303 queries")
    ap.add_argument("--ref-lists", type=int, default=300, help="lists the reference scores (extrapolated)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n_docs, n_queries = max(2, int(1508 * args.scale)), max(1, int(4303 * args.scale))
    t0 = time.perf_counter()
    runs, chunks, queries = synthetic(n_docs, n_queries, 50, rng)
    params = {k: v.default for k, v in config.SCHEMA["metrics"].items()}
    n_lists = len(CELLS) * len(design.CONDITION_NAMES) * n_queries
    print(f"synthetic data: {n_docs} docs, {len(chunks):,} chunks, {n_queries} queries "
          f"({queries.spans.map(len).mean():.2f} spans/query), {n_lists:,} lists, {len(runs):,} run rows "
          f"[built in {time.perf_counter() - t0:.1f} s]")

    t0, c0 = time.perf_counter(), time.process_time()
    scores = metrics.score_runs(runs, chunks, queries, config.record("metrics", params), "bench")
    t_fast, c_fast = time.perf_counter() - t0, time.process_time() - c0
    names = metrics.metric_names(config.record("metrics", params))
    print(f"score_runs, all {len(names)} metrics: {t_fast:.2f} s wall, {c_fast:.2f} s CPU "
          f"({len(scores):,} score rows; {1e6 * c_fast / n_lists:.1f} us CPU per list)")

    sample = rng.choice(n_lists, size=min(args.ref_lists, n_lists), replace=False)
    lists = runs[["embedder", "reranker", "condition", "query_id"]].iloc[::50].iloc[sample]
    keys = list(lists.itertuples(index=False, name=None))
    ref, t_ref = reference_lists(runs, chunks, queries, params, keys)
    got = scores.set_index(["embedder", "reranker", "condition", "query_id", "metric"])["value"]
    worst = max(abs(got[k + (m,)] - v) for k, vals in ref.items() for m, v in vals.items())
    t_ref_all = t_ref / len(ref) * n_lists
    print(f"reference: {len(ref)} lists in {t_ref:.2f} s CPU -> {t_ref_all:.0f} s CPU extrapolated to {n_lists:,} "
          f"lists (linear in lists); max |difference| on the sample {worst:.2e}")
    print(f"speed-up (reference / vectorised, CPU time, same {n_lists:,} lists): {t_ref_all / c_fast:.0f}x")
    print("means per condition (strong, none):")
    means = metrics.cell_means(scores).loc[("strong", "none")]
    print(means.to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
