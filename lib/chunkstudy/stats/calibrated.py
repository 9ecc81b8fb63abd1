"""The small-sample-calibrated test of a contrast, beside the paper's percentile bootstrap (docs/design.md,
"Statistics", "Calibrated at the sizes users bring"): the same estimand — the unweighted mean over queries of the
paired deltas, ``δ̄ = Σ_d S_d / Σ_d n_d`` over documents ``d`` with per-document sums ``S_d`` and counts ``n_d``
(``N = Σ n_d`` queries, ``G`` documents) — tested as the intercept of the regression ``δ_q = β + u_q`` with
errors clustered by document. Three tests of ``H0: β = β0``, measured against each other by
``bench/bench_calibration.py``:

* **CR1 t** (:func:`cr1`): ``t = (δ̄ − β0) / se₁``, ``se₁² = G/(G−1) · Σ_d (S_d − n_d δ̄)² / N²``, referred to
  Student's t with ``G − 1`` degrees of freedom (Cameron, Gelbach & Miller 2008; Cameron & Miller 2015, §VI).
* **CR2 with Bell–McCaffrey degrees of freedom** (:func:`cr2`; Bell & McCaffrey 2002; Imbens & Kolesár 2016;
  Pustejovsky & Tipton 2018). For an intercept the leverage of document ``d`` is ``n_d/N``, and the bias-reduced
  variance is ``V₂ = Σ_d (S_d − n_d δ̄)² / (1 − n_d/N) / N²``. Its Satterthwaite degrees of freedom under the
  working model of independent homoskedastic errors are ``ν = (Σλ)² / Σλ²`` over the eigenvalues ``λ`` of
  ``D (diag(n) − n nᵀ/N) D`` with ``D = diag(a_d)``, ``a_d² = 1 / (N² (1 − n_d/N))``: ``Σλ = 1/N`` and
  ``Σλ² = Σ a⁴n² − 2 Σ a⁴n³/N + (Σ a²n²)²/N²``. With equal cluster sizes ``V₂ = G/(G−1) · V₀`` and ``ν = G − 1``:
  the classical t test on the documents' means.
* **the wild cluster bootstrap-t with the null imposed** (:class:`WildT`, "WCR"; Cameron, Gelbach & Miller 2008;
  MacKinnon & Webb 2017, 2018; Roodman, MacKinnon, Nielsen & Webb 2019): the bootstrap samples
  ``δ*_q = β0 + v_d (δ_q − β0)``, one weight ``v_d`` per document, Rademacher (±1) or Webb's six points
  (±√½, ±1, ±√(3/2)) and each sample's CR1 t statistic ``t*``. For an intercept every ``t*(β0)`` is a closed form in
  per-replicate weighted sums (with ``E_d = S_d − n_d β0``, ``A = Σ v E``, ``C = Σ v n E``, ``W = Σ v² E²``):
  ``t* = A / √(G/(G−1) · (W − 2 (A/N) C + (A/N)² Σ n²))``, and each of ``A, C, W`` is linear (quadratic) in
  ``β0`` with coefficients ``Σ v S, Σ v n, Σ v n S, Σ v n², Σ v² S², Σ v² n S, Σ v² n²``, so one
  ``(B × G) @ (G × 7)`` product gives ``t*`` at any ``β0`` in O(B): the two-sided p at 0, the one-sided p-values at
  ``±bound`` (TOST) and the ``(1 − alpha)`` CI by inverting the test (bisection on ``β0``). The observed sample
  is the replicate ``v = 1``. When ``2^G ≤ B`` (Rademacher) or ``6^G ≤ B`` (Webb) every weight vector is
  enumerated once, so the p-value is exact and deterministic; else ``B`` vectors are drawn from
  ``numpy.random.default_rng(seed)``.

**p-values.** Two-sided symmetric, as ``wildboottest`` and ``boottest`` count it: the share of ``|t*|`` at least
``|t|``. Drawn weights count the observed sample as one of ``B + 1`` (``(1 + k)/(B + 1)``, as the study's
percentile p); enumerated weights already hold it (``k / 2^G``). One-sided: the share of ``t*`` at least ``t``
(``H0: β ≤ β0``) or at most ``t`` (``H0: β ≥ β0``), counted the same way.

Which one the study uses where is measured, not chosen by taste (docs/design.md, "Calibrated at the sizes users
bring"; :data:`WEBB_BELOW`). Pure; never rounds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats as sps

from ..significance import cluster_sums

#: Webb's (2014) six-point weights: ±√(1/2), ±1, ±√(3/2), each with probability 1/6.
WEBB_POINTS = np.array([-math.sqrt(1.5), -1.0, -math.sqrt(0.5), math.sqrt(0.5), 1.0, math.sqrt(1.5)])
#: The weight distributions of :func:`weights`.
WEIGHTS = ("rademacher", "webb")
#: Below this many documents the wild bootstrap takes Webb's six-point weights, from it on Rademacher's. With
#: Rademacher weights and G documents the smallest p is 2/2^G (the sample and its mirror): 0.0625 at G = 5, so five
#: documents could never reject, and Holm over 4 (7) contrasts can reject nothing below 8 (9) documents. Webb's
#: weights lift that floor (MacKinnon & Webb 2017 advise them below about a dozen clusters), but on the demo's deltas
#: they were liberal wherever Rademacher's were not: family-wise 6.1 % against 2.6 % at 8 documents (4 contrasts),
#: 10.9 % against 4.3 % at 9 (7 contrasts), 8.8 % against 6.3 % at 10 (2,000 null studies each; Monte Carlo SE
#: 0.4-0.7 points; bench/bench_calibration.py's wild-webb and wild-rademacher rows). So Webb's only where
#: Rademacher's cannot reject at all.
WEBB_BELOW = 9
#: Relative tolerance with which a replicate's |t*| counts as reaching |t| (the replicate v = 1 reproduces t up to
#: rounding).
_TIE = 1e-10


def _spread(w: np.ndarray, cross: np.ndarray, square: np.ndarray) -> np.ndarray:
    """A replicate's sum of squared cluster residuals, ``w − cross + square``, set to 0 where it is rounding error
    against its terms (a weight vector constant over the documents leaves no residual when the deltas have no
    spread; computed, it is a few ulps either side of 0)."""
    q = w - cross + square
    return np.where(q <= 1e-12 * (np.abs(w) + np.abs(cross) + np.abs(square)), 0.0, q)


def _slack(t: float) -> float:
    """How far below |t| a replicate's statistic still counts as reaching it (:data:`_TIE`; 0 for an infinite t,
    whose replicate v = 1 is infinite too: deltas with no spread)."""
    return abs(t) * _TIE if math.isfinite(t) else 0.0


@dataclass(frozen=True)
class Clusters:
    """Per-document sums ``S_d`` and counts ``n_d`` of one contrast's paired deltas (documents in sorted label order,
    :func:`chunkstudy.significance.cluster_sums`)."""

    sums: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(cls, deltas: Sequence[float] | np.ndarray, clusters: Sequence) -> "Clusters":
        _, sums, counts = cluster_sums(deltas, clusters)
        if np.isnan(sums).any():
            raise ValueError("Clusters.of: deltas contain NaN; drop unpaired queries first")
        return cls(sums, counts)

    @property
    def g(self) -> int:
        return int(self.sums.size)

    @property
    def n(self) -> float:
        return float(self.counts.sum())

    @property
    def estimate(self) -> float:
        return float(self.sums.sum() / self.counts.sum())

    def residual_sums(self) -> np.ndarray:
        """``S_d − n_d δ̄``: each document's sum of residuals from the estimate."""
        return self.sums - self.counts * self.estimate


