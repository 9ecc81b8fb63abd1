"""The calibration table (docs/design.md, "Calibrated at the sizes users bring"): how often each test the report
prints rejects a true null, and how often its 95% CI covers the truth, at G = 5 to 1,500 documents, on real runs'
deltas.

**Data.** Each pool is a finished run's primary cell (``data/<corpus>/06_metrics/scores`` with its queries): the
paired per-query deltas of the confirmatory contrasts (m = 4: C1-C4) and of seven (m = 7: C1-C4 and A3 − A2,
A2 − A0, G3 − G2, which every run of the paper's conditions has), each re-centred to a true null that keeps its
zeros (:class:`chunkstudy.stats.calibration.Pool`), with the run's own queries per document. A pool is used when
its run exists: ``demo`` after ``./run_all.sh demo``, ``qasper_local`` after ``./run_all.sh qasper_local``; the
bench says which pools it used and skips the others.

**Studies.** A simulated study draws G documents with replacement from the pool; *correlated* contrasts share the
draw (a document brings its deltas of every contrast, with their real dependence), *independent* ones draw apart.
Every procedure of :data:`chunkstudy.stats.calibration.PROCEDURES` tests the m contrasts at alpha = 0.05 with Holm
over the family: the paper's percentile cluster bootstrap, the wild cluster bootstrap-t with the null imposed
(``wild``: Webb weights below :data:`chunkstudy.stats.calibrated.WEBB_BELOW` documents, Rademacher from there,
enumerated where 2^G ≤ B; ``wild-et`` its equal-tailed p; ``wild-rademacher`` / ``wild-webb`` at small G, to show
where each weight is needed, and a table of the two at G = 6-15), CR2 with Bell–McCaffrey df and CR1 with G − 1 df.
Then the dose-response slope's p (the per-query slopes on depth resampled as a contrast's deltas), TOST at ±sesoi
(percentile and calibrated; every contrast at its bound, the rate of any false "equivalent" after Holm) and the
correctly specified mixed model's Wald CI coverage (and, with ``--preregistered-sims``, the pre-registered one's);
and, for a pool of enough documents, the power analysis's predicted power from pilot runs of 20-100 documents
against the power realised in studies of 100 and 400 documents of the whole pool, every contrast at dz = 0.1.

**Reading a cell**: ``rate (SE)`` in percent, the Monte Carlo SE over the studies. ``†`` marks a rate above
alpha + 2 SE (liberal), ``‡`` one below alpha − 2 SE (conservative). The rule the study applies
(:data:`chunkstudy.stats.calibration.IN_BOUNDS_RULE`): a test is in bounds at G when its per-contrast rate and its
family-wise rate are both at most alpha + 2 SE (Holm is conservative under positively correlated contrasts, so a
family-wise rate below alpha is not a fault; a per-contrast rate far below alpha is said, not penalised).

    .venv/bin/python bench/bench_calibration.py [--pools demo qasper_local] [--docs 5 10 20 ...] [--quick]

The seed is declared (``--seed``, default 20261208); every cell draws from ``SeedSequence([seed, G, m, ...])``, so
a cell does not depend on which others run. Prints what it measures, asserts nothing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

import numpy as np  # noqa: E402

from chunkstudy import artifacts, config  # noqa: E402
from chunkstudy.metrics.paired import prepare_scores, wide_scores  # noqa: E402
from chunkstudy.significance import BootstrapTest  # noqa: E402
from chunkstudy.stats import calibration, power  # noqa: E402
from chunkstudy.stats.exploratory import DEPTH_LADDER, per_query_slopes  # noqa: E402

#: The three contrasts beside C1-C4 that make a family of seven (conditions every run of the paper's has).
EXTRA = {"A3−A2": ("A3", "A2"), "A2−A0": ("A2", "A0"), "G3−G2": ("G3", "G2")}
PROCS = ("percentile", "wild", "wild-et", "cr2", "cr1")
SMALL_G_PROCS = ("wild-rademacher", "wild-webb")
CLOSED_FORM = ("cr2", "cr1")


def cpu() -> str:
    """The CPU's model name and logical CPUs, from /proc/cpuinfo."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    names = [x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")]
    return f"{names[0] if names else 'unknown CPU'} ({len(names)} logical CPUs)"


