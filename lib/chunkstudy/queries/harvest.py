"""The harvested path (QASPER, demo): 01's questions with gold spans become ``queries`` after their spans are
checked against the documents; leakage scores are recorded as description, never used to filter."""

from __future__ import annotations

import json

import pandas as pd

from . import leakage
from ..params import QueriesParams
from .common import QUERY_COLUMNS, _funnel_rows, _jsonable, _score_stats, _spans


HARVEST_STEPS = ("harvested", "with gold spans", "finals")


def from_harvested(documents: pd.DataFrame, harvested: pd.DataFrame, params: QueriesParams) -> dict:
    """The harvested path: questions with gold spans from 01 become ``queries`` (same schema).

    Rows without spans are dropped (counted in the funnel); spans outside their document raise. Leakage scores
    are computed as description only. Extra columns of ``harvested`` go into ``provenance``.
    """
    texts = dict(zip(documents["doc_id"].astype(str), documents["text"]))
    base = {"query_id", "doc_id", "qtype", "text", "spans"}
    extra = [c for c in harvested.columns if c not in base]
    rows, kept_idx = [], []
    for i, r in enumerate(harvested.itertuples(index=False)):
        d = r._asdict()
        doc_id, qid = str(d["doc_id"]), str(d["query_id"])
        if doc_id not in texts:
            raise ValueError(f"harvested: query {qid!r} names document {doc_id!r}, absent from documents (01)")
        spans = _spans(d["spans"])
        bad = [s for s in spans if not 0 <= s[0] < s[1] <= len(texts[doc_id])]
        if bad:
            raise ValueError(f"harvested: query {qid!r}: spans {bad} lie outside document {doc_id!r} "
                             f"(length {len(texts[doc_id])}); written by 01_corpus")
        if not spans:
            continue
        scores = leakage.check(str(d["text"]), [texts[doc_id][a:b] for a, b in spans],
                               rouge_max=params.rouge_max, ngram=params.ngram, use_stemmer=params.rouge_stemmer)
        prov = {"source": "harvested", "leakage": scores, **{c: d[c] for c in extra}}
        rows.append({"query_id": qid, "doc_id": doc_id, "qtype": str(d["qtype"]), "text": str(d["text"]),
                     "spans": spans, "provenance": json.dumps(_jsonable(prov), sort_keys=True, ensure_ascii=False,
                                                               default=str),
                     "source": "harvested", "rouge_l": float(scores["rouge_l"])})
        kept_idx.append(i)
    queries = pd.DataFrame(rows, columns=QUERY_COLUMNS)
    with_spans = harvested.iloc[kept_idx].assign(doc_id=lambda x: x["doc_id"].astype(str))
    all_h = harvested.assign(doc_id=harvested["doc_id"].astype(str))
    qtypes = sorted(harvested["qtype"].astype(str).unique())
    funnel = _funnel_rows([(HARVEST_STEPS[0], all_h), (HARVEST_STEPS[1], with_spans),
                           (HARVEST_STEPS[2], queries)], qtypes)
    n_spans = queries["spans"].map(len)
    summary = {
        "source": "harvested",
        "steps": {step: int(c) for step, c in funnel.loc[funnel["qtype"] == "all", ["step", "count"]].values},
        "finals_by_type": {t: int((queries["qtype"] == t).sum()) for t in qtypes},
        "n_docs": int(queries["doc_id"].nunique()),
        "n_docs_input": int(len(documents)),
        "multi_span_share": float((n_spans > 1).mean()) if len(queries) else float("nan"),
        "mean_spans_per_query": float(n_spans.mean()) if len(queries) else float("nan"),
        "rouge_l": _score_stats(queries["rouge_l"]),
        "would_fail_filter": int(sum(not json.loads(p)["leakage"]["passed"] for p in queries["provenance"])),
    }
    return {"queries": queries, "funnel": funnel, "summary": summary}
