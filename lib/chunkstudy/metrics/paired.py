"""Paired per-query scores (stage 06's ``scores`` as pairs of conditions): the rows of one corpus joined with each
query's document and type, one column per condition, and the paired deltas ``δ_q = score_A(q) − score_B(q)`` of
one cell. The drill-down (:mod:`.drilldown`) picks its queries from them; 07's contrasts
(:mod:`chunkstudy.stats`) average and resample them. Pure: never mutates its inputs, never rounds."""

from __future__ import annotations

import pandas as pd

from .. import stages

SCORE_KEYS = ["embedder", "reranker", "condition", "query_id", "metric"]


def prepare_scores(scores: pd.DataFrame, queries: pd.DataFrame, corpus: str) -> pd.DataFrame:
    """The ``scores`` rows of ``corpus`` joined with each query's ``doc_id`` and ``qtype`` from ``queries``.

    Raises ``ValueError`` naming the table when columns are missing, when no row belongs to ``corpus``, when a
    scored query has no row in ``queries``, or when a (embedder, reranker, condition, query_id, metric) key
    appears twice.
    """
    need = ["corpus", *SCORE_KEYS, "value"]
    stages.check(scores, "scores", need, "metrics.prepare_scores")
    stages.check(queries, "queries", ("query_id", "doc_id", "qtype"), "metrics.prepare_scores")
    s = scores.loc[scores["corpus"] == corpus, need]
    if s.empty:
        raise ValueError(f"scores: no rows for corpus {corpus!r}; corpora present: "
                         f"{sorted(map(str, scores['corpus'].unique()))}")
    dup = s.duplicated(SCORE_KEYS)
    if dup.any():
        key = s.loc[dup, SCORE_KEYS].iloc[0].to_dict()
        raise ValueError(f"scores: corpus {corpus!r} has {int(dup.sum())} duplicated rows, e.g. {key}")
    q = queries[["query_id", "doc_id", "qtype"]].astype({"query_id": str, "doc_id": str})
    qdup = q["query_id"].duplicated()
    if qdup.any():
        raise ValueError(f"queries: query_id {q.loc[qdup, 'query_id'].iloc[0]!r} appears more than once")
    s = s.astype({"query_id": str})
    out = s.merge(q, on="query_id", how="left", validate="many_to_one")
    orphan = out["doc_id"].isna()
    if orphan.any():
        raise ValueError(f"scores: {int(out.loc[orphan, 'query_id'].nunique())} scored queries have no row in "
                         f"queries ({stages.writer('queries')}), e.g. query_id {out.loc[orphan, 'query_id'].iloc[0]!r}")
    return out.astype({"value": float})


def wide_scores(prepared: pd.DataFrame) -> pd.DataFrame:
    """One row per (metric, embedder, reranker, query_id), one column per condition, plus doc_id and qtype."""
    wide = prepared.pivot(index=["metric", "embedder", "reranker", "query_id"], columns="condition", values="value")
    wide.columns = [str(c) for c in wide.columns]
    meta = prepared.drop_duplicates("query_id").set_index("query_id")
    qid = wide.index.get_level_values("query_id")
    return wide.assign(doc_id=qid.map(meta["doc_id"]).to_numpy(), qtype=qid.map(meta["qtype"]).to_numpy())


def pair(block: pd.DataFrame, a: str, b: str) -> tuple[pd.DataFrame | None, str]:
    """The paired rows of one cell for conditions a and b (complete cases), or (None, note)."""
    absent = [c for c in (a, b) if c not in block.columns or block[c].isna().all()]
    if absent:
        return None, f"skipped: condition(s) {absent} absent from this cell"
    both = block.loc[block[a].notna() & block[b].notna(), [a, b, "doc_id", "qtype"]]
    if both.empty:
        return None, f"skipped: no query scored under both {a} and {b}"
    return both, ""


def paired_deltas(scores: pd.DataFrame, queries: pd.DataFrame, condition_a: str, condition_b: str, *, corpus: str,
                  metric: str, embedder: str, reranker: str) -> pd.DataFrame:
    """Per-query paired deltas ``δ_q = score_A(q) − score_B(q)`` in one cell, over the queries scored (non-NaN)
    under both conditions. Columns: query_id, doc_id, qtype, value_a, value_b, delta; sorted by query_id.
    Empty (with those columns) when either condition is absent."""
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    cols = ["query_id", "doc_id", "qtype", "value_a", "value_b", "delta"]
    key = (metric, embedder, reranker)
    try:
        block = wide.xs(key, level=["metric", "embedder", "reranker"])
    except KeyError:
        return pd.DataFrame(columns=cols)
    both, _ = pair(block, condition_a, condition_b)
    if both is None:
        return pd.DataFrame(columns=cols)
    out = both.rename(columns={condition_a: "value_a", condition_b: "value_b"}).reset_index()
    out["delta"] = out["value_a"] - out["value_b"]
    return out[cols].sort_values("query_id", kind="stable").reset_index(drop=True)

