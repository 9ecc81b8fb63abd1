"""BM25 retrieval (stage 05's ``bm25`` mode and the lexical half of ``hybrid``; docs/beyond.md, "Retrieval modes").

**What is indexed.** Each condition gets its own index over its *indexed texts*: exactly what the condition embeds,
``prefix + content`` (:func:`chunkstudy.chunks.chunk_sets.embedded_texts`), so a heading path, A1's situating
context or the placebo's foreign path enters the lexical index as it enters the embedder ("contextual BM25"). The
statistics are the condition's own: N its chunks, avgdl their mean length, df over them. Relevance is computed on
content offsets only (stage 06), so no prefix can create relevance in this mode either.

**Tokens** (:func:`tokenize`, ``retrieve.bm25``): ``bm25s.tokenize`` with the declared lowercasing, token pattern
(``(?u)\\b\\w\\w+\\b``: two or more word characters), English stopwords (bm25s's list) or none, and NLTK's Porter
stemmer or none; the queries go through the same tokenizer. A repeated query token counts again, as bm25s counts it.

**Scores** (bm25s, ``retrieve.bm25.method``; Kamphuis et al. 2020): bm25s computes each (term, chunk) weight
``idf(t) · tfc(tf, |c|)`` of the declared variant, e.g. Lucene's

    idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5)),   tfc = tf / (tf + k1 · (1 − b + b · |c| / avgdl))

(bm25l and bm25+ add a per-term non-occurrence weight to every chunk). The weights are bm25s's own, float32, from a
vocabulary numbered in sorted token order (bm25s's own numbering follows a Python set, so its order, and the order
of a float sum over it, would change with the hash seed). A query's score of every chunk is then one sparse matrix
product per block of queries, ``counts (queries × vocabulary) @ weights (vocabulary × chunks)`` in float64, where
bm25s loops over the queries and adds each token's row in float32 (:func:`score_block`; ``bench/bench_bm25.py``
measures both on the same tokens). The float64 sums are deterministic: the same (query, chunk) pair gets the same
bits in flat and routed search.

**Retrieved** (:func:`top_k`): a chunk is retrieved when it holds at least one query token, as Lucene retrieves; the
matched chunks are ranked by ``(−score, chunk_id)`` and the top ``k`` kept, so a list may be shorter than ``k`` (a
query sharing no token with the corpus retrieves nothing and scores 0, as an empty list does).

**Two-stage routing** (:func:`two_stage`): the lexical analogue of the section centroid, built from the same tokens
flat search indexes. A section (document + top-level heading, the chunks' ``route_key``) is one BM25 document, the
concatenation of its chunks' indexed tokens, in an index over the condition's sections (N, avgdl and df over
sections). Stage 1 keeps the ``route_sections`` matched sections of highest BM25 score (ties by ``(−score, key)``);
stage 2 ranks the matched chunks inside them by their flat scores; the flat list backfills, in its order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import bm25s
import numpy as np
import scipy.sparse as sp

from ..params import Bm25Params
from .search import _tie_rank

# bm25s logs a DEBUG line per index
logging.getLogger("bm25s").setLevel(logging.WARNING)

#: Entries of one float64 score block (queries × chunks), 64 MiB (a block's selection holds about three such
#: arrays at once): the queries per block follow from it.
_BLOCK_ENTRIES = 1 << 23


def tokenizer_text(p: Bm25Params) -> str:
    """The tokenizer in words, for manifests and the report."""
    return (f"bm25s.tokenize: {'lowercase, ' if p.lowercase else ''}tokens {p.token_pattern!r}, "
            f"{'English stopwords removed' if p.stopwords == 'en' else 'no stopwords removed'}, "
            f"{'Porter stemming (NLTK)' if p.stemmer == 'porter' else 'no stemming'}")


def _stemmer(p: Bm25Params) -> Any:
    if p.stemmer == "none":
        return None
    from nltk.stem import PorterStemmer

    stem = PorterStemmer().stem
    return lambda words: [stem(w) for w in words]


def tokenize(texts: Sequence[str], p: Bm25Params) -> list[list[str]]:
    """Each text's tokens under ``retrieve.bm25`` (module docstring); an empty text has none."""
    if isinstance(texts, str):
        raise TypeError("tokenize takes a sequence of texts, not one string")
    if len(texts) == 0:
        return []
    return bm25s.tokenize(list(texts), lower=p.lowercase, token_pattern=p.token_pattern,
                          stopwords="en" if p.stopwords == "en" else [], stemmer=_stemmer(p), return_ids=False,
                          show_progress=False)


