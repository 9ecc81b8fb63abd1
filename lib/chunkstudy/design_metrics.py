"""The study's metrics, each one class in this file (paper §5.1; docs/design.md, "Metrics"), as ir_measures keeps a
measure in one class: its name, its role, its ``metrics`` parameters (default, range, one line for
docs/parameters.md), what the rest of the study does with them, its computation, and its formula and citation in
its docstring. A class decorated with :func:`register` is the whole registration: :data:`METRICS` lists the
registered metrics in the order they are defined here, which is their order in every table; the ``metrics``
parameter section (:class:`chunkstudy.params.MetricsParams`), the rank cut-off rules, the specification curve's
k axis, the saturation warnings, 06's scores and the docs' metrics table are all assembled from it.

Part of :mod:`chunkstudy.design`, which re-exports every public name here (``design.METRICS`` is this module's); a
module of its own so that design stays under the line floor. It sits at the bottom of the import floors: it
imports :mod:`chunkstudy.errors`, :mod:`chunkstudy.paramspec` and the numpy blocks of
:mod:`chunkstudy.metric_blocks`, so a metric's computation and its declaration live together.

What a computation gets (``x``, 06's :class:`chunkstudy.metrics.measures.Lists`; list = cell * n_q + q): ``x.r``
the run rows sorted by (list, rank) (``lst``, ``rank``, ``chunk_row``, ``q``, ``c``, ``same_doc``, ``n_lists``);
``x.q`` the queries and their gold spans; ``x.ch`` the chunks; ``x.rg`` the run rows' novelty gains and relevance
(``gain``, ``rel``: relevant by the span rule; ``new``, ``grp``, ``t``, ``rr``: per (row, gold span) overlap);
``x.st`` the ranking-free ideals (``idcg``, ``bin_idcg`` per (condition, query): ``x.list_c``); ``x.p`` the
``metrics`` record. It returns one value per list (a float array of ``x.r.n_lists``), or one such array per element
of a list parameter (``budgets``), in the parameter's order.
"""

from __future__ import annotations

import re
from dataclasses import Field, dataclass, fields, is_dataclass
from typing import Any, ClassVar, Literal, Mapping, Sequence

import numpy as np

from .errors import lookup
from .metric_blocks import discount, expand, group_sum, join_targets, new_coverage, run_ids, safe_ratio
from .paramspec import copied, param
from .relevance import EPS


