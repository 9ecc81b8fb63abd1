"""The one retry policy of every model-server client: the LLM's :class:`~chunkstudy.llm.client.Client` and
:class:`~chunkstudy.llm.http.JsonPool` (the embedder's ``/embeddings``, the reranker's ``/rerank``) run each
request's attempts through :meth:`RetryPolicy.run`, on tenacity, so that no two clients retry, wait or give up by
different rules.

An attempt fails with an :class:`~chunkstudy.llm.base.LLMError` (the taxonomy of :mod:`chunkstudy.llm.base`, which
:func:`chunkstudy.llm.http.post_json` maps an HTTP answer onto). Then:

* **Retries.** Every ``LLMError`` but :class:`PermanentError` (the server judged the request: HTTP 4xx other than
  408/409/425/429) is retried, at most ``max_retries`` more attempts, after
  :func:`~chunkstudy.llm.http.backoff_s` seconds (``retry_backoff_s`` doubling per attempt, times a jitter when a
  random generator is given, at least the server's ``Retry-After`` up to ``retry_after_max_s``). Any other
  exception (a bug in a backend) propagates at once.
* **The circuit breaker** (:class:`~chunkstudy.llm.http.Breaker`) sees one outcome per attempt. The rule, the same
  for every client: a refused or broken connection (:class:`TransportError`) and an HTTP 5xx answer
  (:class:`ServerError`) count against it, and so does a reply timeout (:class:`ReplyTimeout`) **only when the
  server does not answer** ``GET {base_url}/models`` **either**: a server that still lists its models is busy, not
  down (a saturated server at concurrency 128), and its timeout, like every answer (a reply, any HTTP 4xx, a
  malformed or empty reply), resets the count. A client that cannot ask (no ``answers`` probe) counts its
  timeouts. This is the rule docs/models.md and :mod:`chunkstudy.llm` state and tests/test_llm_length.py tests for
  the LLM; :class:`~chunkstudy.llm.http.JsonPool` used to count every timeout. tests/test_llm_retry.py tests it
  for both clients.
* **A tripped breaker** ends the retries at once: the last error is raised, and the caller, seeing
  ``breaker.tripped``, raises :class:`~chunkstudy.llm.base.CircuitOpen` (the batch stops).

Waiting is the caller's ``sleep`` (the LLM client's wakes when its batch stops, and raises then); ``on_retry``
hears each error that is retried (the clients count retries and timeouts).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

import tenacity

from .. import procs
from .base import CircuitOpen, LLMError, PermanentError, ReplyTimeout, ServerError, TransportError

_T = TypeVar("_T")
#: seconds a :class:`ModelsAnswer` keeps its answer
ANSWER_TTL_S = 5.0


def backoff_s(attempt: int, retry_backoff_s: float, retry_after: float | None, retry_after_max_s: float,
              rng: Any = None) -> float:
    """The wait before retry ``attempt + 1``: ``retry_backoff_s * 2**attempt`` (times a jitter in [0.5, 1.5) from
    ``rng`` when given), at least the server's ``retry_after`` capped at ``retry_after_max_s``."""
    delay = retry_backoff_s * (2 ** attempt) * (rng.uniform(0.5, 1.5) if rng is not None else 1.0)
    if retry_after is not None:
        delay = max(delay, min(retry_after, retry_after_max_s))
    return delay


class Breaker:
    """``limit`` consecutive connection failures or HTTP 5xx answers (``record(False, ...)``) set ``tripped`` (an
    event the caller may share with its own stop) with :attr:`reason`; any other outcome resets the count. ``limit``
    0 never trips. ``key`` names the parameter in the reason."""

    def __init__(self, limit: int, where: str, key: str, tripped: threading.Event | None = None):
        self.limit, self.where, self.key = limit, where, key
        self.tripped = tripped if tripped is not None else threading.Event()
        self.reason = ""
        self.consecutive = 0
        self._lock = threading.Lock()

    def record(self, ok: bool, error: str = "") -> None:
        with self._lock:
            if ok:
                self.consecutive = 0
                return
            self.consecutive += 1
            if 0 < self.limit <= self.consecutive and not self.tripped.is_set():
                self.reason = (f"circuit breaker: {self.consecutive} consecutive connection failures or server "
                               f"errors from {self.where} (last: {error}); the server is down or unreachable "
                               f"({self.key} = {self.limit})")
                self.tripped.set()

    def reset(self) -> None:
        with self._lock:
            self.consecutive = 0
            self.reason = ""
            self.tripped.clear()


