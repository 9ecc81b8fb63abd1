"""How often each test the report prints rejects a true null, at a given number of documents, on data shaped like a
real run's: the simulation behind bench/bench_calibration.py (docs/design.md, "Calibrated at the sizes users bring")
and behind 07's check of its own tests at the run's own structure (:mod:`.size_check`).

**The population** (:class:`Pool`): a run's paired per-query deltas of ``m`` contrasts in one cell (the queries
paired in every one of them), grouped by document, each contrast re-centred to mean 0 over the queries, so the
estimand of every contrast — the mean over queries of a study, ``Σ S_d / Σ n_d`` over its documents, whose
population value is ``Σ_pool S / Σ_pool n`` — is exactly 0: a true null, with the real deltas' shape (bounded,
skewed, zero-inflated) and the real queries per document. The shift moves the non-zero deltas only
(``δ'_qk = δ_qk − Σ_q δ_qk / #{δ_qk ≠ 0}`` where ``δ_qk ≠ 0``): a zero delta is a query both conditions ranked
alike, and it stays exactly 0, as it would under a null. (Shifting every delta instead turns the zeros into a
constant: a contrast whose mean rests on a document or two — the demo's C4, 59 of 61 deltas 0 — then gives studies
without that document a constant non-zero delta with no spread, which every test rejects.)

**A study of G documents** draws G documents with replacement from the pool (a document drawn twice is two
clusters). *Correlated* contrasts share the draw, so a document brings its queries' deltas of every contrast, with
their real dependence; *independent* contrasts each draw their own documents.

**The procedures** (:data:`PROCEDURES`), each at ``alpha``: the paper's percentile cluster bootstrap
(:func:`chunkstudy.significance.cluster_bootstrap`'s p and CI), the wild cluster bootstrap-t with the null imposed
(symmetric and equal-tailed p, Rademacher or Webb weights; :class:`chunkstudy.stats.calibrated.WildT`), CR2 with
Bell–McCaffrey df and CR1 with G − 1 df (:mod:`chunkstudy.stats.calibrated`). Per study each gives ``m`` p-values;
**per-contrast rate** = the share of p < alpha over studies and contrasts; **family-wise rate** = the share of
studies in which Holm over the m contrasts rejects anything; **coverage** = the share of (1 − alpha) CIs holding 0.
A test's CI is its inversion (the t tests' ``δ̄ ± t·se``, the wild bootstrap's :meth:`WildT.ci`), so it covers 0
exactly when the test does not reject: its coverage is ``1 −`` the per-contrast rate, and only the percentile
interval's is counted apart. Every rate comes with its Monte Carlo standard error ``√(r (1 − r) / n)`` over
the studies (a per-contrast rate and a coverage average the m contrasts of each study: their SE is that of the
per-study averages).

**Vectorised.** A block of studies shares one ``(B × G)`` matrix of bootstrap weights (the percentile bootstrap's
counts of each of the G drawn positions, or the wild bootstrap's weights), so each block is one matrix product
with the stacked per-document sums of all its studies and contrasts; each block draws its own matrix. The wild
bootstrap enumerates every weight vector where there are at most B of them, as the study's test does. The products
are small, so they run on one BLAS thread: on the shared 2-core machine under load a (499 × 20) @ (20 × 160)
product took 17 ms on OpenBLAS's threads and 0.05 ms on one.
Pure; never rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps
from threadpoolctl import threadpool_limits

from ..metrics.paired import pair, prepare_scores, wide_scores
from ..significance import mc_p_two_sided
from . import calibrated

#: The procedures :func:`rates` measures, by name.
PROCEDURES = ("percentile", "wild", "wild-et", "wild-rademacher", "wild-webb", "cr2", "cr1")
#: Studies per block (one weight matrix each). Sharing a matrix correlates the block's studies a little: with 50 per
#: block the spread of a family-wise rate over seeds was 1.4 times its binomial SE, with 10 as the SE says.
_STUDIES_PER_BLOCK = 10


# ---------------------------------------------------------------------------------------------------------------
# The population and the studies
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pool:
    """A real run's re-centred paired deltas of ``m`` contrasts (module docstring): ``deltas`` ``(Q, m)``,
    ``doc`` ``(Q,)`` each query's document index into ``docs``, ``means`` the ``m`` shifts removed from the
    non-zero deltas (a zero delta stays 0); ``base`` ``(Q, m)`` the B condition's scores where known (the
    pre-registered MixedLM models the two conditions' scores, ``B`` and ``B + δ'``), else None."""

    names: tuple[str, ...]
    docs: np.ndarray
    doc: np.ndarray
    deltas: np.ndarray
    means: np.ndarray
    base: np.ndarray | None = None

    @classmethod
    def of(cls, deltas: np.ndarray, docs: Sequence, names: Sequence[str], base: np.ndarray | None = None) -> "Pool":
        d = np.asarray(deltas, dtype=float)
        if d.ndim != 2 or d.shape[0] != len(docs) or d.shape[1] != len(names):
            raise ValueError(f"Pool.of: deltas {d.shape} must be (queries, contrasts) = ({len(docs)}, {len(names)})")
        if d.shape[0] == 0 or not np.isfinite(d).all():
            raise ValueError("Pool.of: need at least one query, every delta finite")
        labels, doc = np.unique(np.asarray(docs).astype(str), return_inverse=True)
        moved = d != 0
        means = np.divide(d.sum(axis=0), moved.sum(axis=0), out=np.zeros(d.shape[1]), where=moved.any(axis=0))
        return cls(tuple(names), labels, doc, np.where(moved, d - means, 0.0), means,
                   None if base is None else np.asarray(base, dtype=float))

    @cached_property
    def sums(self) -> np.ndarray:
        """``(D, m)`` per-document sums of the re-centred deltas."""
        out = np.zeros((self.docs.size, self.deltas.shape[1]))
        np.add.at(out, self.doc, self.deltas)
        return out

    @cached_property
    def counts(self) -> np.ndarray:
        """``(D,)`` queries per document."""
        return np.bincount(self.doc, minlength=self.docs.size).astype(float)

    def shifted(self, shifts: Sequence[float]) -> "Pool":
        """The pool with contrast k's deltas moved to mean ``shifts[k]`` (TOST at its bounds)."""
        return Pool(self.names, self.docs, self.doc, self.deltas + np.asarray(shifts, float), self.means, self.base)


