"""The study's metrics, declared once (paper §5.1; docs/design.md, "Metrics"): each family's name, the ``metrics``
parameter that completes it, its role and what its parameter is (a rank cut-off, the specification curve's k axis,
saturation). Part of :mod:`chunkstudy.design`, which re-exports every name here (``design.METRICS`` is this module's);
a module of its own so that design stays under the line floor. Like design it sits at the bottom of the import floors:
it imports only :func:`chunkstudy.errors.lookup`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .errors import lookup


@dataclass(frozen=True)
class Metric:
    """One metric family, declared once (as ir_measures declares a measure): ``key`` names it in code;
    ``template`` is its canonical name with the ``metrics`` parameter that completes it in braces (``parameter``;
    a list parameter such as ``budgets`` gives one metric per element, ``budget-cov@512``, ...); ``role``: ``primary`` (the confirmatory
    metric), ``secondary`` or ``budget``; ``definition``: one line (the formulas are in :mod:`chunkstudy.metrics`).
    ``rank_cut``, ``k_axis`` and ``saturates`` say what the rest of the study does with its parameter, so that no
    code decides by a parameter's or a family's name."""

    key: str
    template: str
    parameter: str | None
    role: str
    definition: str
    #: Its parameter is a rank cut-off of the run lists (only the top ``parameter`` ranks count): a list holds at
    #: most ``retrieve.k`` ranks, so a parameter file may not set it above (a rule per parameter,
    #: :func:`chunkstudy.config_rules.rank_cut_rules`).
    rank_cut: bool = False
    #: The specification curve's k axis (``multiverse.cutoffs``) varies its cut-off: the curve reads it at each k,
    #: and 06 scores it there (cov-nDCG, nDCG); a rank cut without it is one point of the metric axis (recall@50).
    k_axis: bool = False
    #: 1 by construction when a condition has no more chunks in the whole corpus than its cut-off (the list holds
    #: every chunk, so it covers every gold span it can): the report warns (recall, a coverage of the gold; a
    #: ranking metric such as nDCG still depends on the order).
    saturates: bool = False

    def __post_init__(self) -> None:
        if (self.k_axis or self.saturates) and not self.rank_cut:
            raise ValueError(f"metric {self.key!r}: k_axis and saturates describe a rank cut-off; declare rank_cut")
        if self.rank_cut and self.parameter is None:
            raise ValueError(f"metric {self.key!r}: rank_cut needs the parameter that is the cut-off")

    def names(self, metrics_params: Mapping[str, Any]) -> list[str]:
        """The canonical names this family takes under ``metrics_params`` (the ``metrics`` section)."""
        if self.parameter is None:
            return [self.template]
        values = metrics_params[self.parameter]
        values = values if isinstance(values, (list, tuple)) else [values]
        return [self.template.format(**{self.parameter: int(v)}) for v in values]

    def argument(self, name: str) -> int | None:
        """The parameter value in ``name`` when ``name`` belongs to this family (``cov-nDCG@10`` -> 10; 0 for a
        family without a parameter), else None."""
        if self.parameter is None:
            return 0 if name == self.template else None
        head, _, tail = self.template.partition("{")
        m = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail.partition("}")[2]), str(name))
        return int(m.group(1)) if m else None


#: Every metric 06 computes, in table order (primary first, then the secondary ladder; paper §5.1).
METRICS: tuple[Metric, ...] = (
    Metric("cov-nDCG", "cov-nDCG@{cutoff}", "cutoff", "primary",
           "coverage-nDCG: novelty gains over gold spans, greedy ideal over the condition's own chunks",
           rank_cut=True, k_axis=True),
    Metric("recall", "recall@{recall_k}", "recall_k", "secondary",
           "share of gold spans covered to >= span_frac by the union of the top recall_k chunks",
           rank_cut=True, saturates=True),
    Metric("MRR", "MRR", None, "secondary", "1 / rank of the first relevant chunk (0 when none is)"),
    Metric("nDCG", "nDCG@{cutoff}", "cutoff", "secondary",
           "binary nDCG from the relevance rule (trec_eval ndcg_cut)", rank_cut=True, k_axis=True),
    Metric("budget-cov", "budget-cov@{budgets}", "budgets", "budget",
           "gold characters covered within a token budget, prefix tokens charged"),
)

_METRIC_BY_KEY = {m.key: m for m in METRICS}
#: The confirmatory metric's family (coverage-nDCG).
PRIMARY_METRIC: Metric = next(m for m in METRICS if m.role == "primary")


def metric(key: str) -> Metric:
    """The declared metric family ``key`` (``cov-nDCG``, ``recall``, ``MRR``, ``nDCG``, ``budget-cov``)."""
    return lookup(_METRIC_BY_KEY, key, "metric")


def metric_names(metrics_params: Mapping[str, Any]) -> list[str]:
    """The canonical metric names for a ``metrics`` section, in table order, e.g. ``['cov-nDCG@10', 'recall@50',
    'MRR', 'nDCG@10', 'budget-cov@512', 'budget-cov@1024', 'budget-cov@2048']``."""
    return [n for m in METRICS for n in m.names(metrics_params)]


def metric_of(name: str) -> tuple[Metric, int] | None:
    """``(family, parameter value)`` of a canonical metric name, or None for a name no family declares."""
    for m in METRICS:
        arg = m.argument(name)
        if arg is not None:
            return m, arg
    return None


def is_metric(name: str, key: str) -> bool:
    """True when the canonical name ``name`` belongs to family ``key`` (``is_metric("recall@50", "recall")``)."""
    return metric(key).argument(name) is not None


def metric_order_key(name: str) -> tuple:
    """Sort key putting metric names in table order (family, then parameter value; unknown names last)."""
    found = metric_of(name)
    return (METRICS.index(found[0]), found[1], "") if found else (len(METRICS), 0, str(name))


def metric_axis(names: Sequence[str], cutoffs: Sequence[int]) -> list[tuple[str, str, int | None]]:
    """The metric × cut-off choices of a specification curve (``multiverse.metrics`` × ``multiverse.cutoffs``), in
    declared order, each once: ``(name as scored, the metric's label, k)``. A family on the k axis
    (:attr:`Metric.k_axis`: cov-nDCG, nDCG) takes every k (``cov-nDCG@10`` with cut-offs 5, 10 -> ``cov-nDCG@5``,
    ``cov-nDCG@10``, label ``cov-nDCG``), its own cut-off alone when ``cutoffs`` is empty; any other metric is
    itself, with no k (``MRR``, ``recall@50``)."""
    out: dict[str, tuple[str, str, int | None]] = {}
    for name in names:
        found = metric_of(name)
        if found is None:
            raise KeyError(f"metric {name!r} is not declared; families: {[m.key for m in METRICS]}")
        fam, own = found
        if fam.k_axis:
            for k in cutoffs or (own,):
                scored = fam.template.format(**{str(fam.parameter): int(k)})
                out.setdefault(scored, (scored, fam.key, int(k)))
        else:
            out.setdefault(str(name), (str(name), str(name), None))
    return list(out.values())
