"""An embedder served over HTTP (``backend: openai``): ``POST {base_url}/embeddings`` through the machinery every
server client shares (:class:`chunkstudy.llm.http.JsonPool`), each reply checked as a whole
(:meth:`ServedEmbeddings.parse`), and the model known by its answers to the canary texts
(:meth:`ServedEmbeddings.canary`, :mod:`chunkstudy.identity`). :class:`chunkstudy.embed.Embedder` runs it."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import identity
from .llm.base import PREFLIGHT_TIMEOUT_S
from .embed_checks import (IDENTICAL_MIN_COSINE, BadReply, EmbedError, check_vectors, distinct_texts, identical_batch,
                           text_key, unit_rows)

#: ``truncation`` of the openai backend: ``server`` sends no truncation field (the server's own rule applies: OpenAI's
#: API, text-embeddings-inference without ``--auto-truncate`` and vLLM all refuse an over-long input with an HTTP
#: 4xx, which stops the stage naming the server's message); ``start`` asks the server to keep the first
#: ``max_seq_length`` tokens, as sentence-transformers does locally, with vLLM's request field
#: ``truncate_prompt_tokens`` (servers that do not know it may reject the request).
TRUNCATIONS = ("server", "start")
#: longest wait a server's Retry-After may impose on one retry, seconds.
RETRY_AFTER_CAP_S = 120.0


class ServedEmbeddings:
    """``POST {base_url}/embeddings`` (base_url ends in ``/v1``, as for the OpenAI client; a list of them: replicas),
    key from the env, through the HTTP machinery every server client shares (:class:`chunkstudy.llm.http.JsonPool`).

    Batches of ``batch_size`` texts go out over one pooled HTTP session, up to ``concurrency`` at a time on each
    replica, and come back in order. A connection error, a timeout, HTTP 5xx or a status in
    :data:`chunkstudy.llm.http.RETRY_STATUS` is retried (the one policy, :mod:`chunkstudy.llm.retry`) up to
    ``max_retries`` times, waiting ``retry_backoff_s`` x 2^attempt, at least what the server's ``Retry-After`` asks
    (capped at :data:`RETRY_AFTER_CAP_S`); ``breaker_failures`` consecutive connection failures or 5xx stop the
    stage; any other HTTP error fails at once, naming the URL, the status and the server's message. ``truncation``
    is explicit (:data:`TRUNCATIONS`). Before its first request it asks the runner to start the servers of a
    ``serve: auto`` embedder (:func:`chunkstudy.llm.http.ensure_served`).
    """

    def __init__(self, spec: Any, key: str, max_tokens: int, sleep: Callable[[float], Any],
                 after_served: Callable[[], Any] | None = None):
        from .llm import http

        self.where = f"embed.embedders.{key}"
        self.base_urls = http.urls(spec.base_url)
        if not self.base_urls:
            raise EmbedError(f"{self.where}: backend 'openai' needs base_url (e.g. http://host:8000/v1)")
        self.url = self.base_urls[0] + "/embeddings"
        self.model = spec.model
        self.concurrency = spec.concurrency
        self.truncation = spec.truncation
        self.max_tokens = max_tokens  # the embedder's resolved max_seq_length (truncation: start)
        self.api_key_env = spec.api_key_env
        self.after_served = after_served  # once the servers answer for this client's first request
        self.pool = http.JsonPool.of(spec, self.base_urls, "/embeddings", where=self.where,
                                     retry_after_max_s=RETRY_AFTER_CAP_S, sleep=sleep)
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

    def body(self, batch: Sequence[str]) -> dict:
        body: dict[str, Any] = {"model": self.model, "input": list(batch), "encoding_format": "float"}
        if self.truncation == "start":
            # no truncation_side: vLLM then truncates in the tokenizer as sentence-transformers does (the closing
            # [SEP] kept); an explicit side slices the tokens after the special ones were added (min cosine 0.9987
            # to sentence-transformers on a long demo text, measured: docs/servers.md)
            body.update(truncate_prompt_tokens=self.max_tokens)
        return body

    def parse(self, reply: dict, texts: Sequence[str], url: str) -> np.ndarray:
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
            # indices is a permutation of 0..n-1 (checked above): the reply's k-th vector is text indices[k]'s
            arr = np.asarray(vecs, dtype=np.float64).reshape(n, -1)[np.argsort(indices)]
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

        self.served()
        batches = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]
        try:
            replies = self.pool.run([self.body(b) for b in batches])
        except http.GaveUp as e:
            hint = ""
            if e.permanent and any(f"HTTP {c}" in str(e) for c in (400, 413, 422)):
                longest = max((len(t) for t in texts), default=0)
                hint = (f" (the longest text of this batch has {longest} characters; an over-long input is refused "
                        f"under truncation: {self.truncation!r}, see embed.TRUNCATIONS)")
            raise EmbedError(f"{self.where}: {e}{hint}") from None
        except (LLMError, StageError) as e:
            raise EmbedError(f"{self.where}: {e}") from None
        vecs = [self.parse(r, b, self.url) for r, b in zip(replies, batches)]
        for b, v in zip(batches, vecs):
            self.dimension = self.dimension or v.shape[1]
            if v.shape[1] != self.dimension:  # np.concatenate would fail with a bare ValueError
                raise EmbedError(f"{self.where}: {', '.join(self.base_urls)} returned vectors of dimension "
                                 f"{v.shape[1]} (text {text_key(b[0])}) after vectors of dimension {self.dimension} "
                                 "in this run: the server's model changed under it; nothing of this batch is stored")
        return np.concatenate(vecs)

    def served(self) -> None:
        """Before the first request: ask the runner to start the servers of a ``serve: auto`` embedder
        (:func:`chunkstudy.llm.http.ensure_served`; nothing outside a run), then ``after_served`` (the embedder checks
        that a server its recorded answers stood for answers so)."""
        from .llm import StageError, http

        if self._served:
            return
        try:
            http.ensure_served(self.base_urls, self.where)
        except StageError as e:
            raise EmbedError(f"{self.where}: {e}") from None
        self._served = True
        if self.after_served is not None:
            self.after_served()

    def canary(self) -> tuple[dict, str]:
        """The model's answers to :data:`chunkstudy.identity.CANARY_TEXTS` (one request, checked as every reply
        is; the vectors unit-normalised) with its ``GET /models`` entry (vLLM's ``max_model_len``), and the URL
        asked: what :mod:`chunkstudy.identity` knows the model by. An :class:`EmbedError` names the server when it
        does not answer."""
        from .llm import LLMError, http

        url = self.base_urls[0]
        body = {"model": self.model, "input": list(identity.CANARY_TEXTS), "encoding_format": "float"}
        meta, reply = identity.ask(self.where, url, self.model, http.auth_headers(self.api_key_env), PREFLIGHT_TIMEOUT_S,
                                   lambda: self.pool.post(body), "embeddings", (LLMError,))
        vecs = self.parse(reply, identity.CANARY_TEXTS, url + "/embeddings")
        unit = unit_rows(vecs)
        check_vectors(unit, [text_key(t) for t in identity.CANARY_TEXTS],  # finite, not zero: as every vector
                      f"{self.where} (server {url}, model {self.model!r}), its canary texts")
        return identity.answers("embed", unit, meta), url

