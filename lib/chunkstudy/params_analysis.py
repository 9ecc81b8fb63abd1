"""The analysis sections of a parameter file: ``metrics`` (06's metrics), ``stats`` (07's tests, the power analysis
and 07's checks of its own tests) and ``multiverse`` (the specification curve's axes). Declared as
:mod:`chunkstudy.params` declares every section (one frozen, typed record class each, :func:`param` attaching what a
type does not say), and re-exported there: ``chunkstudy.params.StatsParams`` is this module's.
"""

from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping

from . import design, paper, significance
from .paramspec import copied, param

#: The study's fixed seed (the paper's seeded walk): the default of ``stats.seed`` (:data:`chunkstudy.params.SEED`
#: is the same value, read from the same place).
SEED: int = paper.value("study", "design", "seed")

# ------------------------------------------------------------------------------------------------------- metrics

@dataclass(frozen=True)
class _RelevanceRule:
    """The relevance rule's two keys of the ``metrics`` section (the rest are the metrics' own)."""

    span_frac: float = param(0.5, "relevance rule: a chunk is relevant to a gold span it overlaps when it holds at "
                             "least this share of the span's characters (or chunk_frac of its own); recall counts "
                             "a span once the top chunks together cover this share of it", gt=0, le=1)
    chunk_frac: float = param(0.8, "relevance rule: a chunk is relevant to a gold span it overlaps when at least "
                              "this share of its own characters lies in the span (or it holds span_frac of the "
                              "span)", gt=0, le=1)


