"""The per-corpus report of stage 08 (``figures/<corpus>/report.md``) and the cross-corpus replication table.

The report gathers the tables (:mod:`chunkstudy.report.tables`) and figures (:mod:`chunkstudy.report.figures`) of
one run and says, in this order: what models were actually used (and loudly, when they are not the study's: an LLM
that is not ``capable``, a baseline inducer or A1 context method, an untrained reranker, stand-in embedders); what is
confirmatory (the four contrasts of the primary cell only) and what is exploratory (everything else); whether the
contrasts replicate on the other corpus (when its 07_stats contrasts exist); how the data were built; and where
each stage ran (the environment its manifest recorded: git commit, Python, torch and its threads, CPU/GPU, key
package versions). Paths in the report are relative to the project root. The replication table is
:mod:`chunkstudy.report.replication`'s.

What 08 may do without is declared with its reads (:func:`chunkstudy.stages.optional_reads`: the diagnostics and
construction tables): :func:`gather` checks every input up front, records a missing optional one (the report
prints a note where its table or figure would have been) and stops the stage on a missing required one, naming it
and its writer. A table builder that fails is a bug, never a note: :func:`build` stops the stage naming the table
(:class:`ReportError`). The report prints 07's decisions (``significant`` and ``decided_by``, ``reject_holm``,
``inference``) and computes no statistic.
Reading goes through :mod:`chunkstudy.artifacts` (the only module that touches paths); every other function here
is pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, NamedTuple

import jinja2
import pandas as pd

from .. import artifacts, config, manifests, paper, significance, stages
from ..config import Config
from ..errors import ChunkstudyError
from ..params import Params, StatsParams
from ..stats import verdicts
from . import curve, drilldown, figures, html, pareto, recipe, tables
from .bundle import Bundle
from .notices import corpus_size_warnings, saturation_warnings, stage_warnings  # noqa: F401 (report.<name>)
from .replication import replication

#: Tables 08 reads (its declared reads, :data:`chunkstudy.stages.STAGES`; runs are not needed: the scores already
#: summarise them).
INPUT_TABLES: tuple[str, ...] = tuple(n for n in stages.reads("08_figures")
                                      if isinstance(stages.artifact(n), stages.Table))
#: JSON facts 08 reads when present: (stage, name), likewise declared.
INPUT_JSON: tuple[tuple[str, str], ...] = tuple((stages.writer(n), n) for n in stages.reads("08_figures")
                                                if isinstance(stages.artifact(n), stages.Json))
#: The reads 08 does without, and what each leaves out (:func:`chunkstudy.stages.optional_reads`).
OPTIONAL_INPUTS: dict[str, str] = stages.optional_reads("08_figures")
#: The paper's BM25 gold-top-1 shares (§5), by corpus kind; read from :mod:`chunkstudy.paper`.
PAPER_BM25 = {kind: paper.value(kind, "bm25", "gold_top1") for kind in ("wikipedia", "qasper")}
#: The paper's bootstrap resamples (the statistics paragraph), from :mod:`chunkstudy.paper`.
PAPER_N_BOOT: int = paper.value("study", "design", "n_boot")


class ReportError(ChunkstudyError):
    """Stage 08 cannot build the report: a required input is missing, or a table builder failed (the message names
    the inputs or the table)."""


# ---------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------

def gather(cfg: Config, names: tuple[str, ...] = INPUT_TABLES) -> dict[str, Any]:
    """Read every table in ``names`` and every JSON of :data:`INPUT_JSON`, checked up front: a missing input 08 does
    without (:data:`OPTIONAL_INPUTS`) is recorded, a missing required one raises :class:`ReportError` naming all of
    them and their writers. Returns ``{table: DataFrame or None, ..., "json": {"<stage>/<name>": obj},
    "missing": [optional inputs not found]}``."""
    out: dict[str, Any] = {"json": {}, "missing": []}
    required: list[str] = []
    for name in names:
        try:
            out[name] = artifacts.read(cfg, name)
        except FileNotFoundError:
            out[name] = None
            (out["missing"] if name in OPTIONAL_INPUTS else required).append(name)
    for stage, name in INPUT_JSON:
        try:
            out["json"][f"{stage}/{name}"] = artifacts.read_json(cfg, stage, name)
        except FileNotFoundError:
            (out["missing"] if name in OPTIONAL_INPUTS else required).append(f"{stage}/{name}.json")
    if required:
        raise ReportError("08_figures: required inputs missing: "
                          + ", ".join(f"{n} (written by {stages.writer(n.split('/')[-1].removesuffix('.json'))})"
                                      for n in required)
                          + f"; run ./run_all.sh {cfg.corpus} (08 does without only {sorted(OPTIONAL_INPUTS)})")
    out.update(run_facts(cfg))
    return out


def run_facts(cfg: Config) -> dict[str, Any]:
    """Where the run's results came from: the manifests of stages 01-07 (their recorded environments), the
    environment this report is built in (stage 08), the parameter file relative to the project root, and the root
    itself (so that no absolute path of this machine ends up in the report)."""
    recorded = {s: m for s in stages.upstream("08_figures") if (m := artifacts.read_manifest(cfg, s)) is not None}
    return {"manifests": recorded, "environment": manifests.environment(),
            "params_file": artifacts.project_relative(cfg, cfg.path), "root": str(cfg.root)}


def environment_table(manifests: Mapping[str, Mapping], current: Mapping | None = None) -> pd.DataFrame:
    """One row per stage: when it finished, the git commit (``+modified`` when tracked files differed from it),
    Python, torch and its thread count, CPU (with its vector capability and hardware bfloat16) and GPUs, from each
    manifest's ``environment`` (stage 08: ``current``, the environment the report is built in)."""
    rows = []
    envs = [(stage, m.get("environment") or {}, m.get("finished", "")) for stage, m in manifests.items()]
    if current is not None:
        envs.append(("08_figures", current, "(this report)"))
    for stage, env, finished in envs:
        commit = env.get("git_commit") or ""
        rows.append({"stage": stage, "finished": finished,
                     "git commit": commit[:12] + (" +modified" if env.get("git_dirty") else ""),
                     "python": env.get("python", ""), "torch": (env.get("packages") or {}).get("torch", ""),
                     "torch threads": env.get("torch_threads"), "CPU": f"{env.get('cpu', '')} × {env.get('cpu_count')}",
                     "CPU vectors": f"{env.get('cpu_capability') or '?'}, bf16: {env.get('cpu_bf16') or 'none'}",
                     "GPU": ", ".join(env.get("gpus") or []) or "none"})
    return pd.DataFrame(rows, columns=["stage", "finished", "git commit", "python", "torch", "torch threads", "CPU",
                                       "CPU vectors", "GPU"])


