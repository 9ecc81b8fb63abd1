"""Failing loudly on the GPU path (issue 17 §2-3, issue 13 §5): the pre-flight check, the circuit breaker, the
error-share threshold through the runner, empty replies, Retry-After and jitter, programming errors, real
request overlap, prefix-group dispatch, any base_url, and the server's prefix-cache counters. HTTP tests run
against tests/fake_openai_server.py in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import requests

from chunkstudy import config, llm, runner
from chunkstudy.induce import contexts

HERE = Path(__file__).resolve().parent
PARAMS = {"backend": "scripted", "model": "m", "max_reply_tokens": 64, "seed": 7, "max_retries": 2,
          "retry_backoff_s": 0.01, "concurrency": 4, "timeout_s": 5.0,
          "max_error_share": 1.0}  # these tests look at single failures; the error-share stop has its own tests


def req(text: str, **kw) -> llm.Request:
    return llm.Request([{"role": "user", "content": text}], **kw)


class FakeServer:
    def __init__(self, *args: str):
        self.p = subprocess.Popen([sys.executable, str(HERE / "fake_openai_server.py"), "--lifetime", "300", *args],
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("PORT "), line
        self.root = f"http://127.0.0.1:{int(line.split()[1])}"
        self.url = self.root + "/v1"

    def stats(self) -> dict:
        return requests.get(self.root + "/stats", timeout=5).json()

    def failing(self, on: bool) -> None:
        requests.post(self.root + "/control", json={"failing": on}, timeout=5).raise_for_status()

    def close(self) -> None:
        self.p.kill()
        self.p.wait(timeout=10)


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def http_params(url: str, **over) -> dict:
    return {**PARAMS, "backend": "openai", "base_url": url, "model": "served-model", **over}


@pytest.fixture
def dead_url():
    """A URL nobody listens on: the port stays bound (not listening) while the test runs, so no other process can
    start serving there meanwhile; a connection is refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


# ------------------------------------------------------------------------------------------------ pre-flight


def test_preflight_names_the_url_when_no_server_answers(tmp_path, dead_url):
    url = dead_url
    c = llm.make_client(config.record("llm", http_params(url)), tmp_path)
    with pytest.raises(llm.PreflightError, match=f"no server answers at {url}/models"):
        c.generate([req("x")])
    assert c.stats["failed"] == 0 and c.stats["retries"] == 0  # it stopped before the first call, not after retries


def test_preflight_names_the_models_the_server_serves(tmp_path):
    s = FakeServer("--models", "google/gemma-4-26b-a4b-it,other")
    try:
        c = llm.make_client(config.record("llm", http_params(s.url, model="google/gemma-4-26B-A4B-it")), tmp_path)
        with pytest.raises(llm.PreflightError, match=r"serves \['google/gemma-4-26b-a4b-it', 'other'\], not "
                                                     r"llm.model 'google/gemma-4-26B-A4B-it'"):
            c.generate([req("x")])
        assert s.stats()["chat"] == []  # no model call was attempted
    finally:
        s.close()


def test_preflight_runs_once_and_not_for_a_cached_replay(server, tmp_path):
    c = llm.make_client(config.record("llm", http_params(server.url)), tmp_path)
    assert c.generate([req("echo:a")])[0].text == "a"
    assert c.generate([req("echo:b")])[0].text == "b"
    assert server.stats()["requests"] == 2  # chat requests are POSTs; the one pre-flight GET is not counted
    server.close()  # the server is gone: a replay from the cache must not need it
    again = llm.make_client(config.record("llm", http_params(server.url)),
                            tmp_path).generate([req("echo:a"), req("echo:b")])
    assert [(r.text, r.cached) for r in again] == [("a", True), ("b", True)]


