"""Each contrast's specification curve (stage 07, exploratory; docs/beyond.md, "Specification curve"): how far a
contrast's sign and decision survive the analysis choices a reasonable researcher could have made (Simonsohn,
Simmons & Nelson 2020, "Specification curve analysis", *Nature Human Behaviour* 4:1208-1214; Steegen, Tuerlinckx,
Gelman & Vanpaemel 2016, "Increasing transparency through a multiverse analysis", *Perspectives on Psychological
Science* 11:702-712).

**The grid** (:func:`grid`): every combination of the axes of the ``multiverse`` section, declared before the run
(:class:`chunkstudy.params.MultiverseParams`): the metric and its cut-off k (:func:`chunkstudy.design.metric_axis`),
the embedder, the reranker, the queries included (all; each type alone; all types but one), the bootstrap seed, and
the conditions that may stand in for the contrast's own (a placebo under another seed). An empty axis holds the
primary specification's value only, so the primary specification, Table 1's cell, is one point of the grid
(:attr:`Spec.primary`). A specification whose cell was not scored (a reranked cell of the weak embedder, say) or that
pairs no query is not computable: it is counted (``n_declared`` against ``n_specs``) and said in the note.

**Per specification**: the study's own test (:class:`chunkstudy.significance.BootstrapTest`, built from ``stats``
with the specification's seed): Δ = the mean paired delta over the queries scored under both conditions, the
document-clustered bootstrap's percentile CI and two-sided p, Cohen's dz and the inference floors. ``significant``
= unadjusted p < alpha where the floors hold (Simonsohn et al.'s per-specification significance). No Holm: Holm
stays on the four primary contrasts of Table 1; every number here is exploratory.

**Vectorised across specifications** (:func:`test_many`): the loop draws ``numpy.random.default_rng(seed)
.integers(0, G, (B, G))`` for each contrast and sums the drawn documents; specifications of equal G and seed draw
the same indices, whatever their contrast, so the draws are shared: each block of B is drawn once, turned into the
counts ``W`` of each document in each replicate, and every specification's replicate sums are one matrix product
``W @ S`` (S: G × specifications, per-document sums; a group of one or two is resampled as the loop resamples it). A product sums in another order than the loop, so a replicate may differ from
the loop's in its last bits; the few replicates a decision reads (those within the rounding bound of 0, which decide
p, and of the CI's order statistics) are recomputed in the loop's order. Every CI and p then equals
:meth:`BootstrapTest.test`'s exactly (tests/test_multiverse.py checks it bit for bit; bench/bench_multiverse.py
times it against the loop).

**Per contrast** (:func:`summary_row`): the specifications computed and the distinct analyses among them (the
bootstrap-seed axis moves a specification's CI and p, never its Δ, so specifications that differ only in their seed
are one analysis: ``n_analyses`` beside ``n_specs``), the share of specifications with the primary's sign, the
shares significant in each direction, the median Δ, and two of the specification-curve tests of Simonsohn et al.,
each against the bootstrap with the effect removed: every specification's deltas are shifted to mean 0 (δ − Δ_s),
the union of the contrast's documents is resampled (``stats.n_boot`` draws under ``stats.seed``, shared by all
specifications, so their dependence is kept: :func:`null_draws`), and each draw gives one draw of each statistic
under the null:

* **the median Δ** over specifications (their first statistic): ``null_p = (1 + #{|median*| ≥ |median Δ|}) /
  (1 + B)``, two-sided, Monte-Carlo-counted as the study's p is. Its rule for ties: when the median Δ is exactly 0
  (as when half the specifications or more tie at Δ = 0 because the two conditions score every query alike under
  them) every null median is at least as extreme, so its p is 1 by construction, whatever the other
  specifications show; the note says so (``n_zero`` counts the specifications at Δ = 0).
* **Stouffer's Z** (their third, the average z): ``Z = Σ z_s / √m`` with ``z_s = Δ_s / SE_s``, ``SE_s`` the
  standard deviation of the specification's own bootstrap replicates (the test above), over the ``m``
  specifications with ``SE_s > 0``; per null draw ``Z* = Σ (δ̄*_s − Δ_s) / SE_s / √m``, the SEs held fixed (their
  re-estimation per draw would be a bootstrap inside the bootstrap; any fixed weights give a valid test, the null
  being resampled). ``stouffer_p = (1 + #{|Z*| ≥ |Z|}) / (1 + B)``. It is the tie rule: a specification whose
  deltas are all 0 has SE 0 and no z, in the data and in every draw, so a block of them leaves Z's p exactly as it
  was (tested), where it makes the median's p 1. It reads every specification's evidence without a threshold (the
  second statistic, the count of significant specifications, would need each specification's decision in every
  null draw, again a bootstrap inside the bootstrap).

**Per axis** (:func:`axis_table`): for every axis that varies, per value, the specifications and analyses that took
it, their median Δ and the shares above (the sign is the primary specification's); a value's shares weighted by its
specifications average to the contrast's. Pure; never rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import pandas as pd

from .. import design, stages
from ..metrics.paired import pair, prepare_scores, wide_scores
from ..params import MultiverseParams, StatsParams
from ..significance import _BLOCK, Bootstrap, BootstrapTest, Tested, cluster_sums, percentile_ci
from .contrasts import EXPLORATORY, contrast_spec
from .effects import cohens_dz

SPEC_COLUMNS = stages.columns("multiverse")
SUMMARY_COLUMNS = stages.columns("multiverse_summary")
AXIS_COLUMNS = stages.columns("multiverse_axes")
#: The axes of the indicator panel, in the figure's order (columns of the ``multiverse`` table).
AXES = ("metric_axis", "k", "embedder", "reranker", "query_types", "seed", "spec_a", "spec_b")
#: The choices that make one analysis: every axis but the bootstrap seed, which moves a specification's CI and p and
#: never its Δ (columns of the ``multiverse`` table; ``metric`` is metric_axis and k together).
ANALYSIS = ("metric", "embedder", "reranker", "query_types", "spec_a", "spec_b")
#: Seconds of 07's :func:`curves` per document drawn per specification (pairing, the test, the null test), low to
#: high: bench/bench_multiverse.py at the whole QASPER split's size (1,512 specifications, B = 10,000, G = 407) on the
#: 2-core development machine, 6.5 s under the heavy-job lock to 14-25 s beside other jobs (docs/performance.md);
#: what ``chunkstudy.plan`` multiplies by specifications × B × G.
SECONDS_PER_DRAW = (1.0e-9, 4.0e-9)
#: What ``k`` holds for a metric with no cut-off (MRR, recall@50).
NO_K = "—"
_EPS = np.finfo(float).eps


# ---------------------------------------------------------------------------------------------------------------
# The grid
# ---------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One specification of a contrast ``a − b``: the metric as scored (``cov-nDCG@5``) with its axis label and k,
    the cell's embedder and reranker, the queries (``query_types``: a label; ``qtypes``: the types kept, None = all),
    the bootstrap seed and the two conditions compared (``spec_a``, ``spec_b``: the contrast's own or stand-ins)."""

    metric: str
    metric_axis: str
    k: int | None
    embedder: str
    reranker: str
    query_types: str
    qtypes: frozenset[str] | None
    seed: int
    spec_a: str
    spec_b: str
    primary: bool = False

    @property
    def analysis(self) -> tuple:
        """The specification less its bootstrap seed (:data:`ANALYSIS`): specifications with the same analysis have
        the same Δ."""
        return (self.metric, self.embedder, self.reranker, self.query_types, self.spec_a, self.spec_b)

    @property
    def choices(self) -> dict[str, Any]:
        """The specification's value on every axis (:data:`AXES`), as the table holds them."""
        return {"metric": self.metric, "metric_axis": self.metric_axis, "k": NO_K if self.k is None else str(self.k),
                "embedder": self.embedder, "reranker": self.reranker, "query_types": self.query_types,
                "seed": self.seed, "spec_a": self.spec_a, "spec_b": self.spec_b}