def pool_from_scores(scores: pd.DataFrame, queries: pd.DataFrame, contrasts: Mapping[str, tuple[str, str]],
                     cell: tuple[str, str, str], corpus: str) -> Pool:
    """The :class:`Pool` of ``contrasts`` (name -> (A, B)) in one ``cell`` (metric, embedder, reranker) of
    ``corpus``: the queries scored under both conditions of every contrast. A contrast whose conditions are absent,
    or no query paired in all of them, raise ValueError naming them."""
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    block = wide.xs(tuple(cell), level=["metric", "embedder", "reranker"])
    keep = pd.Series(True, index=block.index)
    for name, (a, b) in contrasts.items():
        both, note = pair(block, a, b)
        if both is None:
            raise ValueError(f"calibration: contrast {name} ({a} − {b}) in cell {'|'.join(cell)}: {note}")
        keep &= block.index.isin(both.index)
    rows = block[keep.to_numpy()]
    if rows.empty:
        raise ValueError(f"calibration: no query of cell {'|'.join(cell)} is paired in every contrast "
                         f"{list(contrasts)}")
    deltas = np.column_stack([rows[a].to_numpy(float) - rows[b].to_numpy(float) for a, b in contrasts.values()])
    base = np.column_stack([rows[b].to_numpy(float) for _, b in contrasts.values()])
    return Pool.of(deltas, rows["doc_id"].to_numpy(), list(contrasts), base)