def pools(names: list[str]) -> dict[str, dict[int, calibration.Pool]]:
    """Each named run's pools of m = 4 and m = 7 contrasts (runs not made yet are skipped, with a line)."""
    out = {}
    for name in names:
        cfg = config.load(ROOT / "params" / f"{name}.yaml", root=ROOT)
        if not (artifacts.exists(cfg, "scores") and artifacts.exists(cfg, "queries")):
            print(f"pool {name}: skipped (no finished run: ./run_all.sh {name} writes data/{name}/06_metrics/scores)")
            continue
        stats_params = cfg.params("stats")
        cell = tuple(cfg.params().primary_cell)
        scores, queries = artifacts.read(cfg, "scores"), artifacts.read(cfg, "queries")
        four = dict(stats_params.contrasts)
        out[name] = {m: calibration.pool_from_scores(scores, queries, family, cell, cfg.corpus)
                     for m, family in ((4, four), (7, {**four, **EXTRA}))}
        out[name][1] = dose_pool(scores, queries, cell, cfg.corpus)
        p = out[name][4]
        print(f"pool {name}: {p.docs.size} documents, {p.deltas.shape[0]} queries paired in every contrast "
              f"({p.deltas.shape[0] / p.docs.size:.1f} per document), cell {'|'.join(cell)}; share of zero deltas "
              + ", ".join(f"{n} {np.mean(out[name][7].deltas[:, k] == 0):.0%}" for k, n in enumerate(out[name][7].names)))
    return out


def dose_pool(scores, queries, cell: tuple, corpus: str) -> calibration.Pool:
    """The dose-response slope's pool: each query's least-squares slope of the primary metric on heading-path depth
    (A2 → A3-d1 → A3-d2 → A3; :func:`chunkstudy.stats.exploratory.per_query_slopes`), the statistic 07's
    dose-response resamples, re-centred as a contrast is."""
    wide = wide_scores(prepare_scores(scores, queries, corpus)).xs(cell, level=["metric", "embedder", "reranker"])
    conds = [c for c, _ in DEPTH_LADDER]
    rows = wide.dropna(subset=conds)
    slopes = per_query_slopes(rows[conds].to_numpy(float), [d for _, d in DEPTH_LADDER])
    return calibration.Pool.of(slopes[:, None], rows["doc_id"].to_numpy(), ["slope"])


def sims_for(proc: str, g: int, a: argparse.Namespace) -> int:
    if proc in CLOSED_FORM:
        return a.sims_closed
    return a.sims if g <= 100 else a.sims_large


def mark(rate: float, se: float, alpha: float) -> str:
    """† liberal (a false-positive rate above alpha + 2 SE), ‡ conservative (below alpha − 2 SE)."""
    return "†" if rate > alpha + 2 * se else "‡" if rate < alpha - 2 * se else ""


def cell(rate: float, se: float, alpha: float, coverage: bool = False) -> str:
    """``rate (SE)`` in percent with its mark; a coverage is marked as its miss rate ``1 − rate`` against alpha."""
    return f"{100 * rate:.1f} ({100 * se:.1f}){mark(1 - rate if coverage else rate, se, alpha)}"


#: (procedure, G) -> every (rate, SE) the size tables measured there, per-contrast and family-wise, over the pools
MEASURED: dict[tuple[str, int], list[tuple[float, float]]] = {}
#: (pool, procedure, G, "familywise" | "per_contrast") -> the (rate, SE) of each family (m × correlation)
WORST: dict[tuple[str, str, int, str], list[tuple[float, float]]] = {}


def size_table(name: str, pool_by_m: dict[int, calibration.Pool], a: argparse.Namespace) -> None:
    alpha = 0.05
    rows = []
    t0 = time.perf_counter()
    for m, pool in ((m, p) for m, p in pool_by_m.items() if m > 1):
        for correlated in (True, False):
            for proc in PROCS + SMALL_G_PROCS:
                cells = []
                for g in a.docs:
                    if proc in SMALL_G_PROCS and g > 20:
                        cells.append(("", "", ""))
                        continue
                    seed = np.random.SeedSequence([a.seed, g, m, int(correlated), PROCS.index(proc) if proc in PROCS
                                                   else 10 + SMALL_G_PROCS.index(proc)]).generate_state(1)[0]
                    r = calibration.rates(pool, g, proc, n_sims=sims_for(proc, g, a), n_boot=a.n_boot, seed=int(seed),
                                          alpha=alpha, correlated=correlated)
                    MEASURED.setdefault((proc, g), []).extend([(r["familywise"], r["familywise_se"]),
                                                               (r["per_contrast"], r["per_contrast_se"])])
                    for what in ("familywise", "per_contrast"):
                        WORST.setdefault((name, proc, g, what), []).append((r[what], r[f"{what}_se"]))
                    cells.append((cell(r["familywise"], r["familywise_se"], alpha),
                                  cell(r["per_contrast"], r["per_contrast_se"], alpha),
                                  cell(r["coverage"], r["coverage_se"], alpha, coverage=True)))
                rows.append((m, "correlated" if correlated else "independent", proc, cells))
    head = "| m | contrasts | procedure | " + " | ".join(f"G = {g:,}" for g in a.docs) + " |"
    rule = "|---|---|---|" + "---|" * len(a.docs)
    for i, what in enumerate(("family-wise false-positive rate, Holm over the m contrasts (%)",
                              "per-contrast false-positive rate, unadjusted p < 0.05 (%)",
                              "95% CI coverage of the true 0 (%; † below 95 − 2 SE, ‡ above 95 + 2 SE)")):
        print(f"\n{name}: {what}\n\n{head}\n{rule}")
        for m, corr, proc, cells in rows:
            print(f"| {m} | {corr} | {proc} | " + " | ".join(c[i] for c in cells) + " |")
    print(f"\n({name}: {time.perf_counter() - t0:.0f} s; studies per cell: {a.sims} bootstrap at G ≤ 100, "
          f"{a.sims_large} above, {a.sims_closed} closed-form; B = {a.n_boot})")