def query_subsets(axis: Sequence[str], qtypes: Sequence[str]) -> list[tuple[str, frozenset[str] | None]]:
    """The query-type axis (``multiverse.query_types``; empty: ``all``) over the corpus's types: ``all`` (None),
    ``each`` (``only <t>`` per type), ``all_but_one`` (``all but <t>`` per type), in that order; a subset equal to one
    already listed (one type: ``only t`` is all of them) or empty is left out."""
    types = sorted(set(map(str, qtypes)))
    out: list[tuple[str, frozenset[str] | None]] = []
    seen: set[frozenset[str]] = set()

    def add(label: str, kept: frozenset[str] | None) -> None:
        key = frozenset(types) if kept is None else kept
        if key and key not in seen:
            seen.add(key)
            out.append((label, kept))

    for choice in axis or ("all",):
        if choice == "all":
            add("all", None)
        elif choice == "each":
            for t in types:
                add(f"only {t}", frozenset({t}))
        elif choice == "all_but_one":
            for t in types:
                add(f"all but {t}", frozenset(types) - {t})
        else:
            raise ValueError(f"multiverse.query_types: {choice!r} is not one of ['all', 'each', 'all_but_one']")
    return out


def grid(mv: MultiverseParams, metric_axis: Sequence[tuple[str, str, int | None]], primary: design.PrimaryCell,
         seed: int, a: str, b: str, qtypes: Sequence[str]) -> list[Spec]:
    """Every specification of the contrast ``a − b`` declared by ``mv`` (the ``multiverse`` record; its metric × k
    choices ``metric_axis``: :attr:`chunkstudy.params.Params.multiverse_metrics`), in the axes' declared order
    (metric × k, embedder, reranker, queries, seed, then the stand-ins for a and for b); pairs of one condition with
    itself are left out. Exactly one is :attr:`Spec.primary`: Table 1's cell (``primary``: metric, embedder and
    reranker), all queries, ``seed`` (``stats.seed``), a and b."""
    first = (primary.metric, primary.embedder, primary.reranker, "all", int(seed), a, b)
    out = []
    for metric, label, k in metric_axis:
        for emb in mv.embedders or (primary.embedder,):
            for rr in mv.rerankers or (primary.reranker,):
                for q_label, kept in query_subsets(mv.query_types, qtypes):
                    for s in mv.bootstrap_seeds or (seed,):
                        for sa in mv.conditions.get(a, (a,)):
                            for sb in mv.conditions.get(b, (b,)):
                                if sa == sb:
                                    continue
                                out.append(Spec(metric, label, k, emb, rr, q_label, kept, int(s), sa, sb,
                                                (metric, emb, rr, q_label, int(s), sa, sb) == first))
    return out


