"""Every generative model call of the pipeline: one client, several backends, one persistent cache.

The study ran induction, A1 contexts and query generation with Gemma via vLLM under fixed seeds with on-disk
caching (paper, Section 4). This package is the single door to a model:

* :class:`Request` — chat messages plus optional JSON schema and sampling overrides (``None`` = from params).
* :class:`Response` — the text, whether it came from the cache, an error (``None`` when the call succeeded),
  the wall seconds of the call that produced it, and the model name.
* :func:`make_client` — a :class:`Client` over a backend chosen by ``llm.backend``:

  ``openai``        any OpenAI-compatible HTTP server (vLLM ``serve``, llama.cpp server, Ollama, SGLang, a load
                    balancer in front of several of them): ``base_url``, ``model``, API key read from the
                    environment variable named by ``llm.api_key_env`` (never logged, never cached); JSON-schema
                    ``response_format``. The pipeline knows the server only by this URL.
  ``vllm``          ``vllm.LLM`` in-process, imported only when selected; structured JSON output and a seed;
                    ``llm.vllm_engine`` holds further engine arguments (``gpu_memory_utilization``, ...).
  ``transformers``  a local model folder, or a GGUF file in it (``llm.gguf_file``), on CPU or GPU. A JSON schema
                    cannot be enforced here: the caller's prompt states it and the caller verifies the reply.
  ``scripted``      tests: :class:`ScriptedBackend` over a function ``Request -> str`` or a list of replies.
  ``none``          raises :class:`LLMUnavailable` when called (offline runs use non-LLM baselines).

Cache. Every successful call is appended, as soon as it completes, to ``calls.jsonl`` in the cache folder: one
JSON record per line holding the cache key, backend, model, prompt hash, sampling parameters, the reply and the
call's wall seconds. The key is the SHA-256 of (backend, model, messages, JSON schema, temperature, top_p,
max_tokens, seed); the ``tag`` is a label only. A run killed midway leaves every finished call on disk, so a
rerun redoes only the unfinished ones. On open the cache checks itself (:class:`CallCache`): a torn last line (a
write cut by a kill) is dropped and the file truncated to its last whole line, so the next record starts on a
line of its own; a damaged line elsewhere is reported (a warning naming the file and line numbers, and
``describe(client)["cache"]``), never silently dropped, and a whole record found inside it is recovered. Failed
calls are not cached: a rerun retries them. :meth:`Client.export_cache` / :meth:`Client.import_cache` move
records between machines, so a run can be replayed exactly where the model is absent.

Failure policy: a failed call is a *transport or model error* (:class:`LLMError`), nothing else. A
``TypeError`` or any other exception a backend raises is a bug: it propagates and stops the stage instead of
becoming a failed call and so a fallback outline.

* Retries: ``llm.max_retries`` per call, with exponential backoff from ``retry_backoff_s`` (doubling) times a
  random jitter in [0.5, 1.5), at least the server's ``Retry-After`` (up to ``retry_after_max_s``). The jitter
  comes from an unseeded generator on purpose: it moves *when* a retry is sent, never *what* is asked or
  cached (replies are keyed by request and seed), so results stay deterministic.
* :class:`PermanentError` (HTTP 4xx other than 408/429, a malformed request) is not retried.
* An empty or ``None`` reply is an error (:class:`EmptyReply`, retried), never a cached success.
* Pre-flight (``llm.preflight``): before the first call that is not in the cache, the client asks the server
  which models it serves (``GET {base_url}/models``) and raises :class:`PreflightError` within seconds, naming
  the URL and the models served, when it does not answer or does not serve ``llm.model``. A run replayed from
  the cache never needs the server.
* Timeouts (:class:`ReplyTimeout`): a request the server accepted but did not answer within ``llm.timeout_s`` is
  retried with the backoff. It says the server is busy, not down, when the server still answers ``GET
  {base_url}/models`` (asked once, the answer kept a few seconds for the other timed-out calls): then it does not
  count towards the breaker. A timeout from a server that does not answer that either counts as a connection
  failure.
* Circuit breaker (``llm.breaker_failures``): that many consecutive refused or broken connections, or HTTP 5xx
  answers, stop the batch with :class:`CircuitOpen` instead of spending the backoff on every remaining call. A
  reply of any other kind (a success, a 4xx, a 408/429, a busy timeout) resets the count.
* Cut replies (:class:`LengthCut`): a reply that stopped at its ``max_tokens`` (finish reason ``length``; the
  ``openai`` backend reads ``choices[0].finish_reason``, ``vllm`` ``outputs[0].finish_reason``, ``transformers``
  compares the generated length with ``max_new_tokens`` and looks for the end-of-sequence token) is never cached
  as a success. It is asked again at once with twice the budget, at most ``llm.length_retries`` times and never
  beyond what the context leaves (:meth:`Client.reply_room`: ``llm.context_tokens`` minus the prompt's tokens,
  estimated conservatively by :func:`prompt_tokens_upper`). When it is still cut, or no larger budget fits, the
  call fails (``LengthCut``): counted in ``failed`` like any failed call and subject to ``llm.max_error_share``.
  The reply that finished is cached under the request as asked (its key keeps the original ``max_tokens``), with
  the budget it needed (``max_tokens_used``) and how many cut replies came before it (``cuts``);
  :class:`Response` carries both, so a stage's statistics are the same when replayed from the cache. Backends
  that report no finish reason (a scripted test backend returning a plain string) are taken as finished.
* What a call cost (07's cost table, :mod:`chunkstudy.stats.cost`): the record keeps the tokens the backend
  reported for it (``usage``: ``prompt_tokens`` and ``completion_tokens`` summed over every reply the call got,
  its cut ones included, and their count ``replies``; the ``openai`` backend reads the server's ``usage``,
  ``vllm`` the token ids, ``transformers`` the lengths it generated), the prompt's characters (``prompt_chars``:
  the estimate where a backend reports no usage; added to a record of an older client when it is read from the
  cache) and the wall seconds of all its attempts (``attempt_seconds``; ``seconds`` is the producing one's).
* Error share (``llm.max_error_share``): after each batch, when the failed share of the calls this client made
  exceeds it, :class:`ErrorShareExceeded` stops the stage, so the runner writes no manifest; every success is
  already cached, so a plain rerun retries only the failed calls.
* Below those limits a call that still fails becomes ``Response(error=...)``: a batch never crashes on one bad
  call, and the stage records it (e.g. a failed induction counted as such).

Throughput. Misses go to the backend ``llm.concurrency`` at a time, dispatched in request order. Requests whose
prompts share their first ``llm.prefix_group_chars`` characters (the A1 prompts of one document) form a group:
its first request is sent alone, the others as soon as it finished, so a server's prefix cache (vLLM automatic
prefix caching) holds the shared document when they arrive instead of every request computing it at once. This
moves timing only, never replies. ``llm.server_metrics`` reads the server's Prometheus ``/metrics`` around each
batch and records the prefix-cache hit rate per batch (:func:`describe`). A progress bar (tqdm) shows calls done,
rate and ETA for each batch.

Replicas. ``llm.base_url`` may list several servers of the same model: calls go to the one with the fewest in
flight, ``llm.concurrency`` at most on each (:class:`~chunkstudy.llm.http.Replicas`); replies are keyed by request
and seed, never by server, so results do not depend on the replica count.

Layout: :mod:`.base` (the records of a call, its cache key, the errors), :mod:`.retry` (the one retry policy of
every server client: backoff, the breaker and what counts against it), :mod:`.http` (the HTTP machinery the LLM,
embedding and reranker server clients share: replicas, the error taxonomy of an answer, a pool of JSON requests,
the runner's broker), :mod:`.backends` (one per ``llm.backend``), :mod:`.cache`
(``calls.jsonl``) and :mod:`.client` (the client and its policy). Every public
name is re-exported here (``chunkstudy.llm.make_client``, ``chunkstudy.llm.ScriptedBackend`` and the like).
"""

