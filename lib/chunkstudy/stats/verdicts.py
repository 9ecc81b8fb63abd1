"""The verdicts beside Holm's, found by their files (docs/extending.md, "Another verdict"): each module of
:mod:`chunkstudy.stats.verdict` declares ``VERDICT``, a
:class:`~chunkstudy.stats.verdict_protocols.RegisteredVerdict` — its statistic
(:class:`~chunkstudy.stats.verdict_protocols.VerdictStatistic`: its columns, when a run has it, what the goldens pin
and what the manifests record), how the report prints it
(:class:`~chunkstudy.stats.verdict_protocols.VerdictRendering`) and its ``order``. :data:`VERDICTS` lists them by
``order``, which is the order of their columns in 07's and 08's tables; a new file in that package is the whole
registration, and no list here can disagree with the files.

07's contrast code (:mod:`.contrasts`), the runner's manifests and :mod:`chunkstudy.golden` get the statistic half
from the functions below, 08's tables and text (:mod:`chunkstudy.report`) the rendering half (:func:`shown`,
:func:`recorded`); none names a verdict. A declaration that lacks a member, or repeats another's name, order or
column, golden section or manifest record, fails this module's import, naming the modules.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from .. import plugins
from ..params import StatsParams
from ..significance import Verdict
from .verdict_protocols import RegisteredVerdict, VerdictRendering, VerdictStatistic

#: The package whose modules are the verdicts, and the module attribute each declares its verdict under.
PACKAGE = "chunkstudy.stats.verdict"
ATTRIBUTE = "VERDICT"
#: What a declared verdict must have: every member of :class:`RegisteredVerdict`.
MEMBERS = tuple(sorted(n for n in dir(RegisteredVerdict) if not n.startswith("_")))
#: What no two verdicts share (nor any column): a name is its key, an order its place, a record name its key in the
#: manifests and a golden section its key in a golden file.
UNIQUE = ("name", "order", "record_name", "golden_section")


def _checked(module: str, verdict: Any) -> RegisteredVerdict:
    """``verdict`` as ``module`` declared it, when it has every member and an integer ``order``."""
    missing = [m for m in MEMBERS if not hasattr(verdict, m)]
    if missing:
        raise TypeError(f"{module}.{ATTRIBUTE}: a {type(verdict).__name__} lacks {', '.join(missing)}, which a "
                        "verdict declares (chunkstudy.stats.verdict_protocols.RegisteredVerdict)")
    if not isinstance(verdict.order, int) or isinstance(verdict.order, bool):
        raise TypeError(f"{module}.{ATTRIBUTE}.order: expected an integer (its place among the verdicts), got "
                        f"{verdict.order!r}")
    return verdict


def discover(package: str = PACKAGE) -> dict[str, RegisteredVerdict]:
    """Every verdict ``package``'s modules declare, by name, in ``order`` (module docstring). Two that share a
    name, an order, a record name, a golden section or a column are refused, naming both modules."""
    found = [(module, _checked(module, declared)) for module, declared in plugins.discover(package, ATTRIBUTE, object)]
    plugins.refuse_shared(found, ATTRIBUTE, lambda v: [*((a, getattr(v, a)) for a in UNIQUE),
                                                       *(("column", c) for c in v.columns)])
    return {v.name: v for _, v in sorted(found, key=lambda mv: mv[1].order)}


#: Every verdict beside Holm's, by name, in the order its columns follow in 07's and 08's tables: the calibrated
#: test and which test decides (order 10, every run), then the equivalence test (order 20, a bound declared).
VERDICTS: dict[str, RegisteredVerdict] = discover()


def statistics() -> tuple[VerdictStatistic, ...]:
    """Every registered verdict's statistic, in order."""
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
    """The verdicts of one cell of ``metric`` beside Holm's, in order, and the note of its rows (each verdict's,
    joined with "; ")."""
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
