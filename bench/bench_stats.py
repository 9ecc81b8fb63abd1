"""Benchmark: the vectorised document-clustered bootstrap against a naive per-replicate loop, at QASPER scale.

QASPER's design in the paper: 4,303 queries over 1,508 documents. Four contrasts × 10,000 resamples each with
``stats.cluster_bootstrap`` are timed in full. The naive loop (for each replicate: draw documents, concatenate
their queries' deltas, take the mean — what one writes first) is timed on fewer resamples and scaled linearly to
10,000, which the output says. Both use the same document draws, and the bench checks that they agree.

Run: ``.venv/bin/python bench/bench_stats.py [--naive-resamples 200]``. Prints measured ratios, asserts nothing
about time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from chunkstudy import design, params, stats
from chunkstudy.metrics import paired

N_DOCS, N_QUERIES, N_BOOT = 1508, 4303, 10_000
#: the primary cell under the default parameters (the simulated scores carry its metric, embedder and reranker)
PRIMARY = params.Params().primary_cell


def naive_cluster_bootstrap(deltas: np.ndarray, clusters: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """The textbook loop: per replicate, draw documents and concatenate their queries (same draws as the library)."""
    labels = np.unique(clusters)
    by_doc = [deltas[clusters == label] for label in labels]
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    for b in range(n_boot):
        draw = rng.integers(0, labels.size, size=labels.size)
        out[b] = np.concatenate([by_doc[i] for i in draw]).mean()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--naive-resamples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=params.SEED)
    args = ap.parse_args()

    effects = {"A1": 0.0, "A3": 0.012, "P": 0.0, "G3": 0.013, "A4": -0.003}
    scores, queries = stats.simulate_scores(N_DOCS, N_QUERIES, effects, seed=args.seed)
    deltas = {}
    for c in design.CONTRASTS:
        d = paired.paired_deltas(scores, queries, c.a, c.b, corpus="sim", metric=PRIMARY.metric,
                                 embedder=PRIMARY.embedder, reranker=PRIMARY.reranker)
        deltas[c.name] = (d["delta"].to_numpy(), d["doc_id"].to_numpy())

    t0 = time.perf_counter()
    fast = {name: stats.cluster_bootstrap(d, c, N_BOOT, args.seed, alpha=0.05) for name, (d, c) in deltas.items()}
    t_fast = time.perf_counter() - t0

    n_naive = args.naive_resamples
    t0 = time.perf_counter()
    naive = {name: naive_cluster_bootstrap(d, c, n_naive, args.seed) for name, (d, c) in deltas.items()}
    t_naive = (time.perf_counter() - t0) * N_BOOT / n_naive

    for name in deltas:  # same draws → same replicates
        np.testing.assert_allclose(fast[name].replicates[:n_naive], naive[name], rtol=1e-9, atol=1e-15)

    print(f"design: {N_QUERIES} queries over {N_DOCS} documents, {len(design.CONTRASTS)} contrasts × {N_BOOT} resamples")
    print(f"vectorised cluster_bootstrap: {t_fast:.3f} s measured in full")
    print(f"naive loop: {t_naive:.1f} s, measured on {n_naive} resamples per contrast and scaled ×{N_BOOT / n_naive:g}")
    print(f"ratio naive / vectorised: {t_naive / t_fast:.0f}×")
    for name, boot in fast.items():
        print(f"  {name}: mean {boot.estimate:+.4f}  95% CI [{boot.ci_low:+.4f}, {boot.ci_high:+.4f}]  p {boot.p:.4f}")


if __name__ == "__main__":
    main()