# ---------------------------------------------------------------------------------------------------------------
# The test, vectorised across specifications
# ---------------------------------------------------------------------------------------------------------------

def _counts(idx: np.ndarray, g: int) -> np.ndarray:
    """``W[r, d]`` = how often replicate ``r`` drew document ``d`` (rows of ``idx``: one replicate's draws)."""
    rows = idx.shape[0]
    flat = (np.arange(rows)[:, None] * g + idx).ravel()
    return np.bincount(flat, minlength=rows * g).reshape(rows, g).astype(float)


def _blocks(seed: int, n_boot: int, g: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first replicate, indices)`` per block, drawn exactly as :func:`chunkstudy.significance.cluster_bootstrap`
    draws them (the same generator, seed, shape and block order)."""
    rng = np.random.default_rng(seed)
    for start in range(0, n_boot, _BLOCK):
        yield start, rng.integers(0, g, size=(min(n_boot, start + _BLOCK) - start, g))


#: A group of at most this many specifications is resampled as the loop resamples (a gather per specification):
#: building the counts ``W`` costs about as much as two gathers, so sharing them pays from three specifications on.
_GATHER_UP_TO = 2
#: A group's draws are kept (int32) for the exact recomputation when they hold at most this many indices (100 MB);
#: above it they are drawn again from the seed.
_KEEP_DRAWS = 25_000_000


def _group_replicates(sums: np.ndarray, counts: np.ndarray, seed: int, n_boot: int, alpha: float) -> np.ndarray:
    """Replicate means ``(B, m)`` of ``m`` specifications sharing G documents and a seed: ``W @ [S | C]`` per block,
    then the replicates a decision reads recomputed in the loop's order (:func:`_exact_where_it_matters`).

    The rounding bound: the loop's pairwise sum and the product's sum of a replicate's G drawn per-document sums
    differ by at most ``2·γ_{G+1}·Σ|S_drawn| ≤ (G + 1)·eps·G·max|S|``; divided by the replicate's queries (at least G:
    every document has one), at most ``(G + 1)·eps·max|S|``, taken 4 times over, plus the two divisions' own
    rounding (``4·eps·|δ̄*|``)."""
    g, m = sums.shape
    if m <= _GATHER_UP_TO:  # too few to share: the loop's own arithmetic, exact by construction
        reps = np.empty((n_boot, m))
        for start, idx in _blocks(seed, n_boot, g):
            for j in range(m):
                reps[start:start + len(idx), j] = sums[:, j][idx].sum(axis=1) / counts[:, j][idx].sum(axis=1)
        return reps
    reps = np.empty((n_boot, m))
    stacked = np.hstack([sums, counts])
    kept: list[np.ndarray] | None = [] if n_boot * g <= _KEEP_DRAWS else None
    for start, idx in _blocks(seed, n_boot, g):
        prod = _counts(idx, g) @ stacked  # the counts' half is integer-valued: exact in any order
        reps[start:start + len(idx)] = prod[:, :m] / prod[:, m:]
        if kept is not None:
            kept.append(idx.astype(np.int32))
    bound = 4.0 * (g + 2) * _EPS * np.abs(sums).max(axis=0)[None, :] + 4.0 * _EPS * np.abs(reps) \
        + np.finfo(float).tiny
    return _exact_where_it_matters(reps, bound, sums, counts, seed, alpha, kept)


def _ci_positions(n_boot: int, alpha: float) -> list[int]:
    """The order statistics numpy's linear percentile reads for the ``(1 − alpha)`` interval."""
    out = set()
    for q in (alpha / 2, 1 - alpha / 2):
        h = math.floor((n_boot - 1) * q)
        out |= {int(h), min(n_boot - 1, int(h) + 1)}
    return sorted(out)


