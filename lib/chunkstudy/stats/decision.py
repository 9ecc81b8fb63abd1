"""Who decides a family's significance: the paper's percentile cluster bootstrap or the small-sample-calibrated test
(:mod:`.calibrated`), and the calibrated test as a verdict beside Holm's (docs/design.md, "Calibrated at the sizes
users bring"; docs/decisions/0800-calibrated-verdicts.md).

**The rule** (``stats.decision`` for the confirmatory family and every cell's family of the same contrasts,
``contrasts.decision`` for the user's family; :func:`rule`): ``percentile`` — the paper's, pre-registered in its
parameter files; ``calibrated``; or ``auto``: the percentile rule where the calibration table measured it holding
its size at the family's number of documents (at least :data:`~chunkstudy.significance.PERCENTILE_FROM`), the
calibrated test below; nothing is significant below ``stats.min_docs`` (by default
:data:`~chunkstudy.significance.CALIBRATED_FROM`, where the calibrated test holds its size). The
family's number of documents is the fewest any of its contrasts rests on (:func:`family_docs`).

**The calibrated test** (:func:`calibrated_test`): the wild cluster bootstrap-t with the null imposed
(:class:`.calibrated.WildT`; Webb's weights below :data:`.calibrated.WEBB_BELOW` documents), with ``stats.n_boot``
weight vectors under ``stats.seed`` (every vector when there are at most that many): its symmetric p of δ = 0, its
``(1 − alpha)`` CI by test inversion, and Holm over the family. Chosen over CR2 with Bell–McCaffrey df and CR1
with G − 1 df by bench/bench_calibration.py (docs/design.md).

**The verdict** (:class:`CalibratedVerdict`, registered in :data:`chunkstudy.stats.verdicts.VERDICTS`): every
family of 07 carries the calibrated p, Holm p and CI beside the percentile's (``p_cal``, ``p_holm_cal``,
``ci_low_cal``, ``ci_high_cal``, ``reject_holm_cal``, ``method_cal``), the rule declared (``decision``), the
test that decided (``decided_by``) and its decision (``significant``: ``reject_holm`` or ``reject_holm_cal``).
08 prints them and decides nothing. Pure; never rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import pandas as pd

from ..params import StatsParams
from ..significance import HOLM, PERCENTILE_FROM, BootstrapTest, Tested, Verdict
from . import calibrated
from .verdict_protocols import Formatting

#: The rules ``stats.decision`` and ``contrasts.decision`` accept.
DECISIONS = ("auto", "percentile", "calibrated")
PERCENTILE = "percentile"
CALIBRATED = "calibrated"
def rule(decision: str, n_docs: int) -> str:
    """The test that decides a family of ``n_docs`` documents under the declared ``decision`` (module docstring)."""
    if decision == "auto":
        return PERCENTILE if n_docs >= PERCENTILE_FROM else CALIBRATED
    if decision in (PERCENTILE, CALIBRATED):
        return decision
    raise ValueError(f"decision: expected one of {list(DECISIONS)}, got {decision!r}")


def rule_of(decision: str, family: Sequence[Tested]) -> str:
    """:func:`rule` for a family of tested contrasts (its size read only under ``auto``: :func:`family_docs`)."""
    return rule(decision, family_docs(family) if decision == "auto" else 0)


def why(decision: str, decided_by: str, n_docs: int) -> str:
    """The report's one sentence on why ``decided_by`` decides a family of ``n_docs`` documents."""
    if decision != "auto":
        return (f"The {decided_by} test decides, as the parameter file declares (decision: {decision}).")
    if decided_by == CALIBRATED:
        return (f"The calibrated test decides: with {n_docs:,} documents, fewer than the {PERCENTILE_FROM:,} from "
                "which the percentile bootstrap holds its size in the calibration table, the percentile rule rejects "
                "a true null more often than alpha (decision: auto).")
    return (f"The percentile bootstrap decides: with {n_docs:,} documents it holds its size in the calibration table "
            f"(from {PERCENTILE_FROM:,}; decision: auto).")


def family_docs(family: Sequence[Tested]) -> int:
    """The fewest documents any contrast of the family rests on (contrasts over fewer than 2 left out; 0: none)."""
    sizes = [int(t.n_clusters) for t in family if int(t.n_clusters) >= 2]
    return min(sizes) if sizes else 0


def calibrated_test(t: Tested, n_boot: int, seed: int) -> calibrated.WildT | None:
    """The calibrated test of one contrast from the per-document sums the bootstrap saw (None: fewer than 2
    documents)."""
    if t.counts.size < 2:
        return None
    return calibrated.WildT.of(calibrated.Clusters(t.sums, t.counts), n_boot, seed)


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
        return CalibratedVerdict(str(getattr(stats_params, "decision", "auto"))), ""

    def carried(self, table: pd.DataFrame | None) -> bool:
        return table is not None and "p_holm_cal" in table.columns

    def record(self, stats_params: StatsParams) -> dict[str, Any] | None:
        return {"decision": str(getattr(stats_params, "decision", "auto"))}

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
        declared = str(getattr(stats_params, "decision", "auto"))
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
CALIBRATED_VERDICT = CalibratedVerdict()
