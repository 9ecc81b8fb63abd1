"""The query stage (03_queries): leakage-controlled synthetic queries, or harvested human questions.

Paper, Section 5.1. Two paths produce the same ``queries`` table (DESIGN.md, "Data contracts"):
``query_id, doc_id, qtype, text, spans, provenance`` (+ ``source``, ``rouge_l``). ``spans`` is a list of
``[start, end]`` half-open character offsets into ``documents.text``; ``provenance`` is a JSON string.

**Generated** (Wikipedia; ``queries.source: generated``). Spans first, then text:

1. :func:`sample_spans` — the pipeline picks the gold evidence per document with a seeded generator
   (``queries.seed`` and the doc_id, so a document's spans do not depend on which other documents are present):

   * ``factoid`` — one *sentence run*: ``queries.factoid_span_sentences`` consecutive sentences inside one
     paragraph (fewer when the paragraph is shorter), at least ``queries.min_span_words`` words;
   * ``underspecified`` — one sentence run, disjoint from every factoid/underspecified run of the document;
     the prompt demands a vague referent ("the commander", never the proper name);
   * ``multihop`` — two sentence runs in two different top-level sections;
   * ``structural`` — exactly one whole top-level section: from its level-1 heading's first paragraph to the
     last paragraph before the next level-1 heading (offsets from the paragraph table).

   Up to ``queries.per_doc`` samples per type per document (fewer when the document lacks candidates).
   Sentences come from pysbd (English, ``clean=False``) run on each paragraph; a sentence's span excludes its
   trailing whitespace. Top-level sections are level-1 rows with their descendants (``model.top_level_ids``);
   the lead (text before the first heading) is a top-level section of its own.
2. One model call per sample writes a query (prompts per type below; the model sees the span text, never
   reports evidence: its only output is ``{"query": ...}``).
3. :mod:`chunkstudy.leakage` filter, round 1 (ROUGE-L F1 > ``rouge_max`` or any shared ``ngram``-gram rejects);
   an ``underspecified`` query that contains the document title is also rejected (``named``).
4. A second call paraphrases each survivor (it sees only the query); the paraphrase passes the same filter
   (round 2) and is what enters the benchmark.
5. :func:`balance` — per type, at most ``queries.targets[type]`` finals, picked by a seeded round-robin over
   documents (documents shuffled, each document's survivors shuffled, one per document per round), so finals
   spread over as many documents as possible.

Replies are parsed leniently (:func:`parse_query`): the JSON object's ``query``; else the first non-empty line
without "Query:"-style labels or quotes. A reply with fewer than three words is ``unusable``.

**Harvested** (QASPER, demo; ``queries.source: harvested``): :func:`from_harvested` passes the 01 ``harvested``
questions through with their gold spans, checks the spans against the documents, and records the leakage
scores as description (no filtering: the questions are human-written).
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import leakage, paper, stages
from .corpus import model as docmodel

QTYPES = ("factoid", "underspecified", "multihop", "structural")
QUERY_COLUMNS = stages.columns("queries")
SAMPLE_COLUMNS = ["query_id", "doc_id", "qtype", "spans", "top_level"]
FUNNEL_COLUMNS = stages.columns("query_funnel")
GEN_STEPS = ("spans sampled", "generated", "survivors (round 1)", "paraphrased", "paraphrase survivors (round 2)",
             "balanced finals")
HARVEST_STEPS = ("harvested", "with gold spans", "finals")

QUERY_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                "additionalProperties": False}

SYSTEM = ("You write search queries for testing a document retrieval system. "
          'Reply with JSON only, in the form {"query": "..."}.')
RULES = ("\n\nRules: write the query in your own words. Do not copy any run of four or more words from the "
         "text above, and avoid its distinctive phrasing. Do not mention 'the passage', 'the text', 'the section' "
         "or 'the article'. Do not answer the query.\n"
         'Reply with JSON only: {{"query": "<your query>"}}')  # doubled braces: PROMPTS go through str.format
PROMPTS = {
    "factoid": ('The following passage comes from the document "{title}".\n\nPassage:\n"""\n{evidence1}\n"""\n\n'
                "Write one specific factual question that this passage answers." + RULES),
    "underspecified": ('The following passage comes from the document "{title}".\n\nPassage:\n"""\n{evidence1}\n'
                       '"""\n\nWrite one question that this passage answers, but refer to its main person, place, '
                       "object or event only vaguely, the way someone who has forgotten the name would (for "
                       'example "the commander", "the city", "the ship", "the treaty"). Never use a proper name '
                       "from the passage, and never use the document title." + RULES),
    "multihop": ('The following two passages come from different sections of the document "{title}".\n\n'
                 'Passage 1:\n"""\n{evidence1}\n"""\n\nPassage 2:\n"""\n{evidence2}\n"""\n\n'
                 "Write one question that can only be answered by combining information from both passages."
                 + RULES),
    "structural": ('The following is one whole section of the document "{title}".\n\nSection:\n"""\n{evidence1}\n'
                   '"""\n\nWrite one broad question whose answer is this section as a whole (what it covers or '
                   "explains), not a single detail." + RULES),
}
PARAPHRASE = ("Paraphrase this search query. Keep its meaning, and keep it exactly as specific or as vague as it is: "
              "add no names, facts or details. Use different words and a different sentence structure.\n\n"
              'Query: {query}\n\nReply with JSON only: {{"query": "<the paraphrase>"}}')


