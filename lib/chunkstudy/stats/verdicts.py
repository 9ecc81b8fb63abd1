"""The verdicts beside Holm's, registered once (docs/extending.md, "Another verdict"): each a
:class:`chunkstudy.significance.ReportedVerdict` that declares its columns, when a run has it, how the report
prints it, what the goldens pin and what the manifests record. 07's contrast code (:mod:`.contrasts`), 08's
tables and text (:mod:`chunkstudy.report`), :mod:`chunkstudy.golden` and the runner's manifests loop over
:data:`VERDICTS` and name none of them. Adding a verdict is its module, one entry here and a test.
"""

from __future__ import annotations

from typing import Any

from ..significance import ReportedVerdict, Verdict
from . import decision, equivalence

#: Every verdict beside Holm's, by name, in the order its columns follow 07's and 08's: the calibrated test and which
#: test decides (every run), then the equivalence test (a bound declared).
VERDICTS: dict[str, ReportedVerdict] = {decision.CALIBRATED_VERDICT.name: decision.CALIBRATED_VERDICT,
                                        equivalence.TOST.name: equivalence.TOST}


def columns() -> tuple[str, ...]:
    """The columns every registered verdict may add to 07's contrast tables, in order."""
    return tuple(c for v in VERDICTS.values() for c in v.columns)


def declared(stats_params: Any) -> tuple[ReportedVerdict, ...]:
    """The registered verdicts this run declares (a cell's :meth:`~ReportedVerdict.for_cell` is not None; each
    answers for every cell alike)."""
    metric = str(getattr(stats_params, "primary_metric", ""))
    return tuple(v for v in VERDICTS.values() if v.for_cell(stats_params, metric) is not None)


def for_cell(stats_params: Any, metric: str) -> tuple[tuple[Verdict, ...], str]:
    """The verdicts of one cell of ``metric`` beside Holm's, in registered order, and the note of its rows (each
    verdict's, joined with "; ")."""
    found = [x for x in (v.for_cell(stats_params, metric) for v in VERDICTS.values()) if x is not None]
    return tuple(v for v, _ in found), "; ".join(note for _, note in found if note)


def shown(table: Any) -> tuple[ReportedVerdict, ...]:
    """The registered verdicts whose columns a 07 contrast table carries."""
    return tuple(v for v in VERDICTS.values() if v.shown(table))


def records(stats_params: Any) -> dict[str, dict[str, Any]]:
    """What each stage's manifest records of the verdicts' declarations (record name -> record), those declared."""
    out = {}
    for v in VERDICTS.values():
        rec = v.record(stats_params)
        if rec is not None:
            out[v.record_name] = rec
    return out
