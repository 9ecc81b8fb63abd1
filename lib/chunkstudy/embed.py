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

from . import identity, models
from .embed_checks import (IDENTICAL_MIN_COSINE, NORM_TOLERANCE, BadReply, BadVector, EmbedError, bad_rows,
                           check_vectors, distinct_texts, identical_batch, normalise, text_key, unit_rows)
from .embed_served import RETRY_AFTER_CAP_S, TRUNCATIONS, ServedEmbeddings
from .params import EmbedderParams

__all__ = ["IDENTICAL_MIN_COSINE", "NORM_TOLERANCE", "RETRY_AFTER_CAP_S", "TRUNCATIONS", "BadReply",
           "BadVector", "EmbedError", "Embedder", "bad_rows", "check_vectors", "distinct_texts", "identical_batch",
           "load_embedder", "normalise", "text_key", "unit_rows"]
_normalise = normalise  # the name the store's tests and older callers use
_sleep = time.sleep  # the openai backend's waits between retries (tests replace it to read them)

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_BGE_V15 = re.compile(r"bge-[a-z]+-en-v1\.5", re.IGNORECASE)
KINDS = ("query", "passage")


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


ASSUMED_SEQ_LENGTH = models.ASSUMED_SEQ_LENGTH


def seq_length(spec: Any) -> tuple[int, str, int | None]:
    """``(length, source, the model's own)`` of an embedder record: the tokens it reads of a text. ``length`` is
    ``max_seq_length`` where the parameter file states it (``source`` "parameter file"), else the model's own
    (:func:`chunkstudy.models.own_max_seq_length`: "model (sentence_bert_config.json)"), else
    :data:`ASSUMED_SEQ_LENGTH` ("assumed: the model states none"). A served model's own length is its server's
    ``max_model_len`` (:meth:`Embedder.settle_identity`), not known here: "assumed" until then."""
    own, where = (None, "") if spec.backend == "openai" else models.own_max_seq_length(spec.model)
    if spec.max_seq_length is not None:
        return int(spec.max_seq_length), "parameter file", own
    if own is not None:
        return own, f"model ({where})", own
    return ASSUMED_SEQ_LENGTH, "assumed: the model states none", None


def length_note(key: str, length: int, source: str, own: int | None) -> str | None:
    """The note 04 prints when a parameter file's ``max_seq_length`` is not the model's own (None when it is, or
    the model states none): which length applies and what the model says."""
    if source != "parameter file" or own is None or own == length:
        return None
    return (f"embed.embedders.{key}: max_seq_length {length} from the parameter file, where the model's own is {own}"
            f": texts are cut at {length} tokens")


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
        self.max_seq_length, self.length_source, self.own_length = seq_length(self.spec)
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
        try:  # a server's model is known by its answers instead (identity)
            self.source = None if self.backend == "openai" else models.content_key(self.spec.model)
        except ValueError as e:
            raise EmbedError(f"{where}.model: {e}") from None
        self.identity: identity.Identity | None = None
        self._key: str | None = None
        self._registry: str | Path | None = None  # the folder whose identity registry this embedder settled in
        if self.backend == "openai":
            self._apply_identity(identity.handed(where))  # what the runner settled for this stage, if anything

    @property
    def model_key(self) -> str:
        """The store's key of this embedder's vectors (class docstring); for a served model, settled by its answers
        first (:meth:`settle_identity`, without a registry when the store has not settled it)."""
        if self._key is None:
            if self.backend == "openai" and self.identity is None:
                self.settle_identity()
            self._key = self._model_key()
        return self._key

    @model_key.setter
    def model_key(self, value: str) -> None:
        self._key = value

    @property
    def declared_key(self) -> str:
        """:attr:`model_key` without the served model's answers: what the parameters alone say (the run's plan
        compares embedders by it, asking no server)."""
        return self._model_key(with_identity=False)

    def _model_key(self, with_identity: bool = True) -> str:
        ident = {"backend": self.backend, "model": self.spec.model, "max_seq_length": self.max_seq_length,
                 "instruction": self.instruction}
        if self.source is not None:
            ident["source"] = self.source  # the model's content: a folder's digest, a hub model's commit
        if with_identity and self.identity is not None:
            ident["identity"] = self.identity.fingerprint  # a served model's answers to the canary texts
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

    # ------------------------------------------------------------------------------------------- identity
    def settle_identity(self, folder: str | Path | None = None) -> identity.Identity | None:
        """A served model's identity (:mod:`chunkstudy.identity`): the one the runner handed this stage, else its
        answers to the canary texts, asked now (one request; in a run the runner first starts a ``serve: auto``
        server), matched in the registry of ``folder`` (the store's). When the server does not answer, the answers
        recorded last for its declaration stand for it, with a note; with none recorded an :class:`EmbedError` says
        why the vectors cannot be keyed. ``model_key``, the dimension every vector must have and (``max_seq_length``
        not stated) the length, the server's ``max_model_len``, follow. None for a model run here."""
        if folder is not None:
            self._registry = folder
        if self.backend != "openai" or self.identity is not None:
            return self.identity
        m = self._load()

        def canary() -> tuple[dict, str]:
            m.served()
            return m.canary()

        ident = identity.settle_client(f"embed.embedders.{self.key}", "embed", self.spec, self._registry, canary,
                                       m.base_urls[0], EmbedError)
        self._apply_identity(ident)
        return ident

    def _apply_identity(self, ident: identity.Identity | None) -> None:
        """Take a served model's identity: its vectors' dimension, and the server's ``max_model_len`` as the length
        where the parameter file states none; the model key is made again."""
        self.identity = ident
        if ident is None:
            return
        self._want_dim = ident.dim or self._want_dim
        if ident.max_model_len:
            self.own_length = ident.max_model_len
            if self.spec.max_seq_length is None:
                self.max_seq_length, self.length_source = ident.max_model_len, "server (max_model_len)"
        elif self.spec.max_seq_length is None:
            self.length_source = "assumed: the server reports no max_model_len"
        if self._model is not None:
            self._model.max_tokens = self.max_seq_length
        self._key = None

    def _check_recorded(self) -> None:
        """Once the servers of this embedder answer for its first request: a key made from the answers recorded for
        its declaration (its server was down) must still hold (:func:`chunkstudy.identity.verify_recorded`)."""
        self.identity = identity.verify_recorded(self.identity, "embed", self.spec, self._registry,
                                                 self._load().canary, EmbedError)

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
            self._model = ServedEmbeddings(self.spec, self.key, self.max_seq_length, lambda s: _sleep(s),
                                           self._check_recorded)
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
        if self.backend == "openai" and self.identity is not None and self.identity.dim:
            return self.identity.dim  # its answers to the canary texts had it
        m = self._load()
        if self.backend == "sentence-transformers":
            get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
            return int(get())
        return int(self.encode(["dimension probe"], "passage").shape[1])


def load_embedder(spec: EmbedderParams, key: str, show_progress: bool = False) -> Embedder:
    """An :class:`Embedder` for ``params embed.embedders[key]``; nothing loads until the first ``encode``."""
    return Embedder(spec, key, show_progress=show_progress)