def package_versions(manifests: Mapping[str, Mapping], current: Mapping | None = None) -> pd.DataFrame:
    """The key package versions each stage recorded: one row per package, the version, and the stages that ran
    with a different one (empty when every stage agrees)."""
    per_stage = {stage: (m.get("environment") or {}).get("packages") or m.get("packages") or {}
                 for stage, m in manifests.items()}
    if current is not None:
        per_stage["08_figures"] = current.get("packages") or {}
    names = list(dict.fromkeys(n for v in per_stage.values() for n in v))
    rows = []
    for n in names:
        seen = {s: v.get(n) for s, v in per_stage.items()}
        common = pd.Series(list(seen.values())).mode().iat[0]
        rows.append({"package": n, "version": common,
                     "stages with another version": ", ".join(f"{s}: {v}" for s, v in seen.items() if v != common)})
    return pd.DataFrame(rows, columns=["package", "version", "stages with another version"])


class Partner(NamedTuple):
    """The other corpus of the replication pair (``figures.replicate_with``): its name, its 07_stats
    ``contrasts`` and a ``note`` saying why they are absent (None and "" when there is no partner to read)."""

    corpus: str | None = None
    contrasts: pd.DataFrame | None = None
    note: str = ""


def partner_contrasts(cfg: Config) -> Partner:
    """The other corpus of the replication pair (``figures.replicate_with``, :class:`Partner`); contrasts None
    (and a note saying why) when unset or when its 07_stats has not run."""
    try:
        other = artifacts.partner_config(cfg)
    except Exception as e:  # a named but unreadable params file is a note, not a crash
        return Partner(None, None, f"replication: figures.replicate_with could not be loaded ({e})")
    if other is None:
        return Partner(None, None, "replication: no partner corpus configured (figures.replicate_with is null)")
    if not artifacts.exists(other, "contrasts"):
        return Partner(other.corpus, None, (f"replication: corpus {other.corpus!r} has no 07_stats contrasts yet "
                                            f"(run ./run_all.sh {other.corpus}); the replication table is left out"))
    return Partner(other.corpus, artifacts.read(other, "contrasts"), "")


# ---------------------------------------------------------------------------------------------------------------
# Models and warnings
# ---------------------------------------------------------------------------------------------------------------

def precision_text(row: Mapping | None, unit: str) -> str:
    """How an encoder ran, from its row of 04's ``embedding_report`` or 05's ``rerank_report`` (``unit``: what the
    agreement check compared, "texts (min cosine)" or "queries (min Kendall tau)"); "" when the stage has not run."""
    if not row:
        return ""
    text = f"{row.get('runtime', 'torch')}, {row.get('dtype')}"
    if row.get("agreement_n") is not None:
        text += (f" (dtype auto on a CPU with {row.get('cpu_bf16')}: bfloat16 vs float32 on "
                 f"{row['agreement_n']} {unit}: {row['agreement_min']:.5f})")
    return text


