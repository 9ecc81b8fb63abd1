"""The generated path end to end (steps 2-5 in :mod:`chunkstudy.queries`): generation, the leakage filter in
two rounds around the paraphrase, the seeded balancing of finals, and the funnel."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np
import pandas as pd

from .. import paper
from . import leakage
from ..params import QueriesParams, QueriesTargetsParams
from .common import QTYPES, QUERY_COLUMNS, _funnel_rows, _jsonable, _score_stats, _spans
from .prompts import (PARAPHRASE, PROMPTS, QUERY_SCHEMA, generation_messages, names_title, paraphrase_messages,
                      parse_query, reply_shape, template_hash)
from .spans import sample_spans


GEN_STEPS = ("spans sampled", "generated", "survivors (round 1)", "paraphrased", "paraphrase survivors (round 2)",
             "balanced finals")


def _verdict(query: str | None, span_texts: list[str], qtype: str, title: str, p: Any) -> dict:
    """The leakage filter's verdict on one query (``p``: the ``queries`` record)."""
    if query is None:
        return {"passed": False, "reason": "unusable"}
    r = leakage.check(query, span_texts, rouge_max=p.rouge_max, ngram=p.ngram, use_stemmer=p.rouge_stemmer)
    if qtype == "underspecified" and names_title(query, title):
        r = {**r, "passed": False, "reason": "named" if r["reason"] == "ok" else r["reason"] + "+named"}
    return r


def _filter_round(row: dict, rep, params, text_key: str, round_key: str, error_status: str, prefix: str) -> bool:
    """One round of the two-round filter on ``row``: the parsed reply goes under ``text_key`` and the verdict under
    ``round_key``. False, with the row's status and reason set, when the call failed (``error_status``) or the query
    is unusable or rejected (``prefix`` + ``unusable`` / ``rejected``). The reply's shape (:func:`reply_shape`, or
    ``failed``) goes under ``<text_key>_shape``; cut replies are counted in ``cut_calls`` / ``cut_failed``."""
    row["cut_calls"] = row.get("cut_calls", 0) + bool(getattr(rep, "cuts", 0))
    row["cut_failed"] = row.get("cut_failed", 0) + bool(rep.error and rep.error.startswith("LengthCut"))
    row[text_key + "_shape"] = "failed" if rep.error else reply_shape(rep.text)
    if rep.error:
        row.update(status=error_status, reason=rep.error)
        return False
    q = parse_query(rep.text)
    row[text_key] = q
    v = _verdict(q, row["span_texts"], row["qtype"], row["title"], params)
    row[round_key] = v
    if not v["passed"]:
        row.update(status=prefix + ("unusable" if q is None else "rejected"), reason=v["reason"])
    return v["passed"]


def generate(samples: pd.DataFrame, documents: pd.DataFrame, params: QueriesParams, client,
             request_factory: Callable[..., Any] | None = None) -> pd.DataFrame:
    """Run generation → filter → paraphrase → filter over span samples; one row per sample (the log).

    Columns: the sample's, ``title``, ``status`` (``model_error``, ``unusable``, ``rejected``,
    ``paraphrase_error``, ``paraphrase_unusable``, ``paraphrase_rejected``, ``kept``), ``reason``,
    ``generated_text``, ``text`` (the paraphrase), ``round1``/``round2`` (filter scores), ``model``,
    ``prompt_hash``, ``prompt_template``, ``paraphrase_prompt_hash``, and how the replies came:
    ``generated_text_shape`` / ``text_shape`` (:func:`reply_shape`, ``failed`` for a failed call, None when not
    asked), ``cut_calls`` (calls whose reply stopped at its budget and was asked again) and ``cut_failed`` (calls
    that failed cut).
    """
    from .. import llm

    make = request_factory or llm.Request
    docs = documents.assign(doc_id=documents["doc_id"].astype(str)).set_index("doc_id")
    max_tokens, max_chars = params.gen_reply_tokens, params.prompt_max_chars
    rows, reqs = [], []
    for s in samples.itertuples(index=False):
        text, title = docs.at[s.doc_id, "text"], str(docs.at[s.doc_id, "title"])
        spans = _spans(s.spans)
        span_texts = [text[a:b] for a, b in spans]
        msgs = generation_messages(s.qtype, title, span_texts, max_chars)
        rows.append({**s._asdict(), "spans": spans, "title": title, "span_texts": span_texts,
                     "prompt_hash": llm.prompt_hash(msgs), "prompt_template": template_hash(PROMPTS[s.qtype])})
        reqs.append(make(msgs, json_schema=QUERY_SCHEMA, max_tokens=max_tokens, tag=f"queries:gen:{s.query_id}"))
    replies = client.generate(reqs, desc="queries: generate") if reqs else []
    para_idx, para_reqs = [], []
    for i, (row, rep) in enumerate(zip(rows, replies)):
        row.update(model=rep.model, generated_reply=rep.text, generated_text=None, text=None, round1=None,
                   round2=None, paraphrase_prompt_hash=None, text_shape=None)
        if not _filter_round(row, rep, params, "generated_text", "round1", "model_error", ""):
            continue
        msgs = paraphrase_messages(row["generated_text"])
        row["paraphrase_prompt_hash"] = llm.prompt_hash(msgs)
        para_idx.append(i)
        para_reqs.append(make(msgs, json_schema=QUERY_SCHEMA, max_tokens=max_tokens,
                              tag=f"queries:paraphrase:{row['query_id']}"))
    para = client.generate(para_reqs, desc="queries: paraphrase") if para_reqs else []
    for i, rep in zip(para_idx, para):
        if _filter_round(rows[i], rep, params, "text", "round2", "paraphrase_error", "paraphrase_"):
            rows[i].update(status="kept", reason="ok")
    cols = list(samples.columns) + ["title", "status", "reason", "generated_text", "text", "round1", "round2",
                                    "model", "prompt_hash", "prompt_template", "paraphrase_prompt_hash",
                                    "generated_text_shape", "text_shape", "cut_calls", "cut_failed"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)


