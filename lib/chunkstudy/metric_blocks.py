"""Vectorised building blocks of the metrics: the log discount, the novelty term, grouped sums and the join of gold
targets with the chunks that overlap them. Offsets are half-open character indices; every function is pure and
needs only numpy, so the metrics' own computations (:mod:`chunkstudy.design_metrics`, beside their declarations)
and stage 06's scoring (:mod:`chunkstudy.metrics`) share them from the foundation."""

from __future__ import annotations

from typing import Any

import numpy as np


def discount(rank) -> np.ndarray:
    """The log discount ``1 / log2(rank + 1)`` of a 1-based rank."""
    return 1.0 / np.log2(np.asarray(rank, dtype=np.float64) + 1.0)


def new_coverage(group, lo, hi) -> np.ndarray:
    """Characters of each interval not covered by earlier intervals of its group (the novelty term).

    Rows must be sorted by group and, within a group, in rank order; ``[lo, hi)`` are half-open character
    intervals (non-negative integers, ``lo <= hi``). Returns, per row, ``|[lo_i, hi_i) \\ ∪_{i' < i, same group}
    [lo_i', hi_i')|`` as float64. Vectorised: the group's interval ends cut it into elementary segments; each
    segment is credited to the first row that covers it.
    """
    group = np.asarray(group, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    n = len(group)
    if n == 0:
        return np.zeros(0)
    big = int(hi.max()) + 1
    k_lo, k_hi = group * big + lo, group * big + hi
    points = np.unique(np.concatenate([k_lo, k_hi]))
    a = np.searchsorted(points, k_lo)
    b = np.searchsorted(points, k_hi)
    seg, row = expand(a, b - a)
    if len(seg) == 0:
        return np.zeros(n)
    segments, first = np.unique(seg, return_index=True)   # first occurrence = earliest row (rows are in order)
    length = (points[segments + 1] - points[segments]).astype(np.float64)
    return np.bincount(row[first], weights=length, minlength=n)


def expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For row i, the indices ``start[i] .. start[i] + count[i] - 1`` and the row number of each."""
    count = np.maximum(count, 0)
    total = int(count.sum())
    row = np.repeat(np.arange(len(count)), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(start, count) + offset, row


def run_ids(key: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... numbering the runs of equal values of a sorted key (a cheap ``np.unique(..., return_inverse)``)."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.r_[0, np.cumsum(key[1:] != key[:-1])]


def group_sum(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(key, weights=values, minlength=n) if len(key) else np.zeros(n)


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(len(num))
    np.divide(num, den, out=out, where=den > 0)
    return out


def join_targets(ch: Any, cond_codes: np.ndarray, t_q: np.ndarray, t_lo: np.ndarray, t_hi: np.ndarray,
                  q_doc: np.ndarray) -> dict[str, np.ndarray]:
    """Every (condition, target, chunk) whose chunk (of the target's document, in that condition) overlaps the
    target interval. Returns arrays ``c, t, chunk, lo, hi`` (``[lo, hi)`` = the overlap). ``ch`` is 06's parsed
    chunks (:class:`chunkstudy.metrics.inputs.Chunks`: sorted by (condition, document, start), with the keys of that
    order)."""
    n_t, n_c = len(t_q), len(cond_codes)
    c = np.repeat(cond_codes.astype(np.int64), n_t)
    t = np.tile(np.arange(n_t), n_c)
    doc = q_doc[t_q][t]
    lo, hi = t_lo[t], t_hi[t]
    known = doc >= 0
    group = c * ch.n_docs + np.where(known, doc, 0)
    first = np.searchsorted(ch.key_maxend, group * ch.big + np.minimum(lo, ch.big - 1), side="right")
    last = np.searchsorted(ch.key_start, group * ch.big + np.minimum(hi, ch.big), side="left")
    idx, row = expand(first, np.where(known, last - first, 0))
    olo = np.maximum(ch.start[idx], lo[row])
    ohi = np.minimum(ch.end[idx], hi[row])
    keep = ohi > olo
    return {"c": c[row][keep], "t": t[row][keep], "chunk": idx[keep], "lo": olo[keep], "hi": ohi[keep]}
