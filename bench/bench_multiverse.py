"""Benchmark: each contrast's specification curve (chunkstudy.stats.multiverse) at the whole QASPER split's size,
the vectorised test of every specification (draws shared, one matrix product per block) against the loop of
BootstrapTest.test, one specification at a time.

The design is qasper_local's: 1,298 queries over 407 documents, three query types, the multiverse block of
params/qasper.yaml (metric x k: cov-nDCG and nDCG at 5, 10, 20, MRR, recall@50, budget-cov@1024; both embedders;
all, each type alone, all but one; three bootstrap seeds: 378 specifications per contrast, 1,512 in all) and
``--stand-in`` for C2's placebo under a second seed (doubling C2's). Scores are simulated with known effects
(``stats.simulate_scores``), ``stats.n_boot`` 10,000. ``curves`` (pairing, the per-specification test, the null
tests of the median and of Stouffer's Z, the table by axis) is timed in full; the loop on ``--loop-specs`` specifications and scaled to all, which the output
says; the bench checks that both give the same CI and p for those, bit for bit.

``--run params/qasper_local.yaml`` times the same on a finished run's own tables instead (its multiverse block, 06's
scores and queries, after 01-06 ran): 06's other cut-offs (``metrics.cutoffs.multiverse_scores`` over its runs) and
07's ``curves``, and prints the curve in numbers and read by axis.

Run: ``.venv/bin/python bench/bench_multiverse.py [--loop-specs 60] [--stand-in] [--run PARAMS]``. Prints measured
times and ratios; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pandas as pd

from chunkstudy import config, params
from chunkstudy.significance import BootstrapTest
from chunkstudy.stats import multiverse, simulate_scores

N_DOCS, N_QUERIES = 407, 1298
METRICS = ["cov-nDCG@5", "cov-nDCG@10", "cov-nDCG@20", "nDCG@5", "nDCG@10", "nDCG@20", "MRR", "recall@50",
           "budget-cov@1024"]
EFFECTS = {"A3": 0.012, "A1": 0.0, "P": -0.008, "P7": -0.006, "G3": 0.02, "A4": 0.003}


def on_run(params_file: str) -> None:
    """06's other cut-offs and 07's curves, timed on a finished run's tables (``--run``)."""
    from chunkstudy import artifacts
    from chunkstudy.metrics import cutoffs

    cfg = config.load(params_file)
    p = cfg.params()
    runs, chunks, queries = (artifacts.read(cfg, n) for n in ("runs", "chunks", "queries"))
    t0 = time.perf_counter()
    extra = cutoffs.multiverse_scores(runs, chunks, queries, p.metrics, p.multiverse_metrics, cfg.corpus)
    t_06 = time.perf_counter() - t0
    scores = artifacts.read(cfg, "scores")
    t0 = time.perf_counter()
    c = multiverse.curves(scores, extra, queries, p.stats, p.primary_cell, p.multiverse, p.multiverse_metrics,
                          cfg.corpus)
    t_07 = time.perf_counter() - t0
    s = c.summary
    print(f"run {cfg.corpus}: {queries['doc_id'].nunique()} documents, {len(queries):,} queries, B = {p.stats.n_boot:,}; "
          f"{len(c.specifications):,} specifications ({', '.join(f'{r.contrast} {r.n_specs} of {r.n_declared}' for r in s.itertuples())})")
    print(f"06's other cut-offs ({', '.join(map(str, cutoffs.extra_cutoffs(p.multiverse_metrics, p.metrics.cutoff)))}): "
          f"{t_06:.1f} s, {len(extra):,} rows; 07's curves: {t_07:.1f} s")
    for r in s.itertuples():
        print(f"  {r.contrast}: {r.n_specs} specifications ({r.n_analyses} analyses), primary {r.primary_delta:+.4f}, "
              f"median {r.median_delta:+.4f}, same sign {r.share_same_sign:.1%}, "
              f"significant +{r.share_sig_positive:.1%} / -{r.share_sig_negative:.1%}, null p: median {r.null_p:.4f}, "
              f"Stouffer Z {r.stouffer_z:+.2f} p {r.stouffer_p:.4f} ({r.n_docs} documents)"
              f"{'; ' + r.note if r.note else ''}")
    print("by axis (significant + / - · same sign):")
    for r in c.axes.itertuples():
        print(f"  {r.contrast} {r.axis} = {r.level}: {r.n_specs} specifications ({r.n_analyses} analyses), "
              f"+{r.share_sig_positive:.1%} / -{r.share_sig_negative:.1%} · {r.share_same_sign:.1%}, "
              f"median {r.median_delta:+.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop-specs", type=int, default=60, help="specifications the loop is timed on")
    ap.add_argument("--n-boot", type=int, default=10_000)
    ap.add_argument("--stand-in", action="store_true", help="C2 also against P7 (multiverse.conditions)")
    ap.add_argument("--seed", type=int, default=params.SEED)
    ap.add_argument("--run", help="a finished run's parameter file: time 06's cut-offs and 07's curves on its tables")
    args = ap.parse_args()
    if args.run:
        return on_run(args.run)

    scores, queries = simulate_scores(N_DOCS, N_QUERIES, EFFECTS, seed=args.seed, metrics=METRICS,
                                      embedders=["strong", "weak"], qtypes=("extractive", "abstractive", "boolean"))
    block = {"metrics": ["cov-nDCG@10", "nDCG@10", "MRR", "recall@50", "budget-cov@1024"], "cutoffs": [5, 10, 20],
             "embedders": ["strong", "weak"], "query_types": ["all", "each", "all_but_one"],
             "bootstrap_seeds": [args.seed, 1, 2], **({"conditions": {"P": ["P", "P7"]}} if args.stand_in else {})}
    extra = {"P7": {"boundaries": "induced", "prefix": "placebo", "depth": 3, "placebo_seed": 7}}
    p = config.record("", {"stats": {"n_boot": args.n_boot}, "conditions": {"extra": extra}, "multiverse": block,
                           "embed": {"strong": "strong", "embedders": {"strong": {"model": "m"}, "weak": {"model": "m"}}}})
    base, extra_rows = scores[scores["metric"].isin(p.metrics.names)], scores[~scores["metric"].isin(p.metrics.names)]

    t0 = time.perf_counter()
    c = multiverse.curves(base, extra_rows, queries, p.stats, p.primary_cell, p.multiverse, p.multiverse_metrics, "sim")
    t_vec = time.perf_counter() - t0
    n_specs = len(c.specifications)

    # the loop: BootstrapTest.test per specification, on --loop-specs of them drawn at random from every contrast
    wide = multiverse.wide_scores(multiverse.prepare_scores(pd.concat([base, extra_rows]), queries, "sim"))
    wide = wide.assign(qtype=wide["qtype"].astype(str))
    rows = c.specifications.sample(n=min(args.loop_specs, n_specs), random_state=0)
    grids = {r.contrast: multiverse.grid(p.multiverse, p.multiverse_metrics, p.primary_cell, p.stats.seed,
                                         r.condition_a, r.condition_b, sorted(set(wide["qtype"])))
             for r in c.summary.itertuples()}
    picked = [grids[r.contrast][r.spec] for r in rows.itertuples()]  # every specification of the bench computes
    paired, _ = multiverse.spec_deltas(wide, picked)
    test = BootstrapTest.of(p.stats)
    t0 = time.perf_counter()
    looped = [replace(test, seed=x.spec.seed).test(x.delta, x.docs) for x in paired]
    t_loop = (time.perf_counter() - t0) * n_specs / len(paired)
    same = all((a.ci_low, a.ci_high, a.p) == (r.ci_low, r.ci_high, r.p) for a, r in zip(looped, rows.itertuples()))

    s = c.summary
    print(f"design: {N_QUERIES:,} queries over {N_DOCS} documents, 3 query types, {len(s)} contrasts, "
          f"{n_specs:,} specifications ({', '.join(f'{r.contrast} {r.n_specs}' for r in s.itertuples())}), "
          f"B = {args.n_boot:,}")
    print(f"curves (pairing, every specification's test, the null tests, by axis): {t_vec:.1f} s measured in full "
          f"({1000 * t_vec / n_specs:.1f} ms per specification)")
    print(f"loop of BootstrapTest.test: {t_loop:.1f} s, measured on {len(paired)} specifications drawn at random "
          f"({1000 * t_loop / n_specs:.1f} ms each) and scaled x{n_specs / len(paired):.1f}, without the null test")
    print(f"ratio loop / curves: {t_loop / t_vec:.1f}x; the curves' CI and p equal the loop's for those "
          f"{len(paired)}, bit for bit: {same}")
    for r in s.itertuples():
        print(f"  {r.contrast}: primary {r.primary_delta:+.4f}, median {r.median_delta:+.4f}, same sign "
              f"{r.share_same_sign:.1%}, significant +{r.share_sig_positive:.1%} / -{r.share_sig_negative:.1%}, "
              f"null p: median {r.null_p:.4f}, Stouffer Z {r.stouffer_p:.4f}")


if __name__ == "__main__":
    main()