def tost_and_mixed(name: str, pool: calibration.Pool, a: argparse.Namespace) -> None:
    alpha = 0.05
    t0 = time.perf_counter()
    for bound in a.sesoi:
        print(f"\n{name}: TOST at ±{bound}, every contrast at its bound (half at +, half at −), m = 4 correlated: "
              "any false \"equivalent\" after Holm (%)\n")
        print("| procedure | " + " | ".join(f"G = {g:,}" for g in a.docs) + " |\n|---|" + "---|" * len(a.docs))
        for proc in ("percentile", "wild", "cr2"):
            cells = []
            for g in a.docs:
                seed = np.random.SeedSequence([a.seed, g, 4, 7, PROCS.index(proc), int(1000 * bound)]).generate_state(1)
                r = calibration.rates(pool, g, proc, n_sims=sims_for(proc, g, a), n_boot=a.n_boot, seed=int(seed[0]),
                                      alpha=alpha, bound=bound)
                cells.append(cell(r["tost_familywise"], r["tost_familywise_se"], alpha))
            print(f"| {proc} | " + " | ".join(cells) + " |")
    print(f"\n{name}: the correctly specified mixed model (paired deltas, random intercept per document), 95% Wald CI "
          f"coverage of the true 0 over the 4 contrasts (%; {a.mixed_sims} studies)\n")
    print("| model | " + " | ".join(f"G = {g:,}" for g in a.docs) + " |\n|---|" + "---|" * len(a.docs))
    cells = []
    for g in a.docs:
        r = calibration.mixed_coverage(pool, g, n_sims=a.mixed_sims, seed=int(
            np.random.SeedSequence([a.seed, g, 4, 9]).generate_state(1)[0]), alpha=alpha)
        cells.append(cell(r["coverage"], r["coverage_se"], alpha, coverage=True))
    print("| paired MixedLM | " + " | ".join(cells) + " |")
    if a.preregistered_sims:
        cells = []
        for g in a.docs:
            if g > 40:
                cells.append("")
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # statsmodels' convergence and boundary warnings
                r = calibration.mixed_coverage(pool, g, n_sims=a.preregistered_sims, seed=int(
                    np.random.SeedSequence([a.seed, g, 4, 11]).generate_state(1)[0]), alpha=alpha,
                    preregistered=True)
            cells.append(cell(r["coverage"], r["coverage_se"], alpha, coverage=True))
        print(f"| pre-registered MixedLM ({a.preregistered_sims} studies, G ≤ 40) | " + " | ".join(cells) + " |")
    print(f"\n({name}: TOST and mixed model {time.perf_counter() - t0:.0f} s)")


