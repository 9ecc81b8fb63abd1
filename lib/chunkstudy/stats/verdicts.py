"""The verdicts beside Holm's, registered once (docs/extending.md, "Another verdict"): each a
:class:`~chunkstudy.stats.verdict_protocols.RegisteredVerdict`, its statistic
(:class:`~chunkstudy.stats.verdict_protocols.VerdictStatistic`: its columns, when a run has it, what the goldens pin
and what the manifests record) and how the report prints it
(:class:`~chunkstudy.stats.verdict_protocols.VerdictRendering`). 07's contrast code (:mod:`.contrasts`), the
runner's manifests and :mod:`chunkstudy.golden` get the statistic half from the functions below, 08's tables and
text (:mod:`chunkstudy.report`) the rendering half (:func:`shown`, :func:`recorded`); none names a verdict. Adding a
verdict is its module, one entry here and a test.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from ..params import StatsParams
from ..significance import Verdict
from . import decision, equivalence
from .verdict_protocols import RegisteredVerdict, VerdictRendering, VerdictStatistic

#: Every verdict beside Holm's, by name, in the order its columns follow 07's and 08's: the calibrated test and which
#: test decides (every run), then the equivalence test (a bound declared).
VERDICTS: dict[str, RegisteredVerdict] = {decision.CALIBRATED_VERDICT.name: decision.CALIBRATED_VERDICT,
                                          equivalence.TOST.name: equivalence.TOST}


def statistics() -> tuple[VerdictStatistic, ...]:
    """Every registered verdict's statistic, in registered order (read when called: a verdict registered at run time
    counts)."""
    return tuple(VERDICTS.values())


def columns() -> tuple[str, ...]:
    """The columns every registered verdict may add to 07's contrast tables, in order."""
    return tuple(c for v in statistics() for c in v.columns)


def declared(stats_params: StatsParams) -> tuple[VerdictStatistic, ...]:
    """The registered verdicts this run declares (a cell's :meth:`~VerdictStatistic.for_cell` is not None; each
    answers for every cell alike)."""
    metric = str(getattr(stats_params, "primary_metric", ""))
    return tuple(v for v in statistics() if v.for_cell(stats_params, metric) is not None)


def for_cell(stats_params: StatsParams, metric: str) -> tuple[tuple[Verdict, ...], str]:
    """The verdicts of one cell of ``metric`` beside Holm's, in registered order, and the note of its rows (each
    verdict's, joined with "; ")."""
    found = [x for x in (v.for_cell(stats_params, metric) for v in statistics()) if x is not None]
    return tuple(v for v, _ in found), "; ".join(note for _, note in found if note)


def carried(table: pd.DataFrame | None) -> tuple[VerdictStatistic, ...]:
    """The registered verdicts whose columns a 07 contrast table carries, as statistics (what the goldens pin)."""
    return tuple(v for v in statistics() if v.carried(table))


def records(stats_params: StatsParams) -> dict[str, dict[str, Any]]:
    """What each stage's manifest records of the verdicts' declarations (record name -> record), those declared."""
    out = {}
    for v in statistics():
        rec = v.record(stats_params)
        if rec is not None:
            out[v.record_name] = rec
    return out


def shown(table: pd.DataFrame | None) -> tuple[VerdictRendering, ...]:
    """The registered verdicts whose columns a 07 contrast table carries, as the report prints them (08)."""
    return tuple(v for v in VERDICTS.values() if v.carried(table))


def recorded(manifest: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """What a stage's manifest records of each registered verdict's declaration (:func:`records`), by verdict name
    (empty when nothing): what 08 hands :meth:`~VerdictRendering.registration`."""
    return {v.name: manifest.get(v.record_name) or {} for v in VERDICTS.values()}
