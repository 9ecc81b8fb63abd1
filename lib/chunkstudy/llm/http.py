"""The HTTP machinery every model-server client shares: the LLM's chat completions (:class:`OpenAIBackend` and
:class:`~chunkstudy.llm.client.Client`), the embedder's ``/embeddings`` and the reranker's ``/rerank``.

* :class:`Replicas` — one or several ``base_url`` values of the same model (replicas on several GPUs or machines),
  each with at most ``per_replica`` requests in flight; a request goes to the replica with the fewest in flight.
  Which replica answers never changes what is asked; what it answers is the server's: an embedder's or a
  reranker's server that the runner starts computes one sequence per forward pass, so its vector or score does not
  depend on the replica or on the requests beside it (docs/servers.md, "Replicas cannot change a result").
* :func:`post_json` — one ``POST`` mapped onto the failure taxonomy of :mod:`chunkstudy.llm.base`: a refused or
  broken connection is :class:`TransportError`, no reply in time :class:`ReplyTimeout`, HTTP 5xx
  :class:`ServerError`, HTTP 408/409/425/429 a retryable :class:`LLMError` (with the server's ``Retry-After``),
  any other status :class:`PermanentError`.
* :class:`JsonPool` — a batch of JSON requests (embedding batches, one query's rerank candidates), in flight per
  replica, each retried by the one policy of :mod:`chunkstudy.llm.retry` (backoff, the circuit breaker and its
  rule for timeouts); each reply is handed on as it completes, so a caller caches it then.
* :func:`ensure_served` — ask the runner (``./run_all.sh``) to start the servers of ``serve: auto`` roles when a
  stage first needs a model call its caches do not hold (:mod:`chunkstudy.serving`); a no-op outside a run.
"""

from __future__ import annotations

import email.utils
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from .base import (PREFLIGHT_TIMEOUT_S, CircuitOpen, LLMError, PermanentError, ReplyTimeout, ServerError,
                   TransportError)
from .retry import ANSWER_TTL_S, Breaker, ModelsAnswer, RetryPolicy

#: HTTP statuses that are retried (with the backoff, honouring Retry-After); 5xx ones also count for the breaker.
RETRY_STATUS = (408, 409, 425, 429)
#: the environment variable naming the runner's service broker (``address key``), set for the stage's kernel
BROKER_ENV = "CHUNKSTUDY_SERVICES"


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


