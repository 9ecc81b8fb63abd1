"""Retrieval (stage 05): exact flat inner-product search, two-stage route-to-section search, section recall.

Conventions
-----------
* Vectors are rows of float32 matrices; inputs of another dtype are cast to float32 once (the embedder writes
  float32, normalised). Scores are inner products; for unit vectors they are cosine similarities in [-1, 1].
* **Exact scores.** Whatever the backend (numpy's blocked float32 matrix products, or faiss ``IndexFlatIP``), it
  only proposes candidates. Every returned score is recomputed as a float64 sum of the exact float32 x float32
  products, with one code path (:func:`exact_scores`), so the same (query, chunk) pair always gets the
  bit-identical score: in flat and two-stage search, with either backend, in any block size.
* **Ties** are broken by ``(-score, chunk_id)``: equal scores rank in ascending chunk_id order (docs/design.md,
  "Policy: seeds and ties"). The candidates are every chunk whose float32 score is within twice the float32 error
  bound of the k-th best float32 score, so a group of (near-)ties at the cut is always rescored whole and the
  result is the exact top k under this order, never an artefact of float32 rounding or faiss' heap.
* **Speed** (``bench/bench_retrieve.py``): per block of queries one float32 matrix product against all chunks;
  the k-th best score is bracketed from a strided sample of the block's columns (no full selection over each row),
  and only the ~k candidates are rescored exactly. Two-stage search reuses the same block for the routed chunks
  and the backfill, with no loop over queries.
* Offsets in chunk/query tables are half-open character indices into ``documents.text`` (content offsets: a
  prefix never contributes to an extent, so section recall cannot be created by a heading path).

Two-stage search (paper, Method, "Representation constancy (guards C4)"): a *section* is a document plus one
top-level heading (the lead before the first heading is its own section); chunks carry it as ``route_key``. A
section's centroid is the renormalised mean of the very chunk vectors flat search ranks, so A4 vs A3 (C4)
compares retrieval algorithms over one representation. Stage 1 keeps the top ``n_sections`` (5) centroids; stage 2
ranks the chunks inside them; when they hold fewer than k chunks the global flat ranking backfills the list.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence, cast


import numpy as np
import pandas as pd

from . import progress, stages
from .params import RetrieveParams

#: Extra candidates faiss proposes beyond k, so float32 rounding in the backend rarely needs a wider look.
_PAD = 16
#: Entries of one float32 score block (queries x chunks) at most, 256 MiB: up to _BLOCK_MAX_ROWS queries per block.
_BLOCK_ENTRIES = 1 << 26
#: Queries per block when the chunks allow it: BLAS repacks the chunk matrix once per product, so a product over
#: 512 queries runs about 1.7x the queries/s of one over 83 (d = 1024, 100k chunks, measured here).
_BLOCK_MAX_ROWS = 512
#: Entries of the float64 temporaries of one piece of exact rescoring (pairs x dimension), about 32 MiB.
_EXACT_ENTRIES = 1 << 22
_U32 = 2.0 ** -24  # unit roundoff of float32
_RUNS_COLUMNS = stages.columns("runs")


# --------------------------------------------------------------------------------------------------------------
# exact scores and the tie order


def _as_matrix(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (rows = vectors), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{name}: expected numbers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a.sum(dtype=np.float64)) and not np.isfinite(a).all():  # one pass, no n x d temporary
        bad = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name}: row {bad} holds NaN or inf")
    return a


def _tie_rank(ids: Any, name: str = "chunk_ids") -> np.ndarray:
    """Position of each id in ascending id order (the secondary sort key); ids must be unique."""
    arr = np.asarray(ids)
    if arr.dtype == object:
        arr = arr.astype(str)
    order = np.argsort(arr, kind="stable")
    srt = arr[order]
    if len(srt) > 1 and (srt[1:] == srt[:-1]).any():
        dup = srt[1:][srt[1:] == srt[:-1]][0]
        raise ValueError(f"{name}: id {dup!r} occurs more than once; ids must be unique")
    rank = np.empty(len(arr), dtype=np.int64)
    rank[order] = np.arange(len(arr))
    return rank


def exact_scores(q_rows: np.ndarray, c_rows: np.ndarray) -> np.ndarray:
    """Inner products ``sum_i q[i]*c[i]`` over the last axis, in float64, of float32 vectors.

    ``q_rows`` broadcasts against ``c_rows`` (e.g. one query (d,) against chunks (m, d), or queries (b, 1, d)
    against their candidates (b, n, d)). Each float32 x float32 product is exact in float64; the sum runs along
    the contiguous last axis with numpy's fixed pairwise order, so equal inputs give bit-equal scores wherever
    they are computed (flat search, two-stage search, the full-row fallback).
    """
    prod = np.multiply(q_rows, c_rows, dtype=np.float64)  # inputs widened to float64 inside the ufunc
    return np.ascontiguousarray(prod).sum(axis=-1)


def _error_bound(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Per query, an upper bound on |float32 score - exact score| (standard dot-product bound).

    |fl(q.c) - q.c| <= gamma_d * sum|q_i c_i| <= gamma_d * ||q|| * max_j ||c_j||, gamma_d = d*u/(1-d*u), for any
    summation order (BLAS blocking, FMA, faiss' kernels); doubled for safety (norms from float32 sums, inflated by
    1% to cover their own rounding).
    """
    d = q.shape[1]
    gamma = (d + 2) * _U32 / (1 - (d + 2) * _U32)
    cmax = float(np.sqrt(np.einsum("ij,ij->i", c, c).max())) if len(c) else 0.0
    qn = np.sqrt(np.einsum("ij,ij->i", q, q).astype(np.float64))
    return 2.02 * gamma * qn * cmax + 1e-30