def draw_studies(pool: Pool, g: int, n_studies: int, rng: np.random.Generator, *,
                 correlated: bool) -> tuple[np.ndarray, np.ndarray]:
    """``n_studies`` studies of ``g`` documents drawn with replacement from ``pool``: per-document sums and counts,
    each ``(n_studies, g, m)``; correlated contrasts share one draw of documents, independent ones draw their own."""
    sums, counts = pool.sums, pool.counts
    m = sums.shape[1]
    if correlated:
        idx = rng.integers(0, sums.shape[0], size=(n_studies, g))
        return sums[idx], np.repeat(counts[idx][:, :, None], m, axis=2)
    idx = rng.integers(0, sums.shape[0], size=(n_studies, g, m))
    return np.take_along_axis(sums[idx], np.arange(m)[None, None, :, None], axis=3)[..., 0], counts[idx]


# ---------------------------------------------------------------------------------------------------------------
# The procedures, on a block of studies: (s, G, m) sums and counts in, (s, m) p-values (and covers) out
# ---------------------------------------------------------------------------------------------------------------

def holm_rows(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values of each row of ``p`` (a family per row; :func:`chunkstudy.significance.holm`)."""
    p = np.asarray(p, dtype=float)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    inflated = (m - np.arange(m)) * np.take_along_axis(p, order, axis=-1)
    adjusted = np.minimum(1.0, np.maximum.accumulate(inflated, axis=-1))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def _flat(x: np.ndarray) -> np.ndarray:
    """``(s, G, m)`` -> ``(G, s·m)``: one column per study and contrast."""
    s, g, m = x.shape
    return x.transpose(1, 0, 2).reshape(g, s * m)


def percentile_block(sums: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator, alpha: float,
                     bound: float = 0.0) -> dict[str, np.ndarray]:
    """The paper's percentile bootstrap of a block of studies: ``p`` (two-sided, of δ = 0, the study's
    :data:`~chunkstudy.significance.P_RULE`), ``covers`` (its (1 − alpha) percentile CI holds 0), and at
    ``bound`` > 0 the TOST p (``p_tost``: the larger one-sided p at ±bound, counted as
    :func:`chunkstudy.stats.equivalence.tost` counts it). Each ``(s, m)``."""
    s, g, m = sums.shape
    idx = rng.integers(0, g, size=(n_boot, g))
    w = np.bincount((idx + (np.arange(n_boot) * g)[:, None]).ravel(), minlength=n_boot * g).reshape(n_boot, g)
    r, n = w @ _flat(sums), w @ _flat(counts)
    le, ge = np.sum(r <= 0.0, axis=0), np.sum(r >= 0.0, axis=0)
    p = np.asarray(mc_p_two_sided(le, ge, n_boot))
    mean = r / n
    lo, hi = np.percentile(mean, [100 * alpha / 2, 100 * (1 - alpha / 2)], axis=0)
    out = {"p": p.reshape(s, m), "covers": ((lo <= 0.0) & (hi >= 0.0)).reshape(s, m)}
    if bound > 0:
        p_lower = (1.0 + np.sum(mean <= -bound, axis=0)) / (1.0 + n_boot)
        p_upper = (1.0 + np.sum(mean >= bound, axis=0)) / (1.0 + n_boot)
        out["p_tost"] = np.maximum(p_lower, p_upper).reshape(s, m)
    return out


def _wild_sums(sums: np.ndarray, counts: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per replicate the seven weighted sums of :class:`~chunkstudy.stats.calibrated.WildT`, for every column:
    ``(7, B, s·m)``."""
    s_, n_ = _flat(sums), _flat(counts)
    k = s_.shape[1]
    first = v @ np.hstack([s_, n_, n_ * s_, n_ * n_])
    squares = np.hstack([s_ * s_, n_ * s_, n_ * n_])
    if np.all(np.abs(v) == 1.0):  # Rademacher: v² = 1, so the second sums are the plain ones, in every replicate
        second = np.broadcast_to(squares.sum(axis=0), (v.shape[0], squares.shape[1]))
    else:
        second = (v * v) @ squares
    return np.concatenate([first.reshape(-1, 4, k), second.reshape(-1, 3, k)], axis=1).transpose(1, 0, 2)


