"""Power analysis (stage 07, shown in 08; docs/design.md, "Power"): how many documents would the
document-clustered bootstrap test need to detect each pre-registered contrast with 80% power at Holm-adjusted
alpha = 0.05 — at the effect observed in this run, and at the paper's reported effects?

Method (simulation by resampling this run's documents)
-----------------------------------------------------
**Population.** The primary cell's paired per-query deltas ``δ_qk = score_A(q) − score_B(q)`` of every contrast
``k`` of ``stats.contrasts`` (:func:`chunkstudy.metrics.paired.paired_deltas`), grouped by document into per-document sums
``S_dk`` and counts ``n_dk``. The population is the ``G`` documents with at least one paired query in *every*
computable contrast, so that a drawn document always brings a bundle to each contrast (documents left out are
counted in the note). A contrast with no paired query at all is absent: it stays in the Holm family with p = NaN,
exactly as in :func:`chunkstudy.stats.contrasts_table`.

**Target effect.** The paper reports effects as Cohen's ``dz = mean(δ) / sd(δ)`` over per-query deltas (ddof =
1). A target ``dz*_k`` is reached by adding one constant to every delta of contrast ``k``::

    δ'_qk = δ_qk + (dz*_k · sd_k − mean_k)        (mean_k, sd_k over the population's queries)

so the population mean becomes ``dz*_k · sd_k`` and ``cohens_dz(δ') = dz*_k`` exactly, while the sd, the
within-document spread and the clustering (the design effect) are untouched. Scenario ``observed`` adds nothing
(``dz*`` = this run's dz); scenario ``paper`` shifts each contrast to the paper's dz (a mapping contrast → dz,
signed as A − B; a NaN target leaves that contrast out of the scenario's power rows, with a note, but it still
takes part in every study's Holm family at its observed effect).

**One simulated study of N documents** draws N documents with replacement from the population — once for all
contrasts, each drawn document bringing its queries' deltas of every contrast as a bundle, a document drawn twice
counting as two clusters — and runs the real test on it, :class:`chunkstudy.significance.BootstrapTest` with
``stats.power_n_boot`` resamples: per contrast the document-clustered bootstrap (``n_boot`` resamples of the N drawn
documents), its two-sided p, then Holm over the whole family and the test's rejection rule. **Power** at N is
the share of ``n_sims`` studies in which the test rejects the contrast and, with ``require_sign`` (the
default), the study's mean delta has the target's sign (a significant result of the wrong sign does not detect the
effect; with a zero target any rejection counts). Its Monte Carlo standard error is ``sqrt(power·(1−power)/n_sims)``.
Each N uses its own seed ``SeedSequence([seed, N])`` and the two scenarios share every draw (common random
numbers), so a curve point does not depend on which other sizes are in the grid.

**Two exact shortcuts** (the same distribution as the literal nested bootstrap; checked against it in the tests and
timed in ``bench/bench_power.py``):

1. *Only signs matter.* A replicate's mean is ``Σ S*/Σ n*`` with ``Σ n* > 0``, so ``δ̄* ≤ 0 ⟺ Σ S* ≤ 0``: the
   p-value needs the sums of the drawn documents' ``S`` only.
2. *Inner draws as counts over the population.* An inner draw picks one of the study's N clusters uniformly, i.e.
   population document ``d`` with probability ``c_d/N`` (``c`` = the study's outer counts), independently. So a
   replicate is ``Σ_d M_d S_d`` with ``M ~ Multinomial(N, c/N)`` over the ``G`` population documents, whose draw
   costs O(min(N, G)) instead of O(N). At demo scale (G = 10, N up to thousands) that is hundreds of times fewer
   operations. Where N is small against G, ``M`` is instead counted from N uniform slot indices per replicate
   (the same distribution, cheaper there). All replicates of all studies, contrasts and scenarios are then one
   matrix product ``M @ S'`` (the shift enters as ``M @ S + shift · M @ n``).

**Analytic check** (:func:`analytic_power`): the design-effect approximation — the mean of N resampled
documents has variance ``σ² · deff / (N · m)`` with ``m`` queries per document and ``deff = 1 + (m−1)ρ``
(:func:`design_effect` gives deff and the ICC ρ implied by it for this population), read as a z test or, for a
few dozen documents, as the t test with N − 1 degrees of freedom that the percentile bootstrap resembles. Where
the rest of the Holm family is far from null (their p at its floor 2/(B + 1)), the tested contrast's Holm alpha
is alpha itself; the tests check that the simulation agrees with the approximation within its Monte Carlo error on synthetic data.

**Small corpora.** With a handful of documents the percentile cluster bootstrap is anti-conservative (its
replicates understate the spread of a mean of few clusters), so it rejects more often than alpha even at a zero
effect and a power curve can dip before it rises. The ``null_rejection`` column measures that size at every N.

Every function is pure; nothing here rounds (08 does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import nct, norm

from .. import design, progress, stages
from ..config import SCHEMA
from ..metrics.paired import paired_deltas
from ..params import StatsParams
from ..significance import BootstrapTest, cluster_sums
from .contrasts import contrast_spec, user_family
from .effects import cohens_dz

OBSERVED = "observed"
PAPER = "paper"

#: Elements of one block of inner multinomial counts (bounds memory at 8 bytes × this, per block).
_BLOCK_ELEMS = 4_000_000
#: Draw inner counts from slot indices (O(N) per replicate) when N ≤ this × G, else from a multinomial over the
#: G population documents (O(min(N, G)) binomial draws per replicate, each a few times dearer than one index).
_SLOT_FACTOR = 4

POWER_COLUMNS = stages.columns("power")

NEEDED_COLUMNS = stages.columns("power_needed")


# ---------------------------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PowerParams:
    """The power analysis's policy, read from ``stats`` (:func:`params`)."""

    n_docs: tuple[int, ...]
    n_sims: int
    n_boot: int
    alpha: float
    target_power: float
    require_sign: bool
    seed: int


