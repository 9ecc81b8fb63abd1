"""Benchmark: the power analysis of 07 (``power.power_table``) at demo scale, and the two shortcuts that make it
fast, against the literal nested bootstrap.

1. The whole demo-scale analysis (10 documents, 61 queries, the default grid plus the corpus's own size, both
   scenarios and the null), timed in full with the default parameters (``stats.power_*``).
2. The literal nested bootstrap (per simulated study: draw the documents, build its deltas, call
   ``stats.cluster_bootstrap`` for each of the four contrasts, ``stats.holm``) at one corpus size, timed on a few
   studies and scaled linearly to ``power_n_sims`` studies, against ``power.simulate`` at that size.
3. Shortcut 2 alone (inner bootstrap counts as a multinomial over the population's documents) against the same
   simulation with the inner counts drawn from N slot indices per replicate, at the largest demo size.

Run: ``.venv/bin/python bench/bench_power.py [--size 2000] [--literal-sims 5]``. Prints measured times and ratios,
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from chunkstudy import config, paper, params, stats
from chunkstudy.significance import BootstrapTest
from chunkstudy.stats import power

#: the primary cell under the default parameters (what the simulated scores are labelled with)
PRIMARY = params.Params().primary_cell
EFFECTS = {"A1": 0.0, "A3": 0.02, "P": 0.01, "G3": 0.025, "A4": 0.0}


def literal(pop: power.Population, n: int, n_sims: int, n_boot: int, alpha: float, seed: int) -> float:
    """Seconds per simulated study of the literal nested bootstrap (stats' own functions)."""
    rng = np.random.default_rng(seed)
    g = pop.doc_ids.size
    # each drawn document's queries carry its mean delta (same sums and counts, so the same bootstrap, p and cost
    # as its real deltas; the population keeps only the per-document sums)
    t0 = time.perf_counter()
    for s in range(n_sims):
        draw = rng.integers(0, g, n)
        ps = []
        for j in range(len(pop.contrasts)):
            counts = pop.counts[draw, j].astype(int)
            deltas = np.repeat(pop.sums[draw, j] / pop.counts[draw, j], counts)
            clusters = np.repeat(np.arange(n), counts)
            ps.append(stats.cluster_bootstrap(deltas, clusters, n_boot, seed + s, alpha=0.05).p)
        stats.holm(ps)
    return (time.perf_counter() - t0) / n_sims


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2000, help="corpus size for comparisons 2 and 3")
    ap.add_argument("--literal-sims", type=int, default=5)
    args = ap.parse_args()
    st = {k: v.default for k, v in config.SCHEMA["stats"].items()}
    pp = power.params(config.record("stats", st))
    scores, queries = stats.simulate_scores(10, 61, EFFECTS, seed=3, corpus="demo")

    t0 = time.perf_counter()
    table = power.power_table(scores, queries, config.record("stats", st), PRIMARY, "demo",
                              paper.effects_dz("wikipedia"), "paper (wikipedia)")
    t_all = time.perf_counter() - t0
    sizes = sorted(int(n) for n in table["n_docs"].unique())
    print(f"1. demo scale (10 documents, 61 queries): power_table with {len(sizes)} sizes {sizes}, "
          f"{pp.n_sims} studies × {pp.n_boot} resamples each, 3 shift rows (observed, paper, null): {t_all:.2f} s")

    pop = power.population(scores, queries, config.record("stats", st), PRIMARY, "demo")
    shifts = np.zeros((3, 4))
    n = args.size
    t0 = time.perf_counter()
    power.simulate(pop.sums, pop.counts, shifts, n, n_sims=pp.n_sims, test=BootstrapTest(pp.n_boot, 1, pp.alpha, 2))
    t_fast = time.perf_counter() - t0
    per_study = literal(pop, n, args.literal_sims, pp.n_boot, pp.alpha, seed=1)
    t_lit = per_study * pp.n_sims * 3  # three scenarios, each its own nested bootstrap
    print(f"2. N = {n}: power.simulate {t_fast:.2f} s measured; literal nested bootstrap {t_lit:.0f} s "
          f"({per_study:.3f} s per study measured on {args.literal_sims} studies, × {pp.n_sims} studies × 3 "
          f"scenarios); ratio literal / vectorised: {t_lit / t_fast:.0f}×")

    saved = power._SLOT_FACTOR
    power._SLOT_FACTOR = 10 ** 9  # force inner counts from N slot indices per replicate
    try:
        t0 = time.perf_counter()
        power.simulate(pop.sums, pop.counts, shifts, n, n_sims=pp.n_sims, test=BootstrapTest(pp.n_boot, 1, pp.alpha, 2))
        t_slots = time.perf_counter() - t0
    finally:
        power._SLOT_FACTOR = saved
    print(f"3. N = {n}, G = {pop.doc_ids.size}: inner counts from slot indices {t_slots:.2f} s, from the "
          f"multinomial over the population {t_fast:.2f} s; ratio {t_slots / t_fast:.0f}×")


if __name__ == "__main__":
    main()