def _wild_t(r: np.ndarray, sums: np.ndarray, counts: np.ndarray, beta0: float) -> tuple[np.ndarray, np.ndarray]:
    """``(t*, t)`` at ``β0`` for every column: ``(B, s·m)`` bootstrap statistics and ``(s·m,)`` observed CR1 t."""
    s_, n_ = _flat(sums), _flat(counts)
    g = s_.shape[0]
    total = n_.sum(axis=0)
    a = r[0] - beta0 * r[1]
    c = r[2] - beta0 * r[3]
    w = r[4] - 2 * beta0 * r[5] + beta0 ** 2 * r[6]
    shift = a / total
    q = calibrated._spread(w, 2 * shift * c, shift ** 2 * np.sum(n_ * n_, axis=0))
    est = s_.sum(axis=0) / total
    se = np.sqrt(g / (g - 1) * np.sum((s_ - n_ * est) ** 2, axis=0)) / total
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / np.sqrt(g / (g - 1) * q), np.where(se > 0, (est - beta0) / se, 0.0)


def wild_block(sums: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator, kind: str,
               bound: float = 0.0) -> dict[str, np.ndarray]:
    """The wild cluster bootstrap-t (null imposed) of a block of studies with ``kind`` weights, enumerated where
    there are at most ``n_boot`` vectors (:func:`chunkstudy.stats.calibrated.weights`): ``p`` (symmetric, of δ = 0),
    ``p_et`` (equal-tailed: twice the smaller one-sided p) and at ``bound`` > 0 ``p_tost`` (the larger of the
    one-sided p-values of H0: δ ≤ −bound and H0: δ ≥ +bound). Each ``(s, m)``."""
    s, g, m = sums.shape
    v, enumerated = calibrated.weights(g, n_boot, int(rng.integers(2 ** 31)), kind)
    b = v.shape[0]

    def share(hits: np.ndarray) -> np.ndarray:
        k = hits.sum(axis=0)
        return (k / b if enumerated else (1.0 + k) / (1.0 + b)).reshape(s, m)

    r = _wild_sums(sums, counts, v)
    ts, t = _wild_t(r, sums, counts, 0.0)
    tie = np.abs(t) * calibrated._TIE
    out = {"p": np.where((t == 0).reshape(s, m), 1.0, np.minimum(1.0, share(np.abs(ts) >= np.abs(t) - tie))),
           "p_et": np.minimum(1.0, 2 * np.minimum(share(ts >= t - tie), share(ts <= t + tie)))}
    if bound > 0:
        ts_lo, t_lo = _wild_t(r, sums, counts, -bound)
        ts_hi, t_hi = _wild_t(r, sums, counts, bound)
        out["p_tost"] = np.maximum(share(ts_lo >= t_lo - np.abs(t_lo) * calibrated._TIE),
                                   share(ts_hi <= t_hi + np.abs(t_hi) * calibrated._TIE))
    return out


def t_block(sums: np.ndarray, counts: np.ndarray, kind: str, bound: float = 0.0) -> dict[str, np.ndarray]:
    """The CR2 (Bell–McCaffrey df) or CR1 (G − 1 df) t test of a block of studies (:mod:`.calibrated`): ``p`` of
    δ = 0 and at ``bound`` > 0 ``p_tost``. Each ``(s, m)``."""
    g = sums.shape[1]
    total = counts.sum(axis=1)
    est = sums.sum(axis=1) / total
    resid2 = (sums - counts * est[:, None, :]) ** 2
    if kind == "cr2":
        se = np.sqrt(np.sum(resid2 / (1.0 - counts / total[:, None, :]), axis=1)) / total
        df = np.apply_along_axis(calibrated.bm_df, 1, counts)
    else:
        se = np.sqrt(g / (g - 1) * np.sum(resid2, axis=1)) / total
        df = np.full_like(se, g - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, est / se, 0.0)
        out = {"p": np.minimum(1.0, 2 * sps.t.sf(np.abs(t), df))}
        if bound > 0:
            out["p_tost"] = np.maximum(sps.t.sf((est + bound) / se, df), sps.t.cdf((est - bound) / se, df))
    return out


