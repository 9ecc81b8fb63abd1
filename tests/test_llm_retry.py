"""The one retry policy (chunkstudy.llm.retry): which errors are retried, how long it waits, and the one rule on
what counts against the circuit breaker — a reply timeout only when the server does not answer GET /models either
— for the LLM client and the JSON pool (embedder, reranker) alike. The servers are real loopback sockets: one
that holds every request until the test ends (so a client's timeout fires for certain, whatever the machine's
load), one that accepts connections and never answers."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chunkstudy import llm
from chunkstudy.llm import retry
from chunkstudy.llm.base import (CircuitOpen, EmptyReply, LLMError, PermanentError, ReplyTimeout, ServerError,
                                 TransportError)


def policy(max_retries=3, answers=None, limit=10, sleeps=None, retried=None) -> retry.RetryPolicy:
    return retry.RetryPolicy(max_retries, 1.0, 5.0, retry.Breaker(limit, "http://h/v1", "x.breaker_failures"),
                             sleep=(sleeps if sleeps is not None else []).append, answers=answers,
                             on_retry=None if retried is None else retried.append)


@pytest.mark.parametrize("error, answers, counts", [
    (TransportError("refused"), None, True), (ServerError("HTTP 500"), lambda: True, True),
    (ReplyTimeout("timeout"), None, True), (ReplyTimeout("timeout"), lambda: False, True),
    (ReplyTimeout("timeout"), lambda: True, False),  # busy, not down
    (LLMError("HTTP 429"), None, False), (PermanentError("HTTP 400"), None, False), (EmptyReply("''"), None, False),
])
def test_the_rule_on_what_counts_against_the_breaker(error, answers, counts):
    assert (policy(answers=answers).breaker_failure(error) is not None) is counts


def test_retries_wait_the_doubling_backoff_and_stop_at_a_permanent_error_or_the_last_attempt():
    sleeps, retried = [], []
    p = policy(max_retries=3, sleeps=sleeps, retried=retried)
    outcomes = iter([TransportError("refused"), LLMError("HTTP 429", retry_after=4.5), "ok"])

    def attempt():
        got = next(outcomes)
        if isinstance(got, BaseException):
            raise got
        return got

    assert p.run(attempt) == "ok" and sleeps == [1.0, 4.5] and len(retried) == 2  # Retry-After beats 2 s
    assert p.breaker.consecutive == 0  # the success reset it
    sleeps.clear()
    calls = []

    def refused():
        calls.append(1)
        raise PermanentError("HTTP 400")

    with pytest.raises(PermanentError):
        p.run(refused)
    assert len(calls) == 1 and sleeps == []

    def down():
        calls.append(1)
        raise TransportError("refused")

    calls.clear()
    with pytest.raises(TransportError):
        p.run(down)
    assert len(calls) == 4 and sleeps == [1.0, 2.0, 4.0]  # max_retries 3: four attempts, three waits

    def bug():
        raise TypeError("a bug in a backend")

    with pytest.raises(TypeError):
        p.run(bug)


def test_a_tripped_breaker_ends_the_retries_and_the_next_request_gets_circuit_open():
    sleeps = []
    p = policy(max_retries=10, limit=3, sleeps=sleeps)
    calls = []

    def down():
        calls.append(1)
        raise ServerError("HTTP 503")

    with pytest.raises(ServerError):
        p.run(down)
    assert len(calls) == 3 and len(sleeps) == 2 and p.breaker.tripped.is_set()
    assert "3 consecutive connection failures or server errors" in p.breaker.reason and "HTTP 503" in p.breaker.reason
    with pytest.raises(CircuitOpen):
        p.run(down)
    assert len(calls) == 3  # not attempted


# --------------------------------------------------------------------------------- both clients, real sockets


class _Holding(ThreadingHTTPServer):
    """Answers ``GET /v1/models``; holds every ``POST`` until :attr:`release` is set (then answers 200)."""

    daemon_threads = True

    def __init__(self):
        self.release, self.posts = threading.Event(), 0

        class Handler(BaseHTTPRequestHandler):
            def _send(handler, body: dict) -> None:  # noqa: N805 - the server is `self` here
                data = json.dumps(body).encode()
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)

            def do_GET(handler) -> None:  # noqa: N805
                handler._send({"object": "list", "data": [{"id": "m"}]})

            def do_POST(handler) -> None:  # noqa: N805
                handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
                self.posts += 1
                self.release.wait()
                try:
                    handler._send({"data": [{"index": 0, "embedding": [1.0]}]})
                except OSError:
                    pass  # the client timed out and closed the connection

            def log_message(handler, *args) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def busy():
    server = _Holding()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent():
    """A socket that accepts connections and never answers (GET /models neither)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def pool(url, breaker_failures):
    p = llm.JsonPool([url], "/embeddings", where="embed.embedders.x", api_key_env="NO_KEY", per_replica=1,
                     max_retries=5, retry_backoff_s=0.0, timeout_s=0.2, breaker_failures=breaker_failures,
                     retry_after_max_s=1.0, sleep=lambda s: None)
    probe = llm.ModelsAnswer([url], {}, llm.ANSWER_TTL_S)
    p.policy.answers = lambda: probe(0.5)  # the silent socket's probe times out in 0.5 s, not PREFLIGHT_TIMEOUT_S
    return p


def test_the_json_pool_counts_no_timeout_of_a_busy_server(busy):
    p = pool(busy.url, breaker_failures=3)
    with pytest.raises(llm.GaveUp, match="gave up after 6 attempts: timeout"):
        p.post({"input": ["x"]})
    assert busy.posts == 6 and not p.breaker.tripped.is_set() and p.n_retries == 5  # 6 timeouts, breaker shut


def test_the_json_pool_counts_the_timeouts_of_a_server_that_answers_nothing(silent):
    p = pool(silent, breaker_failures=3)
    with pytest.raises(CircuitOpen, match=r"3 consecutive .*timeout.*GET /models does not answer either"):
        p.post({"input": ["x"]})
    assert p.n_requests == 3


def test_the_llm_client_counts_no_timeout_of_a_busy_server(busy, tmp_path):
    from chunkstudy import config

    c = llm.make_client(config.record("llm", {"backend": "openai", "base_url": busy.url, "model": "m",
                                              "preflight": False, "timeout_s": 0.2, "max_retries": 4,
                                              "retry_backoff_s": 0.0, "breaker_failures": 2, "concurrency": 1,
                                              "max_error_share": 1.0}), tmp_path)
    out = c.generate([llm.Request(messages=({"role": "user", "content": "q"},))])
    assert out[0].error and "ReplyTimeout" in out[0].error  # failed, not stopped by the breaker
    # five attempts of the call, and before them the canary request (chunkstudy.identity), held as every POST is:
    # with llm.preflight false the model is then keyed as an unknown one, and the call goes ahead
    assert c.stats["timeouts"] == 5 and c.stats["retries"] == 4 and busy.posts == 6
    assert c.identity is not None and c.identity.fingerprint == "canary:unknown"