@dataclass(frozen=True)
class TTest:
    """A t-based test of the intercept: the estimate, its standard error, the degrees of freedom, and what they give
    (:meth:`p`, :meth:`p_greater`, :meth:`p_less`, :meth:`ci`)."""

    estimate: float
    se: float
    df: float
    method: str

    def t(self, beta0: float = 0.0) -> float:
        if self.se > 0:
            return (self.estimate - beta0) / self.se
        return 0.0 if self.estimate == beta0 else math.copysign(math.inf, self.estimate - beta0)

    def p(self, beta0: float = 0.0) -> float:
        """Two-sided p of ``H0: β = β0``."""
        return float(min(1.0, 2 * sps.t.sf(abs(self.t(beta0)), self.df)))

    def p_greater(self, beta0: float) -> float:
        """One-sided p of ``H0: β ≤ β0`` against ``β > β0``."""
        return float(sps.t.sf(self.t(beta0), self.df))

    def p_less(self, beta0: float) -> float:
        """One-sided p of ``H0: β ≥ β0`` against ``β < β0``."""
        return float(sps.t.cdf(self.t(beta0), self.df))

    def ci(self, alpha: float) -> tuple[float, float]:
        half = float(sps.t.ppf(1 - alpha / 2, self.df)) * self.se
        return self.estimate - half, self.estimate + half


