"""Embedders (docs/models.md, "Encoders"; paper 4, "Embedders").

* :func:`load_embedder` builds an :class:`Embedder` from one entry of ``params embed.embedders``. Backends (the
  library family): ``sentence-transformers`` (local path, ``package:`` name or hub name), ``flag`` (FlagEmbedding,
  optional, imported lazily) and ``openai`` (any OpenAI-compatible ``/v1/embeddings`` server: vLLM,
  text-embeddings-inference, ...). Vectors are float32 and L2-normalised, so inner product = cosine. The model
  loads on the first :meth:`Embedder.encode`, which checks every vector (:func:`check_vectors`: finite, non-zero,
  the model's dimension) and raises :class:`BadVector` naming the server or model and the text otherwise.
* ``runtime`` (sentence-transformers only): ``torch`` (default) or ``onnx`` = ONNX Runtime through
  sentence-transformers' own ``backend="onnx"``. The ONNX graph is exported once by optimum's exporter, offline,
  from the local model folder, and cached under :func:`onnx_cache_root` (``$CHUNKSTUDY_ONNX_CACHE``, else
  ``$XDG_CACHE_HOME/chunkstudy/onnx``, else ``~/.cache/chunkstudy/onnx``), one folder per model, exporter
  versions and (for an untrained reranker head) seed: later runs load it without exporting. ``runtime`` is a key
  of its own rather than a value of ``backend`` because ``backend`` names the library family (and its other
  values, flag and openai, have no ONNX form). The ONNX model is float32: its vectors agree with torch's to
  cosine >= 0.9999 (tests/test_embed.py), about 1.2x torch's speed on 2 CPU threads (bench/bench_onnx.py).
  *No int8 option*: no dynamic int8 scheme tried keeps the minimum cosine to float32 at 0.99 or more on the demo's
  521 chunk texts (bench/bench_onnx.py, all-MiniLM-L6-v2): per-tensor weights (arm64 config) 0.876 (top-10
  agreement with float32 retrieval 0.887), per-channel (avx512_vnni) 0.978 (0.949), per-channel MatMul only
  0.985 (0.949), per-channel with reduced range (avx2) 0.973 (0.946), for 2.5-4x the speed. Vectors that move
  that much would change the study's rankings, so int8 is left out.
* ``dtype`` (sentence-transformers and flag): ``auto``, ``float32``, ``float16`` or ``bfloat16``. The weights are
  cast after loading, float32 included (transformers 5 loads a checkpoint in its own precision, ``dtype="auto"``,
  so a float16 checkpoint would otherwise run a float32 CPU reference in half precision), and :func:`check_loaded`
  asserts the loaded parameters' dtype and device. ``auto`` is float16 on CUDA. On a CPU it is float32, except
  where bfloat16 was measured faster (AMX, or AVX-512 BF16 on AMD: :data:`chunkstudy.models.BF16_AUTO_RULES`) and
  the encoder runs in torch: there it is bfloat16 under ``torch.autocast`` (:data:`AUTOCAST_BF16`: float32 weights
  and norms, bfloat16 matrix products) *if* an agreement check on a sample of the run's own texts passes:
  every one of :data:`AGREEMENT_SAMPLE` texts (the distinct texts with the smallest sha256) gets a vector with
  cosine >= :data:`BF16_MIN_COSINE` to its float32 vector; else float32. The check runs once per store: its result
  is recorded in ``<store>/precision/`` and read by every later run (stage 05's queries included, so queries and
  passages are embedded in the same precision). Elsewhere bfloat16 is slower than float32, emulated or on Intel's
  AVX-512 BF16 without AMX (measured: bench/bench_embed.py), so ``auto`` never tries it there.
  :func:`resolve_dtype` gives the static part, :meth:`Embedder.settle_precision` the check.
* ``device`` is honoured by every local backend: sentence-transformers and its ONNX runtime (the execution
  provider), and FlagEmbedding (``devices=``; without it FlagEmbedding takes every GPU it sees).
* Queries of ``bge-*-en-v1.5`` models get the BGE instruction
  ``"Represent this sentence for searching relevant passages: "`` when ``query_instruction == "auto"``; passages
  never get an instruction.
* The persistent store of vectors (:class:`chunkstudy.embed_store.EmbeddingStore`) and the embedding of a
  run's texts by every embedder (:func:`chunkstudy.embed_store.embed_all`) are :mod:`chunkstudy.embed_store`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from . import models
from .params import EmbedderParams
from .errors import ChunkstudyError

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_BGE_V15 = re.compile(r"bge-[a-z]+-en-v1\.5", re.IGNORECASE)
KINDS = ("query", "passage")
#: ``truncation`` of the openai backend: ``server`` sends no truncation field (the server's own rule applies: OpenAI's
#: API, text-embeddings-inference without ``--auto-truncate`` and vLLM all refuse an over-long input with an HTTP
#: 4xx, which stops the stage naming the server's message); ``start`` asks the server to keep the first
#: ``max_seq_length`` tokens, as sentence-transformers does locally, with vLLM's request field
#: ``truncate_prompt_tokens`` (servers that do not know it may reject the request).
TRUNCATIONS = ("server", "start")
#: HTTP statuses of the openai backend that are retried (with backoff, honouring Retry-After; 5xx ones count for the
#: breaker); others fail at once (:mod:`chunkstudy.llm.http`).
RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)
#: longest wait a server's Retry-After may impose on one retry, seconds.
RETRY_AFTER_CAP_S = 120.0
_sleep = time.sleep  # the openai backend's waits between retries (tests replace it to read them)


class EmbedError(ChunkstudyError, RuntimeError):
    """An embedder cannot be built or called (the message names the parameter key and the backend)."""


def spec_record(spec: EmbedderParams, key: str) -> EmbedderParams:
    """``spec`` itself when it is the ``embed.embedders.<key>`` record (``cfg.params("embed").embedders[key]``, or
    ``config.record("embed.embedders.*", {...})`` in a test); a TypeError naming the key otherwise (a mapping is
    no record: its values were never validated)."""
    if not isinstance(spec, EmbedderParams):
        raise TypeError(f"embed.embedders.{key}: expected its EmbedderParams record (cfg.params(\"embed\").embedders"
                        f"[{key!r}], or config.record(\"embed.embedders.*\", ...)), got {type(spec).__name__}")
    return spec


def query_instruction(spec: Any) -> str:
    """The instruction prepended to queries: ``"auto"`` -> BGE's for bge-*-en-v1.5 models, else ``""``; any
    other value is used verbatim (``""`` = none). ``spec`` is an embedder record."""
    if spec.query_instruction == "auto":
        return BGE_QUERY_INSTRUCTION if _BGE_V15.search(spec.model) else ""
    return spec.query_instruction


def _normalise(v: np.ndarray) -> np.ndarray:
    """Rows of ``v`` scaled to unit L2 norm, float32, whatever their scale: each row is divided by its largest
    absolute entry before its norm is taken, in float64, so a row of 1e-30s (whose float32 squares underflow to a
    norm of 0) and a row of 1e25s (whose squares overflow to infinity) come out as the unit vectors they point
    along. A zero row stays zero and a NaN or infinite one becomes NaN: :func:`check_vectors` refuses both."""
    return unit_rows(v).astype(np.float32)


def unit_rows(v: Any) -> np.ndarray:
    """:func:`_normalise` in float64 (the cosines of :func:`identical_batch` are taken on these)."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 2 or not v.size:
        return v
    with np.errstate(invalid="ignore"):
        scale = np.abs(v).max(axis=1, keepdims=True)
        u = v / np.where((scale > 0) & np.isfinite(scale), scale, 1.0)
        u = np.where(np.isfinite(scale), u, np.nan)
        n = np.linalg.norm(u, axis=1, keepdims=True)
        return u / np.where(n > 0, n, 1.0)