def models_used(params: Params, manifests: Mapping[str, Mapping] | None = None) -> pd.DataFrame:
    """What each model role actually was in this run (from the parameters): role, method/backend, model, label,
    and for the encoders how they ran (``precision``: runtime and resolved dtype, with the agreement check that
    settled ``dtype: auto``), read from the ``records`` of 04's and 05's manifests when given."""
    llm, ind, ctx, q = params.llm, params.induce, params.contexts, params.queries
    llm_name = f"{llm.model or '(none)'} via {llm.backend}" + ("" if llm.capable else " — not capable")
    roles = [("generative LLM", llm.backend, llm.model or "(none)",
             "capable (study class)" if llm.capable else "NOT of the study's class (llm.capable: false)"),
            ("structure induction", ind.method, llm_name if ind.method == "llm" else "(no model)",
             "LLM arm" if ind.method == "llm" else "non-LLM baseline"),
            ("A1 situating contexts", ctx.method, llm_name if ctx.method == "llm" else "(no model)",
             f"LLM arm; <document> view: {ctx.document_view}" if ctx.method == "llm" else "non-LLM baseline"),
            ("queries", q.source, llm_name if q.source == "generated" else "(harvested)",
             "generated + paraphrased, leakage-filtered" if q.source == "generated" else "real questions"),
            ("token counts", "tokenizer", params.chunking.tokenizer, "")]
    rows: list[tuple] = [(*r, "") for r in roles]

    def record(stage: str, name: str, column: str, key: str) -> Mapping | None:
        recs = (((manifests or {}).get(stage) or {}).get("records") or {}).get(name) or []
        return next((r for r in recs if r.get(column) == key), None)

    for key, e in params.embed.embedders.items():
        rows.append((f"embedder '{key}'", e.backend, e.model, e.label,
                     precision_text(record("04_chunk_embed", "embedding_report", "embedder", key),
                                    "texts (min cosine)")))
    for key, r in params.retrieve.rerankers.items():
        rows.append((f"reranker '{key}'", r.backend, r.model,
                     (r.label or key) + ("" if r.trained else " — UNTRAINED"),
                     precision_text(record("05_retrieve", "rerank_report", "reranker", key),
                                    "queries (min Kendall tau)")))
    return pd.DataFrame(rows, columns=["role", "method / backend", "model", "label / status", "precision"])


def model_warnings(params: Params) -> list[str]:
    """Loud warnings for every way the run's models differ from the study's (empty list = none)."""
    w = []
    llm = params.llm
    if not llm.capable:
        w.append(f"The LLM is not of the study's class (llm.capable is false; backend {llm.backend!r}, model "
                 f"{llm.model or '(none)'!r}). Nothing generative in this run stands for the paper's "
                 "Gemma-4-26B-A4B.")
    if params.induce.method != "llm":
        w.append(f"Structure induction used the non-LLM baseline {params.induce.method!r}: the induced "
                 "conditions (A2, A3*, P, A4) and contrast C3 measure that baseline, not an LLM inducer.")
    if params.contexts.method != "llm":
        w.append(f"A1 contexts are the non-LLM {params.contexts.method!r} baseline: contrast C1 compares "
                 "against that baseline, not against LLM-written situating contexts.")
    if params.queries.source == "generated" and not llm.capable:
        w.append("Queries were generated by a model that is not of the study's class.")
    for key, r in params.retrieve.rerankers.items():
        if not r.trained:
            w.append(f"Reranker {key!r} is untrained (trained: false): its reranked cells only prove the plumbing.")
    stand_in = [k for k, e in params.embed.embedders.items()
                if str(e.model).startswith("package:") or "stand-in" in str(e.label).lower()]
    if stand_in:
        w.append(f"Embedders {stand_in} are stand-ins bundled for offline runs, not bge-large-en-v1.5 / "
                 "bge-small-en-v1.5.")
    if int(params.stats.n_boot) < PAPER_N_BOOT:
        w.append(f"stats.n_boot is {params.stats.n_boot} (the paper resamples {PAPER_N_BOOT:,} times).")
    return w


def inference_thresholds(stats_params: StatsParams, resamples: Any = None) -> str:
    """The sentence that states when the report prints inference (CIs, p-values, stars); ``resamples``: the
    resamples 07 recorded with its contrasts (None: ``stats.n_boot``)."""
    n_boot = int(stats_params.n_boot if resamples is None or pd.isna(resamples) else resamples)
    return (f"CIs, p-values and significance stars are printed only for a contrast over at least "
            f"{int(stats_params.min_docs):,} documents (stats.min_docs) with at least {significance.MIN_BOOT:,} "
            f"bootstrap resamples (this run: {n_boot:,}); the bootstrap p is Monte-Carlo-correct, "
            f"{significance.P_RULE} for the k of B resamples on the far side of 0, so never 0. The star is the "
            f"decision of the test that decided (stats.decision: {stats_params.decision}; auto: the calibrated test "
            f"below {significance.PERCENTILE_FROM:,} documents, the percentile bootstrap from there).")


