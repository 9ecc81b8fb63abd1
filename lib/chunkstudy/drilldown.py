"""Per-query drill-down of the pre-registered contrasts: which queries a condition won or lost, and why (issue 18
§3). Stage 06 computes the ``drilldown`` table (:func:`drilldown`); stage 08 formats it (:func:`report_parts`)
for ``report.md`` (a summary table) and ``report.html`` (one collapsible section per contrast).

What is shown
-------------
For every contrast ``name: [A, B]`` of ``stats.contrasts`` in the **primary cell** (``stats.primary_metric`` ×
``embed.strong`` × ``stats.primary_reranker``), the paired per-query deltas
``δ_q = score_A(q) − score_B(q)`` of the primary metric (:func:`chunkstudy.stats.paired_deltas`, the numbers the
contrast averages) pick ``stats.drilldown_queries`` queries per direction (:func:`pick_queries`):

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

Every function is pure; :func:`drilldown` never rounds (08 does, through the :mod:`chunkstudy.tables`
formatters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from . import design, metrics, stages, stats, tables
from .params import MetricsParams, Params, StatsParams

#: The heading of the drill-down section in report.md; report.html puts the collapsible drill-downs under it.
HEADING = "Per-query drill-down"

#: Columns of the ``drilldown`` table (06_metrics), one row per (contrast, direction, pick, side, rank).
COLUMNS = stages.columns("drilldown")

DIRECTIONS = ("gain", "loss")


class DrilldownError(ValueError):
    """An input breaks its contract; the message names the table, the key and the stage that wrote it."""


# ---------------------------------------------------------------------------------------------------------------
# Stage 06: compute
# ---------------------------------------------------------------------------------------------------------------

def pick_queries(deltas: pd.DataFrame, n: int) -> pd.DataFrame:
    """The extremes of the paired deltas: up to ``n`` gains (``delta > 0``, largest first) and up to ``n`` losses
    (``delta < 0``, most negative first), ties to the smaller ``query_id``. ``deltas`` has at least ``query_id``
    and ``delta`` (:func:`chunkstudy.stats.paired_deltas`); returns its picked rows with ``direction`` ('gain' or
    'loss') and ``pick`` (1 = the most extreme) first."""
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


def highlight_segments(content: str, ranges) -> list[tuple[str, bool]]:
    """``content`` cut into ``(text, is_gold)`` pieces at the relative gold ranges (:func:`gold_ranges`), in
    order; joined, the pieces give back ``content``."""
    out, at = [], 0
    for lo, hi in sorted((int(a), int(b)) for a, b in (ranges if ranges is not None else [])):
        lo, hi = max(lo, at), min(hi, len(content))
        if hi <= lo:
            continue
        if lo > at:
            out.append((content[at:lo], False))
        out.append((content[lo:hi], True))
        at = hi
    if at < len(content):
        out.append((content[at:], False))
    return out


def drilldown(runs: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, documents: pd.DataFrame,
              scores: pd.DataFrame, stats_params: StatsParams, strong: str, metrics_params: MetricsParams, corpus: str,
              n_queries: int) -> pd.DataFrame:
    """The ``drilldown`` table of 06_metrics (columns :data:`COLUMNS`; definitions in the module docstring).

    ``runs``/``chunks``/``queries``/``documents`` are the tables of 05/04/03/01, ``scores`` the table
    :func:`chunkstudy.metrics.score_runs` just computed (the primary metric's paired deltas pick the queries),
    ``stats_params``/``metrics_params`` the ``stats`` and ``metrics`` records, ``strong`` ``embed.strong`` (the
    primary cell's embedder), ``n_queries`` the number of gains
    and of losses per contrast. A contrast whose conditions are absent from the primary cell contributes no rows
    (08 says so)."""
    metric, embedder, reranker = stats._primary(stats_params, strong)
    contrasts = stats_params.contrasts
    cutoff = metrics_params.cutoff
    prim = scores[(scores["metric"] == metric) & (scores["embedder"] == embedder) & (scores["reranker"] == reranker)]
    picked = []
    for name, (a, b) in contrasts.items():
        deltas = stats.paired_deltas(prim, queries, a, b, corpus=corpus, metric=metric, embedder=embedder,
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
    ranked = metrics.rank_gains(sel, one_c, one_q, metrics_params)
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
                             "01_corpus")
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


# ---------------------------------------------------------------------------------------------------------------
# Stage 08: format
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class QueryDrill:
    """One picked query, ready to print: ``title`` (e.g. "gain 1 · query dq014 · δ = +0.4210"), the question,
    its gold span texts, and the side-by-side ``table`` (a :class:`chunkstudy.tables.Table`)."""

    direction: str
    pick: int
    query_id: str
    title: str
    question: str
    gold_text: tuple[str, ...]
    table: tables.Table


@dataclass(frozen=True)
class ContrastDrill:
    """One contrast's drill-down: ``title`` (e.g. "C1: A3 − A1 (organization vs. contextualization)"), the picked
    queries (gains, then losses) and notes (e.g. why a direction is empty)."""

    contrast: str
    title: str
    queries: tuple[QueryDrill, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


#: Characters of a prefix or chunk content shown in a table cell before an ellipsis.
PREFIX_CHARS = 160
CONTENT_CHARS = 160


def _clip(s: Any, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1].rstrip() + "\u2026"


def short_chunk_id(chunk_id: Any, condition: str, doc_id: Any) -> str:
    """A chunk id without the ``<condition>|<doc_id>|`` it starts with (04's ids), else the id unchanged."""
    head = f"{condition}|{doc_id}|"
    s = str(chunk_id)
    return s[len(head):] if s.startswith(head) and len(s) > len(head) else s


def lists_side_by_side(rows: pd.DataFrame, condition_a: str, condition_b: str, cutoff: int) -> pd.DataFrame:
    """The display rows of one picked query: ranks 1..``cutoff``; per condition (A, then B) the chunk id
    (:func:`short_chunk_id`, with the document named when it is not the query's), the retrieval score, the prefix as embedded, the gold characters, the gain and the discounted gain (rounded by the
    :mod:`chunkstudy.tables` formatters; an empty cell where the list is shorter)."""
    out = pd.DataFrame({"Rank": [str(r) for r in range(1, cutoff + 1)]})
    for side, cond in (("A", condition_a), ("B", condition_b)):
        s = rows[rows["side"] == side].set_index("rank")
        pick = s.reindex(range(1, cutoff + 1))
        have = pick["chunk_id"].notna()
        other = have & ~pick["same_doc"].fillna(True).astype(bool)

        def col(values):
            return [v if h else "" for v, h in zip(values, have)]

        out[f"{cond}: chunk"] = col([short_chunk_id(c, cond, d) + (f" (other doc: {d})" if o else "")
                                     for c, d, o in zip(pick["chunk_id"], pick["chunk_doc_id"], other)])
        out[f"{cond}: score"] = col([tables.fmt_num(v) for v in pick["score"]])
        out[f"{cond}: prefix"] = col([_clip(v, PREFIX_CHARS) if str(v).strip() else "(none)"
                                      for v in pick["prefix"].fillna("")])
        out[f"{cond}: gold chars"] = col([tables.fmt_int(v) for v in pick["gold_chars"]])
        out[f"{cond}: gain"] = col([tables.fmt_num(v) for v in pick["gain"]])
        out[f"{cond}: gain/log\u2082(r+1)"] = col([tables.fmt_num(v) for v in pick["discounted_gain"]])
    return out


def _list_note(rows: pd.DataFrame, side: str, cond: str, metric: str, value: float, cutoff: int) -> str:
    s = rows[rows["side"] == side]
    if s.empty:
        return f"{cond}: no retrieved chunks in the top {cutoff}; {metric} = {tables.fmt_num(value)}."
    dcg, idcg, ndcg = float(s["discounted_gain"].sum()), float(s["idcg"].iloc[0]), float(s["ndcg"].iloc[0])
    walked = design.PRIMARY_METRIC.names({"cutoff": cutoff})[0]  # the metric the gains add up to
    primary = "" if metric == walked else f"; {metric} (the contrast's metric) = {tables.fmt_num(value)}"
    return (f"{cond}: DCG@{cutoff} = \u03a3 gain/log\u2082(rank+1) = {tables.fmt_num(dcg)}; IDCG = "
            f"{tables.fmt_num(idcg)}; {walked} = DCG/IDCG = {tables.fmt_num(ndcg)}{primary}.")


def report_parts(drill: pd.DataFrame, params: Params) -> tuple[tables.Table, list[ContrastDrill]]:
    """08's views of the ``drilldown`` table: a summary :class:`~chunkstudy.tables.Table` (one row per picked
    query, for report.md) and one :class:`ContrastDrill` per contrast of ``stats.contrasts`` and then of
    ``contrasts.extra`` (the user's, marked :data:`chunkstudy.tables.USER_MARK`; for report.html).
    ``params`` is ``cfg.params()``."""
    st = params.stats
    cutoff = params.metrics.cutoff
    metric = st.primary_metric
    user = dict(params.contrasts.extra)
    summary, out = [], []
    for name, (a, b) in {**st.contrasts, **user}.items():
        rows = drill[drill["contrast"] == name]
        question = design.extra_question(a, b) if name in user else design.contrast_question(a, b)
        title = f"{name}: {a} \u2212 {b}" + (f" ({question})" if question else "") + \
            (f" {tables.USER_MARK} user-added, exploratory" if name in user else "")
        notes, picks = [], []
        if rows.empty:
            notes.append(f"No query of the primary cell differs between {a} and {b} (or a condition is absent).")
        for direction in DIRECTIONS:
            d = rows[rows["direction"] == direction]
            if not rows.empty and d.empty:
                notes.append(f"No query {'gained' if direction == 'gain' else 'lost'} under {a} against {b}.")
            for pick in sorted(set(d["pick"])):
                r = d[d["pick"] == pick]
                h = r.iloc[0]
                qtitle = (f"{direction} {pick} \u00b7 query {h['query_id']} \u00b7 \u03b4 = "
                          f"{tables.fmt_delta(h['delta'])} ({a} {tables.fmt_num(h['value_a'])}, "
                          f"{b} {tables.fmt_num(h['value_b'])})")
                disp = lists_side_by_side(r, a, b, cutoff)
                tnotes = (_list_note(r, "A", a, metric, h["value_a"], cutoff),
                          _list_note(r, "B", b, metric, h["value_b"], cutoff))
                t = tables.Table(f"drilldown_{name}_{direction}{pick}", f"{name} {qtitle}", r, disp, tnotes)
                picks.append(QueryDrill(direction, int(pick), str(h["query_id"]), qtitle, str(h["question"]),
                                        tuple(str(g) for g in h["gold_text"]), t))
                summary.append({"Contrast": name, "A \u2212 B": f"{a} \u2212 {b}", "Direction": direction,
                                "#": str(pick), "Query": str(h["query_id"]),
                                "Question": _clip(h["question"], 90), "\u03b4": tables.fmt_delta(h["delta"]),
                                "A": tables.fmt_num(h["value_a"]), "B": tables.fmt_num(h["value_b"])})
        out.append(ContrastDrill(name, title, tuple(picks), tuple(notes)))
    display = pd.DataFrame(summary, columns=["Contrast", "A \u2212 B", "Direction", "#", "Query", "Question",
                                             "\u03b4", "A", "B"])
    data = drill.drop_duplicates(["contrast", "direction", "pick"])[
        ["contrast", "condition_a", "condition_b", "direction", "pick", "query_id", "question", "value_a",
         "value_b", "delta"]].reset_index(drop=True) if not drill.empty else pd.DataFrame()
    table = tables.Table("drilldown", f"Largest per-query gains and losses, primary cell ({metric})", data, display,
                         (f"\u03b4 = {metric}(A) \u2212 {metric}(B) for one query; A and B are the two conditions' "
                          "scores. report.html shows each query's top chunks side by side.",))
    return table, out
