"""A table's declared columns and their kinds: :class:`Table`, the one schema record of the data store.

:mod:`chunkstudy.stages` declares every artifact of the pipeline with it (and applies the one schema check); the
prefix kinds (:mod:`chunkstudy.prefix_kinds`) declare their side tables with it, below the stage graph that
gathers them among 04's writes. Column kinds (:data:`KINDS`): ``int``, ``float`` (an int column passes too),
``str``, ``bool``, ``list`` (a list, tuple or array per cell) and ``any``. This module imports nothing of the
project.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

KINDS = ("int", "float", "str", "bool", "list", "any")

#: the column kinds, one letter each so that a table reads as one line
I, F, S, B, L, A = "int", "float", "str", "bool", "list", "any"  # noqa: E741


@dataclass(frozen=True)
class Table:
    """A parquet table ``data/<corpus>/<stage>/<name>.parquet``: the columns its writer writes and their kinds, in
    order; ``required``: the contract every table of that name holds at least (docs/design.md, "Data contracts";
    None = every column). A declared column that is present must hold its kind; extra columns are allowed."""

    name: str
    columns: Mapping[str, str]
    doc: str = ""
    required: tuple[str, ...] | None = None

    def __post_init__(self):
        bad = {c: k for c, k in self.columns.items() if k not in KINDS}
        if bad:
            raise ValueError(f"table {self.name}: unknown column kinds {bad}; kinds: {list(KINDS)}")
        if self.required is not None and not set(self.required) <= set(self.columns):
            raise ValueError(f"table {self.name}: required columns {sorted(set(self.required) - set(self.columns))} "
                             "are not declared")

    @property
    def contract(self) -> tuple[str, ...]:
        """The columns every table of this name must hold."""
        return tuple(self.columns) if self.required is None else self.required
