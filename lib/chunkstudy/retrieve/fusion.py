"""Rank fusion (stage 05's ``hybrid`` mode; docs/beyond.md, "Retrieval modes"): a condition's dense ranking and its
BM25 ranking, each cut to its top ``depth`` (``retrieve.fusion.depth``, default ``retrieve.k``), fused into one.

* **rrf** (reciprocal rank fusion; Cormack, Clarke & Büttcher, SIGIR 2009): a chunk scores
  ``Σ_lists w_list / (rrf_k + rank_list)`` over the lists it is in (``rank`` 1-based; ``rrf_k`` 60; the weights
  ``dense_weight``, ``bm25_weight``, 1 each by default). A chunk in neither list is not retrieved.
* **convex** (a declared convex combination): each list's scores are normalised per query over its own entries
  (``minmax``: ``(s − min) / (max − min)``, 1 when they are all equal; ``zscore``: ``(s − mean) / sd``, 0 when
  ``sd`` is 0, population sd), a chunk absent from a list takes that list's lowest normalised score of the query
  (0 under minmax), and the fused score is ``(w_d · n_d + w_l · n_l) / (w_d + w_l)``. A list that is empty for a
  query (no chunk shares a token with it) contributes 0.

The fused list is ranked by ``(−score, chunk_id)`` and cut to ``k``. Vectorised: the lists of a block of queries
are flat arrays (query, chunk, rank, score); contributions are summed per (query, chunk) with one sort and a
``reduceat``, dense before BM25, so a sum's order, and its bits, never depend on the block.

Two-stage routing in this mode (:func:`two_stage`): stage 1 fuses the dense ranking of section centroids (the
renormalised mean of the chunk vectors, as the dense mode routes) with the BM25 ranking of sections
(:func:`chunkstudy.retrieve.lexical.two_stage`'s section documents), each cut to ``depth``, and keeps the top
``route_sections``; stage 2 fuses the two rankings of the chunks inside the routed sections, each ranked among those
chunks alone (dense: all of them; BM25: those holding a query token); the hybrid flat list backfills in its order.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..params import FusionParams
from .lexical import _kth_largest, block_rows, flat_search as bm25_search, in_sections, merge_routed, query_counts, \
    ranked, routed_list, score_block
from .routing import _centroids
from .search import _as_matrix, _pair_scores, _tie_rank, flat_search as dense_search


class Lists(NamedTuple):
    """Ranked lists of a block of queries as flat arrays: ``qi`` (query, ascending), ``rows`` (chunk row),
    ``rank`` (1-based within the query's list), ``score`` (the list's own score)."""

    qi: np.ndarray
    rows: np.ndarray
    rank: np.ndarray
    score: np.ndarray


def lists(idx: np.ndarray, scores: np.ndarray, n: np.ndarray | None = None, cut: int | None = None) -> Lists:
    """:class:`Lists` from (queries × k) top-k arrays, each row's first ``n`` valid (all when None), cut to their
    first ``cut`` (the fusion depth; None: all)."""
    b, k = idx.shape
    k = k if cut is None else min(k, cut)
    filled = np.full(b, k, dtype=np.int64) if n is None else np.minimum(n, k)
    keep = np.arange(k)[None, :] < filled[:, None]
    qi, j = np.nonzero(keep)
    return Lists(qi.astype(np.int64), idx[qi, j].astype(np.int64), (j + 1).astype(np.int64),
                 scores[qi, j].astype(np.float64))


def _per_query(qi: np.ndarray, values: np.ndarray, n_rows: int, how: str) -> np.ndarray:
    """Per query, ``min``/``max``/``mean``/``sd`` (population) of ``values``; NaN for a query without any."""
    out = np.full(n_rows, np.nan)
    if len(qi) == 0:
        return out
    starts = np.r_[0, np.flatnonzero(qi[1:] != qi[:-1]) + 1]
    q = qi[starts]
    if how in ("min", "max"):
        out[q] = (np.minimum if how == "min" else np.maximum).reduceat(values, starts)
        return out
    counts = np.diff(np.r_[starts, len(qi)])
    mean = np.add.reduceat(values, starts) / counts
    if how == "mean":
        out[q] = mean
        return out
    dev = values - np.repeat(mean, counts)
    out[q] = np.sqrt(np.add.reduceat(dev * dev, starts) / counts)
    return out


def normalised(lst: Lists, how: str, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's normalised score (``minmax`` or ``zscore``, module docstring) and each query's lowest
    normalised score (0 for a query whose list is empty)."""
    if how == "minmax":
        lo, hi = _per_query(lst.qi, lst.score, n_rows, "min"), _per_query(lst.qi, lst.score, n_rows, "max")
        span = (hi - lo)[lst.qi]
        norm = np.where(span > 0, (lst.score - lo[lst.qi]) / np.where(span > 0, span, 1.0), 1.0)
    elif how == "zscore":
        mean, sd = _per_query(lst.qi, lst.score, n_rows, "mean"), _per_query(lst.qi, lst.score, n_rows, "sd")
        s = sd[lst.qi]
        norm = np.where(s > 0, (lst.score - mean[lst.qi]) / np.where(s > 0, s, 1.0), 0.0)
    else:
        raise ValueError(f"retrieve.fusion.normalisation: {how!r} is not one of ['minmax', 'zscore']")
    low = _per_query(lst.qi, norm, n_rows, "min")
    return norm, np.where(np.isnan(low), 0.0, low)


