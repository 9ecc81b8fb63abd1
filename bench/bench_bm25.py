"""BM25 and fusion throughput (stage 05's ``bm25`` and ``hybrid`` modes; docs/beyond.md, "Retrieval modes"): the
project's path against plain bm25s on the same tokens, and vectorised fusion against a per-query loop, printed as
ratios measured in one run; with ``--run``, the memory of the whole run's BM25 indexes.

* **index**: ``lexical.build_index`` (bm25s's ``build_index_from_ids`` over a sorted vocabulary) against
  ``bm25s.BM25.index`` on the token lists (bm25s numbers the vocabulary itself);
* **query**: ``lexical.flat_search`` (one sparse product per block of queries, float64 sums, every tie at the cut
  rescored, top k by (-score, chunk_id)) against ``bm25s.BM25.retrieve`` (bm25s's numpy backend: a loop over the
  queries, each adding its tokens' rows, then its top-k selection) on the same query tokens; the lists are
  compared (the same chunk sets at every rank where bm25s's float32 scores do not tie);
* **fusion**: ``fusion.flat`` (reciprocal rank fusion of the dense and BM25 top ``depth``, one sort and one
  ``reduceat`` for all queries) against the same fusion written per query with a dict.

Each method is timed ``--repeats`` times, interleaved, and the fastest run counts.

    .venv/bin/python bench/bench_bm25.py                                  # synthetic: 40k chunks, 1,300 queries
    .venv/bin/python bench/bench_bm25.py --run params/qasper_local.yaml   # a finished run's chunks and queries
"""

from __future__ import annotations

import argparse
import resource
import time

import bm25s
import numpy as np

from chunkstudy import config
from chunkstudy.params import Bm25Params, FusionParams
from chunkstudy.retrieve import fusion, lexical


def synthetic(n_chunks: int, n_queries: int, seed: int) -> tuple[list[str], list[str], list[str]]:
    """Zipf-distributed words (a 30,000-word vocabulary), chunks of 150-250 words, queries of 6-14."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(30_000)])
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    texts = [" ".join(rng.choice(vocab, size=rng.integers(150, 250), p=p)) for _ in range(n_chunks)]
    queries = [" ".join(rng.choice(vocab, size=rng.integers(6, 14), p=p)) for _ in range(n_queries)]
    return texts, queries, [f"c{i:07d}" for i in range(n_chunks)]


def from_run(params_file: str, condition: str) -> tuple[list[str], list[str], list[str]]:
    """One condition's indexed texts (prefix + content), ids and the queries of a finished run."""
    from chunkstudy import artifacts
    from chunkstudy.chunks import chunk_sets

    cfg = config.load(params_file)
    chunks = artifacts.read(cfg, "chunks")
    cc = chunks[chunks["condition"] == condition].reset_index(drop=True)
    texts = chunk_sets.embedded_texts(cc, artifacts.read(cfg, "documents"))
    return list(texts), artifacts.read(cfg, "queries")["text"].astype(str).tolist(), cc["chunk_id"].tolist()


def best(fn, repeats: int) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def loop_rrf(dense_idx, bm_idx, bm_n, k, rrf_k=60):
    """Reciprocal rank fusion per query with a dict (the baseline)."""
    out = []
    for q in range(len(dense_idx)):
        score: dict[int, float] = {}
        for lst in (dense_idx[q].tolist(), bm_idx[q, :bm_n[q]].tolist()):
            for r, row in enumerate(lst, 1):
                score[row] = score.get(row, 0.0) + 1.0 / (rrf_k + r)
        out.append(sorted(score, key=lambda row: (-score[row], row))[:k])
    return out


def agreement(ours: np.ndarray, n: np.ndarray, theirs: np.ndarray, their_scores: np.ndarray) -> float:
    """Share of the queries whose top lists hold the same chunks, ranks with float32 ties in bm25s's scores
    aside (bm25s orders a tie as its selection leaves it; the study by chunk_id)."""
    same = 0
    for q in range(len(ours)):
        k = int(n[q])
        a, b, s = ours[q, :k], theirs[q, :k], their_scores[q, :k]
        distinct = np.r_[np.diff(s) != 0, True] & np.r_[True, np.diff(s) != 0]
        same += bool((a[distinct] == b[distinct]).all()) if k else True
    return same / max(len(ours), 1)


