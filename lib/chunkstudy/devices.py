"""Which devices the parameters ask for, and a clear error when torch cannot give them.

* :func:`cuda_keys` — every ``device: cuda*`` in the parameters (embedders, rerankers, the transformers LLM);
* :func:`require_cuda` — when any key asks for CUDA, check that torch sees a device, else
  :class:`CudaUnavailable` naming the parameter file, the keys and the torch build.

The runner checks this before the first stage, for the sections whose models the selected stages run (their
declared :attr:`chunkstudy.stages.Stage.devices`); 04's and 05's notebooks check it again; the GPU tooling
(:mod:`chunkstudy.gpu`, ``doctor``) reports it. A foundation module: it reads only the parameters.
"""

from __future__ import annotations

from typing import Any, Collection

from .config import Config
from .errors import ChunkstudyError


class CudaUnavailable(ChunkstudyError, RuntimeError):
    """A parameter asks for a CUDA device that torch cannot see (names the keys and the torch build)."""


def cuda_keys(cfg: Config, sections: Collection[str] | None = None) -> list[str]:
    """The parameter keys that ask for a CUDA device (embedders, rerankers, the transformers LLM); with
    ``sections`` (of :data:`chunkstudy.stages.DEVICE_SECTIONS`), only those of these sections."""
    keys = []
    if cfg.params("llm").backend == "transformers" and str(cfg.params("llm").device).startswith("cuda"):
        keys.append("llm.device")
    for key, spec in cfg.params("embed").embedders.items():
        if spec.backend != "openai" and spec.device.startswith("cuda"):
            keys.append(f"embed.embedders.{key}.device")
    for key, reranker in cfg.params("retrieve").rerankers.items():
        if reranker.device.startswith("cuda"):
            keys.append(f"retrieve.rerankers.{key}.device")
    return [k for k in keys if sections is None or k.split(".")[0] in sections]


def require_cuda(cfg: Config, torch_module: Any = None, sections: Collection[str] | None = None) -> str | None:
    """When any parameter (of ``sections``, when given: :func:`cuda_keys`) asks for CUDA, check that torch sees a
    device; returns its name (``None`` when no key asks). Raises :class:`CudaUnavailable` naming the parameter
    file, the keys and the torch build otherwise."""
    keys = cuda_keys(cfg, sections)
    if not keys:
        return None
    torch = torch_module
    if torch is None:
        import torch
    if not torch.cuda.is_available():
        raise CudaUnavailable(
            f"{cfg.path}: {', '.join(keys)} ask for CUDA, but torch {torch.__version__} sees no CUDA device (CUDA "
            f"build: {torch.version.cuda}). On a GPU machine scripts/ensure_env.sh installs the CUDA build "
            f"(constraints/gpu-lock.txt) when `nvidia-smi -L` lists the GPU, or with CHUNKSTUDY_TORCH=cuda: check "
            f"nvidia-smi and the driver (docs/gpu.md); or set these devices to cpu.")
    return torch.cuda.get_device_name(0)
