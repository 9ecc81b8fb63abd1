"""The public entry points of stage 06's metrics: score every run list (:func:`score_runs`, the ``scores`` table),
walk one query's coverage-nDCG rank by rank (:func:`coverage_walk`), the per-rank terms of every list
(:func:`rank_gains`), and the notebook's summaries. Definitions and policies: :mod:`chunkstudy.metrics`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import design, stages
from ..params import MetricsParams
from ..metric_blocks import discount, group_sum
from .gains import run_gains, static_gains
from .inputs import (RUN_COLUMNS, Chunks, MetricsInputError, Queries, encode_runs, need, parse_chunks, parse_queries,
                     strings)
from .measures import Lists, assemble


SCORE_COLUMNS = list(stages.table("scores").contract)  # what a score is; doc_id and qtype are joined on


def metric_names(metrics_params: MetricsParams) -> list[str]:
    """Canonical metric names for these parameters, e.g. ``['cov-nDCG@10', 'recall@50', 'MRR', 'nDCG@10',
    'budget-cov@512', 'budget-cov@1024', 'budget-cov@2048']``."""
    return metrics_params.names


# --------------------------------------------------------------------------------------------------------------
# The scorer
# --------------------------------------------------------------------------------------------------------------

@dataclass
class Scored:
    """Intermediate results, kept for :func:`coverage_walk` and the tests."""

    cells: pd.DataFrame           # embedder, reranker, condition (one row per cell-condition in the runs)
    cell_cond: np.ndarray         # condition code per cell
    n_q: int
    values: dict[str, np.ndarray]  # metric -> value per list (list = cell * n_q + q)
    run: dict[str, np.ndarray]     # run rows sorted by (list, rank): list, rank, chunk, same_doc, rel, gain
    ideal: dict[str, np.ndarray]   # ideal orderings: cq (= cond * n_q + q), pos, chunk, gain


def score_lists(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, p: MetricsParams) -> tuple[
        Scored, Queries, Chunks, np.ndarray, np.ndarray]:
    """Every metric of every run list: encode the inputs, compute the ranking-free gains and ideals, the run
    rows' gains, and assemble the metric values."""
    need(runs, RUN_COLUMNS, "runs")
    docs = np.asarray(pc.unique(pa.concat_arrays([strings(chunks["doc_id"]), strings(queries["doc_id"])]))
                      .to_pylist(), dtype=object)
    conds = np.asarray(pc.unique(strings(chunks["condition"])).to_pylist(), dtype=object)
    q = parse_queries(queries, docs)
    ch = parse_chunks(chunks, conds, docs)
    r = encode_runs(runs, q, ch, conds)
    st = static_gains(r, q, ch, len(conds), p)
    rg = run_gains(r, q, ch, st)
    values = assemble(Lists(r, q, ch, st, rg, p))
    scored = Scored(r.cells, r.cell_cond, r.n_q, p.named(values),
                     {"list": r.lst, "rank": r.rank, "chunk": r.chunk_row, "same_doc": r.same_doc, "rel": rg.rel,
                      "gain": rg.gain},
                     st.ideal)
    return scored, q, ch, docs, conds


# --------------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------------

def score_runs(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               metrics_params: MetricsParams, corpus: str) -> pd.DataFrame:
    """Score every run list: the long-form ``scores`` table (docs/design.md, "Data contracts").

    ``runs``: embedder, reranker, condition, query_id, rank (1-based), chunk_id (05_retrieve).
    ``chunks``: condition, doc_id, chunk_id, start, end (content offsets), n_content_tokens, n_prefix_tokens
    (04_chunk_embed). ``queries``: query_id, doc_id, spans (list of [start, end] on the query's document), qtype
    (03_queries). ``metrics_params``: the ``metrics`` parameter section.

    Returns one row per (embedder, reranker, condition) present in ``runs`` × every query × metric, with columns
    corpus, embedder, reranker, condition, query_id, metric, value, plus doc_id (the bootstrap's cluster) and
    qtype when ``queries`` has it. A query with no retrieved rows in a cell-condition scores 0 on every metric.
    Definitions and policies: the module docstring.
    """
    p = metrics_params
    scored, q, _, _, _ = score_lists(runs, chunks, queries, p)
    n_lists = len(scored.cells) * scored.n_q
    cell_of = np.repeat(np.arange(len(scored.cells)), scored.n_q)
    q_of = np.tile(np.arange(scored.n_q), len(scored.cells))
    m = len(p.names)
    out = pd.DataFrame({
        "corpus": np.full(n_lists * m, corpus, dtype=object),
        "embedder": np.tile(scored.cells["embedder"].to_numpy()[cell_of], m),
        "reranker": np.tile(scored.cells["reranker"].to_numpy()[cell_of], m),
        "condition": np.tile(scored.cells["condition"].to_numpy()[cell_of], m),
        "query_id": np.tile(q.ids[q_of], m),
        "metric": np.repeat(np.asarray(p.names, dtype=object), n_lists),
        "value": np.concatenate([scored.values[name] for name in p.names]) if n_lists else np.zeros(0),
        "doc_id": np.tile(queries["doc_id"].astype(str).to_numpy(dtype=object)[q_of], m),
    })
    if "qtype" in queries.columns:
        out["qtype"] = np.tile(queries["qtype"].astype(str).to_numpy(dtype=object)[q_of], m)
    return out


