"""BM25 diagnostic (paper, Section 5.1): how often does plain lexical retrieval put the gold chunk first?

The paper reports BM25 gold-top-1 of 36.3% (Wikipedia-FA) and 22.7% (QASPER) to show that the benchmark is not
trivially lexical. This module measures the same share over a stated chunking (parameter
``queries.bm25_condition``, default ``G2``: structural chunks of the gold outline, the text between consecutive
section starts, split/merged by the chunking rules).

Scoring (bm25s, ``method="lucene"``; Kamphuis et al. 2020), for query tokens q (a repeated token counts again):

    score(q, c) = Σ_{t ∈ q} idf(t) · tf(t, c) / (tf(t, c) + k1 · (1 − b + b · |c| / avgdl))
    idf(t)      = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))

with N the number of indexed chunks (see *scope* below), |c| the chunk's token count and avgdl the mean over
the indexed chunks. Defaults k1 = 1.5, b = 0.75 (``queries.bm25_k1/b``).

Tokenisation (``bm25s.tokenize``): lowercase, tokens are ``(?u)\\b\\w\\w+\\b`` (two or more word characters),
bm25s's English stopword list removed, no stemming. Chunks are scored on their content text only
(``documents.text[start:end]``): prefixes never take part.

Definitions, stated because the figure depends on them:

* **gold chunk** of a query: the chunk of the query's own document with the largest character overlap with the
  union of the query's gold spans (half-open offsets); ties go to the earlier chunk (smaller ``start``).
* **scope**: ``document`` ranks the query against its own document's chunks (an index over them alone);
  ``corpus`` against every chunk of the corpus (one index). Both are reported; ``queries.bm25_scope`` names
  the headline one.
* **rank** of a chunk: position in the order by (−score, chunk order), 1-based.
* **gold-top-1 (primary)**: the gold chunk has rank 1 *and* a positive score (a query with no scoring term
  ranks nothing first).
* **relevant-top-1 (secondary)**: the rank-1 chunk (positive score) is relevant to at least one gold span under
  the study's relevance rule: it covers ≥ ``span_frac`` (0.5) of the span, or ≥ ``chunk_frac`` (0.8) of the
  chunk lies inside the span.
"""

from __future__ import annotations

import logging
from typing import Sequence

import bm25s
import numpy as np
import pandas as pd

from .. import design, progress, relevance, stages

# bm25s logs one DEBUG line per index; the document scope builds one index per document
logging.getLogger("bm25s").setLevel(logging.WARNING)

TOKENISATION = ("bm25s.tokenize: lowercase, (?u)\\b\\w\\w+\\b tokens, bm25s English stopwords removed, "
                "no stemming; content text only")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """The diagnostic's tokenizer (see module doc) applied to each text."""
    if isinstance(texts, str):
        raise TypeError("tokenize takes a sequence of texts, not one string")
    if len(texts) == 0:
        return []
    return bm25s.tokenize(list(texts), lower=True, stopwords="en", stemmer=None, return_ids=False,
                          show_progress=False)


def build_index(chunk_tokens: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75) -> bm25s.BM25:
    """A bm25s Lucene-variant index over pre-tokenised chunks (index position = chunk order given)."""
    index = bm25s.BM25(k1=k1, b=b, method="lucene")
    index.index([list(t) for t in chunk_tokens], show_progress=False)
    return index


def scores(index: bm25s.BM25, query_tokens: Sequence[str]) -> np.ndarray:
    """BM25 scores of every indexed chunk for one tokenised query (all zeros when no token is indexed)."""
    n = int(index.scores["num_docs"])
    toks = [t for t in query_tokens if t in index.vocab_dict]
    if not toks:
        return np.zeros(n, dtype=np.float64)
    return np.asarray(index.get_scores(toks), dtype=np.float64)


def rank_of(score_vec: np.ndarray, i: int) -> int:
    """1-based rank of item ``i`` under the order (−score, index)."""
    s = score_vec[i]
    return int(1 + np.count_nonzero(score_vec > s) + np.count_nonzero(score_vec[:i] == s))


def chars_in_spans(start: int, end: int, spans: Sequence[Sequence[int]]) -> int:
    """Characters of ``[start, end)`` inside the union of ``spans`` (half-open; spans may overlap, a character
    covered twice counts once)."""
    cut = sorted((max(int(s), start), min(int(e), end)) for s, e in spans)
    total, cur = 0, start
    for s, e in cut:
        s = max(s, cur)
        if e > s:
            total += e - s
            cur = e
    return total


def is_relevant(start: int, end: int, spans: Sequence[Sequence[int]], span_frac: float,
                chunk_frac: float) -> bool:
    """The study's relevance rule for a chunk ``[start, end)`` against any one gold span (docs/design.md, "Metrics"):
    :func:`chunkstudy.relevance.relevant`, the rule the metrics use, so the diagnostic and the metrics agree at
    the thresholds."""
    if not len(spans):
        return False
    starts, ends = zip(*((int(s), int(e)) for s, e in spans))
    return bool(relevance.relevant(start, end, starts, ends, span_frac, chunk_frac).any())


