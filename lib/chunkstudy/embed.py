"""Embedders and the persistent embedding store (DESIGN.md "Models and generation"; paper 4, "Embedders").

* :func:`load_embedder` builds an :class:`Embedder` from one entry of ``params embed.embedders``. Backends:
  ``sentence-transformers`` (local path, ``package:`` name or hub name), ``flag`` (FlagEmbedding, optional,
  imported lazily) and ``openai`` (any OpenAI-compatible ``/v1/embeddings`` server: vLLM, text-embeddings-
  inference, ...). Vectors are float32 and L2-normalised, so inner product = cosine. The model loads on the first
  :meth:`Embedder.encode`.
* Queries of ``bge-*-en-v1.5`` models get the BGE instruction
  ``"Represent this sentence for searching relevant passages: "`` when ``query_instruction == "auto"``; passages
  never get an instruction.
* :class:`EmbeddingStore` keys vectors by ``(model_key, kind, exact text)``: each distinct text is embedded once
  across conditions and runs; every finished batch is on disk before the next begins (a killed run resumes), and
  a rerun makes zero model calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from . import models

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "
_BGE_V15 = re.compile(r"bge-[a-z]+-en-v1\.5", re.IGNORECASE)
KINDS = ("query", "passage")


class EmbedError(RuntimeError):
    """An embedder cannot be built or called (the message names the parameter key and the backend)."""


def query_instruction(spec: Mapping) -> str:
    """The instruction prepended to queries: ``"auto"`` -> BGE's for bge-*-en-v1.5 models, else ``""``; any
    other value is used verbatim (``""`` = none)."""
    qi = spec.get("query_instruction", "auto")
    if qi == "auto":
        return BGE_QUERY_INSTRUCTION if _BGE_V15.search(str(spec.get("model", ""))) else ""
    return qi


def _normalise(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(n > 0, n, 1.0)).astype(np.float32)


class Embedder:
    """One embedder from the parameters. ``encode(texts, kind)`` -> float32 ``(n, dim)``, unit-norm rows.

    ``model_key`` names what determines the vectors (backend, model name as written in the parameters,
    max_seq_length, query instruction): two parameter keys with the same ``model_key`` share stored vectors.
    """

    def __init__(self, spec: Mapping, key: str, show_progress: bool = False):
        self.spec = dict(spec)
        self.key = key
        self.backend = self.spec.get("backend", "sentence-transformers")
        if self.backend not in ("sentence-transformers", "flag", "openai"):
            raise EmbedError(f"embed.embedders.{key}.backend: {self.backend!r} is not one of "
                             f"['sentence-transformers', 'flag', 'openai']")
        if not self.spec.get("model"):
            raise EmbedError(f"embed.embedders.{key}.model is empty")
        self.instruction = query_instruction(self.spec)
        self.batch_size = int(self.spec.get("batch_size", 32))
        self.max_seq_length = int(self.spec.get("max_seq_length", 512))
        self.device = self.spec.get("device", "cpu")
        self.show_progress = show_progress
        self._model = None
        ident = {"backend": self.backend, "model": self.spec["model"], "max_seq_length": self.max_seq_length,
                 "instruction": self.instruction}
        h = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", str(self.spec["model"]).rstrip("/").split("/")[-1].split(":")[-1])
        self.model_key = f"{base}-{self.max_seq_length}-{h}"

    # ------------------------------------------------------------------------------------------- backends
    def _load(self):
        if self._model is not None:
            return self._model
        if self.backend == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            m = SentenceTransformer(models.resolve(self.spec["model"]), device=self.device)
            m.max_seq_length = self.max_seq_length
            self._model = m
        elif self.backend == "flag":
            try:
                from FlagEmbedding import FlagModel
            except ImportError as e:
                raise EmbedError(f"embed.embedders.{self.key}: backend 'flag' needs FlagEmbedding "
                                 f"(pip install 'chunkstudy[flag]'): {e}") from None
            # the instruction is added here (encode), so FlagEmbedding gets none of its own
            self._model = FlagModel(models.resolve(self.spec["model"]), use_fp16=self.device != "cpu")
        else:
            self._model = _OpenAIEmbeddings(self.spec, self.key)
        return self._model

    def encode(self, texts: Sequence[str], kind: str = "passage") -> np.ndarray:
        """Embed ``texts`` as ``kind`` (``"query"`` gets the instruction); float32 ``(len(texts), dim)``, unit norm."""
        if kind not in KINDS:
            raise EmbedError(f"encode: kind {kind!r} is not one of {list(KINDS)}")
        texts = [(self.instruction + t) if kind == "query" else t for t in texts]
        m = self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.backend == "sentence-transformers":
            v = m.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=self.show_progress)
        elif self.backend == "flag":
            v = m.encode(texts, batch_size=self.batch_size, max_length=self.max_seq_length)
        else:
            v = m.encode(texts, batch_size=self.batch_size)
        return _normalise(v)

    @property
    def dim(self) -> int:
        m = self._load()
        if self.backend == "sentence-transformers":
            get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
            return int(get())
        return int(self.encode(["dimension probe"], "passage").shape[1])


class _OpenAIEmbeddings:
    """``POST {base_url}/embeddings`` (base_url ends in ``/v1``, as for the OpenAI client), key from the env."""

    def __init__(self, spec: Mapping, key: str):
        if not spec.get("base_url"):
            raise EmbedError(f"embed.embedders.{key}: backend 'openai' needs base_url (e.g. http://host:8000/v1)")
        self.url = spec["base_url"].rstrip("/") + "/embeddings"
        self.model = spec["model"]
        self.key_env = spec.get("api_key_env", "OPENAI_API_KEY")
        self.where = f"embed.embedders.{key}"

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import requests

        headers = {"Content-Type": "application/json"}
        if os.environ.get(self.key_env):
            headers["Authorization"] = f"Bearer {os.environ[self.key_env]}"
        out = []
        for i in range(0, len(texts), batch_size):
            batch = texts[i:i + batch_size]
            try:
                r = requests.post(self.url, json={"model": self.model, "input": batch,
                                                  "encoding_format": "float"}, headers=headers, timeout=300)
            except requests.RequestException as e:
                raise EmbedError(f"{self.where}: {self.url} unreachable: {e}") from None
            if r.status_code != 200:
                raise EmbedError(f"{self.where}: {self.url} answered HTTP {r.status_code}: {r.text[:300]}")
            data = sorted(r.json()["data"], key=lambda d: d["index"])
            if len(data) != len(batch):
                raise EmbedError(f"{self.where}: sent {len(batch)} texts, got {len(data)} embeddings")
            out.append(np.asarray([d["embedding"] for d in data], dtype=np.float32))
        return np.concatenate(out)


def load_embedder(spec: Mapping, key: str, show_progress: bool = False) -> Embedder:
    """An :class:`Embedder` for ``params embed.embedders[key]``; nothing loads until the first ``encode``."""
    return Embedder(spec, key, show_progress=show_progress)


# ------------------------------------------------------------------------------------------------------ store
def text_key(text: str) -> str:
    """The store key of an exact text: sha256 of its UTF-8 bytes (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingStore:
    """Persistent vectors keyed by ``(model_key, kind, exact text)`` under ``folder``.

    Layout: ``folder/<model_key>/<kind>/shard-NNNNNN.npy`` (float32 rows) and ``shard-NNNNNN.keys`` (one sha256
    per row, in row order). The ``.npy`` is written first and the ``.keys`` renamed into place last, so a shard
    counts only once complete; a run killed mid-batch loses that batch alone. One writer per folder at a time.

    ``n_embedded`` counts texts sent to a model and ``n_calls`` model calls, since this object was made.
    """

    def __init__(self, folder: str | Path, flush_every: int = 256):
        self.folder = Path(folder)
        self.flush_every = int(flush_every)
        self.n_embedded = 0
        self.n_calls = 0
        self._index: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}

    def _dir(self, model_key: str, kind: str) -> Path:
        return self.folder / model_key / kind

    def _load_index(self, model_key: str, kind: str) -> dict[str, tuple[int, int]]:
        k = (model_key, kind)
        if k not in self._index:
            idx: dict[str, tuple[int, int]] = {}
            d = self._dir(model_key, kind)
            for keys in sorted(d.glob("shard-*.keys")) if d.is_dir() else []:
                shard = int(keys.stem.split("-")[1])
                for row, h in enumerate(keys.read_text().split()):
                    idx.setdefault(h, (shard, row))
            self._index[k] = idx
        return self._index[k]

    def _write_shard(self, model_key: str, kind: str, hashes: list[str], vecs: np.ndarray) -> int:
        from .artifacts import atomic_path, write_array

        d = self._dir(model_key, kind)
        d.mkdir(parents=True, exist_ok=True)
        existing = [int(p.stem.split("-")[1]) for p in d.glob("shard-*.keys")]
        shard = max(existing, default=-1) + 1
        write_array(d / f"shard-{shard:06d}.npy", np.ascontiguousarray(vecs, dtype=np.float32))
        with atomic_path(d / f"shard-{shard:06d}.keys") as tmp:
            tmp.write_text("\n".join(hashes) + "\n")
        return shard

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def count(self, model_key: str, kind: str) -> int:
        """Distinct texts stored for ``(model_key, kind)``."""
        return len(self._load_index(model_key, kind))

    def embed(self, embedder: Embedder, texts: Sequence[str], kind: str = "passage",
              progress: bool = False) -> np.ndarray:
        """Vectors of ``texts`` (float32 ``(len(texts), dim)``, in order), embedding only distinct unseen texts.

        Unseen texts go to the model longest first in groups of ``flush_every``; each group is written as a shard
        before the next is embedded.
        """
        if kind not in KINDS:
            raise EmbedError(f"EmbeddingStore.embed: kind {kind!r} is not one of {list(KINDS)}")
        texts = list(texts)
        hashes = [text_key(t) for t in texts]
        idx = self._load_index(embedder.model_key, kind)
        todo: dict[str, str] = {}
        for h, t in zip(hashes, texts):
            if h not in idx and h not in todo:
                todo[h] = t
        order = sorted(todo, key=lambda h: (-len(todo[h]), h))  # similar lengths batch together: less padding
        bar = None
        if progress and order:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(order), desc=f"embed {embedder.key} ({kind})", unit="text")
        for i in range(0, len(order), self.flush_every):
            group = order[i:i + self.flush_every]
            vecs = embedder.encode([todo[h] for h in group], kind)
            self.n_calls += 1
            self.n_embedded += len(group)
            shard = self._write_shard(embedder.model_key, kind, group, vecs)
            for row, h in enumerate(group):
                idx[h] = (shard, row)
            if bar is not None:
                bar.update(len(group))
        if bar is not None:
            bar.close()
        return self._gather(embedder.model_key, kind, hashes)

    def _gather(self, model_key: str, kind: str, hashes: list[str]) -> np.ndarray:
        idx = self._load_index(model_key, kind)
        d = self._dir(model_key, kind)
        locs = [idx[h] for h in hashes]
        shards: dict[int, np.ndarray] = {}
        for s in sorted({s for s, _ in locs}):
            shards[s] = np.load(d / f"shard-{s:06d}.npy", mmap_mode="r")
        if not locs:
            return np.zeros((0, 0), dtype=np.float32)
        sid = np.fromiter((s for s, _ in locs), dtype=np.int64, count=len(locs))
        row = np.fromiter((r for _, r in locs), dtype=np.int64, count=len(locs))
        out = np.empty((len(locs), shards[locs[0][0]].shape[1]), dtype=np.float32)
        for s, arr in shards.items():
            sel = sid == s
            out[sel] = arr[row[sel]]
        return out


