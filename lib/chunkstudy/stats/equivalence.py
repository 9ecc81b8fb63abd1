"""Equivalence tests from the clustered bootstrap's draws: TOST at a declared smallest effect size of interest
(docs/beyond.md, "Equivalence"). Pure; never rounds.

A contrast's ``B`` replicates of the mean delta ``δ*`` (:func:`chunkstudy.significance.cluster_bootstrap`, the same
draws as its CI and p) and a bound ``Δ = sesoi > 0`` (in the metric's own units: cov-nDCG points on [0, 1]) give

* the ``(1 − 2α)`` percentile CI (:func:`chunkstudy.significance.percentile_ci` at ``2α``: the 90% CI at
  α = 0.05), the interval of the two one-sided tests (Schuirmann 1987, "A comparison of the two one-sided tests
  procedure and the power approach for assessing the equivalence of average bioavailability");
* the two one-sided Monte-Carlo p-values, counted as the two-sided p is (Davison & Hinkley 1997, §4.2):
  ``p_lower = (1 + #{δ* ≤ −Δ}) / (1 + B)`` for H0: δ ≤ −Δ, ``p_upper = (1 + #{δ* ≥ +Δ}) / (1 + B)`` for H0: δ ≥ +Δ,
  and ``p_tost = max(p_lower, p_upper)`` (Lakens 2017, "Equivalence Tests: A Practical Primer for t Tests,
  Correlations, and Meta-Analyses": equivalence is declared when both one-sided tests reject);
* a verdict read off that one interval against the bounds:

  - ``equivalent``: the CI lies inside ``(−Δ, +Δ)``;
  - ``not equivalent``: the CI lies wholly outside it, at or beyond one bound (``ci_low ≥ +Δ`` or
    ``ci_high ≤ −Δ``): the one-sided test of H0: δ ≤ +Δ (or δ ≥ −Δ) rejects at α, i.e. an effect larger than the
    smallest effect of interest is shown (a minimum-effect test, the mirror image of TOST's two tests; Lakens,
    Scheel & Isager 2018, "Equivalence Testing for Psychological Research: A Tutorial", outcome "different and
    not equivalent" taken in its strong form). A CI that merely reaches past a bound is *not* enough: it leaves
    effects inside the bounds compatible with the data;
  - ``inconclusive``: otherwise (the CI straddles a bound: neither equivalence nor a large effect is shown).

``p_tost ≤ α`` implies ``equivalent`` for α ≤ 0.5 (then at most ``α·(B − 1)`` replicates lie at or beyond either
bound, so both percentiles lie strictly inside), not the converse: at the Monte Carlo margin the CI can lie inside
with ``p_tost`` a little above α (its ``+1`` counts the observed sample). The verdict follows the CI.

Equivalence and a difference from zero are separate questions and can both hold: a 95% CI (the Holm test's)
that excludes 0 inside a 90% CI within ±Δ is a real but trivially small difference (:func:`reading`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Sequence

import numpy as np

from ..significance import BootstrapTest, Tested, Verdict, percentile_ci

EQUIVALENT = "equivalent"
NOT_EQUIVALENT = "not equivalent"
INCONCLUSIVE = "inconclusive"
#: Every verdict, in the order a table sorts them.
VERDICTS = (EQUIVALENT, INCONCLUSIVE, NOT_EQUIVALENT)


@dataclass(frozen=True)
class Equivalence:
    """A TOST result: the bound ``sesoi`` and ``alpha`` it was run at, the ``(1 − 2·alpha)`` percentile CI, the
    one-sided p-values of H0: δ ≤ −sesoi (``p_lower``) and H0: δ ≥ +sesoi (``p_upper``), ``p_tost`` = their
    maximum, the verdict (:data:`VERDICTS`) and the replicates counted (``n_boot``)."""

    sesoi: float
    alpha: float
    ci_low: float
    ci_high: float
    p_lower: float
    p_upper: float
    p_tost: float
    verdict: str
    n_boot: int


def verdict(ci_low: float, ci_high: float, sesoi: float) -> str:
    """The verdict of a ``(1 − 2α)`` CI ``[ci_low, ci_high]`` against ``±sesoi`` (module docstring):
    ``equivalent`` when ``−sesoi < ci_low`` and ``ci_high < +sesoi``; ``not equivalent`` when
    ``ci_low ≥ +sesoi`` or ``ci_high ≤ −sesoi``; ``inconclusive`` otherwise."""
    if not sesoi > 0:
        raise ValueError(f"equivalence: sesoi must be > 0, got {sesoi}")
    if not ci_low <= ci_high:
        raise ValueError(f"equivalence: CI [{ci_low}, {ci_high}] is not an interval")
    if -sesoi < ci_low and ci_high < sesoi:
        return EQUIVALENT
    if ci_low >= sesoi or ci_high <= -sesoi:
        return NOT_EQUIVALENT
    return INCONCLUSIVE


def tost(replicates: np.ndarray, sesoi: float, *, alpha: float) -> Equivalence:
    """TOST of the mean delta from its bootstrap ``replicates`` at bounds ``±sesoi`` (metric units, > 0) and level
    ``alpha`` (0 < alpha < 0.5; 0.05 gives the 90% CI):

        CI = percentile_ci(δ*, 2·alpha)
        p_lower = (1 + #{δ* ≤ −sesoi}) / (1 + B),  p_upper = (1 + #{δ* ≥ +sesoi}) / (1 + B)
        p_tost = max(p_lower, p_upper),  verdict = verdict(CI, sesoi)

    ``replicates`` are the contrast's own draws (``Bootstrap.replicates``), so its CI, p and TOST rest on the same
    resamples. NaN or no replicates raise ValueError."""
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
    return Equivalence(float(sesoi), float(alpha), lo, hi, p_lower, p_upper, max(p_lower, p_upper),
                       verdict(lo, hi, sesoi), int(b))


def reading(outcome: str, different: bool) -> str:
    """One sentence for the report, from the TOST verdict and whether the contrast's two-sided test rejected
    δ = 0 (``different``: the Holm decision for a family's contrast):

    * equivalent and different: "a difference smaller than the smallest effect of interest: real, but too small to
      matter at ±sesoi";
    * equivalent, not different: "no difference of interest: equivalent within ±sesoi";
    * not equivalent (then the CI excludes 0 as well; the Holm-adjusted test may still not reject): "a difference
      larger than the smallest effect of interest";
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


#: The columns a TOST fills in 07's contrast tables (:class:`TostVerdict`), in order.
TOST_COLUMNS = ("sesoi", "tost_ci_low", "tost_ci_high", "p_tost", "equivalence")


def tost_columns(replicates: np.ndarray, inference: bool, sesoi: float, alpha: float) -> dict:
    """One contrast's TOST columns (:data:`TOST_COLUMNS`) from its bootstrap ``replicates``: the bound, the
    ``(1 − 2·alpha)`` CI, ``p_tost`` and the verdict; where the contrast supports no inference (``inference``
    False: too few documents or resamples, one document, no paired query) the statistics are NaN and the verdict
    is ``""``, as the two-sided test prints no CI or p there."""
    r = np.asarray(replicates, dtype=float).ravel()
    if not inference or r.size == 0 or not np.isfinite(r).all():
        nan = float("nan")
        return {"sesoi": float(sesoi), "tost_ci_low": nan, "tost_ci_high": nan, "p_tost": nan, "equivalence": ""}
    e = tost(r, sesoi, alpha=alpha)
    return {"sesoi": e.sesoi, "tost_ci_low": e.ci_low, "tost_ci_high": e.ci_high, "p_tost": e.p_tost,
            "equivalence": e.verdict}


@dataclass(frozen=True)
class TostVerdict:
    """The equivalence decision beside Holm's, a :class:`chunkstudy.significance.Verdict`: per contrast of a
    family, :func:`tost_columns` at ``±sesoi`` and the test's ``alpha``, from the replicates the test drew for the
    contrast (``Tested.replicates``) and its floors (``Tested.inference``: at least ``stats.min_docs`` ≥ 2
    documents). Each
    contrast is decided on its own: TOST needs no multiplicity adjustment to keep the family's error at alpha for
    an equivalence claim (both one-sided tests must reject). Columns :data:`TOST_COLUMNS`."""

    sesoi: float
    name: ClassVar[str] = "tost"
    columns: ClassVar[tuple[str, ...]] = TOST_COLUMNS

    def __post_init__(self) -> None:
        if not (np.isfinite(self.sesoi) and self.sesoi > 0):
            raise ValueError(f"TostVerdict: sesoi must be a positive number (metric units), got {self.sesoi}")

    def decide(self, test: BootstrapTest, family: Sequence[Tested]) -> list[dict[str, Any]]:
        return [tost_columns(t.replicates, bool(t.inference), self.sesoi, float(test.alpha)) for t in family]


def with_tost(test: BootstrapTest, sesoi: float | None) -> BootstrapTest:
    """``test`` with :class:`TostVerdict` at ``±sesoi`` added to its verdicts (``stats.sesoi``; None: ``test``
    unchanged, so a run that declares no bound writes no TOST column)."""
    if sesoi is None:
        return test
    tost_verdict: Verdict = TostVerdict(float(sesoi))
    return replace(test, verdicts=(*test.verdicts, tost_verdict))