class Metric:
    """One metric family. A subclass sets ``key`` (its name in code), ``template`` (its canonical name, the
    ``metrics`` parameter that completes it in braces: ``cov-nDCG@{cutoff}``; a list parameter such as ``budgets``
    gives one metric per element, ``budget-cov@512``, ...), ``role`` (``primary``: the confirmatory metric,
    ``secondary`` or ``budget``), the parameters it declares (``Parameters``, a frozen dataclass of
    :func:`~chunkstudy.paramspec.param` fields; a family may complete its template with another family's, as nDCG
    does with ``cutoff``) and :meth:`compute`. Its docstring's first line is its one-line definition (the docs'
    metrics table); the rest holds the formula and the citation.

    ``rank_cut``, ``k_axis`` and ``saturates`` say what the rest of the study does with its parameter, so that no
    code decides by a parameter's or a family's name:

    * ``rank_cut``: the parameter is a rank cut-off of the run lists (only the top ``parameter`` ranks count). A
      list holds at most ``retrieve.k`` ranks, so a parameter file may not set it above that (a rule per
      parameter, :func:`chunkstudy.config_rules.rank_cut_rules`).
    * ``k_axis``: the specification curve's k axis (``multiverse.cutoffs``) varies its cut-off: the curve reads it
      at each k and 06 scores it there (cov-nDCG, nDCG); a rank cut without it is one point of the metric axis.
    * ``saturates``: it is 1 by construction when a condition has no more chunks in the whole corpus than its
      cut-off (the list holds every chunk, so it covers every gold span it can): the report warns (recall, a
      coverage of the gold; a ranking metric such as nDCG still depends on the order).
    """

    key: ClassVar[str]
    template: ClassVar[str]
    role: ClassVar[Literal["primary", "secondary", "budget"]] = "secondary"
    rank_cut: ClassVar[bool] = False
    k_axis: ClassVar[bool] = False
    saturates: ClassVar[bool] = False
    #: The ``metrics`` parameters this family declares (a frozen dataclass of ``param`` fields), or None.
    Parameters: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        where = f"metric {cls.__module__}.{cls.__qualname__}"
        for attr in ("key", "template"):
            if not isinstance(getattr(cls, attr, None), str):
                raise TypeError(f"{where}: declare {attr} (a str)")
        if cls.role not in ("primary", "secondary", "budget"):
            raise ValueError(f"{where}: role {cls.role!r} is not primary, secondary or budget")
        if not (cls.__doc__ or "").strip():
            raise ValueError(f"{where}: its docstring is its definition (first line), formula and citation")
        if cls.Parameters is not None and not is_dataclass(cls.Parameters):
            raise TypeError(f"{where}: Parameters must be a dataclass of param(...) fields")
        if (cls.k_axis or cls.saturates) and not cls.rank_cut:
            raise ValueError(f"metric {cls.key!r}: k_axis and saturates describe a rank cut-off; declare rank_cut")
        if cls.rank_cut and cls._parameter() is None:
            raise ValueError(f"metric {cls.key!r}: rank_cut needs the parameter that is the cut-off")

    @classmethod
    def _parameter(cls) -> str | None:
        found = re.findall(r"\{(\w+)\}", cls.template)
        if len(found) > 1:
            raise ValueError(f"metric {cls.key!r}: its template {cls.template!r} names more than one parameter")
        return found[0] if found else None

    @property
    def parameter(self) -> str | None:
        """The ``metrics`` parameter that completes the template (``cutoff``), or None (``MRR``)."""
        return type(self)._parameter()

    @property
    def definition(self) -> str:
        """Its one-line definition: the docstring's first paragraph, on one line."""
        return " ".join((type(self).__doc__ or "").strip().split("\n\n")[0].split()).removesuffix(".")

    def compute(self, x: Any) -> Any:
        """Its values for every run list (see the module docstring for ``x``)."""
        raise NotImplementedError(f"metric {self.key!r} declares no compute(x)")

    def names(self, metrics_params: Mapping[str, Any]) -> list[str]:
        """The canonical names this family takes under ``metrics_params`` (the ``metrics`` section)."""
        if self.parameter is None:
            return [self.template]
        values = metrics_params[self.parameter]
        values = values if isinstance(values, (list, tuple)) else [values]
        return [self.template.format(**{self.parameter: int(v)}) for v in values]

    def argument(self, name: str) -> int | None:
        """The parameter value in ``name`` when ``name`` belongs to this family (``cov-nDCG@10`` -> 10; 0 for a
        family without a parameter), else None."""
        if self.parameter is None:
            return 0 if name == self.template else None
        head, _, tail = self.template.partition("{")
        m = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail.partition("}")[2]), str(name))
        return int(m.group(1)) if m else None

    def __repr__(self) -> str:
        return f"<metric {self.key}: {self.template}, {self.role}>"


#: Every registered metric, in table order (primary first, then the secondary ladder; paper §5.1), then any
#: metric a user adds below the paper's, in the order of its class here.
METRICS: list[Metric] = []


def register(cls: type[Metric]) -> type[Metric]:
    """Class decorator: register the metric ``cls`` (one instance) in :data:`METRICS`. A key, a name template or a
    parameter declared twice is refused, naming both classes."""
    new = cls()
    for m in METRICS:
        if m.key == new.key or m.template == new.template:
            raise ValueError(f"metric {cls.__name__}: key {new.key!r} or template {new.template!r} is "
                             f"{type(m).__name__}'s already")
        clash = set(_declared(m)) & set(_declared(new))
        if clash:
            raise ValueError(f"metric {cls.__name__}: parameters {sorted(clash)} are declared by "
                             f"{type(m).__name__} already; complete the template with them instead")
    METRICS.append(new)
    return cls


def _declared(m: Metric) -> list[str]:
    return [f.name for f in fields(m.Parameters)] if m.Parameters is not None else []


def parameter_fields() -> list[tuple[str, Any, Field]]:
    """``(name, type, field)`` of every ``metrics`` parameter the registered metrics declare, in table order: what
    :class:`chunkstudy.params.MetricsParams` is assembled from (with the relevance rule's keys)."""
    return [f for m in METRICS if m.Parameters is not None for f in copied(m.Parameters)]


def metric(key: str) -> Metric:
    """The registered metric family ``key`` (``cov-nDCG``, ``recall``, ``MRR``, ``nDCG``, ``budget-cov``); read per
    row of a scores table (:func:`is_metric`), so the registry is searched, not copied, on the way."""
    found = next((m for m in METRICS if m.key == key), None)
    return found if found is not None else lookup({m.key: m for m in METRICS}, key, "metric")


def metric_names(metrics_params: Mapping[str, Any]) -> list[str]:
    """The canonical metric names for a ``metrics`` section, in table order, e.g. ``['cov-nDCG@10', 'recall@50',
    'MRR', 'nDCG@10', 'budget-cov@512', 'budget-cov@1024', 'budget-cov@2048']``."""
    return [n for m in METRICS for n in m.names(metrics_params)]


