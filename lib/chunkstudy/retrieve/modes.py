"""Stage 05's retrieval modes, each searched by one function registered against its declaration
(:data:`chunkstudy.design.RETRIEVAL_MODES`; :data:`FUNCTIONS` is checked against it on import): ``dense``, the
paper's exact search (:mod:`.search`, :mod:`.routing`); ``bm25`` (:mod:`.lexical`); ``hybrid`` (:mod:`.fusion`). A
function takes one cell (:class:`Cell`: a condition's chunks under one retriever) and returns its lists
(:class:`Found`); what a mode reads (vectors, the BM25 index) is decided by the declaration's ``dense`` and
``lexical``, never by its name.

Every dense search goes through the content-keyed store of :mod:`.cache` when the stage gives one, so a rerun of
05 for a BM25 or fusion parameter, or a reranker, searches no vector twice; the hybrid mode's dense half is the
same search (at ``retrieve.fusion.depth``, default ``retrieve.k``: then the dense cell's very entry).

:func:`lexical_inputs` tokenizes every distinct indexed text of the run once (a text two conditions share is one),
and each condition's BM25 index (and, routed, its sections' index) is built once for all the retrievers that read
it; :func:`lexical_report` says what each index holds and cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from .. import design, progress
from ..params import RetrieveParams
from . import cache as search_cache
from . import fusion, lexical
from .routing import two_stage_search
from .search import flat_search


class Found(NamedTuple):
    """One cell's lists, one row per query: ``idx`` (rows into the condition's chunks), ``scores``, ``n`` filled
    slots (None: every row full), ``source`` per slot (``flat``, ``routed``, ``backfill``), and for a routed
    condition the sections stage 1 kept (``routed``: ``"doc_id\\x1froute_key"`` per slot, "" unused, best first;
    ``routed_scores``); ``seconds``: :func:`chunkstudy.progress.timed`'s timing of the search."""

    idx: np.ndarray
    scores: np.ndarray
    n: np.ndarray | None
    source: np.ndarray
    routed: np.ndarray | None
    routed_scores: np.ndarray | None
    seconds: dict


@dataclass
class Lexical:
    """The run's BM25 inputs: each chunk row's token list (``tokens``, aligned with the chunks table), each
    query's (``query_tokens``), the ``retrieve.bm25`` record, and the indexes built so far (per condition; the
    sections' under ``(condition, "sections")``) with what each cost (``report``)."""

    tokens: list[list[str]]
    query_tokens: list[list[str]]
    params: Any
    tokenize_seconds: float
    n_texts: int
    indexes: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)

    def index(self, condition: str, rows: np.ndarray) -> lexical.LexicalIndex:
        """The BM25 index of ``condition`` (its chunks at ``rows`` of the chunks table), built once."""
        if condition not in self.indexes:
            t0 = time.perf_counter()
            self.indexes[condition] = lexical.build_index([self.tokens[i] for i in rows], self.params)
            ix = self.indexes[condition]
            self.report[condition] = {"condition": condition, "n_chunks": ix.n_docs, "n_tokens": ix.n_tokens,
                                      "n_vocab": len(ix.vocab), "nnz": int(ix.weights.nnz),
                                      "index_bytes": ix.nbytes, "index_seconds": time.perf_counter() - t0,
                                      "n_sections": 0, "section_bytes": 0}
        return self.indexes[condition]

    def sections(self, condition: str, rows: np.ndarray, labels: Any) -> tuple[lexical.LexicalIndex,
                                                                                      np.ndarray, np.ndarray]:
        """``(index, keys, codes)`` of ``condition``'s sections (:func:`chunkstudy.retrieve.lexical.
        section_documents`), built once."""
        key = (condition, "sections")
        if key not in self.indexes:
            t0 = time.perf_counter()
            keys, docs, codes = lexical.section_documents([self.tokens[i] for i in rows], labels)
            self.indexes[key] = (lexical.build_index(docs, self.params), keys, codes)
            self.report[condition].update(n_sections=len(keys), section_bytes=self.indexes[key][0].nbytes,
                                          index_seconds=self.report[condition]["index_seconds"]
                                          + time.perf_counter() - t0)
        return self.indexes[key]


