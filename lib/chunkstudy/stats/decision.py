"""Who decides a family's significance: the paper's percentile cluster bootstrap or the small-sample-calibrated test
(:mod:`.calibrated`), and what the calibrated test as a verdict beside Holm's computes (docs/design.md, "Calibrated at the sizes
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

**The verdict** (:class:`chunkstudy.stats.verdict.calibrated.CalibratedVerdict`, its own module): every family of 07
carries the calibrated p, Holm p and CI beside the percentile's, the rule declared, the test that decided and its
decision, from the functions here. Pure; never rounds.
"""

from __future__ import annotations

from typing import Sequence

from ..significance import PERCENTILE_FROM, Tested
from . import calibrated

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