def coverage_walk(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
                  metrics_params: MetricsParams, *, embedder: str, reranker: str,
                  condition: str, query_id: str) -> pd.DataFrame:
    """One query's coverage-nDCG, rank by rank, beside the greedy ideal (for the notebook and for reading).

    Rows are ranks 1..cutoff. Columns: ``rank``, the retrieved ``chunk_id``/``doc_id``/``start``/``end``,
    ``same_doc``, ``relevant`` (the relevance rule), ``gain`` (mean over gold spans of the newly covered
    fraction), ``dcg`` (running sum of ``gain / log2(rank + 1)``); the ideal's ``ideal_chunk_id``,
    ``ideal_start``, ``ideal_end``, ``ideal_gain`` and running ``idcg``. ``attrs`` holds ``dcg``, ``idcg`` and
    ``score`` (= cov-nDCG@cutoff, 0 when the ideal is 0).
    """
    p = metrics_params
    sel = ((runs["embedder"].astype(str) == embedder) & (runs["reranker"].astype(str) == reranker)
           & (runs["condition"].astype(str) == condition) & (runs["query_id"].astype(str) == query_id))
    one_q = queries[queries["query_id"].astype(str) == query_id]
    if one_q.empty:
        raise MetricsInputError(f"queries: no query {query_id!r}")
    one_c = chunks[chunks["condition"].astype(str) == condition]
    if one_c.empty:
        raise MetricsInputError(f"chunks: no chunks for condition {condition!r}")
    if not sel.any():
        raise MetricsInputError(f"runs: no rows for embedder {embedder!r} reranker {reranker!r} condition "
                                f"{condition!r} query {query_id!r}")
    scored, q, ch, docs, _ = score_lists(runs[sel], one_c, one_q, p)
    r = scored.run
    k = p.cutoff
    walk = pd.DataFrame({"rank": np.arange(1, k + 1)})
    here = r["rank"] <= k
    obs = pd.DataFrame({
        "rank": r["rank"][here], "chunk_id": ch.chunk_id[r["chunk"][here]],
        "doc_id": np.asarray(docs, dtype=object)[ch.doc[r["chunk"][here]]],
        "start": ch.start[r["chunk"][here]], "end": ch.end[r["chunk"][here]],
        "same_doc": r["same_doc"][here], "relevant": r["rel"][here], "gain": r["gain"][here]})
    walk = walk.merge(obs, on="rank", how="left")
    walk["gain"] = walk["gain"].fillna(0.0)
    walk["dcg"] = np.cumsum(walk["gain"].to_numpy() * discount(walk["rank"]))
    ideal = scored.ideal
    ide = pd.DataFrame({"rank": ideal["pos"], "ideal_chunk_id": ch.chunk_id[ideal["chunk"]],
                        "ideal_start": ch.start[ideal["chunk"]], "ideal_end": ch.end[ideal["chunk"]],
                        "ideal_gain": ideal["gain"]})
    walk = walk.merge(ide, on="rank", how="left")
    walk["ideal_gain"] = walk["ideal_gain"].fillna(0.0)
    walk["idcg"] = np.cumsum(walk["ideal_gain"].to_numpy() * discount(walk["rank"]))
    walk = walk.astype({c: "Int64" for c in ("start", "end", "ideal_start", "ideal_end")})
    dcg, idcg = float(walk["dcg"].iloc[-1]), float(walk["idcg"].iloc[-1])
    walk.attrs.update({"dcg": dcg, "idcg": idcg, "score": dcg / idcg if idcg > 0 else 0.0,
                       "metric": p.primary, "query_id": query_id, "condition": condition})
    return walk