def cr1(c: Clusters) -> TTest:
    """The CR1 t test with ``G − 1`` degrees of freedom (module docstring)."""
    g, n = c.g, c.n
    se = math.sqrt(g / (g - 1) * float(np.sum(c.residual_sums() ** 2))) / n
    return TTest(c.estimate, se, g - 1.0, "CR1 t, G−1 df")


def bm_df(counts: np.ndarray) -> float:
    """Bell–McCaffrey degrees of freedom of the CR2 variance of an intercept with cluster sizes ``counts`` (module
    docstring): ``(Σλ)² / Σλ²``; ``G − 1`` with equal sizes."""
    n = np.asarray(counts, dtype=float)
    total = n.sum()
    a2 = 1.0 / (total ** 2 * (1.0 - n / total))
    sum_l = float(np.sum(a2 * n * (1.0 - n / total)))
    sum_l2 = float(np.sum(a2 ** 2 * n ** 2) - 2 * np.sum(a2 ** 2 * n ** 3) / total + np.sum(a2 * n ** 2) ** 2 / total ** 2)
    return sum_l ** 2 / sum_l2


def cr2(c: Clusters) -> TTest:
    """The CR2 t test with Bell–McCaffrey degrees of freedom (module docstring)."""
    n = c.n
    se = math.sqrt(float(np.sum(c.residual_sums() ** 2 / (1.0 - c.counts / n)))) / n
    return TTest(c.estimate, se, bm_df(c.counts), "CR2 t, Bell–McCaffrey df")


def weights(g: int, n_boot: int, seed: int, kind: str) -> tuple[np.ndarray, bool]:
    """The ``(B, g)`` wild-bootstrap weights and whether they enumerate every vector: all ``2^g`` sign vectors
    (Rademacher) or ``6^g`` six-point vectors (Webb) when that many are at most ``n_boot``, else ``n_boot`` rows
    drawn uniformly from ``numpy.random.default_rng(seed)`` (``integers(0, 2)`` or ``integers(0, 6)`` per entry)."""
    if kind not in WEIGHTS:
        raise ValueError(f"weights: unknown kind {kind!r}; known: {list(WEIGHTS)}")
    points = np.array([-1.0, 1.0]) if kind == "rademacher" else WEBB_POINTS
    if points.size ** g <= n_boot:
        return points[np.array(list(itertools.product(range(points.size), repeat=g)), dtype=np.int64)], True
    rng = np.random.default_rng(seed)
    return points[rng.integers(0, points.size, size=(int(n_boot), g))], False


def default_weights(g: int) -> str:
    """Webb's below :data:`WEBB_BELOW` documents, Rademacher's from there on."""
    return "webb" if g < WEBB_BELOW else "rademacher"