def test_base_url_may_point_at_any_endpoint(server, tmp_path):
    """A proxy or load balancer path in front of the server: the client only ever joins paths to base_url."""
    c = llm.make_client(config.record("llm", http_params(server.root + "/lb/route-7/v1")), tmp_path)
    assert c.check_server() == ["served-model"]
    assert c.generate([req("echo:through the proxy")])[0].text == "through the proxy"


# ------------------------------------------------------------------------------------------- circuit breaker


class Counting(llm.OpenAIBackend):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.attempts = 0
        self._n_lock = threading.Lock()

    def complete(self, call):
        with self._n_lock:
            self.attempts += 1
        return super().complete(call)


def test_breaker_stops_a_dead_server_within_n_attempts(tmp_path, dead_url):
    url = dead_url
    params = http_params(url, preflight=False, max_retries=3, retry_backoff_s=0.05, concurrency=4,
                         breaker_failures=5)
    p = config.record("llm", params)  # the backend takes the record's values (no defaults of its own)
    be = Counting(url, "served-model", p.api_key_env, p.timeout_s, 4, p.structured_output)
    c = llm.make_client(config.record("llm", params), tmp_path, backend=be)
    with pytest.raises(llm.CircuitOpen, match=r"5 consecutive connection failures or server errors from "
                                              r"http://127\.0\.0\.1:\d+/v1/chat"):
        c.generate([req(f"q{i}") for i in range(200)])
    assert be.attempts <= 5 + 4 - 1  # N, plus at most the calls already in flight
    # without the breaker every call spends its retries: the contrast the breaker exists for
    be2 = Counting(url, "served-model", p.api_key_env, p.timeout_s, 4, p.structured_output)
    out = llm.make_client(config.record("llm", {**params, "breaker_failures": 0}), tmp_path, backend=be2).generate(
        [req(f"q{i}") for i in range(8)])
    assert be2.attempts == 8 * 4 and all(r.error for r in out)


def test_a_client_error_is_not_a_connection_failure(server, tmp_path):
    """HTTP 4xx come from a server that answers and judged the request: failed calls, never a reason to open the
    breaker (repeated 5xx do open it: tests/test_llm_length.py)."""
    c = llm.make_client(config.record("llm",
                                      http_params(server.url, max_retries=0, breaker_failures=2,
                                                  concurrency=1)), tmp_path)
    out = c.generate([req("bad") for _ in range(1)] + [req("bad", seed=i) for i in range(4)])
    assert all("HTTP 400" in r.error for r in out)


# ---------------------------------------------------------------------------------------------- error share


def test_error_share_fails_the_batch_after_caching_the_successes(tmp_path):
    bad = {"2", "5"}
    be = llm.ScriptedBackend(lambda r: llm.LLMError("model error") if r.messages[0]["content"] in bad else "ok")
    c = llm.make_client(config.record("llm", {**PARAMS, "max_error_share": 0.1, "max_retries": 0}), tmp_path,
                        backend=be)
    with pytest.raises(llm.ErrorShareExceeded, match=r"2 of 10 model calls failed \(last batch: A1\), a share of "
                                                      r"0\.2000 > llm.max_error_share 0\.1"):
        c.generate([req(str(i)) for i in range(10)], desc="A1")
    assert len(c.cache) == 8
    be2 = llm.ScriptedBackend(lambda r: "ok")
    out = llm.make_client(config.record("llm", {**PARAMS, "max_error_share": 0.1}), tmp_path, backend=be2).generate(
        [req(str(i)) for i in range(10)])
    assert sorted(call.messages[0]["content"] for call in be2.calls) == ["2", "5"]
    assert [r.error for r in out] == [None] * 10
    # at or below the threshold the failures stay counted responses
    be3 = llm.ScriptedBackend(lambda r: llm.LLMError("x") if r.messages[0]["content"] == "0" else "ok")
    out = llm.make_client(config.record("llm", {**PARAMS, "max_error_share": 0.1, "max_retries": 0}), None,
                          backend=be3).generate(
        [req(str(i)) for i in range(10)])
    assert sum(bool(r.error) for r in out) == 1


