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
verdict is decided within its family as the study's Holm decision is (:class:`TostVerdict`): Holm's step-down
adjustment of the family's ``p_tost`` (``p_tost_holm``) and of its ``p_met`` (``p_met_holm``), and

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
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from ..params import StatsParams
from ..significance import BootstrapTest, Tested, Verdict, holm, percentile_ci
from . import decision
from .verdict_protocols import Formatting

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
    resamples. In a family, :class:`TostVerdict` decides on the Holm-adjusted p-values instead. NaN or no
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


#: The columns a TOST fills in 07's contrast tables (:class:`TostVerdict`), in order.
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


#: The sentence the report puts beside Holm's decision wherever the TOST columns are shown.
TOST_SENTENCE = ("Holm asks whether a contrast differs from zero; TOST asks whether it lies within \u00b1sesoi, the "
                 "smallest effect of interest declared before the run; \"inconclusive\" means the data cannot tell.")


def bounds(stats_params: Any) -> dict[str, float]:
    """The declared equivalence bounds by metric (:attr:`chunkstudy.params.StatsParams.equivalence_bounds`; a
    record without them, none)."""
    return dict(getattr(stats_params, "equivalence_bounds", {}) or {})


def no_bound_note(stats_params: Any, metric: str) -> str:
    """The note of a contrast whose metric has no declared equivalence bound: why its TOST columns are blank."""
    return (f"TOST blank: no smallest effect of interest declared for {metric} (stats.sesoi is "
            f"{stats_params.primary_metric}'s; other metrics need stats.sesoi_by_metric)")


