"""The 03_queries stage: :func:`build_queries` dispatches on ``queries.source``; the rest is what the notebook
and ``funnel.json`` show (counts per type, examples, the model and what it can support)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from ..params import LLMParams, QueriesParams
from .common import _cut, _spans
from .generated import from_generated
from .harvest import from_harvested
from ..errors import ChunkstudyError


class QueriesError(ChunkstudyError, ValueError):
    """03_queries has no usable query: the message names the corpus, ``queries.source`` and the funnel."""


def build_queries(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame,
                  harvested: pd.DataFrame | None, queries_params: QueriesParams, client=None,
                  where: str = "") -> dict:
    """The 03_queries stage: ``dict(queries=DataFrame, funnel=DataFrame, summary=dict)`` (+ ``log`` when
    generated). ``queries_params`` is the ``queries`` parameter section; ``client`` an :mod:`llm` client
    (needed only for ``source: generated``); ``where`` names the corpus in errors. No usable query at all
    raises :class:`QueriesError` with the funnel's counts: 03 is the stage that knows (04 would embed every chunk
    and 05 fail on an empty query table)."""
    p = queries_params
    source = p.source
    if source == "harvested":
        if harvested is None:
            raise ValueError("queries.source is 'harvested' but no harvested table was given (01 writes it for "
                             "QASPER and the demo)")
        out = from_harvested(documents, harvested, p)
    elif source == "generated":
        if client is None:
            raise ValueError("queries.source is 'generated' but no model client was given: set llm.backend in "
                             "the parameter file (see llm.make_client)")
        out = from_generated(documents, paragraphs, sections_gold, p, client)
    else:
        raise ValueError(f"queries.source {source!r} is not one of ['harvested', 'generated']")
    if out["queries"].empty:
        f = out["funnel"]
        steps = f[f["qtype"] == "all"] if "qtype" in f and (f["qtype"] == "all").any() else f
        counts = " -> ".join(f"{r.step} {int(r.count)}" for r in steps.itertuples())
        raise QueriesError(f"03_queries: corpus {where!r} has no usable query (queries.source {source!r}): "
                           f"{counts or 'nothing to start from'}; "
                           + ("written by 01_corpus/harvested" if source == "harvested" else
                              "no generated query survived those steps (the model's replies are in its cache, "
                              "llm.cache)") + ". Nothing downstream could be computed.")
    return out


def by_type(queries_table: pd.DataFrame) -> pd.DataFrame:
    """Per query type: queries, documents, mean gold spans per query, median ROUGE-L against the evidence."""
    t = queries_table.assign(n_spans=queries_table["spans"].map(len))
    if "rouge_l" not in t.columns:
        t = t.assign(rouge_l=np.nan)
    return t.groupby("qtype").agg(queries=("query_id", "size"), documents=("doc_id", "nunique"),
                                  mean_spans=("n_spans", "mean"), median_rouge_l=("rouge_l", "median"))


def inputs_overview(corpus: str, source: str, documents: pd.DataFrame, harvested: pd.DataFrame | None) -> dict:
    """What 03 starts from: the corpus, ``queries.source``, the documents and, for harvested queries, the
    harvested questions (None for generated ones, which read no harvested table)."""
    return {"corpus": corpus, "source": source, "documents": len(documents),
            "harvested": None if harvested is None else len(harvested)}


def client_for(source: str, llm_params: LLMParams, cache_dir) -> Any:
    """The cached LLM client generated queries need (:func:`chunkstudy.llm.make_client`); None for harvested
    queries, which call no model."""
    from .. import llm

    return llm.make_client(llm_params, cache_dir) if source == "generated" else None


def funnel_facts(summary: Mapping[str, Any], llm_params: LLMParams, source: str, client: Any) -> dict:
    """03's ``funnel.json``: the funnel summary of :func:`build_queries`, the capability note and, when a model
    wrote the queries, what it was (:func:`chunkstudy.llm.describe`)."""
    from .. import llm

    return {**summary, "note": capability_note(llm_params, source),
            "llm": llm.describe(client) if client is not None else None}


def capability_note(llm_params: LLMParams, source: str) -> str:
    """One plain sentence on what the queries can support, for the notebook and the reports."""
    if source == "harvested":
        return "Queries are harvested human-written questions with gold evidence: no language model wrote them."
    lp = llm_params
    model = lp.model or lp.backend
    if lp.gguf_file:
        model = f"{model} ({lp.gguf_file})"
    if not lp.capable:
        return (f"Queries were generated by {model}, a model far below the study's (Gemma-4-26B-A4B; llm.capable is "
                "false): this run proves the path (sampling, filter, paraphrase, balancing), not research results.")
    return f"Queries were generated by {model} (llm.capable is true: a model of the study's class)."


def examples(queries_table: pd.DataFrame, documents: pd.DataFrame, per_type: int, seed: int,
             max_chars: int = 300) -> pd.DataFrame:
    """A few queries per type beside the text of their gold spans (each cut to ``max_chars``, spans joined by
    `` ‖ ``), picked with ``seed``: ``[qtype, query_id, text, rouge_l, n_spans, span_text]``."""
    texts = dict(zip(documents["doc_id"].astype(str), documents["text"]))
    rows = []
    for qtype, g in queries_table.groupby("qtype", sort=True):
        pick = g.sample(n=min(per_type, len(g)), random_state=seed)
        for r in pick.itertuples(index=False):
            spans = _spans(r.spans)
            rows.append({"qtype": qtype, "query_id": r.query_id, "text": r.text,
                         "rouge_l": float(r.rouge_l) if "rouge_l" in g.columns else float("nan"),
                         "n_spans": len(spans),
                         "span_text": " ‖ ".join(_cut(texts[str(r.doc_id)][a:b], max_chars) for a, b in spans)})
    return pd.DataFrame(rows, columns=["qtype", "query_id", "text", "rouge_l", "n_spans", "span_text"])
