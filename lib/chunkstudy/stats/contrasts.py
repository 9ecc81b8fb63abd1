"""The pre-registered contrasts of stage 07 (paper §4 and the statistics appendix): the confirmatory family in the
primary cell and the same contrasts, exploratory, in every other cell; the user's own family
(``contrasts.extra``); and the pre-registered secondary MixedLM. Vocabulary: :mod:`chunkstudy.stats`."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any, Mapping, cast

import numpy as np
import pandas as pd

from .. import design, stages
from ..metrics.paired import pair, prepare_scores, wide_scores
from ..params import StatsParams
from ..significance import BootstrapTest, Tested, holm
from . import equivalence
from .effects import cohens_dz

CONFIRMATORY = "confirmatory"
EXPLORATORY = "exploratory"
#: The label of a user contrast (``contrasts.extra``): its own exploratory family, never the confirmatory one.
USER_ADDED = "exploratory (user-added)"

MIXEDLM_NOTE = (
    "secondary, misspecified by design: random intercept per document but no per-query random effect although "
    "treatment varies within query, so query-to-query variance inflates the SE and the model is conservative for "
    "small paired effects; the clustered bootstrap is primary"
)


def contrast_spec(stats_params: StatsParams) -> dict[str, tuple[str, str]]:
    raw = stats_params.contrasts
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError(f"stats.contrasts: expected a mapping name -> [condition_a, condition_b], got {raw!r}")
    out = {}
    for name, pair in raw.items():
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(c, str) for c in pair):
            raise ValueError(f"stats.contrasts.{name}: expected [condition_a, condition_b], got {pair!r}")
        out[str(name)] = (pair[0], pair[1])
    return out


def cells_in(wide: pd.DataFrame, primary: tuple[str, str, str]) -> list[tuple[str, str, str]]:
    keys = wide.index.droplevel("query_id").unique()
    cells = cast("list[tuple[str, str, str]]", sorted({tuple(map(str, k)) for k in keys}))
    return sorted(cells, key=lambda c: (c != primary, c))


def contrast_row(both: pd.DataFrame | None, note: str, a: str, b: str, test: BootstrapTest) -> tuple[dict, Tested]:
    """One contrast ``a − b`` over the paired queries ``both`` (None: none, ``note`` says why): the row's
    statistics — ``mean_delta`` (the mean paired delta), the test's CI, p, ``inference`` and note
    (:meth:`~chunkstudy.significance.BootstrapTest.test`), ``dz``, sizes and the two means — and what the test
    saw, for the family's decision (:meth:`~chunkstudy.significance.BootstrapTest.decide`)."""
    nan = float("nan")
    if both is None:
        return (dict(mean_delta=nan, ci_low=nan, ci_high=nan, p=nan, dz=nan, n_queries=0, n_docs=0, mean_a=nan,
                     mean_b=nan, inference=False, note=note), Tested.untested(note))
    delta = both[a].to_numpy() - both[b].to_numpy()
    t = test.test(delta, both["doc_id"].to_numpy())
    row: dict[str, Any] = dict(mean_delta=float(delta.mean()), ci_low=t.ci_low, ci_high=t.ci_high, p=t.p,
                               dz=cohens_dz(delta), n_queries=t.n, n_docs=t.n_clusters, mean_a=float(both[a].mean()),
                               mean_b=float(both[b].mean()), inference=t.inference,
                               note="; ".join(x for x in (note, t.note) if x))
    return row, t


# ---------------------------------------------------------------------------------------------------------------
# Confirmatory family + the same contrasts in every other cell
# ---------------------------------------------------------------------------------------------------------------

CONTRAST_COLUMNS = stages.columns("contrasts")


def contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                    corpus: str) -> pd.DataFrame:
    """The contrasts of ``stats.contrasts`` in every cell of ``corpus`` present in ``scores`` (paper §4 and the
    statistics appendix; the primary cell's rows are Table 1).

    Per cell and contrast ``A − B``: ``mean_delta`` = unweighted mean of the paired per-query deltas; ``ci_low``/
    ``ci_high`` = the ``(1−alpha)`` percentile CI and ``p`` = the two-sided p of a document-clustered bootstrap
    (:class:`chunkstudy.significance.BootstrapTest`, ``stats.n_boot`` resamples, ``stats.seed``); ``p_holm`` =
    Holm-adjusted within the cell's family (family = all contrasts of ``stats.contrasts``); ``inference`` = the
    bootstrap supports inference (at least ``stats.min_docs`` documents and
    :data:`~chunkstudy.significance.MIN_BOOT` resamples; when not, ``note`` says why and 08 prints no CI, p or
    star); ``reject_holm`` = the test's decision (``p_holm < alpha`` and ``inference``, its :data:`HOLM` verdict;
    08 prints it and decides nothing); ``dz`` = Cohen's dz (:func:`cohens_dz`); ``mean_a``/``mean_b`` = the two
    conditions' means
    over the paired queries. ``confirmatory`` is True only in the primary cell; ``label`` says "confirmatory" or
    "exploratory". A contrast whose conditions are missing from a cell gets NaN statistics and a ``note``. With
    ``stats.sesoi`` declared the test also carries the TOST verdict (:class:`chunkstudy.stats.equivalence.TostVerdict`,
    from the same draws): columns ``sesoi``, ``tost_ci_low``, ``tost_ci_high``, ``p_tost``, ``equivalence``.
    """
    contrasts = contrast_spec(stats_params)
    sesoi = getattr(stats_params, "sesoi", None)
    test = equivalence.with_tost(BootstrapTest.of(stats_params), sesoi)
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    rows = []
    for metric, embedder, reranker in cells_in(wide, primary):
        block = wide.xs((metric, embedder, reranker), level=["metric", "embedder", "reranker"])
        cell_rows, family = [], []
        for name, (a, b) in contrasts.items():
            both, note = pair(block, a, b)
            stats_row, tested = contrast_row(both, note, a, b, test)
            confirmatory = (metric, embedder, reranker) == primary
            cell_rows.append(dict(corpus=corpus, cell=design.cell_name(metric, embedder, reranker), metric=metric,
                                  embedder=embedder, reranker=reranker, contrast=name, condition_a=a,
                                  condition_b=b, **stats_row, confirmatory=confirmatory,
                                  label=CONFIRMATORY if confirmatory else EXPLORATORY, n_boot=test.n_boot,
                                  seed=test.seed))
            family.append(tested)
        for r, verdict in zip(cell_rows, test.decide(family)):
            r.update(verdict)
        rows.extend(cell_rows)
    columns = CONTRAST_COLUMNS if sesoi is not None else [c for c in CONTRAST_COLUMNS
                                                           if c not in equivalence.TOST_COLUMNS]
    return pd.DataFrame(rows, columns=columns)


def user_family(stats_params: StatsParams, user_contrasts: Mapping[str, Any]) -> Any:
    """The ``stats`` record with ``contrasts`` replaced by the user's (``contrasts.extra``): every function that
    tests or simulates "the family" (:func:`contrasts_table`, :func:`chunkstudy.stats.power.power_table`) then works on
    the user's family alone, with its own Holm correction, and never touches the confirmatory four."""
    return replace(stats_params, contrasts=dict(user_contrasts))


def user_contrasts_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: Any, primary: design.PrimaryCell,
                         corpus: str, user_contrasts: Mapping[str, Any]) -> pd.DataFrame:
    """The user's contrasts (``contrasts.extra``) in every cell, as :func:`contrasts_table` computes the paper's:
    the same bootstrap, seed and dz, but Holm-adjusted within the user's family in each cell (a family of its own,
    kept apart from ``stats.contrasts``), ``confirmatory`` False everywhere and ``label`` :data:`USER_ADDED`, the
    primary cell included. Empty (with the columns) when there are none."""
    if not user_contrasts:
        return pd.DataFrame(columns=[c for c in CONTRAST_COLUMNS if c not in equivalence.TOST_COLUMNS]
                            if getattr(stats_params, "sesoi", None) is None else CONTRAST_COLUMNS)
    out = contrasts_table(scores, queries, user_family(stats_params, user_contrasts), primary, corpus)
    return out.assign(confirmatory=False, label=USER_ADDED)


# ---------------------------------------------------------------------------------------------------------------
# Secondary: MixedLM
# ---------------------------------------------------------------------------------------------------------------

MIXEDLM_COLUMNS = stages.columns("mixedlm")