def fuse(dense: Lists, lexical: Lists, p: FusionParams, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fused scores of every (query, chunk) in either list: ``(qi, rows, score)``, sorted by query then chunk
    row (module docstring: rrf or convex, ``p``: the ``retrieve.fusion`` record)."""
    w = (float(p.dense_weight), float(p.bm25_weight))
    if p.method == "rrf":
        parts = [wt / (float(p.rrf_k) + lst.rank) for wt, lst in zip(w, (dense, lexical))]
        base = np.zeros(n_rows)
    elif p.method == "convex":
        total = w[0] + w[1]
        parts, base = [], np.zeros(n_rows)
        for wt, lst in zip(w, (dense, lexical)):
            norm, low = normalised(lst, p.normalisation, n_rows)
            parts.append(wt * (norm - low[lst.qi]) / total)
            base = base + wt * low / total
    else:
        raise ValueError(f"retrieve.fusion.method: {p.method!r} is not one of ['rrf', 'convex']")
    qi = np.concatenate([dense.qi, lexical.qi])
    rows = np.concatenate([dense.rows, lexical.rows])
    part = np.concatenate(parts)
    if len(qi) == 0:
        return qi, rows, part
    # one integer key (query, chunk, list): dense before BM25 within a (query, chunk), a fixed sum order
    width = int(rows.max()) + 1
    source = np.r_[np.zeros(len(dense.qi), dtype=np.int64), np.ones(len(lexical.qi), dtype=np.int64)]
    order = np.argsort((qi * width + rows) * 2 + source, kind="stable")
    qi, rows, part = qi[order], rows[order], part[order]
    starts = np.r_[0, np.flatnonzero((qi[1:] != qi[:-1]) | (rows[1:] != rows[:-1])) + 1]
    fused = base[qi[starts]] + np.add.reduceat(part, starts)
    return qi[starts], rows[starts], fused


def fused_top(dense: Lists, lexical: Lists, p: FusionParams, tie: np.ndarray, n_rows: int,
              k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fused list of each query ranked by ``(−score, tie)`` (``tie``: each row's place in ascending id order),
    its first ``k``: ``(idx, scores, n)``, (queries × k) arrays and how many each query filled."""
    qi, rows, score = fuse(dense, lexical, p, n_rows)
    keep = score >= _kth_largest(qi, score, n_rows, k)[qi]  # the candidates of the top k, ties at the cut kept
    return ranked(qi[keep], rows[keep], score[keep], tie, n_rows, k)


# --------------------------------------------------------------------------------------------------------------
# the hybrid mode: flat and two-stage


class Hybrid(NamedTuple):
    """A hybrid search's result, one row per query: the list (``idx``, fused ``scores``, ``n`` filled; routed:
    ``n_routed`` of them from routed sections, the rest backfill) and, routed, the sections stage 1 kept
    (``routed``: section numbers into the sorted route labels, -1 unused; their fused ``routed_scores``)."""

    idx: np.ndarray
    scores: np.ndarray
    n: np.ndarray
    n_routed: np.ndarray | None = None
    routed: np.ndarray | None = None
    routed_scores: np.ndarray | None = None


def flat(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray, np.ndarray],
         chunk_ids: Sequence[str], p: FusionParams, k: int, depth: int) -> Hybrid:
    """The hybrid flat list of every query: the dense top ``depth`` (``(idx, scores)`` of
    :func:`chunkstudy.retrieve.search.flat_search`) fused with the BM25 top ``depth`` (``(idx, scores, n)`` of
    :func:`chunkstudy.retrieve.lexical.flat_search`), ranked, cut to ``k``."""
    nq = dense[0].shape[0]
    idx, scores, n = fused_top(lists(*dense, cut=depth), lists(*lexical, cut=depth), p,
                               _tie_rank(np.asarray(chunk_ids, dtype=object)), nq, min(k, len(chunk_ids)))
    return Hybrid(idx, scores, n)