def inference_warnings(contrasts: pd.DataFrame | None, stats_params: StatsParams) -> list[str]:
    """A warning when a confirmatory contrast's bootstrap cannot support inference (07's ``inference`` false:
    fewer than ``stats.min_docs`` documents, or fewer than :data:`chunkstudy.significance.MIN_BOOT` resamples), naming
    the contrasts, the reasons and the thresholds (empty list = none)."""
    if contrasts is None or not len(contrasts):
        return []
    conf = contrasts[contrasts["confirmatory"].astype(bool)] if "confirmatory" in contrasts else contrasts
    bad = conf[~tables.inference_mask(conf)]
    if bad.empty:
        return []
    min_docs = int(stats_params.min_docs)
    n_boot = int(bad["n_boot"].iat[0]) if "n_boot" in bad and bad["n_boot"].notna().all() else \
        int(stats_params.n_boot)  # the resamples 07 actually drew
    reasons = []
    few = bad[bad["n_docs"].fillna(0).astype(int) < min_docs]
    if len(few):
        docs = sorted({int(n) for n in few["n_docs"].fillna(0)})
        span = f"{docs[0]}" if len(docs) == 1 else f"{docs[0]}-{docs[-1]}"
        reasons.append(f"{', '.join(map(str, few['contrast']))} rest on {span} document{'' if docs == [1] else 's'}, "
                       f"fewer than stats.min_docs = {min_docs}: with so few documents even the calibrated test "
                       "rejects a true null more often than alpha (the calibration table, docs/design.md)")
    if n_boot < significance.MIN_BOOT:
        reasons.append(f"stats.n_boot is {n_boot:,}, below the floor of {significance.MIN_BOOT:,} resamples (its "
                       f"smallest p is {significance.SMALLEST_P_RULE} = {significance.smallest_p(n_boot):.3g}; a "
                       "percentile CI needs about 1,000)")
    names = ", ".join(map(str, bad["contrast"]))
    return [f"Inference is not possible for {names}: " + "; ".join(reasons or ["see the notes of Table 1"])
            + ". Their \u0394 and dz are descriptive only: no CI, p-value or significance star is printed for them "
            "and none counts as significant. " + inference_thresholds(stats_params, n_boot)]


def placebo_warnings(marks: Mapping[str, str]) -> list[str]:
    """A warning when the placebo is not a placebo (:func:`chunkstudy.report.tables.placebo_marks`), naming the
    contrasts marked in the tables and figures."""
    if not marks:
        return []
    why = next(iter(marks.values())).split("; ")[0]
    return [f"{why}. Contrast{'s' if len(marks) > 1 else ''} {', '.join(marks)} compare{'' if len(marks) > 1 else 's'} "
            f"against chunks that partly carry their own real heading path, so {'they are' if len(marks) > 1 else 'it is'} "
            f"biased toward 0; marked {tables.PLACEBO_MARK} in the tables and figures."]


# ---------------------------------------------------------------------------------------------------------------
# Assembly
# ---------------------------------------------------------------------------------------------------------------

def _table(bundle: Bundle, name: str, fn, *args, **kwargs) -> None:
    """Build table ``name`` into the bundle; any exception of its builder stops the stage naming the table (a bug
    or an input that breaks its contract, never a note)."""
    try:
        bundle.tables[name] = fn(*args, **kwargs)
    except Exception as e:
        raise ReportError(f"08_figures: table {name!r} failed: {type(e).__name__}: {e}") from e


def build(params: Params, corpus: str, inputs: Mapping[str, Any],
          partner: Partner = Partner()) -> Bundle:
    """Every table and figure of one corpus's report from the gathered ``inputs`` (:func:`gather`); ``params`` is
    ``cfg.params()``; ``partner`` = :func:`partner_contrasts`. A table whose inputs are absent is left out with a
    note (:func:`gather` has refused a missing required input); a table builder that fails stops the stage
    (:class:`ReportError`, naming the table)."""
    b = Bundle(corpus=corpus, warnings=model_warnings(params), models=models_used(params, inputs.get("manifests")))
    got = {k: v for k, v in inputs.items() if isinstance(v, pd.DataFrame)}
    b.notes += [f"input {m} is missing (its stage has not run or does not write it): "
                f"{OPTIONAL_INPUTS.get(m.split('/')[-1].removesuffix('.json'), 'its table is left out')}"
                for m in inputs.get("missing", [])]
    marks = tables.placebo_marks(got.get("placebo_buckets"), params.stats.contrasts)
    b.warnings = placebo_warnings(marks) + inference_warnings(got.get("contrasts"), params.stats) + b.warnings
    _confirmatory(b, params, got, inputs, partner, marks)
    _exploratory(b, params, got, marks)
    summary = inputs.get("json", {}).get("04_chunk_embed/summary")
    _construction(b, params, got, inputs.get("json", {}), summary)
    _user_added(b, params, got, inputs, summary)
    curve_figure = _beyond(b, params, got, inputs)
    recipe_figure = _modes(b, params, got)
    _run_facts(b, params, got, inputs)
    b.figures = figures.all_figures({k: got.get(k) for k in INPUT_TABLES}, params, params.figures.example_doc)
    if "cost" in got and len(got["cost"]):
        b.figures["fig_cost"] = pareto.cost_front(got["cost"], params.primary_cell.metric, params.primary_cell.embedder)
    if curve_figure is not None:
        b.figures["fig_multiverse"] = curve_figure
    if recipe_figure is not None:
        b.figures["fig_recipe"] = recipe_figure
    if "manifests" in inputs:
        b.warnings += stage_warnings(inputs["manifests"])
        b.environment = environment_table(inputs["manifests"], inputs.get("environment"))
        b.packages = package_versions(inputs["manifests"], inputs.get("environment"))
    for key in ("params_file", "root"):  # where the report's paths are relative to
        if inputs.get(key):
            b.facts[key] = inputs[key]
    return b