def _block_rows(n_chunks: int, batch_size: int | None) -> int:
    """Queries per score block: ``batch_size`` when given, else ``_BLOCK_MAX_ROWS`` (an efficient matrix product)
    unless the float32 block would exceed ``_BLOCK_ENTRIES`` entries (memory)."""
    if batch_size:
        return max(int(batch_size), 1)
    return int(min(_BLOCK_MAX_ROWS, max(16, _BLOCK_ENTRIES // max(n_chunks, 1))))


def _kth_threshold(s: np.ndarray, kk: int) -> np.ndarray:
    """Per row of the float32 block ``s``, a value t with at least ``kk`` entries >= t: the kk-th largest of a
    strided sample of the columns (the sample's own entries are >= t, so the guarantee holds for any sample). The
    sample (about sqrt(n * kk) columns) makes this far cheaper than selecting over the whole row."""
    n = s.shape[1]
    step = max(1, int(np.sqrt(n / kk))) if n >= 4 * kk else 1
    sub = s[:, ::step]
    m = sub.shape[1]
    return np.partition(sub, m - kk, axis=1)[:, m - kk]


def _kth_largest_ragged(qi: np.ndarray, f: np.ndarray, n_rows: int, kk: int) -> np.ndarray:
    """Per group ``qi`` (ascending), the kk-th largest of ``f``; -inf for a group with fewer than kk entries."""
    counts = np.bincount(qi, minlength=n_rows)
    out = np.full(n_rows, -np.inf, dtype=np.float32)
    full = np.flatnonzero(counts >= kk)
    if len(full) == 0:
        return out
    width = int(counts.max())
    starts = np.cumsum(counts) - counts
    pad = np.full((n_rows, width), -np.inf, dtype=np.float32)
    pad[qi, np.arange(len(qi)) - starts[qi]] = f
    out[full] = np.partition(pad[full], width - kk, axis=1)[:, width - kk]
    return out


def _pair_scores(q: np.ndarray, c: np.ndarray, qi: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`exact_scores` of the pairs (query ``qi``, chunk ``rows``), ``qi`` ascending. Each query's pairs are
    laid out as one padded row, so its vector is widened to float64 once, not once per pair; a query with very
    many pairs (a wide tie group) goes through a flat layout instead. Every pair gets the same bits either way."""
    n_rows = int(qi[-1]) + 1 if len(qi) else 0
    counts = np.bincount(qi, minlength=n_rows)
    pos = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]
    out = np.empty(len(qi), dtype=np.float64)
    d = max(q.shape[1], 1)
    narrow = counts <= 4 * max(int(np.median(counts[counts > 0])) if (counts > 0).any() else 1, _PAD)
    sel = narrow[qi]
    if sel.any():
        width = int(counts[narrow].max())
        group = np.flatnonzero(narrow & (counts > 0))
        slot = np.full(n_rows, -1, dtype=np.int64)
        slot[group] = np.arange(len(group))
        pad = np.zeros((len(group), width), dtype=np.int64)
        pad[slot[qi[sel]], pos[sel]] = rows[sel]
        step = max(1, _EXACT_ENTRIES // (width * d))  # queries per piece: bounded float64 temporaries
        got = np.empty((len(group), width), dtype=np.float64)
        for lo in range(0, len(group), step):
            g = group[lo:lo + step]
            got[lo:lo + step] = exact_scores(q[g][:, None, :], c[pad[lo:lo + step]])
        out[sel] = got[slot[qi[sel]], pos[sel]]
    wide = np.flatnonzero(~sel)
    step = max(1, _EXACT_ENTRIES // d)
    for lo in range(0, len(wide), step):
        w = wide[lo:lo + step]
        out[w] = exact_scores(q[qi[w]], c[rows[w]])
    return out


def _rank_exact(q: np.ndarray, c: np.ndarray, tie: np.ndarray, qi: np.ndarray, rows: np.ndarray, n_rows: int,
                kk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact scores of the (query ``qi``, chunk ``rows``) pairs (``qi`` ascending), ranked per query by
    ``(-score, chunk_id)``: the first ``kk`` of each query as ``(idx, scores, n)`` — (n_rows, kk) arrays (unused
    slots 0) and how many each query filled."""
    s = _pair_scores(q, c, qi, rows)
    order = np.lexsort((tie[rows], -s, qi))
    qi, rows, s = qi[order], rows[order], s[order]
    counts = np.bincount(qi, minlength=n_rows)
    rank = np.arange(len(qi)) - (np.cumsum(counts) - counts)[qi]
    keep = rank < kk
    idx = np.zeros((n_rows, kk), dtype=np.int64)
    out = np.zeros((n_rows, kk), dtype=np.float64)
    idx[qi[keep], rank[keep]] = rows[keep]
    out[qi[keep], rank[keep]] = s[keep]
    return idx, out, np.minimum(counts, kk)


def _block_candidates(q: np.ndarray, c: np.ndarray, s: np.ndarray | None, kk: int, err: np.ndarray,
                      faiss_index: Any = None, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (qi, rows) whose exact scores decide the top ``kk`` of each query of a block.

    With f a float32 score (|f - exact| <= err) and T the kk-th largest f of the query, every chunk with
    f < T - 2 err scores exactly below each of the kk chunks with f >= T (their exact scores are >= T - err), so
    the exact top kk, ties at the cut included, lies among the chunks with f >= T - 2 err: that set is returned,
    found from the score block ``s`` (``q @ c.T``) or, with faiss, from its top ``kk + _PAD`` (widened to a
    float32 pass over all chunks for a query whose candidate list could end inside that set).
    """
    n = c.shape[0]
    b = len(q)
    if kk >= n:  # every chunk is listed: rank them all
        return np.repeat(np.arange(b), n), np.tile(np.arange(n, dtype=np.int64), b)
    if s is not None:
        t = _kth_threshold(s, kk)
        flat = np.flatnonzero(np.greater_equal(s, t[:, None], out=mask))  # row-major: queries ascending
        qi, rows = np.divmod(flat, n)
        f = s.ravel()[flat]
        cut = _kth_largest_ragged(qi, f, b, kk).astype(np.float64) - 2 * err
        wide = ~(t.astype(np.float64) <= cut)  # the cut lies below t (or is not finite): look at the whole row
    else:
        n_cand = min(n, kk + _PAD)
        f2, r2 = faiss_index.search(q, n_cand)
        qi = np.repeat(np.arange(b), n_cand)
        rows, f = r2.ravel().astype(np.int64), f2.ravel()
        cut = np.sort(f2, axis=1)[:, n_cand - kk].astype(np.float64) - 2 * err
        wide = (n_cand < n) & ~(f2.min(axis=1).astype(np.float64) < cut) | (r2 < 0).any(axis=1)
    keep = ~wide[qi] & (f >= cut[qi])
    qi, rows = qi[keep], rows[keep].astype(np.int64)
    if wide.any():
        w = np.flatnonzero(wide)
        sw = s[w] if s is not None else q[w] @ c.T
        cw = cut[w]
        full = ~np.isfinite(cw)
        wq, wr = np.divmod(np.flatnonzero((sw >= cw[:, None]) | full[:, None]), n)
        qi, rows = np.concatenate([qi, w[wq]]), np.concatenate([rows, wr.astype(np.int64)])
        order = np.argsort(qi, kind="stable")
        qi, rows = qi[order], rows[order]
    return qi, rows


def _flat_blocks(q: np.ndarray, c: np.ndarray, tie: np.ndarray, kk: int, backend: str, batch_size: int | None,
                 err: np.ndarray):
    """Exact top ``kk`` per query, block by block: yields ``(lo, hi, idx, scores, s)`` where ``s`` is the block's
    float32 score matrix ``q[lo:hi] @ c.T`` (None with faiss, which never forms it). ``err`` is
    :func:`_error_bound` of ``q`` and ``c``, which a caller that needs it too computes once."""
    if backend not in ("faiss", "numpy"):
        raise ValueError(f"retrieve.backend: {backend!r} is not one of ['faiss', 'numpy']")
    index = None
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(c.shape[1])
        index.add(c)
    step = _block_rows(len(c), batch_size)
    ct = c.T
    # one score buffer and one mask buffer for all blocks: a fresh 100+ MB array per block costs its page faults
    buf = np.empty((min(step, len(q)), len(c)), dtype=np.float32) if index is None else None
    mask = np.empty(buf.shape, dtype=bool) if buf is not None else None
    for lo in range(0, len(q), step):
        hi = min(lo + step, len(q))
        qb = q[lo:hi]
        s = np.matmul(qb, ct, out=cast(np.ndarray, buf)[:hi - lo]) if index is None else None
        qi, rows = _block_candidates(qb, c, s, kk, err[lo:hi], index, None if mask is None else mask[:hi - lo])
        idx, scores, _ = _rank_exact(qb, c, tie, qi, rows, hi - lo, kk)
        yield lo, hi, idx, scores, s


def flat_search(query_vecs: Any, chunk_vecs: Any, chunk_ids: Sequence | np.ndarray, k: int, backend: str,
                batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k inner-product search of every query over every chunk.

    Returns ``(idx, scores)``, both shape (n_queries, min(k, n_chunks)): ``idx`` int64 rows into ``chunk_vecs``,
    ``scores`` float64 exact inner products (see module docstring), ranked by ``(-score, chunk_id)``.
    ``backend`` only proposes candidates ("numpy": one float32 matrix product per block of ``batch_size``
    queries (default: sized to the number of chunks); "faiss": ``IndexFlatIP``); both give identical results.
    """
    q = _as_matrix(query_vecs, "query_vecs")
    c = _as_matrix(chunk_vecs, "chunk_vecs")
    if len(chunk_ids) != len(c):
        raise ValueError(f"chunk_ids: {len(chunk_ids)} ids for {len(c)} chunk vectors")
    if q.shape[1] != c.shape[1] and len(c) and len(q):
        raise ValueError(f"query_vecs have dimension {q.shape[1]}, chunk_vecs {c.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if backend not in ("faiss", "numpy"):
        raise ValueError(f"retrieve.backend: {backend!r} is not one of ['faiss', 'numpy']")
    tie = _tie_rank(chunk_ids)
    kk = min(k, len(c))
    idx = np.zeros((len(q), kk), dtype=np.int64)
    out = np.zeros((len(q), kk), dtype=np.float64)
    if kk == 0 or len(q) == 0:
        return idx, out
    for lo, hi, bi, bs, _ in _flat_blocks(q, c, tie, kk, backend, batch_size, _error_bound(q, c)):
        idx[lo:hi], out[lo:hi] = bi, bs
    return idx, out


# --------------------------------------------------------------------------------------------------------------
# two-stage search


def section_centroids(chunk_vecs: Any, route_keys: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centroids of sections: ``(keys, centroids, codes)``.

    ``keys`` are the sorted unique ``route_keys``; ``centroids[j]`` = sum of the chunk vectors of section j divided
    by its norm (the renormalised mean: mean/||mean|| = sum/||sum||), float32; ``codes[i]`` = section of chunk i.
    A section whose vectors sum to zero has no direction and raises.
    """
    return _centroids(_as_matrix(chunk_vecs, "chunk_vecs"), route_keys)


def _centroids(c: np.ndarray, route_keys: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`section_centroids` of an already validated float32 matrix."""
    keys = np.asarray(route_keys)
    if keys.dtype == object:
        keys = keys.astype(str)
    if len(keys) != len(c):
        raise ValueError(f"route_keys: {len(keys)} keys for {len(c)} chunk vectors")
    uniq, codes = np.unique(keys, return_inverse=True)
    codes = codes.reshape(-1)
    sums = _section_sums(c, codes, len(uniq))
    norms = np.sqrt((sums ** 2).sum(axis=1))
    if (norms == 0).any():
        raise ValueError(f"section {uniq[np.flatnonzero(norms == 0)[0]]!r}: its chunk vectors sum to zero; "
                         "the centroid has no direction")
    return uniq, np.divide(sums, norms[:, None], out=sums).astype(np.float32), codes.astype(np.int64)


def _section_sums(c: np.ndarray, codes: np.ndarray, n_sections: int) -> np.ndarray:
    """Per section, the float64 sum of its chunk vectors (rows in index order), bit for bit what
    ``np.add.reduceat(c[order].astype(float64), starts, axis=0)`` gives: the first row plus numpy's pairwise sum
    of the others, per dimension. reduceat pays a fixed cost per (section, dimension); here sections of one
    length are summed together, as one reduction along a contiguous axis (numpy's pairwise order), so 22,000
    sections cost about what one pass over the vectors does."""
    d = c.shape[1]
    sums = np.zeros((n_sections, d), dtype=np.float64)
    if len(c) == 0:
        return sums
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=n_sections)
    starts = np.cumsum(counts) - counts
    for length in np.unique(counts[counts > 0]):
        same = np.flatnonzero(counts == length)
        step = max(1, _EXACT_ENTRIES // int(length * d))  # sections per piece: bounded float64 temporaries
        for lo in range(0, len(same), step):
            sec = same[lo:lo + step]
            rows = order[starts[sec][:, None] + np.arange(length)]  # (sections, length): chunk rows in order
            if length == 1:
                sums[sec] = c[rows[:, 0]]
            elif length <= 8:  # numpy sums fewer than 8 values left to right: the same, elementwise over sections
                block = c[rows]
                rest = block[:, 1].astype(np.float64)
                for j in range(2, length):
                    rest += block[:, j]
                sums[sec] = block[:, 0] + rest
            else:  # (sections, d, length - 1), contiguous along the summed axis: numpy's pairwise order
                rest = np.ascontiguousarray(c[rows[:, 1:]].transpose(0, 2, 1), dtype=np.float64)
                sums[sec] = c[rows[:, 0]] + np.add.reduce(rest, axis=-1)
    return sums


class TwoStageResult(NamedTuple):
    """Result of :func:`two_stage_search` (all arrays have one row per query)."""

    idx: np.ndarray          # (n_q, k) int64 rows into chunk_vecs, -1 never occurs when n_chunks >= k
    scores: np.ndarray       # (n_q, k) float64 exact inner products
    routed: np.ndarray       # (n_q, n_sections) section keys kept by stage 1, best first
    routed_scores: np.ndarray  # (n_q, n_sections) float64 centroid scores
    n_routed: np.ndarray     # (n_q,) how many list entries come from routed sections (the rest is backfill)


def two_stage_search(query_vecs: Any, chunk_vecs: Any, chunk_ids: Sequence, route_keys: Sequence, k: int,
                     n_sections: int, backend: str, batch_size: int | None = None) -> TwoStageResult:
    """Route-to-section, then rank (paper, Method, "Representation constancy").

    Stage 1 ranks section centroids (:func:`section_centroids`) by inner product, ties by ``(-score, key)``, and
    keeps ``n_sections``. Stage 2 ranks all chunks of the routed sections by ``(-score, chunk_id)``. If they are
    fewer than k, the global flat ranking (:func:`flat_search`) backfills the list, in its order, skipping chunks
    already listed. So: routed chunks come first, the list has min(k, n_chunks) entries, no chunk repeats, and
    with every section routed the result equals flat search.

    Cost: one matrix product against the centroids, one against the chunks per block of queries; that score
    block serves both the global ranking and the routed chunks (whose exact scores are computed only for those
    that can reach the top k), with no loop over queries.
    """
    q = _as_matrix(query_vecs, "query_vecs")
    c = _as_matrix(chunk_vecs, "chunk_vecs")
    keys, centroids, codes = _centroids(c, route_keys)
    tie = _tie_rank(chunk_ids)
    kk = min(k, len(c))
    sec_idx, sec_scores = flat_search(q, centroids, keys, k=n_sections, backend=backend, batch_size=batch_size)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
    idx = np.zeros((len(q), kk), dtype=np.int64)
    scores = np.zeros((len(q), kk), dtype=np.float64)
    n_routed = np.zeros(len(q), dtype=np.int64)
    if kk == 0 or len(q) == 0:
        return TwoStageResult(idx, scores, keys[sec_idx], sec_scores, n_routed)
    err = _error_bound(q, c)
    ns = sec_idx.shape[1]
    for lo, hi, g_idx, g_scores, s in _flat_blocks(q, c, tie, kk, backend, batch_size, err):
        b = hi - lo
        sec = sec_idx[lo:hi]
        # every (query, chunk of a routed section) pair, query by query
        lens = (bounds[sec + 1] - bounds[sec]).ravel()
        first = bounds[sec].ravel()
        seg = np.cumsum(lens) - lens
        rows = order[np.arange(int(lens.sum())) - np.repeat(seg - first, lens)]
        qi = np.repeat(np.repeat(np.arange(b), ns), lens)
        m = np.bincount(qi, minlength=b)
        big = m > kk
        if big.any():  # only chunks whose float32 score can reach the query's routed top k are scored exactly
            f = s[qi, rows] if s is not None else np.einsum("ij,ij->i", q[lo + qi], c[rows])
            cut = _kth_largest_ragged(qi, f, b, kk).astype(np.float64) - 2 * err[lo:hi]
            keep = ~big[qi] | (f >= cut[qi]) | ~np.isfinite(cut[qi])
            qi, rows = qi[keep], rows[keep]
        r_idx, r_scores, n_r = _rank_exact(q[lo:hi], c, tie, qi, rows, b, kk)
        # backfill: the global ranking in its order, minus chunks of routed sections
        free = ~(codes[g_idx][:, :, None] == sec[:, None, :]).any(axis=2)
        pos = np.cumsum(free, axis=1) - 1
        need = kk - n_r
        take = free & (pos < need[:, None])
        if (take.sum(axis=1) != need).any():  # the global top k cannot be short of k chunks outside the routed
            raise RuntimeError("backfill found fewer chunks than needed; this is a bug")
        ti, tj = np.nonzero(take)
        dest = n_r[ti] + pos[ti, tj]
        r_idx[ti, dest], r_scores[ti, dest] = g_idx[ti, tj], g_scores[ti, tj]
        idx[lo:hi], scores[lo:hi], n_routed[lo:hi] = r_idx, r_scores, n_r
    return TwoStageResult(idx, scores, keys[sec_idx], sec_scores, n_routed)


# --------------------------------------------------------------------------------------------------------------
# section recall


def section_extents(chunks: pd.DataFrame) -> pd.DataFrame:
    """Character extent of every section as the union of its chunks' ``[start, end)`` in its document.

    Returns one row per maximal interval: doc_id, route_key, start, end (half-open content offsets; adjacent
    chunks merge into one interval).
    """
    stages.check(chunks, "chunks", ("doc_id", "route_key", "start", "end"), "retrieve.section_extents")
    df = chunks[["doc_id", "route_key", "start", "end"]].sort_values(["doc_id", "route_key", "start", "end"])
    df = df[df["end"] > df["start"]]
    if df.empty:
        return pd.DataFrame({"doc_id": [], "route_key": [], "start": [], "end": []})
    same = (df["doc_id"].eq(df["doc_id"].shift()) & df["route_key"].eq(df["route_key"].shift())).to_numpy()
    run_end = df.groupby(["doc_id", "route_key"], sort=False)["end"].cummax().shift().to_numpy()
    new = ~same | (df["start"].to_numpy() > np.where(same, run_end, -1))
    grp = np.cumsum(new)
    out = df.groupby(grp, sort=False).agg(doc_id=("doc_id", "first"), route_key=("route_key", "first"),
                                          start=("start", "min"), end=("end", "max"))
    return out.reset_index(drop=True).astype({"start": np.int64, "end": np.int64})


def gold_sections(queries: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """Sections overlapping each query's gold evidence: query_id, doc_id, route_key (one row per pair).

    Overlap means at least one shared character between a gold span and the section's extent, both half-open
    content offsets in the query's own document (offsets are per-document coordinates).
    """
    stages.check(queries, "queries", ("query_id", "doc_id", "spans"), "retrieve.gold_sections")
    spans = queries[["query_id", "doc_id", "spans"]].explode("spans").dropna(subset=["spans"])
    if spans.empty:
        return pd.DataFrame({"query_id": [], "doc_id": [], "route_key": []})
    pairs = np.array([list(map(int, sp)) for sp in spans["spans"]], dtype=np.int64).reshape(-1, 2)
    spans = spans.drop(columns="spans").assign(s_start=pairs[:, 0], s_end=pairs[:, 1])
    hits = spans.merge(section_extents(chunks), on="doc_id")
    hits = hits[np.maximum(hits["s_start"], hits["start"]) < np.minimum(hits["s_end"], hits["end"])]
    return hits[["query_id", "doc_id", "route_key"]].drop_duplicates().reset_index(drop=True)


def section_recall(routed: pd.DataFrame, queries: pd.DataFrame, chunks: pd.DataFrame) -> pd.DataFrame:
    """Per query: did stage 1 keep any section that overlaps gold evidence? (paper, Sections 4 and 6.4)

    ``routed``: query_id, route_rank (1-based), doc_id, route_key — the sections stage 1 kept. ``chunks``: the
    condition's chunks (their union per section is its extent, :func:`section_extents`).
    Returns query_id, doc_id, section_recall (nullable boolean: NA when no section overlaps the evidence, e.g. an
    empty span list), n_gold_sections, n_routed_gold, first_gold_route_rank (NA when none was routed).
    """
    gold = gold_sections(queries, chunks)
    n_gold = gold.groupby("query_id").size()
    hit = routed.merge(gold, on=["query_id", "doc_id", "route_key"])
    n_hit = hit.groupby("query_id").size()
    first = hit.groupby("query_id")["route_rank"].min()
    out = queries[["query_id", "doc_id"]].copy().reset_index(drop=True)
    out["n_gold_sections"] = out["query_id"].map(n_gold).fillna(0).astype(np.int64)
    out["n_routed_gold"] = out["query_id"].map(n_hit).fillna(0).astype(np.int64)
    out["section_recall"] = pd.array(out["n_routed_gold"] > 0, dtype="boolean")
    out.loc[out["n_gold_sections"] == 0, "section_recall"] = pd.NA
    out["first_gold_route_rank"] = pd.array(out["query_id"].map(first), dtype="Int64")
    return out


# --------------------------------------------------------------------------------------------------------------
# the whole stage


def _runs_frame(embedder: str, condition: str, query_ids: np.ndarray, cond_chunks: pd.DataFrame,
                idx: np.ndarray, scores: np.ndarray, source: np.ndarray) -> pd.DataFrame:
    nq, kk = idx.shape
    flat = idx.ravel()
    return pd.DataFrame({
        "embedder": embedder,
        "reranker": "none",
        "condition": condition,
        "query_id": np.repeat(query_ids, kk),
        "rank": np.tile(np.arange(1, kk + 1, dtype=np.int64), nq),
        "chunk_id": cond_chunks["chunk_id"].to_numpy()[flat],
        "score": scores.ravel(),
        "doc_id": cond_chunks["doc_id"].to_numpy()[flat],
        "source": source.ravel(),
    }, columns=_RUNS_COLUMNS)


def retrieve_all(chunks: pd.DataFrame, vectors_by_embedder: Mapping[str, np.ndarray],
                 query_vecs_by_embedder: Mapping[str, np.ndarray], queries: pd.DataFrame,
                 retrieve_params: RetrieveParams) -> dict[str, pd.DataFrame]:
    """Retrieve every query under every (embedder, condition): flat, or two-stage for ``two_stage_conditions``.

    ``chunks``: the 04 table (condition, doc_id, chunk_id, start, end, route_key, text_row); a condition's chunk
    vectors are ``vectors_by_embedder[e][chunks.text_row]``. ``query_vecs_by_embedder[e]`` has one row per row of
    ``queries`` (same order). ``retrieve_params``: the ``retrieve`` record, ``cfg.params("retrieve")`` (k,
    route_sections, backend, two_stage_conditions; a mapping is validated into one). Every query searches all
    chunks of the corpus under that condition. Returns ``{"runs": ..., "section_recall": ..., "timing": ...}``.
    timing: embedder, condition, n_queries, the cell's search seconds (:func:`chunkstudy.progress.timed`, ``retrieve.timing_repeats``;
    measured here, never in a golden). runs: embedder, reranker ("none"), condition, query_id, rank
    (1-based), chunk_id, score, doc_id, source ("flat" | "routed" | "backfill"). section_recall (two-stage
    conditions only): embedder, reranker, condition, query_id, doc_id, section_recall, n_gold_sections,
    n_routed_gold, first_gold_route_rank, routed_doc_ids, routed_route_keys, routed_scores (lists, best first).
    """
    stages.check(chunks, "chunks", ("condition", "doc_id", "chunk_id", "start", "end", "route_key", "text_row"),
                 "retrieve.retrieve_all")
    stages.check(queries, "queries", ("query_id", "doc_id", "spans"), "retrieve.retrieve_all")
    if chunks["chunk_id"].duplicated().any():
        raise ValueError(f"chunks: chunk_id {chunks.loc[chunks['chunk_id'].duplicated(), 'chunk_id'].iloc[0]!r} "
                         "occurs more than once (chunk ids must be unique across conditions)")
    p = retrieve_params
    k, n_sections, backend, two_stage = p.k, p.route_sections, p.backend, set(p.two_stage_conditions)
    repeats = int(getattr(p, "timing_repeats", 0))
    query_ids = queries["query_id"].astype(str).to_numpy()
    runs, recall, timing = [], [], []
    for embedder in vectors_by_embedder:
        if embedder not in query_vecs_by_embedder:
            raise KeyError(f"query vectors for embedder {embedder!r} are missing; have {list(query_vecs_by_embedder)}")
        matrix = np.asarray(vectors_by_embedder[embedder])
        qv = _as_matrix(query_vecs_by_embedder[embedder], f"query vectors ({embedder})")
        if len(qv) != len(queries):
            raise ValueError(f"query vectors ({embedder}): {len(qv)} rows for {len(queries)} queries")
        if len(qv) and matrix.ndim == 2 and qv.shape[1] != matrix.shape[1]:  # the server's model changed after 04
            raise ValueError(f"query vectors ({embedder}) have dimension {qv.shape[1]}, 04's chunk vectors "
                             f"{matrix.shape[1]}: the model changed since 04 ran; rerun from 04 (--from 04 --force)")
        for condition, cc in chunks.groupby("condition", sort=True):
            cc = cc.reset_index(drop=True)
            rows = cc["text_row"].to_numpy()
            if len(rows) and (rows.min() < 0 or rows.max() >= len(matrix)):
                raise IndexError(f"chunks ({condition}): text_row {int(rows.max())} is outside the {embedder!r} "
                                 f"vectors matrix of {len(matrix)} rows; 04_chunk_embed wrote them inconsistently")
            cvec = matrix[rows]
            ids = cc["chunk_id"].astype(str).to_numpy()
            if condition in two_stage:
                # a section is (document, top-level heading); route_key alone may repeat across documents
                labels = cc["doc_id"].astype(str) + "\x1f" + cc["route_key"].astype(str)
                res, seconds = progress.timed(lambda: two_stage_search(qv, cvec, ids, labels.to_numpy(), k=k,
                                                              n_sections=n_sections, backend=backend), repeats)
                source = np.where(np.arange(res.idx.shape[1])[None, :] < res.n_routed[:, None], "routed",
                                  "backfill")
                runs.append(_runs_frame(embedder, condition, query_ids, cc, res.idx, res.scores, source))
                split = np.char.partition(res.routed.astype(str), "\x1f")
                routed = pd.DataFrame({
                    "query_id": np.repeat(query_ids, res.routed.shape[1]),
                    "route_rank": np.tile(np.arange(1, res.routed.shape[1] + 1), len(query_ids)),
                    "doc_id": split[..., 0].ravel(), "route_key": split[..., 2].ravel()})
                sr = section_recall(routed, queries.assign(query_id=query_ids), cc.astype({"doc_id": str,
                                                                                           "route_key": str}))
                sr.insert(0, "condition", condition)
                sr.insert(0, "reranker", "none")
                sr.insert(0, "embedder", embedder)
                sr["routed_doc_ids"] = list(split[..., 0])
                sr["routed_route_keys"] = list(split[..., 2])
                sr["routed_scores"] = list(res.routed_scores)
                recall.append(sr)
            else:
                (idx, scores), seconds = progress.timed(lambda: flat_search(qv, cvec, ids, k=k, backend=backend), repeats)
                source = np.full(idx.shape, "flat", dtype=object)
                runs.append(_runs_frame(embedder, condition, query_ids, cc, idx, scores, source))
            timing.append({"embedder": embedder, "condition": str(condition), "n_queries": int(len(query_ids)),
                           **seconds})
    runs_df = pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(columns=_RUNS_COLUMNS)
    recall_df = (pd.concat(recall, ignore_index=True) if recall
                 else pd.DataFrame(columns=stages.columns("section_recall")))
    return {"runs": runs_df, "section_recall": recall_df,
            "timing": pd.DataFrame(timing, columns=["embedder", "condition", "n_queries", *progress.TIMING_COLUMNS])}


# --------------------------------------------------------------------------------------------------------------
# helpers the notebook displays


def embed_queries(queries: pd.DataFrame, embedders: Mapping[str, Any], store: Any) -> dict[str, np.ndarray]:
    """Query vectors per embedder key, one row per row of ``queries``, through the persistent embedding store
    (``store``, an ``embed_store.EmbeddingStore``), for ``cfg.params("embed").embedders``; ``kind="query"`` (the
    BGE query instruction where the spec asks for it)."""
    from . import embed

    texts = queries["text"].astype(str).tolist()
    return {key: np.asarray(store.embed(embed.load_embedder(spec, key), texts, kind="query"))
            for key, spec in embedders.items()}


def vector_shapes(vectors_by_embedder: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Rows and dimension of each embedder's vectors (for display): one column per embedder."""
    return pd.DataFrame({key: {"queries": v.shape[0], "dim": v.shape[1]} for key, v in vectors_by_embedder.items()})


def section_recall_summary(section_recall_df: pd.DataFrame) -> pd.DataFrame:
    """Per (embedder, reranker, condition): mean section recall over the queries where it is defined (not NA),
    ``n_queries``, ``n_defined``, the binomial standard error ``se = sqrt(r(1−r)/n_defined)`` and, when the
    table has it, the mean number of gold sections per query: the ``section_recall_summary`` table 05 writes and
    08 formats."""
    stages.check(section_recall_df, "section_recall", ("embedder", "reranker", "condition", "query_id",
                                                       "section_recall"), "retrieve.section_recall_summary")
    df = section_recall_df.assign(defined=section_recall_df["section_recall"].notna(),
                                  hit=section_recall_df["section_recall"].astype("float64"))
    extra = {"mean_gold_sections": ("n_gold_sections", "mean")} if "n_gold_sections" in df.columns else {}
    out = (df.groupby(["embedder", "reranker", "condition"])
             .agg(section_recall=("hit", "mean"), n_queries=("query_id", "size"), n_defined=("defined", "sum"),
                  **extra).reset_index())
    r = out["section_recall"]
    out["se"] = np.sqrt(r * (1 - r) / out["n_defined"].where(out["n_defined"] > 0))
    return out.astype({"n_queries": "int64", "n_defined": "int64"})


def query_view(runs: pd.DataFrame, section_recall_df: pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame,
               documents: pd.DataFrame, query_id: str, conditions: Sequence[str], *, reranker: str,
               embedder: str | None = None, n: int = 10, snippet_chars: int = 90) -> pd.DataFrame:
    """The top ``n`` results of one query under ``conditions``, for reading: condition, rank, chunk_id, doc_id,
    route_key, score, source, in_routed (the chunk's section was kept by stage 1), gold_chars (characters of the
    query's gold spans inside the chunk, content offsets) and a content snippet."""
    sel = runs[(runs["query_id"] == query_id) & runs["condition"].isin(conditions) & (runs["reranker"] == reranker)
               & (runs["rank"] <= n)]
    if embedder is not None:
        sel = sel[sel["embedder"] == embedder]
    if sel.empty:
        raise KeyError(f"runs: no rows for query {query_id!r} under {list(conditions)} (embedder {embedder!r})")
    view = sel.merge(chunks[["chunk_id", "start", "end", "route_key"]], on="chunk_id", how="left")
    q = queries.loc[queries["query_id"] == query_id].iloc[0]
    spans = np.array([list(map(int, s)) for s in q["spans"]], dtype=np.int64).reshape(-1, 2)
    same_doc = (view["doc_id"] == q["doc_id"]).to_numpy()
    st, en = view["start"].to_numpy()[:, None], view["end"].to_numpy()[:, None]
    inter = np.clip(np.minimum(en, spans[:, 1]) - np.maximum(st, spans[:, 0]), 0, None).sum(axis=1)
    view["gold_chars"] = np.where(same_doc, inter, 0)
    routed = section_recall_df[(section_recall_df["query_id"] == query_id)
                               & section_recall_df["condition"].isin(conditions)]
    if embedder is not None:
        routed = routed[routed["embedder"] == embedder]
    kept = {(r.embedder, r.condition, d, k) for r in routed.itertuples()
            for d, k in zip(r.routed_doc_ids, r.routed_route_keys)}
    view["in_routed"] = [(e, c, d, k) in kept if c in set(routed["condition"]) else pd.NA
                         for e, c, d, k in zip(view["embedder"], view["condition"], view["doc_id"],
                                               view["route_key"])]
    text = documents.set_index("doc_id")["text"]
    view["snippet"] = [text[d][s:s + snippet_chars].replace("\n", " ")
                       for d, s in zip(view["doc_id"], view["start"])]
    return view[["embedder", "condition", "rank", "chunk_id", "doc_id", "route_key", "score", "source",
                 "in_routed", "gold_chars", "snippet"]].reset_index(drop=True)


def routed_sections(section_recall_df: pd.DataFrame, query_id: str, embedder: str | None = None) -> pd.DataFrame:
    """The sections stage 1 kept for one query (one row per routed section, best first), centroid scores."""
    sel = section_recall_df[section_recall_df["query_id"] == query_id]
    if embedder is not None:
        sel = sel[sel["embedder"] == embedder]
    if sel.empty:
        raise KeyError(f"section_recall: no rows for query {query_id!r}")
    out = sel[["embedder", "condition", "query_id", "routed_doc_ids", "routed_route_keys", "routed_scores"]].explode(
        ["routed_doc_ids", "routed_route_keys", "routed_scores"]).rename(
        columns={"routed_doc_ids": "doc_id", "routed_route_keys": "route_key", "routed_scores": "centroid_score"})
    out["route_rank"] = out.groupby(["embedder", "condition"]).cumcount() + 1
    return out.reset_index(drop=True)


def example_query(section_recall_df: pd.DataFrame, embedder: str, condition: str) -> str:
    """A query to read in the notebook: the first (by query_id) whose gold sections stage 1 missed under
    ``condition`` (a routing failure shows what C4 measures), else the first query."""
    sel = section_recall_df[(section_recall_df["embedder"] == embedder)
                            & (section_recall_df["condition"] == condition)].sort_values("query_id")
    if sel.empty:
        raise KeyError(f"section_recall: no rows for embedder {embedder!r}, condition {condition!r}")
    missed = sel[sel["section_recall"].eq(False).fillna(False).astype(bool)]
    return str((missed if len(missed) else sel)["query_id"].iloc[0])