def lexical_inputs(texts: Sequence[str], queries: Sequence[str], params: Any) -> Lexical:
    """:class:`Lexical` for the indexed texts of every chunk row (``texts``: prefix + content, aligned with the
    chunks table) and the query texts, under the ``retrieve.bm25`` record: each distinct text tokenized once."""
    t0 = time.perf_counter()
    codes, uniques = pd.factorize(pd.Series(list(texts), dtype=object), sort=False)
    toks = lexical.tokenize(list(uniques), params)
    tokens = [toks[c] for c in codes]
    q = lexical.tokenize(list(queries), params)
    return Lexical(tokens, q, params, time.perf_counter() - t0, len(uniques))


def lexical_report(lx: Lexical | None) -> dict:
    """What the run's BM25 indexes hold and cost (05's ``lexical_report``): the tokenizer and scoring, the distinct
    texts tokenized and the seconds it took, and per condition its chunks, tokens indexed, vocabulary, (term,
    chunk) pairs, bytes (:attr:`chunkstudy.retrieve.lexical.LexicalIndex.nbytes`; routed: its sections' index
    too) and the seconds its indexes took to build. Empty without a lexical mode."""
    if lx is None:
        return {}
    import bm25s

    p = lx.params
    return {"library": f"bm25s {bm25s.__version__}", "method": p.method, "k1": p.k1, "b": p.b, "delta": p.delta,
            "tokenizer": lexical.tokenizer_text(p), "n_texts": lx.n_texts, "tokenize_seconds": lx.tokenize_seconds,
            "conditions": list(lx.report.values())}


class Cell(NamedTuple):
    """One condition under one retriever: the condition's chunk ``ids`` (its rows of the chunks table: ``rows``),
    route ``labels`` (document + route key) when it is routed two-stage, the float32 query and chunk vectors of
    the retriever's embedder (None for a mode without vectors), the run's :class:`Lexical` inputs (None without a
    lexical mode), the ``retrieve`` record, the search store and the timed repeats."""

    condition: str
    ids: Any
    rows: np.ndarray
    labels: Any
    q: Any
    c: Any
    lexical: Any
    params: RetrieveParams
    cache: Any
    repeats: int


def _dense_flat(cell: Cell, k: int) -> tuple[dict, dict]:
    """The exact dense top ``k`` of the cell (through the store), as arrays ``idx``, ``scores``, and its timing."""
    q, c, ids, backend = cell.q, cell.c, cell.ids, cell.params.backend

    def search() -> dict:
        idx, scores = flat_search(q, c, ids, k=k, backend=backend)
        return {"idx": idx, "scores": scores}

    return search_cache.timed(cell.cache, lambda: cell.cache.key("flat", [q, c], [ids], k=k, backend=backend),
                              search, cell.repeats)


def dense(cell: Cell) -> Found:
    """The paper's exact search: flat (:func:`chunkstudy.retrieve.search.flat_search`), or two-stage over the
    section centroids (:func:`chunkstudy.retrieve.routing.two_stage_search`) for a routed condition."""
    p = cell.params
    if cell.labels is None:
        got, seconds = _dense_flat(cell, p.k)
        return Found(got["idx"], got["scores"], None, np.full(got["idx"].shape, "flat", dtype=object), None, None,
                     seconds)
    q, c, ids, labels = cell.q, cell.c, cell.ids, cell.labels

    def search() -> dict:
        return two_stage_search(q, c, ids, labels, k=p.k, n_sections=p.route_sections, backend=p.backend)._asdict()

    got, seconds = search_cache.timed(cell.cache, lambda: cell.cache.key(
        "two-stage", [q, c], [ids, labels], k=p.k, n_sections=p.route_sections, backend=p.backend), search,
        cell.repeats)
    source = np.where(np.arange(got["idx"].shape[1])[None, :] < got["n_routed"][:, None], "routed", "backfill")
    return Found(got["idx"], got["scores"], None, source, got["routed"].astype(str), got["routed_scores"], seconds)


def _sources(n: np.ndarray, n_routed: np.ndarray | None, width: int) -> np.ndarray:
    j = np.arange(width)[None, :]
    if n_routed is None:
        return np.where(j < n[:, None], "flat", "").astype(object)
    return np.where(j < n_routed[:, None], "routed", np.where(j < n[:, None], "backfill", "")).astype(object)