def in_bounds_summary(docs: list[int]) -> None:
    """Per procedure, the sizes at which it holds its size (:data:`chunkstudy.stats.calibration.IN_BOUNDS_RULE`) over
    every pool measured, and the fewest documents from which it holds at every larger size of the table too."""
    pools = sorted({k[0] for k in WORST})
    for name in pools:
        print(f"\n{name}: the worst of the four families (m = 4, 7; correlated, independent): family-wise / "
              "per-contrast false-positive rate (%), SE in brackets\n")
        print("| procedure | " + " | ".join(f"G = {g:,}" for g in docs) + " |\n|---|" + "---|" * len(docs))
        for proc in PROCS:
            cells = []
            for g in docs:
                fw = max(WORST.get((name, proc, g, "familywise"), [(np.nan, np.nan)]))
                pc = max(WORST.get((name, proc, g, "per_contrast"), [(np.nan, np.nan)]))
                cells.append(f"{cell(*fw, 0.05)} / {cell(*pc, 0.05)}")
            print(f"| {proc} | " + " | ".join(cells) + " |")
    print(f"\nin bounds ({calibration.IN_BOUNDS_RULE}), over the pools measured:\n")
    for proc in PROCS:
        ok = [g for g in docs if (proc, g) in MEASURED and all(calibration.in_bounds(r, se, 0.05)
                                                               for r, se in MEASURED[(proc, g)])]
        start = next((g for g in docs if all(h in ok for h in docs if h >= g)), None)
        print(f"- {proc}: in bounds at G = {', '.join(map(str, ok)) or 'none'}; from G = {start} on"
              if start is not None else f"- {proc}: in bounds at G = {', '.join(map(str, ok)) or 'none'}")


def weights_table(name: str, pool_by_m: dict[int, calibration.Pool], a: argparse.Namespace) -> None:
    """Rademacher against Webb weights at small G (where :data:`chunkstudy.stats.calibrated.WEBB_BELOW` is set)."""
    alpha = 0.05
    print(f"\n{name}: the wild bootstrap's weights at small G, correlated contrasts: family-wise (per-contrast) "
          f"false-positive rate (%), {a.sims} studies\n")
    print("| m | weights | " + " | ".join(f"G = {g}" for g in a.small_docs) + " |\n|---|---|" + "---|" * len(a.small_docs))
    for m in (4, 7):
        for proc in SMALL_G_PROCS:
            cells = []
            for g in a.small_docs:
                seed = np.random.SeedSequence([a.seed, g, m, 3, SMALL_G_PROCS.index(proc)]).generate_state(1)[0]
                r = calibration.rates(pool_by_m[m], g, proc, n_sims=a.sims, n_boot=a.n_boot, seed=int(seed),
                                      alpha=alpha)
                cells.append(f"{cell(r['familywise'], r['familywise_se'], alpha)} "
                             f"({100 * r['per_contrast']:.1f})")
            print(f"| {m} | {proc.removeprefix('wild-')} | " + " | ".join(cells) + " |")


def dose_table(name: str, pool: calibration.Pool, a: argparse.Namespace) -> None:
    """The dose-response slope's p (exploratory, no Holm): its false-positive rate under a true null slope."""
    alpha = 0.05
    print(f"\n{name}: the dose-response slope (per-query slopes on depth 0-3, {pool.deltas.shape[0]} queries over "
          f"{pool.docs.size} documents): false-positive rate of its p < 0.05 under a flat slope (%)\n")
    print("| procedure | " + " | ".join(f"G = {g:,}" for g in a.docs) + " |\n|---|" + "---|" * len(a.docs))
    for proc in ("percentile", "wild", "cr2"):
        cells = []
        for g in a.docs:
            seed = np.random.SeedSequence([a.seed, g, 1, 5, PROCS.index(proc)]).generate_state(1)[0]
            r = calibration.rates(pool, g, proc, n_sims=sims_for(proc, g, a), n_boot=a.n_boot, seed=int(seed),
                                  alpha=alpha)
            cells.append(cell(r["per_contrast"], r["per_contrast_se"], alpha))
        print(f"| {proc} | " + " | ".join(cells) + " |")


def _power_at(pool: calibration.Pool, docs: np.ndarray, n: int, dz: float, a: argparse.Namespace, seed: int):
    """The power analysis's answer (:func:`chunkstudy.stats.power.simulate`, Holm over the four, the sign required)
    at ``n`` documents for the four contrasts moved to Cohen's dz ``dz``, from the pool's documents ``docs`` (the
    run the analysis would read): each contrast shifted by ``dz · sd − mean`` over those documents' queries."""
    rows = np.isin(pool.doc, docs)
    deltas = pool.deltas[rows]
    # a document drawn twice is one population document here, as it would be in a run
    labels, inv = np.unique(pool.doc[rows], return_inverse=True)
    sums = np.zeros((labels.size, deltas.shape[1]))
    np.add.at(sums, inv, deltas)
    counts = np.repeat(np.bincount(inv)[:, None].astype(float), deltas.shape[1], axis=1)
    shifts = dz * deltas.std(axis=0, ddof=1) - deltas.mean(axis=0)
    test = BootstrapTest(a.power_n_boot, seed, 0.05, 2)
    return power.simulate(sums, counts, shifts[None, :], n, n_sims=a.power_sims, test=test)["power"][0]