def template_hash(template: str) -> str:
    """SHA-256 (16 hex chars) of a prompt template: the prompt *version* recorded with every query."""
    return hashlib.sha256((SYSTEM + "\n" + template).encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------------- span sampling


@lru_cache(maxsize=1)
def _segmenter():
    import pysbd

    return pysbd.Segmenter(language="en", clean=False, char_span=False)


def sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Sentences of the paragraph ``text[start:end]`` as absolute half-open offsets, whitespace trimmed.

    pysbd with ``clean=False`` returns segments whose concatenation is the input, so offsets are running sums
    (never a text search).
    """
    block = text[start:end]
    out, pos = [], start
    for seg in _segmenter().segment(block) if block.strip() else []:
        s = pos + (len(seg) - len(seg.lstrip()))
        e = pos + len(seg.rstrip())
        if e > s:
            out.append((s, e))
        pos += len(seg)
    if pos != end:  # pysbd broke its own contract: fall back to the whole paragraph as one sentence
        stripped = block.strip()
        s = start + (len(block) - len(block.lstrip()))
        return [(s, s + len(stripped))] if stripped else []
    return out


def top_level_sections(sections: pd.DataFrame, paragraphs: pd.DataFrame) -> pd.DataFrame:
    """One document's top-level sections: ``[section_id, title, first_para, last_para, start, end]``.

    A top-level section is a level-1 row with all its descendants; its span runs from the start of its first
    paragraph to the end of its last (paragraph-table offsets). Sections holding no paragraph are left out.
    """
    paras = paragraphs.sort_values("para_idx").reset_index(drop=True)
    top = docmodel.top_level_ids(sections)
    rows: dict[str, dict] = {}
    for r in sections.itertuples(index=False):
        root = top[r.section_id]
        if r.section_id == root:
            rows[root] = {"section_id": root, "title": r.title, "first_para": None, "last_para": None}
        if int(r.last_para) >= int(r.first_para):
            g = rows[root]
            g["first_para"] = int(r.first_para) if g["first_para"] is None else min(g["first_para"], int(r.first_para))
            g["last_para"] = int(r.last_para) if g["last_para"] is None else max(g["last_para"], int(r.last_para))
    out = [{**g, "start": int(paras["start"].iat[g["first_para"]]), "end": int(paras["end"].iat[g["last_para"]])}
           for g in rows.values() if g["first_para"] is not None]
    return pd.DataFrame(out, columns=["section_id", "title", "first_para", "last_para", "start", "end"])


def _doc_rng(seed: int, doc_id: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(hashlib.sha256(str(doc_id).encode()).hexdigest()[:15], 16)])


def _n_words(text: str) -> int:
    return len(leakage.words(text))


def sentence_runs(text: str, paragraphs: pd.DataFrame, sections: pd.DataFrame, n_sentences: int,
                  min_words: int) -> list[dict]:
    """Every candidate sentence run of one document: ``{start, end, para_idx, top}`` (``top`` = top-level
    section id), in document order. A run is ``n_sentences`` consecutive sentences of one paragraph (the whole
    paragraph when it has fewer) with at least ``min_words`` words."""
    paras = paragraphs.sort_values("para_idx").reset_index(drop=True)
    owner = {}
    tops = docmodel.top_level_ids(sections)
    for r in sections.itertuples(index=False):
        for p in range(int(r.first_para), int(r.last_para) + 1):
            owner[p] = tops[r.section_id]
    runs = []
    for p, s, e in zip(paras["para_idx"], paras["start"], paras["end"]):
        sents = sentence_spans(text, int(s), int(e))
        k = min(n_sentences, len(sents))
        for i in range(len(sents) - k + 1 if k else 0):
            a, b = sents[i][0], sents[i + k - 1][1]
            if _n_words(text[a:b]) >= min_words:
                runs.append({"start": a, "end": b, "para_idx": int(p), "top": owner.get(int(p))})
    return runs


def sample_doc_spans(doc_id: str, text: str, paragraphs: pd.DataFrame, sections: pd.DataFrame,
                     params: Mapping[str, Any]) -> list[dict]:
    """Span samples of one document (see module doc): ``{query_id, doc_id, qtype, spans, top_level}`` rows.

    ``query_id`` is ``<doc_id>::<qtype><nn>``; ``spans`` are sorted ``[start, end]`` pairs; ``top_level`` the
    top-level section id of each span.
    """
    per_doc, min_words = int(params["per_doc"]), int(params["min_span_words"])
    rng = _doc_rng(params["seed"], doc_id)
    runs = sentence_runs(text, paragraphs, sections, int(params["factoid_span_sentences"]), min_words)
    out: list[dict] = []

    def emit(qtype: str, picks: list[list[dict]]) -> None:
        for i, pick in enumerate(picks):
            pick = sorted(pick, key=lambda r: r["start"])
            out.append({"query_id": f"{doc_id}::{qtype}{i:02d}", "doc_id": doc_id, "qtype": qtype,
                        "spans": [[int(r["start"]), int(r["end"])] for r in pick],
                        "top_level": [r["top"] for r in pick]})

    # factoid / underspecified: disjoint runs in random order, dealt alternately
    chosen: list[dict] = []
    for j in rng.permutation(len(runs)):
        r = runs[j]
        if all(r["end"] <= c["start"] or c["end"] <= r["start"] for c in chosen):
            chosen.append(r)
            if len(chosen) == 2 * per_doc:
                break
    emit("factoid", [[r] for r in chosen[0::2]])
    emit("underspecified", [[r] for r in chosen[1::2]])

    # multihop: two runs from two different top-level sections
    by_top: dict[str, list[dict]] = {}
    for r in runs:
        by_top.setdefault(r["top"], []).append(r)
    tops = sorted(by_top)
    pairs, seen = [], set()
    if len(tops) >= 2:
        for _ in range(4 * per_doc):
            t1, t2 = rng.choice(len(tops), size=2, replace=False)
            a = by_top[tops[t1]][int(rng.integers(len(by_top[tops[t1]])))]
            b = by_top[tops[t2]][int(rng.integers(len(by_top[tops[t2]])))]
            key = tuple(sorted(((a["start"], a["end"]), (b["start"], b["end"]))))
            if key not in seen:
                seen.add(key)
                pairs.append([a, b])
            if len(pairs) == per_doc:
                break
    emit("multihop", pairs)

    # structural: whole top-level sections
    secs = top_level_sections(sections, paragraphs)
    secs = secs[[_n_words(text[s:e]) >= min_words for s, e in zip(secs["start"], secs["end"])]]
    pick = sorted(rng.choice(len(secs), size=min(per_doc, len(secs)), replace=False)) if len(secs) else []
    emit("structural", [[{"start": int(secs["start"].iat[i]), "end": int(secs["end"].iat[i]),
                          "top": secs["section_id"].iat[i]}] for i in pick])
    return out


def sample_spans(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame,
                 params: Mapping[str, Any]) -> pd.DataFrame:
    """Span samples for every document (columns :data:`SAMPLE_COLUMNS`), documents in table order."""
    paras_by = {str(d): g for d, g in paragraphs.groupby(paragraphs["doc_id"].astype(str), sort=False)}
    secs_by = {str(d): g for d, g in sections_gold.groupby(sections_gold["doc_id"].astype(str), sort=False)}
    rows = []
    for doc_id, text in zip(documents["doc_id"].astype(str), documents["text"]):
        if doc_id not in paras_by or doc_id not in secs_by:
            raise ValueError(f"queries: document {doc_id!r} has no rows in the "
                             f"{'paragraphs' if doc_id not in paras_by else 'sections_gold'} table (written by 01)")
        rows.extend(sample_doc_spans(doc_id, text, paras_by[doc_id], secs_by[doc_id], params))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


# ------------------------------------------------------------------------------------------- model calls


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars].rstrip() + " …"


def generation_messages(qtype: str, title: str, evidence: Sequence[str], max_chars: int) -> list[dict]:
    """The chat messages asking for one query of ``qtype`` about ``evidence`` (the span texts)."""
    if qtype not in PROMPTS:
        raise ValueError(f"unknown query type {qtype!r}; types: {list(PROMPTS)}")
    need = 2 if qtype == "multihop" else 1
    if len(evidence) != need:
        raise ValueError(f"{qtype} query needs {need} span text(s), got {len(evidence)}")
    fields = {"title": title, **{f"evidence{i + 1}": _cut(t, max_chars) for i, t in enumerate(evidence)}}
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[qtype].format(**fields)}]


def paraphrase_messages(query: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PARAPHRASE.format(query=query)}]


_LABEL = re.compile(r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?(?:query|question|paraphrase|q)\s*[:：]\s*", re.I)


def parse_query(reply: str) -> str | None:
    """The query in a model reply, or ``None`` when the reply holds no usable query (< 3 words).

    Accepts a JSON object with a string ``query`` anywhere in the reply; otherwise the first non-empty line,
    without a leading "Query:"/"Question:" label, bullet, or surrounding quotes.
    """
    if not isinstance(reply, str):
        return None
    text = None
    for m in re.finditer(r"\{.*?\}", reply, flags=re.S):
        try:
            obj = json.loads(m.group())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("query"), str):
            text = obj["query"]
            break
    if text is None:
        lines = [ln for ln in reply.splitlines() if ln.strip() and not ln.strip().startswith(("{", "}", "```"))]
        text = _LABEL.sub("", lines[0]) if lines else ""
    text = " ".join(text.split()).strip().strip("\"'“”‘’`").strip()
    return text if len(leakage.words(text)) >= 3 else None


def names_title(query: str, title: str) -> bool:
    """Whether ``query`` contains the document title as whole words (case-insensitive)."""
    t = leakage.words(title)
    q = leakage.words(query)
    return bool(t) and any(q[i:i + len(t)] == t for i in range(len(q) - len(t) + 1))


# ------------------------------------------------------------------------------------------- the pipeline


def _spans(x) -> list[list[int]]:
    if x is None:
        return []
    return [[int(s), int(e)] for s, e in x]


def _verdict(query: str | None, span_texts: list[str], qtype: str, title: str, params: Mapping) -> dict:
    if query is None:
        return {"passed": False, "reason": "unusable"}
    r = leakage.check(query, span_texts, rouge_max=float(params["rouge_max"]), ngram=int(params["ngram"]),
                      use_stemmer=bool(params["rouge_stemmer"]))
    if qtype == "underspecified" and names_title(query, title):
        r = {**r, "passed": False, "reason": "named" if r["reason"] == "ok" else r["reason"] + "+named"}
    return r


def generate(samples: pd.DataFrame, documents: pd.DataFrame, params: Mapping[str, Any], client,
             request_factory: Callable[..., Any] | None = None) -> pd.DataFrame:
    """Run generation → filter → paraphrase → filter over span samples; one row per sample (the log).

    Columns: the sample's, ``title``, ``status`` (``model_error``, ``unusable``, ``rejected``,
    ``paraphrase_error``, ``paraphrase_unusable``, ``paraphrase_rejected``, ``kept``), ``reason``,
    ``generated_text``, ``text`` (the paraphrase), ``round1``/``round2`` (filter scores), ``model``,
    ``prompt_hash``, ``prompt_template``, ``paraphrase_prompt_hash``.
    """
    from . import llm

    make = request_factory or llm.Request
    docs = documents.assign(doc_id=documents["doc_id"].astype(str)).set_index("doc_id")
    max_tokens, max_chars = int(params["gen_reply_tokens"]), int(params["prompt_max_chars"])
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
                   round2=None, paraphrase_prompt_hash=None)
        if rep.error:
            row.update(status="model_error", reason=rep.error)
            continue
        q = parse_query(rep.text)
        row["generated_text"] = q
        v = _verdict(q, row["span_texts"], row["qtype"], row["title"], params)
        row["round1"] = v
        if not v["passed"]:
            row.update(status="unusable" if q is None else "rejected", reason=v["reason"])
            continue
        msgs = paraphrase_messages(q)
        row["paraphrase_prompt_hash"] = llm.prompt_hash(msgs)
        para_idx.append(i)
        para_reqs.append(make(msgs, json_schema=QUERY_SCHEMA, max_tokens=max_tokens,
                              tag=f"queries:paraphrase:{row['query_id']}"))
    para = client.generate(para_reqs, desc="queries: paraphrase") if para_reqs else []
    for i, rep in zip(para_idx, para):
        row = rows[i]
        if rep.error:
            row.update(status="paraphrase_error", reason=rep.error)
            continue
        q = parse_query(rep.text)
        row["text"] = q
        v = _verdict(q, row["span_texts"], row["qtype"], row["title"], params)
        row["round2"] = v
        if v["passed"]:
            row.update(status="kept", reason="ok")
        else:
            row.update(status="paraphrase_unusable" if q is None else "paraphrase_rejected", reason=v["reason"])
    cols = list(samples.columns) + ["title", "status", "reason", "generated_text", "text", "round1", "round2",
                                    "model", "prompt_hash", "prompt_template", "paraphrase_prompt_hash"]
    return pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)


def balance(kept: pd.DataFrame, targets: Mapping[str, int], seed: int) -> pd.DataFrame:
    """At most ``targets[qtype]`` rows per type by a seeded round-robin over documents (see module doc).

    Deterministic for a given seed and independent of the input row order: documents and each document's rows
    are sorted by id before the seeded shuffles.
    """
    picked = []
    for t_i, qtype in enumerate(sorted(kept["qtype"].unique())):
        target = int(targets.get(qtype, 0))
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


def from_generated(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame,
                   params: Mapping[str, Any], client) -> dict:
    """The generated path end to end; returns ``dict(queries, funnel, summary, log)``.

    With ``queries.max_docs`` set, only a seeded sample of that many documents gets queries (:func:`pick_docs`).
    """
    n_corpus = len(documents)
    documents = pick_docs(documents, params.get("max_docs"), int(params["seed"]))
    samples = sample_spans(documents, paragraphs, sections_gold, params)
    log = generate(samples, documents, params, client)
    kept = log[log["status"] == "kept"]
    finals = balance(kept, params["targets"], int(params["seed"]))
    queries = pd.DataFrame({
        "query_id": finals["query_id"].astype(str), "doc_id": finals["doc_id"].astype(str),
        "qtype": finals["qtype"], "text": finals["text"], "spans": finals["spans"],
        "provenance": [json.dumps(_jsonable({
            "source": "generated", "model": r.model, "prompt_hash": r.prompt_hash,
            "prompt_template": r.prompt_template, "paraphrase_prompt_hash": r.paraphrase_prompt_hash,
            "paraphrase_template": template_hash(PARAPHRASE), "generated_text": r.generated_text,
            "filter_round1": r.round1, "filter_round2": r.round2, "top_level": r.top_level,
            "span_seed": int(params["seed"])}), sort_keys=True, ensure_ascii=False)
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
        "rejection_reasons": reasons,
        "steps": {step: int(c) for step, c in funnel.loc[funnel["qtype"] == "all", ["step", "count"]].values},
        "finals_by_type": {t: int((queries["qtype"] == t).sum()) for t in QTYPES},
        "targets": {t: int(params["targets"].get(t, 0)) for t in QTYPES},
        "n_docs": int(queries["doc_id"].nunique()),
        "n_docs_input": int(len(documents)),
        "n_docs_corpus": int(n_corpus),
        "max_docs": params.get("max_docs"),
        "rouge_l_finals": _score_stats(queries["rouge_l"]),
        "filter": {"rouge_max": float(params["rouge_max"]), "ngram": int(params["ngram"]),
                   "rouge_stemmer": bool(params["rouge_stemmer"]),
                   "ngram_tokens": "lowercase \\w+ runs", "rouge_tokens": "rouge-score tokenizer"},
        "paper": _paper_funnel("wikipedia"),
    }
    return {"queries": queries, "funnel": funnel, "summary": summary, "log": log}


def from_harvested(documents: pd.DataFrame, harvested: pd.DataFrame, params: Mapping[str, Any]) -> dict:
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
                               rouge_max=float(params["rouge_max"]), ngram=int(params["ngram"]),
                               use_stemmer=bool(params["rouge_stemmer"]))
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


def build_queries(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame,
                  harvested: pd.DataFrame | None, queries_params: Mapping[str, Any], client=None) -> dict:
    """The 03_queries stage: ``dict(queries=DataFrame, funnel=DataFrame, summary=dict)`` (+ ``log`` when
    generated). ``queries_params`` is the ``queries`` parameter section; ``client`` an :mod:`llm` client
    (needed only for ``source: generated``)."""
    source = queries_params["source"]
    if source == "harvested":
        if harvested is None:
            raise ValueError("queries.source is 'harvested' but no harvested table was given (01 writes it for "
                             "QASPER and the demo)")
        return from_harvested(documents, harvested, queries_params)
    if source == "generated":
        if client is None:
            raise ValueError("queries.source is 'generated' but no model client was given: set llm.backend in "
                             "the parameter file (see llm.make_client)")
        return from_generated(documents, paragraphs, sections_gold, queries_params, client)
    raise ValueError(f"queries.source {source!r} is not one of ['harvested', 'generated']")


# ------------------------------------------------------------------------------------------- reporting


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


def client_for(source: str, llm_params: Mapping[str, Any], cache_dir) -> Any:
    """The cached LLM client generated queries need (:func:`chunkstudy.llm.make_client`); None for harvested
    queries, which call no model."""
    from . import llm

    return llm.make_client(dict(llm_params), cache_dir) if source == "generated" else None


def funnel_facts(summary: Mapping[str, Any], llm_params: Mapping[str, Any], source: str, client: Any) -> dict:
    """03's ``funnel.json``: the funnel summary of :func:`build_queries`, the capability note and, when a model
    wrote the queries, what it was (:func:`chunkstudy.llm.describe`)."""
    from . import llm

    return {**summary, "note": capability_note(llm_params, source),
            "llm": llm.describe(client) if client is not None else None}


def capability_note(llm_params: Mapping[str, Any], source: str) -> str:
    """One plain sentence on what the queries can support, for the notebook and the reports."""
    if source == "harvested":
        return "Queries are harvested human-written questions with gold evidence: no language model wrote them."
    model = llm_params.get("model") or llm_params.get("backend", "?")
    if llm_params.get("gguf_file"):
        model = f"{model} ({llm_params['gguf_file']})"
    if not llm_params.get("capable", False):
        return (f"Queries were generated by {model}, a model far below the study's (Gemma-4-26B-A4B; llm.capable is "
                "false): this run proves the path (sampling, filter, paraphrase, balancing), not research results.")
    return f"Queries were generated by {model} (llm.capable is true: a model of the study's class)."


def examples(queries_table: pd.DataFrame, documents: pd.DataFrame, per_type: int = 2, seed: int = 0,
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
