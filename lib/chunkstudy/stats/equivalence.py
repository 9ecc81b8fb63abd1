"""Equivalence tests from the clustered bootstrap's draws: TOST at a declared smallest effect size of interest, with
the family's error held by Holm (docs/beyond.md, "Equivalence"). Pure; never rounds.

A contrast's ``B`` replicates of the mean delta ``δ*`` (:func:`chunkstudy.significance.cluster_bootstrap`, the same
draws as its CI and p) and a bound ``Δ = sesoi > 0`` (in the metric's own units: cov-nDCG points on [0, 1]) give

* the ``(1 − 2α)`` percentile CI (:func:`chunkstudy.significance.percentile_ci` at ``2α``: the 90% CI at
  α = 0.05), the interval of the two one-sided tests (Schuirmann 1987, "A comparison of the two one-sided tests
  procedure and the power approach for assessing the equivalence of average bioavailability"), unadjusted: shown,
  never decided on;
* the two one-sided Monte-Carlo p-values of TOST, counted as the two-sided p is (Davison & Hinkley 1997, §4.2):
  ``p_lower = (1 + #{δ* ≤ −Δ}) / (1 + B)`` for H0: δ ≤ −Δ, ``p_upper = (1 + #{δ* ≥ +Δ}) / (1 + B)`` for H0: δ ≥ +Δ,
  and ``p_tost = max(p_lower, p_upper)`` (Lakens 2017, "Equivalence Tests: A Practical Primer for t Tests,
  Correlations, and Meta-Analyses": equivalence is shown when both one-sided tests reject; an intersection-union
  test, level α without halving);
* the p of the minimum-effect test of H0: |δ| ≤ Δ (Murphy & Myors 1999; Lakens, Scheel & Isager 2018, "different
  and not equivalent" in its strong form), two-sided as the study's test of δ = 0 is
  (:func:`chunkstudy.significance.mc_p_two_sided`), with the null widened to ±Δ:
  ``p_met = min(1, 2 · (1 + min(#{δ* ≤ +Δ}, #{δ* ≥ −Δ})) / (1 + B))``; at Δ = 0 it is the study's two-sided p.

**The family's error.** TOST keeps the error of *one* equivalence claim at α; a family of m contrasts each at the
bound makes at least one false "equivalent" with probability up to ``1 − (1 − α)^m`` (26% for six). So each
verdict is decided within its family as the study's Holm decision is (the verdict,
:class:`chunkstudy.stats.verdict.tost.TostVerdict`, calls :func:`family_columns`): Holm's step-down adjustment of
the family's ``p_tost`` (``p_tost_holm``) and of its ``p_met`` (``p_met_holm``), and

  - ``equivalent``: ``p_tost_holm < α`` (every effect the data allow is smaller than Δ);
  - ``not equivalent``: ``p_met_holm < α`` (an effect larger than Δ is shown);
  - ``inconclusive``: neither (the two cannot both hold for α < 0.5).

A family of one is the single test (:func:`tost`). ``p_tost < α`` implies that the 90% CI lies strictly inside
``(−Δ, +Δ)``, and ``p_met < α`` that the 95% CI lies strictly beyond one bound (for α ≤ 0.5; the ``+1`` of the
counts puts the percentile past the last replicate on the far side), not the converse: at the Monte Carlo margin an
interval can lie inside (or beyond) with its p a hair above α. The verdict follows the p-values.

Equivalence and a difference from zero are separate questions and can both hold: a Holm-rejected δ = 0 with an
equivalent verdict is a real but trivially small difference (:func:`reading`, which the report prints).

**By the test that decides.** Where the family is decided by the calibrated test (:mod:`.decision`: ``stats.decision``,
with ``auto`` every family of fewer than :data:`~chunkstudy.significance.PERCENTILE_FROM` documents), the same
counts come from it instead (:func:`tost_calibrated`): its one-sided p-values with the null imposed at ±Δ and its
``(1 − 2α)`` interval by inversion; Holm and the verdicts are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..significance import holm, percentile_ci

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
INCONCLUSIVE = "inconclusive"
#: Every verdict, in the order a table sorts them.
VERDICTS = (EQUIVALENT, INCONCLUSIVE, NOT_EQUIVALENT)


@dataclass(frozen=True)
class Equivalence:
    """A TOST result of one contrast: the bound ``sesoi`` and ``alpha`` it was run at, the ``(1 − 2·alpha)``
    percentile CI, the one-sided p-values of H0: δ ≤ −sesoi (``p_lower``) and H0: δ ≥ +sesoi (``p_upper``),
    ``p_tost`` = their maximum, the minimum-effect test's ``p_met`` (H0: |δ| ≤ sesoi), the verdict of the contrast
    as a family of one (:func:`verdict_of`) and the replicates counted (``n_boot``)."""

    sesoi: float
    alpha: float
    ci_low: float
    ci_high: float
    p_lower: float
    p_upper: float
    p_tost: float
    p_met: float
    verdict: str
    n_boot: int


def verdict_of(p_tost: float, p_met: float, alpha: float) -> str:
    """The verdict from the (family-adjusted) p-values (module docstring): ``equivalent`` when ``p_tost < alpha``,
    ``not equivalent`` when ``p_met < alpha``, else ``inconclusive`` (the rule of
    :meth:`chunkstudy.significance.BootstrapTest.reject`: below alpha, a NaN never rejects)."""
    if p_tost < alpha:
        return EQUIVALENT
    if p_met < alpha:
        return NOT_EQUIVALENT
    return INCONCLUSIVE


def tost(replicates: np.ndarray, sesoi: float, *, alpha: float) -> Equivalence:
    """TOST of the mean delta from its bootstrap ``replicates`` at bounds ``±sesoi`` (metric units, > 0) and level
    ``alpha`` (0 < alpha < 0.5; 0.05 gives the 90% CI), one contrast on its own:

        CI = percentile_ci(δ*, 2·alpha)
        p_lower = (1 + #{δ* ≤ −sesoi}) / (1 + B),  p_upper = (1 + #{δ* ≥ +sesoi}) / (1 + B)
        p_tost = max(p_lower, p_upper)
        p_met = min(1, 2·(1 + min(#{δ* ≤ +sesoi}, #{δ* ≥ −sesoi})) / (1 + B))
        verdict = verdict_of(p_tost, p_met, alpha)

    ``replicates`` are the contrast's own draws (``Bootstrap.replicates``), so its CI, p and TOST rest on the same
    resamples. In a family, :func:`family_columns` decides on the Holm-adjusted p-values instead. NaN or no
    replicates raise ValueError."""
    r = np.asarray(replicates, dtype=float).ravel()
    if r.size == 0:
        raise ValueError("tost: no replicates")
    if not np.isfinite(r).all():
        raise ValueError("tost: replicates hold NaN or inf")
    if not 0 < alpha < 0.5:
        raise ValueError(f"tost: alpha must lie in (0, 0.5), got {alpha}")
    if not (np.isfinite(sesoi) and sesoi > 0):
        raise ValueError(f"tost: sesoi must be a positive number (metric units), got {sesoi}")
    lo, hi = percentile_ci(r, 2 * alpha)
    b = r.size
    p_lower = (1.0 + float(np.sum(r <= -sesoi))) / (1.0 + b)
    p_upper = (1.0 + float(np.sum(r >= sesoi))) / (1.0 + b)
    p_met = min(1.0, 2.0 * (1.0 + min(float(np.sum(r <= sesoi)), float(np.sum(r >= -sesoi)))) / (1.0 + b))
    p_tost = max(p_lower, p_upper)
    return Equivalence(float(sesoi), float(alpha), lo, hi, p_lower, p_upper, p_tost, p_met,
                       verdict_of(p_tost, p_met, alpha), int(b))


def tost_calibrated(test: Any, sesoi: float, *, alpha: float) -> Equivalence:
    """TOST of one contrast by the calibrated test (:func:`chunkstudy.stats.decision.calibrated_test`: any object
    with ``p_greater``, ``p_less`` and ``ci`` at a null β0) at bounds ``±sesoi``, counted as :func:`tost` counts the
    bootstrap's: ``p_lower`` = its one-sided p of H0: δ ≤ −sesoi, ``p_upper`` of H0: δ ≥ +sesoi, ``p_tost`` their
    maximum, ``p_met`` = ``min(1, 2·min(p of H0: δ ≤ +sesoi, p of H0: δ ≥ −sesoi))`` (at sesoi 0 its two-sided p
    of δ = 0, doubled from the one-sided ones) and the ``(1 − 2·alpha)`` CI by inverting the test."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"tost_calibrated: alpha must lie in (0, 0.5), got {alpha}")
    if not (np.isfinite(sesoi) and sesoi > 0):
        raise ValueError(f"tost_calibrated: sesoi must be a positive number (metric units), got {sesoi}")
    lo, hi = test.ci(2 * alpha)
    p_lower, p_upper = float(test.p_greater(-sesoi)), float(test.p_less(sesoi))
    p_met = min(1.0, 2.0 * min(float(test.p_greater(sesoi)), float(test.p_less(-sesoi))))
    p_tost = max(p_lower, p_upper)
    return Equivalence(float(sesoi), float(alpha), float(lo), float(hi), p_lower, p_upper, p_tost, p_met,
                       verdict_of(p_tost, p_met, alpha), int(getattr(test, "n_boot", 0)))


def reading(outcome: str, different: bool) -> str:
    """One sentence for the report, from the TOST verdict and whether the contrast's two-sided test rejected
    δ = 0 (``different``: the Holm decision for a family's contrast):

    * equivalent and different: "a difference smaller than the smallest effect of interest: real, but too small to
      matter at ±sesoi";
    * equivalent, not different: "no difference of interest: equivalent within ±sesoi";
    * not equivalent (an effect beyond ±sesoi is shown; the Holm-adjusted test of δ = 0 may still not reject): "a
      difference larger than the smallest effect of interest";
    * inconclusive and different: "a difference, but not shown to exceed or to stay within ±sesoi";
    * inconclusive, not different: "not shown to differ, and not shown equivalent: the data cannot tell"."""
    if outcome == EQUIVALENT:
        return ("a difference smaller than the smallest effect of interest: real, but too small to matter at ±sesoi"
                if different else "no difference of interest: equivalent within ±sesoi")
    if outcome == NOT_EQUIVALENT:
        return "a difference larger than the smallest effect of interest"
    if outcome == INCONCLUSIVE:
        return ("a difference, but not shown to exceed or to stay within ±sesoi" if different
                else "not shown to differ, and not shown equivalent: the data cannot tell")
    raise ValueError(f"reading: unknown verdict {outcome!r}; verdicts: {list(VERDICTS)}")


#: The columns a TOST fills in 07's contrast tables (:class:`chunkstudy.stats.verdict.tost.TostVerdict`), in order.
TOST_COLUMNS = ("sesoi", "tost_ci_low", "tost_ci_high", "p_tost", "p_tost_holm", "p_met", "p_met_holm",
                "equivalence")


def _blank(sesoi: float | None) -> dict:
    nan = float("nan")
    return {"sesoi": nan if sesoi is None else float(sesoi), "tost_ci_low": nan, "tost_ci_high": nan, "p_tost": nan,
            "p_tost_holm": nan, "p_met": nan, "p_met_holm": nan, "equivalence": ""}


def family_columns(replicates: Sequence[np.ndarray], inference: Sequence[bool], sesoi: float | None, alpha: float,
                   adjust: Callable[[Sequence[float]], np.ndarray] = holm,
                   calibrated: Sequence[Any] | None = None) -> list[dict]:
    """The TOST columns (:data:`TOST_COLUMNS`) of one family of contrasts, in family order, from each contrast's
    bootstrap ``replicates`` (:func:`tost`) or, given ``calibrated`` (one calibrated test per contrast, None where
    there is none), from those (:func:`tost_calibrated`): the bound, the ``(1 − 2·alpha)`` CI, ``p_tost`` and
    ``p_met``, their Holm adjustments within the family (``adjust``, :func:`chunkstudy.significance.holm`) and the
    verdict (:func:`verdict_of` on the adjusted p-values).

    A contrast that supports no inference (``inference`` False: too few documents or resamples, one document, no
    paired query) gets NaN statistics and verdict ``""``, as the two-sided test prints no CI or p there; it still
    counts as a member of the family, ranked last (its p NaN: :func:`~chunkstudy.significance.holm`), so the family
    size stays as declared. ``sesoi`` None (no bound declared for the family's metric): every row blank."""
    if sesoi is None:
        return [_blank(None) for _ in replicates]
    rows: list[Equivalence | None] = []
    for i, (r, ok) in enumerate(zip(replicates, inference)):
        r = np.asarray(r, dtype=float).ravel()
        if calibrated is not None:
            one = tost_calibrated(calibrated[i], sesoi, alpha=alpha) if ok and calibrated[i] is not None else None
        else:
            one = tost(r, sesoi, alpha=alpha) if ok and r.size and np.isfinite(r).all() else None
        rows.append(one)
    nan = float("nan")
    adj_tost = adjust([e.p_tost if e is not None else nan for e in rows])
    adj_met = adjust([e.p_met if e is not None else nan for e in rows])
    out = []
    for e, at, am in zip(rows, adj_tost, adj_met):
        if e is None:
            out.append(_blank(sesoi))
            continue
        out.append({"sesoi": e.sesoi, "tost_ci_low": e.ci_low, "tost_ci_high": e.ci_high, "p_tost": e.p_tost,
                    "p_tost_holm": float(at), "p_met": e.p_met, "p_met_holm": float(am),
                    "equivalence": verdict_of(float(at), float(am), alpha)})
    return out