def metric_of(name: str) -> tuple[Metric, int] | None:
    """``(family, parameter value)`` of a canonical metric name, or None for a name no family declares."""
    for m in METRICS:
        arg = m.argument(name)
        if arg is not None:
            return m, arg
    return None


def is_metric(name: str, key: str) -> bool:
    """True when the canonical name ``name`` belongs to family ``key`` (``is_metric("recall@50", "recall")``)."""
    return metric(key).argument(name) is not None


def metric_order_key(name: str) -> tuple:
    """Sort key putting metric names in table order (family, then parameter value; unknown names last)."""
    found = metric_of(name)
    return (METRICS.index(found[0]), found[1], "") if found else (len(METRICS), 0, str(name))


def metric_axis(names: Sequence[str], cutoffs: Sequence[int]) -> list[tuple[str, str, int | None]]:
    """The metric × cut-off choices of a specification curve (``multiverse.metrics`` × ``multiverse.cutoffs``), in
    declared order, each once: ``(name as scored, the metric's label, k)``. A family on the k axis
    (:attr:`Metric.k_axis`: cov-nDCG, nDCG) takes every k (``cov-nDCG@10`` with cut-offs 5, 10 -> ``cov-nDCG@5``,
    ``cov-nDCG@10``, label ``cov-nDCG``), its own cut-off alone when ``cutoffs`` is empty; any other metric is
    itself, with no k (``MRR``, ``recall@50``)."""
    out: dict[str, tuple[str, str, int | None]] = {}
    for name in names:
        found = metric_of(name)
        if found is None:
            raise KeyError(f"metric {name!r} is not declared; families: {[m.key for m in METRICS]}")
        fam, own = found
        if fam.k_axis:
            for k in cutoffs or (own,):
                scored = fam.template.format(**{str(fam.parameter): int(k)})
                out.setdefault(scored, (scored, fam.key, int(k)))
        else:
            out.setdefault(str(name), (str(name), str(name), None))
    return list(out.values())


# ---------------------------------------------------------------------------------------- the paper's metrics

@register
class CoverageNDCG(Metric):
    """coverage-nDCG: novelty gains over gold spans, greedy ideal over the condition's own chunks.

    With the query's gold spans ``g_1..g_S`` and the ranked chunks ``c_1, c_2, ...``: ``gain_i = (1/S) Σ_j
    |(c_i ∩ g_j) \\ covered_<i(g_j)| / |g_j|`` (the characters of each span no higher chunk covered),
    ``DCG@k = Σ_{i<=k} gain_i / log2(i + 1)``, and ``cov-nDCG@k = DCG@k / IDCG@k``, where ``IDCG@k`` is the DCG of
    the greedy maximum-marginal-coverage ordering of the condition's own chunks of the document (0 when it is 0).
    The paper's primary metric (§5.1 and its appendix "Coverage-nDCG", worked example: 0.852 / 0.852 = 1.0); the
    novelty principle is α-nDCG's (Clarke et al., "Novelty and diversity in information retrieval evaluation",
    SIGIR 2008) one level down, at gold-evidence characters.
    """

    key = "cov-nDCG"
    template = "cov-nDCG@{cutoff}"
    role = "primary"
    rank_cut = True
    k_axis = True

    @dataclass(frozen=True)
    class Parameters:
        cutoff: int = param(10, "rank cut-off of cov-nDCG (the primary metric, cov-nDCG@10 at the default) and of "
                            "nDCG: only the top cutoff chunks of each run list count", ge=1)

    def compute(self, x: Any) -> np.ndarray:
        r, rg = x.r, x.rg
        in_k = r.rank <= x.p.cutoff
        dcg = group_sum(r.lst[in_k], rg.gain[in_k] * discount(r.rank[in_k]), r.n_lists)
        return safe_ratio(dcg, x.st.idcg[x.list_c])


@register
class Recall(Metric):
    """share of gold spans covered to >= span_frac by the union of the top recall_k chunks.

    ``recall@R = |{g_j : |g_j ∩ ∪_{rank<=R} c| >= span_frac·|g_j|}| / S``: a span counts once the top R chunks
    together cover that share of it, so it is a recall of evidence, not of chunks (the paper's "≥ 50% covered by
    the union of the top 50", §5.1; the threshold is the relevance rule's ``span_frac``).
    """

    key = "recall"
    template = "recall@{recall_k}"
    rank_cut = True
    saturates = True

    @dataclass(frozen=True)
    class Parameters:
        recall_k: int = param(50, "rank cut-off of recall: the share of gold spans covered (to span_frac) by the "
                              "union of the top recall_k chunks", ge=1)

    def compute(self, x: Any) -> np.ndarray:
        r, q, rg, p = x.r, x.q, x.rg, x.p
        in_r = r.rank[rg.rr] <= p.recall_k
        covered = np.bincount(rg.grp[in_r], weights=rg.new[in_r], minlength=rg.grp.max() + 1 if len(rg.grp) else 0)
        grp_first = np.unique(rg.grp, return_index=True)[1]
        g_t = rg.t[grp_first]
        hit = covered >= p.span_frac * (q.t_hi - q.t_lo)[g_t] - EPS
        return group_sum(r.lst[rg.rr][grp_first], hit / q.n_spans[q.t_q[g_t]], r.n_lists)


