"""Each metric's computation, registered against its declaration (stage 06; as ir_measures pairs a measure's
declaration with the providers that compute it).

:data:`chunkstudy.design.METRICS` declares every metric family (name template, parameter, role, one-line
definition); :data:`MEASURES` maps each declared :class:`~chunkstudy.design.Metric` to the function that computes
its values for every run list, registered with :func:`measure`. The registry is checked complete against the
declarations when this module is imported, so a family declared without a computation (or a computation for an
undeclared family) fails at once. Formulas: :mod:`chunkstudy.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np

from .. import design
from ..params import MetricsParams
from ..relevance import EPS
from .blocks import discount, expand, group_sum, new_coverage, run_ids, safe_ratio
from .gains import RunGains, Static
from .inputs import Chunks, Queries, Runs, join_targets


@dataclass
class Lists:
    """Everything a metric needs about the run lists being scored (list = cell * n_q + q): the encoded runs,
    queries and chunks, the ranking-free gains ``st``, the run rows' gains ``rg`` and the ``metrics`` record."""

    r: Runs
    q: Queries
    ch: Chunks
    st: Static
    rg: RunGains
    p: MetricsParams

    @cached_property
    def list_c(self) -> np.ndarray:
        """The (condition, query) index ``cq`` of each list."""
        n_q = self.r.n_q
        return np.repeat(self.r.cell_cond, n_q) * n_q + np.tile(np.arange(n_q), len(self.r.cells))

    @cached_property
    def in_k(self) -> np.ndarray:
        """Run rows within the cutoff."""
        return self.r.rank <= self.p.cutoff


#: What computes one metric family: the scored lists -> its values per list (a list parameter's family, such as
#: ``budgets``, gives one array per element, in the parameter's order).
Measure = Callable[[Lists], Any]

#: Every declared metric family -> its computation (complete: checked against :data:`chunkstudy.design.METRICS`).
MEASURES: dict[design.Metric, Measure] = {}


def measure(key: str) -> Callable[[Measure], Measure]:
    """Register the decorated function as the computation of the declared metric family ``key``."""
    declared = design.metric(key)

    def register(fn: Measure) -> Measure:
        if declared in MEASURES:
            raise ValueError(f"metric {key!r} has two computations: {MEASURES[declared].__name__} and {fn.__name__}")
        MEASURES[declared] = fn
        return fn
    return register


@measure("cov-nDCG")
def cov_ndcg(x: Lists) -> np.ndarray:
    """cov-nDCG@cutoff: novelty gains of the ranks within the cutoff, discounted, over the greedy ideal's DCG."""
    r, rg = x.r, x.rg
    dcg = group_sum(r.lst[x.in_k], rg.gain[x.in_k] * discount(r.rank[x.in_k]), r.n_lists)
    return safe_ratio(dcg, x.st.idcg[x.list_c])


@measure("recall")
def recall(x: Lists) -> np.ndarray:
    """recall@recall_k: the share of gold spans covered to ``span_frac`` by the union of the top ``recall_k``."""
    r, q, rg, p = x.r, x.q, x.rg, x.p
    in_r = r.rank[rg.rr] <= p.recall_k
    covered = np.bincount(rg.grp[in_r], weights=rg.new[in_r], minlength=rg.grp.max() + 1 if len(rg.grp) else 0)
    grp_first = np.unique(rg.grp, return_index=True)[1]
    g_t = rg.t[grp_first]
    hit = covered >= p.span_frac * (q.t_hi - q.t_lo)[g_t] - EPS
    return group_sum(r.lst[rg.rr][grp_first], hit / q.n_spans[q.t_q[g_t]], r.n_lists)


@measure("MRR")
def mrr(x: Lists) -> np.ndarray:
    """MRR: 1 / rank of the first relevant chunk, 0 when none is."""
    r, rg = x.r, x.rg
    first_rel = np.full(r.n_lists, np.inf)
    np.minimum.at(first_rel, r.lst[rg.rel], r.rank[rg.rel].astype(np.float64))
    return np.where(np.isfinite(first_rel), 1.0 / first_rel, 0.0)


@measure("nDCG")
def ndcg(x: Lists) -> np.ndarray:
    """Binary nDCG@cutoff from the relevance rule (trec_eval's ``ndcg_cut``)."""
    r = x.r
    rk = x.rg.rel & x.in_k
    return safe_ratio(group_sum(r.lst[rk], discount(r.rank[rk]), r.n_lists), x.st.bin_idcg[x.list_c])


@measure("budget-cov")
def budget_cov(x: Lists) -> list[np.ndarray]:
    """budget-cov@B for every budget B of ``budgets``: gold characters covered within B tokens, prefixes charged."""
    r, p = x.r, x.p
    return _budget_coverage(r.lst, r.rank, r.chunk_row, r.same_doc, r.c, r.q, x.ch, x.q, np.unique(r.cell_cond),
                            r.n_q, r.n_lists, p.budgets, p.budget_partial)


