"""What the builders share: display orders, the mechanism questions and Table 4 rows of the declared
conditions (:mod:`chunkstudy.design`), the paper's numbers in the tables' shape (:mod:`chunkstudy.paper`, their
one home) and the input check."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from ... import design, paper, stages
from ...config import SCHEMA

#: Display order of metrics (primary first, then the secondary ladder) under the default ``metrics`` parameters;
#: tables order any metric name by :func:`chunkstudy.design.metric_order_key`.
METRIC_ORDER: tuple[str, ...] = tuple(design.metric_names({k: p.default for k, p in SCHEMA["metrics"].items()}))
#: The mechanism question each pre-registered contrast asks (paper §3.2), keyed by (condition_a, condition_b).
CONTRAST_QUESTIONS: dict[tuple[str, str], str] = {(c.a, c.b): c.question for c in design.CONTRASTS}

#: Which query-funnel step (03 ``query_funnel``) each paper count stands beside, by corpus kind.
PAPER_QUERY_STEPS: dict[str, dict[str, str]] = {
    "wikipedia": {"generated": "generated", "paraphrase survivors (round 2)": "survivors",
                  "balanced finals": "finals", "documents": "documents"},
    "qasper": {"harvested": "harvested", "finals": "finals", "documents": "documents"},
}


def _paper_tables(kind: str) -> dict[str, Any]:
    """The paper's numbers in the shape the funnel/construction tables use, read from :mod:`chunkstudy.paper`."""
    ind = paper.values(kind, "induction")
    ind.setdefault("gold_sections_per_doc", math.nan)
    c = paper.values(kind, "corpus")
    pct = {k: f"{100 * v:g}%" for k, v in c.items() if isinstance(v, float) and v < 1}
    if kind == "wikipedia":
        b = paper.values(kind, "topic_buckets")
        seed = paper.value("study", "design", "seed")
        corpus = [f"{c['documents']} Featured Articles (>= {c['min_words']:,} words, heading depth >= "
                  f"{c['min_heading_depth']}, >= {c['min_sections']} sections), seed {seed}",
                  "buckets: " + ", ".join(f"{k.replace('_', '/')} {v}" for k, v in b.items())]
    else:
        corpus = [f"all splits merged: {c['questions']:,} -> {c['usable']:,} usable questions over {c['papers']:,} "
                  "papers",
                  f"evidence matched {pct['share_exact']} exact; {pct['multi_span']} multi-span "
                  f"({pct['multi_span_appendix']} in its appendix); mean {c['spans_per_question']:.2f} "
                  f"spans/question; {pct['share_depth1_papers']} depth-1 papers"]
    q = paper.values(kind, "queries")
    return {"label": paper.label(kind), "induction": ind, "size_matching": paper.values(kind, "size_matching"),
            "queries": {step: q[key] for step, key in PAPER_QUERY_STEPS[kind].items()}, "corpus": corpus}


#: The paper's numbers for the funnel/construction tables, by corpus kind (``corpus.kind``); one home:
#: :mod:`chunkstudy.paper`.
PAPER: dict[str, dict[str, Any]] = {kind: _paper_tables(kind) for kind in ("wikipedia", "qasper")}


def _order(values: Sequence[str], order: Sequence[str]) -> list[str]:
    rank = {c: i for i, c in enumerate(order)}
    return sorted(dict.fromkeys(map(str, values)), key=lambda c: (rank.get(c, len(rank)), c))


def _require(df: pd.DataFrame, cols: Sequence[str], table: str) -> None:
    stages.check(df, table, cols, "stage 08's tables")


def paper_source_label(source: str) -> str:
    """``"paper (wikipedia)"`` -> ``"paper (Wikipedia-FA)"``: the power table's effect source with the paper's
    corpus label (:data:`PAPER`)."""
    out = str(source)
    for kind, facts in PAPER.items():
        out = out.replace(f"({kind})", f"({facts['label']})")
    return out