def _confirmatory(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], inputs: Mapping[str, Any],
                  partner: Partner, marks: Mapping[str, str]) -> None:
    """Table 1 with its verdicts' sentences, and the replication table beside the partner corpus's contrasts."""
    if "contrasts" in got:
        _table(b, "table1", tables.table1, got["contrasts"], got.get("mixedlm"), marks, got.get("mixedlm_paired"),
               got.get("size_check"))
        b.facts["verdicts"] = verdict_sentences(params, got["contrasts"], inputs.get("manifests"))
    other, other_contrasts, note = partner
    if note:
        b.notes.append(note)
    if "contrasts" in got and other_contrasts is not None:
        _table(b, "replication", replication, {b.corpus: got["contrasts"], other: other_contrasts})


def _exploratory(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], marks: Mapping[str, str]) -> None:
    """The exploratory tables (Table 2, reranker lift, dose-response, section recall, per query type) and the
    power table, those whose inputs this run has."""
    primary = params.primary_cell
    emb, rr = primary.embedder, primary.reranker
    if "condition_means" in got:
        _table(b, "table2", tables.table2, got["condition_means"], emb, rr)
    if "reranker_lift" in got:
        _table(b, "reranker_lift", tables.reranker_lift, got["reranker_lift"], primary.metric, emb)
    if "dose_response" in got:
        _table(b, "dose_response", tables.dose_response, got["dose_response"])
    if "section_recall_summary" in got:
        _table(b, "section_recall", tables.section_recall_table, got["section_recall_summary"])
    if "per_type" in got:
        _table(b, "per_type", tables.per_type, got["per_type"], emb, rr, marks)
    if "power_needed" in got and "power" in got:
        _table(b, "power", tables.power, got["power_needed"], got["power"])


def _construction(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], js: Mapping[str, Any],
                  summary: Mapping[str, Any] | None) -> None:
    """How the data were built: Table 4 (with the corpus-size warnings of 04's summary) and the funnels of the
    corpus, the induction, the queries, the size matching and the placebo."""
    kind = params.corpus.kind
    b.warnings += saturation_warnings((summary or {}).get("n_chunks"), params.metrics)
    _table(b, "table4", tables.table4, params.chunking.conditions, summary,
           params.contexts.method, params.retrieve.route_sections)
    if "corpus_funnel" in got:
        _table(b, "funnel_corpus", tables.corpus_funnel, got["corpus_funnel"], kind)
    if "02_induce/induction_stats" in js:
        _table(b, "funnel_induction", tables.induction, js["02_induce/induction_stats"], kind,
               params.induce.method)
    if "query_funnel" in got:
        _table(b, "funnel_queries", tables.query_funnel, got["query_funnel"], kind)
    if summary is not None:
        _table(b, "funnel_size_matching", tables.size_matching, summary, kind)
    if "placebo_buckets" in got:
        _table(b, "funnel_placebo", tables.placebo, got["placebo_buckets"], params.chunking.placebo_method)


def _user_added(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], inputs: Mapping[str, Any],
                summary: Mapping[str, Any] | None) -> None:
    """The user's contrasts (with whether they were declared before the run), their power and the user's
    conditions."""
    if "user_contrasts" in got and len(got["user_contrasts"]):
        b.facts["user_declared"], b.facts["user_registration"] = user_registration(params, inputs.get("manifests"))
        _table(b, "user_contrasts", tables.user_contrasts, got["user_contrasts"],
               params.primary_cell.name, b.facts["user_registration"], got.get("size_check"))
        if "user_power" in got and len(got["user_power"]) and "user_power_needed" in got:
            _table(b, "user_power", lambda n, p: replace(
                tables.power(n, p), name="user_power",
                title="Power of your contrasts: documents needed (clustered bootstrap + Holm within them)"),
                got["user_power_needed"], got["user_power"])
    extra = (summary or {}).get("extra")
    if extra:
        _table(b, "user_conditions", tables.user_conditions, extra)