def params(stats_params: StatsParams) -> PowerParams:
    """The power parameters of the ``stats`` record (``power_n_docs``, ``power_n_sims``, ``power_n_boot``,
    ``power_target``, ``power_require_sign``, with ``alpha`` and ``seed`` shared with the confirmatory test). A
    mapping is validated into the record (missing keys at the schema's defaults; the schema's ranges, e.g. every
    corpus size ≥ 2 documents, which a clustered bootstrap needs): errors name the key."""
    p = stats_params
    if not p.power_n_docs:
        raise ValueError("stats.power_n_docs: expected a non-empty list of corpus sizes, got []")
    return PowerParams(tuple(sorted(set(p.power_n_docs))), p.power_n_sims, p.power_n_boot, p.alpha,
                       p.power_target, p.power_require_sign, p.seed)


def paper_corpus(stats_params: StatsParams, corpus_kind: str) -> str:
    """Which of the paper's corpora supplies the paper-effect scenario: ``stats.power_paper_corpus`` when set,
    else this run's ``corpus.kind`` when the paper ran that kind, else ``wikipedia`` (the paper's
    Wikipedia-FA, the nearest genre to the demo and to bring-your-own prose)."""
    choices = SCHEMA["stats"]["power_paper_corpus"].choices
    chosen = stats_params.power_paper_corpus
    if chosen is not None:
        return str(chosen)
    return corpus_kind if corpus_kind in choices else "wikipedia"


# ---------------------------------------------------------------------------------------------------------------
# The population: per-document bundles of per-query deltas
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Population:
    """Per-document sums and counts of the primary cell's paired deltas, one column per contrast (family order).

    ``sums``/``counts`` are ``(G, K)``; an absent contrast (``present`` False) has zero columns and NaN
    statistics. ``mean``/``sd``/``dz`` are over the population's queries (sd ddof = 1); ``design_effect`` and
    ``icc`` as in :func:`design_effect`."""

    contrasts: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    doc_ids: np.ndarray
    sums: np.ndarray
    counts: np.ndarray
    present: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    dz: np.ndarray
    n_queries: np.ndarray
    design_effect: np.ndarray
    icc: np.ndarray
    queries_per_doc: np.ndarray
    notes: tuple[str, ...]


