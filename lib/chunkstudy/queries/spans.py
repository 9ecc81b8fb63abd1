"""Span sampling for generated queries (step 1 of the generated path in :mod:`chunkstudy.queries`): sentences,
sentence runs and top-level sections of each document, and the seeded per-document samples of every query
type."""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np
import pandas as pd

from . import leakage
from ..params import QueriesParams
from ..corpus import model as docmodel


SAMPLE_COLUMNS = ["query_id", "doc_id", "qtype", "spans", "top_level"]


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
                     params: QueriesParams) -> list[dict]:
    """Span samples of one document (see module doc): ``{query_id, doc_id, qtype, spans, top_level}`` rows.

    ``query_id`` is ``<doc_id>::<qtype><nn>``; ``spans`` are sorted ``[start, end]`` pairs; ``top_level`` the
    top-level section id of each span. ``params``: the ``queries`` section or its record.
    """
    p = params
    per_doc, min_words = p.per_doc, p.min_span_words
    rng = _doc_rng(p.seed, doc_id)
    runs = sentence_runs(text, paragraphs, sections, p.factoid_span_sentences, min_words)
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
                 params: QueriesParams) -> pd.DataFrame:
    """Span samples for every document (columns :data:`SAMPLE_COLUMNS`), documents in table order; ``params``:
    the ``queries`` section or its record."""
    paras_by = {str(d): g for d, g in paragraphs.groupby(paragraphs["doc_id"].astype(str), sort=False)}
    secs_by = {str(d): g for d, g in sections_gold.groupby(sections_gold["doc_id"].astype(str), sort=False)}
    rows = []
    for doc_id, text in zip(documents["doc_id"].astype(str), documents["text"]):
        if doc_id not in paras_by or doc_id not in secs_by:
            raise ValueError(f"queries: document {doc_id!r} has no rows in the "
                             f"{'paragraphs' if doc_id not in paras_by else 'sections_gold'} table (written by 01)")
        rows.extend(sample_doc_spans(doc_id, text, paras_by[doc_id], secs_by[doc_id], params))
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