@dataclass(frozen=True)
class TostVerdict:
    """The equivalence decision beside Holm's, a :class:`chunkstudy.stats.verdict_protocols.RegisteredVerdict`: over a family of
    contrasts, :func:`family_columns` at ``±sesoi`` and the test's ``alpha``, by the test that decides the family
    under ``decision`` (``stats.decision``): the replicates the bootstrap drew for each contrast
    (``Tested.replicates``), or the calibrated test on the per-document sums it saw (``Tested.sums``,
    ``Tested.counts``), with the floors (``Tested.inference``), adjusted within the family by
    the test's own Holm (:meth:`~chunkstudy.significance.BootstrapTest.adjust`), so the chance of any false
    "equivalent" (or "not equivalent") in the family stays at most alpha. ``sesoi`` None: the family's metric has
    no declared bound, and every row is blank. Columns :data:`TOST_COLUMNS`.

    What it declares beyond the decision: a run has it when a bound is declared for any metric (``stats.sesoi``,
    ``stats.sesoi_by_metric``; :meth:`for_cell`); Table 1 and the user's table print its 90% CI, Holm-adjusted
    TOST p and verdict (:meth:`cells`), the bound and each contrast's reading (:meth:`notes`, :func:`reading`);
    the goldens pin the verdict, the CI and both adjusted p-values (section ``tost``); each manifest records the
    bounds (``equivalence_declared``), so 08 says whether they were declared before the run."""

    sesoi: float | None
    decision: str = "percentile"
    name: ClassVar[str] = "tost"
    columns: ClassVar[tuple[str, ...]] = TOST_COLUMNS
    sentence: ClassVar[str] = TOST_SENTENCE
    record_name: ClassVar[str] = "equivalence_declared"
    golden_section: ClassVar[str] = "tost"

    def __post_init__(self) -> None:
        if self.sesoi is not None and not (np.isfinite(self.sesoi) and self.sesoi > 0):
            raise ValueError(f"TostVerdict: sesoi must be a positive number (metric units), got {self.sesoi}")

    # its statistic (VerdictStatistic): 07, the manifests, the goldens ----------------------------------------------
    def decide(self, test: BootstrapTest, family: Sequence[Tested]) -> list[dict[str, Any]]:
        """The family's TOST by the test that decides it (:func:`chunkstudy.stats.decision.rule` under
        ``decision``): the percentile bootstrap's replicates, or the calibrated test at ±sesoi."""
        calibrated = None
        if decision.rule_of(self.decision, family) == decision.CALIBRATED:
            calibrated = [decision.calibrated_test(t, test.n_boot, test.seed) for t in family]
        return family_columns([t.replicates for t in family], [bool(t.inference) for t in family], self.sesoi,
                              float(test.alpha), test.adjust, calibrated)

    def for_cell(self, stats_params: StatsParams, metric: str) -> tuple[Verdict, str] | None:
        """TOST at ``metric``'s bound (``stats.sesoi`` for the primary metric, ``stats.sesoi_by_metric`` for
        others); blank with a note (:func:`no_bound_note`) where that metric has none; None when no metric has
        one (the run writes no TOST column)."""
        declared = bounds(stats_params)
        if not declared:
            return None
        sesoi = declared.get(metric)
        return (TostVerdict(None if sesoi is None else float(sesoi), str(getattr(stats_params, "decision", "auto"))),
                no_bound_note(stats_params, metric) if sesoi is None else "")

    def carried(self, table: pd.DataFrame | None) -> bool:
        """Whether 07's contrast table carries the TOST columns (a bound was declared)."""
        return table is not None and "equivalence" in table.columns

    def record(self, stats_params: StatsParams) -> dict[str, Any] | None:
        """The bounds as a stage saw them (``sesoi``, ``alpha``, the primary ``metric`` and every metric's
        ``bounds``); None when none is declared."""
        declared = bounds(stats_params)
        if not declared:
            return None
        sesoi = stats_params.sesoi
        return {"sesoi": None if sesoi is None else float(sesoi), "alpha": float(stats_params.alpha),
                "metric": stats_params.primary_metric, "bounds": declared}

    def golden(self, row: Any) -> dict[str, Any]:
        return {"equivalence": str(row.equivalence), "tost_ci_low": float(row.tost_ci_low),
                "tost_ci_high": float(row.tost_ci_high), "p_tost_holm": float(row.p_tost_holm),
                "p_met_holm": float(row.p_met_holm)}

    def golden_user(self, row: Any) -> dict[str, Any]:
        return {"equivalence": str(row.equivalence)}

    # how 08 prints it (VerdictRendering) ---------------------------------------------------------------------------
    def cells(self, table: pd.DataFrame, ok: Sequence[bool], fmt: Formatting) -> dict[str, list[str]]:
        """The TOST columns of a printed contrast table (07's ``tost_ci_low, tost_ci_high, p_tost_holm,
        equivalence``): the unadjusted 90% CI (``1 − 2·alpha``), the Holm-adjusted TOST p and the verdict (decided
        on the family's Holm-adjusted p-values); ``fmt.DASH`` where the row supports no inference (``ok`` False)
        or 07 gave no verdict."""
        d = table
        ci, p, verdict = [], [], []
        n_boot = d["n_boot"] if "n_boot" in d else [None] * len(d)
        for lo, hi, ph, v, good, b in zip(d["tost_ci_low"], d["tost_ci_high"], d["p_tost_holm"], d["equivalence"],
                                          ok, n_boot):
            shown = bool(good) and isinstance(v, str) and v != ""
            ci.append(fmt.fmt_ci(lo, hi) if shown else fmt.DASH)
            p.append(fmt.fmt_p(ph, b) if shown else fmt.DASH)
            verdict.append(v if shown else fmt.DASH)
        return {"TOST 90% CI": ci, "TOST Holm p": p, "TOST": verdict}

    def notes(self, table: pd.DataFrame, fmt: Formatting) -> tuple[str, ...]:
        """The note on the TOST columns: the bound, how the verdict holds the family's error,
        :data:`TOST_SENTENCE`, and each contrast's reading (:meth:`readings`)."""
        d = table
        s = d["sesoi"].dropna()
        bound = fmt.fmt_num(float(s.iat[0]), 3) if len(s) else fmt.DASH
        metric = f" ({d['metric'].iat[0]})" if "metric" in d and len(d) else ""
        by = ("the calibrated test's one-sided p-values at \u00b1sesoi (the 90% CI by inverting it)"
              if "decided_by" in d and (d["decided_by"] == decision.CALIBRATED).any() else "the same bootstrap draws")
        return (f"TOST: two one-sided tests of |\u0394| < sesoi = {bound}{metric} from {by}, as the test that "
                "decided; the 90% CI is unadjusted. The verdicts hold the family's error at alpha as Holm does: "
                "equivalent = the Holm-adjusted TOST p (the larger one-sided p) < alpha; not equivalent = the "
                "Holm-adjusted p of the minimum-effect test (H0: |\u0394| \u2264 sesoi) < alpha; inconclusive = "
                "neither. " + TOST_SENTENCE,
                *self.readings(d))

    def readings(self, table: pd.DataFrame) -> tuple[str, ...]:
        """One sentence per contrast with a verdict (:func:`reading`, from the verdict and the contrast's Holm
        decision ``reject_holm``), e.g. "C4: no difference of interest: equivalent within ±sesoi."; none without
        a verdict."""
        d = table
        rejected = d["reject_holm"] if "reject_holm" in d else [False] * len(d)
        return tuple(f"{c}: {reading(v, bool(r))}." for c, v, r in zip(d["contrast"], d["equivalence"], rejected)
                     if isinstance(v, str) and v in VERDICTS)

    def registration(self, stats_params: StatsParams, recorded: Mapping[str, Any]) -> str:
        """Whether the equivalence bounds (``stats.sesoi``, ``stats.sesoi_by_metric``) were declared before the run:
        stage 01's manifest (written before any result existed) records the same bounds (a manifest written before
        per-metric bounds records the primary metric's alone)."""
        declared = bounds(stats_params)
        first = dict(recorded or {})
        earlier = first.get("bounds", {first.get("metric"): first.get("sesoi")} if first.get("sesoi") is not None
                            else {})
        said = ", ".join(f"{m} \u00b1{b:g}" for m, b in declared.items())
        if declared and earlier == declared:
            return f"The equivalence bounds ({said}) were declared before the run (stage 01's manifest records them)."
        return (f"The equivalence bounds ({said}) are not what stage 01's manifest records: they were set after the "
                "corpus was built, possibly after seeing results.")


#: TOST as registered (:data:`chunkstudy.stats.verdicts.VERDICTS`): each cell gets its own bound (:meth:`for_cell`).
TOST = TostVerdict(None)