def run_block(procedure: str, sums: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator,
              alpha: float, bound: float = 0.0) -> dict[str, np.ndarray]:
    """One of :data:`PROCEDURES` on a block of studies: ``p`` (and ``covers``, ``p_tost`` where it has them).
    ``wild`` takes the study's weights for the block's G (:func:`~chunkstudy.stats.calibrated.default_weights`),
    ``wild-et`` the same with the equal-tailed p."""
    g = sums.shape[1]
    if procedure == "percentile":
        return percentile_block(sums, counts, n_boot, rng, alpha, bound)
    if procedure.startswith("wild"):
        kind = procedure.removeprefix("wild-") if procedure in ("wild-rademacher", "wild-webb") \
            else calibrated.default_weights(g)
        out = wild_block(sums, counts, n_boot, rng, kind, bound)
        return {**out, "p": out["p_et"]} if procedure == "wild-et" else out
    if procedure in ("cr2", "cr1"):
        return t_block(sums, counts, procedure, bound)
    raise ValueError(f"calibration: unknown procedure {procedure!r}; known: {list(PROCEDURES)}")


# ---------------------------------------------------------------------------------------------------------------
# Rates
# ---------------------------------------------------------------------------------------------------------------

#: The rule that reads the calibration table: a test holds its size at G documents when, in every family of the
#: table (every pool, m = 4 and 7, correlated and independent contrasts), its per-contrast and its family-wise
#: false-positive rates are at most alpha + 2 Monte Carlo SE. Holm is conservative under positively correlated
#: contrasts, so a family-wise rate below alpha is no fault; a rate below alpha − 2 SE is reported, not penalised.
IN_BOUNDS_RULE = ("per-contrast and family-wise false-positive rates at most alpha + 2 Monte Carlo SE in every family "
                  "of the table")


def in_bounds(rate: float, se: float, alpha: float) -> bool:
    """:data:`IN_BOUNDS_RULE` for one measured rate."""
    return bool(rate <= alpha + 2 * se)


def mc_se(rate: float, n: int) -> float:
    """The Monte Carlo standard error of a rate measured over ``n`` studies."""
    return math.sqrt(max(rate * (1 - rate), 0.0) / n) if n else math.nan


def rates(pool: Pool, g: int, procedure: str, *, n_sims: int, n_boot: int, seed: int, alpha: float,
          correlated: bool = True, bound: float = 0.0) -> dict[str, Any]:
    """Measure ``procedure`` in ``n_sims`` null studies of ``g`` documents from ``pool`` (module docstring), drawn
    from ``numpy.random.default_rng(seed)``: ``per_contrast`` (unadjusted p < alpha), ``familywise`` (Holm rejects
    any of the m), ``coverage`` (the (1 − alpha) CI holds 0; the percentile's counted, the others' ``1 −
    per_contrast``), and at ``bound`` > 0 — the pool then shifted to ±bound, alternating over the contrasts —
    ``tost_familywise`` (Holm-adjusted TOST p < alpha for any contrast: a false "equivalent"); each with its Monte
    Carlo SE (``*_se``: the standard deviation of the per-study values over √n_sims; for a 0/1 rate that is the
    binomial SE) and ``n_sims``; and per contrast ``each`` (its own rate, unadjusted) with ``each_se``."""
    with threadpool_limits(limits=1, user_api="blas"):  # small products: threads only contend (module docstring)
        return _rates(pool, g, procedure, n_sims=n_sims, n_boot=n_boot, seed=seed, alpha=alpha,
                      correlated=correlated, bound=bound)


