"""What a metric's computation reads (stage 06): :class:`Lists`, the run lists being scored, and :func:`assemble`,
which hands them to every registered metric. Each metric is one class in :mod:`chunkstudy.design_metrics` (its
parameters, computation, formula and citation together; :data:`chunkstudy.design.METRICS`); nothing here names
one. Formulas: the classes' docstrings and :mod:`chunkstudy.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .. import design
from ..params import MetricsParams
from .gains import RunGains, Static
from .inputs import Chunks, Queries, Runs


@dataclass
class Lists:
    """Everything a metric needs about the run lists being scored (list = cell * n_q + q): the encoded runs,
    queries and chunks, the ranking-free gains ``st``, the run rows' gains ``rg`` and the ``metrics`` record."""

    r: Runs
    q: Queries
    ch: Chunks
    st: Static
    rg: RunGains
    p: MetricsParams

    @cached_property
    def list_c(self) -> np.ndarray:
        """The (condition, query) index ``cq`` of each list."""
        n_q = self.r.n_q
        return np.repeat(self.r.cell_cond, n_q) * n_q + np.tile(np.arange(n_q), len(self.r.cells))


def assemble(x: Lists) -> dict[str, Any]:
    """The metric values per list, keyed by metric family (:data:`chunkstudy.design.METRICS`, in registered order;
    renamed by :meth:`MetricsParams.named`): each family's own :meth:`~chunkstudy.design.Metric.compute`."""
    return {m.key: m.compute(x) for m in design.METRICS}
