"""The equivalence test beside Holm's decision: TOST at a declared smallest effect of interest, with the family's
error held by Holm (docs/beyond.md, "Equivalence"), a verdict registered by this file (``VERDICT``, order 20: its
columns follow the calibrated test's). The statistic is :mod:`chunkstudy.stats.equivalence`'s
(:func:`~chunkstudy.stats.equivalence.family_columns`, :func:`~chunkstudy.stats.equivalence.reading`); here is what
a run declares of it and how the report prints it. Pure; never rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from ...params import StatsParams
from ...significance import BootstrapTest, Tested, Verdict
from .. import decision
from ..equivalence import TOST_COLUMNS, family_columns, reading
from ..equivalence import VERDICTS as OUTCOMES  # what a row's verdict may say (not the registry's verdicts)
from ..verdict_protocols import Formatting

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
    """The equivalence decision beside Holm's, a :class:`chunkstudy.stats.verdict_protocols.RegisteredVerdict`: over
    a family of contrasts, :func:`~chunkstudy.stats.equivalence.family_columns` at ``±sesoi`` and the test's
    ``alpha``, by the test that decides the family under ``decision`` (``stats.decision``): the replicates the
    bootstrap drew for each contrast (``Tested.replicates``), or the calibrated test on the per-document sums it saw
    (``Tested.sums``, ``Tested.counts``), with the floors (``Tested.inference``), adjusted within the family by the
    test's own Holm (:meth:`~chunkstudy.significance.BootstrapTest.adjust`), so the chance of any false
    "equivalent" (or "not equivalent") in the family stays at most alpha. ``sesoi`` None: the family's metric has
    no declared bound, and every row is blank. Columns :data:`~chunkstudy.stats.equivalence.TOST_COLUMNS`.

    What it declares beyond the decision: a run has it when a bound is declared for any metric (``stats.sesoi``,
    ``stats.sesoi_by_metric``; :meth:`for_cell`); Table 1 and the user's table print its 90% CI, Holm-adjusted
    TOST p and verdict (:meth:`cells`), the bound and each contrast's reading (:meth:`notes`,
    :func:`~chunkstudy.stats.equivalence.reading`); the goldens pin the verdict, the CI and both adjusted p-values
    (section ``tost``); each manifest records the bounds (``equivalence_declared``), so 08 says whether they were
    declared before the run."""

    sesoi: float | None
    decision: str = "percentile"
    name: ClassVar[str] = "tost"
    order: ClassVar[int] = 20  # its place among the verdicts: after the calibrated test's (10)
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
        return (TostVerdict(None if sesoi is None else float(sesoi), str(stats_params.decision)),
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
        """One sentence per contrast with a verdict (:func:`~chunkstudy.stats.equivalence.reading`, from the verdict
        and the contrast's Holm decision ``reject_holm``), e.g. "C4: no difference of interest: equivalent within
        ±sesoi."; none without a verdict."""
        d = table
        rejected = d["reject_holm"] if "reject_holm" in d else [False] * len(d)
        return tuple(f"{c}: {reading(v, bool(r))}." for c, v, r in zip(d["contrast"], d["equivalence"], rejected)
                     if isinstance(v, str) and v in OUTCOMES)

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
VERDICT = TostVerdict(None)