def power_check(name: str, pool: calibration.Pool, a: argparse.Namespace) -> None:
    """The power analysis's predicted power (from a pilot run of G0 documents of the pool) against the power realised
    in studies of N documents drawn from the whole pool, every contrast moved to the paper's scale of effect."""
    if pool.docs.size < 2 * max(a.pilots):
        print(f"\n{name}: power predicted against realised: skipped (a pool of {pool.docs.size} documents has no "
              f"pilot of {max(a.pilots)} apart from itself)")
        return
    t0 = time.perf_counter()
    print(f"\n{name}: power at dz = {a.power_dz} (the four contrasts, Holm), realised in {a.power_sims} studies of N "
          f"documents of the whole pool against the power analysis's prediction from {a.n_pilots} pilot runs of G0 "
          "documents (mean, and 10th-90th percentile over the pilots)\n")
    print("| N | G0 | contrast | realised | predicted: mean | 10th-90th |\n|---|---|---|---|---|---|")
    rng = np.random.default_rng(a.seed)
    for n in a.power_n:
        realised = _power_at(pool, np.arange(pool.docs.size), n, a.power_dz, a, a.seed)
        for g0 in a.pilots:
            pred = np.array([_power_at(pool, rng.choice(pool.docs.size, g0, replace=False), n, a.power_dz, a,
                                       a.seed + 1 + i) for i in range(a.n_pilots)])
            for k, c in enumerate(pool.names):
                lo, hi = np.percentile(pred[:, k], [10, 90])
                print(f"| {n} | {g0} | {c} | {100 * realised[k]:.0f} % | {100 * pred[:, k].mean():.0f} % | "
                      f"{100 * lo:.0f}-{100 * hi:.0f} % |")
    print(f"\n({name}: power {time.perf_counter() - t0:.0f} s; {a.power_n_boot} resamples per study)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pools", nargs="+", default=["demo", "qasper_local"])
    ap.add_argument("--docs", type=int, nargs="+", default=[5, 10, 20, 40, 100, 400, 1500])
    ap.add_argument("--small-docs", type=int, nargs="+", default=[6, 7, 8, 9, 10, 12, 15],
                    help="G of the weights table")
    ap.add_argument("--sims", type=int, default=2000, help="studies per bootstrap cell at G ≤ 100")
    ap.add_argument("--sims-large", type=int, default=1000, help="studies per bootstrap cell at G > 100")
    ap.add_argument("--sims-closed", type=int, default=10000, help="studies per closed-form (t test) cell")
    ap.add_argument("--mixed-sims", type=int, default=500)
    ap.add_argument("--preregistered-sims", type=int, default=0,
                    help="studies for the pre-registered MixedLM's coverage at G ≤ 40 (statsmodels, about a second "
                         "per fit on the shared machine: off by default)")
    ap.add_argument("--n-boot", type=int, default=999)
    ap.add_argument("--sesoi", type=float, nargs="+", default=[0.02, 0.1],
                    help="TOST bounds (metric units): the declared demo_beyond bound, and a wide one where TOST "
                         "is the one-sided test at the bound")
    ap.add_argument("--power-dz", type=float, default=0.1, help="the planted effect of the power check (Cohen's dz)")
    ap.add_argument("--power-n", type=int, nargs="+", default=[100, 400], help="N of the power check")
    ap.add_argument("--pilots", type=int, nargs="+", default=[20, 50, 100], help="G0: the pilot runs' documents")
    ap.add_argument("--n-pilots", type=int, default=10)
    ap.add_argument("--power-sims", type=int, default=200)
    ap.add_argument("--power-n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261208)
    ap.add_argument("--quick", action="store_true", help="a tenth of the studies (a look, not the table)")
    a = ap.parse_args()
    if a.quick:
        a.sims, a.sims_large, a.sims_closed, a.mixed_sims, a.n_pilots, a.power_sims = 200, 100, 1000, 50, 3, 50
    print(f"bench_calibration, {date.today().isoformat()}, {cpu()}; seed {a.seed}; alpha 0.05; B = {a.n_boot}")
    t0 = time.perf_counter()
    for name, by_m in pools(a.pools).items():
        size_table(name, by_m, a)
        weights_table(name, by_m, a)
        dose_table(name, by_m[1], a)
        tost_and_mixed(name, by_m[4], a)
        power_check(name, by_m[4], a)
    in_bounds_summary(a.docs)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