def _beyond(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], inputs: Mapping[str, Any]) -> Any:
    """The cost table, the specification curves and the drill-down; returns the curves' figure (None without a
    multiverse)."""
    if "cost" in got and len(got["cost"]):
        _table(b, "cost", tables.cost, got["cost"], params.primary_cell.metric)
    curve_figure = None
    if "multiverse_summary" in got and len(got["multiverse_summary"]):
        try:
            parts = curve.report_parts(got["multiverse_summary"], got.get("multiverse"), params,
                                       inputs.get("manifests"), got.get("multiverse_axes"))
            b.tables["multiverse"], b.curves, curve_figure = parts.table, parts.specifications, parts.figure
            if parts.axes is not None:
                b.tables["multiverse_axes"] = parts.axes
        except Exception as e:
            raise ReportError(f"08_figures: table 'multiverse' failed: {type(e).__name__}: {e}") from e
    if "drilldown" in got:
        try:
            b.tables["drilldown"], b.drilldown = drilldown.report_parts(got["drilldown"], params)
        except Exception as e:
            raise ReportError(f"08_figures: table 'drilldown' failed: {type(e).__name__}: {e}") from e
    return curve_figure


def _modes(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame]) -> Any:
    """The retrieval modes (a run with more than the dense one): the contrasts of the primary metric in each mode
    (the paper's and the user's), their per-query-type cuts by mode, and Anthropic's recipe; returns the recipe's
    figure (None without)."""
    if len(params.retrieve.modes) < 2:
        return None
    metric, strong, reranker = params.primary_cell
    retrievers = tables.mode_retrievers(params.retrievers, strong)
    if "contrasts" in got:
        user = got.get("user_contrasts")
        both = pd.concat([got["contrasts"], user], ignore_index=True) if user is not None and len(user) \
            else got["contrasts"]
        _table(b, "modes_contrasts", tables.modes_contrasts, both, metric, retrievers, reranker)
    if "per_type" in got:
        _table(b, "modes_per_type", tables.modes_per_type, got["per_type"], metric, retrievers, reranker)
    if "recipe" in got and len(got["recipe"]):
        _table(b, "recipe", tables.recipe, got["recipe"])
        return recipe.recipe_figure(got["recipe"])
    return None


def _run_facts(b: Bundle, params: Params, got: Mapping[str, pd.DataFrame], inputs: Mapping[str, Any]) -> None:
    """The facts the text quotes: BM25's gold-first share beside the paper's, the query and document counts."""
    bm25 = inputs.get("json", {}).get("03_queries/bm25")
    if isinstance(bm25, Mapping) and "gold_top1_share" in bm25:
        b.facts["bm25_gold_top1"] = bm25["gold_top1_share"]
        b.facts["bm25_paper"] = PAPER_BM25.get(params.corpus.kind)
    if "queries" in got:
        b.facts["n_queries"] = len(got["queries"])
        b.facts["n_query_docs"] = got["queries"]["doc_id"].nunique()
    if "documents" in got:
        b.facts["n_documents"] = len(got["documents"])


def user_registration(params: Params, manifests: Mapping[str, Mapping] | None) -> tuple[bool, str]:
    """Were the user's conditions and contrasts (``conditions.extra``, ``contrasts.extra``) declared before the
    run? True only when stage 01's manifest (written before any document, query or score existed) recorded the
    same declaration digest as the parameters this report reads (:func:`chunkstudy.manifests.write_manifest`'s
    ``user_declared``); anything added or changed since makes them post hoc. Returns ``(declared, sentence)``."""
    now = config.declaration_digest(params.conditions, params.contrasts)
    first = ((manifests or {}).get("01_corpus") or {}).get("user_declared") or {}
    if first.get("digest") == now:
        return True, ("Declared in the parameter file before the run (stage 01's manifest records the same "
                      "conditions.extra and contrasts.extra), so their list was fixed before any result existed; "
                      "they are still exploratory: outside the paper's design and its confirmatory family.")
    return False, ("Added by the user and not pre-registered: stage 01's manifest does not record this "
                   "declaration of conditions.extra / contrasts.extra, so they may have been chosen after seeing "
                   "results. Hypothesis-generating only.")


def verdict_sentences(params: Params, contrasts: pd.DataFrame,
                      manifests: Mapping[str, Mapping] | None) -> list[str]:
    """What the report's text says beside Holm's decision of each registered verdict 07's ``contrasts`` carry
    (:data:`chunkstudy.stats.verdicts.VERDICTS`): its sentence, then whether its declaration was made before the
    run, from what stage 01's manifest (written before any result existed) records of it
    (:func:`chunkstudy.stats.verdicts.recorded`,
    :meth:`chunkstudy.stats.verdict_protocols.VerdictRendering.registration`)."""
    recorded = verdicts.recorded((manifests or {}).get("01_corpus") or {})
    return [f"{v.sentence} {v.registration(params.stats, recorded[v.name])}" for v in verdicts.shown(contrasts)]


FIGURE_CAPTIONS = {
    "fig1_mechanisms": "Figure 1 — what each mechanism does to one document of this run",
    "fig_contrasts": "Pre-registered contrasts (primary cell solid; other cells exploratory)",
    "fig_dose_response": "Breadcrumb-depth dose-response (exploratory)",
    "fig_budget_coverage": "Token-budget coverage (exploratory)",
    "fig_section_recall": "Stage-1 section recall of the two-stage conditions (exploratory diagnostic)",
    "fig_per_type": "Contrasts by query type (exploratory, unadjusted)",
    "fig_reranker_lift": "Reranker lift per condition (exploratory)",
    "fig_power": "Power vs. number of documents per contrast, at this run's effect and at the paper's (planning)",
    "fig_cost": "Quality against cost (tokens read, LLM tokens), the Pareto front ringed (exploratory)",
    "fig_multiverse": "Each contrast's specification curve: Δ sorted with its 95% CI over the choices (exploratory)",
    "fig_recipe": "Anthropic's recipe: each step's reduction of the baseline's top-k failure, with its 95% CI "
                  "(exploratory)",
}