def fit_mixedlm(values: np.ndarray, treated: np.ndarray, groups: np.ndarray, *, alpha: float) -> dict:
    """Fit ``value ~ treated`` with a random intercept per group (statsmodels ``MixedLM``, REML).

    ``treated`` is 1 for condition A and 0 for condition B, so the fixed-effect coefficient is the A − B
    difference — the same model as ``score ~ C(condition)`` with B as the reference level. Returns coef, se,
    z = coef/se, p (Wald, normal), the ``(1−alpha)`` Wald CI, the random-intercept and residual variances,
    ``converged`` and any warnings statsmodels raised (as ``note``).
    """
    import statsmodels.formula.api as smf

    data = pd.DataFrame({"value": np.asarray(values, float), "treated": np.asarray(treated, float),
                         "doc_id": np.asarray(groups)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = smf.mixedlm("value ~ treated", data, groups=data["doc_id"]).fit(reml=True)
    coef = float(result.fe_params["treated"])
    se = float(result.bse_fe["treated"])
    lo, hi = result.conf_int(alpha=alpha).loc["treated"]
    msgs = sorted({f"{type(w.message).__name__}: {w.message}".split("\n")[0] for w in caught})
    return dict(coef=coef, se=se, z=coef / se if se > 0 else float("nan"), p=float(result.pvalues["treated"]),
                ci_low=float(lo), ci_high=float(hi), group_var=float(result.cov_re.iloc[0, 0]),
                resid_var=float(result.scale), converged=bool(result.converged), note="; ".join(msgs))


def mixedlm_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: StatsParams, primary: design.PrimaryCell,
                  corpus: str) -> pd.DataFrame:
    """The pre-registered secondary check: per contrast of the primary cell, a MixedLM
    ``score ~ condition + (1 | document)`` over the queries scored under both conditions (:func:`fit_mixedlm`;
    paper §4 and the statistics appendix, "mixed-effects regression").

    The paper reports it as misspecified by design (no per-query random effect, so query-to-query variance lands
    in the residual and the SE is inflated): every row carries that note (:data:`MIXEDLM_NOTE`). ``p_holm`` is
    Holm over the family for comparison with the bootstrap table. Empty (with the columns) when
    ``stats.mixedlm`` is false. A model that fails to fit gives a row of NaNs and the error in ``note``.
    """
    if not stats_params.mixedlm:
        return pd.DataFrame(columns=MIXEDLM_COLUMNS)
    contrasts = contrast_spec(stats_params)
    alpha = float(stats_params.alpha)
    wide = wide_scores(prepare_scores(scores, queries, corpus))
    nan = float("nan")
    try:
        block = wide.xs(tuple(primary), level=["metric", "embedder", "reranker"])
    except KeyError:
        block = None
    rows = []
    for name, (a, b) in contrasts.items():
        row: dict[str, Any] = dict(corpus=corpus, cell=primary.name, contrast=name, condition_a=a, condition_b=b,
                   label="secondary (confirmatory family)")
        both, note = (None, f"skipped: primary cell {primary.name} absent from scores") if block is None \
            else pair(block, a, b)
        fit: dict[str, Any]
        fit = dict(coef=nan, se=nan, z=nan, p=nan, ci_low=nan, ci_high=nan, group_var=nan, resid_var=nan,
                   converged=False, note=note)
        n_q = n_d = 0
        if both is not None:
            n_q, n_d = len(both), int(both["doc_id"].nunique())
            values = np.concatenate([both[a].to_numpy(), both[b].to_numpy()])
            treated = np.repeat([1.0, 0.0], n_q)
            groups = np.concatenate([both["doc_id"].to_numpy(), both["doc_id"].to_numpy()])
            try:
                fit = fit_mixedlm(values, treated, groups, alpha=alpha)
            except Exception as e:  # a singular design (e.g. identical conditions) must not stop the stage
                fit["note"] = f"fit failed: {type(e).__name__}: {e}"
        row.update(fit, n_obs=2 * n_q, n_queries=n_q, n_docs=n_d)
        row["note"] = "; ".join(x for x in (MIXEDLM_NOTE, row["note"]) if x)
        rows.append(row)
    out = pd.DataFrame(rows, columns=[c for c in MIXEDLM_COLUMNS if c != "p_holm"])
    out.insert(out.columns.get_loc("p") + 1, "p_holm", holm(out["p"].to_numpy(float)))
    return out[MIXEDLM_COLUMNS]
