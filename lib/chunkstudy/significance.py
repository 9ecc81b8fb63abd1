"""The study's one test of a contrast, declared and decided in one place (paper §4 and the statistics appendix):
the document-clustered bootstrap of the mean paired delta, its percentile CI, its Monte-Carlo-correct two-sided
p, the floors below which it cannot support inference, and Holm's decision within a family.

:class:`BootstrapTest` is that test as one object, built from the ``stats`` record (:meth:`BootstrapTest.of`).
Everything that decides significance goes through it:

* stage 07's contrast tables (:func:`chunkstudy.stats.contrasts_table` and the user's family): :meth:`~BootstrapTest.test`
  per contrast, then :meth:`~BootstrapTest.decide` over the family, which fills ``p_holm`` and ``reject_holm``;
* the power analysis (:mod:`chunkstudy.stats.power`), a vectorised backend that draws the same replicates in bulk
  (the draws are its own, checked against :meth:`~BootstrapTest.resample` in the tests) and counts them with the
  same p (:meth:`~BootstrapTest.p_from_counts`), the same Holm (:meth:`~BootstrapTest.adjust`) and the same
  rejection rule (:meth:`~BootstrapTest.reject`);
* the parameter file's rule on ``stats.power_n_boot`` (:mod:`chunkstudy.config_rules`): whether a family of m
  contrasts can reject anything at all with B resamples (:meth:`~BootstrapTest.can_reject`);
* stage 08 prints 07's ``reject_holm`` and ``inference`` columns and the test's own description of its p
  (:data:`P_RULE`); it computes no statistic.

A decision is a :class:`Verdict` over a family of :class:`Tested` contrasts: Holm is the study's
(:data:`HOLM`); another decision computed from the same bootstrap draws (an equivalence test, say) is registered in
:data:`chunkstudy.stats.verdicts.VERDICTS`, with what 07, the manifests and the goldens read of it and, apart, how the
report prints it (:mod:`chunkstudy.stats.verdict_protocols`); 07 adds it to each cell's
:attr:`BootstrapTest.verdicts`. Pure; never rounds. This module sits with the foundations (it imports nothing of the
project) because the parameter rules below the stages use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np

#: Draw this many bootstrap replicates at a time (bounds memory at ``_BLOCK × n_docs`` int64 indices; the random
#: stream does not depend on it: int64 ``Generator.integers`` draws are sequential).
_BLOCK = 1000

#: The fewest bootstrap resamples with which 07 calls anything significant. Efron & Tibshirani (1993, *An
#: Introduction to the Bootstrap*, §19.3) ask for B ≥ 1,000 for percentile intervals: their 2.5th/97.5th percentiles
#: rest on the ~25 most extreme replicates of each tail. It also leaves the Monte Carlo p room under Holm: its
#: smallest value is 2/(B + 1), so the smallest Holm-adjusted p of a family of four is 8/(B + 1) — 0.008 at
#: B = 1,000, but 0.73 at B = 10 and 4 at B = 1 (where a "CI" is one replicate and may exclude its own Δ). The
#: paper uses 10,000; a run below this floor still writes its numbers, but no row is marked significant and the
#: report prints no CI, p or star for it (:func:`inference_problem`). Not a parameter: it is a property of the
#: method, not a policy to tune.
MIN_BOOT = 1000

#: From this many documents on, ``stats.decision: auto`` lets the percentile bootstrap decide a family: the fewest
#: documents at which bench/bench_calibration.py measured its per-contrast and family-wise false-positive rates at
#: most alpha + 2 Monte Carlo SE in every family of its table, on the demo's deltas and on the whole QASPER split's
#: (where zero-inflated deltas kept it liberal at 100: 7.5 % family-wise); below, the calibrated test decides
#: (:mod:`chunkstudy.stats.decision`; docs/design.md, "Calibrated at the sizes users bring").
PERCENTILE_FROM = 400
#: The fewest documents at which the calibrated test held its size in every family of the same table: the default of
#: ``stats.min_docs``, below which no test is trusted and nothing is called significant (a parameter: override it
#: knowingly).
CALIBRATED_FROM = 40

#: The note of a contrast whose paired queries all come from one document.
ONE_DOCUMENT_NOTE = "only one document: the clustered bootstrap cannot estimate uncertainty"

#: The two-sided p of :func:`mc_p_two_sided`, as the report states it (``k`` of ``B`` replicates on the far side).
P_RULE = "min(1, 2·(1 + k)/(B + 1))"
#: The smallest value that p takes, as the report and the parameter rules state it.
SMALLEST_P_RULE = "2/(B + 1)"


# ---------------------------------------------------------------------------------------------------------------
# The building blocks
# ---------------------------------------------------------------------------------------------------------------

def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (paper, statistics appendix, "Holm"; Holm 1979).

    Sort the ``m`` p-values ascending; the ``i``-th smallest (0-based) becomes ``min(1, max_{j≤i} (m−j)·p_(j))``
    — inflated by ``(m−i)`` under a running maximum so the adjusted values stay monotone, then clipped to 1.
    Returned in the input order. Ties keep their input order (a stable sort), which does not change the values.

    A NaN entry (a contrast that could not be computed) stays NaN in the output but still counts as a member of
    the family, ranked last as if its p were 1: the family size stays as pre-registered, which can only make the
    other adjusted p-values larger (conservative), never smaller.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"holm: expected a 1-d vector of p-values, got shape {p.shape}")
    finite = ~np.isnan(p)
    if np.any((p[finite] < 0) | (p[finite] > 1)):
        raise ValueError(f"holm: p-values must lie in [0, 1]; got {p.tolist()}")
    m = p.size
    ranked = np.where(finite, p, 1.0)
    order = np.argsort(ranked, kind="stable")
    inflated = (m - np.arange(m)) * ranked[order]
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(inflated))
    out = np.empty(m)
    out[order] = adjusted_sorted
    out[~finite] = np.nan
    return out


def percentile_ci(replicates: np.ndarray, alpha: float) -> tuple[float, float]:
    """The ``(1−alpha)`` percentile interval: the ``100·alpha/2`` and ``100·(1−alpha/2)`` percentiles of the
    bootstrap replicates (numpy's default linear interpolation). alpha = 0.05 gives the 2.5th/97.5th percentiles."""
    if not 0 < alpha < 1:
        raise ValueError(f"percentile_ci: alpha must lie in (0, 1), got {alpha}")
    lo, hi = np.percentile(replicates, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def mc_p_two_sided(n_le: np.ndarray | int, n_ge: np.ndarray | int, n_boot: int) -> np.ndarray | float:
    """The Monte-Carlo-correct two-sided p from the counts of replicates on each side of 0 (:data:`P_RULE`):

        p = min(1, 2 · (1 + min(#{δ* ≤ 0}, #{δ* ≥ 0})) / (1 + B))

    It doubles the smaller one-sided Monte Carlo p-value, which is counted as the literature does:
    Davison & Hinkley (1997, *Bootstrap Methods and their Application*, §4.2, Monte Carlo tests)
    ``p_mc = (1 + #{t*_r ≥ t}) / (R + 1)``; North, Curtis & Sham (2002, *Am. J. Hum. Genet.* 71:439-441)
    ``p = (r + 1) / (n + 1)`` for ``r`` of ``n`` replicates at least as extreme; Phipson & Smyth (2010,
    "Permutation p-values should never be zero"). The observed sample counts as one of the ``B + 1`` equally
    likely outcomes, so p is never 0: its smallest value is ``2 / (B + 1)`` (the plain share ``#{…}/B`` gives 0
    whenever no replicate crosses 0, whatever ``B``, and a level-alpha test built on it is anti-conservative).
    Elementwise on arrays of counts (the power simulation counts many studies at once)."""
    if int(n_boot) < 1:
        raise ValueError(f"mc_p_two_sided: n_boot must be ≥ 1, got {n_boot}")
    p = np.minimum(1.0, 2.0 * (1.0 + np.minimum(n_le, n_ge)) / (1.0 + int(n_boot)))
    return float(p) if np.ndim(p) == 0 else p


def bootstrap_p(replicates: np.ndarray) -> float:
    """Two-sided bootstrap p-value of the paper's statistics appendix, ``2·min(P[δ* ≤ 0], P[δ* ≥ 0])`` clipped to
    1, counted Monte-Carlo-correctly over the ``B`` replicates (:func:`mc_p_two_sided`):
    ``min(1, 2·(1 + min(#{δ* ≤ 0}, #{δ* ≥ 0})) / (1 + B))``. Never 0; its smallest value is ``2/(B + 1)``."""
    r = np.asarray(replicates, dtype=float)
    if r.size == 0:
        raise ValueError("bootstrap_p: no replicates")
    return float(mc_p_two_sided(int(np.sum(r <= 0.0)), int(np.sum(r >= 0.0)), r.size))


def smallest_p(n_boot: int) -> float:
    """The smallest p of :func:`mc_p_two_sided` with ``n_boot`` resamples (:data:`SMALLEST_P_RULE`): every
    replicate on one side of 0."""
    return float(mc_p_two_sided(0, 0, n_boot))


def inference_problem(n_docs: int, n_boot: int, min_docs: int) -> str:
    """Why a document-clustered bootstrap over ``n_docs`` documents with ``n_boot`` resamples cannot support
    inference — CIs, p-values, Holm rejections — or ``""`` when it can. Two floors: ``min_docs`` documents
    (``stats.min_docs``, the resampled units: with few clusters the percentile bootstrap understates the spread of
    their mean and rejects a true null far more often than alpha) and :data:`MIN_BOOT` resamples."""
    problems = []
    if n_docs < min_docs:
        problems.append(f"{n_docs} document{'' if n_docs == 1 else 's'}, fewer than stats.min_docs = {min_docs}")
    if n_boot < MIN_BOOT:
        problems.append(f"stats.n_boot = {n_boot}, below the floor of {MIN_BOOT:,} resamples")
    return ("no inference: " + "; ".join(problems)) if problems else ""


@dataclass(frozen=True)
class Bootstrap:
    """A cluster-bootstrap result: the point estimate (the unweighted mean over all observations), the percentile
    CI, the two-sided p, the sizes, the replicate means themselves (length ``n_boot``), and the per-cluster sums and
    counts it resampled (sorted label order; what a test on the same clusters reads: the calibrated test of
    :mod:`chunkstudy.stats.decision`)."""

    estimate: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    n_clusters: int
    replicates: np.ndarray
    sums: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    counts: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)


def cluster_sums(values: Sequence[float] | np.ndarray, clusters: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-cluster sums and counts of ``values``: ``(labels, sums, counts)`` with ``labels`` sorted."""
    v = np.asarray(values, dtype=float)
    c = np.asarray(clusters)
    if v.ndim != 1 or c.shape != v.shape:
        raise ValueError(f"cluster_sums: values {v.shape} and clusters {c.shape} must be 1-d of equal length")
    labels, inverse = np.unique(c, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=labels.size)
    counts = np.bincount(inverse, minlength=labels.size).astype(float)
    return labels, sums, counts


def cluster_bootstrap(deltas: Sequence[float] | np.ndarray, clusters: Sequence, n_boot: int, seed: int,
                      *, alpha: float) -> Bootstrap:
    """Document-clustered bootstrap of the mean of ``deltas`` (paper, statistics appendix, "cluster bootstrap";
    Cameron, Gelbach & Miller 2008).

    Group the observations by cluster (document) into per-cluster sums ``S_d`` and counts ``n_d``. Each of the
    ``n_boot`` replicates draws ``G`` clusters with replacement (``G`` = number of clusters) and recomputes the mean
    as ``δ̄* = Σ_{d∈draw} S_d / Σ_{d∈draw} n_d``, so every query of a drawn document enters as a bundle.
    Returns the full-sample mean, the ``(1−alpha)`` percentile CI (:func:`percentile_ci`) and the two-sided p
    (:func:`bootstrap_p`).

    Draws: ``numpy.random.default_rng(seed).integers(0, G, size=(n_boot, G))`` (int64, consumed row by row in
    blocks) indexing the clusters in sorted label order. With one observation per cluster and the observations
    given in sorted cluster order this is exactly the ordinary paired bootstrap with the same draws. Two calls with
    the same cluster labels and seed use the same document draws (common random numbers across contrasts).
    """
    if n_boot < 1:
        raise ValueError(f"cluster_bootstrap: n_boot must be ≥ 1, got {n_boot}")
    labels, sums, counts = cluster_sums(deltas, clusters)
    if labels.size == 0:
        raise ValueError("cluster_bootstrap: no observations")
    if np.isnan(sums).any():
        raise ValueError("cluster_bootstrap: deltas contain NaN; drop unpaired queries first")
    g = labels.size
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_boot)
    for start in range(0, n_boot, _BLOCK):
        stop = min(n_boot, start + _BLOCK)
        idx = rng.integers(0, g, size=(stop - start, g))
        replicates[start:stop] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    estimate = float(sums.sum() / counts.sum())
    lo, hi = percentile_ci(replicates, alpha)
    return Bootstrap(estimate, lo, hi, bootstrap_p(replicates), int(counts.sum()), int(g), replicates, sums, counts)


# ---------------------------------------------------------------------------------------------------------------
# The test and its decisions
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tested:
    """One contrast as the test saw it (:meth:`BootstrapTest.test`): the bootstrap ``estimate`` (the mean over all
    paired queries), the ``(1−alpha)`` CI and p (NaN when they are undefined: one document, or no paired query),
    the sizes, ``inference`` (the floors hold, :func:`inference_problem`), a ``note`` saying why not, the
    replicates every verdict reads (empty when nothing was drawn), and the per-document sums and counts of the
    deltas (what a verdict that tests the same documents otherwise reads; empty when not given)."""

    estimate: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    n_clusters: int
    inference: bool
    note: str = ""
    replicates: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    sums: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)
    counts: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False)

    @classmethod
    def untested(cls, note: str) -> "Tested":
        """A contrast the test could not see (no paired query): NaN statistics, no inference, ``note``."""
        nan = math.nan
        return cls(nan, nan, nan, nan, 0, 0, False, note)


class Verdict(Protocol):
    """A decision about every contrast of a family, computed from their :class:`Tested` results (the same
    bootstrap draws): the ``columns`` it fills in 07's contrast tables, one dict per contrast in family order."""

    @property
    def name(self) -> str: ...

    @property
    def columns(self) -> tuple[str, ...]: ...

    def decide(self, test: "BootstrapTest", family: Sequence[Tested]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class HolmVerdict:
    """The study's decision (paper §4): Holm's step-down adjustment across the family (:func:`holm`; an untested
    contrast keeps its place with p NaN), and a contrast is rejected when its Holm-adjusted p is below alpha and
    the floors hold (:meth:`BootstrapTest.reject`). Columns ``p_holm`` and ``reject_holm``."""

    name: ClassVar[str] = "holm"
    columns: ClassVar[tuple[str, ...]] = ("p_holm", "reject_holm")

    def decide(self, test: "BootstrapTest", family: Sequence[Tested]) -> list[dict[str, Any]]:
        adjusted = test.adjust([t.p for t in family])
        return [{"p_holm": float(ph), "reject_holm": bool(test.reject(ph, t.inference))}
                for t, ph in zip(family, adjusted)]


#: The study's verdict: Holm within the family.
HOLM = HolmVerdict()


@dataclass(frozen=True)
class BootstrapTest:
    """The test of a contrast ``A − B`` (paper §4 and the statistics appendix), one object for every place that
    decides significance (module docstring).

    * **resampling**: documents with replacement, ``n_boot`` replicates from ``numpy.random.default_rng(seed)``,
      every query of a drawn document entering as a bundle (:func:`cluster_bootstrap`);
    * **statistic**: the mean of the paired per-query deltas;
    * **CI**: the ``(1−alpha)`` percentile interval of the replicates (:func:`percentile_ci`);
    * **p**: two-sided, Monte-Carlo-correct (:func:`mc_p_two_sided`, :data:`P_RULE`; never below
      :data:`SMALLEST_P_RULE`);
    * **floors**: at least ``min_docs`` documents and :data:`MIN_BOOT` resamples, else no inference
      (:func:`inference_problem`);
    * **decision**: each of :attr:`verdicts` over the family (:data:`HOLM`: Holm-adjusted p < alpha and the floors
      hold).
    """

    n_boot: int
    seed: int
    alpha: float
    min_docs: int
    verdicts: tuple[Verdict, ...] = (HOLM,)

    def __post_init__(self) -> None:
        if int(self.n_boot) < 1:
            raise ValueError(f"BootstrapTest: n_boot must be ≥ 1, got {self.n_boot}")
        if not 0 < float(self.alpha) < 1:
            raise ValueError(f"BootstrapTest: alpha must lie in (0, 1), got {self.alpha}")

    @classmethod
    def of(cls, stats_params: Any, *, n_boot: int | None = None) -> "BootstrapTest":
        """The test the ``stats`` record declares (:class:`chunkstudy.params.StatsParams`, or a mapping with its
        keys: the parameter rules read plain dicts): ``stats.n_boot`` resamples (``n_boot`` instead, e.g.
        ``stats.power_n_boot`` for the power simulation), ``stats.seed``, ``stats.alpha``, ``stats.min_docs``."""
        def get(key: str) -> Any:
            return stats_params[key] if isinstance(stats_params, dict) else getattr(stats_params, key)

        return cls(int(get("n_boot") if n_boot is None else n_boot), int(get("seed")), float(get("alpha")),
                   int(get("min_docs")))

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the verdicts fill, in order."""
        return tuple(c for v in self.verdicts for c in v.columns)

    # resampling, CI, p ------------------------------------------------------------------------------------------
    def resample(self, deltas: Sequence[float] | np.ndarray, clusters: Sequence) -> Bootstrap:
        """:func:`cluster_bootstrap` of ``deltas`` clustered by ``clusters`` with this test's resamples, seed and
        alpha (the same seed for every contrast: common random numbers)."""
        return cluster_bootstrap(deltas, clusters, self.n_boot, self.seed, alpha=self.alpha)

    def p_from_counts(self, n_le: np.ndarray | int, n_ge: np.ndarray | int) -> np.ndarray | float:
        """The p of :data:`P_RULE` from the counts of replicates ``≤ 0`` and ``≥ 0`` (elementwise)."""
        return mc_p_two_sided(n_le, n_ge, self.n_boot)

    def inference_problem(self, n_docs: int) -> str:
        """Why this test cannot support inference over ``n_docs`` documents (``""`` when it can)."""
        return inference_problem(n_docs, self.n_boot, self.min_docs)

    def test(self, deltas: Sequence[float] | np.ndarray, clusters: Sequence) -> Tested:
        """One contrast: :meth:`resample`, then the floors (:meth:`judge`)."""
        return self.judge(self.resample(deltas, clusters))

    def judge(self, boot: Bootstrap) -> Tested:
        """What the test says of one contrast's bootstrap (:meth:`resample`, or a backend that draws the same
        replicates in bulk: :func:`chunkstudy.stats.multiverse.test_many`): with a single document the CI and p are
        NaN (:data:`ONE_DOCUMENT_NOTE`); below a floor ``inference`` is False and the note says why."""
        one_doc = boot.n_clusters < 2
        problem = self.inference_problem(boot.n_clusters)
        nan = math.nan
        return Tested(boot.estimate, nan if one_doc else boot.ci_low, nan if one_doc else boot.ci_high,
                      nan if one_doc else boot.p, boot.n, boot.n_clusters, not problem,
                      "; ".join(x for x in (ONE_DOCUMENT_NOTE if one_doc else "", problem) if x), boot.replicates,
                      boot.sums, boot.counts)

    # the decision -----------------------------------------------------------------------------------------------
    def adjust(self, pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
        """Holm-adjusted p-values of one family (:func:`holm`)."""
        return holm(pvalues)

    def reject(self, p_adjusted: Any, inference: Any = True) -> Any:
        """THE rule: a contrast is significant when its adjusted p is below ``alpha`` and the floors hold
        (``inference``); a NaN p never is. Elementwise on arrays (the power simulation decides many studies at
        once; it measures the test itself, so it passes no floor)."""
        p = np.asarray(p_adjusted, dtype=float)
        out = np.where(np.isnan(p), False, p < self.alpha) & np.asarray(inference, dtype=bool)
        return bool(out) if out.ndim == 0 else out

    def decide(self, family: Sequence[Tested]) -> list[dict[str, Any]]:
        """Every verdict over one family (contrasts in family order): one dict of verdict columns per contrast."""
        out: list[dict[str, Any]] = [{} for _ in family]
        for v in self.verdicts:
            for row, cols in zip(out, v.decide(self, family)):
                row.update(cols)
        return out

    # what the parameters allow ----------------------------------------------------------------------------------
    def smallest_p(self) -> float:
        """The smallest p this test can give (:func:`smallest_p`)."""
        return smallest_p(self.n_boot)

    def smallest_holm_p(self, m: int) -> float:
        """The smallest Holm-adjusted p in a family of ``m`` contrasts: ``m`` times the smallest p, at most 1."""
        return float(self.adjust(np.full(max(1, int(m)), self.smallest_p())).min())

    def can_reject(self, m: int) -> bool:
        """Whether a family of ``m`` contrasts can reject anything at all with this test's resamples."""
        return bool(self.reject(self.smallest_holm_p(m)))

    def resamples_to_reject(self, m: int) -> int:
        """The fewest resamples with which a family of ``m`` contrasts can reject something at this alpha (a
        doubling, then a bisection over :meth:`can_reject`, which only grows with the resamples)."""
        def can(b: int) -> bool:
            return BootstrapTest(b, self.seed, self.alpha, self.min_docs).can_reject(m)

        hi = 1
        while not can(hi):
            hi *= 2
        lo = hi // 2 + 1 if hi > 1 else 1
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if can(mid) else (mid + 1, hi)
        return hi
