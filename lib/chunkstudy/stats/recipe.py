"""Anthropic's contextual-retrieval recipe under the study's controls (stage 07, exploratory; docs/beyond.md,
"Anthropic's recipe"): each declared step (:data:`chunkstudy.design.RECIPE`: a paper condition in a retrieval
mode, reranked or not) and how far it cuts the baseline's top-k retrieval failure.

**Failure.** Anthropic counts "1 minus recall@20": the share of a query's relevant chunks that the top 20 do not
hold. Here the relevant items are the query's gold spans, and a span is retrieved when the union of the top k
chunks covers at least ``metrics.span_frac`` of it: the study's span-level recall@k (06's ``recipe_scores``, k =
``stats.recipe_k``, 20). So a query's failure is ``f_q = 1 − recall@k(q)``, the share of its gold spans the top k
leave (mostly) uncovered; a chunk set that cuts a span in two can still cover it. A step's failure ``F`` is the mean
of ``f_q`` over the queries scored in both the step and the baseline (paired, as every contrast is).

**Reduction.** ``R = 1 − F_step / F_base`` (Anthropic's 35 %: 5.7 % → 3.7 %); 0 for the baseline itself, negative
when the step fails more often.

**Its interval.** A ratio is resampled as a ratio (:func:`ratio_bootstrap`): the study's document-clustered
bootstrap (``stats.n_boot`` resamples of documents under ``stats.seed``, drawn exactly as
:func:`chunkstudy.significance.cluster_bootstrap` draws them, so every step and every contrast share the draws)
recomputes both failures on each draw and takes ``R* = 1 − Σ_draw S_step / Σ_draw S_base`` (``S``: a document's
summed failures; the query counts cancel), never a ratio of two intervals. The CI is the ``(1 − alpha)``
percentile interval of ``R*``; the two-sided p counts the replicates on each side of 0 as the study's p does
(:data:`chunkstudy.significance.P_RULE`): ``R* ≤ 0`` exactly when the drawn documents fail at least as often under
the step, so p is the bootstrap p of the paired failure delta. A draw whose baseline never fails has no ratio: it
is left out and counted in the note. The inference floors are the contrasts' (``stats.min_docs`` documents,
:data:`chunkstudy.significance.MIN_BOOT` resamples). Pure; never rounds.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .. import design, paper, stages
from ..significance import _BLOCK, BootstrapTest, cluster_sums, mc_p_two_sided, percentile_ci
from .contrasts import EXPLORATORY

RECIPE_COLUMNS = stages.columns("recipe")


class RatioBoot(NamedTuple):
    """:func:`ratio_bootstrap`'s result: the reduction ``R = 1 − Σ num / Σ den`` over every query, its percentile
    CI and two-sided p (NaN when fewer than two documents or no defined replicate), the queries and documents,
    how many replicates had no ratio (their baseline never failed), and the replicates (NaN where undefined)."""

    estimate: float
    ci_low: float
    ci_high: float
    p: float
    n: int
    n_clusters: int
    undefined: int
    replicates: np.ndarray


def ratio_bootstrap(num: Any, den: Any, clusters: Any, test: BootstrapTest) -> RatioBoot:
    """The document-clustered bootstrap of ``R = 1 − Σ num / Σ den`` (``num``: a step's per-query failures,
    ``den``: the baseline's, paired, ``clusters``: each query's document) with ``test``'s resamples, seed and alpha,
    drawn as :func:`chunkstudy.significance.cluster_bootstrap` draws (module docstring)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    labels, s_num, counts = cluster_sums(num, clusters)
    _, s_den, _ = cluster_sums(den, clusters)
    total = float(s_den.sum())
    estimate = 1.0 - float(s_num.sum()) / total if total > 0 else math.nan
    g = labels.size
    reps = np.full(test.n_boot, np.nan)
    rng = np.random.default_rng(test.seed)
    for start in range(0, test.n_boot, _BLOCK):
        stop = min(test.n_boot, start + _BLOCK)
        idx = rng.integers(0, g, size=(stop - start, g))
        top, bottom = s_num[idx].sum(axis=1), s_den[idx].sum(axis=1)
        ok = bottom > 0
        reps[start:stop][ok] = 1.0 - top[ok] / bottom[ok]
    defined = reps[~np.isnan(reps)]
    nan = math.nan
    if g < 2 or defined.size == 0 or math.isnan(estimate):
        return RatioBoot(estimate, nan, nan, nan, int(counts.sum()), int(g), int(reps.size - defined.size), reps)
    lo, hi = percentile_ci(defined, test.alpha)
    p = float(mc_p_two_sided(int(np.sum(defined <= 0.0)), int(np.sum(defined >= 0.0)), defined.size))
    return RatioBoot(estimate, lo, hi, p, int(counts.sum()), int(g), int(reps.size - defined.size), reps)