from __future__ import annotations

from .base import (
    PREFLIGHT_TIMEOUT_S, VLLM_COUNTERS, LLMError, PermanentError, LLMUnavailable, TransportError, EmptyReply,
    ServerError, ReplyTimeout, LengthCut, StageError, PreflightError, CircuitOpen, ErrorShareExceeded, Request,
    Completion, Response, Call, prompt_hash, cache_key,
)
from . import http, retry
from .retry import (
    ANSWER_TTL_S, Breaker, ModelsAnswer, RetryPolicy, backoff_s,
)
from .http import (
    BROKER_ENV, RETRY_STATUS, WAIT_NOTICE_S, GaveUp, JsonPool, Replicas, auth_headers, ensure_served, error_for,
    parse_retry_after, permutation_problem, post_json, urls,
)
from .backends import (
    Backend, NoBackend, ScriptedBackend, prometheus_counters, OpenAIBackend, PROGRAMMING_ERRORS,
    check_engine_args, VLLMBackend, TransformersBackend, generation_finish_reason, make_backend, server_usage,
)
from .cache import (
    CACHE_FILE, CallCache,
)
from .client import (
    prefix_group, PROMPT_CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, prompt_tokens_upper, prompt_chars, Client,
    make_client, describe, IDENTITY_SUFFIX,
)

__all__ = [
    "IDENTITY_SUFFIX",
    "PREFLIGHT_TIMEOUT_S", "VLLM_COUNTERS", "LLMError", "PermanentError", "LLMUnavailable", "TransportError",
    "EmptyReply", "ServerError", "ReplyTimeout", "LengthCut", "StageError", "PreflightError", "CircuitOpen",
    "ErrorShareExceeded", "Request", "Completion", "Response", "Call", "prompt_hash", "cache_key", "Backend",
    "NoBackend", "ScriptedBackend", "parse_retry_after", "prometheus_counters", "OpenAIBackend",
    "PROGRAMMING_ERRORS", "check_engine_args", "VLLMBackend", "TransformersBackend", "generation_finish_reason",
    "make_backend", "server_usage", "CACHE_FILE", "CallCache", "prefix_group", "PROMPT_CHARS_PER_TOKEN", "MESSAGE_OVERHEAD_TOKENS",
    "prompt_tokens_upper", "prompt_chars", "Client", "make_client", "describe", "http", "BROKER_ENV", "Breaker", "JsonPool",
    "Replicas", "ensure_served", "RETRY_STATUS", "GaveUp", "auth_headers", "backoff_s", "error_for", "post_json",
    "permutation_problem", "urls", "WAIT_NOTICE_S", "retry", "ANSWER_TTL_S", "ModelsAnswer", "RetryPolicy",
]