#: What a CI or p cell prints where the bootstrap cannot support inference (07's ``inference`` column is false:
#: too few documents or resamples, :func:`chunkstudy.stats.inference_problem`); the table's notes say why.
NO_INFERENCE = "n/a"


def inference_mask(d: pd.DataFrame) -> pd.Series:
    """Per row, whether 07 found the bootstrap fit for inference (its ``inference`` column; a table without the
    column, written by hand, counts as fit)."""
    if "inference" not in d:
        return pd.Series(True, index=d.index)
    return d["inference"].astype(object).where(d["inference"].notna(), False).astype(bool)


def gated(cells: Sequence[str], ok: Sequence[bool]) -> list[str]:
    """Formatted CI/p ``cells`` with :data:`NO_INFERENCE` in place of each row not fit for inference (``ok``,
    :func:`inference_mask`)."""
    return [c if o else NO_INFERENCE for c, o in zip(cells, ok)]


def row_notes(keys: Sequence[str], notes: Sequence[Any]) -> tuple[str, ...]:
    """07's per-row notes for a table's notes, each once, with the rows it concerns (``"C1, C3: only one
    document: ..."``), in first-seen order; empty notes are left out."""
    by_note: dict[str, list[str]] = {}
    for k, n in zip(keys, notes):
        if isinstance(n, str) and n.strip():
            by_note.setdefault(n.strip(), [])
            if str(k) not in by_note[n.strip()]:
                by_note[n.strip()].append(str(k))
    return tuple(f"{', '.join(k)}: {n}" for n, k in by_note.items())


#: The mark of a condition or contrast a user added (``conditions.extra``, ``contrasts.extra``), in tables and figures.
USER_MARK = "§"
#: What that mark means, printed under every table that carries it.
USER_NOTE = (f"{USER_MARK} user-added (conditions.extra / contrasts.extra): exploratory, outside the paper's "
             "design; its contrasts are a family of their own (Holm within it), apart from the confirmatory four")


def is_user_condition(condition: str) -> bool:
    """True for a condition the paper does not declare (a run builds only the paper's and ``conditions.extra``)."""
    return str(condition) not in design.CONDITION_NAMES


#: The mark of a contrast whose placebo is not a clean placebo (:func:`placebo_marks`), in tables and figures.
PLACEBO_MARK = "‡"


def placebo_marks(buckets: pd.DataFrame | None, contrasts: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The contrasts whose placebo is not a placebo, each with why: when some (document, heading path) pairs of
    a placebo condition's rows of 04's ``placebo_buckets`` kept a path of their own document (``same_doc`` > 0: no
    cross-document derangement exists in a depth bucket where one document holds more than half of the pairs),
    every contrast of ``contrasts`` (``stats.contrasts`` or ``contrasts.extra``) with that condition compares
    against chunks that partly carry their own real path, so it is biased toward 0. Empty when every placebo is
    clean or the table is missing."""
    if buckets is None or not len(buckets) or "same_doc" not in buckets:
        return {}
    out = {}
    for name, pair in contrasts.items():
        for cond in pair:
            rows = buckets[buckets["condition"] == cond]
            total = rows[rows["depth"].astype(str) == "all"]
            rows = total if len(total) else rows
            same, pairs = int(rows["same_doc"].sum()), int(rows["pairs"].sum())
            if same <= 0:
                continue
            chunks = ""
            if {"same_doc_chunks", "chunks"} <= set(rows.columns):
                chunks = f" ({int(rows['same_doc_chunks'].sum()):,} of {int(rows['chunks'].sum()):,} placebo chunks)"
            out[str(name)] = (f"{cond} is not a clean placebo: {same:,} of {pairs:,} (document, heading path) "
                              f"pairs{chunks} kept a path of their own document, because no cross-document "
                              "derangement exists where one document holds more than half of a depth bucket "
                              f"(04_chunk_embed/placebo_buckets); {name} = {pair[0]} − {pair[1]} is biased "
                              "toward 0")
            break
    return out