def _failures(recipe_scores: pd.DataFrame, condition: str, retriever: str, reranker: str) -> pd.Series:
    """Per query (indexed by query_id, with its doc_id), the failure ``1 − recall@k`` of one step's lists."""
    sel = recipe_scores[(recipe_scores["condition"] == condition) & (recipe_scores["embedder"] == retriever)
                        & (recipe_scores["reranker"] == reranker)]
    return (1.0 - sel.set_index("query_id")["value"].astype(float)).rename("failure").to_frame().join(
        sel.set_index("query_id")["doc_id"])


def steps(recipe_scores: pd.DataFrame, strong: str) -> list[tuple[design.RecipeStep, str, str]]:
    """The recipe's steps as cells of this run: ``(step, retriever, reranker)``, the retriever of the step's mode
    with ``strong`` (``embed.strong``); a reranked step once per reranker the scores hold (sorted), none without."""
    rerankers = sorted(set(recipe_scores["reranker"].astype(str)) - {"none"})
    out = []
    for s in design.RECIPE:
        retriever = design.RETRIEVAL_MODES[s.mode].retriever_name(strong)
        out += [(s, retriever, r) for r in (rerankers if s.reranked else ["none"])]
    return out


def _row(step: design.RecipeStep, retriever: str, reranker: str, got: pd.DataFrame, base: pd.DataFrame,
         test: BootstrapTest, k: int) -> dict[str, Any]:
    """One step's row: its failure and the baseline's over the queries both scored, and the reduction's test."""
    nan = math.nan
    row: dict[str, Any] = dict(step=step.name, condition=step.condition, mode=step.mode, embedder=retriever,
                               reranker=reranker, description=step.label, k=int(k), failure=nan,
                               baseline_failure=nan, reduction=nan, ci_low=nan, ci_high=nan, p=nan, n_queries=0,
                               n_docs=0, inference=False,
                               anthropic=paper.value("study", "anthropic", step.anthropic) if step.anthropic else nan,
                               n_boot=test.n_boot, seed=test.seed, label=EXPLORATORY, note="")
    if got.empty:
        row["note"] = f"not run: no {retriever} x {reranker} lists of {step.condition} (retrieve.modes, rerankers)"
        return row
    both = got.join(base["failure"].rename("base"), how="inner")
    if both.empty:
        row["note"] = "no query scored under both this step and the baseline"
        return row
    boot = ratio_bootstrap(both["failure"].to_numpy(), both["base"].to_numpy(), both["doc_id"].to_numpy(), test)
    problem = test.inference_problem(boot.n_clusters)
    notes = [problem] if problem else []
    if boot.undefined:
        notes.append(f"{boot.undefined} of {test.n_boot} resamples drew documents the baseline never fails on: no "
                     "ratio, left out")
    if math.isnan(boot.estimate):
        notes.append("the baseline never fails on these queries: no reduction to measure")
    row.update(failure=float(both["failure"].mean()), baseline_failure=float(both["base"].mean()),
               reduction=boot.estimate, n_queries=boot.n, n_docs=boot.n_clusters, note="; ".join(notes))
    if not problem:
        row.update(ci_low=boot.ci_low, ci_high=boot.ci_high, p=boot.p, inference=not math.isnan(boot.p))
    return row


def recipe_table(recipe_scores: pd.DataFrame, stats_params: Any, strong: str, corpus: str) -> pd.DataFrame:
    """07's ``recipe`` table: one row per step of :func:`steps` (module docstring), the first the baseline (its
    reduction 0 by definition, no test). ``recipe_scores``: 06's (recall@k of the recipe's conditions in every
    cell); ``stats_params``: the ``stats`` record (``recipe_k``, the bootstrap, the floors); ``strong``:
    ``embed.strong``. ``anthropic``: the reduction the paper cites for the step ([4]), where it cites one. Empty,
    with the columns, when 06 wrote no recipe scores."""
    if recipe_scores is None or recipe_scores.empty:
        return pd.DataFrame(columns=RECIPE_COLUMNS)
    test = BootstrapTest.of(stats_params)
    cells = steps(recipe_scores, strong)
    first, retriever, _ = cells[0]
    base = _failures(recipe_scores, first.condition, retriever, "none")
    rows = [_row(s, r, rr, _failures(recipe_scores, s.condition, r, rr), base, test, stats_params.recipe_k)
            for s, r, rr in cells]
    rows[0].update(reduction=0.0 if rows[0]["failure"] == rows[0]["failure"] else math.nan, ci_low=math.nan,
                   ci_high=math.nan, p=math.nan, inference=False,
                   note="the baseline every reduction is measured from" + (f"; {rows[0]['note']}"
                                                                          if rows[0]["note"] else ""))
    out = pd.DataFrame(rows)
    out.insert(0, "corpus", corpus)
    return out[RECIPE_COLUMNS]