class _Metrics:
    """What the ``metrics`` record answers (the methods of :class:`MetricsParams`)."""

    @property
    def names(self) -> list[str]:
        """Canonical metric names, in the order of the scores table (:func:`chunkstudy.design.metric_names`)."""
        return design.metric_names(vars(self))

    @property
    def primary(self) -> str:
        """The confirmatory metric's name under these parameters (``cov-nDCG@10`` by default)."""
        return design.PRIMARY_METRIC.names(vars(self))[0]

    def named(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Computed values keyed by metric family (:data:`chunkstudy.design.METRICS`; a list parameter's family
        holds one value per element) renamed to the canonical names, in table order. A declared family that
        was not computed raises KeyError."""
        out: dict[str, Any] = {}
        for m in design.METRICS:
            listed = m.parameter is not None and isinstance(getattr(self, m.parameter), (list, tuple))
            out.update(zip(m.names(vars(self)), values[m.key] if listed else [values[m.key]], strict=True))
        return out


_DOC = ("``metrics``: the relevance rule, and the parameters each metric declares in its own class "
        "(:data:`design.METRICS`: cut-offs, budgets, ...), assembled into one section.")


def _metrics_params() -> type:
    """The ``metrics`` section's record: every parameter the registered metrics declare
    (:func:`chunkstudy.design_metrics.parameter_fields`, in table order), then the relevance rule's. A metric whose
    template names a parameter nobody declares is refused here, at import, naming it."""
    declared = design.parameter_fields() + copied(_RelevanceRule)
    known = {name for name, _, _ in declared}
    for m in design.METRICS:
        if m.parameter is not None and m.parameter not in known:
            raise TypeError(f"metric {m.key!r}: its template {m.template!r} names the parameter {m.parameter!r}, "
                            f"which no metric declares (declare it in the class's Parameters)")
    return make_dataclass("MetricsParams", declared, bases=(_Metrics,), frozen=True,
                          namespace={"__doc__": _DOC, "__module__": __name__})


if TYPE_CHECKING:
    @dataclass(frozen=True)
    class MetricsParams(_Metrics):
        """The ``metrics`` section (assembled at import; each metric's parameters are attributes of it)."""

        span_frac: float = _RelevanceRule.span_frac
        chunk_frac: float = _RelevanceRule.chunk_frac

        def __getattr__(self, name: str) -> Any: ...
else:
    MetricsParams = _metrics_params()


# --------------------------------------------------------------------------------------------------------- stats

@dataclass(frozen=True)
class StatsParams:
    """``stats``: 07's confirmatory test (the primary cell, the contrasts, the bootstrap) and the power analysis."""

    n_boot: int = param(10000, "cluster-bootstrap resamples (the paper: 10,000); below 1,000 (stats.MIN_BOOT) a run "
                        "writes its numbers but marks nothing significant and the report prints no CI, p or star",
                        ge=1)
    min_docs: int = param(significance.CALIBRATED_FROM,
                          "fewest documents (the resampled clusters) a contrast needs for inference; below it the "
                          "report prints no CI, p or star and says why. The default is the size below which even the "
                          "calibrated test does not hold its size in the calibration table (bench/bench_calibration.py; "
                          "docs/design.md, 'Calibrated at the sizes users bring'); override it knowingly", ge=2)
    decision: Literal["auto", "percentile", "calibrated"] = param(
        "auto", "which test decides significance (the star) in every family of stats.contrasts: percentile (the "
                "paper's cluster bootstrap, pre-registered in its parameter files), calibrated (the wild cluster "
                "bootstrap-t with the null imposed), or auto: the percentile bootstrap from "
                f"{significance.PERCENTILE_FROM} documents on, where the calibration table measured it holding its "
                "size, the calibrated test below; both are always reported", digest="changed")
    check_sims: int = param(1000, "07's check of its own tests (07_stats/size_check): null studies of this run's "
                            "documents and queries per document, per test (MC SE of a 5% rate: 0.7 points)", ge=1,
                            digest="changed")
    check_n_boot: int = param(999, "07's check: resamples (and wild-bootstrap weight vectors) per simulated study",
                              ge=1, digest="changed")
    check_mixed_sims: int = param(200, "07's check: null studies for the paired MixedLM's CI coverage (a fit per "
                                  "contrast and study)", ge=1, digest="changed")
    seed: int = param(SEED, "the seed of 07's bootstrap resamples, wild-bootstrap weights and simulated studies "
                      "(size check, power)")
    alpha: float = param(0.05, "the level of every test: CIs are 1 - alpha, a contrast is significant when its "
                         "Holm-adjusted p is below alpha (also the TOST's and the power analysis' level)",
                         gt=0, lt=1)
    primary_metric: str = param(MetricsParams().primary, "the confirmatory metric: one of the metrics section's "
                                "names (default: the primary family at the default cut-off)")
    primary_reranker: str = param("none", "the reranker of the primary cell: 'none' (the first-stage ranking) or a "
                                  "key of retrieve.rerankers")
    contrasts: Mapping[str, tuple[str, str]] = param({c.name: [c.a, c.b] for c in design.CONTRASTS},
                                                     "the confirmatory family: name -> [A, B], each the mean "
                                                     "per-query delta A - B, tested in every cell and "
                                                     "Holm-adjusted within it (confirmatory in the primary cell); "
                                                     "the paper's C1-C4 by default")
    mixedlm: bool = param(True, "true: 07 also fits the two secondary MixedLMs (the pre-registered one and the "
                          "paired one) per contrast of the primary cell; false: their tables are written empty")
    sesoi: float | None = param(None, "smallest effect size of interest of stats.primary_metric, in its units (0.02 "
                                "= two cov-nDCG points): every contrast of that metric gets a TOST at +-sesoi from "
                                "its own bootstrap draws, Holm-adjusted within its family "
                                "(docs/beyond.md, 'Equivalence'), recorded in stage 01's manifest; null = no "
                                "equivalence test", gt=0, digest="changed")
    sesoi_by_metric: Mapping[str, float] = param({}, "the bounds of other metrics, by metric name (e.g. MRR: 0.02, "
                                                 "recall@50: 0.03), each in its own units; a metric without one "
                                                 "gets blank TOST columns and a note saying so",
                                                 digest="changed")
    recipe_k: int = param(20, "Anthropic's recipe (retrieve.modes with bm25 and hybrid): the top k whose failure, "
                          "1 - recall@k (span-level), each step reduces; 20 as Anthropic's", ge=1, digest="changed")
    drilldown_queries: int = param(3, "per-query drill-down (06_metrics/drilldown, report.html): how many queries "
                                   "with the largest gains and how many with the largest losses each contrast of the "
                                   "primary cell shows", ge=0)
    power_n_docs: tuple[int, ...] = param((5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000), "power analysis: "
                                          "corpus sizes (documents) simulated; this corpus's own size is added",
                                          ge=2, unique=True)
    power_n_sims: int = param(200, "power analysis: simulated studies per corpus size (MC SE ≤ 0.035)", ge=1)
    power_n_boot: int = param(1000, "power analysis: cluster-bootstrap resamples per simulated study", ge=1)
    power_target: float = param(0.8, "power analysis: the power a corpus size must reach", gt=0, lt=1)
    power_require_sign: bool = param(True, "power analysis: a detection also needs the study's mean delta to have "
                                     "the target effect's sign")
    power_paper_corpus: Literal["wikipedia", "qasper"] | None = param(
        None, "power analysis: the paper corpus whose dz is the 'paper' scenario; null = corpus.kind when the paper "
              "ran it, else wikipedia")

    def sesoi_for(self, metric: str) -> float | None:
        """The declared equivalence bound of ``metric`` (its units): ``sesoi`` for ``primary_metric``, else
        ``sesoi_by_metric``'s; None where none is declared."""
        if metric == self.primary_metric:
            return self.sesoi
        bound = self.sesoi_by_metric.get(metric)
        return None if bound is None else float(bound)

    @property
    def equivalence_bounds(self) -> dict[str, float]:
        """Every declared bound by metric name, the primary metric's first (what 01's manifest records); empty
        when the run tests no equivalence."""
        out = {self.primary_metric: float(self.sesoi)} if self.sesoi is not None else {}
        return {**out, **{str(k): float(v) for k, v in self.sesoi_by_metric.items()}}


# ---------------------------------------------------------------------------------------------------- multiverse

QueryTypes = Literal["all", "each", "all_but_one"]


@dataclass(frozen=True)
class MultiverseParams:
    """``multiverse``: the analysis choices each contrast's specification curve varies (07, exploratory;
    docs/beyond.md, "Specification curve"), declared before the run (01's manifest records the block). The grid is
    every combination of the axes' alternatives; an empty axis holds only the primary specification's value, which
    every stated axis must hold too, so the primary specification (Table 1's cell) is one point of the grid. The
    block came after runs were made: an axis moves no digest while unstated, and the section none at all."""

    metrics: tuple[str, ...] = param((), "metric axis: canonical names 06 writes (cov-nDCG@10, nDCG@10, MRR, "
                                     "recall@50, budget-cov@1024, ...); with stats.primary_metric", unique=True,
                                     digest="changed")
    cutoffs: tuple[int, ...] = param((), "k axis: the cut-offs of the metric axis's families on the k axis "
                                     "(declared k_axis: cov-nDCG, nDCG), with metrics.cutoff; 06 also scores them "
                                     "at each other k (multiverse_scores)", ge=1, unique=True, digest="changed")
    embedders: tuple[str, ...] = param((), "embedder (and mode) axis: keys of embed.embedders, and the retrievers of "
                                       "retrieve.modes (bm25, hybrid-<key>), with embed.strong", unique=True,
                                       digest="changed")
    rerankers: tuple[str, ...] = param((), "reranker axis: 'none' or keys of retrieve.rerankers, with "
                                       "stats.primary_reranker", unique=True, digest="changed")
    query_types: tuple[QueryTypes, ...] = param((), "query-type axis: all (every query), each (each type alone), "
                                                "all_but_one (all types but one); with all", unique=True,
                                                digest="changed")
    bootstrap_seeds: tuple[int, ...] = param((), "bootstrap-seed axis: seeds of the clustered bootstrap, with "
                                             "stats.seed", unique=True, digest="changed")
    conditions: Mapping[str, tuple[str, ...]] = param({}, "condition axis: a condition of a contrast -> the run's "
                                                      "conditions that may stand in for it, itself first (P: [P, P7], "
                                                      "P7 a placebo under another seed in conditions.extra); 04 "
                                                      "builds them, reusing every stored vector",
                                                      digest="changed")

    @property
    def active(self) -> bool:
        """Whether any axis is stated (07 computes the curves only then)."""
        return any(bool(getattr(self, f)) for f in self.__dataclass_fields__)
