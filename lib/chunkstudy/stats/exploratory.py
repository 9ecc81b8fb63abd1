"""The exploratory analyses of stage 07 (paper §6): the breadcrumb-depth dose-response, the per-query-type cuts,
the per-condition means and the reranker lift. Every row is labelled exploratory. Pure; never rounds."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from .. import design, stages
from ..metrics.paired import pair, prepare_scores, wide_scores
from ..params import StatsParams
from ..significance import BootstrapTest
from .contrasts import EXPLORATORY, cells_in, contrast_row, contrast_spec

#: The breadcrumb-depth ladder of the dose-response analysis: (condition, injected heading-path depth), from the
#: declared conditions (:func:`chunkstudy.design.depth_ladder`).
DEPTH_LADDER: tuple[tuple[str, int], ...] = design.depth_ladder()

DOSE_COLUMNS = stages.columns("dose_response")


def per_query_slopes(values: np.ndarray, depths: Sequence[float]) -> np.ndarray:
    """Least-squares slope of each row of ``values`` (queries × levels) on ``depths``:
    ``s_q = Σ_l (x_l − x̄)(y_ql − ȳ_q) / Σ_l (x_l − x̄)²``.

    With every query observed at the same levels, the pooled OLS slope of score on depth equals the mean of these
    per-query slopes, so a clustered bootstrap of ``s_q`` is a clustered bootstrap of the regression slope."""
    x = np.asarray(depths, dtype=float)
    y = np.asarray(values, dtype=float)
    xc = x - x.mean()
    denom = float(np.sum(xc ** 2))
    if y.ndim != 2 or y.shape[1] != x.size or denom == 0:
        raise ValueError(f"per_query_slopes: need a (queries × {x.size}) array and ≥2 distinct depths")
    return (y - y.mean(axis=1, keepdims=True)) @ xc / denom


def dose_response(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                  corpus: str) -> pd.DataFrame:
    """Exploratory breadcrumb-depth dose-response (paper §6, "Breadcrumb depth dose-response"): per embedder ×
    reranker, the OLS slope of the primary metric (cov-nDCG@10) on injected heading-path depth 0..3
    (:data:`DEPTH_LADDER`: A2 → A3-d1 → A3-d2 → A3), in metric units per level, over the queries scored at every
    available level; CI and two-sided p from the document-clustered bootstrap of the per-query slopes
    (:func:`per_query_slopes`, the study's test: :class:`chunkstudy.significance.BootstrapTest`; exploratory, so no
    Holm decision). ``mean_d0..mean_d3`` are the per-level means over the
    same queries. A missing level is dropped (noted); fewer than two levels skip the cell (noted)."""
    metric = primary.metric
    test = BootstrapTest.of(stats_params)
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    nan = float("nan")
    rows = []
    for m, embedder, reranker in cells_in(wide, primary):
        if m != metric:
            continue
        block = wide.xs((m, embedder, reranker), level=["metric", "embedder", "reranker"])
        present = [(c, d) for c, d in DEPTH_LADDER if c in block.columns and block[c].notna().any()]
        absent = [c for c, _ in DEPTH_LADDER if c not in dict(present)]
        row: dict[str, Any] = dict(corpus=corpus, cell=design.cell_name(m, embedder, reranker), metric=m,
                   embedder=embedder,
                   reranker=reranker, slope=nan, ci_low=nan, ci_high=nan, p=nan, n_queries=0, n_docs=0,
                   levels=",".join(c for c, _ in present), **{f"mean_d{d}": nan for _, d in DEPTH_LADDER},
                   inference=False, label=EXPLORATORY, note=f"levels absent: {absent}" if absent else "")
        if len(present) < 2:
            row["note"] = f"skipped: fewer than two depth levels present (absent: {absent})"
            rows.append(row)
            continue
        conds = [c for c, _ in present]
        complete = block.dropna(subset=conds)
        if complete.empty:
            row["note"] = "skipped: no query scored at every present depth level"
            rows.append(row)
            continue
        slopes = per_query_slopes(complete[conds].to_numpy(), [d for _, d in present])
        t = test.test(slopes, complete["doc_id"].to_numpy())
        row.update(slope=t.estimate, ci_low=t.ci_low, ci_high=t.ci_high, p=t.p, n_queries=t.n,
                   n_docs=t.n_clusters, inference=t.inference)
        row["note"] = "; ".join(x for x in (row["note"], t.note) if x)
        for c, d in present:
            row[f"mean_d{d}"] = float(complete[c].mean())
        rows.append(row)
    return pd.DataFrame(rows, columns=DOSE_COLUMNS)


PER_TYPE_COLUMNS = stages.columns("per_type")


def per_type(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
             corpus: str) -> pd.DataFrame:
    """Exploratory per-query-type cuts (paper §6, "Per-query-type cuts"): every contrast within each ``qtype`` of
    the queries table, in every cell of the primary metric (all embedders × rerankers). Statistics as in
    :func:`contrasts_table` but unadjusted (no Holm: these cuts are hypothesis-generating only)."""
    contrasts = contrast_spec(stats_params)
    test = BootstrapTest.of(stats_params)
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    wide = wide.assign(qtype=wide["qtype"].astype(object).where(wide["qtype"].notna(), "(none)").astype(str))
    rows = []
    for metric, embedder, reranker in cells_in(wide, primary):
        if metric != primary.metric:
            continue
        block = wide.xs((metric, embedder, reranker), level=["metric", "embedder", "reranker"])
        for name, (a, b) in contrasts.items():
            both, note = pair(block, a, b)
            groups = [(t, g) for t, g in both.groupby("qtype", sort=True)] if both is not None else [("(all)", None)]
            for qtype, g in groups:
                rows.append(dict(corpus=corpus, cell=design.cell_name(metric, embedder, reranker), metric=metric,
                                 embedder=embedder, reranker=reranker, contrast=name, condition_a=a, condition_b=b,
                                 qtype=qtype, **contrast_row(g, note, a, b, test)[0],
                                 label=EXPLORATORY))
    return pd.DataFrame(rows, columns=PER_TYPE_COLUMNS)


MEANS_COLUMNS = stages.columns("condition_means")


def condition_means(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                    corpus: str) -> pd.DataFrame:
    """Exploratory per-condition means for every metric × embedder × reranker (paper Table 2 and §6, including
    recall@50 per condition): ``mean`` and ``sd`` (ddof = 1) over the queries scored (non-NaN) under that
    condition, ``se_cluster`` = the cluster-robust SE of the mean over documents (:func:`chunkstudy.stats.effects.cluster_se`), the query and
    document counts. Unpaired: each condition uses all of its own scored queries. ``primary_cell`` marks the rows
    of the primary cell (Table 2); every row is labelled exploratory, as in the paper."""
    s = prepare_scores(scores, queries, corpus).dropna(subset=["value"])
    keys = ["metric", "embedder", "reranker", "condition"]
    grouped = s.groupby(keys, sort=True)
    out = grouped["value"].agg(mean="mean", sd=lambda v: float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                               n_queries="size")
    out["n_docs"] = grouped["doc_id"].nunique()
    # CR1 sandwich SE of each mean, vectorised over (group, document) sums
    per_doc = s.groupby([*keys, "doc_id"], sort=True)["value"].agg(["sum", "size"]).reset_index()
    per_doc = per_doc.join(out["mean"], on=keys)
    per_doc["sq"] = (per_doc["sum"] - per_doc["size"] * per_doc["mean"]) ** 2
    acc = per_doc.groupby(keys, sort=True)["sq"].sum()
    g = out["n_docs"].astype(float)
    out["se_cluster"] = np.where(g > 1, np.sqrt(g / (g - 1).where(g > 1) * acc) / out["n_queries"], np.nan)
    out = out.reset_index()
    rank = {c: i for i, c in enumerate(design.CONDITION_NAMES)}
    out = out.sort_values(["metric", "embedder", "reranker", "condition"], kind="stable",
                          key=lambda col: col.map(lambda c: (rank.get(c, len(rank)), c)) if col.name == "condition"
                          else col).reset_index(drop=True)
    out.insert(0, "corpus", corpus)
    out.insert(1, "cell", [design.cell_name(m, e, r)
                           for m, e, r in zip(out["metric"], out["embedder"], out["reranker"])])
    out["primary_cell"] = [(m, e, r) == primary for m, e, r in zip(out["metric"], out["embedder"], out["reranker"])]
    out["label"] = EXPLORATORY
    out["n_queries"] = out["n_queries"].astype(int)
    out["n_docs"] = out["n_docs"].astype(int)
    return out[MEANS_COLUMNS]


def metric_rows(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """The rows of a table with a ``metric`` column whose metric belongs to the declared family ``key``
    (:data:`chunkstudy.design.METRICS`), e.g. ``metric_rows(means, "recall")`` -> the ``recall@50`` rows."""
    return table[table["metric"].astype(str).map(lambda n: design.is_metric(n, key))]


def reranker_lift(condition_means: pd.DataFrame, stats_params: StatsParams,
                  primary: design.PrimaryCell) -> pd.DataFrame:
    """Exploratory reranker lift (paper §6, "Reranking lifts all boats"): per condition and reranker other than
    ``none``, the mean of the primary metric on the primary embedder without a reranker (``none``), with it
    (``reranked``) and ``lift = reranked − none`` — a difference of the :func:`condition_means` rows, not a paired
    test. Rows in reranker, then paper condition order; empty when no reranked cell was scored."""
    stages.check(condition_means, "condition_means", ["metric", "embedder", "reranker", "condition", "mean"],
                 "stats.reranker_lift")
    metric, embedder, _ = primary
    s = condition_means[(condition_means["metric"] == metric) & (condition_means["embedder"] == embedder)]
    base = s[s["reranker"] == "none"].set_index("condition")["mean"]
    rer = s[s["reranker"] != "none"]
    cols = stages.columns("reranker_lift")
    if rer.empty or base.empty:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame({"metric": metric, "embedder": embedder, "reranker": rer["reranker"].to_numpy(),
                        "condition": rer["condition"].to_numpy(), "reranked": rer["mean"].astype(float).to_numpy()})
    out["none"] = out["condition"].map(base).astype(float)
    out["lift"] = out["reranked"] - out["none"]
    out = out.sort_values(["reranker", "condition"], kind="stable",
                          key=lambda c: c.map(design.condition_order_key) if c.name == "condition" else c)
    return out[cols].reset_index(drop=True)