def _rates(pool: Pool, g: int, procedure: str, *, n_sims: int, n_boot: int, seed: int, alpha: float,
           correlated: bool, bound: float) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    m = len(pool.names)
    if bound > 0:
        pool = pool.shifted([bound if k % 2 == 0 else -bound for k in range(m)])
    per_study: dict[str, list[np.ndarray]] = {"per_contrast": [], "familywise": [], "coverage": [],
                                              "each": [], "tost_familywise": []}
    for start in range(0, n_sims, _STUDIES_PER_BLOCK):
        s = min(_STUDIES_PER_BLOCK, n_sims - start)
        sums, counts = draw_studies(pool, g, s, rng, correlated=correlated)
        out = run_block(procedure, sums, counts, n_boot, rng, alpha, bound)
        if bound > 0:
            per_study["tost_familywise"].append(np.any(holm_rows(out["p_tost"]) < alpha, axis=1))
            continue
        rejected = out["p"] < alpha
        per_study["each"].append(rejected)
        per_study["per_contrast"].append(rejected.mean(axis=1))
        per_study["familywise"].append(np.any(holm_rows(out["p"]) < alpha, axis=1))
        per_study["coverage"].append((out["covers"] if "covers" in out else ~rejected).mean(axis=1))
    res: dict[str, Any] = {"n_sims": n_sims}
    for key, parts in per_study.items():
        if parts and key != "each":
            x = np.concatenate(parts).astype(float)
            res[key], res[f"{key}_se"] = float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 \
                else math.nan
    if per_study["each"]:
        each = np.concatenate(per_study["each"]).mean(axis=0)
        res["each"] = each
        res["each_se"] = np.sqrt(each * (1 - each) / n_sims)
    return res


def mixed_coverage(pool: Pool, g: int, *, n_sims: int, seed: int, alpha: float,
                   preregistered: bool = False) -> dict[str, Any]:
    """How often the correctly specified secondary model's ``(1 − alpha)`` Wald CI
    (:func:`chunkstudy.stats.contrasts.fit_paired_mixedlm`, the paired deltas with a random intercept per document)
    holds the true 0, in ``n_sims`` null studies of ``g`` documents drawn from ``pool`` (each contrast fitted on the
    study's queries; a document drawn twice is two groups): ``coverage`` over studies and contrasts with its Monte
    Carlo SE, per contrast ``each`` and ``each_se``, and ``n_fits`` (a fit that fails — no spread at all — is left
    out). With ``preregistered``, the pre-registered model instead (:func:`chunkstudy.stats.contrasts.fit_mixedlm`:
    the scores ``B`` and ``B + δ'`` with a random intercept per document; statsmodels, about 100 times slower; the
    pool must hold ``base``)."""
    from .contrasts import fit_mixedlm, fit_paired_mixedlm

    base = pool.base
    if preregistered and base is None:
        raise ValueError("mixed_coverage: the pre-registered model needs the pool's B scores (Pool.base)")

    def fit(rows: np.ndarray, groups: np.ndarray, k: int) -> dict:
        if base is None or not preregistered:
            return fit_paired_mixedlm(pool.deltas[rows, k], groups, alpha=alpha)
        b = base[rows, k]
        return fit_mixedlm(np.r_[b + pool.deltas[rows, k], b], np.repeat([1.0, 0.0], rows.size),
                           np.r_[groups, groups], alpha=alpha)

    rng = np.random.default_rng(seed)
    order = np.argsort(pool.doc, kind="stable")
    starts = np.concatenate([[0], np.cumsum(pool.counts.astype(int))])
    m = len(pool.names)
    covered, fits = np.zeros(m), np.zeros(m)
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(n_sims):
            drawn = rng.integers(0, pool.docs.size, size=g)
            rows = np.concatenate([order[starts[d]:starts[d + 1]] for d in drawn])
            groups = np.repeat(np.arange(g), pool.counts[drawn].astype(int))
            for k in range(m):
                try:
                    got = fit(rows, groups, k)
                except (ValueError, np.linalg.LinAlgError):
                    continue
                if not np.isfinite(got["ci_low"]):
                    continue
                covered[k] += got["ci_low"] <= 0.0 <= got["ci_high"]
                fits[k] += 1
    each = np.divide(covered, fits, out=np.full(m, math.nan), where=fits > 0)
    cov = float(covered.sum() / fits.sum()) if fits.sum() else math.nan
    return {"coverage": cov, "coverage_se": mc_se(cov, n_sims), "each": each,
            "each_se": np.array([mc_se(float(e), int(f)) for e, f in zip(each, fits)]), "n_sims": n_sims,
            "n_fits": int(fits.sum())}
