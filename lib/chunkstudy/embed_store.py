"""The persistent embedding store (docs/models.md, "The embedding store"), and the embedding of a run's texts by
every embedder through it (:func:`embed_all`). The embedders themselves are :mod:`chunkstudy.embed`.

:class:`EmbeddingStore` keys vectors by ``(model_key, kind, exact text)``: each distinct text is embedded once
across conditions and runs; every finished group is on disk before the next begins (a killed run resumes), a
rerun makes zero model calls, and every shard carries its shape and checksum, verified when the store is read:
a damaged or swapped shard is set aside (renamed, named in a warning) and its texts are embedded again. The
warning also reaches the runner's output and the report's warnings (:func:`chunkstudy.progress.warn`). Every vector
is checked on its way in (:func:`chunkstudy.embed.check_vectors`: finite, norm > 0, one dimension): a bad one stops
the stage, naming the embedder, its server or model and the text, and is never stored.
"""

from __future__ import annotations

import hashlib
import re
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    import pandas as pd

import numpy as np

from . import artifacts
from . import progress as _progress
from .embed import KINDS, EmbedError, Embedder, bad_rows, check_vectors, load_embedder, text_key
from .params import EmbedderParams


class ShardWarning(UserWarning):
    """An embedding-store shard failed its check and was set aside (its texts are embedded again)."""


#: first line of a shard's ``.keys`` file: its rows, dimension, dtype and the sha256 of its ``.npy`` file
_SHARD_HEADER = re.compile(r"^# shard rows=(\d+) dim=(\d+) dtype=(\w+) sha256=([0-9a-f]{64})$")