class ModelsAnswer:
    """Whether every replica answers ``GET {base_url}/models`` with a model list now: after a timeout, a busy
    server from a dead one (:meth:`RetryPolicy.breaker_failure`). The answer is kept ``ttl_s`` seconds and one
    probe runs at a time, so a wave of timed-out requests asks once."""

    def __init__(self, base_urls: Sequence[str], headers: Mapping[str, str], ttl_s: float):
        self.base_urls, self.headers, self.ttl_s = list(base_urls), dict(headers), ttl_s
        self._lock = threading.Lock()
        self._last: tuple[float, bool] | None = None  # (monotonic time, every replica answered)

    def __call__(self, timeout_s: float) -> bool:
        """The answer, probing with ``timeout_s`` seconds per replica when the kept one is older than ``ttl_s``."""
        with self._lock:
            if self._last is not None and time.monotonic() - self._last[0] < self.ttl_s:
                return self._last[1]
            ok = all(procs.served_models(u, self.headers, timeout_s)[0] is not None for u in self.base_urls)
            self._last = (time.monotonic(), ok)
            return ok


@dataclass
class RetryPolicy:
    """How one client retries (module docstring). ``answers()``: whether the server answers ``GET
    {base_url}/models`` now (a probe; None when the client has none); ``sleep(seconds)``: the wait before a retry;
    ``rng``: the jitter's generator (None: no jitter); ``on_retry(error)``: called before each retry's wait."""

    max_retries: int
    retry_backoff_s: float
    retry_after_max_s: float
    breaker: Breaker
    sleep: Callable[[float], Any]
    answers: Callable[[], bool] | None = None
    rng: Any = None
    on_retry: Callable[[LLMError], Any] | None = None

    def breaker_failure(self, error: BaseException) -> str | None:
        """Why ``error`` counts against the breaker (its description, for the breaker's reason), or None when it
        does not (the rule of the module docstring; a timeout asks :attr:`answers`)."""
        if isinstance(error, (TransportError, ServerError)):
            return f"{type(error).__name__}: {error}"
        if isinstance(error, ReplyTimeout) and not (self.answers is not None and self.answers()):
            return f"{type(error).__name__}: {error}; GET /models does not answer either"
        return None

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry ``attempt + 1`` (:func:`backoff_s` with this policy's values and jitter)."""
        return backoff_s(attempt, self.retry_backoff_s, retry_after, self.retry_after_max_s, self.rng)

    def attempt(self, fn: Callable[[], _T]) -> _T:
        """One attempt: ``fn()``, its outcome recorded by the breaker (an exception other than ``LLMError`` is
        no outcome: it propagates unrecorded); :class:`CircuitOpen` instead when the breaker has tripped (another
        request of the batch tripped it during this one's wait)."""
        if self.breaker.tripped.is_set():
            raise CircuitOpen(self.breaker.reason)
        try:
            out = fn()
        except LLMError as e:
            failure = self.breaker_failure(e)
            self.breaker.record(failure is None, failure or "")
            raise
        self.breaker.record(True)
        return out

    def run(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` attempted until it returns, raises an error that is not retried, the retries are spent or the
        breaker trips; the last attempt's exception is raised as it is (:class:`CircuitOpen` when the breaker had
        tripped before an attempt)."""
        def retried(state: tenacity.RetryCallState) -> bool:
            error = state.outcome.exception() if state.outcome is not None else None
            return (isinstance(error, LLMError) and not isinstance(error, PermanentError)
                    and not self.breaker.tripped.is_set())

        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return self.backoff(state.attempt_number - 1, getattr(error, "retry_after", None))

        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            if self.on_retry is not None and isinstance(error, LLMError):
                self.on_retry(error)

        return tenacity.Retrying(retry=retried, stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=wait,
                                 sleep=self.sleep, before_sleep=before_sleep, reraise=True)(self.attempt, fn)