def _exact_where_it_matters(reps: np.ndarray, bound: np.ndarray, sums: np.ndarray, counts: np.ndarray, seed: int,
                            alpha: float, kept: list[np.ndarray] | None = None) -> np.ndarray:
    """Recompute, in the loop's order (``S[idx].sum(axis=1)`` over a block's rows), every replicate within its
    rounding bound of 0 (its sign decides p) or of one of the CI's order statistics (within twice the column's
    largest bound: sorting moves no value further than the largest bound). Every other replicate lies strictly on
    the same side of each as the loop's does, so the result's counts and order statistics are the loop's exactly.
    ``kept``: the group's draws per block, else they are drawn again."""
    n_boot = reps.shape[0]
    out = reps.copy()
    flag = np.abs(reps) <= bound
    positions = _ci_positions(n_boot, alpha)
    widest = 2.0 * bound.max(axis=0)
    for at in np.partition(reps, positions, axis=0)[positions]:
        flag |= np.abs(reps - at[None, :]) <= widest[None, :]
    sums_t, counts_t = np.ascontiguousarray(sums.T), np.ascontiguousarray(counts.T)
    blocks = enumerate(kept) if kept is not None else ((s // _BLOCK, i) for s, i in _blocks(seed, n_boot,
                                                                                              sums.shape[0]))
    for b, idx in blocks:
        start = b * _BLOCK
        block = flag[start:start + len(idx)]
        for col in np.flatnonzero(block.any(axis=0)):
            rows = np.flatnonzero(block[:, col])
            drawn = idx[rows]  # (rows, G), C-contiguous: each row summed as the loop sums it
            out[start + rows, col] = sums_t[col][drawn].sum(axis=1) / counts_t[col][drawn].sum(axis=1)
    return out


def test_many(test: BootstrapTest, columns: Sequence[tuple[np.ndarray, Any, int]]) -> list[Tested]:
    """:meth:`BootstrapTest.test` of many contrasts at once: ``columns`` are ``(deltas, clusters, seed)``, each
    tested as ``replace(test, seed=seed).test(deltas, clusters)`` would test it, and with the same result exactly
    (estimate, CI, p, sizes, floors, note); ``replicates`` equal the loop's to within rounding and exactly where a
    decision reads them. Columns with the same number of documents and seed share their draws (the module
    docstring)."""
    prepared = [cluster_sums(d, c) for d, c, _ in columns]
    out: list[Tested | None] = [None] * len(columns)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, ((labels, sums, counts), (_, _, seed)) in enumerate(zip(prepared, columns)):
        if labels.size == 0:
            raise ValueError(f"test_many: column {i} has no observations")
        if np.isnan(sums).any():
            raise ValueError(f"test_many: column {i} has NaN deltas; drop unpaired queries first")
        groups.setdefault((labels.size, int(seed)), []).append(i)
    for (g, seed), members in groups.items():
        sums = np.column_stack([prepared[i][1] for i in members])
        counts = np.column_stack([prepared[i][2] for i in members])
        reps = _group_replicates(sums, counts, seed, test.n_boot, test.alpha)
        t = replace(test, seed=seed)
        for j, i in enumerate(members):
            col = reps[:, j]
            lo, hi = percentile_ci(col, t.alpha)
            p = float(t.p_from_counts(int(np.sum(col <= 0.0)), int(np.sum(col >= 0.0))))
            estimate = float(sums[:, j].sum() / counts[:, j].sum())
            out[i] = t.judge(Bootstrap(estimate, lo, hi, p, int(counts[:, j].sum()), g, col))
    return [t for t in out if t is not None]