def rank_gains(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               metrics_params: MetricsParams) -> pd.DataFrame:
    """The coverage-nDCG terms of every retrieved row within the cutoff, for every list in ``runs`` at once (the
    vectorised counterpart of :func:`coverage_walk`, for the per-query drill-down).

    One row per run row with ``rank <= cutoff``, sorted by list then rank. Columns: ``embedder``, ``reranker``,
    ``condition``, ``query_id``, ``rank``, ``chunk_id``, ``same_doc`` (the chunk lies in the query's document),
    ``relevant`` (the relevance rule), ``gain`` (mean over gold spans of the newly covered fraction, as in
    cov-nDCG), ``discounted_gain`` = ``gain / log2(rank + 1)``, ``dcg`` (running sum of ``discounted_gain``
    within the list), ``idcg`` (the list's greedy ideal over the condition's own chunks of the document) and
    ``ndcg`` (the list's cov-nDCG@cutoff = final ``dcg`` / ``idcg``, 0 when ``idcg`` is 0; the value
    :func:`score_runs` reports). Inputs and conventions as in :func:`score_runs`.
    """
    p = metrics_params
    scored, q, ch, _, conds = score_lists(runs, chunks, queries, p)
    r = scored.run
    keep = r["rank"] <= p.cutoff
    lst, rank, chunk = r["list"][keep], r["rank"][keep], r["chunk"][keep]
    cell, qi = lst // scored.n_q, lst % scored.n_q
    n_cq = len(conds) * scored.n_q
    idcg_cq = group_sum(scored.ideal["cq"], scored.ideal["gain"] * discount(scored.ideal["pos"]), n_cq)
    gain = r["gain"][keep]
    disc = gain * discount(rank)
    starts = np.r_[0, np.flatnonzero(lst[1:] != lst[:-1]) + 1] if len(lst) else np.zeros(0, dtype=np.int64)
    total = np.cumsum(disc)
    before = np.repeat(total[starts] - disc[starts], np.diff(np.r_[starts, len(lst)])) if len(lst) else total
    return pd.DataFrame({
        "embedder": scored.cells["embedder"].to_numpy()[cell],
        "reranker": scored.cells["reranker"].to_numpy()[cell],
        "condition": scored.cells["condition"].to_numpy()[cell],
        "query_id": q.ids[qi], "rank": rank, "chunk_id": ch.chunk_id[chunk],
        "same_doc": r["same_doc"][keep], "relevant": r["rel"][keep], "gain": gain, "discounted_gain": disc,
        "dcg": total - before, "idcg": idcg_cq[scored.cell_cond[cell] * scored.n_q + qi],
        "ndcg": scored.values[p.primary][lst],
    })


def cell_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean of every metric per (embedder, reranker, condition): rows = cell × condition, columns = metrics in
    table order (exploratory summary; the confirmatory statistics live in 07_stats)."""
    metrics = list(pd.unique(scores["metric"]))
    wide = scores.pivot_table(index=["embedder", "reranker", "condition"], columns="metric", values="value",
                              aggfunc="mean", sort=True)
    return wide[metrics]


def walk_example(scores: pd.DataFrame, queries: pd.DataFrame, *, embedder: str, reranker: str,
                 condition: str) -> dict[str, str]:
    """A query worth walking through in the notebook: in the given cell and condition (else the first condition
    scored there), the query with the most gold spans whose coverage-nDCG lies strictly between 0 and 1 (the
    novelty and the ideal both visible), ties to the smallest query_id; else the smallest query_id scored.
    Returns the keyword arguments of :func:`coverage_walk`."""
    cell = scores[(scores["embedder"] == embedder) & (scores["reranker"] == reranker)]
    if cell.empty:
        raise MetricsInputError(f"scores: no rows for embedder {embedder!r} reranker {reranker!r}; cells: "
                                f"{sorted(set(zip(scores['embedder'], scores['reranker'])))}")
    if condition not in set(cell["condition"]):
        condition = sorted(set(cell["condition"]))[0]
    primary = cell[(cell["condition"] == condition)
                   & cell["metric"].map(lambda n: design.is_metric(n, design.PRIMARY_METRIC.key))]
    n_spans = queries.set_index("query_id")["spans"].map(len)
    table = primary.assign(n_spans=primary["query_id"].map(n_spans).to_numpy(),
                           inside=(primary["value"] > 0) & (primary["value"] < 1))
    best = table.sort_values(["inside", "n_spans", "query_id"], ascending=[False, False, True]).iloc[0]
    return {"embedder": embedder, "reranker": reranker, "condition": condition, "query_id": str(best["query_id"])}