def _routed_chunks(q: np.ndarray, c: np.ndarray, index, counts, inside: np.ndarray, tie: np.ndarray,
                   depth: int) -> tuple[Lists, Lists]:
    """The dense and the BM25 rankings of the chunks inside a block of queries' routed sections (``inside``:
    queries × chunks), each among those chunks alone, cut to ``depth``: dense over all of them (exact scores),
    BM25 over those holding a query token."""
    b = len(q)
    qi, rows = np.nonzero(inside)
    qi, rows = qi.astype(np.int64), rows.astype(np.int64)
    dense_s = _pair_scores(q, c, qi, rows) if len(qi) else np.zeros(0)
    s, m = score_block(index, counts)
    hit = m[qi, rows]
    out = []
    for pq, pr, ps in ((qi, rows, dense_s), (qi[hit], rows[hit], s[qi[hit], rows[hit]])):
        idx, sc, n = ranked(pq, pr, ps, tie, b, depth)
        out.append(lists(idx, sc, n))
    return out[0], out[1]


def two_stage(q: np.ndarray, c: np.ndarray, chunk_ids: Sequence[str], labels: Sequence[str], index, sections,
              query_tokens: Sequence[Sequence[str]], flat_list: Hybrid, p: FusionParams, k: int, n_sections: int,
              depth: int, backend: str) -> Hybrid:
    """Two-stage hybrid routing (module docstring) of every query: ``q`` and ``c`` the float32 query and chunk
    vectors, ``labels`` each chunk's section (document + route key), ``index`` the condition's BM25 index and
    ``sections`` the BM25 index of its sections (:func:`chunkstudy.retrieve.lexical.section_documents`, in sorted
    label order), ``flat_list`` the hybrid flat list (the backfill)."""
    q, c = _as_matrix(q, "query_vecs"), _as_matrix(c, "chunk_vecs")
    nq, kk = len(q), min(k, len(chunk_ids))
    keys, centroids, codes = _centroids(c, labels)
    ds = dense_search(q, centroids, keys, k=min(depth, len(keys)), backend=backend)
    ls = bm25_search(sections, query_tokens, list(keys), depth)
    s_idx, s_scores, s_n = fused_top(lists(*ds), lists(*ls), p, _tie_rank(keys), nq, n_sections)
    used = np.arange(s_idx.shape[1])[None, :] < s_n[:, None]
    sec = np.where(used, s_idx, -1)
    tie = _tie_rank(np.asarray(chunk_ids, dtype=object))
    counts = query_counts(index, query_tokens)
    idx, out = np.zeros((nq, kk), dtype=np.int64), np.zeros((nq, kk))
    n, n_r = np.zeros(nq, dtype=np.int64), np.zeros(nq, dtype=np.int64)
    step = block_rows(len(chunk_ids))
    for lo in range(0, nq, step):
        hi = min(lo + step, nq)
        inside = in_sections(codes, sec[lo:hi], len(keys))
        dl, ll = _routed_chunks(q[lo:hi], c, index, counts[lo:hi], inside, tie, depth)
        r_idx, r_scores, n_r[lo:hi] = fused_top(dl, ll, p, tie, hi - lo, kk)
        f_idx, f_scores, f_n = flat_list.idx[lo:hi], flat_list.scores[lo:hi], flat_list.n[lo:hi]
        pos, n[lo:hi] = routed_list(f_idx, f_n, n_r[lo:hi], np.take_along_axis(inside, f_idx, axis=1), kk)
        idx[lo:hi], out[lo:hi] = merge_routed(pos, kk, (r_idx, r_scores), (f_idx, f_scores))
    return Hybrid(idx, out, n, n_r, sec, np.where(used, s_scores, 0.0))
