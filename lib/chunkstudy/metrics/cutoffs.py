"""The specification curve's other cut-offs (stage 06; docs/beyond.md, "Specification curve"): the rank-cut metrics
of ``multiverse.metrics`` (cov-nDCG, nDCG) scored at each k of ``multiverse.cutoffs`` other than
``metrics.cutoff``, which ``scores`` already holds. Pure; the same scorer as ``scores`` (:func:`.scoring.score_runs`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import pandas as pd

from .. import stages
from ..params import MetricsParams
from .scoring import score_runs


def extra_cutoffs(metric_axis: Sequence[tuple[str, str, int | None]], cutoff: int) -> dict[int, list[str]]:
    """``{k: [metric names as scored at k]}`` for every cut-off of the curve's metric × k choices ``metric_axis``
    (:attr:`chunkstudy.params.Params.multiverse_metrics`) other than ``cutoff`` (``metrics.cutoff``); empty when
    there is none."""
    out: dict[int, list[str]] = {}
    for scored, _, k in metric_axis:
        if k is not None and k != cutoff:
            out.setdefault(k, []).append(scored)
    return dict(sorted(out.items()))


def multiverse_scores(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, metrics_params: MetricsParams,
                      metric_axis: Sequence[tuple[str, str, int | None]], corpus: str) -> pd.DataFrame:
    """The rows ``scores`` would hold for the metrics of :func:`extra_cutoffs` had ``metrics.cutoff`` been each k:
    the same columns, one scoring pass of every run list per k (its cost: 06's scoring time per k). Empty, with the
    columns, when the curve varies no cut-off."""
    frames = []
    for k, names in extra_cutoffs(metric_axis, metrics_params.cutoff).items():
        scored = score_runs(runs, chunks, queries, replace(metrics_params, cutoff=k), corpus)
        frames.append(scored[scored["metric"].isin(names)])
    if not frames:
        return pd.DataFrame(columns=stages.columns("multiverse_scores"))
    return pd.concat(frames, ignore_index=True)