def design_effect(deltas: Sequence[float] | np.ndarray, clusters: Sequence) -> tuple[float, float, float]:
    """``(deff, icc, m)`` of a population of per-query values grouped by document, for the mean of N documents
    resampled from it.

    ``m`` = mean queries per document; ``deff = mean_d (S_d − n_d·ȳ)² / (m · σ²)`` with ``σ²`` the per-query
    variance (ddof = 0): the variance of the resampled ratio mean, ``mean_d (S_d − n_d·ȳ)² / (N·m²)`` to first order,
    over the variance ``σ²/(N·m)`` of a mean of as many independent queries. ``icc = (deff − 1)/(m − 1)``, the
    intra-document correlation that gives this deff through ``deff = 1 + (m − 1)·ρ`` (NaN when m = 1). With equal
    cluster sizes this is the population ICC of the one-way random-effects model. NaN when σ² = 0."""
    v = np.asarray(deltas, dtype=float)
    _, s, n = cluster_sums(v, clusters)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    m = float(n.mean())
    ybar = float(v.mean())
    var = float(v.var())
    if var == 0.0:
        return math.nan, math.nan, m
    deff = float(np.mean((s - n * ybar) ** 2) / (m * var))
    icc = (deff - 1.0) / (m - 1.0) if m > 1 else math.nan
    return deff, icc, m


def population(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
               corpus: str) -> Population:
    """The :class:`Population` of the primary cell ``primary`` of ``corpus`` (see the module docstring)."""
    spec = contrast_spec(stats_params)
    metric, embedder, reranker = primary
    names = tuple(spec)
    deltas = {name: paired_deltas(scores, queries, a, b, corpus=corpus, metric=metric, embedder=embedder,
                                  reranker=reranker) for name, (a, b) in spec.items()}
    present = np.array([len(deltas[n]) > 0 for n in names])
    notes = [f"absent: no query of the primary cell scored under both {spec[n][0]} and {spec[n][1]}"
             if not p else "" for n, p in zip(names, present)]
    doc_sets = [set(deltas[n]["doc_id"].astype(str)) for n, p in zip(names, present) if p]
    all_docs = set().union(*doc_sets) if doc_sets else set()
    docs = np.array(sorted(set.intersection(*doc_sets))) if doc_sets else np.array([], dtype=str)
    if present.any() and docs.size == 0:
        raise ValueError(f"power: no document of corpus {corpus!r} has a paired query in every computable "
                         f"contrast {[n for n, p in zip(names, present) if p]}")
    dropped = len(all_docs) - docs.size
    k, g = len(names), docs.size
    sums, counts = np.zeros((g, k)), np.zeros((g, k))
    nan = np.full(k, np.nan)
    mean, sd, dz, nq, deff, icc, mq = nan.copy(), nan.copy(), nan.copy(), np.zeros(k, int), nan.copy(), \
        nan.copy(), nan.copy()
    for j, name in enumerate(names):
        if not present[j]:
            continue
        d = deltas[name]
        d = d[d["doc_id"].astype(str).isin(set(docs))]
        v, c = d["delta"].to_numpy(float), d["doc_id"].astype(str).to_numpy()
        labels, s, n = cluster_sums(v, c)
        pos = np.searchsorted(docs, labels)
        sums[pos, j], counts[pos, j] = s, n
        mean[j], sd[j] = float(v.mean()), float(np.std(v, ddof=1)) if v.size > 1 else math.nan
        dz[j], nq[j] = cohens_dz(v), v.size
        deff[j], icc[j], mq[j] = design_effect(v, c)
        if dropped:
            notes[j] = (f"{dropped} document(s) without a paired query in every contrast left out of the "
                        "population")
    return Population(names, tuple(spec[n] for n in names), docs, sums, counts, present, mean, sd, dz, nq, deff,
                      icc, mq, tuple(notes))


def shift_to_dz(mean: float, sd: float, target_dz: float) -> float:
    """The constant that moves per-query deltas of mean ``mean`` and sd ``sd`` (ddof = 1) to Cohen's dz
    ``target_dz``: ``target_dz · sd − mean`` (the sd is unchanged by a constant shift). NaN when the sd is 0 or
    NaN, or the target is NaN."""
    if not np.isfinite(sd) or sd == 0 or not np.isfinite(target_dz):
        return math.nan
    return float(target_dz * sd - mean)


# ---------------------------------------------------------------------------------------------------------------
# The simulation
# ---------------------------------------------------------------------------------------------------------------