def gold_chunk(chunks: pd.DataFrame, spans: Sequence[Sequence[int]]) -> int:
    """Row position (in ``chunks``, one document's chunks) of the chunk with the largest overlap with the union
    of ``spans``; ties go to the smaller ``start``. -1 when no chunk overlaps."""
    best, best_ov, best_start = -1, 0, 0  # best_start is read only once best_ov > 0 has set it
    for pos, (s, e) in enumerate(zip(chunks["start"].to_numpy(), chunks["end"].to_numpy())):
        ov = chars_in_spans(int(s), int(e), spans)
        if ov > best_ov or (ov == best_ov and ov > 0 and int(s) < best_start):
            best, best_ov, best_start = pos, ov, int(s)
    return best


def _spans(x) -> list[list[int]]:
    return [[int(s), int(e)] for s, e in x]


SCOPES = ("document", "corpus")


def _top1(sv: np.ndarray, rows: pd.DataFrame, gold_pos: int, spans, doc_id: str, span_frac: float,
          chunk_frac: float) -> dict:
    """Rank-1 facts of one score vector over ``rows`` (the chunks the vector scores, in order)."""
    top = int(np.argmax(sv))  # argmax returns the first maximum: the (-score, index) order
    ok = bool(sv[top] > 0)
    r = rows.iloc[top]
    return {"gold_rank": rank_of(sv, gold_pos), "gold_score": float(sv[gold_pos]),
            "top1_chunk_id": str(r["chunk_id"]), "top1_score": float(sv[top]),
            "gold_top1": ok and top == gold_pos,
            "relevant_top1": ok and str(r["doc_id"]) == doc_id and is_relevant(int(r["start"]), int(r["end"]), spans,
                                                                              span_frac, chunk_frac)}


def diagnostic(documents: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, *, k1: float, b: float,
               span_frac: float, chunk_frac: float, scope: str, condition: str = "") -> tuple[pd.DataFrame, dict]:
    """BM25 gold-top-1 for every query, in both scopes; return ``(per_query, summary)``.

    * ``document`` scope: the query is ranked against the chunks of its own document only, with a BM25 index
      built over that document's chunks (idf and avgdl from them);
    * ``corpus`` scope: one index over every chunk of the corpus (as the retrieval stage searches).

    ``scope`` names the primary one (``queries.bm25_scope``), reported as ``gold_top1_share``; both are in the
    summary. ``chunks`` needs doc_id, start, end (one condition's chunks; offsets into ``documents.text``) and may
    carry chunk_id (else ``<doc_id>#<n>``, n counting the document's chunks in table order). ``per_query``
    columns: query_id, doc_id, qtype, gold_chunk_id and, per scope ``s``, gold_rank_s, gold_score_s,
    top1_chunk_id_s, top1_score_s, gold_top1_s, relevant_top1_s.
    """
    if scope not in SCOPES:
        raise ValueError(f"queries.bm25_scope {scope!r} is not one of {list(SCOPES)}")
    stages.check(chunks, "chunks", ("doc_id", "start", "end"), "bm25 diagnostic")
    texts = dict(zip(documents["doc_id"].astype(str), documents["text"]))
    ch = chunks.reset_index(drop=True).assign(doc_id=lambda x: x["doc_id"].astype(str))
    if "chunk_id" not in ch.columns:  # chunking.structural_chunks output: number chunks per document in order
        ch = ch.assign(chunk_id=[f"{d}#{i}" for d, i in zip(ch["doc_id"], ch.groupby("doc_id").cumcount())])
    unknown = sorted(set(ch["doc_id"]) - set(texts))
    if unknown:
        raise ValueError(f"bm25 diagnostic: chunks name documents absent from the documents table: {unknown[:5]}")
    tokens = tokenize([texts[d][int(s):int(e)] for d, s, e in zip(ch["doc_id"], ch["start"], ch["end"])])
    index = build_index(tokens, k1=k1, b=b)
    by_doc = {d: g for d, g in ch.groupby("doc_id", sort=False)}
    doc_index: dict[str, bm25s.BM25] = {}
    q_tokens = tokenize(list(queries["text"]))
    rows = []
    for q, toks in progress.track(list(zip(queries.itertuples(index=False), q_tokens)), desc="BM25 diagnostic",
                                  unit="query"):
        spans, doc_id = _spans(q.spans), str(q.doc_id)
        if not spans:
            raise ValueError(f"bm25 diagnostic: query {q.query_id!r} (doc {doc_id!r}) has no gold spans")
        doc_chunks = by_doc.get(doc_id)
        if doc_chunks is None:
            raise ValueError(f"bm25 diagnostic: query {q.query_id!r}: document {doc_id!r} has no chunks")
        g = gold_chunk(doc_chunks, spans)
        if g < 0:
            raise ValueError(f"bm25 diagnostic: query {q.query_id!r}: no chunk of {doc_id!r} overlaps its spans")
        if doc_id not in doc_index:
            doc_index[doc_id] = build_index([tokens[i] for i in doc_chunks.index], k1=k1, b=b)
        row = {"query_id": str(q.query_id), "doc_id": doc_id, "qtype": q.qtype,
               "gold_chunk_id": str(doc_chunks["chunk_id"].iat[g])}
        facts = {"document": _top1(scores(doc_index[doc_id], toks), doc_chunks, g, spans, doc_id, span_frac,
                                   chunk_frac),
                 "corpus": _top1(scores(index, toks), ch, int(doc_chunks.index[g]), spans, doc_id, span_frac,
                                 chunk_frac)}
        for sc, f in facts.items():
            row.update({f"{k}_{sc}": v for k, v in f.items()})
        rows.append(row)
    cols = ["query_id", "doc_id", "qtype", "gold_chunk_id"] + [
        f"{k}_{sc}" for sc in SCOPES for k in ("gold_rank", "gold_score", "top1_chunk_id", "top1_score", "gold_top1",
                                                "relevant_top1")]
    per_query = pd.DataFrame(rows, columns=cols)
    return per_query, summarize(per_query, condition=condition, scope=scope, n_chunks=len(ch), k1=k1, b=b,
                                span_frac=span_frac, chunk_frac=chunk_frac)