def bm25(cell: Cell) -> Found:
    """BM25 over the condition's indexed texts (:func:`chunkstudy.retrieve.lexical.flat_search`), or routed by the
    sections' BM25 scores (:func:`chunkstudy.retrieve.lexical.two_stage`)."""
    lx, p = cell.lexical, cell.params
    index = lx.index(cell.condition, cell.rows)
    if cell.labels is None:
        (idx, scores, n), seconds = progress.timed(lambda: lexical.flat_search(index, lx.query_tokens, cell.ids, p.k),
                                                   cell.repeats)
        return Found(idx, scores, n, _sources(n, None, idx.shape[1]), None, None, seconds)
    sections, keys, codes = lx.sections(cell.condition, cell.rows, cell.labels)
    got, seconds = progress.timed(lambda: lexical.two_stage(index, sections, keys, codes, lx.query_tokens, cell.ids,
                                                            p.k, p.route_sections), cell.repeats)
    return Found(got.idx, got.scores, got.n, _sources(got.n, got.n_routed, got.idx.shape[1]), got.routed,
                 got.routed_scores, seconds)


def _plus(a: dict, b: dict) -> dict:
    """Timings of two searches run one after the other: medians, fastest and slowest added; the fewer repeats."""
    return {"seconds": a["seconds"] + b["seconds"], "seconds_min": a["seconds_min"] + b["seconds_min"],
            "seconds_max": a["seconds_max"] + b["seconds_max"], "repeats": min(a["repeats"], b["repeats"])}


def hybrid(cell: Cell) -> Found:
    """The dense and the BM25 rankings fused (:mod:`chunkstudy.retrieve.fusion`), flat or routed two-stage. Its
    seconds are the dense search's (as stored) plus the BM25 search's and the fusion's."""
    lx, p = cell.lexical, cell.params
    depth = int(p.fusion.depth or p.k)
    dense_got, dense_seconds = _dense_flat(cell, depth)
    index = lx.index(cell.condition, cell.rows)
    sections = lx.sections(cell.condition, cell.rows, cell.labels) if cell.labels is not None else None

    def search() -> fusion.Hybrid:
        bm = lexical.flat_search(index, lx.query_tokens, cell.ids, depth)
        flat = fusion.flat((dense_got["idx"], dense_got["scores"]), bm, cell.ids, p.fusion, p.k, depth)
        if sections is None:
            return flat
        return fusion.two_stage(cell.q, cell.c, cell.ids, cell.labels, index, sections[0], lx.query_tokens, flat,
                                p.fusion, p.k, p.route_sections, depth, p.backend)

    got, seconds = progress.timed(search, cell.repeats)
    seconds = _plus(dense_seconds, seconds)
    if sections is None:
        return Found(got.idx, got.scores, got.n, _sources(got.n, None, got.idx.shape[1]), None, None, seconds)
    keys = sections[1]
    routed = np.where(got.routed >= 0, keys[np.maximum(got.routed, 0)] if len(keys) else "", "")
    return Found(got.idx, got.scores, got.n, _sources(got.n, got.n_routed, got.idx.shape[1]), routed.astype(str),
                 got.routed_scores, seconds)


#: The function of each declared retrieval mode, in declared order.
FUNCTIONS: dict[str, Callable[[Cell], Found]] = {"dense": dense, "bm25": bm25, "hybrid": hybrid}

if tuple(FUNCTIONS) != design.MODES:
    raise ImportError(f"chunkstudy.retrieve.modes.FUNCTIONS {list(FUNCTIONS)} must serve exactly the declared "
                      f"retrieval modes {list(design.MODES)} (chunkstudy.design.RETRIEVAL_MODES), in their order")


def reranked_retrievers(retrievers: Any, embedder: str) -> list[str]:
    """The retrievers whose lists the rerankers rescore: every mode's with ``embedder`` (``embed.strong``, the
    primary cell's) and every mode's that reads no embedder (``strong``, ``bm25``, ``hybrid-strong``)."""
    return [name for name, (_, emb) in retrievers.items() if emb in (None, embedder)]