class NullDraws(NamedTuple):
    """The specification curve under the null (:func:`null_draws`), one value per bootstrap draw: the median over
    specifications of the centred replicate means, and their Stouffer Z (:func:`stouffer_z`)."""

    medians: np.ndarray
    stouffer: np.ndarray


def informative(se: np.ndarray) -> np.ndarray:
    """Which specifications enter Stouffer's Z: those whose bootstrap SE is positive (a specification whose deltas
    are all equal, as when two conditions score every query alike, has none)."""
    se = np.asarray(se, dtype=float)
    return np.isfinite(se) & (se > 0)


def stouffer_z(effects: np.ndarray, se: np.ndarray) -> float:
    """Stouffer's Z of the specifications (the module docstring): ``Σ z_s / √m``, ``z_s = Δ_s / SE_s`` over the
    ``m`` :func:`informative` ones; NaN when there is none. ``z_s`` is Φ⁻¹(1 − p_s) of the one-sided normal p of
    each specification, so Z is ``scipy.stats.combine_pvalues(p, method="stouffer")``'s statistic of those p."""
    ok = informative(se)
    if not ok.any():
        return math.nan
    return float(np.sum(np.asarray(effects, dtype=float)[ok] / np.asarray(se, dtype=float)[ok]) / math.sqrt(ok.sum()))


def null_draws(sums: np.ndarray, counts: np.ndarray, effects: np.ndarray, se: np.ndarray, n_boot: int,
               seed: int) -> NullDraws:
    """The specification-curve null (the module docstring): ``sums``/``counts`` are ``(G, m)`` per-document sums and
    counts of ``m`` specifications over the union of their documents (0 where a specification has no query of a
    document), ``effects`` each specification's Δ and ``se`` its bootstrap SE. Per draw (``n_boot`` resamples of the G
    documents, ``seed``, drawn as the test draws them), the median over specifications of the replicate mean less
    Δ_s, and Stouffer's Z of those centred means over ``se``; a specification that drew none of its documents sits
    that draw out (NaN when every one does)."""
    g, m = sums.shape
    medians, stouffer = np.empty(n_boot), np.empty(n_boot)
    stacked = np.hstack([sums, counts])
    ok = informative(se)
    scale = np.asarray(se, dtype=float)[ok]
    for start, idx in _blocks(seed, n_boot, g):
        prod = _counts(idx, g) @ stacked
        r, n = prod[:, :m], prod[:, m:]
        with np.errstate(invalid="ignore", divide="ignore"):
            centred = np.where(n > 0, r / n, np.nan) - effects[None, :]
        at = slice(start, start + len(idx))
        medians[at] = _median_of_rows(centred)
        z = centred[:, ok] / scale[None, :]
        drawn = (~np.isnan(z)).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            stouffer[at] = np.where(drawn > 0, np.nansum(z, axis=1) / np.sqrt(drawn), np.nan)
    return NullDraws(medians, stouffer)


def _median_of_rows(centred: np.ndarray) -> np.ndarray:
    """Each row's median over the specifications that drew some of their documents (NaN where none did)."""
    missing = np.isnan(centred)
    if not missing.any():  # every specification drew some of its documents (the rule): a plain median
        return np.median(centred, axis=1)
    empty = missing.all(axis=1)
    med = np.full(centred.shape[0], np.nan)
    if (~empty).any():
        med[~empty] = np.nanmedian(centred[~empty], axis=1)
    return med


