"""The vLLM command line of one role's server (``scripts/serve_llm.sh --foreground`` prints it through
``python -m chunkstudy.serving args``), and the weights it loads.

* ``llm``: :func:`chunkstudy.gpu.serve_args` (``--served-model-name`` = ``llm.model``, host and port from the
  replica's URL, ``--max-model-len`` = ``llm.context_tokens``, ``--seed``, ``llm.vllm_engine``). The weights are
  ``llm.serve_weights`` when set (a folder or ``package:<module>``; a GGUF in it, ``llm.gguf_file``, is converted
  once to a Hugging Face folder under ``~/.cache/chunkstudy/serve/``), else the hub id ``llm.model``.
* an embedder or reranker with ``backend: openai``: vLLM's pooling runner (``--runner pooling``) on the model's
  folder (:func:`chunkstudy.models.resolve`; a reranker with an untrained head: the seeded head saved once,
  :func:`chunkstudy.rerank.served_folder`), ``--served-model-name`` = its ``model``, host and port from the URL,
  then its ``vllm_engine`` as ``--flags``, and ``--max-num-seqs 1`` where ``vllm_engine`` states no
  ``max_num_seqs`` (:data:`POOLING_MAX_NUM_SEQS`). vLLM reads the pooling (mean, normalised) and the maximum length
  from the sentence-transformers files of the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from .. import gguf_convert, gpu, models
from ..config import Config
from .roles import GPU_SHARE_DEFAULT, LOCAL_HOSTS, ServeError

#: vLLM flags the other parameters of an embedder or reranker set
OWNED = {"model": "model", "served_model_name": "model", "host": "base_url", "port": "base_url", "runner": "backend"}
#: the sequences an embedder's or a reranker's pooling server computes in one forward pass when its ``vllm_engine``
#: states no ``max_num_seqs``: one, so that a vector or a score is a function of its own input alone. vLLM batches
#: the sequences of all requests in flight into one pass, and a pass's float32 arithmetic depends on what it holds (a
#: score moved by up to 3.3e-8 with the batching, measured on vLLM's CPU build): with several in a pass, which
#: replica answered and which requests arrived beside it could reorder two candidates (docs/servers.md,
#: "Replicas cannot change a result")
POOLING_MAX_NUM_SEQS = 1


def role_record(cfg: Config, role: str) -> tuple[str, Any]:
    """``(kind, record)`` of a role key: ``llm``, ``embed.embedders.<k>`` or ``retrieve.rerankers.<k>``."""
    if role == "llm":
        return "llm", cfg.params("llm")
    section, group, key = (role.split(".", 2) + ["", ""])[:3]
    if (section, group) == ("embed", "embedders") and key in cfg.params("embed").embedders:
        return "embed", cfg.params("embed").embedders[key]
    if (section, group) == ("retrieve", "rerankers") and key in cfg.params("retrieve").rerankers:
        return "rerank", cfg.params("retrieve").rerankers[key]
    raise ServeError(f"{cfg.path}: no role {role!r} (llm, embed.embedders.<key>, retrieve.rerankers.<key>)")


def _cache_root() -> Path:
    from ..embed import onnx_cache_root

    return onnx_cache_root().parent / "serve"


def llm_weights(cfg: Config, echo=print) -> str | None:
    """What the LLM server loads: None (the hub id ``llm.model``), or a local folder (``llm.serve_weights``; a GGUF
    in it is converted once, :func:`chunkstudy.gguf_convert.convert_gguf`)."""
    lp = cfg.params("llm")
    if not lp.serve_weights:
        return None
    w = lp.serve_weights
    folder = models.package_dir(w.split(":", 1)[1]) if w.startswith("package:") else cfg.resolve(w)
    if not Path(folder).is_dir():
        raise ServeError(f"{cfg.path}: llm.serve_weights {w!r} is not a folder")
    gguf = Path(folder) / lp.gguf_file if lp.gguf_file else None
    if gguf is None or not gguf.is_file():
        return str(folder)
    from importlib.metadata import version

    st = gguf.stat()
    ident = {"gguf": str(gguf), "size": st.st_size, "mtime": st.st_mtime_ns, "transformers": version("transformers")}
    out = _cache_root() / f"{gguf.stem}-{hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:12]}"
    if not (out / "config.json").is_file():
        echo(f"serve: converting {gguf.name} to a Hugging Face folder once ({out}) ...")
        out.parent.mkdir(parents=True, exist_ok=True)
        gguf_convert.convert_gguf(folder, gguf.name, out, verify=False, echo=echo)
    return str(out)


def _flags(engine: Mapping[str, Any], where: str) -> list[str]:
    clash = sorted(set(engine) & set(OWNED))
    if clash:
        raise ServeError(f"{where}.vllm_engine.{clash[0]}: set {where}.{OWNED[clash[0]]} instead")
    out: list[str] = []
    for k, v in engine.items():
        out += gpu._flag(k, v)
    return out


def serve_args(cfg: Config, role: str, url: str, entry: str, echo=print) -> list[str]:
    """The server's arguments (without the executable): ``entry`` ``serve`` (``vllm serve W ...``) or
    ``api_server`` (``python -m vllm.entrypoints.openai.api_server --model W ...``)."""
    kind, rec = role_record(cfg, role)
    share = gpu_share_flag(kind, rec)
    if kind == "llm":
        return gpu.serve_args(dataclasses.replace(rec, base_url=url), llm_weights(cfg, echo), entry) + share
    if rec.backend != "openai":
        raise ServeError(f"{role}.backend is {rec.backend!r}: only an openai {kind} talks to a server")
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname or u.path.rstrip("/") != "/v1":
        raise ServeError(f"{role}.base_url {url!r}: vLLM answers under http://HOST:PORT/v1")
    if kind == "rerank":
        from ..rerank import served_folder

        weights = str(served_folder(rec, role.rsplit(".", 1)[1]))
    else:
        weights = models.resolve(rec.model)
    host = "127.0.0.1" if u.hostname in LOCAL_HOSTS else "0.0.0.0"
    head = ["serve", weights] if entry == "serve" else ["--model", weights]
    one_pass = [] if "max_num_seqs" in rec.vllm_engine else ["--max-num-seqs", str(POOLING_MAX_NUM_SEQS)]
    return [*head, "--served-model-name", rec.model, "--host", host, "--port", str(u.port or 80),
            "--runner", "pooling", *_flags(rec.vllm_engine, role), *one_pass, *share]


def gpu_share_flag(kind: str, rec: Any) -> list[str]:
    """``--gpu-memory-utilization`` with the kind's default share (:data:`~chunkstudy.serving.roles.
    GPU_SHARE_DEFAULT`) for a server on a GPU whose ``vllm_engine`` states none; nothing otherwise."""
    if not str(rec.device).startswith("cuda") or "gpu_memory_utilization" in rec.vllm_engine:
        return []
    return ["--gpu-memory-utilization", str(GPU_SHARE_DEFAULT[kind])]