def ids_table(texts: Sequence[str]) -> "pd.DataFrame":
    """The row order of a vectors file: ``text_row``, ``sha256`` of the exact text, ``n_chars``."""
    import pandas as pd

    return pd.DataFrame({"text_row": np.arange(len(texts), dtype=np.int64),
                         "sha256": [text_key(t) for t in texts],
                         "n_chars": np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))})


def embed_all(specs: Mapping[str, Mapping], texts: Sequence[str], store: EmbeddingStore, kind: str = "passage",
              progress: bool = True) -> tuple[dict[str, np.ndarray], "pd.DataFrame"]:
    """Embed ``texts`` with every embedder in ``specs`` (``params embed.embedders``) through ``store``.

    Returns ``({key: float32 (len(texts), dim)}, report)`` where the report has one row per embedder:
    ``embedder, model_key, n_texts, n_embedded, n_calls, seconds`` (``n_embedded == 0`` on a rerun).
    """
    import time

    import pandas as pd

    vectors, rows = {}, []
    for key, spec in specs.items():
        e = load_embedder(spec, key)
        n0, c0, t0 = store.n_embedded, store.n_calls, time.perf_counter()
        vectors[key] = store.embed(e, texts, kind, progress=progress)
        rows.append({"embedder": key, "model_key": e.model_key, "n_texts": len(texts),
                     "n_embedded": store.n_embedded - n0, "n_calls": store.n_calls - c0,
                     "seconds": time.perf_counter() - t0, "dim": int(vectors[key].shape[1]) if len(texts) else 0})
    return vectors, pd.DataFrame(rows)