def _recorded_n_boot(b: Bundle) -> Any:
    t = b.tables.get("table1")
    return t.data["n_boot"].iat[0] if t is not None and "n_boot" in t.data and len(t.data) else None


#: The Markdown report's template (``report/templates``), beside :data:`chunkstudy.report.html.TEMPLATE`.
MD_TEMPLATE = "report.md.j2"

#: The exploratory tables of the report, each with its figure, in the report's order.
EXPLORATORY = (("table2", "fig_budget_coverage"), ("dose_response", "fig_dose_response"),
               ("section_recall", "fig_section_recall"), ("per_type", "fig_per_type"),
               ("reranker_lift", "fig_reranker_lift"))

#: The construction funnels of "How the data were built", in the report's order.
FUNNELS = ("funnel_corpus", "funnel_induction", "funnel_queries", "funnel_size_matching", "funnel_placebo")


def _lines(items) -> str:
    """Lines of the report as the template writes them: each followed by a newline, then a blank line."""
    return "".join(f"{x}\n" for x in [*items, ""])


def render(b: Bundle, params: Params, params_file: str = "", embed_figures: bool = False) -> str:
    """The report as Markdown (``figures/<corpus>/report.md``, from :data:`MD_TEMPLATE`): figures are linked by
    relative path (``<name>.png``), or with ``embed_figures`` put in as PNG data URIs at ``figures.dpi`` (what
    notebook 08 shows: a relative link would resolve against the notebook's folder, not ``figures/<corpus>/``);
    tables are inlined (their LaTeX lies in :func:`chunkstudy.artifacts.report_table`, ``tables/<name>.tex``).
    Paths under the project root are written relative to it."""
    images = ({n: html.data_uri(html.figure_png(f, params.figures.dpi)) for n, f in b.figures.items()}
              if embed_figures else {})
    params_file = b.facts.get("params_file") or params_file  # relative to the project root when known
    facts = [f"parameters `{params_file}`" if params_file else "",
             f"{tables.fmt_int(b.facts['n_documents'])} documents" if "n_documents" in b.facts else "",
             f"{tables.fmt_int(b.facts['n_queries'])} queries over {tables.fmt_int(b.facts['n_query_docs'])} "
             "documents" if "n_queries" in b.facts else ""]

    def table(name: str) -> str:
        t = b.tables.get(name)
        if t is None:
            return _lines([f"_{name}: not available in this run (see the notes at the end)._"])
        tex = artifacts.report_table(t.name, "tex")
        return _lines([f"### {tables.md_escape(t.title)}", "", t.markdown(), f"LaTeX: [`{tex}`]({tex})"])

    def figure(name: str) -> str:
        if name not in b.figures:
            return ""
        caption = FIGURE_CAPTIONS.get(name, name)
        return _lines([f"![{caption}]({images.get(name, f'{name}.png')})", "", f"*{caption}.*"])

    text = _md_environment().get_template(MD_TEMPLATE).render(
        b=b, st=params.stats, strong=params.embed.strong, facts="; ".join(f for f in facts if f),
        models=tables.markdown_table(b.models) if b.models is not None else "",
        thresholds=inference_thresholds(params.stats, _recorded_n_boot(b)), table=table, figure=figure,
        lines=lambda items: _lines(items), power_sentences=power_sentences, power_text=power_markdown(b),
        curve_heading=curve.HEADING, curve_links=curve.links([t.name.removeprefix("multiverse_") for t in b.curves]),
        replication_note=next((n for n in b.notes if n.startswith("replication")), "the other corpus has no results"),
        exploratory=EXPLORATORY, funnels=FUNNELS, user_mark=tables.USER_MARK, user_contrasts=bool(params.contrasts.extra),
        drilldown_heading=drilldown.HEADING, esc=tables.md_escape, pct=tables.fmt_pct, md_table=tables.markdown_table,
    ).removesuffix("\n")
    root = b.facts.get("root")
    if not root:
        return text
    prefix = root.rstrip("/") + "/"  # paths relative to the project root, as written and as escaped in tables
    return text.replace(prefix, "").replace(tables.md_escape(prefix), "")