def balance(kept: pd.DataFrame, targets: QueriesTargetsParams, seed: int) -> pd.DataFrame:
    """At most ``targets[qtype]`` rows per type by a seeded round-robin over documents (see module doc).
    ``targets``: the ``queries.targets`` record.

    Deterministic for a given seed and independent of the input row order: documents and each document's rows
    are sorted by id before the seeded shuffles.
    """
    picked = []
    for t_i, qtype in enumerate(sorted(kept["qtype"].unique())):
        target = int(getattr(targets, qtype))
        rng = np.random.default_rng([int(seed), 7919, t_i, *map(ord, qtype)])
        sub = kept[kept["qtype"] == qtype].sort_values("query_id")
        by_doc = {d: list(g["query_id"]) for d, g in sub.groupby("doc_id", sort=True)}
        docs = list(by_doc)
        order = [docs[i] for i in rng.permutation(len(docs))]
        queues = {d: [by_doc[d][i] for i in rng.permutation(len(by_doc[d]))] for d in order}
        chosen: list[str] = []
        while len(chosen) < target and any(queues.values()):
            for d in order:
                if queues[d] and len(chosen) < target:
                    chosen.append(queues[d].pop(0))
        picked.extend(chosen)
    out = kept[kept["query_id"].isin(set(picked))]
    return out.sort_values(["doc_id", "qtype", "query_id"]).reset_index(drop=True)


def pick_docs(documents: pd.DataFrame, max_docs: int | None, seed: int) -> pd.DataFrame:
    """``documents`` itself when ``max_docs`` is None or not smaller; else ``max_docs`` of them drawn with
    ``seed`` (from the doc_ids in sorted order, so the draw does not depend on row order), in table order."""
    if max_docs is None or max_docs >= len(documents):
        return documents
    ids = sorted(documents["doc_id"].astype(str))
    keep = {ids[i] for i in np.random.default_rng([int(seed), 104729]).choice(len(ids), size=max_docs,
                                                                              replace=False)}
    return documents[documents["doc_id"].astype(str).isin(keep)]


def _paper_funnel(kind: str) -> dict:
    """The paper's query funnel (:mod:`chunkstudy.paper`): generated, survivors, finals, n_docs, finals_by_type."""
    q = paper.values(kind, "queries")
    return {"generated": q["generated"], "survivors": q["survivors"], "finals": q["finals"], "n_docs": q["documents"],
            "finals_by_type": {t: q[f"finals_{t}"] for t in QTYPES}}