#: what every stored vector's L2 norm must be: vectors are unit-normalised (inner product = cosine), so a norm off 1
#: by more than this is a vector the normalisation missed, refused before it is stored (:func:`check_vectors`)
NORM_TOLERANCE = 1e-3


class BadVector(EmbedError):
    """A vector that must not be stored: not finite, all zero, not unit-normalised, or not of the model's dimension
    (:func:`check_vectors`)."""


def bad_rows(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a ``(n, d)`` matrix that hold a NaN or an infinity, and rows whose norm is 0 (boolean masks; the norm
    is taken in float64, so no finite float32 row overflows to a false infinity)."""
    v = np.asarray(vecs)
    finite = np.isfinite(v).all(axis=1)
    zero = finite & (np.linalg.norm(np.where(np.isfinite(v), v, 0).astype(np.float64), axis=1) == 0)
    return ~finite, zero


def check_vectors(vecs: Any, keys: Sequence[str], where: str, dim: int | None = None) -> np.ndarray:
    """``vecs`` as float32 ``(len(keys), d)`` when every row may be stored: finite, of norm > 0, unit-normalised
    (norm 1 within :data:`NORM_TOLERANCE`) and of dimension ``dim`` (when given: the model's); else
    :class:`BadVector` naming ``where`` (the embedder and its server or model), the content key (``keys[i]``: the
    text's sha256, :func:`text_key`) of the first bad row, the condition and how many rows of the batch have it. Every vector is checked here before it is stored (:mod:`chunkstudy.
    embed_store`), whatever computed it: a zero vector would rank as no text does, a NaN poisons every score."""
    v = np.asarray(vecs, dtype=np.float32)
    n = len(keys)
    if v.ndim != 2 or v.shape[0] != n:
        raise BadVector(f"{where}: {n} keys but vectors of shape {v.shape}; nothing of this batch is stored")
    if dim is not None and n and v.shape[1] != dim:
        raise BadVector(f"{where}: the vector of text {keys[0]} has dimension {v.shape[1]}, the model's is {dim}; "
                        "nothing of this batch is stored")
    nonfinite, zero = bad_rows(v)
    for mask, what in ((nonfinite, "holds NaN or infinity"), (zero, "is all zero (norm 0)")):
        if mask.any():
            i = int(np.argmax(mask))
            raise BadVector(f"{where}: the vector of text {keys[i]} {what} ({int(mask.sum())} of the batch's {n} "
                            "vectors); nothing of this batch is stored")
    norms = np.linalg.norm(v.astype(np.float64), axis=1)
    off = np.abs(norms - 1.0) > NORM_TOLERANCE
    if off.any():
        i = int(np.argmax(off))
        raise BadVector(f"{where}: the vector of text {keys[i]} has norm {norms[i]:.6g}, not 1 (within "
                        f"{NORM_TOLERANCE:g}): it was not normalised ({int(off.sum())} of the batch's {n} vectors); "
                        "nothing of this batch is stored")
    return v


class BadReply(EmbedError):
    """A server's reply that cannot be taken as a whole: its ``index`` fields not a permutation of the texts sent,
    vectors of different lengths, or one vector for texts that differ (:meth:`_OpenAIEmbeddings._parse`)."""


#: a reply whose vectors for two distinct texts or more all have at least this cosine to its first vector is
#: refused (:func:`identical_batch`): a server that gives every text one vector (a broken pooling, a model that
#: ignores its input) would make every score equal. Distinct texts of a real model stay far below it: texts that
#: differ in a word have cosines around 0.9-0.99
IDENTICAL_MIN_COSINE = 1 - 1e-6


def distinct_texts(texts: Sequence[str]) -> set[str]:
    """The texts that differ once case and white space are folded (what an uncased tokenizer reads alike is one)."""
    return {" ".join(t.casefold().split()) for t in texts}


def identical_batch(vecs: np.ndarray, texts: Sequence[str]) -> float | None:
    """The least cosine (float64) between the first vector of a batch and the others when the batch holds two
    :func:`distinct_texts` or more and every vector has cosine >= :data:`IDENTICAL_MIN_COSINE` to the first (the
    batch is refused); None otherwise (also for a batch with a NaN or zero vector: :func:`check_vectors` names
    those)."""
    if len(distinct_texts(texts)) < 2:
        return None
    u = unit_rows(vecs)
    if not np.isfinite(u).all() or (np.linalg.norm(u, axis=1) == 0).any():
        return None
    least = float((u @ u[0]).min())
    return least if least >= IDENTICAL_MIN_COSINE else None


def resolve_dtype(spec: Any, where: str) -> str:
    """The floating-point type an encoder starts in: ``dtype`` as written, or for ``auto`` float16 on a CUDA device
    and float32 elsewhere (on a CPU with hardware bfloat16, :func:`bf16_candidate` says whether an agreement check
    may still turn it into :data:`AUTOCAST_BF16`). The ONNX runtime runs its exported float32 graph (``auto`` ->
    float32; another explicit dtype is an error naming ``where``)."""
    dt, runtime = spec.dtype, spec.runtime  # values the schema has checked
    if runtime == "onnx":
        if dt not in ("auto", "float32"):
            raise EmbedError(f"{where}.dtype: {dt!r} with runtime 'onnx': the exported ONNX model is float32; use "
                             "dtype: float32 (or auto), or runtime: torch")
        return "float32"
    if dt == "auto":
        return "float16" if spec.device.startswith("cuda") else "float32"
    return dt


#: ``dtype: auto`` on a CPU with hardware bfloat16: the resolved dtype when the agreement check passes (torch
#: autocast: float32 weights, layer norms and softmax; bfloat16 matrix products)
AUTOCAST_BF16 = "autocast-bfloat16"
#: the least cosine any text of the agreement sample may have between its bfloat16 and float32 vectors
BF16_MIN_COSINE = 0.999
#: texts (embedders) or queries (cross-encoders) in the agreement sample: those with the smallest sha256, a
#: choice fixed by the texts themselves and spread over their lengths
AGREEMENT_SAMPLE = 64


def bf16_candidate(spec: Any, torch_backends: tuple[str, ...] = ("sentence-transformers", "cross-encoder")) -> str | None:
    """The CPU's hardware-bfloat16 feature (:func:`chunkstudy.models.cpu_bf16_feature`) when ``dtype: auto`` may
    choose bfloat16 for this encoder record: ``dtype: auto``, runtime torch, a torch backend, device ``cpu``;
    None otherwise (``auto`` then stays float32 on the CPU without any check)."""
    if spec.dtype != "auto" or spec.runtime != "torch" or spec.backend not in torch_backends \
            or not str(spec.device).startswith("cpu"):
        return None
    return models.cpu_bf16_feature()


def agreement_sample(texts: Sequence[str], n: int | None = None) -> list[str]:
    """The ``n`` (default :data:`AGREEMENT_SAMPLE`) distinct texts with the smallest sha256 (:func:`text_key`), in
    that order."""
    return sorted(set(texts), key=text_key)[:AGREEMENT_SAMPLE if n is None else n]


def recorded_decision(path: Path | None, measure: Callable[[], dict]) -> dict:
    """The decision recorded at ``path`` (a JSON file) when there is one, else ``measure()``'s, written there (when
    ``path`` is given) before it is returned."""
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass  # a damaged record is measured again
    rec = measure()
    if path is not None:
        from .artifacts import write_json_file

        write_json_file(path, rec)
    return rec


def cosine_agreement(a: np.ndarray, b: np.ndarray) -> dict:
    """Row-wise cosine similarity of two ``(n, d)`` matrices of the same texts: ``{"n", "min", "mean"}``."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"cosine_agreement: shapes {a.shape} and {b.shape} differ (or are not matrices)")
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"n": int(len(cos)), "min": float(cos.min()) if len(cos) else float("nan"),
            "mean": float(cos.mean()) if len(cos) else float("nan")}


def _torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def check_loaded(module: Any, dtype: str, device: str, where: str) -> str:
    """Assert that a loaded torch module runs where and how the parameters say: every parameter in ``dtype`` and
    on ``device``'s type (``cuda:1`` is checked as ``cuda``). Returns the dtype's name; raises :class:`EmbedError`
    naming ``where`` otherwise (a float32 reference that came up in half precision, an encoder left on the CPU)."""
    import torch

    want, dev = _torch_dtype(dtype), torch.device(device).type
    for name, prm in module.named_parameters():
        if prm.dtype != want or prm.device.type != dev:
            raise EmbedError(f"{where}: loaded parameter {name!r} is {str(prm.dtype).replace('torch.', '')} on "
                             f"{prm.device}, expected {dtype} on {device}")
    return dtype


def cast_and_check(module: Any, dtype: str, device: str, where: str) -> None:
    """Cast a loaded torch module's weights to the run's precision and check them (:func:`check_loaded`): float32
    too, since the checkpoint's own precision is not the run's; :data:`AUTOCAST_BF16` keeps float32 weights (the
    autocast context lowers the products)."""
    weights = "float32" if dtype == AUTOCAST_BF16 else dtype
    module.to(_torch_dtype(weights))
    check_loaded(module, weights, device, where)


def flag_kwargs(cls: Any, device: str, dtype: str, where: str) -> dict:
    """FlagEmbedding constructor arguments that pin the device and precision: ``devices=[device]`` (FlagEmbedding
    >= 1.3; without it the library takes every GPU it sees, or the CPU, by itself) and ``use_fp16``."""
    import inspect

    if dtype == "bfloat16":
        raise EmbedError(f"{where}.dtype: FlagEmbedding runs float16 or float32, not bfloat16")
    if "devices" not in inspect.signature(cls.__init__).parameters:
        raise EmbedError(f"{where}: this FlagEmbedding's {cls.__name__} has no devices argument, so it cannot be "
                         f"held to device {device!r}; install FlagEmbedding>=1.3 (pip install 'chunkstudy[flag]')")
    return {"use_fp16": dtype == "float16", "devices": [device]}


def place_flag_model(model: Any, dtype: str, device: str, where: str) -> None:
    """Move a FlagEmbedding model's torch module to ``device`` in ``dtype`` now (FlagEmbedding would do so at the
    first encode) and check it (:func:`check_loaded`)."""
    model.model.to(device=device, dtype=_torch_dtype(dtype))
    check_loaded(model.model, dtype, device, where)


def precision_context(dtype: str):
    """The context a forward pass runs in: ``torch.autocast("cpu", bfloat16)`` for :data:`AUTOCAST_BF16`, else
    none."""
    import contextlib

    if dtype != AUTOCAST_BF16:
        return contextlib.nullcontext()
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16)


def onnx_cache_root() -> Path:
    """Where exported ONNX models are kept: ``$CHUNKSTUDY_ONNX_CACHE``, else ``$XDG_CACHE_HOME/chunkstudy/onnx``,
    else ``~/.cache/chunkstudy/onnx``. Deleting it costs one export per model on the next run."""
    if os.environ.get("CHUNKSTUDY_ONNX_CACHE"):
        return Path(os.environ["CHUNKSTUDY_ONNX_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "chunkstudy" / "onnx"


def _source_fingerprint(path: str) -> Any:
    """What identifies a model's source: for a local folder its files' names, sizes and modification times."""
    p = Path(path)
    if not p.is_dir():
        return path
    return sorted((str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns) for f in p.rglob("*") if f.is_file())


def onnx_model_dir(kind: str, model: str, save_torch: Callable[[Path], None], onnx_class: Any,
                   extra: Mapping | None = None) -> Path:
    """The folder of the exported ONNX form of ``model`` (``kind``: "embedder" or "cross-encoder"), exporting it on
    first use: ``save_torch(folder)`` writes the torch model (for an untrained reranker, with its seeded head),
    then ``onnx_class(folder, backend="onnx")`` runs optimum's exporter on it, offline, and the result is saved
    under :func:`onnx_cache_root` and renamed into place whole (a killed export leaves nothing half-written).

    The folder name carries a digest of the model name, its source files, ``extra`` and the exporter's package
    versions, so a changed model or exporter exports again.
    """
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "-"

    ident = {"kind": kind, "model": model, "source": _source_fingerprint(models.resolve(model)),
             "extra": dict(extra or {}),
             "versions": {p: ver(p) for p in ("onnxruntime", "optimum-onnx", "optimum", "transformers", "torch",
                                              "sentence-transformers")}}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:12]
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", str(model).rstrip("/").split("/")[-1].split(":")[-1])
    root = onnx_cache_root()
    final = root / f"{base}-{kind}-{digest}"
    if (final / "onnx" / "model.onnx").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{base}-", dir=root) as tmp:
        torch_dir, onnx_dir = Path(tmp) / "torch", Path(tmp) / "onnx-model"
        save_torch(torch_dir)
        onnx_class(str(torch_dir), backend="onnx", device="cpu").save_pretrained(str(onnx_dir))
        (onnx_dir / "chunkstudy-export.json").write_text(json.dumps(ident, indent=1, sort_keys=True, default=str))
        try:
            os.replace(onnx_dir, final)
        except OSError:  # another process exported the same model first: keep its copy
            if not (final / "onnx" / "model.onnx").is_file():
                raise
    return final


#: the exported float32 graph inside an export folder
ONNX_FILE = "onnx/model.onnx"


def _onnx_provider(device: str) -> str:
    return "CUDAExecutionProvider" if str(device).startswith("cuda") else "CPUExecutionProvider"


class Embedder:
    """One embedder from the parameters. ``encode(texts, kind)`` -> float32 ``(n, dim)``, unit-norm rows.

    ``model_key`` names what determines the vectors (backend, model name as written in the parameters,
    max_seq_length, query instruction, and where they apply the runtime, the resolved dtype and the openai
    truncation rule): two parameter keys with the same ``model_key`` share stored vectors. The defaults (torch,
    float32, server truncation) add nothing to the key, so stores written before these options existed stay valid;
    any other value gives another key. ``dtype: auto`` settled to bfloat16 (:meth:`settle_precision`) adds the
    resolved dtype, the CPU feature and the measured agreement, so bfloat16 and float32 vectors never mix; settled
    to float32 it adds nothing.

    ``precision`` is the settled decision (None until settled): ``{"dtype", "cpu_bf16", "check"}``, ``check`` being
    None when no agreement check ran (the CPU has no hardware bfloat16, or ``dtype`` is not ``auto``), else
    ``{"metric": "min cosine", "threshold", "n", "min", "mean", "sample_sha256"}``.
    """

    def __init__(self, spec: EmbedderParams, key: str, show_progress: bool = False):
        self.spec = spec_record(spec, key)
        self.key = key
        where = f"embed.embedders.{key}"
        self.backend = self.spec.backend
        if not self.spec.model:
            raise EmbedError(f"{where}.model is empty")
        self.instruction = query_instruction(self.spec)
        self.batch_size = self.spec.batch_size
        self.max_seq_length = self.spec.max_seq_length
        self.device = self.spec.device
        self.runtime = self.spec.runtime
        if self.runtime != "torch" and self.backend != "sentence-transformers":
            raise EmbedError(f"{where}.runtime: {self.runtime!r} needs backend 'sentence-transformers' "
                             f"(backend is {self.backend!r})")
        self.dtype = resolve_dtype(self.spec, where) if self.backend != "openai" else "server"
        self.truncation = self.spec.truncation
        self.show_progress = show_progress
        self._model: Any = None
        self.bf16_feature = bf16_candidate(self.spec)
        self.precision: dict | None = None
        if self.bf16_feature is None:
            self.precision = {"dtype": self.dtype, "cpu_bf16": None, "check": None}
        self._want_dim: int | None = None
        try:  # a server's model is its own: the store keeps the served vectors apart by backend
            self.source = None if self.backend == "openai" else models.content_key(self.spec.model)
        except ValueError as e:
            raise EmbedError(f"{where}.model: {e}") from None
        self.model_key = self._model_key()

    def _model_key(self) -> str:
        ident = {"backend": self.backend, "model": self.spec.model, "max_seq_length": self.max_seq_length,
                 "instruction": self.instruction}
        if self.source is not None:
            ident["source"] = self.source  # the model's content: a folder's digest, a hub model's commit
        if self.runtime != "torch":
            ident["runtime"] = self.runtime
        if self.backend != "openai" and self.dtype != "float32":
            ident["dtype"] = self.dtype
        if self.dtype == AUTOCAST_BF16:
            prec = cast(dict, self.precision)  # settled with the bf16 choice
            ident["cpu_bf16"] = prec["cpu_bf16"]
            ident["agreement_min_cosine"] = round(prec["check"]["min"], 6)
        if self.backend == "openai" and self.truncation != "server":
            ident["truncation"] = self.truncation
        if self.backend == "openai" and self.spec.vllm_engine.get("dtype") is not None:
            ident["served_dtype"] = str(self.spec.vllm_engine["dtype"])  # a server's precision: its own vectors
        h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", str(self.spec.model).rstrip("/").split("/")[-1].split(":")[-1])
        return f"{base}-{self.max_seq_length}-{h}"

    # ------------------------------------------------------------------------------------------- precision
    @property
    def precision_pending(self) -> bool:
        """``dtype: auto`` on a CPU with hardware bfloat16, not yet settled by :meth:`settle_precision`."""
        return self.precision is None

    def settle_precision(self, texts: Sequence[str], folder: str | Path | None = None) -> dict:
        """Settle ``dtype: auto`` on a CPU with hardware bfloat16: embed the :func:`agreement_sample` of
        ``texts`` (passages) in float32 and under bfloat16 autocast, and take :data:`AUTOCAST_BF16` when the least
        cosine is >= :data:`BF16_MIN_COSINE`, else float32; ``model_key`` follows. With ``folder`` (the store's),
        the decision is read from ``folder/precision/<float32 model_key>-<feature>.json`` when recorded there, else
        measured and recorded: one check per store. Returns :attr:`precision` (also when nothing was pending)."""
        if self.precision is not None:
            return self.precision
        feature = self.bf16_feature
        path = Path(folder) / "precision" / f"{self.model_key}-{feature}.json" if folder is not None else None

        def measure() -> dict:
            sample = agreement_sample(texts)
            ref = self._encode(sample, "float32")
            got = self._encode(sample, AUTOCAST_BF16)
            agree = cosine_agreement(got, ref)
            digest = hashlib.sha256("\n".join(text_key(t) for t in sample).encode()).hexdigest()
            return {"dtype": AUTOCAST_BF16 if agree["min"] >= BF16_MIN_COSINE else "float32", "cpu_bf16": feature,
                    "check": {"metric": "min cosine", "threshold": BF16_MIN_COSINE, **agree, "sample_sha256": digest}}

        rec = recorded_decision(path, measure)
        self.precision = rec
        self.dtype = rec["dtype"]
        self.model_key = self._model_key()
        return rec

    # ------------------------------------------------------------------------------------------- backends
    def _load(self):
        if self._model is not None:
            return self._model
        if self.backend == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            if self.runtime == "onnx":
                folder = onnx_model_dir(
                    "embedder", self.spec.model,
                    lambda d: SentenceTransformer(models.resolve(self.spec.model), device="cpu").save_pretrained(
                        str(d)), SentenceTransformer)
                m = SentenceTransformer(str(folder), device=self.device, backend="onnx",
                                        model_kwargs={"provider": _onnx_provider(self.device),
                                                      "file_name": ONNX_FILE})
            else:
                m = SentenceTransformer(models.resolve(self.spec.model), device=self.device)
                cast_and_check(m, self.dtype, self.device, f"embed.embedders.{self.key}")
            m.max_seq_length = self.max_seq_length
            self._model = m
        elif self.backend == "flag":
            try:
                from FlagEmbedding import FlagModel
            except ImportError as e:
                raise EmbedError(f"embed.embedders.{self.key}: backend 'flag' needs FlagEmbedding "
                                 f"(pip install 'chunkstudy[flag]'): {e}") from None
            where = f"embed.embedders.{self.key}"
            # the instruction is added here (encode), so FlagEmbedding gets none of its own
            m = FlagModel(models.resolve(self.spec.model), **flag_kwargs(FlagModel, self.device, self.dtype, where))
            place_flag_model(m, self.dtype, self.device, where)
            self._model = m
        else:
            self._model = _OpenAIEmbeddings(self.spec, self.key)
        return self._model

    def sentence_transformer(self) -> Any:
        """The loaded ``SentenceTransformer`` (loading it on first use, cast and checked as :meth:`encode` runs it),
        for work that needs the model's modules rather than its pooled vectors (late pooling,
        :mod:`chunkstudy.chunks.late`). An :class:`EmbedError` for another backend or the ONNX runtime."""
        if self.backend != "sentence-transformers" or self.runtime != "torch":
            raise EmbedError(f"embed.embedders.{self.key}: the torch modules of a sentence-transformers model are "
                             f"needed here; this embedder is backend {self.backend!r}, runtime {self.runtime!r}")
        return self._load()

    def encode(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Embed ``texts`` as ``kind`` (``"query"`` gets the instruction); float32 ``(len(texts), dim)``, unit norm.
        A pending ``dtype: auto`` is settled on ``texts`` first (:meth:`settle_precision`, nothing recorded); the
        store settles it on the run's texts instead."""
        if kind not in KINDS:
            raise EmbedError(f"encode: kind {kind!r} is not one of {list(KINDS)}")
        if self.precision_pending:
            self.settle_precision(texts)
        v = self._encode([(self.instruction + t) if kind == "query" else t for t in texts], self.dtype)
        return check_vectors(v, [text_key(t) for t in texts], self.describe(), self._declared_dim(v))

    def describe(self) -> str:
        """The parameter key and what computes its vectors: ``embed.embedders.strong (server http://...:8000/v1,
        model 'm')`` or ``embed.embedders.strong (sentence-transformers model 'package:...')``."""
        if self.backend == "openai":
            return f"embed.embedders.{self.key} (server {', '.join(self._load().base_urls)}, model {self.spec.model!r})"
        return f"embed.embedders.{self.key} ({self.backend} model {self.spec.model!r})"

    def _declared_dim(self, v: np.ndarray) -> int | None:
        """The dimension every vector of this embedder must have: a sentence-transformers model's own, else the
        first batch's in this process (a server's: one whose vectors change size between requests is refused)."""
        if self._want_dim is None and self.backend == "sentence-transformers":
            self._want_dim = self.dim
        if self._want_dim is None and v.ndim == 2 and len(v):
            self._want_dim = int(v.shape[1])
        return self._want_dim

    def _encode(self, texts: list[str], dtype: str) -> np.ndarray:
        m = self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.backend == "sentence-transformers":
            with precision_context(dtype):
                v = m.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                             show_progress_bar=self.show_progress)
        elif self.backend == "flag":
            v = m.encode(texts, batch_size=self.batch_size, max_length=self.max_seq_length)
        else:
            v = m.encode(texts, batch_size=self.batch_size)
        return _normalise(v)

    @property
    def parameter_dtype(self) -> str | None:
        """The dtype of the loaded torch parameters (``"float32"``, ...), loading the model if needed; None where no
        torch module runs here (the openai backend, the ONNX runtime)."""
        m = self._load()
        module = getattr(m, "model", m) if self.backend == "flag" else m
        first = next(module.parameters(), None) if hasattr(module, "parameters") and self.runtime == "torch" else None
        return None if first is None else str(first.dtype).replace("torch.", "")

    @property
    def tokenizer_id(self) -> str | None:
        """What names this embedder's tokenizer (its backend and model as written), for :meth:`token_counts`;
        None where the store cannot count tokens (flag and openai backends: they are ordered by characters)."""
        return f"{self.backend}|{self.spec.model}" if self.backend == "sentence-transformers" else None

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text under the model's own tokenizer, special tokens included, not truncated (the model
        sees ``min(count, max_seq_length)``); passages, without the query instruction."""
        tok = self._load().tokenizer
        return [len(ids) for ids in tok(list(texts), add_special_tokens=True, truncation=False,
                                        verbose=False)["input_ids"]]

    @property
    def dim(self) -> int:
        m = self._load()
        if self.backend == "sentence-transformers":
            get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
            return int(get())
        return int(self.encode(["dimension probe"], "passage").shape[1])


class _OpenAIEmbeddings:
    """``POST {base_url}/embeddings`` (base_url ends in ``/v1``, as for the OpenAI client; a list of them: replicas),
    key from the env, through the HTTP machinery every server client shares (:class:`chunkstudy.llm.http.JsonPool`).

    Batches of ``batch_size`` texts go out over one pooled HTTP session, up to ``concurrency`` at a time on each
    replica, and come back in order. A connection error, a timeout or HTTP 408/409/425/429/5xx is retried up to
    ``max_retries`` times, waiting ``retry_backoff_s`` x 2^attempt, at least what the server's ``Retry-After`` asks
    (capped at :data:`RETRY_AFTER_CAP_S`); ``breaker_failures`` consecutive connection failures or 5xx stop the
    stage; any other HTTP error fails at once, naming the URL, the status and the server's message. ``truncation``
    is explicit (:data:`TRUNCATIONS`). Before its first request it asks the runner to start the servers of a
    ``serve: auto`` embedder (:func:`chunkstudy.llm.http.ensure_served`).
    """

    def __init__(self, spec: Any, key: str):
        from .llm import http

        self.where = f"embed.embedders.{key}"
        self.base_urls = http.urls(spec.base_url)
        if not self.base_urls:
            raise EmbedError(f"{self.where}: backend 'openai' needs base_url (e.g. http://host:8000/v1)")
        self.url = self.base_urls[0] + "/embeddings"
        self.model = spec.model
        self.concurrency = spec.concurrency
        self.truncation = spec.truncation
        self.max_tokens = spec.max_seq_length
        self.pool = http.JsonPool(self.base_urls, "/embeddings", where=self.where, api_key_env=spec.api_key_env,
                                  per_replica=spec.concurrency, max_retries=spec.max_retries,
                                  retry_backoff_s=spec.retry_backoff_s, timeout_s=spec.timeout_s,
                                  breaker_failures=spec.breaker_failures, retry_after_max_s=RETRY_AFTER_CAP_S,
                                  sleep=lambda s: _sleep(s))
        self._served = False
        self.dimension = 0  # the vectors' dimension, from the first reply

    @property
    def n_requests(self) -> int:
        return self.pool.n_requests

    @property
    def n_retries(self) -> int:
        return self.pool.n_retries

    @property
    def _session(self) -> Any:
        return self.pool._session

    def _body(self, batch: list[str]) -> dict:
        body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.truncation == "start":
            # no truncation_side: vLLM then truncates in the tokenizer as sentence-transformers does (the closing
            # [SEP] kept); an explicit side slices the tokens after the special ones were added (min cosine 0.9987
            # to sentence-transformers on a long demo text, measured: docs/servers.md)
            body.update(truncate_prompt_tokens=self.max_tokens)
        return body

    def _parse(self, reply: dict, texts: Sequence[str], url: str) -> np.ndarray:
        """The reply's vectors in the order of ``texts`` (float64, as sent), checked as a whole: its ``index``
        fields a permutation of ``0..n-1`` (:func:`chunkstudy.llm.http.permutation_problem`), one length, and not
        one vector for every text (:func:`identical_batch`); else :class:`BadReply` naming the server, the model
        and the cause. Finite, non-zero and normalised are :func:`check_vectors`' (after normalisation)."""
        from .llm import http

        n, who = len(texts), f"{self.where} (server {url}, model {self.model!r})"
        try:
            indices = [d["index"] for d in reply["data"]]
            vecs = [d["embedding"] for d in reply["data"]]
        except (KeyError, TypeError) as e:
            raise BadReply(f"{who} sent a malformed reply ({e!r}): {str(reply)[:200]}") from None
        if (problem := http.permutation_problem(indices, n)) is not None:
            raise BadReply(f"{who}: sent {n} texts, got {len(indices)} vectors whose index {problem}: each text must "
                           f"have exactly one vector, numbered 0..{n - 1}; nothing of this batch is stored")
        if len({len(v) if isinstance(v, list) else -1 for v in vecs}) > 1:
            raise BadReply(f"{who} returned vectors of different lengths in one reply "
                           f"({sorted({len(v) if isinstance(v, list) else -1 for v in vecs})}); nothing of this "
                           "batch is stored")
        try:
            arr = np.asarray([vecs[indices.index(i)] for i in range(n)], dtype=np.float64).reshape(n, -1)
        except (TypeError, ValueError) as e:
            raise BadReply(f"{who} sent vectors that are not lists of numbers ({e}); nothing of this batch is "
                           "stored") from None
        if (least := identical_batch(arr, texts)) is not None:
            raise BadReply(f"{who}: the reply gives its {n} texts ({len(distinct_texts(texts))} distinct) all the "
                           f"same vector (least cosine {least:.9f} >= {IDENTICAL_MIN_COSINE}): the server is not "
                           "embedding what it is sent; nothing of this batch is stored")
        return arr

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        from .llm import LLMError, StageError, http

        if not self._served:
            try:
                http.ensure_served(self.base_urls, self.where)
            except StageError as e:
                raise EmbedError(f"{self.where}: {e}") from None
            self._served = True
        batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
        try:
            replies = self.pool.run([self._body(b) for b in batches])
        except http.GaveUp as e:
            hint = ""
            if e.permanent and any(f"HTTP {c}" in str(e) for c in (400, 413, 422)):
                longest = max((len(t) for t in texts), default=0)
                hint = (f" (the longest text of this batch has {longest} characters; an over-long input is refused "
                        f"under truncation: {self.truncation!r}, see embed.TRUNCATIONS)")
            raise EmbedError(f"{self.where}: {e}{hint}") from None
        except (LLMError, StageError) as e:
            raise EmbedError(f"{self.where}: {e}") from None
        vecs = [self._parse(r, b, self.url) for r, b in zip(replies, batches)]
        for b, v in zip(batches, vecs):
            self.dimension = self.dimension or v.shape[1]
            if v.shape[1] != self.dimension:  # np.concatenate would fail with a bare ValueError
                raise EmbedError(f"{self.where}: {', '.join(self.base_urls)} returned vectors of dimension "
                                 f"{v.shape[1]} (text {text_key(b[0])}) after vectors of dimension {self.dimension} "
                                 "in this run: the server's model changed under it; nothing of this batch is stored")
        return np.concatenate(vecs)


def load_embedder(spec: EmbedderParams, key: str, show_progress: bool = False) -> Embedder:
    """An :class:`Embedder` for ``params embed.embedders[key]``; nothing loads until the first ``encode``."""
    return Embedder(spec, key, show_progress=show_progress)


def text_key(text: str) -> str:
    """The store key of an exact text: sha256 of its UTF-8 bytes (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