@dataclass(frozen=True)
class WildT:
    """The wild cluster bootstrap-t with the null imposed (module docstring) of one contrast, at any ``β0``.

    ``sums`` holds, per replicate, ``Σ v S, Σ v n, Σ v n S, Σ v n², Σ v² S², Σ v² n S, Σ v² n²``; ``enumerated``
    says whether the weights were every vector (exact p) or drawn."""

    clusters: Clusters
    sums: np.ndarray = field(repr=False)
    enumerated: bool
    kind: str

    @classmethod
    def of(cls, c: Clusters, n_boot: int, seed: int, kind: str | None = None) -> "WildT":
        if c.g < 2:
            raise ValueError(f"WildT: need at least 2 documents, got {c.g}")
        kind = kind or default_weights(c.g)
        v, enumerated = weights(c.g, n_boot, seed, kind)
        s, n = c.sums, c.counts
        return cls(c, np.hstack([v @ np.column_stack([s, n, n * s, n * n]),
                                 (v * v) @ np.column_stack([s * s, n * s, n * n])]), enumerated, kind)

    @property
    def n_boot(self) -> int:
        return int(self.sums.shape[0])

    @property
    def method(self) -> str:
        how = f"all {self.n_boot:,} weight vectors" if self.enumerated else f"{self.n_boot:,} draws"
        return f"wild cluster bootstrap-t, null imposed ({self.kind.capitalize()} weights, {how})"

    def t(self, beta0: float = 0.0) -> float:
        """The observed CR1 t statistic of ``H0: β = β0`` (0 when the deltas have no spread and β0 is the
        estimate)."""
        return cr1(self.clusters).t(beta0)

    def t_star(self, beta0: float = 0.0) -> np.ndarray:
        """The ``B`` bootstrap t statistics with ``β = β0`` imposed (NaN where a replicate has no spread and no
        effect)."""
        c, r = self.clusters, self.sums
        n_total, g = c.n, c.g
        a = r[:, 0] - beta0 * r[:, 1]
        cc = r[:, 2] - beta0 * r[:, 3]
        w = r[:, 4] - 2 * beta0 * r[:, 5] + beta0 ** 2 * r[:, 6]
        shift = a / n_total
        q = _spread(w, 2 * shift * cc, shift ** 2 * float(np.sum(c.counts ** 2)))
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / np.sqrt(g / (g - 1) * q)

    def _share(self, hits: np.ndarray) -> float:
        k = float(np.sum(hits))
        return k / self.n_boot if self.enumerated else (1.0 + k) / (1.0 + self.n_boot)

    def p(self, beta0: float = 0.0) -> float:
        """Two-sided symmetric p of ``H0: β = β0``: the share of ``|t*| ≥ |t|`` (module docstring)."""
        t = self.t(beta0)
        if t == 0.0:
            return 1.0
        return min(1.0, self._share(np.abs(self.t_star(beta0)) >= abs(t) - _slack(t)))

    def p_greater(self, beta0: float) -> float:
        """One-sided p of ``H0: β ≤ β0`` against ``β > β0``: the share of ``t* ≥ t``."""
        t = self.t(beta0)
        return min(1.0, self._share(self.t_star(beta0) >= t - _slack(t)))

    def p_less(self, beta0: float) -> float:
        """One-sided p of ``H0: β ≥ β0`` against ``β < β0``: the share of ``t* ≤ t``."""
        t = self.t(beta0)
        return min(1.0, self._share(self.t_star(beta0) <= t + _slack(t)))

    def ci(self, alpha: float) -> tuple[float, float]:
        """The ``(1 − alpha)`` interval by inverting the test: on each side of the estimate, the ``β0`` where
        :meth:`p` falls to ``alpha`` (bracketed by doubling a CR1-sized step, then 60 bisections; p is a step
        function of β0, so the bound is the step's edge to within 2⁻⁶⁰ of the bracket). ``(estimate, estimate)``
        when the deltas have no spread."""
        est = self.clusters.estimate
        step = cr1(self.clusters).se
        if not step > 0:
            return est, est
        return self._edge(est, -step, alpha), self._edge(est, step, alpha)

    def _edge(self, est: float, step: float, alpha: float) -> float:
        inside, out = est, est + step
        for _ in range(60):
            if self.p(out) < alpha:
                break
            inside, out = out, est + 2 * (out - est)
        else:
            return math.copysign(math.inf, step)
        for _ in range(60):
            mid = (inside + out) / 2
            inside, out = (mid, out) if self.p(mid) >= alpha else (inside, mid)
        return (inside + out) / 2