def urls(value: str | Sequence[str] | None) -> list[str]:
    """A ``base_url`` parameter (one URL or a list of replicas) as a list, trailing slashes dropped."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [str(u).rstrip("/") for u in items if str(u).strip()]


def permutation_problem(indices: Sequence[Any], n: int) -> str | None:
    """What is wrong with the ``index`` fields of a reply to ``n`` inputs (an embedding or rerank reply numbers each
    of its items by the input it belongs to): None when they are a permutation of ``0..n-1``, else the true cause,
    e.g. ``"0 is repeated (2 times) and 6 is missing"``. Sorting by a repeated index would hand one input's
    vector to another. The caller says "index ..." before it."""
    if any(isinstance(i, bool) or not isinstance(i, int) for i in indices):
        bad = next(i for i in indices if isinstance(i, bool) or not isinstance(i, int))
        return f"{bad!r} is not an integer"
    counts: dict[int, int] = {}
    for i in indices:
        counts[i] = counts.get(i, 0) + 1
    parts = []
    repeated = sorted(i for i, c in counts.items() if c > 1)
    if len(repeated) == 1:
        parts.append(f"{repeated[0]} is repeated ({counts[repeated[0]]} times)")
    elif repeated:
        parts.append(f"{', '.join(f'{i} ({counts[i]} times)' for i in repeated[:5])} are repeated")
    outside = sorted(i for i in counts if not 0 <= i < n)
    if outside:
        parts.append(f"{', '.join(map(str, outside[:5]))} {'is' if len(outside) == 1 else 'are'} outside "
                     f"0..{n - 1}")
    missing = sorted(set(range(n)) - set(counts))
    if missing:
        parts.append(f"{', '.join(map(str, missing[:5]))}{' ...' if len(missing) > 5 else ''} "
                     f"{'is' if len(missing) == 1 else 'are'} missing")
    return " and ".join(parts) or None


#: seconds without a reply, while requests are in flight, after which a client says what it waits for (and again
#: every as many seconds): a silent server is named, not waited on in silence for ``timeout_s`` x retries
WAIT_NOTICE_S = 30.0


class Replicas:
    """The replicas of one model: ``acquire()`` yields the URL with the fewest requests in flight, on a tie the one
    that got the fewest so far (then the lowest index), and blocks while each has ``per_replica`` in flight.
    ``sent[i]``: requests replica ``i`` got. The second key spreads calls made one at a time (a stage whose batch
    is smaller than the in-flight limit) round-robin instead of sending them all to the first replica.

    While requests are in flight and no reply came for :data:`WAIT_NOTICE_S` seconds, a watcher says so, every as
    many seconds, through ``notice`` (default :func:`chunkstudy.progress.note`: the runner's output): ``role``, the
    URLs waited on, the requests in flight and how long the oldest has waited."""

    def __init__(self, base_urls: Sequence[str], per_replica: int, role: str = "",
                 notice: Callable[[str], Any] | None = None):
        if not base_urls:
            raise ValueError("Replicas: no base_url")
        self.urls = list(base_urls)
        self.per_replica = max(1, int(per_replica))
        self.in_flight = [0] * len(self.urls)
        self.sent = [0] * len(self.urls)
        self.role, self.notice = role, notice
        self._cond = threading.Condition()
        self._since: dict[int, tuple[str, float]] = {}  # request -> (URL, monotonic time it was sent)
        self._last_reply = self._last_said = time.monotonic()  # the last reply, and the last notice
        self._idle = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def width(self) -> int:
        """Requests in flight at most, over all replicas."""
        return self.per_replica * len(self.urls)

    @contextmanager
    def acquire(self) -> Iterator[str]:
        with self._cond:
            self._cond.wait_for(lambda: min(self.in_flight) < self.per_replica)
            i = min(range(len(self.urls)), key=lambda j: (self.in_flight[j], self.sent[j], j))
            self.in_flight[i] += 1
            self.sent[i] += 1
            token = sum(self.sent)
            now = time.monotonic()
            if not self._since:
                self._last_reply = now  # the wait starts with the first request in flight
            self._since[token] = (self.urls[i], now)
            self._idle.clear()
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="wait-notice", daemon=True)
                self._watcher.start()
        try:
            yield self.urls[i]
        finally:
            with self._cond:
                self.in_flight[i] -= 1
                del self._since[token]
                self._last_reply = time.monotonic()
                if not self._since:
                    self._idle.set()
                self._cond.notify()

    def _watch(self) -> None:
        """Say what the client waits for while no reply comes (class docstring); ends when nothing is in flight."""
        every = WAIT_NOTICE_S
        while True:
            with self._cond:
                if not self._since:
                    self._watcher = None
                    return
                now = time.monotonic()
                message = self.waiting(now) if now - max(self._last_reply, self._last_said) >= every else None
                if message is not None:
                    self._last_said = now
                due = max(self._last_reply, self._last_said) + every - now
            if message is not None:
                from .. import progress

                (self.notice or progress.note)(message)
            self._idle.wait(max(due, 0.01))

    def waiting(self, now: float) -> str:
        """What the requests in flight wait for: ``llm: waiting for http://h:8000/v1/chat/completions: 4 requests
        in flight, the oldest for 62 s, no reply for 31 s`` (call holding the lock)."""
        urls = ", ".join(dict.fromkeys(u for u, _ in self._since.values()))
        oldest = now - min(t for _, t in self._since.values())
        n = len(self._since)
        return (f"{self.role or 'server'}: waiting for {urls}: {n} request{'s' * (n != 1)} in flight, the oldest for "
                f"{oldest:.0f} s, no reply for {now - self._last_reply:.0f} s")

    def __repr__(self) -> str:
        return f"Replicas({self.urls!r}, per_replica={self.per_replica})"


def error_for(status: int, text: str, url: str, retry_after: float | None) -> LLMError:
    """The error an HTTP answer other than 200 is (module docstring)."""
    msg = f"{url} answered HTTP {status}: {text[:300]}"
    if status >= 500:
        return ServerError(msg, retry_after=retry_after)
    if status in RETRY_STATUS:
        return LLMError(msg, retry_after=retry_after)
    return PermanentError(msg)


def post_json(session: Any, url: str, body: dict, headers: dict, timeout_s: float) -> dict:
    """``POST url`` with a JSON body; the JSON reply, or the error of :func:`error_for` / the transport."""
    import requests as rq

    try:
        r = session.post(url, json=body, headers=headers, timeout=timeout_s)
    except (rq.ConnectionError, rq.exceptions.ChunkedEncodingError) as e:  # ConnectTimeout is one too
        raise TransportError(f"{url} unreachable (connection error: {type(e).__name__})") from None
    except rq.Timeout:  # connected and sent; no reply in time
        raise ReplyTimeout(f"timeout: no reply within {timeout_s:g}s ({url})") from None
    except (rq.exceptions.InvalidURL, rq.exceptions.MissingSchema, rq.exceptions.InvalidSchema) as e:
        raise PermanentError(f"{url} is not a usable URL: {type(e).__name__}") from None
    except rq.RequestException as e:
        raise LLMError(f"request error ({url}): {type(e).__name__}") from None
    if r.status_code != 200:
        raise error_for(r.status_code, r.text, url, parse_retry_after(r.headers.get("Retry-After")))
    try:
        return r.json()
    except ValueError:
        raise LLMError(f"malformed response from {url}: {r.text[:300]}") from None


def auth_headers(api_key_env: str) -> dict:
    """JSON headers, with the API key from the environment variable ``api_key_env`` as a bearer token when set."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(api_key_env, "")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return headers


class GaveUp(LLMError):
    """A request of a :class:`JsonPool` failed for good: ``attempts`` made; ``permanent`` when the server refused
    it (HTTP 4xx other than the retried ones), so no retry was made."""

    def __init__(self, message: str, attempts: int, permanent: bool):
        super().__init__(message)
        self.attempts, self.permanent = attempts, permanent


class JsonPool:
    """A batch of JSON requests to ``{base_url}{path}`` over one pooled session per replica set, at most
    ``per_replica`` in flight on each replica. Each request is retried by :class:`chunkstudy.llm.retry.RetryPolicy`
    (``max_retries`` times after a connection error, a timeout or HTTP 408/409/425/429/5xx, waiting
    :func:`~chunkstudy.llm.retry.backoff_s` without jitter; ``sleep`` is the wait, replaceable in tests); another
    status fails it at once. Its :class:`~chunkstudy.llm.retry.Breaker` stops the batch
    (:class:`~chunkstudy.llm.base.CircuitOpen`); a timeout counts against it only when the replicas do not answer
    ``GET {base_url}/models`` either. ``n_requests`` counts HTTP requests, retries included."""

    def __init__(self, base_urls: Sequence[str], path: str, *, where: str, api_key_env: str, per_replica: int,
                 max_retries: int, retry_backoff_s: float, timeout_s: float, breaker_failures: int,
                 retry_after_max_s: float, sleep: Callable[[float], Any]):
        self.replicas = Replicas([u + path for u in urls(base_urls)], per_replica, role=where)
        self.where, self.api_key_env = where, api_key_env
        self.max_retries, self.timeout_s, self.sleep = max_retries, timeout_s, sleep
        self.breaker = Breaker(breaker_failures, ", ".join(self.replicas.urls), f"{where}.breaker_failures")
        answers = ModelsAnswer(urls(base_urls), auth_headers(api_key_env), ANSWER_TTL_S)
        self.policy = RetryPolicy(max_retries, retry_backoff_s, retry_after_max_s, self.breaker,
                                  sleep=lambda s: self.sleep(s), answers=lambda: answers(PREFLIGHT_TIMEOUT_S),
                                  on_retry=lambda _: self._count("n_retries"))
        self.n_requests = 0
        self.n_retries = 0
        self._lock = threading.Lock()
        self._session: Any = None

    @classmethod
    def of(cls, client: Any, base_urls: Sequence[str], path: str, *, where: str, retry_after_max_s: float,
           sleep: Callable[[float], Any]) -> "JsonPool":
        """The pool of a served model's client, from the keys every such client declares
        (:class:`chunkstudy.params.ServerClientParams`: ``api_key_env``, ``concurrency`` per replica,
        ``max_retries``, ``retry_backoff_s``, ``timeout_s``, ``breaker_failures``)."""
        return cls(base_urls, path, where=where, api_key_env=client.api_key_env, per_replica=client.concurrency,
                   max_retries=client.max_retries, retry_backoff_s=client.retry_backoff_s, timeout_s=client.timeout_s,
                   breaker_failures=client.breaker_failures, retry_after_max_s=retry_after_max_s, sleep=sleep)

    def session(self) -> Any:
        if self._session is None:
            import requests
            from requests.adapters import HTTPAdapter

            s = requests.Session()
            adapter = HTTPAdapter(pool_connections=len(self.replicas.urls), pool_maxsize=self.replicas.width,
                                  max_retries=0)
            s.mount("http://", adapter)
            s.mount("https://", adapter)
            self._session = s
        return self._session

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    def post(self, body: dict) -> dict:
        """One request with its retries: the JSON reply, or :class:`GaveUp` / :class:`CircuitOpen`."""
        headers = auth_headers(self.api_key_env)
        attempts = 0

        def attempt() -> dict:
            nonlocal attempts
            attempts += 1
            self._count("n_requests")
            with self.replicas.acquire() as url:
                return post_json(self.session(), url, body, headers, self.timeout_s)

        try:
            return self.policy.run(attempt)
        except PermanentError as e:
            raise GaveUp(str(e), attempts, True) from None
        except LLMError as e:
            if self.breaker.tripped.is_set():
                raise CircuitOpen(self.breaker.reason) from None
            raise GaveUp(f"gave up after {attempts} attempts: {e}", attempts, False) from None

    def run(self, bodies: Sequence[dict], done: Callable[[int, dict], Any] | None = None) -> list[dict]:
        """Every body's reply, in order; ``done(i, reply)`` as each completes (in completion order). The first
        failure stops sending the rest and is raised once the requests in flight have finished."""
        out: list[Any] = [None] * len(bodies)
        if not bodies:
            return []
        width = min(self.replicas.width, len(bodies))
        if width == 1:
            for i, b in enumerate(bodies):
                out[i] = self.post(b)
                if done is not None:
                    done(i, out[i])
            return out
        failure: BaseException | None = None
        with ThreadPoolExecutor(max_workers=width) as ex:
            todo = iter(enumerate(bodies))
            inflight: dict = {}
            while True:
                while failure is None and len(inflight) < width:
                    nxt = next(todo, None)
                    if nxt is None:
                        break
                    inflight[ex.submit(self.post, nxt[1])] = nxt[0]
                if not inflight:
                    break
                finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for f in finished:
                    i = inflight.pop(f)
                    try:
                        out[i] = f.result()
                    except BaseException as e:  # noqa: BLE001 - re-raised below, after the drain
                        failure = failure or e
                        continue
                    if done is not None:
                        done(i, out[i])
        if failure is not None:
            raise failure
        return out


# ------------------------------------------------------------------------------------------------ the broker


def ensure_served(base_urls: Sequence[str], role: str) -> dict | None:
    """Ask the runner that started this stage (``./run_all.sh``: :data:`BROKER_ENV` names its broker) to make
    every URL of ``base_urls`` answer: it starts the servers of a ``serve: auto`` role that do not answer yet and
    waits for them (:mod:`chunkstudy.serving`). Returns the broker's answer (None outside a run, where the servers
    are the user's); raises :class:`~chunkstudy.llm.base.PreflightError` with the runner's reason when a server
    could not be started."""
    from .base import PreflightError

    spec = os.environ.get(BROKER_ENV)
    if not spec:
        return None
    from multiprocessing.connection import Client as Connect

    address, key = spec.rsplit(" ", 1)
    with Connect(address, family="AF_UNIX", authkey=bytes.fromhex(key)) as conn:
        conn.send({"ensure": list(urls(base_urls)), "role": role})
        answer = conn.recv()
    if not answer.get("ok"):
        raise PreflightError(str(answer.get("error")))
    return answer