LLM_NOTEBOOK = '''# %% tags=["parameters"]
params_file = "params.yaml"

# %%
from chunkstudy import artifacts, config, llm

cfg = config.load(params_file)
documents = artifacts.read(cfg, "documents")   # the fixture's 01 writes one text of corpus.min_words characters
client = llm.make_client(cfg.params("llm"), artifacts.cache_dir(cfg, cfg.params("llm").cache))
prompts = ["echo:reply " + str(i) + (" FAILME" if i % 4 == 0 else "")
           for i in range(int(documents["text"].str.len().sum()))]
replies = client.generate(list(map(llm.Request, map(lambda p: [{"role": "user", "content": p}], prompts))),
                          desc="fixture calls")
artifacts.write_json(cfg, "02_induce", "induction_stats", {"llm": llm.describe(client),
                                                           "texts": list(map(lambda r: r.text, replies))})
'''


def test_error_share_through_the_runner_writes_no_manifest_and_a_rerun_retries_only_failures(tmp_path):
    """The stage path as run_all.sh runs it: a notebook builds the client from the parameter file."""
    nb = tmp_path / "notebooks"
    nb.mkdir()
    shutil.copy(HERE / "fixtures" / "runner" / "notebooks" / "01_corpus.py", nb / "01_corpus.py")
    (nb / "02_induce.py").write_text(LLM_NOTEBOOK)
    s = FakeServer("--failing")
    try:
        params = tmp_path / "params" / "tiny.yaml"
        params.parent.mkdir()
        params.write_text(json.dumps({"corpus": {"name": "tiny", "min_words": 20},
                                      "llm": {"backend": "openai", "base_url": s.url, "model": "served-model",
                                              "max_retries": 0, "concurrency": 4}}))
        with pytest.raises(runner.StageFailed, match=r"ErrorShareExceeded: 5 of 20 model calls failed"):
            runner.run(params, tmp_path, until="02", log=lambda *_: None)  # the notebooks of 01 and 02 alone
        assert not (tmp_path / "data/tiny/02_induce/manifest.json").exists()
        assert len(s.stats()["chat"]) == 20
        s.failing(False)
        done = runner.run(params, tmp_path, until="02", log=lambda *_: None)
        assert [(st, status) for st, status, _ in done] == [("01_corpus", "skipped"), ("02_induce", "ran")]
        retried = s.stats()["chat"][20:]
        assert sorted(retried) == sorted(f"echo:reply {i} FAILME" for i in range(0, 20, 4))
        out = json.loads((tmp_path / "data/tiny/02_induce/induction_stats.json").read_text())
        assert out["llm"]["called"] == 5 and out["llm"]["cached"] == 15 and out["llm"]["failed"] == 0
        assert (tmp_path / "data/tiny/02_induce/manifest.json").is_file()
    finally:
        s.close()


# -------------------------------------------------------------------------------------------- empty replies


@pytest.mark.parametrize("reply", ["empty", "none"])
def test_an_empty_or_null_http_reply_is_an_error_and_not_cached(server, tmp_path, reply):
    c = llm.make_client(config.record("llm", http_params(server.url, max_retries=1)), tmp_path)
    r = c.generate([req(reply)])[0]
    assert r.error and "EmptyReply" in r.error and r.text == ""
    assert len(c.cache) == 0 and c.stats["retries"] == 1


def test_an_empty_scripted_reply_is_an_error():
    c = llm.make_client(config.record("llm", {**PARAMS, "max_retries": 0}), None,
                        backend=llm.ScriptedBackend(["", "   \n", None, "x"]))
    out = c.generate([req("a"), req("b"), req("c"), req("d")])
    assert [bool(r.error) for r in out] == [True, True, True, False]
    assert len(c.cache) == 1


# --------------------------------------------------------------------------------------- retry politeness


