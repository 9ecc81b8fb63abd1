"""What the builders share: display orders, the mechanism questions and Table 4 rows of the declared
conditions (:mod:`chunkstudy.design`), the paper's numbers in the tables' shape (:mod:`chunkstudy.paper`, their
one home) and the input check."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from .. import design, paper, stages
from ..config import SCHEMA

#: Display order of conditions (the paper's), from the declared conditions (:mod:`chunkstudy.design`).
CONDITION_ORDER: tuple[str, ...] = design.CONDITION_NAMES
#: Display order of metrics (primary first, then the secondary ladder) under the default ``metrics`` parameters;
#: tables order any metric name by :func:`chunkstudy.design.metric_order_key`.
METRIC_ORDER: tuple[str, ...] = tuple(design.metric_names({k: p.default for k, p in SCHEMA["metrics"].items()}))
#: The mechanism question each pre-registered contrast asks (paper §3.2), keyed by (condition_a, condition_b).
CONTRAST_QUESTIONS: dict[tuple[str, str], str] = {(c.a, c.b): c.question for c in design.CONTRASTS}
#: Table 4 of the paper (appendix; DESIGN.md "Conditions"): boundaries, prefix at embedding time, retrieval, from
#: each declared condition (:meth:`chunkstudy.design.Condition.table4`, stage 1 keeping the paper's 5 sections).
CONDITIONS: dict[str, tuple[str, str, str]] = {
    c.name: c.table4(paper.value("study", "design", "route_sections")) for c in design.CONDITIONS}

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