def bench(texts: list[str], queries: list[str], ids: list[str], k: int, depth: int, repeats: int) -> None:
    p = Bm25Params()
    t0 = time.perf_counter()
    tokens, q_tokens = lexical.tokenize(texts, p), lexical.tokenize(queries, p)
    print(f"{len(texts):,} chunks ({sum(map(len, tokens)):,} tokens), {len(queries):,} queries; tokenized in "
          f"{time.perf_counter() - t0:.1f} s (bm25s.tokenize)")
    t_ours_ix, index = best(lambda: lexical.build_index(tokens, p), repeats)
    model = bm25s.BM25(method=p.method, k1=p.k1, b=p.b)
    t_theirs_ix, _ = best(lambda: model.index(tokens, show_progress=False), repeats)
    print(f"index: ours {t_ours_ix:.2f} s, bm25s {t_theirs_ix:.2f} s ({t_theirs_ix / t_ours_ix:.2f}x); "
          f"{index.weights.nnz:,} (term, chunk) pairs, {index.nbytes / 2**20:.1f} MiB")
    known = [[t for t in q if t in model.vocab_dict] or [""] for q in q_tokens]
    t_ours, (idx, scores, n) = best(lambda: lexical.flat_search(index, q_tokens, ids, k), repeats)
    t_theirs, (their_idx, their_scores) = best(lambda: model.retrieve(known, k=k, show_progress=False,
                                                                      n_threads=1), repeats)
    counts = lexical.query_counts(index, q_tokens)
    step = lexical.block_rows(index.n_docs)
    t_floor, _ = best(lambda: [(counts[lo:lo + step] @ index.weights).toarray()
                               for lo in range(0, len(queries), step)], repeats)
    print(f"query (top {k}): ours {t_ours:.2f} s ({len(queries) / t_ours:,.0f} queries/s), bm25s.retrieve "
          f"{t_theirs:.2f} s ({len(queries) / t_theirs:,.0f} queries/s): {t_theirs / t_ours:.2f}x; the sparse "
          f"products alone (the floor) {t_floor:.2f} s, ours {t_ours / t_floor:.2f}x the floor; same lists "
          f"(float32 ties aside) for {agreement(idx, n, their_idx, their_scores):.1%} of the queries")
    rng = np.random.default_rng(0)
    dense = (np.array([rng.permutation(len(ids))[:depth] for _ in range(len(queries))]),
             np.sort(rng.random((len(queries), depth)))[:, ::-1])
    bm = lexical.flat_search(index, q_tokens, ids, depth)
    fp = FusionParams()
    t_vec, fused = best(lambda: fusion.flat(dense, bm, ids, fp, k, depth), repeats)
    t_loop, looped = best(lambda: loop_rrf(dense[0], bm[0], bm[2], k), repeats)
    print(f"fusion (rrf, depth {depth}): vectorised {t_vec * 1000:.1f} ms, per-query loop {t_loop * 1000:.1f} ms: "
          f"{t_loop / t_vec:.1f}x")


def memory(params_file: str) -> None:
    """Build every condition's BM25 index of a finished run, as 05 does (each distinct text tokenized once, the
    indexes kept for the stage), and print their bytes and the peak resident memory of this process before and
    after."""
    import pandas as pd

    from chunkstudy import artifacts
    from chunkstudy.chunks import chunk_sets
    from chunkstudy.retrieve import modes

    cfg = config.load(params_file)
    chunks = artifacts.read(cfg, "chunks")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    texts = chunk_sets.embedded_texts(chunks, artifacts.read(cfg, "documents"))
    lx = modes.lexical_inputs(texts, artifacts.read(cfg, "queries")["text"].astype(str).tolist(), Bm25Params())
    for cond, cc in chunks.groupby("condition", sort=True):
        lx.index(str(cond), cc.index.to_numpy())
    report = pd.DataFrame(modes.lexical_report(lx)["conditions"])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{params_file}: {len(chunks):,} chunks in {len(report)} conditions, {lx.n_texts:,} distinct texts "
          f"tokenized in {lx.tokenize_seconds:.1f} s; indexes built in {time.perf_counter() - t0:.1f} s; "
          f"{report['index_bytes'].sum() / 2**20:.1f} MiB of BM25 indexes ({report['nnz'].sum():,} pairs); "
          f"peak resident memory {before:.0f} MiB before, {after:.0f} MiB after")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="a finished run's parameter file: its chunks and queries (else synthetic)")
    ap.add_argument("--condition", default="A1", help="the run's condition to index (--run)")
    ap.add_argument("--chunks", type=int, default=40_000)
    ap.add_argument("--queries", type=int, default=1_300)
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.run:  # first, so that the peak resident memory is the indexes' own
        memory(a.run)
    texts, queries, ids = from_run(a.run, a.condition) if a.run else synthetic(a.chunks, a.queries, 1)
    print(f"bm25s {bm25s.__version__}; {'run ' + a.run + ', condition ' + a.condition if a.run else 'synthetic'}")
    bench(texts, queries, ids, a.k, a.depth, a.repeats)


if __name__ == "__main__":
    main()
