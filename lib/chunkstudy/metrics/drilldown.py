"""Per-query drill-down of the pre-registered contrasts, stage 06's half: which queries a condition won or lost,
and why (docs/running.md, "The HTML report"). Stage 06 computes the ``drilldown`` table here (:func:`drilldown`);
stage 08 formats it (:func:`chunkstudy.report.drilldown.report_parts`) for ``report.md`` (a summary table) and
``report.html`` (one collapsible section per contrast).

What is shown
-------------
For every contrast ``name: [A, B]`` of ``stats.contrasts`` (then of ``contrasts.extra``) in the **primary cell**
(:class:`chunkstudy.design.PrimaryCell`: ``stats.primary_metric`` × ``embed.strong`` × ``stats.primary_reranker``),
the paired per-query deltas ``δ_q = score_A(q) − score_B(q)`` of the primary metric
(:func:`chunkstudy.metrics.paired.paired_deltas`, the numbers 07's contrast averages) pick
``stats.drilldown_queries`` queries per direction (:func:`pick_queries`):

* **gains**: the largest ``δ_q > 0``, largest first;
* **losses**: the most negative ``δ_q < 0``, most negative first;

ties go to the smaller ``query_id``; a query with ``δ_q = 0`` is neither. For each picked query and each of the
two conditions, the top ``metrics.cutoff`` chunks of its run list in the primary cell: rank, retrieval score, the
prefix as embedded, the content, the gold characters the chunk covers and the coverage-nDCG terms of the rank
(:func:`chunkstudy.metrics.rank_gains`: ``gain``, ``discounted_gain = gain / log2(rank + 1)``, running ``dcg``,
the list's ``idcg`` and ``ndcg``), so that ``Σ discounted_gain / idcg`` is the query's cov-nDCG under that
condition.

Gold characters
---------------
``gold_chars`` counts the characters of the **union** of the query's gold spans inside the chunk's content
offsets (a character covered by two overlapping spans counts once; a chunk of another document covers none).
``gold_ranges`` lists those characters as half-open ``[lo, hi)`` offsets relative to the chunk's content
(``content[lo:hi]`` is gold text), merged and in order. Offsets everywhere else are half-open character indices
into the document's flat text (``documents.text``).

Every function is pure; :func:`drilldown` never rounds (08 does, through the :mod:`chunkstudy.report.tables`
formatters).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .. import design, stages
from ..params import MetricsParams
from .paired import paired_deltas
from .scoring import rank_gains
from ..errors import ChunkstudyError

#: Columns of the ``drilldown`` table (06_metrics), one row per (contrast, direction, pick, side, rank).
COLUMNS = stages.columns("drilldown")

DIRECTIONS = ("gain", "loss")


class DrilldownError(ChunkstudyError, ValueError):
    """An input breaks its contract; the message names the table, the key and the stage that wrote it."""


def pick_queries(deltas: pd.DataFrame, n: int) -> pd.DataFrame:
    """The extremes of the paired deltas: up to ``n`` gains (``delta > 0``, largest first) and up to ``n`` losses
    (``delta < 0``, most negative first), ties to the smaller ``query_id``. ``deltas`` has at least ``query_id``
    and ``delta`` (:func:`chunkstudy.metrics.paired.paired_deltas`); returns its picked rows with ``direction``
    ('gain' or 'loss') and ``pick`` (1 = the most extreme) first."""
    if n < 0:
        raise DrilldownError(f"stats.drilldown_queries: expected a count >= 0, got {n}")
    d = deltas.assign(query_id=deltas["query_id"].astype(str), delta=deltas["delta"].astype(float))
    gains = d[d["delta"] > 0].sort_values(["delta", "query_id"], ascending=[False, True], kind="stable").head(n)
    losses = d[d["delta"] < 0].sort_values(["delta", "query_id"], ascending=[True, True], kind="stable").head(n)
    out = pd.concat([gains.assign(direction="gain", pick=np.arange(1, len(gains) + 1)),
                     losses.assign(direction="loss", pick=np.arange(1, len(losses) + 1))], ignore_index=True)
    return out[["direction", "pick", *d.columns]]


def merge_spans(spans) -> list[tuple[int, int]]:
    """The union of half-open ``[start, end)`` spans as disjoint, sorted intervals (touching ones joined)."""
    out: list[list[int]] = []
    for s, e in sorted((int(a), int(b)) for a, b in spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def gold_ranges(start: int, end: int, merged: list[tuple[int, int]]) -> list[list[int]]:
    """The gold characters of chunk ``[start, end)``: ``[lo, hi)`` offsets relative to the chunk's content, for
    each merged gold interval that overlaps it."""
    return [[max(s, start) - start, min(e, end) - start] for s, e in merged if min(e, end) > max(s, start)]


def drilldown(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, documents: pd.DataFrame,
              scores: pd.DataFrame, contrasts: Mapping[str, Sequence[str]], primary: design.PrimaryCell,
              metrics_params: MetricsParams, corpus: str, n_queries: int) -> pd.DataFrame:
    """The ``drilldown`` table of 06_metrics (columns :data:`COLUMNS`; definitions in the module docstring).

    ``runs``/``chunks``/``queries``/``documents`` are the tables of 05/04/03/01, ``scores`` the table
    :func:`chunkstudy.metrics.score_runs` just computed (the primary metric's paired deltas pick the queries),
    ``contrasts`` the contrasts to drill into (``name -> [A, B]``: ``stats.contrasts``, then ``contrasts.extra``),
    ``primary`` the primary cell (:attr:`chunkstudy.params.Params.primary_cell`), ``metrics_params`` the
    ``metrics`` record, ``n_queries`` the number of gains and of losses per contrast
    (``stats.drilldown_queries``). A contrast whose conditions are absent from the primary cell contributes no
    rows (08 says so)."""
    metric, embedder, reranker = primary
    cutoff = metrics_params.cutoff
    prim = scores[(scores["metric"] == metric) & (scores["embedder"] == embedder) & (scores["reranker"] == reranker)]
    picked = []
    for name, (a, b) in contrasts.items():
        deltas = paired_deltas(prim, queries, a, b, corpus=corpus, metric=metric, embedder=embedder,
                                     reranker=reranker)
        picks = pick_queries(deltas, n_queries)
        picked.append(picks.assign(contrast=str(name), condition_a=a, condition_b=b))
    picked = pd.concat(picked, ignore_index=True) if picked else pd.DataFrame()
    if picked.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COLUMNS})

    qids = set(picked["query_id"])
    conds = set(picked["condition_a"]) | set(picked["condition_b"])
    sel = runs[(runs["embedder"] == embedder) & (runs["reranker"] == reranker) & runs["condition"].isin(conds)
               & runs["query_id"].astype(str).isin(qids) & (runs["rank"] <= cutoff)]
    one_q = queries[queries["query_id"].astype(str).isin(qids)]
    docs = set(one_q["doc_id"].astype(str))
    one_c = chunks[chunks["condition"].isin(conds) & (chunks["doc_id"].astype(str).isin(docs)
                                                      | chunks["chunk_id"].isin(set(sel["chunk_id"])))]
    ranked = rank_gains(sel, one_c, one_q, metrics_params)
    ranked = ranked.merge(sel[["condition", "query_id", "rank", "score"]].astype({"query_id": str}),
                          on=["condition", "query_id", "rank"], how="left", validate="one_to_one")
    info = one_c[["condition", "chunk_id", "doc_id", "start", "end", "prefix", "n_prefix_tokens",
                  "n_content_tokens"]].rename(columns={"doc_id": "chunk_doc_id"})
    ranked = ranked.merge(info, on=["condition", "chunk_id"], how="left", validate="many_to_one")

    text = _texts(documents, docs | set(ranked["chunk_doc_id"]))
    qinfo = one_q.assign(query_id=one_q["query_id"].astype(str)).set_index("query_id")
    rows = []
    for p in picked.itertuples(index=False):
        q = qinfo.loc[p.query_id]
        doc = str(q["doc_id"])
        spans = [[int(s), int(e)] for s, e in q["spans"]]
        merged = merge_spans(spans)
        head = dict(contrast=p.contrast, condition_a=p.condition_a, condition_b=p.condition_b, metric=metric,
                    embedder=embedder, reranker=reranker, direction=p.direction, pick=int(p.pick),
                    query_id=p.query_id, doc_id=doc, qtype=str(q.get("qtype", "")), question=str(q["text"]),
                    gold_spans=spans, gold_text=[text[doc][s:e] for s, e in spans], value_a=float(p.value_a),
                    value_b=float(p.value_b), delta=float(p.delta))
        for side, cond in (("A", p.condition_a), ("B", p.condition_b)):
            lst = ranked[(ranked["condition"] == cond) & (ranked["query_id"] == p.query_id)]
            for r in lst.itertuples(index=False):
                cdoc, st, en = str(r.chunk_doc_id), int(r.start), int(r.end)
                ranges = gold_ranges(st, en, merged) if cdoc == doc else []
                rows.append(dict(head, side=side, condition=cond, rank=int(r.rank), chunk_id=r.chunk_id,
                                 chunk_doc_id=cdoc, start=st, end=en, score=float(r.score), prefix=r.prefix,
                                 content=text[cdoc][st:en], n_prefix_tokens=int(r.n_prefix_tokens),
                                 n_content_tokens=int(r.n_content_tokens), same_doc=bool(r.same_doc),
                                 relevant=bool(r.relevant), gold_chars=int(sum(h - lo for lo, h in ranges)),
                                 gold_ranges=ranges, gain=float(r.gain), discounted_gain=float(r.discounted_gain),
                                 dcg=float(r.dcg), idcg=float(r.idcg), ndcg=float(r.ndcg)))
    return pd.DataFrame(rows, columns=COLUMNS)


def _texts(documents: pd.DataFrame, doc_ids: set[str]) -> dict[str, str]:
    sel = documents[documents["doc_id"].astype(str).isin(doc_ids)]
    text = dict(zip(sel["doc_id"].astype(str), sel["text"]))
    absent = sorted(doc_ids - set(text))
    if absent:
        raise DrilldownError(f"documents: no document {absent[0]!r} (named by queries or chunks); written by "
                             f"{stages.writer('documents')}")
    return text


def overview(drill: pd.DataFrame) -> pd.DataFrame:
    """One row per picked query (for the notebook): contrast, direction, pick, query_id, delta, value_a, value_b,
    and per side the number of ranks listed and the gold characters in them."""
    keys = ["contrast", "direction", "pick", "query_id", "delta", "value_a", "value_b"]
    if drill.empty:
        return pd.DataFrame(columns=keys)
    wide = drill.pivot_table(index=keys, columns="side", values="gold_chars", aggfunc=["size", "sum"], sort=False)
    wide.columns = [f"{'ranks' if f == 'size' else 'gold_chars'}_{s}" for f, s in wide.columns]
    return wide.reset_index()

