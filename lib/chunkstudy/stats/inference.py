"""The statistical building blocks of stage 07 (paper, statistics appendix): the document-clustered bootstrap,
its percentile CI and Monte-Carlo-correct two-sided p, Holm, Cohen's dz, the cluster-robust SE, and the floors
below which a bootstrap cannot support inference. Pure; never rounds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Draw this many bootstrap replicates at a time (bounds memory at ``_BLOCK × n_docs`` int64 indices; the random
#: stream does not depend on it: int64 ``Generator.integers`` draws are sequential).
_BLOCK = 1000


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


def cohens_dz(deltas: Sequence[float] | np.ndarray) -> float:
    """Cohen's ``dz = mean(δ) / sd(δ)`` over paired per-query deltas, ``sd`` with ddof = 1 (paper, statistics
    appendix, "effect size"). Equivalently ``dz = t / sqrt(n)`` for the paired t statistic.

    NaN when it is undefined: fewer than two deltas, or ``sd = 0`` (e.g. identical conditions, where the mean
    delta is 0 and there is no spread to scale by).
    """
    d = np.asarray(deltas, dtype=float)
    if d.size < 2:
        return float("nan")
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        return float("nan")
    return float(np.mean(d)) / sd


def percentile_ci(replicates: np.ndarray, alpha: float) -> tuple[float, float]:
    """The ``(1−alpha)`` percentile interval: the ``100·alpha/2`` and ``100·(1−alpha/2)`` percentiles of the
    bootstrap replicates (numpy's default linear interpolation). alpha = 0.05 gives the 2.5th/97.5th percentiles."""
    if not 0 < alpha < 1:
        raise ValueError(f"percentile_ci: alpha must lie in (0, 1), got {alpha}")
    lo, hi = np.percentile(replicates, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(lo), float(hi)


def mc_p_two_sided(n_le: np.ndarray | int, n_ge: np.ndarray | int, n_boot: int) -> np.ndarray | float:
    """The Monte-Carlo-correct two-sided p from the counts of replicates on each side of 0:

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


#: The fewest bootstrap resamples with which 07 calls anything significant. Efron & Tibshirani (1993, *An
#: Introduction to the Bootstrap*, §19.3) ask for B ≥ 1,000 for percentile intervals: their 2.5th/97.5th percentiles
#: rest on the ~25 most extreme replicates of each tail. It also leaves the Monte Carlo p room under Holm: its
#: smallest value is 2/(B + 1), so the smallest Holm-adjusted p of a family of four is 8/(B + 1) — 0.008 at
#: B = 1,000, but 0.73 at B = 10 and 4 at B = 1 (where a "CI" is one replicate and may exclude its own Δ). The
#: paper uses 10,000; a run below this floor still writes its numbers, but no row is marked significant and the
#: report prints no CI, p or star for it (:func:`inference_problem`). Not a parameter: it is a property of the
#: method, not a policy to tune.
MIN_BOOT = 1000

#: The note of a contrast whose paired queries all come from one document.
ONE_DOCUMENT_NOTE = "only one document: the clustered bootstrap cannot estimate uncertainty"


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
    CI, the two-sided p, the sizes, and the replicate means themselves (length ``n_boot``)."""

    estimate: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    n_clusters: int
    replicates: np.ndarray


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
    return Bootstrap(estimate, lo, hi, bootstrap_p(replicates), int(counts.sum()), int(g), replicates)


def cluster_se(values: Sequence[float] | np.ndarray, clusters: Sequence) -> float:
    """Cluster-robust (sandwich, CR1) standard error of a mean:
    ``sqrt(G/(G−1) · Σ_d (S_d − n_d·ȳ)²) / N`` over ``G`` clusters with sums ``S_d``, counts ``n_d``, ``N = Σ n_d``.
    NaN with fewer than two clusters."""
    _, sums, counts = cluster_sums(values, clusters)
    g = sums.size
    if g < 2:
        return float("nan")
    n = counts.sum()
    mean = sums.sum() / n
    return float(np.sqrt(g / (g - 1) * np.sum((sums - counts * mean) ** 2)) / n)
