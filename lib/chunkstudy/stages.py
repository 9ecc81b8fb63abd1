"""The pipeline's stage graph, declared once: per stage, its notebook, the parameters it reads, the artifacts it
reads and the artifacts it writes, each table with its columns and their kinds (docs/design.md, "Data contracts").

Everything else derives from :data:`STAGES`: the runner's dependencies and skip keys (:mod:`chunkstudy.runner`:
a stage reruns when a parameter it reads or a file it reads changed), the parameter sections of each stage
(:data:`chunkstudy.config.STAGE_SECTIONS`), where each artifact lives and which stage writes it
(:mod:`chunkstudy.artifacts`), 08's input list (:mod:`chunkstudy.report`), and the one schema check
(:func:`check`) every module applies to the tables it is given. A test parses each notebook and compares its
``artifacts.read*``/``write*`` calls with this declaration.

A read may hold only under some parameters (``Read(..., when=...)``): 03 reads ``sections_induced`` only when the
BM25 diagnostic ranks an induced structure, so only then does a change of 02's outline rerun 03. The notebook
reads such an input with :func:`chunkstudy.artifacts.read_input`, which returns None when the read is off.

Column kinds (:data:`KINDS`, declared with :class:`Table` in :mod:`chunkstudy.schema`): ``int``, ``float`` (an
int column passes too), ``str``, ``bool``, ``list`` (a list, tuple or array per cell) and ``any``. A table may
carry more columns than it declares; a column with no non-null value passes any kind (an empty table has no values
to check). 04's side tables are declared by the prefix kinds that write them (:func:`chunkstudy.design.prefix_tables`)
and gathered here among its writes. Like :mod:`chunkstudy.design`, this module sits at the bottom of the import
floors (it imports only ``design``, ``params``, ``schema`` and ``errors``).

Edges that are no artifact of the store are declared too, so the runner special-cases no stage by name: 01's
source files (:class:`SourceFiles`), 04's user chunker code (:class:`UserCode`), 08's ``figures/`` folder
(:class:`Folder`), 08's read of the replication partner's contrasts (:class:`PartnerRead`), which stages run
models on a device a parameter names (:attr:`Stage.devices`: the runner checks for CUDA before the first stage),
and which models each stage loads (its :attr:`Stage.services`, :attr:`Stage.devices` and :attr:`Stage.models`:
the up-front check finds them in the model cache before the first stage).
The runner runs exactly these stages, from ``notebooks/<name>.py``: a notebook ``NN_*.py`` declared here is a
stage, any other is refused (:func:`chunkstudy.runner.discover`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from . import design
from .params import Params
from .errors import ChunkstudyError
from .schema import KINDS, A, B, F, I, L, S, Table  # noqa: F401,E741  (the column kinds and the table record)

ALL_PARAMS = "*"


class SchemaError(ChunkstudyError, ValueError):
    """A table lacks a declared column or holds a column of another kind (the message names the table, the
    column, where the table came from and the stage that writes it)."""


@dataclass(frozen=True)
class Json:
    """A small JSON file of facts ``data/<corpus>/<stage>/<name>.json``; ``manifest``: the runner also copies its
    content into the stage's manifest (under ``records``), for facts a reader of the manifest needs without
    opening the file (the precision each encoder ran in)."""

    name: str
    doc: str = ""
    manifest: bool = False


@dataclass(frozen=True)
class Vectors:
    """One float32 matrix per embedder, ``data/<corpus>/<stage>/<name>/<embedder>.npy`` (+ ``.ids.parquet``)."""

    name: str
    doc: str = ""


Artifact = Table | Json | Vectors


@dataclass(frozen=True)
class Read:
    """An artifact a stage reads; ``when`` (the validated parameters, :class:`chunkstudy.params.Params` -> bool)
    limits the read to some parameters, ``unless`` says in words when it is off. ``optional``: the stage does
    without the artifact when it is absent, and says what it leaves out (08's diagnostics); a read that is not
    optional and absent stops the stage before it computes anything, naming the artifact and its writer."""

    name: str
    when: Callable[[Params], bool] | None = None
    unless: str = ""
    optional: str = ""

    def active(self, params: Params | None) -> bool:
        return self.when is None or params is None or bool(self.when(params))


@dataclass(frozen=True)
class SourceFiles:
    """Files outside the data store that a stage reads: 01's corpus sources (archives, exports, lists, question
    files, under ``corpus.*``). The runner fingerprints them (path, size, sha256;
    :func:`chunkstudy.corpus.build.fingerprint_sources`) into the stage's key and its manifest, so a replaced file
    reruns the stage. ``recorded``: the stage's JSON output that records the fingerprints it took while it ran
    (a file downloaded during the run enters the key as the stage found it)."""

    doc: str = ""
    recorded: str | None = None


@dataclass(frozen=True)
class Folder:
    """An output folder outside the stage's data folder: ``<root>/<corpus>/`` under the project root (08's
    ``figures/<corpus>/``: figures, report and tables). The runner clears it with the stage's outputs (never
    outside ``<root>/``) and hashes its files into the manifest."""

    root: str
    doc: str = ""


@dataclass(frozen=True)
class PartnerRead:
    """An artifact a stage reads from the replication partner's run (the corpus of ``figures.replicate_with``,
    :func:`chunkstudy.artifacts.partner_config`): its writer's completion there enters the stage's key."""

    name: str
    doc: str = ""


@dataclass(frozen=True)
class UserCode:
    """Code of the user's own that a stage runs, named by a parameter: ``param`` (a dotted key the stage reads) maps
    names to records whose ``field`` names a function (``module:function`` or ``file.py:function``; a library
    adapter is no user code). The runner puts the digest of each such function's file, and of every module of the
    user's it imports, into the stage's key under ``key`` whenever ``param`` holds an entry
    (:func:`chunkstudy.runner.user_code_sources`), so an edit of that code reruns the stage as an edit of the
    package does (04: the chunkers of ``conditions.extra``)."""

    param: str
    field: str
    key: str
    doc: str = ""

    def entries(self, params: Params) -> Mapping[str, Any]:
        """``{name: record}`` that ``param`` holds under ``params`` (empty: the stage runs no code of the user's)."""
        value: Any = params
        for part in self.param.split("."):
            value = getattr(value, part)
        return value


#: The parameter sections whose models may run on a device they name (:attr:`Stage.devices`): the LLM's
#: ``llm.device`` (transformers backend), each embedder's and each reranker's ``device``
#: (:func:`chunkstudy.devices.cuda_keys`).
DEVICE_SECTIONS = ("llm", "embed", "retrieve")


@dataclass(frozen=True)
class Stage:
    """One notebook stage: ``params`` are the parameter sections (``"llm"``) or single keys (``"corpus.kind"``) it
    reads (:data:`ALL_PARAMS` for every section), ``reads``/``writes`` its artifacts; ``manifests``: it reads the
    manifests of every earlier stage too (08's environment table), so any rerun upstream reruns it;
    ``source_files``: the files outside the data store it reads (:class:`SourceFiles`); ``folders``: its output
    folders outside its data folder (:class:`Folder`); ``partner``: what it reads of the replication partner's run
    (:class:`PartnerRead`); ``services``: the model servers its calls may go to (:data:`SERVICES`: ``llm``,
    ``embed``, ``rerank``): the runner starts a ``serve: auto`` one when the stage first needs it and stops it once
    no later selected stage declares it (:mod:`chunkstudy.serving`); ``devices``: the sections whose models it runs
    on the device their parameters name (:data:`DEVICE_SECTIONS`): when one of them asks for CUDA, the runner checks
    for a device before the first selected stage starts, not hours later when this stage is reached; ``models``: the
    keys of the other models it loads in process (``chunking.tokenizer``, a key among those it reads); with those
    of its ``services`` and ``devices`` they are what the up-front check finds in the local model cache before the
    first selected stage (:mod:`chunkstudy.serving.check`); ``user_code``: code of the user's own it runs
    (:class:`UserCode`), whose edit reruns it. Only ``params`` enter the stage's parameter digest."""

    name: str
    params: tuple[str, ...]
    reads: tuple[Read, ...]
    writes: tuple[Artifact, ...]
    manifests: bool = False
    source_files: SourceFiles | None = None
    folders: tuple[Folder, ...] = ()
    partner: tuple[PartnerRead, ...] = ()
    services: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    user_code: UserCode | None = None

    def __post_init__(self):
        bad = [s for s in self.services if s not in SERVICES]
        if bad:
            raise ValueError(f"stage {self.name}: services {bad} are not among {list(SERVICES)}")
        bad = [s for s in self.devices if s not in DEVICE_SECTIONS]
        if bad:
            raise ValueError(f"stage {self.name}: devices {bad} are not among {list(DEVICE_SECTIONS)}")
        unread = [k for k in self.models if not self.reads_param(k)]
        if unread:
            raise ValueError(f"stage {self.name}: models {unread} are not among the parameters it reads "
                             f"{list(self.params)} (a change of the model would not rerun the stage)")
        code = self.user_code
        if code is not None and not self.reads_param(code.param):
            raise ValueError(f"stage {self.name}: its user code's parameter {code.param!r} is not among the "
                             f"parameters it reads {list(self.params)} (an edit of it would not rerun the stage)")

    def reads_param(self, key: str) -> bool:
        """Whether the dotted ``key`` is among the parameters the stage reads (its section, or the key itself)."""
        return any(p == ALL_PARAMS or key == p or key.startswith(p + ".") for p in self.params)

    @property
    def notebook(self) -> str:
        """The notebook's path relative to the project root."""
        return f"notebooks/{self.name}.py"


def _r(*names: str) -> tuple[Read, ...]:
    return tuple(Read(n) for n in names)


def _optional(name: str, what: str) -> Read:
    """A read the stage does without: ``what`` it leaves out when the artifact is absent."""
    return Read(name, optional=f"{what} is left out")


#: The model servers a stage may call (:attr:`Stage.services`): the LLM (``llm``), the embedders (``embed.embedders``
#: with ``backend: openai``) and the rerankers (``retrieve.rerankers`` with ``backend: openai``).
SERVICES = ("llm", "embed", "rerank")

_SECTIONS = {"doc_id": S, "section_id": S, "parent_id": S, "level": I, "title": S, "first_para": I, "last_para": I,
             "start": I, "end": I}
_CELL = {"corpus": S, "cell": S, "metric": S, "embedder": S, "reranker": S}
_PAIR = {"contrast": S, "condition_a": S, "condition_b": S}
_BOOT = {"mean_delta": F, "ci_low": F, "ci_high": F, "p": F}
#: A contrast family's rows (07's contrasts and user_contrasts)
#: 07's TOST columns (stats.sesoi declared; chunkstudy.stats.equivalence.TOST_COLUMNS)
_TOST = {"sesoi": F, "tost_ci_low": F, "tost_ci_high": F, "p_tost": F, "p_tost_holm": F, "p_met": F, "p_met_holm": F,
         "equivalence": S}
#: 07's calibrated test beside the percentile's and the test that decided
#: (chunkstudy.stats.verdict.calibrated.CAL_COLUMNS)
_CAL = {"p_cal": F, "p_holm_cal": F, "ci_low_cal": F, "ci_high_cal": F, "reject_holm_cal": B, "method_cal": S,
        "decision": S, "decided_by": S, "significant": B}
_CONTRAST = {**_CELL, **_PAIR, **_BOOT, "p_holm": F, "reject_holm": B, "dz": F, "n_queries": I, "n_docs": I,
             "mean_a": F, "mean_b": F, "confirmatory": B, "label": S, "n_boot": I, "seed": I, "inference": B, "note": S,
             **_CAL, **_TOST}
#: 07's cost table (:data:`chunkstudy.stats.cost.COST_COLUMNS`)
_COST = {"condition": S, "embedder": S, "quality": F, "embedding": S, "llm_calls": I, "llm_prompt_tokens": F,
         "llm_reply_tokens": F, "llm_seconds": F, "llm_tokens_counted": S, "llm_tokens": F, "n_chunks": I,
         "n_texts": I, "content_tokens": I, "prefix_tokens": I, "tokens_embedded": I, "prefix_share": F,
         "tokens_read": F, "n_vectors": I, "n_route_vectors": I, "dim": I, "index_bytes": I, "embed_seconds": F,
         "latency_ms_per_query": F, "latency_ms_min": F, "latency_ms_max": F, "pareto_tokens": B, "pareto_llm": B}
#: A contrast under one specification of the curve (07's multiverse): its choices, then the test's numbers
_SPEC = {"corpus": S, **_PAIR, "spec": I, "primary": B, "metric": S, "metric_axis": S, "k": S, "embedder": S,
         "reranker": S, "query_types": S, "seed": I, "spec_a": S, "spec_b": S, **_BOOT, "dz": F, "n_queries": I,
         "n_docs": I, "inference": B, "significant": B, "rank": I, "label": S, "note": S}
#: A contrast's specification curve in numbers (07's multiverse_summary)
_SHARES = {"share_same_sign": F, "share_sig_positive": F, "share_sig_negative": F}
_CURVE = {"corpus": S, **_PAIR, "n_declared": I, "n_specs": I, "n_analyses": I, "primary_delta": F,
          "median_delta": F, "n_zero": I, **_SHARES, "null_p": F, "stouffer_z": F, "stouffer_p": F, "n_boot": I,
          "seed": I, "n_docs": I, "inference": B, "label": S, "note": S}
#: A contrast's specification curve read by axis: one row per value of each axis that varies (07's multiverse_axes)
_CURVE_AXIS = {"corpus": S, **_PAIR, "axis": S, "level": S, "n_specs": I, "n_analyses": I, "median_delta": F,
               **_SHARES, "label": S}
#: Anthropic's recipe, a row per step (07's recipe: chunkstudy.stats.recipe)
_RECIPE = {"corpus": S, "step": S, "condition": S, "mode": S, "embedder": S, "reranker": S, "description": S,
           "k": I, "failure": F, "baseline_failure": F, "reduction": F, "ci_low": F, "ci_high": F, "p": F,
           "n_queries": I, "n_docs": I, "inference": B, "anthropic": F, "n_boot": I, "seed": I, "label": S, "note": S}
#: The documents each contrast needs (07's power_needed and user_power_needed)
_POWER_NEEDED = {"corpus": S, "scenario": S, "effect_source": S, **_PAIR, "target_dz": F,
                 "n_docs_needed": F, "status": S, "n_docs_observed": I, "power_at_observed": F,
                 "mc_se_at_observed": F, "null_rejection_at_needed": F, "oversized": B,
                 "largest_simulated": I, "design_effect": F, "icc": F, "target_power": F,
                 "alpha": F, "n_sims": F, "note": S}
#: A power curve's rows (07's power and user_power)
_POWER = {"corpus": S, "cell": S, "scenario": S, "effect_source": S, **_PAIR, "target_dz": F,
          "target_mean": F, "shift": F, "n_docs": I, "power": F, "mc_se": F, "null_rejection": F,
          "power_analytic_bonferroni": F, "n_docs_observed": I, "n_queries_observed": I,
          "queries_per_doc": F, "design_effect": F, "icc": F, "observed_dz": F, "n_sims": I,
          "n_boot": I, "alpha": F, "target_power": F, "require_sign": B, "seed": I, "note": S}


def _bm25_reads_induced(p: Params) -> bool:
    return design.condition(p.queries.bm25_condition).outline == "sections_induced"


def _contexts_in_run(p: Params) -> bool:
    return any(c.prefix_kind.contexts for c in p.run_conditions)


#: ``figures/<corpus>/``: 08's figures, report.md, report.html and tables/
FIGURES = Folder("figures", "figures, report.md, report.html, tables/")

#: The pipeline, in run order.
STAGES: tuple[Stage, ...] = (
    Stage("01_corpus", ("corpus", "queries.source"), (), (
        Table("documents", {"doc_id": S, "title": S, "text": S, "source": S},
              "one row per document; text = body paragraphs joined by the separator"),
        Table("paragraphs", {"doc_id": S, "para_idx": I, "start": I, "end": I},
              "one row per body paragraph, its offsets into documents.text as it was emitted"),
        Table("sections_gold", _SECTIONS, "the gold outline (tiles the paragraphs)"),
        Table("harvested", {"query_id": S, "doc_id": S, "qtype": S, "text": S, "spans": L},
              "questions with gold spans (QASPER, demo; empty for Wikipedia)"),
        Table("corpus_funnel", {"step": S, "count": I}),
        Json("stats", "the corpus funnel's numbers, sources read, warnings"),
    ), source_files=SourceFiles("the corpus's archives, exports, lists and questions", recorded="stats")),
    Stage("02_induce", ("llm", "induce", "contexts", "chunking", "conditions", "corpus.kind", "figures.example_doc"),
          _r("documents", "paragraphs", "sections_gold"), (
        Table("sections_induced", _SECTIONS, "the induced outline (tiles the paragraphs)"),
        Table("induction_log", {"doc_id": S, "status": S, "method": S, "rounds": I, "n_windows": I,
                                "n_sections": I, "fixed_by": S, "n_violations": I, "violations": S, "error": S,
                                "model": S, "parsed_first": I, "parsed_corrected": I, "parsed_never": I,
                                "cut_calls": I, "cut_failed": I, "reply_budget": I},
              required=('doc_id', 'status')),
        Table("contexts_a1", {"chunk_set": S, "doc_id": S, "start": I, "end": I, "context": S, "method": S,
                              "n_tokens": I, "truncated": B, "error": S, "doc_start": I, "doc_end": I,
                              "document_view": S},
              "one situating context per chunk of every chunk set a context condition names (A1: A0's windows)",
              required=('chunk_set', 'doc_id', 'start', 'end', 'context')),
        Json("induction_stats", "induction counts, span identity with gold (the paper's measure), A1 summary"),
    ), services=("llm",), devices=("llm",), models=("chunking.tokenizer",)),
    Stage("03_queries", ("llm", "queries", "chunking.tokenizer", "chunking.max_chunk_tokens", "chunking.min_chunk_tokens",
                         "chunking.sentence_splitter", "metrics.span_frac", "metrics.chunk_frac", "corpus.kind"), (
        *_r("documents", "paragraphs", "sections_gold"),
        Read("harvested", lambda p: p.queries.source == "harvested", "queries.source is generated"),
        Read("sections_induced", _bm25_reads_induced, "queries.bm25_condition is cut from the gold outline"),
    ), (
        Table("queries", {"query_id": S, "doc_id": S, "qtype": S, "text": S, "spans": L, "provenance": S,
                          "source": S, "rouge_l": F}, "every corpus, one schema",
              required=('query_id', 'doc_id', 'qtype', 'text', 'spans')),
        Table("query_funnel", {"stage": I, "step": S, "qtype": S, "count": I, "n_docs": I},
              required=('step',)),
        Json("funnel", "the query funnel's summary"),
        Json("bm25", "the BM25 diagnostic"),
    ), services=("llm",), devices=("llm",), models=("chunking.tokenizer",)),
    Stage("04_chunk_embed", ("chunking", "conditions", "embed.embedders", "embed.store", "embed.flush_every",
                            "embed.late_window", "embed.late_overlap", "embed.late_pooling", "corpus.kind"), (
        *_r("documents", "paragraphs", "sections_gold", "sections_induced"),
        Read("contexts_a1", _contexts_in_run, "no condition of the run has a context prefix (A1)"),
    ), (
        Table("chunks", {"condition": S, "doc_id": S, "chunk_id": S, "start": I, "end": I, "prefix": S,
                         "n_content_tokens": I, "n_prefix_tokens": I, "route_key": S, "section_id": S,
                         "prefix_depth": I, "shares_vectors_with": S, "text_row": I},
              "every condition's chunks; offsets are content-only",
              required=('condition', 'doc_id', 'chunk_id', 'start', 'end', 'prefix', 'n_content_tokens', 'n_prefix_tokens', 'route_key')),
        Table("size_matching", {"doc_id": S}, "per document: n_<set>, mean_<set> of each chunk set, A0's target"),
        *design.prefix_tables(),  # each prefix kind's side table and the tables derived from it
        Json("summary", "realised chunk counts and means, size matching, placebo residuals"),
        Json("embedding_report", "per embedder: model key, runtime, resolved dtype and its agreement check, "
             "texts embedded, seconds", manifest=True),
        Table("late_report", {"condition": S, "embedder": S, "model_key": S, "window": I, "overlap": I,
                              "n_chunks": I, "n_sequences": I, "sequence_tokens": I, "tokens_read": I,
                              "n_windows_run": I, "tokens_run": I, "seconds": F, "pooling": S},
              "per late-pooled condition and embedder: macro windows, tokens read, this run's encoding; empty "
              "without", required=("condition", "embedder", "tokens_read")),
        Vectors("embeddings", "one float32 row per distinct embedded text, then one per late-pooled chunk; "
                "chunks.text_row indexes it"),
    ), services=("embed",), devices=("embed",), models=("chunking.tokenizer",),
        user_code=UserCode("conditions.extra", "chunker", "chunker_sources",
                           "the chunker functions of your own conditions")),
    Stage("05_retrieve", ("retrieve", "embed", "conditions"), _r("documents", "queries", "chunks", "embeddings"), (
        Table("runs", {"embedder": S, "reranker": S, "condition": S, "query_id": S, "rank": I, "chunk_id": S,
                       "score": F, "doc_id": S, "source": S}, "ranked chunk lists, ranks 1-based",
              required=('embedder', 'reranker', 'condition', 'query_id', 'rank', 'chunk_id', 'score')),
        Table("section_recall", {"embedder": S, "reranker": S, "condition": S, "query_id": S, "doc_id": S,
                                 "section_recall": B, "n_gold_sections": I, "n_routed_gold": I,
                                 "first_gold_route_rank": I, "routed_doc_ids": L, "routed_route_keys": L,
                                 "routed_scores": L}, "two-stage conditions: per query",
              required=('embedder', 'reranker', 'condition', 'query_id', 'section_recall')),
        Table("section_recall_summary", {"embedder": S, "reranker": S, "condition": S, "section_recall": F,
                                         "n_queries": I, "n_defined": I, "se": F},
              "two-stage conditions: per cell"),
        Json("rerank_report", "per reranker: model id, runtime, resolved dtype and its agreement check, pairs "
             "scored", manifest=True),
        Json("retrieval_timing", "per embedder and condition: queries and the wall seconds of their search, "
             "measured in this run"),
        Json("lexical_report", "the BM25 indexes of the lexical modes: library, variant, k1, b, tokenizer, per "
             "condition its tokens, vocabulary, (term, chunk) pairs, bytes and build seconds; empty without",
             manifest=True),
    ), services=("embed", "rerank"), devices=("embed", "retrieve")),
    Stage("06_metrics", ("metrics", "embed.strong", "stats", "contrasts", "multiverse.metrics", "multiverse.cutoffs",
                         "retrieve.modes"),
          _r("documents", "queries", "chunks", "runs"), (
        Table("scores", {"corpus": S, "embedder": S, "reranker": S, "condition": S, "query_id": S, "metric": S,
                         "value": F, "doc_id": S, "qtype": S}, "long form: one row per cell x condition x query",
              required=('corpus', 'embedder', 'reranker', 'condition', 'query_id', 'metric', 'value')),
        Table("drilldown", {**_PAIR, "metric": S, "embedder": S, "reranker": S, "direction": S, "pick": I,
                            "query_id": S, "doc_id": S, "qtype": S, "question": S, "gold_spans": L, "gold_text": L,
                            "value_a": F, "value_b": F, "delta": F, "side": S, "condition": S, "rank": I,
                            "chunk_id": S, "chunk_doc_id": S, "start": I, "end": I, "score": F, "prefix": S,
                            "content": S, "n_prefix_tokens": I, "n_content_tokens": I, "same_doc": B,
                            "relevant": B, "gold_chars": I, "gold_ranges": L, "gain": F, "discounted_gain": F,
                            "dcg": F, "idcg": F, "ndcg": F}, "the primary cell's per-query drill-down",
              required=('contrast', 'direction', 'pick', 'query_id', 'side', 'condition', 'rank', 'chunk_id')),
        Table("multiverse_scores", {"corpus": S, "embedder": S, "reranker": S, "condition": S, "query_id": S,
                                    "metric": S, "value": F, "doc_id": S, "qtype": S},
              "as scores, for the specification curve's other cut-offs (multiverse.cutoffs); empty without",
              required=('corpus', 'embedder', 'reranker', 'condition', 'query_id', 'metric', 'value')),
        Table("recipe_scores", {"corpus": S, "embedder": S, "reranker": S, "condition": S, "query_id": S,
                                "metric": S, "value": F, "doc_id": S, "qtype": S},
              "as scores: recall@stats.recipe_k of the recipe's conditions in every cell (its failure is 1 - it); "
              "empty without retrieve.modes' bm25 and hybrid",
              required=('corpus', 'embedder', 'reranker', 'condition', 'query_id', 'metric', 'value')),
    )),
    Stage("07_stats", ("stats", "contrasts", "embed.strong", "corpus.kind", "multiverse", "metrics.cutoff"),
          _r("queries", "scores", "chunks", "embedding_report", "late_report", "retrieval_timing",
             "multiverse_scores", "recipe_scores", "lexical_report"), (
        Table("contrasts", _CONTRAST, "per cell and contrast of stats.contrasts: the paired mean delta, its "
              "document-clustered bootstrap CI and p, Holm within the cell's family, dz",
              required=('cell', 'contrast', 'mean_delta', 'ci_low', 'ci_high', 'p', 'p_holm', 'dz', 'n_queries', 'n_docs')),
        Table("user_contrasts", _CONTRAST,
              "the user's contrasts (contrasts.extra): an exploratory family, Holm within it; empty without",
              required=tuple(c for c in _CONTRAST if c not in _TOST)),
        Table("size_check", {"family": S, "cell": S, "rule": S, "decided": B, "measure": S, "contrast": S, "rate": F,
                             "mc_se": F, "alpha": F, "n_sims": I, "n_boot": I, "n_docs": I, "queries_per_doc": F,
                             "seed": I, "note": S},
              "each test's measured size (and the paired MixedLM's CI coverage) in null studies of this run's own "
              "documents and queries per document (stats.check_*)", required=("family", "rule", "measure", "rate")),
        Table("mixedlm", {"corpus": S, "cell": S, **_PAIR, "coef": F, "se": F, "z": F, "p": F, "p_holm": F,
                          "ci_low": F, "ci_high": F, "n_obs": I, "n_queries": I, "n_docs": I, "group_var": F,
                          "resid_var": F, "converged": B, "label": S, "note": S},
              required=('contrast',)),
        Table("mixedlm_paired", {"corpus": S, "cell": S, **_PAIR, "coef": F, "se": F, "z": F, "p": F, "p_holm": F,
                                 "ci_low": F, "ci_high": F, "n_queries": I, "n_docs": I, "doc_var": F,
                                 "resid_var": F, "converged": B, "label": S, "note": S},
              "the correctly specified secondary model: paired per-query differences with a random intercept per "
              "document, per contrast of the primary cell", required=('contrast',)),
        Table("dose_response", {**_CELL, "slope": F, "ci_low": F, "ci_high": F, "p": F, "n_queries": I,
                                "n_docs": I, "levels": S,
                                **{f"mean_d{d}": F for _, d in design.depth_ladder()},
                                "inference": B, "label": S, "note": S},
              required=('embedder',)),
        Table("per_type", {**_CELL, **_PAIR, "qtype": S, **_BOOT, "dz": F, "n_queries": I, "n_docs": I,
                           "mean_a": F, "mean_b": F, "inference": B, "label": S, "note": S},
              required=('contrast', 'qtype')),
        Table("condition_means", {**_CELL, "condition": S, "mean": F, "sd": F, "se_cluster": F, "n_queries": I,
                                  "n_docs": I, "primary_cell": B, "label": S},
              required=('condition', 'metric')),
        Table("reranker_lift", {"metric": S, "embedder": S, "reranker": S, "condition": S, "none": F,
                                "reranked": F, "lift": F}, "per condition: reranked minus not reranked means"),
        Table("power", _POWER, required=('scenario', 'contrast', 'target_dz', 'n_docs', 'power', 'mc_se', 'n_docs_observed')),
        Table("user_power", _POWER, "the user's contrasts (contrasts.extra), observed effects only; empty without"),
        Table("power_needed", _POWER_NEEDED, "documents each contrast needs"),
        Table("user_power_needed", _POWER_NEEDED, "documents each user contrast needs; empty without"),
        Table("cost", _COST, "per condition and embedder: LLM work, tokens embedded and read, index size, measured "
              "seconds, the Pareto fronts (docs/beyond.md, 'Cost')", required=("condition", "embedder", "quality")),
        Table("multiverse", _SPEC, "each contrast under every specification of multiverse (exploratory); empty "
              "without", required=("contrast", "spec", "primary", "mean_delta")),
        Table("multiverse_summary", _CURVE, "per contrast: its specification curve in numbers and the null tests of "
              "its median and Stouffer's Z; empty without", required=("contrast", "n_specs", "share_same_sign")),
        Table("multiverse_axes", _CURVE_AXIS, "per contrast and value of each axis that varies: its specifications' "
              "shares (the curve read by axis); empty without", required=("contrast", "axis", "level", "n_specs")),
        Table("recipe", _RECIPE, "Anthropic's recipe: each step's top-k failure and its relative reduction from the "
              "baseline's, with a document-clustered CI (exploratory); empty without retrieve.modes' bm25 and "
              "hybrid", required=("step", "failure", "reduction")),
    )),
    Stage("08_figures", (ALL_PARAMS,), (
        Read("documents"), _optional("corpus_funnel", "the corpus funnel"),
        _optional("induction_stats", "the induction funnel"), Read("queries"),
        _optional("query_funnel", "the query funnel"), _optional("bm25", "the BM25 sentence"), Read("chunks"),
        Read("summary"), _optional("placebo_buckets", "the placebo table and its marks"),
        _optional("section_recall", "Figure 1's routing example and the section-recall figure"),
        _optional("section_recall_summary", "the section-recall table"), _optional("drilldown", "the drill-down"),
        Read("contrasts"), Read("mixedlm"), _optional("mixedlm_paired", "Table 1's note on the paired MixedLM"),
        _optional("size_check", "Table 1's note on the measured size at this run's structure"),
        _optional("dose_response", "the dose-response table and figure"),
        _optional("per_type", "the per-type table and figure"), Read("condition_means"),
        _optional("reranker_lift", "the reranker-lift table"), Read("power"), Read("power_needed"),
        Read("user_contrasts"), Read("user_power"), Read("user_power_needed"), Read("cost"),
        _optional("multiverse", "the specification curves"),
        _optional("multiverse_summary", "the specification curves' table"),
        _optional("multiverse_axes", "the specification curves read by axis"),
        _optional("recipe", "the recipe's table and figure")),
        (), manifests=True, folders=(FIGURES,),
        partner=(PartnerRead("contrasts", "the replication table"),)),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
_STAGE = {s.name: s for s in STAGES}
#: artifact name -> (artifact, the stage that writes it)
ARTIFACTS: dict[str, tuple[Artifact, str]] = {a.name: (a, s.name) for s in STAGES for a in s.writes}

#: The tables the study's data model rests on, in run order: what each stage hands on to the next, from the
#: documents to 07's contrasts. docs/design.md's "Data contracts" shows each with its contract, generated from
#: here (:func:`chunkstudy.designdoc.data_contracts`); every other table is in docs/running.md's pipeline table.
DATA_CONTRACTS: tuple[str, ...] = ("documents", "paragraphs", "sections_gold", "sections_induced", "queries",
                                   "chunks", "runs", "scores", "contrasts")
_not_tables = [n for n in DATA_CONTRACTS if not isinstance(ARTIFACTS.get(n, (None,))[0], Table)]
if _not_tables:
    raise ValueError(f"DATA_CONTRACTS names {_not_tables}, which no stage declares as a table")


def stage(name: str) -> Stage:
    return design.lookup(_STAGE, name, "stage", KeyError)


def artifact(name: str) -> Artifact:
    return design.lookup(ARTIFACTS, name, "artifact", KeyError)[0]


def writer(name: str) -> str:
    """The stage that writes artifact ``name``."""
    artifact(name)
    return ARTIFACTS[name][1]


def tables() -> dict[str, Table]:
    return {n: a for n, (a, _) in ARTIFACTS.items() if isinstance(a, Table)}


def table(name: str) -> Table:
    """The declared table ``name`` (KeyError for an artifact that is not a table)."""
    a = artifact(name)
    if not isinstance(a, Table):
        raise KeyError(f"{name} is a {type(a).__name__.lower()}, not a table")
    return a


def columns(name: str) -> list[str]:
    """The declared columns of table ``name``, in order."""
    return list(table(name).columns)


def reads(stage_name: str, params: Params | None = None) -> tuple[str, ...]:
    """Artifacts ``stage_name`` reads; with ``params`` (``cfg.params()``), only those it reads under them."""
    return tuple(r.name for r in stage(stage_name).reads if r.active(params))


def optional_reads(stage_name: str) -> dict[str, str]:
    """``{artifact: what is left out without it}`` of the reads ``stage_name`` does without (:attr:`Read.optional`)."""
    return {r.name: r.optional for r in stage(stage_name).reads if r.optional}


def read_spec(stage_name: str, name: str) -> Read:
    found = [r for r in stage(stage_name).reads if r.name == name]
    if not found:
        raise KeyError(f"stage {stage_name} does not declare a read of {name!r}; it reads "
                       f"{list(reads(stage_name))} (chunkstudy.stages.STAGES)")
    return found[0]


def upstream(stage_name: str, params: Params | None = None) -> tuple[str, ...]:
    """The stages whose outputs ``stage_name`` reads (under ``params`` when given), in run order."""
    used = {writer(n) for n in reads(stage_name, params)}
    if stage(stage_name).manifests:
        used |= set(STAGE_NAMES[:STAGE_NAMES.index(stage_name)])
    return tuple(s for s in STAGE_NAMES if s in used)


def needs(stage_name: str, params: Params | None = None) -> tuple[str, ...]:
    """Every stage ``stage_name`` depends on, directly or through others (:func:`upstream`, transitively), in run
    order: what must have completed before it can run."""
    found: set[str] = set()
    todo = [stage_name]
    while todo:
        new = set(upstream(todo.pop(), params)) - found
        found |= new
        todo.extend(new)
    return tuple(s for s in STAGE_NAMES if s in found)


# ---------------------------------------------------------------------------------------------------------------
# The one schema check
# ---------------------------------------------------------------------------------------------------------------

def _first(col) -> Any:
    nn = col.dropna()
    return nn.iloc[0] if len(nn) else None


def _kind_ok(col, kind: str) -> bool:
    from pandas.api import types as t

    if kind == "any":
        return True
    dtype = col.dtype
    if t.is_bool_dtype(dtype):
        return kind == "bool"
    if t.is_integer_dtype(dtype):
        return kind in ("int", "float")
    if t.is_float_dtype(dtype):
        return kind == "float" or not col.notna().any()
    if t.is_string_dtype(dtype) or t.is_object_dtype(dtype):
        v = _first(col)
        if v is None:
            return True
        if kind == "str":
            return isinstance(v, str)
        if kind == "list":
            return isinstance(v, (list, tuple)) or type(v).__name__ == "ndarray"
        if kind == "bool":
            return isinstance(v, bool) or type(v).__name__ == "bool_"
        if isinstance(v, bool) or type(v).__name__ == "bool_":
            return False
        if kind == "int":
            return isinstance(v, int) or type(v).__module__ == "numpy" and "int" in type(v).__name__
        if kind == "float":
            return isinstance(v, (int, float)) or type(v).__module__ == "numpy" and any(
                t in type(v).__name__ for t in ("int", "float"))
    return False


def _what(col) -> str:
    v = _first(col)
    return str(col.dtype) + (f" ({type(v).__name__} values)" if v is not None and str(col.dtype) == "object" else "")


def check(df, table: str, columns: Sequence[str] | None = None, where: str = "",
          error: type[Exception] = SchemaError) -> None:
    """THE schema check: ``df`` must hold the contract columns of ``table`` (:attr:`Table.contract`; ``columns``
    of its declared columns instead, when given), and every declared column it holds must be of its declared
    kind. Raises ``error`` (default :class:`SchemaError`) naming the table, ``where`` it came
    from (a file, a function), the columns and the stage that writes the table."""
    spec = artifact(table)
    if not isinstance(spec, Table):
        raise KeyError(f"{table} is not a table")
    names = list(spec.contract) if columns is None else list(columns)
    unknown = [c for c in names if c not in spec.columns]
    if unknown:
        raise KeyError(f"{table}: {unknown} are not declared columns; declared: {list(spec.columns)}")
    at = f" ({where})" if where else ""
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise error(f"{table}{at}: missing columns {missing}; has {list(df.columns)}; written by {writer(table)}")
    present = [c for c in spec.columns if c in df.columns and (columns is None or c in names)]
    bad = [(c, spec.columns[c], _what(df[c])) for c in present if not _kind_ok(df[c], spec.columns[c])]
    if bad:
        c, kind, got = bad[0]
        raise error(f"{table}{at}: column {c!r} holds {got}, expected {kind}"
                    + (f" (and {len(bad) - 1} more: {[b[0] for b in bad[1:]]})" if len(bad) > 1 else "")
                    + f"; written by {writer(table)}")
