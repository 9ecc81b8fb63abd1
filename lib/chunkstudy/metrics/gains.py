"""The coverage gains behind the metrics (stage 06): gold spans × each condition's own chunks of the query's
document, independent of any ranking (static gains, relevance, the greedy ideal orderings and both IDCGs), and the
run rows' novelty gains in rank order. Definitions: :mod:`chunkstudy.metrics`."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from ..params import MetricsParams
from ..relevance import rule
from ..metric_blocks import discount, expand, group_sum, join_targets, new_coverage, run_ids
from .inputs import Chunks, Queries, Runs


@dataclass
class Static:
    """Gold spans x the condition's own chunks, independent of any ranking: one entry per (condition, query,
    chunk) that overlaps a gold span (``keys`` = (cond * n_q + q) * n_chunks + chunk, sorted) with its static
    gain and relevance, plus the raw (condition, span, chunk) overlaps ``cand`` and their keys ``cqk``."""

    cand: dict[str, np.ndarray]
    cqk: np.ndarray
    keys: np.ndarray
    rel: np.ndarray
    ideal: dict[str, np.ndarray]   # ideal orderings: cq (= cond * n_q + q), pos, chunk, gain
    idcg: np.ndarray               # coverage IDCG@cutoff per cq
    bin_idcg: np.ndarray           # binary nDCG's IDCG@cutoff per cq


@dataclass
class RunGains:
    """Run rows x gold spans: per (run row, span) overlap ``rr, t, grp`` (sorted by list, span, rank) and its
    newly covered characters ``new``; per run row its coverage ``gain`` and relevance ``rel``."""

    rr: np.ndarray
    t: np.ndarray
    grp: np.ndarray
    new: np.ndarray
    gain: np.ndarray
    rel: np.ndarray


def static_gains(r: Runs, q: Queries, ch: Chunks, n_conds: int, p: MetricsParams) -> Static:
    """Gold spans x the condition's own chunks of the query's document (every condition the runs use): each
    chunk's static gain and relevance, the greedy ideal orderings and both IDCGs (ranking-free)."""
    n_q = r.n_q
    cand = join_targets(ch, np.unique(r.cell_cond), q.t_q, q.t_lo, q.t_hi, q.doc)
    c_q = q.t_q[cand["t"]]
    span_len = (q.t_hi - q.t_lo)[cand["t"]]
    ov = cand["hi"] - cand["lo"]
    chunk_len = ch.end[cand["chunk"]] - ch.start[cand["chunk"]]
    n_chunks = len(ch.cond)
    cqk = (cand["c"] * n_q + c_q) * n_chunks + cand["chunk"]       # (cond, query, chunk)
    static_keys, inv = np.unique(cqk, return_inverse=True)
    static_gain = np.bincount(inv, weights=ov / span_len / q.n_spans[c_q], minlength=len(static_keys))
    static_rel = np.bincount(inv, weights=rule(ov, span_len, chunk_len, p.span_frac, p.chunk_frac).astype(np.float64),
                             minlength=len(static_keys)) > 0
    s_cq = static_keys // n_chunks
    s_chunk = static_keys % n_chunks
    n_cq = n_conds * n_q
    n_rel = np.bincount(s_cq, weights=static_rel, minlength=n_cq)
    ideal = _ideal_orderings(s_cq, s_chunk, static_gain, cand, c_q, q, ch, n_q, p.cutoff)
    idcg = group_sum(ideal["cq"], ideal["gain"] * discount(ideal["pos"]), n_cq)
    bin_idcg = np.concatenate([[0.0], np.cumsum(discount(np.arange(1, p.cutoff + 1)))])[
        np.minimum(n_rel, p.cutoff).astype(np.int64)]
    return Static(cand, cqk, static_keys, static_rel, ideal, idcg, bin_idcg)