def _inner_counts(rng: np.random.Generator, outer: np.ndarray, n: int, n_boot: int) -> np.ndarray:
    """Inner bootstrap counts over the population documents for each study: ``(n_boot, n_studies, G)``, row
    ``[b, s]`` ~ Multinomial(n, outer[s]/n) (module docstring, shortcut 2)."""
    s, g = outer.shape
    if n <= _SLOT_FACTOR * g:
        out = np.empty((n_boot, s, g), dtype=np.int64)
        offsets = (np.arange(n_boot) * g)[:, None]
        for i in range(s):
            slots = np.repeat(np.arange(g), outer[i])          # the study's n clusters, as population documents
            idx = slots[rng.integers(0, n, size=(n_boot, n))]  # the inner draws, as stats.cluster_bootstrap draws
            out[:, i, :] = np.bincount((idx + offsets).ravel(), minlength=n_boot * g).reshape(n_boot, g)
        return out
    return rng.multinomial(n, outer / n, size=(n_boot, s))


def simulate(sums: np.ndarray, counts: np.ndarray, shifts: np.ndarray, n_docs: int, *, n_sims: int,
             test: BootstrapTest, require_sign: bool = True) -> dict[str, np.ndarray]:
    """Simulate ``n_sims`` studies of ``n_docs`` documents resampled from a population (module docstring), each
    tested by ``test`` (the study's test with ``stats.power_n_boot`` resamples,
    :class:`chunkstudy.significance.BootstrapTest`): this is its vectorised backend. The draws are its own (the
    module's two shortcuts, the same distribution as ``test.resample`` on each study); the p, the Holm adjustment
    and the rejection are the test's (:meth:`~BootstrapTest.p_from_counts`, :meth:`~BootstrapTest.adjust`,
    :meth:`~BootstrapTest.reject`). The floors of ``stats.min_docs`` and :data:`~chunkstudy.significance.MIN_BOOT`
    are not applied: the simulation measures the test itself at every N (``null_rejection`` is its size there).

    ``sums``/``counts``: ``(G, K)`` per-document sums and counts of the K contrasts' deltas (a contrast whose
    counts are all 0 is absent: p NaN, kept in Holm's family). ``shifts``: ``(R, K)``, one row per scenario, the
    constant added to every delta (NaN = that contrast unshifted in that scenario and its power NaN).
    Returns arrays of shape ``(R, n_sims, K)``: ``estimate`` (the study's mean delta), ``p`` (bootstrap p),
    ``p_holm``, ``reject`` (``p_holm < alpha``, and the sign of the shifted population mean when
    ``require_sign``); and ``(R, K)``: ``power`` (share of studies rejecting; NaN for absent or NaN-shift
    contrasts), ``mc_se``."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    shifts = np.atleast_2d(np.asarray(shifts, float))
    g, k = sums.shape
    if counts.shape != (g, k) or shifts.shape[1] != k:
        raise ValueError(f"power.simulate: sums {sums.shape}, counts {counts.shape} and shifts {shifts.shape} "
                         "disagree")
    if g == 0:
        raise ValueError("power.simulate: the population has no document")
    if n_docs < 2:
        raise ValueError(f"power.simulate: n_docs must be ≥ 2, got {n_docs}")
    present = counts.sum(axis=0) > 0
    if np.any(present & (counts <= 0).any(axis=0)):
        raise ValueError("power.simulate: every population document needs ≥ 1 query in every present contrast")
    n_boot = test.n_boot
    rng = np.random.default_rng(np.random.SeedSequence([int(test.seed), int(n_docs)]))
    outer = rng.multinomial(n_docs, np.full(g, 1.0 / g), size=n_sims)            # (S, G)
    base = np.where(np.isnan(shifts), 0.0, shifts)                                # (R, K)
    cs, cn = outer @ sums, outer @ counts                                         # (S, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        estimate = (cs[None] + base[:, None, :] * cn[None]) / cn[None]            # (R, S, K)
    r = shifts.shape[0]
    le = np.zeros((r, n_sims, k))
    ge = np.zeros((r, n_sims, k))
    step = max(1, _BLOCK_ELEMS // max(1, n_boot * g))
    for start in range(0, n_sims, step):
        stop = min(n_sims, start + step)
        m = _inner_counts(rng, outer[start:stop], n_docs, n_boot).astype(float)  # (B, s, G)
        ms, mn = m @ sums, m @ counts                                             # (B, s, K)
        for i in range(r):
            rep = ms + base[i] * mn                                               # replicate sums ∝ replicate means
            le[i, start:stop] = (rep <= 0).sum(axis=0)
            ge[i, start:stop] = (rep >= 0).sum(axis=0)
    p = np.asarray(test.p_from_counts(le, ge))  # as the test counts one study's replicates
    p[:, :, ~present] = np.nan
    p_holm = np.apply_along_axis(test.adjust, 2, p) if n_sims else p
    total_n = np.where(present, counts.sum(axis=0), 1.0)
    target_sign = np.where(present, np.sign((sums.sum(axis=0) + base * total_n) / total_n), 0.0)  # (R, K)
    reject = np.asarray(test.reject(p_holm))
    if require_sign:
        reject &= (np.sign(estimate) == target_sign[:, None, :]) | (target_sign[:, None, :] == 0)
    power = np.asarray(reject).mean(axis=1)
    power[:, ~present] = np.nan
    power[np.isnan(shifts)] = np.nan
    mc_se = np.sqrt(power * (1 - power) / n_sims)
    return {"estimate": estimate, "p": p, "p_holm": p_holm, "reject": reject, "power": power, "mc_se": mc_se}


def analytic_power(dz: float, n_docs: float, queries_per_doc: float, deff: float, alpha: float, *,
                   require_sign: bool = True, small_sample: bool = False) -> float:
    """Power of a two-sided level-``alpha`` test of a mean delta with Cohen's dz ``dz`` from ``n_docs``
    documents of ``queries_per_doc`` queries each, under the design effect ``deff`` (= 1 + (m−1)ρ for an ICC ρ):
    the mean's standard error in units of the per-query sd is ``sqrt(deff / (n_docs·m))``, so its signal-to-noise
    ratio is ``δ = |dz| · sqrt(n_docs·m / deff)``.

    * ``small_sample=False`` — the textbook normal approximation: power = ``Φ(δ − z)`` with ``z = z_{1−α/2}``.
    * ``small_sample=True`` — the same design effect, with the two small-sample traits of the percentile cluster
      bootstrap: its standard error is estimated from ``n_docs`` document totals (a t statistic with
      ``n_docs − 1`` degrees of freedom, noncentrality δ) and its spread is the ddof-0 one (the bootstrap
      variance is ``(N−1)/N`` of the unbiased one), so it rejects when ``|t| > z·sqrt((N−1)/N)``: power =
      ``P(T_{N−1}(δ) > z·sqrt((N−1)/N))``. It is what the simulation should match at a few dozen documents.

    Unless ``require_sign``, the wrong-sign rejections are added (``Φ(−δ − z)``, resp. the lower t tail). The dz
    is the population's over its deltas with ddof = 0 (with hundreds of queries, the same as ddof = 1)."""
    if not all(np.isfinite([dz, n_docs, queries_per_doc, deff])):
        return math.nan
    ncp = abs(dz) * math.sqrt(n_docs * queries_per_doc / deff)
    crit = norm.ppf(1 - alpha / 2)
    if small_sample:
        crit *= math.sqrt((n_docs - 1) / n_docs)
        right, wrong = nct.sf(crit, n_docs - 1, ncp), nct.cdf(-crit, n_docs - 1, ncp)
    else:
        right, wrong = norm.cdf(ncp - crit), norm.cdf(-ncp - crit)
    return float(right + (0.0 if require_sign else wrong))