def null_p(observed: float, draws: np.ndarray) -> tuple[float, int]:
    """``((1 + #{|draw| ≥ |observed|}) / (1 + B), B)`` over the draws of a statistic under the null that are defined
    (NaN, 0 when none is). Its floor is ``1/(B + 1)``: no draw as extreme."""
    ok = draws[~np.isnan(draws)]
    if ok.size == 0 or math.isnan(observed):
        return math.nan, int(ok.size)
    return float((1 + np.sum(np.abs(ok) >= abs(observed))) / (1 + ok.size)), int(ok.size)


# ---------------------------------------------------------------------------------------------------------------
# The tables
# ---------------------------------------------------------------------------------------------------------------

class Curves(NamedTuple):
    """07's three tables: every contrast × specification (``specifications``, the ``multiverse`` table), one row per
    contrast (``summary``, the ``multiverse_summary`` table) and one per value of each axis that varies in a
    contrast (``axes``, the ``multiverse_axes`` table)."""

    specifications: pd.DataFrame
    summary: pd.DataFrame
    axes: pd.DataFrame


class Paired(NamedTuple):
    """One computable specification's paired deltas and their documents (the bootstrap's clusters)."""

    spec: Spec
    delta: np.ndarray
    docs: Any


def spec_deltas(wide: pd.DataFrame, specs: Sequence[Spec]) -> tuple[list[Paired], dict[str, int]]:
    """Each computable specification's paired deltas over ``wide`` (:func:`chunkstudy.metrics.paired.wide_scores`,
    qtype filled), in the order Table 1 pairs them (the cell's queries sorted by id), and by reason how many were not
    computable."""
    blocks: dict[tuple[str, str, str], pd.DataFrame | None] = {}
    pairs: dict[tuple, pd.DataFrame | None] = {}
    out: list[Paired] = []
    skipped: dict[str, int] = {}
    for s in specs:
        cell = (s.metric, s.embedder, s.reranker)
        if cell not in blocks:
            try:
                blocks[cell] = wide.xs(cell, level=["metric", "embedder", "reranker"])
            except KeyError:
                blocks[cell] = None
        block, both = blocks[cell], None
        if block is not None:
            key = (*cell, s.spec_a, s.spec_b)
            if key not in pairs:
                pairs[key] = pair(block, s.spec_a, s.spec_b)[0]
            both = pairs[key]
            if both is not None and s.qtypes is not None:
                both = both[both["qtype"].isin(s.qtypes)]
        if both is None or both.empty:
            why = f"cell {design.cell_name(*cell)} not scored" if block is None else "no paired query"
            skipped[why] = skipped.get(why, 0) + 1
            continue
        out.append(Paired(s, both[s.spec_a].to_numpy() - both[s.spec_b].to_numpy(), both["doc_id"].to_numpy()))
    return out, skipped


def _spec_rows(corpus: str, name: str, a: str, b: str, paired: Sequence[Paired], tested: Sequence[Tested],
               alpha: float) -> pd.DataFrame:
    rows = []
    for i, (pr, t) in enumerate(zip(paired, tested)):
        rows.append(dict(corpus=corpus, contrast=name, condition_a=a, condition_b=b, spec=i, primary=pr.spec.primary,
                         **pr.spec.choices, mean_delta=float(pr.delta.mean()), ci_low=t.ci_low, ci_high=t.ci_high,
                         p=t.p, dz=cohens_dz(pr.delta), n_queries=t.n, n_docs=t.n_clusters, inference=t.inference,
                         significant=bool(t.inference and not math.isnan(t.p) and t.p < alpha), label=EXPLORATORY,
                         note=t.note))
    out = pd.DataFrame(rows, columns=SPEC_COLUMNS)
    order = np.lexsort((out["spec"].to_numpy(), out["mean_delta"].to_numpy(float)))
    out.loc[out.index[order], "rank"] = np.arange(1, len(out) + 1)
    return out.astype({"rank": int})


def _primary_delta(specs: pd.DataFrame) -> float:
    """The primary specification's Δ, NaN when it is not among ``specs``."""
    prim = specs.loc[specs["primary"].astype(bool), "mean_delta"]
    return float(prim.iat[0]) if len(prim) else math.nan


def _sign(delta: float) -> float:
    """The sign of a Δ (±1.0), NaN when it is 0 or NaN."""
    return math.nan if math.isnan(delta) or delta == 0 else math.copysign(1.0, delta)


