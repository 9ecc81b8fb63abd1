"""The records of a model call and the errors a call can end in (:mod:`chunkstudy.llm`): :class:`Request`,
:class:`Completion`, :class:`Response`, :class:`Call` and its cache key, the :class:`LLMError` family (a failed
call) and the :class:`StageError` family (the stage must stop)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import ChunkstudyError

PREFLIGHT_TIMEOUT_S = 10.0

#: vLLM counters (Prometheus; exposed with a ``_total`` suffix) read by ``llm.server_metrics``; names as of the
#: vLLM pinned in constraints/serve.txt (vllm/v1/metrics/loggers.py): tokens looked up in / found in the prefix
#: cache, and finished requests.
VLLM_COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:request_success")


class LLMError(ChunkstudyError, RuntimeError):
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


class StageError(ChunkstudyError, RuntimeError):
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
    say), and the tokens the model read and wrote for it (``usage``: ``{"prompt_tokens": n, "completion_tokens":
    m}``, the server's own count; ``None`` when the backend does not report one). A backend may return a plain
    ``str`` instead: a reply whose finish reason and usage are unknown."""

    text: str | None
    finish_reason: str | None = None
    usage: dict | None = None


@dataclass(frozen=True)
class Response:
    """A call's outcome. ``error`` is ``None`` on success; ``seconds`` is the wall time of the producing call
    (as recorded in the cache for a cached reply); ``cached`` says whether this run reused a stored reply.
    ``finish_reason`` is the backend's for the reply returned (``None``: not reported); ``cuts`` counts the replies
    of this call that stopped at their ``max_tokens`` before it (each asked again with a larger budget; with an
    ``error`` of :class:`LengthCut` the last of them was still cut); ``max_tokens_used`` is the budget of the
    reply returned (``None`` for a failed call). ``usage``: the backend's token counts summed over every reply the
    call got, its cut ones included (``prompt_tokens``, ``completion_tokens``, ``replies``; ``None`` when a reply
    came without one); ``attempt_seconds``: wall seconds of all its attempts (cut and failed ones included, the
    waits between them not)."""

    text: str
    cached: bool
    error: str | None
    seconds: float
    model: str
    finish_reason: str | None = None
    cuts: int = 0
    max_tokens_used: int | None = None
    usage: dict | None = None
    attempt_seconds: float | None = None


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