# ---------------------------------------------------------------------------------------------------------------
# The 07_stats table and its summary
# ---------------------------------------------------------------------------------------------------------------

def power_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                corpus: str, paper_dz: Mapping[str, float] | None = None,
                paper_source: str = "paper") -> pd.DataFrame:
    """The ``07_stats/power`` table: one row per scenario × contrast × corpus size N (``stats.power_n_docs`` plus
    this corpus's own size), with the simulated ``power`` and its Monte Carlo SE ``mc_se`` (module docstring),
    and ``null_rejection``: how often the same test rejects the contrast (Holm p < alpha, either sign) when every
    contrast is shifted to mean 0 in the same simulated studies — the test's actual size at N. The percentile
    cluster bootstrap is anti-conservative with few documents (its replicates understate the spread of a mean of
    a handful of clusters), so at the smallest sizes both curves sit above where a correctly sized test would be.

    Scenario ``observed``: this run's effects. Scenario ``paper``: each contrast shifted to ``paper_dz[name]``
    (the paper's Cohen's dz; the caller reads it from :mod:`chunkstudy.paper`); ``effect_source`` names where it
    came from (e.g. ``"paper (wikipedia)"``); left out when ``paper_dz`` is None. ``power_analytic_bonferroni``
    is :func:`analytic_power` (small-sample form) at alpha/K, the Holm threshold of the family's smallest p: a
    design-effect reference that ignores the rest of the family, so Holm's simulated power is usually above it.
    A contrast that cannot be simulated (absent, zero spread, NaN target) gets NaN power and a note."""
    pp = params(stats_params)
    pop = population(scores, queries, stats_params, primary, corpus)
    k = len(pop.contrasts)
    scenarios = [(OBSERVED, "observed (this run)", np.where(pop.present, 0.0, np.nan),
                  np.where(pop.present, pop.dz, np.nan))]
    if paper_dz is not None:
        unknown = sorted(set(paper_dz) - set(pop.contrasts))
        if unknown:
            raise ValueError(f"power: paper effects name contrasts {unknown} that stats.contrasts lacks "
                             f"({list(pop.contrasts)})")
        target = np.array([float(paper_dz.get(n, math.nan)) for n in pop.contrasts])
        shift = np.array([shift_to_dz(pop.mean[j], pop.sd[j], target[j]) if pop.present[j] else math.nan
                          for j in range(k)])
        scenarios.append((PAPER, paper_source, shift, target))
    null_shift = np.where(pop.present, -pop.mean, np.nan)  # every contrast at mean 0: the test's size at N
    shifts = np.vstack([s[2] for s in scenarios] + [null_shift])
    g = pop.doc_ids.size
    grid = sorted(set(pp.n_docs) | ({g} if g >= 2 else set()))
    sizes = grid if pop.present.any() and g else []
    test = BootstrapTest.of(stats_params, n_boot=pp.n_boot)
    results = {n: simulate(pop.sums, pop.counts, shifts, n, n_sims=pp.n_sims, test=test, require_sign=pp.require_sign)
               for n in progress.track(sizes, desc="power: simulated corpus sizes", unit="size")}
    rows = []
    for i, (scenario, source, shift, target) in enumerate(scenarios):
        for j, name in enumerate(pop.contrasts):
            note = pop.notes[j]
            if pop.present[j] and np.isnan(shift[j]):
                note = "; ".join(x for x in (note, "no target effect: the paper states no dz for this contrast"
                                             if np.isnan(target[j]) else "deltas have zero spread: dz undefined")
                                 if x)
            target_mean = target[j] * pop.sd[j] if np.isfinite(target[j]) else math.nan
            for n in grid:
                res = results.get(n)
                rows.append(dict(
                    corpus=corpus, cell=primary.name, scenario=scenario, effect_source=source, contrast=name,
                    condition_a=pop.pairs[j][0], condition_b=pop.pairs[j][1], target_dz=float(target[j]),
                    target_mean=float(target_mean), shift=float(shift[j]), n_docs=int(n),
                    power=float(res["power"][i, j]) if res else math.nan,
                    mc_se=float(res["mc_se"][i, j]) if res else math.nan,
                    null_rejection=float(res["power"][-1, j]) if res else math.nan,
                    power_analytic_bonferroni=analytic_power(target[j], n, pop.queries_per_doc[j],
                                                             pop.design_effect[j], pp.alpha / k,
                                                             require_sign=pp.require_sign, small_sample=True)
                    if np.isfinite(shift[j]) else math.nan,
                    n_docs_observed=int(g), n_queries_observed=int(pop.n_queries[j]),
                    queries_per_doc=float(pop.queries_per_doc[j]), design_effect=float(pop.design_effect[j]),
                    icc=float(pop.icc[j]), observed_dz=float(pop.dz[j]), n_sims=pp.n_sims, n_boot=pp.n_boot,
                    alpha=pp.alpha, target_power=pp.target_power, require_sign=pp.require_sign, seed=pp.seed,
                    note=note))
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def docs_needed(n_docs: Sequence[float], power: Sequence[float], target: float = 0.8) -> tuple[float, str]:
    """The corpus size at which a simulated power curve first reaches ``target``: ``(N, status)``.

    ``status`` is ``"interpolated"`` (N interpolated linearly in log N between the last grid size below the target
    and the first at or above it), ``"at_or_below_smallest"`` (the smallest size already reaches it; N = that
    size), ``"above_largest"`` (no simulated size reaches it; N = NaN) or ``"undefined"`` (no finite power).
    The first crossing is used, so Monte Carlo wiggles above the target later on do not matter."""
    n = np.asarray(n_docs, float)
    p = np.asarray(power, float)
    order = np.argsort(n, kind="stable")
    n, p = n[order], p[order]
    ok = np.isfinite(p)
    n, p = n[ok], p[ok]
    if n.size == 0:
        return math.nan, "undefined"
    hit = np.flatnonzero(p >= target)
    if hit.size == 0:
        return math.nan, "above_largest"
    i = int(hit[0])
    if i == 0:
        return float(n[0]), "at_or_below_smallest"
    x0, x1, y0, y1 = math.log(n[i - 1]), math.log(n[i]), p[i - 1], p[i]
    return float(math.exp(x0 + (target - y0) / (y1 - y0) * (x1 - x0))), "interpolated"


