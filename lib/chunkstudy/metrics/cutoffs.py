"""Metrics at other cut-offs than ``scores``' (stage 06), with the same scorer (:func:`.scoring.score_runs`); pure.

* The specification curve's (docs/beyond.md, "Specification curve"): the metrics of ``multiverse.metrics`` on the
  k axis (:attr:`chunkstudy.design.Metric.k_axis`: cov-nDCG, nDCG) scored at each k of ``multiverse.cutoffs``
  other than their own cut-off (``metrics.cutoff``), which ``scores`` already holds (:func:`multiverse_scores`).
* Anthropic's recipe's (docs/beyond.md, "Anthropic's recipe"): the study's span-level recall at ``stats.recipe_k``
  of the lists of the recipe's conditions, whose complement is the recipe's top-k failure (:func:`recipe_scores`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Collection, Sequence

import pandas as pd

from .. import design, stages
from ..params import MetricsParams
from .scoring import score_runs


def extra_cutoffs(metric_axis: Sequence[tuple[str, str, int | None]], cutoff: int,
                  held: Collection[str] | None = None) -> dict[int, list[str]]:
    """``{k: [metric names as scored at k]}`` for every cut-off of the curve's metric × k choices ``metric_axis``
    (:attr:`chunkstudy.params.Params.multiverse_metrics`) that ``scores`` does not hold: a name not among ``held``
    (:attr:`chunkstudy.params.MetricsParams.names`, each k-axis family at its own cut-off) when given, else a k
    other than ``cutoff`` (``metrics.cutoff``, where cov-nDCG and nDCG are cut); empty when there is none."""
    out: dict[int, list[str]] = {}
    for scored, _, k in metric_axis:
        if k is not None and (scored not in held if held is not None else k != cutoff):
            out.setdefault(k, []).append(scored)
    return dict(sorted(out.items()))


def at_cutoff(metrics_params: MetricsParams, k: int) -> MetricsParams:
    """``metrics_params`` with the cut-off of every family on the k axis (:attr:`chunkstudy.design.Metric.k_axis`)
    set to ``k``: the parameters under which ``scores`` would hold the curve's metrics at k."""
    cut: dict[str, Any] = {str(m.parameter): int(k) for m in design.METRICS if m.k_axis}
    return replace(metrics_params, **cut)


def multiverse_scores(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, metrics_params: MetricsParams,
                      metric_axis: Sequence[tuple[str, str, int | None]], corpus: str) -> pd.DataFrame:
    """The rows ``scores`` would hold for the metrics of :func:`extra_cutoffs` had their cut-off been each k:
    the same columns, one scoring pass of every run list per k (its cost: 06's scoring time per k). Empty, with the
    columns, when the curve varies no cut-off."""
    frames = []
    for k, names in extra_cutoffs(metric_axis, metrics_params.cutoff, metrics_params.names).items():
        scored = score_runs(runs, chunks, queries, at_cutoff(metrics_params, k), corpus)
        frames.append(scored[scored["metric"].isin(names)])
    if not frames:
        return pd.DataFrame(columns=stages.columns("multiverse_scores"))
    return pd.concat(frames, ignore_index=True)


def recipe_scores(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, metrics_params: MetricsParams,
                  k: int, modes: Sequence[str], corpus: str) -> pd.DataFrame:
    """``recall@k`` (``stats.recipe_k``; the study's recall: the share of a query's gold spans at least
    ``metrics.span_frac`` covered by the union of the top k chunks) of every list of the recipe's conditions
    (:data:`chunkstudy.design.RECIPE`: A0, A1), in every cell of ``runs``, as ``scores`` rows: the per-query
    values whose complement 07 reads as the recipe's top-k failure. Empty, with the columns, unless ``modes``
    (``retrieve.modes``) holds every mode the recipe names (:func:`chunkstudy.design.recipe_modes`)."""
    if not set(design.recipe_modes()) <= set(modes):
        return pd.DataFrame(columns=stages.columns("recipe_scores"))
    conditions = list(dict.fromkeys(s.condition for s in design.RECIPE))
    if not runs["condition"].isin(conditions).any():
        return pd.DataFrame(columns=stages.columns("recipe_scores"))
    recall = design.metric("recall")
    at_k: dict[str, Any] = {str(recall.parameter): int(k)}
    name = recall.names(at_k)[0]
    scored = score_runs(runs[runs["condition"].isin(conditions)], chunks[chunks["condition"].isin(conditions)],
                        queries, replace(metrics_params, **at_k), corpus)
    return scored[scored["metric"] == name].reset_index(drop=True)
