"""The effect sizes stage 07 reports beside the test (paper, statistics appendix): Cohen's dz of the paired deltas
and the cluster-robust standard error of a mean. The test itself — resampling, CI, p, floors and Holm's decision —
is :class:`chunkstudy.significance.BootstrapTest`. Pure; never rounds."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..significance import cluster_sums


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