def reply_counts(log: pd.DataFrame) -> dict:
    """How the schema-bound replies of the generated path fared (docs/models.md, "No reply is silently cut"), from
    :func:`generate`'s log: per
    call kind (``generate``, ``paraphrase``) the replies of the schema's shape at the first try
    (``parsed_first_try``), read only by the lenient parser (``parsed_leniently``), not at all (``parsed_never``)
    and the failed calls (``failed``); ``parsed_after_correction`` is None: this path asks once, with no
    correction turn. ``cut`` / ``cut_resolved`` / ``cut_failed``: calls whose reply stopped at its budget, then
    finished with a larger one, or failed cut."""
    out: dict = {}
    for kind, col in (("generate", "generated_text_shape"), ("paraphrase", "text_shape")):
        shapes = log[col].dropna() if col in log else pd.Series(dtype=object)
        out[kind] = {"parsed_first_try": int((shapes == "schema").sum()), "parsed_after_correction": None,
                     "parsed_leniently": int((shapes == "lenient").sum()),
                     "parsed_never": int((shapes == "never").sum()), "failed": int((shapes == "failed").sum())}
    cut = int(log["cut_calls"].fillna(0).sum()) if "cut_calls" in log else 0
    failed = int(log["cut_failed"].fillna(0).sum()) if "cut_failed" in log else 0
    out.update(cut=cut, cut_resolved=cut - failed, cut_failed=failed)
    return out


def from_generated(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame,
                   params: QueriesParams, client) -> dict:
    """The generated path end to end; returns ``dict(queries, funnel, summary, log)``.

    With ``queries.max_docs`` set, only a seeded sample of that many documents gets queries (:func:`pick_docs`).
    """
    n_corpus = len(documents)
    documents = pick_docs(documents, params.max_docs, params.seed)
    samples = sample_spans(documents, paragraphs, sections_gold, params)
    log = generate(samples, documents, params, client)
    kept = log[log["status"] == "kept"]
    finals = balance(kept, params.targets, params.seed)
    queries = pd.DataFrame({
        "query_id": finals["query_id"].astype(str), "doc_id": finals["doc_id"].astype(str),
        "qtype": finals["qtype"], "text": finals["text"], "spans": finals["spans"],
        "provenance": [json.dumps(_jsonable({
            "source": "generated", "model": r.model, "prompt_hash": r.prompt_hash,
            "prompt_template": r.prompt_template, "paraphrase_prompt_hash": r.paraphrase_prompt_hash,
            "paraphrase_template": template_hash(PARAPHRASE), "generated_text": r.generated_text,
            "filter_round1": r.round1, "filter_round2": r.round2, "top_level": r.top_level,
            "span_seed": int(params.seed)}), sort_keys=True, ensure_ascii=False)
            for r in finals.itertuples(index=False)],
        "source": "generated",
        "rouge_l": [float(r["rouge_l"]) for r in finals["round2"]],
    }, columns=QUERY_COLUMNS)
    first = log[log["status"].ne("model_error") & log["generated_text"].notna()]
    surv1 = log[log["round1"].map(lambda v: bool(v and v.get("passed")))]
    para = log[log["text"].notna()]
    funnel = _funnel_rows([(GEN_STEPS[0], samples), (GEN_STEPS[1], first), (GEN_STEPS[2], surv1),
                           (GEN_STEPS[3], para), (GEN_STEPS[4], kept), (GEN_STEPS[5], finals)], QTYPES)
    reasons = {
        rnd: {str(k): int(v) for k, v in log.loc[log["status"].isin(sts), "reason"].value_counts().items()}
        for rnd, sts in (("round1", ["rejected"]), ("round2", ["paraphrase_rejected"]))}
    summary = {
        "source": "generated",
        "model": sorted(set(log["model"].dropna())),
        "status_counts": {str(k): int(v) for k, v in log["status"].value_counts().items()},
        "replies": reply_counts(log),
        "rejection_reasons": reasons,
        "steps": {step: int(c) for step, c in funnel.loc[funnel["qtype"] == "all", ["step", "count"]].values},
        "finals_by_type": {t: int((queries["qtype"] == t).sum()) for t in QTYPES},
        "targets": {t: int(getattr(params.targets, t)) for t in QTYPES},
        "n_docs": int(queries["doc_id"].nunique()),
        "n_docs_input": int(len(documents)),
        "n_docs_corpus": int(n_corpus),
        "max_docs": params.max_docs,
        "rouge_l_finals": _score_stats(queries["rouge_l"]),
        "filter": {"rouge_max": float(params.rouge_max), "ngram": int(params.ngram),
                   "rouge_stemmer": bool(params.rouge_stemmer),
                   "ngram_tokens": "lowercase \\w+ runs", "rouge_tokens": "rouge-score tokenizer"},
        "paper": _paper_funnel("wikipedia"),
    }
    return {"queries": queries, "funnel": funnel, "summary": summary, "log": log}
