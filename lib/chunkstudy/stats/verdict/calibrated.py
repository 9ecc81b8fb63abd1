"""The calibrated test beside the percentile bootstrap's, and which of the two decides: a verdict beside Holm's
(docs/design.md, "Calibrated at the sizes users bring"; docs/decisions/0800-calibrated-verdicts.md), registered by
this file (``VERDICT``, order 10: its columns come first among the verdicts').

Every family of 07 carries the calibrated p, Holm p and CI beside the percentile's (``p_cal``, ``p_holm_cal``,
``ci_low_cal``, ``ci_high_cal``, ``reject_holm_cal``, ``method_cal``), the rule declared (``decision``), the test
that decided (``decided_by``) and its decision (``significant``: ``reject_holm`` or ``reject_holm_cal``). The rule
and the test are :mod:`chunkstudy.stats.decision`'s; 08 prints them and decides nothing. Pure; never rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from ...params import StatsParams
from ...significance import HOLM, BootstrapTest, Tested, Verdict
from ..decision import CALIBRATED, calibrated_test, rule_of, why
from ..verdict_protocols import Formatting

#: The columns :class:`CalibratedVerdict` fills, in order.
CAL_COLUMNS = ("p_cal", "p_holm_cal", "ci_low_cal", "ci_high_cal", "reject_holm_cal", "method_cal", "decision",
               "decided_by", "significant")


@dataclass(frozen=True)
class CalibratedVerdict:
    """The calibrated test beside the percentile's and which one decides, a
    :class:`chunkstudy.stats.verdict_protocols.RegisteredVerdict` (module docstring): its statistic, then how 08
    prints it. ``decision``: the rule declared for the family (``stats.decision``; the user's family:
    ``contrasts.decision``, else ``stats.decision``)."""

    decision: str = "auto"
    name: ClassVar[str] = "calibrated"
    order: ClassVar[int] = 10
    columns: ClassVar[tuple[str, ...]] = CAL_COLUMNS
    record_name: ClassVar[str] = "decision_declared"
    golden_section: ClassVar[str] = "calibrated"
    sentence: ClassVar[str] = (
        "Beside the paper's percentile bootstrap, every contrast carries the small-sample-calibrated test (the wild "
        "cluster bootstrap-t with the null imposed, Holm over the same family); the starred Holm p is the test that "
        "decided.")

    # its statistic (VerdictStatistic): 07, the manifests, the goldens ----------------------------------------------
    def decide(self, test: BootstrapTest, family: Sequence[Tested]) -> list[dict[str, Any]]:
        by = rule_of(self.decision, family)
        tests = [calibrated_test(t, test.n_boot, test.seed) for t in family]
        p = [w.p(0.0) if w is not None else math.nan for w in tests]
        adjusted = test.adjust(p)
        percentile = HOLM.decide(test, family)
        rows = []
        for t, w, pc, ph, pct in zip(family, tests, p, adjusted, percentile):
            lo, hi = w.ci(float(test.alpha)) if w is not None else (math.nan, math.nan)
            reject = bool(test.reject(ph, t.inference))
            rows.append({"p_cal": float(pc), "p_holm_cal": float(ph), "ci_low_cal": lo, "ci_high_cal": hi,
                         "reject_holm_cal": reject, "method_cal": w.method if w is not None else "",
                         "decision": self.decision, "decided_by": by,
                         "significant": reject if by == CALIBRATED else bool(pct["reject_holm"])})
        return rows

    def for_cell(self, stats_params: StatsParams, metric: str) -> tuple[Verdict, str] | None:
        return CalibratedVerdict(str(stats_params.decision)), ""

    def carried(self, table: pd.DataFrame | None) -> bool:
        return table is not None and "p_holm_cal" in table.columns

    def record(self, stats_params: StatsParams) -> dict[str, Any] | None:
        return {"decision": str(stats_params.decision)}

    def golden(self, row: Any) -> dict[str, Any]:
        return {"p": float(row.p_cal), "p_holm": float(row.p_holm_cal), "ci_low": float(row.ci_low_cal),
                "ci_high": float(row.ci_high_cal), "decided_by": str(row.decided_by),
                "significant": bool(row.significant)}

    def golden_user(self, row: Any) -> dict[str, Any]:
        return {"p_holm_cal": float(row.p_holm_cal), "decided_by": str(row.decided_by)}

    # how 08 prints it (VerdictRendering) ---------------------------------------------------------------------------
    def cells(self, table: pd.DataFrame, ok: Sequence[bool], fmt: Formatting) -> dict[str, list[str]]:
        """The calibrated 95% CI, p and Holm p (starred where it decided and rejects) and the test that decided;
        ``fmt.DASH`` where the row supports no inference."""
        d = table
        n_boot = d["n_boot"] if "n_boot" in d else [None] * len(d)
        ci, p, holm, by = [], [], [], []
        for lo, hi, pc, ph, b, r, dec, good in zip(d["ci_low_cal"], d["ci_high_cal"], d["p_cal"], d["p_holm_cal"],
                                                   n_boot, d["reject_holm_cal"], d["decided_by"], ok):
            ci.append(fmt.fmt_ci(lo, hi) if good else fmt.DASH)
            p.append(fmt.fmt_p(pc, b) if good else fmt.DASH)
            holm.append(fmt.fmt_p(ph, b) + (" *" if r and dec == CALIBRATED else "") if good else fmt.DASH)
            by.append(str(dec))
        return {"Calibrated 95% CI": ci, "Calibrated p": p, "Calibrated Holm p": holm, "Decided by": by}

    def notes(self, table: pd.DataFrame, fmt: Formatting) -> tuple[str, ...]:
        """What the calibrated test is, why the deciding test decides, and each contrast where the two tests'
        Holm decisions differ."""
        d = table
        if not len(d):
            return ()
        method = next((m for m in d["method_cal"] if isinstance(m, str) and m), "the calibrated test")
        n_docs = int(np.nanmin(d["n_docs"].to_numpy(float))) if "n_docs" in d and len(d) else 0
        reason = why(str(d["decision"].iat[0]), str(d["decided_by"].iat[0]), n_docs)
        if "inference" in d and not d["inference"].astype(bool).any():
            reason = "Nothing is decided here (no row supports inference; see its note). " + reason.replace(
                " decides", " would decide", 1)
        out = [f"Calibrated: {method}; p two-sided (the share of bootstrap |t| at least the observed), 95% CI by "
               "inverting it, Holm across the same family.", reason]
        out += [disagreement(r, fmt) for r in d.itertuples() if bool(r.reject_holm) != bool(r.reject_holm_cal)
                and bool(getattr(r, "inference", True))]
        return tuple(out)

    def registration(self, stats_params: StatsParams, recorded: Mapping[str, Any]) -> str:
        declared = str(stats_params.decision)
        if not recorded:
            return (f"The rule (stats.decision: {declared}) is not in stage 01's manifest, which was written before "
                    "the rule was recorded.")
        if recorded.get("decision") == declared:
            return f"The rule (stats.decision: {declared}) was declared before the run (stage 01's manifest records it)."
        return (f"The rule (stats.decision: {declared}) is not what stage 01's manifest records "
                f"({recorded.get('decision')}): it was set after the corpus was built, possibly after seeing results.")


def disagreement(row: Any, fmt: Formatting) -> str:
    """The note on a contrast whose two tests' Holm decisions differ, naming the one that decided."""
    pct = "rejects" if bool(row.reject_holm) else "does not reject"
    cal = "rejects" if bool(row.reject_holm_cal) else "does not reject"
    return (f"{row.contrast}: the percentile bootstrap {pct} (Holm p {fmt.fmt_p(row.p_holm)}) where the calibrated "
            f"test {cal} (Holm p {fmt.fmt_p(row.p_holm_cal)}); the {row.decided_by} test decides.")


#: The verdict as registered (:data:`chunkstudy.stats.verdicts.VERDICTS`): each cell gets the run's rule.
VERDICT = CalibratedVerdict()