def _primary_sign(specs: pd.DataFrame) -> float:
    """The sign of the primary specification's Δ (±1.0), NaN when it is 0 or not among ``specs``."""
    return _sign(_primary_delta(specs))


def _shares(d: np.ndarray, sig: np.ndarray, fit: np.ndarray, sign: float) -> dict[str, float]:
    """The shares of a group of specifications (a contrast's, or one value of one axis) with Δ ``d``: the primary's
    sign ``sign`` (NaN when the primary Δ is 0), significant and positive, significant and negative; the last two
    NaN when no specification of the group supports inference (``fit``: the floors)."""
    return dict(share_same_sign=float(np.mean(np.sign(d) == sign)) if d.size and not math.isnan(sign) else math.nan,
                share_sig_positive=float(np.mean(sig & (d > 0))) if fit.any() else math.nan,
                share_sig_negative=float(np.mean(sig & (d < 0))) if fit.any() else math.nan)


def n_analyses(specs: pd.DataFrame) -> int:
    """How many distinct analyses ``specs`` (rows of the ``multiverse`` table) holds: specifications that differ
    only in their bootstrap seed are one (:data:`ANALYSIS`)."""
    return int(len(specs.drop_duplicates(list(ANALYSIS)))) if len(specs) else 0


def _tie_note(median: float, n_zero: int, n: int) -> str:
    if median != 0:
        return ""
    return (f"median \u0394 exactly 0 ({n_zero} of {n} specifications at \u0394 = 0): every null median is as "
            "extreme, so its null p is 1 by construction; Stouffer's Z is unaffected by such ties")


def summary_row(specs: pd.DataFrame, null: NullDraws, z: float, n_declared: int, test: BootstrapTest, n_docs: int,
                skipped: dict[str, int]) -> dict[str, Any]:
    """One contrast's curve in numbers (module docstring): from its rows of the ``multiverse`` table, the draws
    under the null (:func:`null_draws`) and the observed Stouffer Z ``z`` (:func:`stouffer_z`); ``inference`` is the
    floors over the union of its documents."""
    d = specs["mean_delta"].to_numpy(float)
    primary = _primary_delta(specs)
    median = float(np.median(d)) if d.size else math.nan
    fit = specs["inference"].astype(bool).to_numpy()
    sig = specs["significant"].astype(bool).to_numpy()
    p, n_valid = null_p(median, null.medians)
    n_zero = int(np.sum(d == 0))
    notes = [f"{n} specification(s) not computable: {why}" for why, n in skipped.items()]
    if not fit.any():
        notes.append("no specification supports inference (the floors): no share significant")
    notes += [x for x in (_tie_note(median, n_zero, int(d.size)),) if x]
    problem = test.inference_problem(n_docs)
    return dict(n_declared=n_declared, n_specs=int(d.size), n_analyses=n_analyses(specs), primary_delta=primary,
                median_delta=median, n_zero=n_zero, **_shares(d, sig, fit, _sign(primary)),
                null_p=p, stouffer_z=z, stouffer_p=null_p(z, null.stouffer)[0], n_boot=n_valid, seed=test.seed,
                n_docs=n_docs, inference=not problem, label=EXPLORATORY,
                note="; ".join([*notes, problem] if problem else notes))


def axis_table(specs: pd.DataFrame) -> pd.DataFrame:
    """Each contrast's curve read by axis (07's ``multiverse_axes``), from its rows of the ``multiverse`` table
    ``specs``: for every axis of :data:`AXES` that takes more than one value in the contrast, per value (in the
    grid's order) the specifications and analyses that took it, their median Δ, and the shares of
    :func:`summary_row` (the sign is the contrast's primary specification's, whatever the value). A value's shares
    weighted by its specifications average to the contrast's."""
    rows = []
    for contrast, d in specs.groupby("contrast", sort=False):
        d = d.sort_values("spec", kind="stable")
        delta = d["mean_delta"].to_numpy(float)
        fit, sig = d["inference"].astype(bool).to_numpy(), d["significant"].astype(bool).to_numpy()
        sign, first = _primary_sign(d), d.iloc[0]
        for axis in AXES:
            values = d[axis].astype(str).to_numpy()
            levels = list(dict.fromkeys(values))
            for level in levels if len(levels) > 1 else ():
                on = values == level
                rows.append(dict(corpus=first["corpus"], contrast=contrast, condition_a=first["condition_a"],
                                 condition_b=first["condition_b"], axis=axis, level=level, n_specs=int(on.sum()),
                                 n_analyses=n_analyses(d[on]), median_delta=float(np.median(delta[on])),
                                 **_shares(delta[on], sig[on], fit[on], sign), label=EXPLORATORY))
    return pd.DataFrame(rows, columns=AXIS_COLUMNS)