def test_retry_after_is_honoured(server, tmp_path):
    c = llm.make_client(config.record("llm", http_params(server.url, retry_backoff_s=0.01, max_retries=1)), tmp_path)
    assert c.generate([req("retry-after:x")])[0].text == "ok x"
    first, second = server.stats()["times"]["retry-after:x"]
    assert second - first >= 0.95  # the server said 1 s; the backoff alone would wait about 0.01 s


def test_retry_after_parsing():
    assert llm.parse_retry_after("3") == 3.0
    assert llm.parse_retry_after(None) is None and llm.parse_retry_after("soon") is None
    import email.utils

    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < llm.parse_retry_after(when) <= 30


def test_backoff_is_jittered_around_the_doubling_schedule_and_capped_retry_after():
    c = llm.make_client(config.record("llm", {**PARAMS, "retry_backoff_s": 1.0, "retry_after_max_s": 5.0}), None,
                        backend=llm.ScriptedBackend([]))
    waits = [c.policy.backoff(2, None) for _ in range(200)]
    assert 2.0 <= min(waits) and max(waits) < 6.0 and len(set(waits)) > 100  # 4 s x [0.5, 1.5)
    assert all(c.policy.backoff(0, 3.0) >= 3.0 for _ in range(50))
    assert all(5.0 <= c.policy.backoff(0, 600.0) < 5.0 + 1e-9 for _ in range(50))  # capped at retry_after_max_s


# ----------------------------------------------------------------------------------------- programming errors


def test_a_type_error_in_a_backend_propagates_instead_of_becoming_a_failed_call(tmp_path):
    def fn(r):
        if r.messages[0]["content"] == "3":
            return None + 1  # a bug
        return "ok"

    for conc in (1, 4):
        c = llm.make_client(config.record("llm", {**PARAMS, "concurrency": conc}), tmp_path / str(conc),
                            backend=llm.ScriptedBackend(fn, concurrency=conc))
        with pytest.raises(TypeError):
            c.generate([req(str(i)) for i in range(8)])
        assert c.stats["failed"] == 0


def test_a_bug_in_a_backend_gives_no_fallback_a1_context():
    docs = pd.DataFrame({"doc_id": ["d"], "title": ["T"], "text": ["First paragraph here.\n\nSecond one."]})
    windows = pd.DataFrame({"doc_id": ["d"], "start": [0], "end": [21]})
    c = llm.make_client(config.record("llm", {"max_retries": 0}), None,
                        backend=llm.ScriptedBackend(lambda r: r.no_such_attribute))
    with pytest.raises(AttributeError):
        contexts.a1_contexts(docs, windows, config.record("contexts", {"method": "llm", "document_view": "body"}),
                             client=c)


# ------------------------------------------------------------------------------------------------ throughput


def test_concurrency_really_overlaps_requests(server, tmp_path):
    c = llm.make_client(config.record("llm", http_params(server.url, concurrency=8)), tmp_path)
    out = c.generate([req(f"gather:8:{i}") for i in range(8)])  # each answered once all 8 were in flight together
    assert all(r.text == "gathered" for r in out)
    assert server.stats()["max_inflight"] == 8  # the server saw the requests in flight together (no wall-clock assert)


def _recording_backend(events: list, hold: dict[str, str]):
    """A backend that records ``("start" | "end", tag)`` in the order things happen. A request whose tag is a key
    of ``hold`` ends only once the request ``hold[tag]`` has started (at most 60 s, so a client that runs them one
    after the other fails the order asserts instead of hanging): overlap shown by events, not by timing."""
    lock = threading.Lock()
    started: dict[str, threading.Event] = {}

    def event(tag: str) -> threading.Event:
        with lock:
            return started.setdefault(tag, threading.Event())

    def fn(r):
        with lock:
            events.append(("start", r.tag))
        event(r.tag).set()
        if r.tag in hold:
            event(hold[r.tag]).wait(timeout=60)
        with lock:
            events.append(("end", r.tag))
        return "ok"

    return llm.ScriptedBackend(fn, concurrency=8)