class EmbeddingStore:
    """Persistent vectors keyed by ``(model_key, kind, exact text)`` under ``folder``.

    Layout: ``folder/<model_key>/<kind>/shard-NNNNNN.npy`` (float32 rows) and ``shard-NNNNNN.keys``: a header line
    ``# shard rows=R dim=D dtype=float32 sha256=<of the .npy file>``, then one text sha256 per row, in row order.
    The ``.npy`` is written first and the ``.keys`` renamed into place last, so a shard counts only once complete;
    a run killed mid-group loses that group alone. One writer per folder at a time.

    **Checked on read.** When the store first reads a (model_key, kind) folder it checks every shard: the header's
    rows and key count agree, the ``.npy`` loads with that shape and dtype, and its bytes have that sha256. A shard
    that fails (truncated, swapped with another, rewritten, its keys lost) is *set aside*: both files are renamed
    with a ``.bad`` suffix (never deleted), a :class:`ShardWarning` names them and the reason, and its texts count as
    unseen, so the next :meth:`embed` recomputes them. Shards written before checksums existed (no header) are
    checked for shape only. A shard with a NaN, infinite or all-zero row (written before vectors were checked on
    their way in) fails too, and so does one whose vectors have another dimension than the newest shard's (the
    model under the key changed: a server's model replaced), so a store heals in one run.

    ``flush_every`` (params ``embed.flush_every``): unseen texts go to the model in groups of this many, each
    written as one shard before the next group starts. Larger groups give the model (or an OpenAI-compatible
    server, with ``concurrency``) more to batch and cost fewer files; a kill loses at most one group.

    ``n_embedded`` counts texts sent to a model and ``n_calls`` model calls, since this object was made;
    ``set_aside`` lists the shards this object set aside.
    """

    def __init__(self, folder: str | Path, flush_every: int):
        self.folder = Path(folder)
        self.flush_every = int(flush_every)
        if self.flush_every < 1:
            raise EmbedError(f"embed.flush_every must be >= 1, got {flush_every}")
        self.n_embedded = 0
        self.n_calls = 0
        self.n_tokens = 0  # tokens the model read for the texts it embedded (where the store counts tokens)
        self.set_aside: list[Path] = []
        self._token_counts: dict[str, dict[str, int]] = {}  # tokenizer id -> text hash -> tokens
        self._index: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
        self._dims: dict[tuple[str, str], int | None] = {}  # the stored vectors' dimension per (model_key, kind)

    def _dir(self, model_key: str, kind: str) -> Path:
        return self.folder / model_key / kind

    @staticmethod
    def _check_shard(keys_path: Path) -> tuple[list[str], str | None, int | None]:
        """The shard's text hashes, why it fails its check (None when it passes) and its vectors' dimension."""
        npy = keys_path.with_suffix(".npy")
        lines = keys_path.read_text().split("\n")
        m = _SHARD_HEADER.match(lines[0]) if lines else None
        hashes = [h for h in (lines[1:] if m else lines) if h]
        if not npy.is_file():
            return hashes, f"{npy.name} is missing", None
        raw = npy.read_bytes()
        try:
            import io

            arr = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            return hashes, f"{npy.name} does not load ({e})", None
        if m is not None:
            rows, dim, dtype, digest = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
            if hashlib.sha256(raw).hexdigest() != digest:
                return hashes, f"{npy.name} does not have the checksum its keys file records (swapped or rewritten)", None
            if arr.shape != (rows, dim) or str(arr.dtype) != dtype:
                return hashes, f"{npy.name} holds {arr.dtype} {arr.shape}, its keys file records {dtype} {(rows, dim)}", None
            if len(hashes) != rows:
                return hashes, f"{keys_path.name} lists {len(hashes)} texts for {rows} rows", None
        elif arr.ndim != 2 or arr.shape[0] != len(hashes):
            return hashes, f"{npy.name} holds shape {arr.shape} for {len(hashes)} texts", None
        for mask, what in zip(bad_rows(arr), ("holds NaN or infinity", "is all zero")):
            if mask.any():  # written before every vector was checked on its way in (embed.check_vectors)
                i = int(np.argmax(mask))
                return hashes, (f"the vector of row {i} (text {hashes[i]}) {what} ({int(mask.sum())} of its "
                                f"{len(hashes)} rows)"), None
        return hashes, None, int(arr.shape[1])

    def _set_aside(self, keys_path: Path, reason: str) -> None:
        moved = [artifacts.set_aside(p) for p in (keys_path.with_suffix(".npy"), keys_path) if p.exists()]
        self.set_aside.extend(moved)
        shard = keys_path.with_suffix("")
        try:  # relative to the working directory (the project root, in a stage): no machine path in a report
            shard = shard.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            pass
        message = (f"embedding store: shard {shard} failed its check: {reason}; set aside as "
                   f"{', '.join(p.name for p in moved)}; its texts will be embedded again")
        warnings.warn(message, ShardWarning, stacklevel=3)
        _progress.warn(message)  # under the runner: its output, the stage's manifest and the report's warnings

    def _load_index(self, model_key: str, kind: str, model_dim: int | None = None) -> dict[str, tuple[int, int]]:
        """The stored texts of ``(model_key, kind)`` (text hash -> (shard, row)), every shard checked on the first
        read (class docstring). The store holds one dimension per key, the model's: ``model_dim`` where it is known
        (a served model's answers to the canary texts had it), else the newest good shard's. Shards of another were
        written by a model that changed under this key: they are set aside, for passages and queries alike, and
        their texts embedded again (:meth:`embed`)."""
        k = (model_key, kind)
        if model_dim is not None and self._dims.get(k) not in (None, model_dim):
            self._index.pop(k, None)  # read again: the model's dimension is not the stored one
        if k not in self._index:
            idx: dict[str, tuple[int, int]] = {}
            good: list[tuple[Path, int, list[str], int]] = []
            d = self._dir(model_key, kind)
            for keys in sorted(d.glob("shard-*.keys")) if d.is_dir() else []:
                hashes, problem, dim = self._check_shard(keys)
                if problem is not None:
                    self._set_aside(keys, problem)
                else:
                    good.append((keys, int(keys.stem.split("-")[1]), hashes, int(dim or 0)))
            newest = good[-1][3] if good else None
            want = model_dim if model_dim is not None else newest
            for keys, shard, hashes, d_shard in good:
                if d_shard != want:
                    whose = f"the model's {want} (its answers to the canary texts)" if model_dim is not None else \
                        f"those of the newest shard {want}"
                    self._set_aside(keys, f"its vectors have dimension {d_shard}, {whose}: the model under this key "
                                          "changed")
                    continue
                for row, h in enumerate(hashes):
                    idx.setdefault(h, (shard, row))
            self._index[k] = idx
            self._dims[k] = want if idx else None
        return self._index[k]

    def _write_shard(self, model_key: str, kind: str, hashes: list[str], vecs: np.ndarray) -> int:
        import io

        from .artifacts import atomic_path

        d = self._dir(model_key, kind)
        d.mkdir(parents=True, exist_ok=True)
        existing = [int(p.stem.split("-")[1]) for p in d.glob("shard-*.keys")]
        shard = max(existing, default=-1) + 1
        arr = np.ascontiguousarray(vecs, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[0] != len(hashes):
            raise EmbedError(f"embedding store: {len(hashes)} texts but vectors of shape {arr.shape}")
        buf = io.BytesIO()
        np.save(buf, arr)
        raw = buf.getvalue()
        with atomic_path(d / f"shard-{shard:06d}.npy") as tmp:
            tmp.write_bytes(raw)
        header = f"# shard rows={arr.shape[0]} dim={arr.shape[1]} dtype={arr.dtype} " \
                 f"sha256={hashlib.sha256(raw).hexdigest()}"
        with atomic_path(d / f"shard-{shard:06d}.keys") as tmp:
            tmp.write_text(header + "\n" + "\n".join(hashes) + "\n")
        return shard

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def count(self, model_key: str, kind: str) -> int:
        """Distinct texts stored for ``(model_key, kind)``."""
        return len(self._load_index(model_key, kind))

    def _batch_order(self, embedder: Embedder, todo: Mapping[str, str]) -> list[str]:
        """The hashes of ``todo`` (hash -> text) in the order the model gets them: longest first by the tokens the
        model sees (:meth:`Embedder.token_counts`, capped at ``max_seq_length``; counts are kept per tokenizer, so
        a second embedder of the same model counts nothing), then by characters, then by hash. A batch is padded
        to its longest text and padding is computed before it is masked: sorted by characters, a batch of QASPER
        chunk texts at 256 tokens was 13% padding, sorted by tokens 0.2% (bench/bench_embed.py)."""
        hashes = list(todo)
        lengths = {h: len(todo[h]) for h in hashes}
        cap = embedder.max_seq_length
        known = self._token_counts.setdefault(embedder.tokenizer_id, {}) if embedder.tokenizer_id else None
        if known is not None:
            new = [h for h in hashes if h not in known]
            for i in range(0, len(new), 1024):
                part = new[i:i + 1024]
                known.update(zip(part, embedder.token_counts([todo[h] for h in part])))
            return sorted(hashes, key=lambda h: (-min(known[h], cap), -lengths[h], h))
        return sorted(hashes, key=lambda h: (-lengths[h], h))

    def _tokens_read(self, embedder: Embedder, hashes: Sequence[str]) -> int:
        """Tokens the model reads for the texts of ``hashes``: each text's count (special tokens included) cut at
        ``max_seq_length``, from the counts :meth:`_batch_order` took; 0 where the store counts no tokens."""
        known = self._token_counts.get(embedder.tokenizer_id or "", {})
        cap = embedder.max_seq_length
        return int(sum(min(known[h], cap) for h in hashes if h in known))

    def embed(self, embedder: Embedder, texts: Sequence[str], kind: str = "passage",
              progress: bool = False, healed: bool = False) -> np.ndarray:
        """Vectors of ``texts`` (float32 ``(len(texts), dim)``, in order), embedding only distinct unseen texts.

        Unseen texts go to the model longest first (:meth:`_batch_order`) in groups of ``flush_every``; each group
        is checked (:func:`chunkstudy.embed.check_vectors`: finite, non-zero, normalised, one dimension) and
        written as a shard before the next is embedded.

        One rule heals the store, for passages and queries alike: a key holds the vectors of one model (a served
        model's key holds its answers to the canary texts, :meth:`Embedder.settle_identity`, so another model
        behind the same name has another key), in that model's dimension. Where the dimension is known before a
        text is embedded (a served model's canary vectors had it), shards of another dimension are set aside before
        any stored vector is read, whether a text is new or not; elsewhere, when the first new vectors show a
        dimension other than the stored one, the stored vectors are set aside and embedded again, once
        (``healed``: that happened).
        """
        if kind not in KINDS:
            raise EmbedError(f"EmbeddingStore.embed: kind {kind!r} is not one of {list(KINDS)}")
        texts = list(texts)
        embedder.settle_identity(self.folder)  # a served model: known by its answers (one request per process)
        if embedder.precision_pending:  # dtype: auto on a CPU with hardware bfloat16: one check per store
            embedder.settle_precision(texts, self.folder)
        hashes = [text_key(t) for t in texts]
        idx = self._load_index(embedder.model_key, kind, embedder.identity.dim if embedder.identity else None)
        k = (embedder.model_key, kind)
        stored_dim, run_dim = self._dims.get(k), None
        todo: dict[str, str] = {}
        for h, t in zip(hashes, texts):
            if h not in idx and h not in todo:
                todo[h] = t
        order = self._batch_order(embedder, todo)
        fresh: dict[int, np.ndarray] = {}
        # progress is reported after every piece of a group; a piece is a whole number of batches, so the model
        # sees the same batches as it would for the whole group (same padding, bit-identical vectors)
        piece = max(1, 256 // embedder.batch_size) * embedder.batch_size
        with _progress.bar(len(order), f"embed {embedder.key} ({kind})", unit="text",
                           disable=not (progress and order)) as bar:
            for i in range(0, len(order), self.flush_every):
                group = order[i:i + self.flush_every]
                parts = []
                for j in range(0, len(group), piece):
                    parts.append(embedder.encode([todo[h] for h in group[j:j + piece]], kind))
                    bar.update(len(group[j:j + piece]))
                vecs = check_vectors(np.concatenate(parts) if len(parts) > 1 else parts[0], group,
                                     embedder.describe(), run_dim if run_dim is not None else
                                     stored_dim if healed else None)
                run_dim = vecs.shape[1]
                self.n_calls += 1
                self.n_embedded += len(group)
                self.n_tokens += self._tokens_read(embedder, group)
                shard = self._write_shard(embedder.model_key, kind, group, vecs)
                if stored_dim not in (None, run_dim):
                    # the model under this key changed its dimension since the stored vectors were written (a
                    # server's model replaced): read the store again, which sets the shards of the old dimension
                    # aside (the newest shard's wins), and embed what they held
                    self._index.pop(k)
                    return self.embed(embedder, texts, kind, progress, healed=True)
                self._dims[k] = run_dim
                fresh[shard] = vecs
                for row, h in enumerate(group):
                    idx[h] = (shard, row)
        return self._gather(embedder.model_key, kind, hashes, fresh)

    # -------------------------------------------------------------------- vectors under keys of the caller's own
    # Vectors that are no function of one text (late-pooled chunk vectors: of a whole document and a span in it)
    # are stored under keys the caller derives (:func:`chunkstudy.chunks.late.late_key`) and a ``model_key`` that
    # names how they were computed (:func:`chunkstudy.chunks.late.late_model_key`), in shards exactly like the
    # texts' ones, checked on read the same way. The keys of :meth:`embed` are untouched by these methods.

    @staticmethod
    def _check_keyed(model_key: str, kind: str, keys: Sequence[str]) -> None:
        if kind not in KINDS:
            raise EmbedError(f"EmbeddingStore: kind {kind!r} is not one of {list(KINDS)}")
        bad = next((k for k in keys if not re.fullmatch(r"[0-9a-f]{64}", str(k))), None)
        if bad is not None:
            raise EmbedError(f"EmbeddingStore ({model_key}/{kind}): key {bad!r} is not a sha256 hex digest")

    def missing(self, model_key: str, kind: str, keys: Sequence[str]) -> list[str]:
        """The distinct ``keys`` (sha256 hex digests) not stored under ``(model_key, kind)``, in first-appearance
        order."""
        self._check_keyed(model_key, kind, keys)
        idx = self._load_index(model_key, kind)
        return [k for k in dict.fromkeys(keys) if k not in idx]

    def put(self, model_key: str, kind: str, keys: Sequence[str], vectors: np.ndarray) -> int:
        """Store ``vectors`` (float32 ``(len(keys), dim)``, row i under ``keys[i]``) under ``(model_key, kind)``:
        the rows whose key is not stored yet (first occurrence of a repeated key) are written as one checked shard.
        Returns the rows written (0: every key was stored already; nothing is written). Counts as one model call
        of ``len(written)`` texts in :attr:`n_calls` and :attr:`n_embedded`."""
        self._check_keyed(model_key, kind, keys)
        vecs = check_vectors(vectors, keys, f"EmbeddingStore.put ({model_key}/{kind})", self._dims.get(
            (model_key, kind)) if self._load_index(model_key, kind) else None)
        idx = self._load_index(model_key, kind)
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in idx:
                first.setdefault(k, i)
        if not first:
            return 0
        rows = list(first.values())
        shard = self._write_shard(model_key, kind, list(first), vecs[rows])
        self._dims[(model_key, kind)] = vecs.shape[1]
        for row, k in enumerate(first):
            idx[k] = (shard, row)
        self.n_calls += 1
        self.n_embedded += len(rows)
        return len(rows)

    def get(self, model_key: str, kind: str, keys: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``keys`` (float32 ``(len(keys), dim)``, in order); a KeyError names the first key
        not stored under ``(model_key, kind)``."""
        self._check_keyed(model_key, kind, keys)
        idx = self._load_index(model_key, kind)
        absent = next((k for k in keys if k not in idx), None)
        if absent is not None:
            raise KeyError(f"embedding store {self.folder}: no vector under {model_key}/{kind} for key {absent}")
        return self._gather(model_key, kind, list(keys))

    def _gather(self, model_key: str, kind: str, hashes: list[str],
                fresh: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """Rows for ``hashes``; shards just written (``fresh``) are taken from memory, the rest read from disk."""
        idx = self._load_index(model_key, kind)
        d = self._dir(model_key, kind)
        if not hashes:
            return np.zeros((0, 0), dtype=np.float32)
        locs = [idx[h] for h in hashes]
        sid = np.fromiter((s for s, _ in locs), dtype=np.int64, count=len(locs))
        row = np.fromiter((r for _, r in locs), dtype=np.int64, count=len(locs))
        shards: dict[int, np.ndarray] = {}
        for s in np.unique(sid).tolist():
            shards[s] = fresh[s] if fresh and s in fresh else np.load(d / f"shard-{s:06d}.npy", mmap_mode="r")
        out = np.empty((len(locs), shards[int(sid[0])].shape[1]), dtype=np.float32)
        if len(shards) == 1:
            out[:] = shards[int(sid[0])][row]
            return out
        order = np.argsort(sid, kind="stable")
        bounds = np.searchsorted(sid[order], list(shards) + [np.iinfo(np.int64).max])
        for j, (s, arr) in enumerate(shards.items()):
            sel = order[bounds[j]:bounds[j + 1]]
            out[sel] = arr[row[sel]]
        return out


def ids_table(texts: Sequence[str]) -> "pd.DataFrame":
    """The row order of a vectors file: ``text_row``, ``sha256`` of the exact text, ``n_chars``."""
    import pandas as pd

    return pd.DataFrame({"text_row": np.arange(len(texts), dtype=np.int64),
                         "sha256": [text_key(t) for t in texts],
                         "n_chars": np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))})


def embed_all(specs: Mapping[str, EmbedderParams], texts: Sequence[str], store: EmbeddingStore, kind: str = "passage",
              progress: bool = True) -> tuple[dict[str, np.ndarray], "pd.DataFrame"]:
    """Embed ``texts`` with every embedder in ``specs`` (``params embed.embedders``) through ``store``.

    Returns ``({key: float32 (len(texts), dim)}, report)`` where the report has one row per embedder:
    ``embedder, model_key, runtime, dtype, cpu_bf16, agreement_n, agreement_min, agreement_mean, n_texts,
    n_embedded, n_calls, n_tokens, seconds, dim, max_seq_length, max_seq_length_source, model_max_seq_length,
    identity`` (``n_embedded == 0`` on a rerun; ``n_tokens``: the tokens the model read for them, 0 where the store
    counts none; ``dtype`` is the resolved one, "server" for the openai backend; ``cpu_bf16`` the CPU's
    hardware-bfloat16 feature when ``dtype: auto`` could use it, and ``agreement_*`` the bfloat16-vs-float32 check
    that settled it, None without one; ``max_seq_length`` the tokens read of a text, where it came from and the
    model's own (:func:`chunkstudy.embed.seq_length`); ``identity`` a served model's fingerprint, None for one run
    here). A stated ``max_seq_length`` other than the model's own is noted (:func:`chunkstudy.embed.length_note`).
    """
    import pandas as pd

    from .embed import length_note

    vectors, rows = {}, []
    for key, spec in specs.items():
        e = load_embedder(spec, key)
        n0, c0, k0, t0 = store.n_embedded, store.n_calls, store.n_tokens, time.perf_counter()
        vectors[key] = store.embed(e, texts, kind, progress=progress)
        if (note := length_note(key, e.max_seq_length, e.length_source, e.own_length)) is not None:
            _progress.note(note)
        check = (e.precision or {}).get("check") or {}
        rows.append({"embedder": key, "model_key": e.model_key, "runtime": e.runtime, "dtype": e.dtype,
                     "cpu_bf16": (e.precision or {}).get("cpu_bf16"), "agreement_n": check.get("n"),
                     "agreement_min": check.get("min"), "agreement_mean": check.get("mean"),
                     "n_texts": len(texts),
                     "n_embedded": store.n_embedded - n0, "n_calls": store.n_calls - c0,
                     "n_tokens": store.n_tokens - k0,
                     "seconds": time.perf_counter() - t0, "dim": int(vectors[key].shape[1]) if len(texts) else 0,
                     "max_seq_length": e.max_seq_length, "max_seq_length_source": e.length_source,
                     "model_max_seq_length": e.own_length,
                     "identity": e.identity.fingerprint if e.identity is not None else None})
    return vectors, pd.DataFrame(rows)