def _union(paired: Sequence[Paired]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(documents, sums, counts)``: every specification's per-document sums over the union of their documents."""
    per = [cluster_sums(p.delta, p.docs) for p in paired]
    docs = np.unique(np.concatenate([labels for labels, _, _ in per])) if per else np.array([], dtype=object)
    sums, counts = np.zeros((docs.size, len(per))), np.zeros((docs.size, len(per)))
    for j, (labels, s, n) in enumerate(per):
        at = np.searchsorted(docs, labels)
        sums[at, j], counts[at, j] = s, n
    return docs, sums, counts


def curves(scores: pd.DataFrame, extra_scores: pd.DataFrame | None, queries: pd.DataFrame,
           stats_params: StatsParams, primary: design.PrimaryCell, mv: MultiverseParams,
           metric_axis: Sequence[tuple[str, str, int | None]], corpus: str) -> Curves:
    """Every contrast of ``stats.contrasts`` under every specification of ``mv`` (the module docstring; its metric
    × k choices ``metric_axis``: :attr:`chunkstudy.params.Params.multiverse_metrics`; the primary specification
    ``primary``, ``stats.seed``): 06's ``scores`` with its ``multiverse_scores`` (the other cut-offs), 03's
    ``queries``. Empty tables (with their columns) when the multiverse states no axis."""
    if not mv.active:
        return Curves(pd.DataFrame(columns=SPEC_COLUMNS), pd.DataFrame(columns=SUMMARY_COLUMNS),
                      pd.DataFrame(columns=AXIS_COLUMNS))
    both = scores if extra_scores is None or extra_scores.empty else pd.concat(
        [scores, extra_scores[[c for c in scores.columns if c in extra_scores.columns]]], ignore_index=True)
    wide = wide_scores(prepare_scores(both, queries, corpus))
    wide = wide.assign(qtype=wide["qtype"].astype(object).where(wide["qtype"].notna(), "(none)").astype(str))
    test = BootstrapTest.of(stats_params)
    contrasts = contrast_spec(stats_params)
    found = {name: (len(specs), *spec_deltas(wide, specs)) for name, specs in
             ((name, grid(mv, metric_axis, primary, test.seed, a, b, sorted(set(wide["qtype"]))))
              for name, (a, b) in contrasts.items())}
    # one test of every contrast's specifications: those of equal documents and seed share draws across contrasts
    every = test_many(test, [(p.delta, p.docs, p.spec.seed) for _, paired, _ in found.values() for p in paired])
    tables, summaries = [], []
    for name, (a, b) in contrasts.items():
        n_declared, paired, skipped = found[name]
        tested, every = every[:len(paired)], every[len(paired):]
        base = dict(corpus=corpus, contrast=name, condition_a=a, condition_b=b)
        if not paired:
            none = NullDraws(np.empty(0), np.empty(0))
            summaries.append({**base, **summary_row(pd.DataFrame(columns=SPEC_COLUMNS), none, math.nan, n_declared,
                                                    test, 0, skipped)})
            continue
        rows = _spec_rows(corpus, name, a, b, paired, tested, test.alpha)
        docs, sums, counts = _union(paired)
        effects = rows["mean_delta"].to_numpy(float)
        se = np.array([float(np.std(t.replicates, ddof=1)) if t.replicates.size > 1 else 0.0 for t in tested])
        null = null_draws(sums, counts, effects, se, test.n_boot, test.seed)
        tables.append(rows)
        summaries.append({**base, **summary_row(rows, null, stouffer_z(effects, se), n_declared, test,
                                                int(docs.size), skipped)})
    spec_table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=SPEC_COLUMNS)
    return Curves(spec_table[SPEC_COLUMNS], pd.DataFrame(summaries, columns=SUMMARY_COLUMNS),
                  axis_table(spec_table))