def _md_environment() -> jinja2.Environment:
    """The Markdown template's environment: no escaping (Markdown, escaped where it is prose by ``esc``), an
    undefined name is an error, block tags take their line with them."""
    return jinja2.Environment(loader=jinja2.PackageLoader("chunkstudy.report", "templates"), autoescape=False,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def power_sentences(needed: pd.DataFrame) -> list[str]:
    """One sentence per contrast from :func:`chunkstudy.stats.power.needed_table` (the data of the ``power`` table), as
    a Markdown list: "**C2** (A3 − P) at the paper's effect (Wikipedia-FA, dz +0.09) needs about 130 documents
    for 80% power; this corpus has 10. At this run's effect (dz -0.14) it needs about 68." """
    def needs(r: pd.Series, goal: str = "") -> str:
        text = {"interpolated": f"about {tables.fmt_approx_n(r['n_docs_needed'])} documents{goal}",
                "at_or_below_smallest": f"at most {tables.fmt_int(r['n_docs_needed'])} documents{goal}",
                "above_largest": f"more than {tables.fmt_int(r['largest_simulated'])} documents{goal} (the largest "
                                 "size simulated)",
                "no_effect": f"no number of documents{goal} (the effect is zero)"}.get(
                    r["status"], f"an unknown number of documents{goal}")
        return text + (" (optimistic: at that size the test rejects a zero effect more often than alpha)"
                       if r["oversized"] else "")

    out = []
    for name, d in needed.groupby("contrast", sort=False):
        rows = d.set_index("scenario")
        first = d.iloc[0]
        head = f"**{name}** ({first['condition_a']} \u2212 {first['condition_b']})"
        corpus = f"this corpus has {tables.fmt_int(first['n_docs_observed'])}."
        pct = tables.fmt_pct(first["target_power"], 0)
        if "paper" in rows.index:
            r = rows.loc["paper"]
            source = tables.paper_source_label(r["effect_source"]).replace("paper (", "").rstrip(")")
            text = (f"{head}: the paper states no dz for {source}; {corpus}" if pd.isna(r["target_dz"]) else
                    f"{head} at the paper's effect ({source}, dz {tables.fmt_delta(r['target_dz'], 2)}) needs "
                    f"{needs(r, f' for {pct} power')}; {corpus}")
            if "observed" in rows.index:
                o = rows.loc["observed"]
                text += f" At this run's effect (dz {tables.fmt_delta(o['target_dz'], 2)}) it needs {needs(o)}."
        else:
            o = rows.loc["observed"]
            text = (f"{head} at this run's effect (dz {tables.fmt_delta(o['target_dz'], 2)}) needs "
                    f"{needs(o, f' for {pct} power')}; {corpus}")
        out.append(f"- {text}")
    return out


def power_markdown(b: Bundle) -> str:
    """The power analysis as Markdown: one sentence per contrast (:func:`power_sentences`) and the table, or a
    line saying it is not available."""
    t = b.tables.get("power")
    if t is None:
        return "_Not available: the power analysis of 07_stats has not run._"
    return "\n".join(power_sentences(t.data)) + "\n\n" + t.markdown()


def warnings_markdown(b: Bundle) -> str:
    """The model warnings as a Markdown list (or a line saying there are none)."""
    return "\n".join(f"- **WARNING:** {tables.md_escape(w)}" for w in b.warnings) or \
        "_no warnings: the run used the study's models_"


def table_markdown(b: Bundle, name: str) -> str:
    """One table of the bundle as Markdown, or a line saying it is not available in this run."""
    t = b.tables.get(name)
    return t.markdown() if t is not None else f"_{name}: not available in this run (see the report's notes)_"


def tables_markdown(b: Bundle, prefix: str = "") -> str:
    """The bundle's tables whose key starts with ``prefix``, each under a heading, as one Markdown string."""
    parts = [f"### {tables.md_escape(t.title)}\n\n{t.markdown()}" for k, t in b.tables.items() if k.startswith(prefix)]
    return "\n\n".join(parts) or f"_no {prefix or 'tables'} tables in this run_"


def write_all(cfg: Config, b: Bundle, params_file: str = "") -> pd.DataFrame:
    """Write every table (``tables/<name>.md`` and ``.tex``), every figure (``<name>.<fmt>``), ``report.md`` and
    ``report.html`` (:mod:`chunkstudy.report.html`: the same report, self-contained) under ``figures/<corpus>/``
    through :mod:`chunkstudy.artifacts`; returns the list of files written."""
    written = []
    for t in [*b.tables.values(), *b.curves]:
        written.append(("table", t.name, artifacts.write_text(cfg, artifacts.report_table(t.name, "md"),
                                                                f"# {tables.md_escape(t.title)}\n\n"
                                                                + t.markdown())))
        written.append(("table", t.name, artifacts.write_text(cfg, artifacts.report_table(t.name, "tex"), t.latex())))
    for name, fig in b.figures.items():
        written += [("figure", name, p) for p in artifacts.write_figure(cfg, name, fig)]
    markdown = render(b, cfg.params(), params_file)
    written.append(("report", "report", artifacts.write_text(cfg, "report.md", markdown)))
    written.append(("report", "report.html", artifacts.write_text(
        cfg, "report.html", html.render(b, markdown, cfg.params("figures").dpi))))
    return pd.DataFrame([(k, n, artifacts.project_relative(cfg, p)) for k, n, p in written],
                        columns=["kind", "name", "path"])