def user_power_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: Any, primary: design.PrimaryCell,
                     corpus: str, user_contrasts: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`power_table` for the user's contrasts (``contrasts.extra``) as a family of their own (Holm across
    them, :func:`chunkstudy.stats.user_family`), at the effects this run observed (no paper effect exists for
    them). Empty (with the columns) when there are none."""
    if not user_contrasts:
        return pd.DataFrame(columns=stages.columns("power"))
    return power_table(scores, queries, user_family(stats_params, user_contrasts), primary, corpus)


def needed_table(power_df: pd.DataFrame) -> pd.DataFrame:
    """Per scenario × contrast of a ``07_stats/power`` table: the documents needed for the target power
    (:func:`docs_needed` over the simulated grid), this corpus's size and the simulated power at it, the largest
    size simulated, the design effect and ICC. Status ``no_effect`` when the target dz is 0 (nothing to
    detect). ``null_rejection_at_needed`` is the test's size (``null_rejection``) at the first simulated size at
    or above the N needed; ``oversized`` flags it above ``alpha`` by more than 2 Monte Carlo SE — there the
    test is anti-conservative and the N needed is optimistic. Rows in contrast order, observed before paper."""
    stages.check(power_df, "power", ["scenario", "contrast", "n_docs", "power", "target_power", "n_docs_observed"],
                 "power.needed_table")
    rows = []
    for (scenario, name), d in power_df.groupby(["scenario", "contrast"], sort=False):
        first = d.iloc[0]
        target = float(first["target_power"])
        n_needed, status = docs_needed(d["n_docs"], d["power"], target)
        if float(first.get("target_dz", math.nan)) == 0.0:
            n_needed, status = math.nan, "no_effect"
        at = d[d["n_docs"] == first["n_docs_observed"]]
        alpha = float(first.get("alpha", math.nan))
        n_sims = float(first.get("n_sims", math.nan))
        size = math.nan
        if np.isfinite(n_needed) and "null_rejection" in d:
            above = d[d["n_docs"] >= n_needed - 1e-9].sort_values("n_docs")
            size = float(above["null_rejection"].iat[0]) if len(above) else math.nan
        oversized = bool(size > alpha + 2 * math.sqrt(alpha * (1 - alpha) / n_sims)) if np.isfinite(size) and \
            np.isfinite(alpha) and np.isfinite(n_sims) else False
        rows.append(dict(corpus=first.get("corpus", ""), scenario=scenario, effect_source=first.get("effect_source",
                                                                                                    scenario),
                         contrast=name, condition_a=first.get("condition_a", ""),
                         condition_b=first.get("condition_b", ""), target_dz=float(first.get("target_dz", math.nan)),
                         n_docs_needed=n_needed, status=status, n_docs_observed=int(first["n_docs_observed"]),
                         power_at_observed=float(at["power"].iat[0]) if len(at) else math.nan,
                         mc_se_at_observed=float(at["mc_se"].iat[0]) if len(at) and "mc_se" in at else math.nan,
                         null_rejection_at_needed=size, oversized=oversized, largest_simulated=int(d["n_docs"].max()),
                         design_effect=float(first.get("design_effect", math.nan)),
                         icc=float(first.get("icc", math.nan)), target_power=target, alpha=alpha, n_sims=n_sims,
                         note=first.get("note", "")))
    out = pd.DataFrame(rows, columns=NEEDED_COLUMNS)
    order = {c: i for i, c in enumerate(dict.fromkeys(power_df["contrast"]))}
    scen = {s: i for i, s in enumerate((OBSERVED, PAPER))}
    key = out["contrast"].map(order) * 10 + out["scenario"].map(lambda s: scen.get(s, len(scen)))
    return out.iloc[np.argsort(key.to_numpy(), kind="stable")].reset_index(drop=True)