class Vocabulary(NamedTuple):
    """Tokens numbered in sorted order, and each text's token ids (a token list's order kept)."""

    tokens: list[str]
    ids: list[list[int]]


def number(token_lists: Sequence[Sequence[str]]) -> Vocabulary:
    """The sorted vocabulary of ``token_lists`` and each list as token ids into it."""
    tokens = sorted({t for toks in token_lists for t in toks})
    where = {t: i for i, t in enumerate(tokens)}
    return Vocabulary(tokens, [[where[t] for t in toks] for toks in token_lists])


@dataclass(frozen=True)
class LexicalIndex:
    """A BM25 index of one condition (or of its sections): ``vocab`` token -> row of ``weights`` (vocabulary ×
    documents, bm25s's float32 weights held as float64), ``nonoccurrence`` (bm25l/bm25+: per token, what it adds to
    every document; None otherwise), ``n_tokens`` (tokens indexed, repeats counted)."""

    vocab: dict[str, int]
    weights: sp.csr_matrix
    nonoccurrence: np.ndarray | None
    n_tokens: int

    @property
    def positive(self) -> bool:
        """Whether every (term, document) weight is above 0."""
        return bool((self.weights.data > 0).all())

    @property
    def presence(self) -> sp.csr_matrix:
        """The weights' pattern: 1 where a term occurs in a document (built once)."""
        cached = self.__dict__.get("_presence")
        if cached is None:
            w = self.weights
            cached = sp.csr_matrix((np.ones(w.nnz), w.indices, w.indptr), shape=w.shape)
            object.__setattr__(self, "_presence", cached)
        return cached

    @property
    def n_docs(self) -> int:
        return int(self.weights.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of the index as bm25s holds it: a float32 weight and an int32 document id per (term, document)
        pair, an int32 pointer per term (and a float32 non-occurrence weight per term)."""
        v = int(self.weights.shape[0])
        return int(self.weights.nnz) * 8 + (v + 1) * 4 + (v * 4 if self.nonoccurrence is not None else 0)


def build_index(token_lists: Sequence[Sequence[str]], p: Bm25Params) -> LexicalIndex:
    """bm25s's index of the documents ``token_lists`` (one per chunk, in order) under ``retrieve.bm25``, with the
    vocabulary numbered in sorted order (module docstring)."""
    voc = number(token_lists)
    if not voc.tokens:  # no document holds a token: nothing can match
        return LexicalIndex({}, sp.csr_matrix((0, len(token_lists))), None, 0)
    model = bm25s.BM25(k1=p.k1, b=p.b, delta=p.delta, method=p.method)
    scores = model.build_index_from_ids(list(range(len(voc.tokens))), voc.ids, show_progress=False)
    weights = sp.csr_matrix((np.asarray(scores["data"], dtype=np.float64), np.asarray(scores["indices"]),
                             np.asarray(scores["indptr"])), shape=(len(voc.tokens), int(scores["num_docs"])))
    non = model.nonoccurrence_array
    return LexicalIndex({t: i for i, t in enumerate(voc.tokens)}, weights,
                        None if non is None else np.asarray(non, dtype=np.float64),
                        int(sum(len(t) for t in token_lists)))


def query_counts(index: LexicalIndex, query_tokens: Sequence[Sequence[str]]) -> sp.csr_matrix:
    """Queries × vocabulary: how often each indexed token occurs in each query (tokens the index lacks dropped)."""
    rows, cols = [], []
    for i, toks in enumerate(query_tokens):
        ids = [index.vocab[t] for t in toks if t in index.vocab]
        rows += [i] * len(ids)
        cols += ids
    data = np.ones(len(rows), dtype=np.float64)
    counts = sp.csr_matrix((data, (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))),
                           shape=(len(query_tokens), index.weights.shape[0]))
    counts.sum_duplicates()
    counts.sort_indices()
    return counts


def score_block(index: LexicalIndex, counts: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, matched)`` of a block of queries (rows of :func:`query_counts`) against every document: float64
    BM25 scores (queries × documents) and whether the document holds at least one query token.

    One sparse product per block, ``counts @ weights`` (scipy's: each query row adds its tokens' weight rows, times
    their counts, in vocabulary order, so a query's sums, and their bits, depend on the query and the index alone,
    never on the block); where a weight can be 0 (``atire`` or ``robertson`` on a term in every chunk) ``matched`` is
    the same product over the index's pattern, since such a term still matches."""
    scores = (counts @ index.weights).toarray()
    # with every weight above 0 (Lucene's idf is), a document matches exactly where its sum is above 0
    matched = scores > 0 if index.positive else (counts @ index.presence).toarray() > 0
    if index.nonoccurrence is not None:
        scores += (counts @ index.nonoccurrence)[:, None]
    return scores, matched


def block_rows(n_docs: int) -> int:
    """Queries per score block: :data:`_BLOCK_ENTRIES` entries at most, at least one query."""
    return max(1, _BLOCK_ENTRIES // max(n_docs, 1))


def top_k(scores: np.ndarray, matched: np.ndarray, tie: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
    """Per row, the matched columns ranked by ``(−score, tie)`` (``tie``: each column's place in ascending chunk_id
    order), first ``k``: ``(idx, scores, n)``, (rows × k) arrays (unused slots: index 0, score 0) and how many each
    row filled. The candidates are the matched columns at or above the ``k``-th largest of a strided sample of the
    row (about ``sqrt(n · k)`` columns; the sample's k-th largest is at most the row's, so every column tied with the
    k-th is among them and the cut is exact), ranked exactly; far cheaper than selecting over the whole row."""
    b, n = scores.shape
    kk = min(k, n)
    if kk == 0 or b == 0:
        return np.zeros((b, kk), dtype=np.int64), np.zeros((b, kk)), np.zeros(b, dtype=np.int64)
    step = max(1, int(np.sqrt(n / kk))) if n >= 4 * kk else 1
    sample = np.where(matched[:, ::step], scores[:, ::step], -np.inf)
    m = sample.shape[1]
    t = np.partition(sample, m - kk, axis=1)[:, m - kk] if m >= kk else np.full(b, -np.inf)
    qi, rows = np.nonzero(matched & (scores >= t[:, None]))
    f = scores[qi, rows]
    keep = f >= _kth_largest(qi, f, b, kk)[qi]  # the exact k-th of the candidates: ties at the cut stay
    return ranked(qi[keep], rows[keep], f[keep], tie, b, kk)


def _kth_largest(qi: np.ndarray, f: np.ndarray, n_rows: int, kk: int) -> np.ndarray:
    """Per row ``qi`` (ascending), the ``kk``-th largest of ``f`` (float64, exact); -inf for a row with fewer."""
    counts = np.bincount(qi, minlength=n_rows)
    out = np.full(n_rows, -np.inf)
    full = np.flatnonzero(counts >= kk)
    if len(full) == 0:
        return out
    width = int(counts.max())
    starts = np.cumsum(counts) - counts
    pad = np.full((n_rows, width), -np.inf)
    pad[qi, np.arange(len(qi)) - starts[qi]] = f
    out[full] = np.partition(pad[full], width - kk, axis=1)[:, width - kk]
    return out


def ranked(qi: np.ndarray, rows: np.ndarray, s: np.ndarray, tie: np.ndarray, n_rows: int,
           kk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (row ``qi``, column ``rows``) with scores ``s`` ranked per row by ``(−score, tie[column])``, the
    first ``kk`` of each row: ``(idx, scores, n)`` as :func:`top_k`'s. The pairs of each row are laid out in one
    padded row and the rows sorted each on its own (``np.lexsort`` along the last axis: short rows, no key for the
    row itself)."""
    qi, rows, s = np.asarray(qi, dtype=np.int64), np.asarray(rows, dtype=np.int64), np.asarray(s, dtype=np.float64)
    counts = np.bincount(qi, minlength=n_rows)
    idx = np.zeros((n_rows, kk), dtype=np.int64)
    out = np.zeros((n_rows, kk), dtype=np.float64)
    n = np.minimum(counts, kk)
    if len(qi) == 0 or kk == 0:
        return idx, out, n
    order = np.argsort(qi, kind="stable")
    qi, rows, s = qi[order], rows[order], s[order]
    width = int(counts.max())
    slot = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]
    pad_s = np.full((n_rows, width), np.inf)  # an empty slot sorts last (-inf is largest... of -score)
    pad_t = np.zeros((n_rows, width), dtype=np.int64)
    pad_r = np.zeros((n_rows, width), dtype=np.int64)
    pad_s[qi, slot], pad_t[qi, slot], pad_r[qi, slot] = -s, tie[rows], rows
    first = np.lexsort((pad_t, pad_s), axis=-1)[:, :kk]
    idx[:, :first.shape[1]] = np.take_along_axis(pad_r, first, axis=1)
    out[:, :first.shape[1]] = -np.take_along_axis(pad_s, first, axis=1)
    unused = np.arange(kk)[None, :] >= n[:, None]
    idx[unused], out[unused] = 0, 0.0
    return idx, out, n


def flat_search(index: LexicalIndex, query_tokens: Sequence[Sequence[str]], chunk_ids: Sequence[str],
                k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BM25 top ``k`` of every query over the index's documents (the condition's chunks, ``chunk_ids`` in index
    order): ``(idx, scores, n)`` of :func:`top_k`, one row per query."""
    if len(chunk_ids) != index.n_docs:
        raise ValueError(f"chunk_ids: {len(chunk_ids)} ids for an index of {index.n_docs} documents")
    tie = _tie_rank(np.asarray(chunk_ids, dtype=object))
    counts = query_counts(index, query_tokens)
    kk = min(k, index.n_docs)
    idx = np.zeros((len(query_tokens), kk), dtype=np.int64)
    out = np.zeros((len(query_tokens), kk))
    n = np.zeros(len(query_tokens), dtype=np.int64)
    step = block_rows(index.n_docs)
    for lo in range(0, len(query_tokens), step):
        hi = min(lo + step, len(query_tokens))
        s, m = score_block(index, counts[lo:hi])
        idx[lo:hi], out[lo:hi], n[lo:hi] = top_k(s, m, tie, kk)
    return idx, out, n


# --------------------------------------------------------------------------------------------------------------
# two-stage routing


def section_documents(token_lists: Sequence[Sequence[str]], labels: Sequence[str]) -> tuple[np.ndarray,
                                                                                         list[list[str]], np.ndarray]:
    """The sections as BM25 documents: ``(keys, tokens, codes)`` — the sorted distinct ``labels`` (document + route
    key), each section's tokens (its chunks' token lists concatenated in chunk order), and each chunk's section."""
    keys, codes = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
    codes = codes.reshape(-1)
    tokens: list[list[str]] = [[] for _ in keys]
    for code, toks in zip(codes.tolist(), token_lists):
        tokens[code].extend(toks)
    return keys, tokens, codes.astype(np.int64)


class LexicalRouted(NamedTuple):
    """:func:`two_stage`'s result, one row per query: the chunk list (``idx``, ``scores``, ``n`` filled,
    ``n_routed`` of them from routed sections) and the routed sections (``routed`` keys and their BM25
    ``routed_scores``, ``n_sections`` of them, best first; unused slots "" and 0)."""

    idx: np.ndarray
    scores: np.ndarray
    n: np.ndarray
    n_routed: np.ndarray
    routed: np.ndarray
    routed_scores: np.ndarray
    n_sections: np.ndarray


def routed_list(flat_idx: np.ndarray, flat_n: np.ndarray, r_n: np.ndarray, in_routed: np.ndarray,
                kk: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage 2's list, then the flat list's backfill: per row, the ``r_n`` routed entries, then the valid entries of
    the flat list (``flat_idx``, its first ``flat_n``) not in a routed section (``in_routed``, shaped as
    ``flat_idx``), in their order, up to ``kk``. Returns ``(pos, n)``: ``pos[q, j]`` is ``j' < kk`` for routed entry
    j', ``kk + j'`` for flat entry j', -1 for an unused slot; ``n``: the slots filled."""
    b = len(r_n)
    j = np.arange(kk)
    pos = np.where(j[None, :] < r_n[:, None], j[None, :], -1).astype(np.int64)
    valid = (np.arange(flat_idx.shape[1])[None, :] < flat_n[:, None]) & ~in_routed
    slot = r_n[:, None] + np.cumsum(valid, axis=1) - 1
    qi, fj = np.nonzero(valid & (slot < kk))
    pos[qi, slot[qi, fj]] = kk + fj
    return pos, np.minimum(r_n + valid.sum(axis=1), kk) if b else np.zeros(0, dtype=np.int64)


def merge_routed(pos: np.ndarray, kk: int, routed: tuple[np.ndarray, np.ndarray],
                 flat: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(idx, scores)`` laid out by :func:`routed_list`'s ``pos`` from the routed ``(idx, scores)`` and the flat
    ``(idx, scores)``; unused slots 0."""
    from_flat = pos >= kk
    j = np.where(from_flat, pos - kk, np.maximum(pos, 0))
    idx = np.where(from_flat, np.take_along_axis(flat[0], j, 1), np.take_along_axis(routed[0], j, 1))
    scores = np.where(from_flat, np.take_along_axis(flat[1], j, 1), np.take_along_axis(routed[1], j, 1))
    return np.where(pos < 0, 0, idx), np.where(pos < 0, 0.0, scores)


def in_sections(codes: np.ndarray, sections: np.ndarray, n_keys: int) -> np.ndarray:
    """(queries × chunks): whether each chunk (its section ``codes``) lies in one of the query's ``sections`` (a row
    of section numbers; -1 = none)."""
    mark = np.zeros((len(sections), n_keys + 1), dtype=bool)
    mark[np.repeat(np.arange(len(sections)), sections.shape[1]), sections.ravel()] = True  # -1 lands in the spare
    return mark[:, codes]


def two_stage(index: LexicalIndex, sections: LexicalIndex, keys: np.ndarray, codes: np.ndarray,
              query_tokens: Sequence[Sequence[str]], chunk_ids: Sequence[str], k: int,
              n_sections: int) -> LexicalRouted:
    """Route to the top ``n_sections`` sections by their BM25 score (``sections``: the index of
    :func:`section_documents`' documents, ``keys`` its document names, ``codes`` each chunk's section), then rank
    the matched chunks inside them by their flat BM25 scores, the flat list backfilling (module docstring)."""
    nq, kk = len(query_tokens), min(k, index.n_docs)
    f_idx, f_scores, f_n = flat_search(index, query_tokens, chunk_ids, k)
    s_idx, s_scores, s_n = flat_search(sections, query_tokens, list(keys), n_sections)
    used = np.arange(s_idx.shape[1])[None, :] < s_n[:, None]
    sec = np.where(used, s_idx, -1)
    tie = _tie_rank(np.asarray(chunk_ids, dtype=object))
    counts = query_counts(index, query_tokens)
    idx, out = np.zeros((nq, kk), dtype=np.int64), np.zeros((nq, kk))
    n, n_r = np.zeros(nq, dtype=np.int64), np.zeros(nq, dtype=np.int64)
    step = block_rows(index.n_docs)
    for lo in range(0, nq, step):
        hi = min(lo + step, nq)
        s, m = score_block(index, counts[lo:hi])
        inside = in_sections(codes, sec[lo:hi], len(keys))
        r_idx, r_scores, n_r[lo:hi] = top_k(s, m & inside, tie, kk)
        pos, n[lo:hi] = routed_list(f_idx[lo:hi], f_n[lo:hi], n_r[lo:hi],
                                    np.take_along_axis(inside, f_idx[lo:hi], axis=1), kk)
        idx[lo:hi], out[lo:hi] = merge_routed(pos, kk, (r_idx, r_scores), (f_idx[lo:hi], f_scores[lo:hi]))
    routed = np.where(used, keys[s_idx] if len(keys) else "", "")
    return LexicalRouted(idx, out, n, n_r, routed.astype(str), np.where(used, s_scores, 0.0), s_n)