def _shares(per_query: pd.DataFrame, sc: str) -> dict:
    n = len(per_query)
    return {"gold_top1_share": float(per_query[f"gold_top1_{sc}"].mean()) if n else float("nan"),
            "relevant_top1_share": float(per_query[f"relevant_top1_{sc}"].mean()) if n else float("nan"),
            "median_gold_rank": float(per_query[f"gold_rank_{sc}"].median()) if n else float("nan")}


def summarize(per_query: pd.DataFrame, *, scope: str, k1: float, b: float, span_frac: float, chunk_frac: float,
              condition: str = "", n_chunks: int = 0) -> dict:
    """The JSON facts of the diagnostic (shares are fractions in [0, 1], unrounded)."""
    n = len(per_query)
    return {
        "condition": condition,
        "scope": scope,
        "gold_top1_share": _shares(per_query, scope)["gold_top1_share"],
        "n_queries": int(n),
        "n_docs": int(per_query["doc_id"].nunique()) if n else 0,
        "n_chunks": int(n_chunks),
        **{sc: {**_shares(per_query, sc),
                "by_qtype": {str(t): {"n_queries": int(len(g)), **_shares(g, sc)}
                             for t, g in per_query.groupby("qtype", sort=True)}} for sc in SCOPES},
        "bm25": {"library": f"bm25s {bm25s.__version__}", "method": "lucene", "k1": k1, "b": b,
                 "tokenisation": TOKENISATION,
                 "scopes": {"document": "the query's own document's chunks, index over them alone",
                            "corpus": "one index over all chunks of the corpus"}},
        "definitions": {
            "gold_chunk": "chunk of the query's document with the largest character overlap with the union of its "
                          "gold spans; ties to the earlier chunk",
            "gold_top1": "gold chunk ranked first by (-score, chunk order) with a positive score",
            "relevant_top1": f"rank-1 chunk (positive score) covers >= {span_frac} of a gold span or lies >= "
                             f"{chunk_frac} inside one",
        },
    }


def chunk_structure(condition: str) -> str:
    """The section table a structural BM25 condition is cut from (its declared outline): G* -> sections_gold,
    A2..A4/P -> sections_induced. A condition with fixed windows has no structure to rank."""
    spec = design.condition(condition) if condition in design.CONDITION_NAMES else None
    if spec is None or not spec.structural:
        gold = design.names_where(boundaries="gold")
        induced = [c for c in design.STRUCTURAL if c not in gold]
        raise ValueError(f"queries.bm25_condition {condition!r}: the diagnostic ranks structural chunks; use one of "
                         f"{list(gold)} (gold structure) or {induced} (induced structure)")
    return str(spec.outline)


def outline(condition: str, sections_gold: pd.DataFrame, sections_induced: pd.DataFrame | None) -> pd.DataFrame:
    """The outline the diagnostic cuts for ``condition`` (:func:`chunk_structure`); ``sections_induced`` may be
    None when the condition is cut from the gold outline (03 reads it only then)."""
    table = {"sections_gold": sections_gold, "sections_induced": sections_induced}[chunk_structure(condition)]
    if table is None:
        raise ValueError(f"queries.bm25_condition {condition!r} needs sections_induced (02_induce), which was not read")
    return table


def summary_table(summary: dict) -> pd.DataFrame:
    """The diagnostic summary as rows ``scope × qtype`` (qtype ``all`` first): n_queries, gold_top1_share,
    relevant_top1_share, median_gold_rank (shares are fractions, unrounded)."""
    rows = []
    for sc in SCOPES:
        part = summary[sc]
        rows.append({"scope": sc, "qtype": "all", "n_queries": summary["n_queries"],
                     **{k: part[k] for k in ("gold_top1_share", "relevant_top1_share", "median_gold_rank")}})
        for t, v in part["by_qtype"].items():
            rows.append({"scope": sc, "qtype": t, **v})
    cols = ["scope", "qtype", "n_queries", "gold_top1_share", "relevant_top1_share", "median_gold_rank"]
    return pd.DataFrame(rows, columns=cols)
