"""Per-query drill-down of the pre-registered contrasts, stage 08's half: the ``drilldown`` table that 06 computed
(:mod:`chunkstudy.metrics.drilldown`, where the columns are defined) formatted for ``report.md`` (a summary table,
:func:`report_parts`) and ``report.html`` (one collapsible section per contrast: :class:`ContrastDrill`, and the
gold characters highlighted by :func:`highlight_segments`). Offsets are half-open character indices; ``gold_ranges``
are relative to a chunk's content. Rounding happens here only, through the :mod:`chunkstudy.report.tables`
formatters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .. import design
from ..metrics.drilldown import DIRECTIONS
from ..params import Params
from . import tables

#: The heading of the drill-down section in report.md; report.html puts the collapsible drill-downs under it.
HEADING = "Per-query drill-down"


def highlight_segments(content: str, ranges) -> list[tuple[str, bool]]:
    """``content`` cut into ``(text, is_gold)`` pieces at the relative gold ranges
    (:func:`chunkstudy.metrics.drilldown.gold_ranges`), in order; joined, the pieces give back ``content``."""
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


@dataclass(frozen=True)
class QueryDrill:
    """One picked query, ready to print: ``title`` (e.g. "gain 1 · query dq014 · δ = +0.4210"), the question,
    its gold span texts, and the side-by-side ``table`` (a :class:`chunkstudy.report.tables.Table`)."""

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
    :mod:`chunkstudy.report.tables` formatters; an empty cell where the list is shorter)."""
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
    """08's views of the ``drilldown`` table: a summary :class:`~chunkstudy.report.tables.Table` (one row per picked
    query, for report.md) and one :class:`ContrastDrill` per contrast of ``stats.contrasts`` and then of
    ``contrasts.extra`` (the user's, marked :data:`chunkstudy.report.tables.USER_MARK`; for report.html).
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

