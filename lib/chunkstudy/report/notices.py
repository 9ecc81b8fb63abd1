"""The report's warnings about the run itself, said once: a metric that is 1 by construction on a small corpus (a
family that :attr:`chunkstudy.design.Metric.saturates`), and the warnings stages 01-07 sent while they ran.
:mod:`chunkstudy.report.report` gathers them into the report's warnings section (and re-exports them).
"""

from __future__ import annotations

from typing import Mapping

from .. import design
from ..params import MetricsParams


def corpus_size_warnings(n_chunks: Mapping[str, int] | None, recall_k: int, metric: str = "",
                         key: str = "metrics.recall_k") -> list[str]:
    """A warning when a condition has no more chunks in the whole corpus than ``metric`` (a family that
    :attr:`chunkstudy.design.Metric.saturates`, cut at ``recall_k``; ``recall@<recall_k>`` when unnamed) retrieves
    (04's ``n_chunks`` per condition): it is 1 by construction and says nothing about the condition (a small corpus
    such as the Markdown example's 25 chunks per condition under recall@50). ``key`` is the parameter to lower."""
    small = {c: int(n) for c, n in (n_chunks or {}).items() if int(n) <= recall_k}
    if not small:
        return []
    sizes = sorted(set(small.values()))
    size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return [f"{metric or f'recall@{recall_k}'} is 1 by construction for {', '.join(small)}: each has only {size} "
            f"chunks in the whole corpus, so the top {recall_k} holds every chunk. Compare those conditions on the "
            f"ranking metrics, or lower {key}."]


def saturation_warnings(n_chunks: Mapping[str, int] | None, metrics_params: MetricsParams) -> list[str]:
    """:func:`corpus_size_warnings` for every metric of the run whose family saturates
    (:attr:`chunkstudy.design.Metric.saturates`: recall), each at its own cut-off (``metrics_params``: the
    ``metrics`` record)."""
    out: list[str] = []
    for fam in design.METRICS:
        for name in fam.names(vars(metrics_params)) if fam.saturates else ():
            out += corpus_size_warnings(n_chunks, int(fam.argument(name) or 0), name, f"metrics.{fam.parameter}")
    return out


def stage_warnings(manifests: Mapping[str, Mapping]) -> list[str]:
    """The warnings stages 01-07 sent while they ran (:func:`chunkstudy.progress.warn`, recorded in each manifest
    by the runner), each prefixed with its stage: an embedding-store shard that failed its check and was embedded
    again, for one."""
    return [f"{stage}: {w}" for stage, m in manifests.items() for w in (m.get("warnings") or [])]
