"""What a verdict beside Holm's declares, in two halves, so that each caller sees only the half it uses:

* :class:`VerdictStatistic`, its statistic: the decision itself (:class:`chunkstudy.significance.Verdict`:
  ``name``, ``columns``, ``decide``), when a run has it (``for_cell``), whether a 07 contrast table carries it
  (``carried``), what each stage's manifest records of its declaration (``record_name``, ``record``) and what the
  goldens pin (``golden_section``, ``golden``, ``golden_user``). Read by 07's contrast code, the runner's
  manifests and :mod:`chunkstudy.golden`.
* :class:`VerdictRendering`, how stage 08 prints it: its cells in a printed contrast table (``cells``), the notes
  under it (``notes``), and the report's text (``sentence``, ``registration``). Read only by 08.

A registered verdict meets both and says where its columns go (:class:`RegisteredVerdict`: ``order``): one class in
one module of :mod:`chunkstudy.stats.verdict`, which declares it as ``VERDICT`` (docs/extending.md, "Another
verdict"). The registry (:mod:`chunkstudy.stats.verdicts`) finds it by that file and hands 07, the manifests and
the goldens the statistic half and 08 the rendering half, so a type checker sees which member each reads. Tables are 07 contrast tables (the rows of one family); numbers are rounded only by the report's formatters,
which 08 hands the rendering half (:class:`Formatting`: :mod:`chunkstudy.report.tables.formatting`).
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import pandas as pd

from ..params import StatsParams
from ..significance import Verdict


class Formatting(Protocol):
    """The report's formatters a verdict prints its numbers with (met by the module
    :mod:`chunkstudy.report.tables.formatting`): the only place a printed number is rounded."""

    DASH: str

    def fmt_num(self, x: Any, digits: int = 3) -> str: ...

    def fmt_ci(self, lo: Any, hi: Any, digits: int = 4) -> str: ...

    def fmt_p(self, p: Any, n_boot: Any = None) -> str: ...


@runtime_checkable
class VerdictStatistic(Verdict, Protocol):
    """A verdict's statistic: its decision (:class:`chunkstudy.significance.Verdict`) and what 07, the manifests
    and the goldens read of it; nothing of how the report prints it."""

    def for_cell(self, stats_params: StatsParams, metric: str) -> tuple[Verdict, str] | None:
        """This verdict for one cell of 07 (of ``metric``, under the ``stats`` record) and the note of the cell's
        rows (``""``: none); None when the run declares no such verdict (its columns are then left out of 07's
        tables)."""
        ...

    def carried(self, table: pd.DataFrame | None) -> bool:
        """Whether a 07 contrast table (None: no table) carries this verdict's columns."""
        ...

    @property
    def record_name(self) -> str:
        """The key of its record in each stage's manifest (:meth:`record`)."""
        ...

    def record(self, stats_params: StatsParams) -> dict[str, Any] | None:
        """What each stage's manifest records of its declaration under the ``stats`` record (None: nothing
        declared), so that 08 can say whether it was declared before the run
        (:meth:`VerdictRendering.registration`)."""
        ...

    @property
    def golden_section(self) -> str:
        """The section of a golden file (:func:`chunkstudy.golden.headline`) it pins, per confirmatory contrast."""
        ...

    def golden(self, row: Any) -> dict[str, Any]:
        """What that section pins of one confirmatory contrast (a row of 07's ``contrasts``, ``itertuples``)."""
        ...

    def golden_user(self, row: Any) -> dict[str, Any]:
        """What a golden file pins of it in one user contrast's entry (a row of ``user_contrasts``)."""
        ...


@runtime_checkable
class VerdictRendering(Protocol):
    """How stage 08 prints a verdict whose columns a 07 contrast table carries: it computes nothing."""

    @property
    def name(self) -> str:
        """The verdict's registered name (what the registry keys its manifest record by)."""
        ...

    def cells(self, table: pd.DataFrame, ok: Sequence[bool], fmt: Formatting) -> dict[str, list[str]]:
        """Its columns in a printed contrast table (Table 1, the user's contrasts), header -> one cell per row,
        placed before dz; ``ok``: per row, whether the bootstrap supports inference."""
        ...

    def notes(self, table: pd.DataFrame, fmt: Formatting) -> tuple[str, ...]:
        """Its notes under that printed table."""
        ...

    @property
    def sentence(self) -> str:
        """What the report's text says of it beside Holm's decision, where Table 1 shows it."""
        ...

    def registration(self, stats_params: StatsParams, recorded: Mapping[str, Any]) -> str:
        """The report's sentence on whether the declaration was made before the run: ``recorded`` is what stage
        01's manifest recorded of it (:meth:`VerdictStatistic.record`; empty when nothing)."""
        ...


@runtime_checkable
class RegisteredVerdict(VerdictStatistic, VerdictRendering, Protocol):
    """What a module of :mod:`chunkstudy.stats.verdict` declares as ``VERDICT`` (an entry of
    :data:`chunkstudy.stats.verdicts.VERDICTS`): both halves, and its place among the verdicts."""

    @property
    def order(self) -> int:
        """Its place among the verdicts, read only by the registry: the verdicts' columns follow one another in 07's
        tables, and their cells in 08's, by ascending ``order`` (the calibrated test's is 10, TOST's 20; a new
        verdict takes a number no other has: 30 after both, 15 between them)."""
        ...