def run_gains(r: Runs, q: Queries, ch: Chunks, st: Static) -> RunGains:
    """Run rows x gold spans: the characters each retrieved chunk newly covers (novelty, in rank order within
    its list and span), its coverage gain and its relevance (looked up among the static entries)."""
    n_q, n_chunks = r.n_q, len(ch.cond)
    rows_sd = np.flatnonzero(r.same_doc)
    r_key = (r.c[rows_sd] * n_q + r.q[rows_sd]) * n_chunks + r.chunk_row[rows_sd]
    cand_order = np.argsort(st.cqk, kind="stable")
    sorted_cqk = st.cqk[cand_order]
    a = np.searchsorted(sorted_cqk, r_key, side="left")
    b = np.searchsorted(sorted_cqk, r_key, side="right")
    ci, ri = expand(a, b - a)
    ci = cand_order[ci]
    rr = rows_sd[ri]                                   # run row of each (run row, span) overlap
    t = st.cand["t"][ci]
    o = np.lexsort((r.rank[rr], t, r.lst[rr]))
    rr, t, olo, ohi = rr[o], t[o], st.cand["lo"][ci][o], st.cand["hi"][ci][o]
    grp = run_ids(r.lst[rr] * len(q.t_q) + t)
    new = new_coverage(grp, olo, ohi)
    span_len_rt = (q.t_hi - q.t_lo)[t]
    gain_rt = new / span_len_rt / q.n_spans[q.t_q[t]]
    gain = np.bincount(rr, weights=gain_rt, minlength=len(r.lst))

    s_pos = np.searchsorted(st.keys, r_key)
    rel = np.zeros(len(r.lst), dtype=bool)
    ok = s_pos < len(st.keys)
    rel[rows_sd[ok]] = st.rel[s_pos[ok]] & (st.keys[s_pos[ok]] == r_key[ok])
    return RunGains(rr, t, grp, new, gain, rel)


def _ideal_orderings(s_cq, s_chunk, static_gain, cand, c_q, q: Queries, ch: Chunks, n_q: int,
                     k: int) -> dict[str, np.ndarray]:
    """The greedy maximum-marginal-coverage ordering (top ``k``) per (condition, query).

    Where the condition's chunks of the document do not overlap each other, a chunk's marginal gain never
    changes, so greedy = sort by static gain (descending; ties in document order). Elsewhere the greedy loop
    runs with exact rational gains (:func:`_greedy`)."""
    s_over = ch.overlapping[(s_cq // n_q) * ch.n_docs + q.doc[s_cq % n_q]]
    fast = ~s_over
    o = np.lexsort((s_chunk[fast], -static_gain[fast], s_cq[fast]))
    cq, chunk, gain = s_cq[fast][o], s_chunk[fast][o], static_gain[fast][o]
    starts = np.r_[0, np.flatnonzero(cq[1:] != cq[:-1]) + 1] if len(cq) else np.zeros(0, dtype=np.int64)
    pos = np.arange(len(cq)) - np.repeat(starts, np.diff(np.r_[starts, len(cq)])) + 1
    keep = pos <= k
    out = {"cq": cq[keep], "pos": pos[keep], "chunk": chunk[keep], "gain": gain[keep]}
    slow_cq = np.unique(s_cq[s_over])
    if len(slow_cq):
        cand_cq = cand["c"] * n_q + c_q
        sel = np.isin(cand_cq, slow_cq)
        frame = pd.DataFrame({"cq": cand_cq[sel], "t": cand["t"][sel], "chunk": cand["chunk"][sel],
                              "lo": cand["lo"][sel], "hi": cand["hi"][sel]})
        extra = [_greedy(g, q, k) for _, g in frame.groupby("cq", sort=True)]
        out = {key: np.concatenate([out[key]] + [e[key] for e in extra]) for key in out}
    return out


def _greedy(cands: pd.DataFrame, q: Queries, k: int) -> dict[str, np.ndarray]:
    """Greedy max-marginal coverage for one (condition, query) with overlapping chunks, in exact arithmetic."""
    cq = int(cands["cq"].iloc[0])
    t0 = {}
    for t in np.unique(cands["t"]):
        t0[int(t)] = np.zeros(int(q.t_hi[t] - q.t_lo[t]), dtype=bool)
    pieces: dict[int, list[tuple[int, int, int]]] = {}
    for t, c, lo, hi in zip(cands["t"], cands["chunk"], cands["lo"], cands["hi"]):
        pieces.setdefault(int(c), []).append((int(t), int(lo - q.t_lo[t]), int(hi - q.t_lo[t])))
    n_spans = int(q.n_spans[q.t_q[int(cands["t"].iloc[0])]])
    chosen: list = []
    gains: list = []
    remaining = sorted(pieces)                     # chunk rows are in document order: ties go to the first
    while remaining and len(chosen) < k:
        best, best_gain = None, Fraction(0)
        for c in remaining:
            g = sum((Fraction(int((~t0[t][lo:hi]).sum()), len(t0[t])) for t, lo, hi in pieces[c]), Fraction(0))
            if g > best_gain:
                best, best_gain = c, g
        if best is None:
            break
        for t, lo, hi in pieces[best]:
            t0[t][lo:hi] = True
        chosen.append(best)
        gains.append(float(best_gain / n_spans))
        remaining.remove(best)
    n = len(chosen)
    return {"cq": np.full(n, cq, dtype=np.int64), "pos": np.arange(1, n + 1), "chunk": np.asarray(chosen, dtype=np.int64),
            "gain": np.asarray(gains, dtype=np.float64)}