def assemble(x: Lists) -> dict[str, Any]:
    """The metric values per list, keyed by metric family (:data:`chunkstudy.design.METRICS`, in declared order;
    renamed by :meth:`MetricsParams.named`)."""
    return {m.key: MEASURES[m](x) for m in design.METRICS}


def _budget_kept(lst, chunk_row, ch: Chunks, budgets: tuple[int, ...], policy: str) -> list[np.ndarray]:
    """Per budget: content characters of each run row (rows sorted by list, rank) that enter a ``budget``-token
    window (see the module docstring for the partial-chunk policy)."""
    n = len(lst)
    if n == 0:
        return [np.zeros(0, dtype=np.int64) for _ in budgets]
    starts = np.r_[0, np.flatnonzero(lst[1:] != lst[:-1]) + 1]
    sizes = np.diff(np.r_[starts, n])
    n_content, n_prefix = ch.n_content[chunk_row], ch.n_prefix[chunk_row]
    length = ch.end[chunk_row] - ch.start[chunk_row]
    cost = n_content + n_prefix
    out = []
    if policy in ("truncate", "stop"):
        # the rows that enter form a prefix of each list: tokens used before a row = its list's running sum
        total = np.cumsum(cost)
        before = total - cost - np.repeat(total[starts] - cost[starts], sizes)
        for budget in budgets:
            kept = np.zeros(n, dtype=np.int64)
            fits = before + cost <= budget
            kept[fits] = length[fits]
            if policy == "truncate":
                # the first row that does not fit is the only non-fitting one with ``before <= budget``
                left = budget - before - n_prefix
                part = ~fits & (before <= budget) & (left > 0) & (n_content > 0)
                share = np.floor(length[part] * left[part] / n_content[part])
                kept[part] = np.minimum(share, length[part]).astype(np.int64)
            out.append(kept)
        return out
    # skip: whether a row fits depends on which earlier rows did; one vectorised step per rank position
    col = np.arange(n) - np.repeat(starts, sizes)
    grid = np.full((len(starts), int(sizes.max())), -1, dtype=np.int64)
    grid[np.repeat(np.arange(len(starts)), sizes), col] = np.arange(n)
    for budget in budgets:
        kept = np.zeros(n, dtype=np.int64)
        used = np.zeros(len(starts))
        for j in range(grid.shape[1]):
            at = grid[:, j]
            c = np.where(at >= 0, cost[at], np.inf)
            fits = used + c <= budget
            kept[at[fits]] = length[at[fits]]
            used = np.where(fits, used + c, used)
        out.append(kept)
    return out


def _budget_coverage(lst, rank, chunk_row, same_doc, run_c, run_q, ch: Chunks, q: Queries, used_conds, n_q,
                     n_lists, budgets: tuple[int, ...], policy: str) -> list[np.ndarray]:
    """budget-cov@B for every list and budget: covered gold characters / gold characters."""
    cand = join_targets(ch, used_conds, q.m_q, q.m_lo, q.m_hi, q.doc)
    cqk = (cand["c"] * n_q + q.m_q[cand["t"]]) * len(ch.cond) + cand["chunk"]
    o = np.argsort(cqk, kind="stable")
    sk = cqk[o]
    use = np.flatnonzero(same_doc)
    r_key = (run_c[use] * n_q + run_q[use]) * len(ch.cond) + chunk_row[use]
    a, b = np.searchsorted(sk, r_key, "left"), np.searchsorted(sk, r_key, "right")
    ci, ri = expand(a, b - a)
    ci = o[ci]
    rr0 = use[ri]
    t0 = cand["t"][ci]
    order = np.lexsort((rank[rr0], t0, lst[rr0]))
    rr0, t0, lo0, hi0 = rr0[order], t0[order], cand["lo"][ci][order], cand["hi"][ci][order]
    gold = q.gold_chars[np.arange(n_lists) % n_q]
    out = []
    for kept in _budget_kept(lst, chunk_row, ch, budgets, policy):
        hi = np.minimum(hi0, ch.start[chunk_row[rr0]] + kept[rr0])
        live = hi > lo0
        rr, lo, hi, t = rr0[live], lo0[live], hi[live], t0[live]
        grp = run_ids(lst[rr] * max(len(q.m_q), 1) + t)
        covered = group_sum(lst[rr], new_coverage(grp, lo, hi), n_lists)
        out.append(safe_ratio(covered, gold))
    return out


def _check_complete() -> None:
    """Every declared metric has exactly one computation, and every computation a declared metric."""
    missing = [m.key for m in design.METRICS if m not in MEASURES]
    extra = [m.key for m in MEASURES if m not in design.METRICS]
    if missing or extra:
        raise ImportError(f"chunkstudy.metrics.measures: declared metrics without a computation {missing}, "
                          f"computations of undeclared metrics {extra} (chunkstudy.design.METRICS)")


_check_complete()