@register
class MRR(Metric):
    """1 / rank of the first relevant chunk (0 when none is).

    ``MRR = 1 / min{i : c_i relevant}`` over the whole retrieved list, a chunk relevant when it is relevant to any
    gold span by the relevance rule (``span_frac``, ``chunk_frac``); the mean over queries is the mean reciprocal
    rank (Voorhees, "The TREC-8 Question Answering Track Report", TREC 1999; trec_eval's ``recip_rank``).
    """

    key = "MRR"
    template = "MRR"

    def compute(self, x: Any) -> np.ndarray:
        r, rg = x.r, x.rg
        first_rel = np.full(r.n_lists, np.inf)
        np.minimum.at(first_rel, r.lst[rg.rel], r.rank[rg.rel].astype(np.float64))
        return np.where(np.isfinite(first_rel), 1.0 / first_rel, 0.0)


@register
class NDCG(Metric):
    """binary nDCG from the relevance rule (trec_eval ndcg_cut).

    ``DCG@k = Σ_{i<=k} rel_i / log2(i + 1)`` with ``rel_i`` 1 for a chunk relevant by the rule, over the ideal DCG
    of the condition's own relevant chunks of the document (Järvelin and Kekäläinen, "Cumulated gain-based
    evaluation of IR techniques", ACM TOIS 20(4), 2002; trec_eval's ``ndcg_cut``, which tests/test_metrics_oracle.py
    compares through ir_measures). Shares cov-nDCG's ``cutoff``.
    """

    key = "nDCG"
    template = "nDCG@{cutoff}"
    rank_cut = True
    k_axis = True

    def compute(self, x: Any) -> np.ndarray:
        r = x.r
        rk = x.rg.rel & (r.rank <= x.p.cutoff)
        return safe_ratio(group_sum(r.lst[rk], discount(r.rank[rk]), r.n_lists), x.st.bin_idcg[x.list_c])


@register
class BudgetCoverage(Metric):
    """gold characters covered within a token budget, prefix tokens charged.

    Walking down the ranking, each chunk costs its content and prefix tokens; ``budget-cov@B`` is the gold
    characters covered (each once) by the chunks that fit in B tokens over the query's gold characters. The first
    chunk that does not fit whole is handled by ``budget_partial``. The paper's application-realistic rung
    (§5.1: "prefix tokens count against the budget. Each treatment is charged its real context-window cost").
    """

    key = "budget-cov"
    template = "budget-cov@{budgets}"
    role = "budget"

    @dataclass(frozen=True)
    class Parameters:
        budgets: tuple[int, ...] = param((512, 1024, 2048), "token budgets of budget coverage, one metric each "
                                         "(budget-cov@B): gold characters covered by the chunks that fit in B "
                                         "tokens down the ranking, prefix tokens charged", ge=1, unique=True)
        budget_partial: Literal["truncate", "skip", "stop"] = param(
            "truncate", "budget coverage, the first chunk that does not fit whole: truncate = its prefix is charged "
                        "and its content counts up to the budget, which is then full; stop = it ends the walk; skip "
                        "= it is left out and smaller later chunks may enter")

    def compute(self, x: Any) -> list[np.ndarray]:
        r, p = x.r, x.p
        return _budget_coverage(r.lst, r.rank, r.chunk_row, r.same_doc, r.c, r.q, x.ch, x.q, np.unique(r.cell_cond),
                                r.n_q, r.n_lists, p.budgets, p.budget_partial)


def _budget_kept(lst, chunk_row, ch: Any, budgets: tuple[int, ...], policy: str) -> list[np.ndarray]:
    """Per budget: content characters of each run row (rows sorted by list, rank) that enter a ``budget``-token
    window (:attr:`BudgetCoverage.Parameters`' ``budget_partial`` decides the first chunk that does not fit)."""
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


def _budget_coverage(lst, rank, chunk_row, same_doc, run_c, run_q, ch: Any, q: Any, used_conds, n_q,
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


#: The confirmatory metric's family (coverage-nDCG).
PRIMARY_METRIC: Metric = next(m for m in METRICS if m.role == "primary")
