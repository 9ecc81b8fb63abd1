"""What both query paths share: the query types, the table columns, the funnel rows, and small helpers for spans,
JSON and score summaries."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from .. import stages


QTYPES = ("factoid", "underspecified", "multihop", "structural")


QUERY_COLUMNS = stages.columns("queries")


FUNNEL_COLUMNS = stages.columns("query_funnel")


def _spans(x) -> list[list[int]]:
    if x is None:
        return []
    return [[int(s), int(e)] for s, e in x]


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars].rstrip() + " …"


def _funnel_rows(steps: Sequence[tuple[str, pd.DataFrame]], qtypes: Sequence[str]) -> pd.DataFrame:
    rows = []
    for stage, (step, df) in enumerate(steps):
        for qtype in [*qtypes, "all"]:
            sub = df if qtype == "all" else df[df["qtype"] == qtype]
            rows.append({"stage": stage, "step": step, "qtype": qtype, "count": int(len(sub)),
                         "n_docs": int(sub["doc_id"].nunique())})
    return pd.DataFrame(rows, columns=FUNNEL_COLUMNS)


def _score_stats(x: pd.Series) -> dict:
    x = x.dropna().astype(float)
    if not len(x):
        return {}
    return {"min": float(x.min()), "p10": float(x.quantile(0.1)), "median": float(x.median()),
            "p90": float(x.quantile(0.9)), "max": float(x.max())}


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, float) and np.isnan(v):
        return None
    return v