def test_requests_sharing_a_prompt_prefix_wait_for_the_first_one(tmp_path):
    doc = {d: f"<document>\n{d} " + "text of the document " * 200 for d in ("d1", "d2")}
    reqs = [req(doc[d] + f"</document><chunk>{w}</chunk>", tag=f"{d}:{w}") for d in ("d1", "d2") for w in range(4)]
    events: list = []
    # each document's leader ends only once the other's has started: they must run at the same time
    llm.make_client(config.record("llm", {**PARAMS, "concurrency": 8}), None,
                    backend=_recording_backend(events, {"d1:0": "d2:0", "d2:0": "d1:0"})).generate(reqs)
    at = {e: i for i, e in enumerate(events)}
    for d in ("d1", "d2"):
        assert all(at["start", f"{d}:{w}"] > at["end", f"{d}:0"] for w in (1, 2, 3))  # siblings start after the leader
    assert at["start", "d2:0"] < at["end", "d1:0"] and at["start", "d1:0"] < at["end", "d2:0"]  # leaders overlap
    events.clear()  # control: with grouping off every request starts at once (d1:0 ends only once d1:1 started)
    llm.make_client(config.record("llm", {**PARAMS, "concurrency": 8, "prefix_group_chars": 0}), None,
                    backend=_recording_backend(events, {"d1:0": "d1:1"})).generate(reqs)
    at = {e: i for i, e in enumerate(events)}
    assert at["start", "d1:1"] < at["end", "d1:0"]


def test_server_prefix_cache_counters_are_recorded_per_batch(server, tmp_path):
    c = llm.make_client(config.record("llm", http_params(server.url, server_metrics=True, concurrency=4)), tmp_path)
    doc = "<document>" + "shared document text " * 150
    prompts = [doc + f"<chunk>{i}</chunk>" for i in range(4)]
    c.generate([req(p) for p in prompts], desc="A1 contexts")
    got = llm.describe(c)["server"]["A1 contexts"]
    # the fake server models vLLM in characters: each prompt hits its longest common prefix with earlier ones
    queries = sum(len(p) for p in prompts)
    hits = sum(max(len(__import__("os").path.commonprefix([p, q])) for q in prompts[:i]) for i, p in
               enumerate(prompts) if i)
    assert got["prefix_cache_queries"] == queries and got["prefix_cache_hits"] == hits
    assert got["prefix_cache_hit_rate"] == hits / queries and got["requests"] == 4


def test_prometheus_counters_sum_engines_and_ignore_created_samples():
    text = """# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="a b"} 7.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="a b"} 2.0
vllm:num_requests_running{engine="0"} 3.0
"""
    assert llm.prometheus_counters(text) == {"vllm:prefix_cache_queries": 1500.0, "vllm:prefix_cache_hits": 600.0,
                                             "vllm:request_success": 9.0}


def test_vllm_engine_settings_may_not_restate_other_llm_parameters():
    with pytest.raises(ValueError, match="llm.vllm_engine.max_model_len: set llm.context_tokens instead"):
        llm.check_engine_args({"max_model_len": 4096})
    assert llm.check_engine_args({"max_num_seqs": 64}) == {"max_num_seqs": 64}


def test_a_bug_under_the_vllm_backend_propagates_while_a_model_error_is_a_failed_call(monkeypatch):
    import types

    class LLM:
        def __init__(self, **kw):
            pass

        def chat(self, messages, sampling, use_tqdm=False):
            content = messages[0][-1]["content"]
            if content == "bug":
                raise TypeError("chat() got an unexpected keyword argument")
            raise ValueError("prompt longer than max_model_len")

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    c = llm.make_client(config.record("llm", {**PARAMS, "backend": "vllm", "max_retries": 0}), None)
    assert "max_model_len" in c.generate([req("too long")])[0].error
    with pytest.raises(TypeError, match="unexpected keyword"):
        c.generate([req("bug")])
