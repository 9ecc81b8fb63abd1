"""Late pooling ("late chunking"; Günther et al. 2024, "Late Chunking: Contextual Chunk Embeddings Using
Long-Context Embedding Models"): a chunk's vector is pooled from the token embeddings of its whole document, so
context from outside the chunk reaches it. The definitions are in ``docs/beyond.md`` ("Late pooling"); in short:

* **One sequence per document.** The document's text is encoded as one token sequence (the chunking offsets are
  half-open character indices into it, content only). A chunk's prefix, when it has one, is put into the sequence
  immediately before the chunk's first content character (:func:`compose`): its tokens are encoded with the
  document, so they contextualise the chunk and its neighbours, but they are never pooled. Without prefixes the
  sequence is the document's text itself, so every prefix-free chunk set of a document (A0, A2, G2, a user's)
  shares one encoding.
* **Macro windows.** A sequence longer than the encoder's window is encoded in macro windows of
  ``window`` tokens (the model's special tokens included: ``[CLS] ... [SEP]`` for BERT) that overlap by
  ``overlap`` content tokens (:func:`macro_windows`); the last window is moved back to end at the sequence's end,
  so every window is full. A token seen in two windows takes its embedding from the one where it has more context
  on its shorter side (:func:`token_sources`): the overlap is split at its middle, so every token has at least
  ``overlap / 2`` tokens of context on each side away from the document's ends. (The paper's reference code keeps
  the earlier window's embedding of every overlap token, which leaves the last tokens of a window with almost no
  right context; the rule here is symmetric.)
* **Which tokens a chunk pools** (:func:`assign_tokens`): a token belongs to the chunk whose content holds its
  first character; special tokens and prefix tokens belong to none. A token straddling a chunk boundary (a cut
  inside a word) therefore counts once, for the chunk it starts in. A chunk that no token starts in (its content
  lies inside a token that starts before it) pools the tokens that overlap it instead.
* **The vector**: the mean of the chunk's token embeddings (the model's last hidden states), then the model's own
  modules after its pooling (Dense, Normalize, if any), then L2-normalised. A model trained to pool otherwise
  (the BGE models pool the CLS token, their ``modules.json`` says) is refused unless ``embed.late_pooling: mean``
  asks for the mean anyway (:func:`late_pooling`), and the late report's ``pooling`` column says which it was.

**Store.** Pooled vectors are kept in the embedding store under :func:`late_model_key` (the embedder's own
``model_key`` plus the mode, the rules' version, the window and the overlap) and :func:`late_key` (the sequence
text and the chunk's content span in it), through :meth:`chunkstudy.embed_store.EmbeddingStore.put`, so the
store's keys for texts are unchanged; a rerun encodes nothing (:func:`embed_late`).

Cost: :class:`LateEncoder` counts the sequences, windows and tokens it encodes (special tokens and the overlap's
second encoding included) and its seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from .. import design, models
from .. import progress as _progress
from ..errors import ChunkstudyError
from ..embed import EmbedError, Embedder, precision_context, text_key

if TYPE_CHECKING:
    import pandas as pd

    from ..embed_store import EmbeddingStore

#: The version of the rules above (sequence layout, window split, token assignment, pooling); part of every store
#: key of a late vector, so a change of rule never reads vectors pooled under another.
LATE_RULES = "late1"
#: The embedding mode of a late-pooled condition (``conditions.extra.<NAME>.embedding``).
LATE = design.LATE


class LateError(ChunkstudyError, ValueError):
    """A document or its chunks cannot be late-pooled (the message names the document and the chunk)."""


@dataclass(frozen=True)
class LateDocument:
    """One document to late-pool: its ``text``, its chunks' ``spans`` (half-open character offsets into ``text``,
    in document order, not overlapping; content is ``text[start:end].strip()``, as the chunk tables define it) and,
    optionally, one prefix per chunk (``()``: none; ``""`` for a chunk without one) and the chunks' ids (``()``:
    errors name the chunk by its index)."""

    doc_id: str
    text: str
    spans: tuple[tuple[int, int], ...]
    prefixes: tuple[str, ...] = ()
    chunk_ids: tuple[str, ...] = ()

    def chunk_name(self, i: int) -> str:
        """How an error names chunk ``i``: its id and span, or its index and span."""
        lo, hi = self.spans[i]
        return f"chunk {self.chunk_ids[i]!r} [{lo}, {hi})" if self.chunk_ids else f"chunk {i} [{lo}, {hi})"


@dataclass(frozen=True)
class Composed:
    """The sequence a document is encoded as: ``text`` and each chunk's content span in it (half-open character
    offsets into ``text``)."""

    text: str
    content: tuple[tuple[int, int], ...]


def compose(doc: LateDocument) -> Composed:
    """The sequence of ``doc`` (module docstring): the document's text with each chunk's prefix inserted right
    before the chunk's first content character, and each chunk's content span in that sequence. Without prefixes
    the sequence is ``doc.text`` and the spans are the chunks' stripped content offsets.

    Raises :class:`LateError` naming the document and chunk for spans out of order, overlapping, outside the text
    or without content, and for a prefix count other than the chunk count."""
    text, spans = doc.text, doc.spans
    if doc.prefixes and len(doc.prefixes) != len(spans):
        raise LateError(f"document {doc.doc_id!r}: {len(doc.prefixes)} prefixes for {len(spans)} chunks")
    parts: list[str] = []
    content: list[tuple[int, int]] = []
    pos = 0  # characters of text already copied into parts
    length = 0  # characters of the sequence so far
    prev_end = 0
    for i, (s, e) in enumerate(spans):
        if not (0 <= s < e <= len(text)) or s < prev_end:
            raise LateError(f"document {doc.doc_id!r}, chunk {i}: span [{s}, {e}) is out of order, overlaps the "
                            f"previous chunk (ending at {prev_end}) or lies outside the text ({len(text)} characters)")
        piece = text[s:e]
        cs = s + (len(piece) - len(piece.lstrip()))
        ce = e - (len(piece) - len(piece.rstrip()))
        if cs >= ce:
            raise LateError(f"document {doc.doc_id!r}, chunk {i}: span [{s}, {e}) has no content (only whitespace)")
        prefix = doc.prefixes[i] if doc.prefixes else ""
        parts += [text[pos:cs], prefix, text[cs:ce]]
        length += (cs - pos) + len(prefix)
        content.append((length, length + (ce - cs)))
        length += ce - cs
        pos = prev_end = ce
    parts.append(text[pos:])
    return Composed("".join(parts), tuple(content))


def macro_windows(n_tokens: int, capacity: int, overlap: int) -> list[tuple[int, int]]:
    """The macro windows over a sequence of ``n_tokens`` content tokens: half-open token ranges of ``capacity``
    tokens each (the encoder's window less its special tokens), consecutive starts ``capacity − overlap`` apart,
    the last one moved back to end at ``n_tokens``. One window ``[0, n_tokens)`` when the sequence fits; none for
    an empty one. Every token lies in at least one window, consecutive windows share at least ``overlap`` tokens."""
    if capacity < 1 or not 0 <= overlap < capacity:
        raise LateError(f"macro windows: need 0 <= overlap < capacity, got overlap {overlap}, capacity {capacity}")
    if n_tokens <= 0:
        return []
    if n_tokens <= capacity:
        return [(0, n_tokens)]
    stride = capacity - overlap
    starts = [0]
    while starts[-1] + capacity < n_tokens:
        starts.append(min(starts[-1] + stride, n_tokens - capacity))
    return [(a, a + capacity) for a in starts]


def token_sources(n_tokens: int, windows: Sequence[tuple[int, int]]) -> np.ndarray:
    """For each token, the index of the window its embedding is taken from: of the windows holding token ``i``,
    the one maximising ``min(i − start, end − 1 − i)``, a side at the sequence's own start or end counting as
    unbounded (no context is missing there); ties go to the earlier window. For two consecutive windows this cuts
    their overlap at its middle. int64 ``(n_tokens,)``."""
    if n_tokens == 0:
        return np.zeros(0, dtype=np.int64)
    i = np.arange(n_tokens)
    big = n_tokens + 1
    best = np.full(n_tokens, -1, dtype=np.int64)
    best_score = np.full(n_tokens, -1, dtype=np.int64)
    for w, (a, b) in enumerate(windows):
        left = np.where(a > 0, i - a, big)
        right = np.where(b < n_tokens, b - 1 - i, big)
        score = np.where((i >= a) & (i < b), np.minimum(left, right), -1)
        better = score > best_score
        best[better], best_score[better] = w, score[better]
    if (best < 0).any():
        raise LateError(f"macro windows {list(windows)} leave token {int(np.flatnonzero(best < 0)[0])} of "
                        f"{n_tokens} uncovered")
    return best


def assign_tokens(offsets: np.ndarray, content: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Which chunk each token is pooled into: ``(token index, chunk index)`` pairs, int64 each.

    ``offsets``: ``(n_tokens, 2)`` half-open character spans of the tokens in the sequence (the tokenizer's offset
    mapping); ``content``: each chunk's content span in the sequence (:class:`Composed`), sorted. A token with an
    empty span (a special token) belongs to no chunk; another belongs to the chunk whose content holds its first
    character, if any (a prefix's tokens, and whitespace between chunks, belong to none). A chunk no token starts
    in takes every token that overlaps its content (each such token then also counts for the chunk it starts in).
    """
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    starts = np.array([c[0] for c in content], dtype=np.int64)
    ends = np.array([c[1] for c in content], dtype=np.int64)
    real = off[:, 1] > off[:, 0]
    chunk = np.searchsorted(starts, off[:, 0], side="right") - 1
    inside = real & (chunk >= 0) & (off[:, 0] < ends[np.clip(chunk, 0, None)])
    tok = np.flatnonzero(inside)
    ch = chunk[inside]
    empty = np.setdiff1d(np.arange(len(content)), ch)
    extra_t, extra_c = [], []
    for c in empty.tolist():
        over = np.flatnonzero(real & (off[:, 0] < ends[c]) & (off[:, 1] > starts[c]))
        extra_t.append(over)
        extra_c.append(np.full(len(over), c, dtype=np.int64))
    if extra_t:
        tok = np.concatenate([tok, *extra_t])
        ch = np.concatenate([ch, *extra_c])
    return tok.astype(np.int64), ch.astype(np.int64)


def default_window(embedder: Embedder) -> int:
    """The late-pooling window when ``embed.late_window`` is null: the embedder's ``max_seq_length``, the length it
    embeds a chunk at independently (special tokens included, as sentence-transformers counts it), so a late
    vector's tokens sit at positions the same model uses for an independent one (256 for all-MiniLM-L6-v2, whose
    512 position embeddings go past what it was fine-tuned on); at most :func:`encoder_window`. A longer window is
    the declared ``embed.late_window``."""
    return min(int(embedder.max_seq_length), encoder_window(embedder))


def encoder_window(embedder: Embedder) -> int:
    """The encoder's own window in tokens, special tokens included: the transformer's position embeddings
    (``max_position_embeddings``; less the padding offset of RoBERTa-style models, whose positions start after
    the pad index): the longest window late pooling accepts. 512 for all-MiniLM-L6-v2 (fine-tuned at 128 tokens,
    embedding at ``max_seq_length`` 256), 8,192 for jina-embeddings-v2. A model that declares none raises
    :class:`EmbedError`: give the window."""
    m = embedder.sentence_transformer()
    cfg = getattr(getattr(m[0], "auto_model", None), "config", None)
    n = getattr(cfg, "max_position_embeddings", None)
    if not n:
        raise EmbedError(f"embed.embedders.{embedder.key}: the model declares no max_position_embeddings; state "
                         "the late-pooling window explicitly")
    return int(models.usable_positions(str(getattr(cfg, "model_type", "")), n, getattr(cfg, "pad_token_id", 1)))


@dataclass
class _Seq:
    ids: np.ndarray
    offsets: np.ndarray
    windows: list[tuple[int, int]]
    sources: np.ndarray


class LateEncoder:
    """Encodes sequences in macro windows with one sentence-transformers embedder (torch runtime): ``window``
    tokens per window, the model's special tokens included, consecutive windows sharing ``overlap`` content
    tokens (module docstring). Batches windows of all the sequences it is given, longest first, ``batch_size`` of
    the embedder's record at a time, on its device and in its resolved precision.

    Counters since construction: ``n_sequences``, ``n_windows``, ``n_tokens`` (tokens fed to the model: every
    window's tokens, special tokens included, overlap tokens once per window), ``n_sequence_tokens`` (content
    tokens of the sequences: each once) and ``seconds`` (wall seconds of tokenising and encoding)."""

    def __init__(self, embedder: Embedder, *, window: int, overlap: int):
        self.embedder, self.window, self.overlap = embedder, int(window), int(overlap)
        self.n_sequences = self.n_windows = self.n_tokens = self.n_sequence_tokens = 0
        self.seconds = 0.0
        self._layout: tuple[int, int] | None = None
        self.model = embedder.sentence_transformer()
        if not 0 <= self.overlap < self.capacity:
            raise EmbedError(f"embed.late_overlap: {self.overlap} (late pooling with embed.embedders.{embedder.key}) "
                             f"must be >= 0 and below the window's {self.capacity} content tokens (window "
                             f"{self.window} less this tokenizer's {sum(self.layout)} special tokens)")
        limit = encoder_window(embedder)
        if self.window > limit:
            raise EmbedError(f"embed.late_window: {self.window} (late pooling with embed.embedders.{embedder.key}) "
                             f"exceeds the encoder's {limit} positions")

    @property
    def tokenizer(self) -> Any:
        return self.model.tokenizer

    @property
    def layout(self) -> tuple[int, int]:
        """Special tokens the tokenizer puts before and after one sequence: ``(1, 1)`` for BERT's [CLS] ... [SEP]."""
        if self._layout is None:
            marker = -7
            built = list(self.tokenizer.build_inputs_with_special_tokens([marker] * 3))
            at = [i for i, t in enumerate(built) if t == marker]
            if len(at) != 3 or at != list(range(at[0], at[0] + 3)):
                raise EmbedError(f"late pooling: the tokenizer of embed.embedders.{self.embedder.key} does not wrap "
                                 f"a sequence in special tokens as a prefix and a suffix ({built})")
            self._layout = (at[0], len(built) - at[-1] - 1)
        return self._layout

    @property
    def capacity(self) -> int:
        """Content tokens per window: ``window`` less the special tokens."""
        return self.window - sum(self.layout)

    @property
    def model_key(self) -> str:
        """The store's model key of this encoder's vectors (:func:`late_model_key`)."""
        return late_model_key(self.embedder, self.window, self.overlap)

    def _tokenize(self, texts: Sequence[str]) -> list[_Seq]:
        if not getattr(self.tokenizer, "is_fast", False):
            raise EmbedError(f"late pooling: embed.embedders.{self.embedder.key} has no fast tokenizer, so no "
                             "character offsets for its tokens")
        enc = self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                             verbose=False)
        out = []
        for ids, off in zip(enc["input_ids"], enc["offset_mapping"]):
            ids_a = np.asarray(ids, dtype=np.int64)
            wins = macro_windows(len(ids_a), self.capacity, self.overlap)
            out.append(_Seq(ids_a, np.asarray(off, dtype=np.int64).reshape(-1, 2), wins,
                            token_sources(len(ids_a), wins)))
        return out

    def _encode_windows(self, seqs: Sequence[_Seq], progress: bool) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(sequence, window, float32 (window tokens, dim))`` for every window of ``seqs``, longest first: the
        token embeddings of the window's content tokens (special tokens dropped)."""
        import torch

        jobs = [(u, w, a, b) for u, s in enumerate(seqs) for w, (a, b) in enumerate(s.windows)]
        jobs.sort(key=lambda j: (-(j[3] - j[2]), j[0], j[1]))
        front, _ = self.layout
        pad = self.tokenizer.pad_token_id or 0
        wants_types = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())
        bs = self.embedder.batch_size
        device = self.model.device
        cut = next((i for i, mod in enumerate(self.model) if type(mod).__name__ == "Pooling"), None)
        if cut is None:
            raise EmbedError(f"late pooling: embed.embedders.{self.embedder.key} has no Pooling module, so no token "
                             "embeddings before it")
        pre = [self.model[i] for i in range(cut)]
        with _progress.bar(len(jobs), f"late-pool {self.embedder.key} (windows)", unit="window",
                           disable=not (progress and jobs)) as bar:
            for i in range(0, len(jobs), bs):
                batch = jobs[i:i + bs]
                rows = [list(self.tokenizer.build_inputs_with_special_tokens(seqs[u].ids[a:b].tolist()))
                        for u, _, a, b in batch]
                width = max(len(r) for r in rows)
                ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, row in enumerate(rows):
                    ids[r, :len(row)] = torch.tensor(row, dtype=torch.long)
                    mask[r, :len(row)] = 1
                feats: dict[str, Any] = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
                if wants_types:
                    feats["token_type_ids"] = torch.zeros_like(ids).to(device)
                with torch.inference_mode(), precision_context(self.embedder.dtype):
                    for mod in pre:
                        feats = mod(feats)
                tokens = feats["token_embeddings"].float().cpu().numpy()
                self.n_windows += len(rows)
                self.n_tokens += sum(len(r) for r in rows)
                for r, (u, w, a, b) in enumerate(batch):
                    yield u, w, tokens[r, front:front + (b - a)]
                bar.update(len(batch))

    def token_embeddings(self, texts: Sequence[str], progress: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text, ``(float32 (n_tokens, dim) token embeddings, int64 (n_tokens, 2) character offsets)`` of its
        content tokens (no special tokens): each token's embedding from the window :func:`token_sources` picks.
        Holds every token's vector in memory: for inspection and tests; pooling (:func:`late_vectors`) never
        holds more than one batch of windows."""
        t0 = time.perf_counter()
        seqs = self._tokenize(texts)
        out = [np.zeros((len(s.ids), 0), dtype=np.float32) for s in seqs]
        for u, w, vecs in self._encode_windows(seqs, progress):
            s = seqs[u]
            a, b = s.windows[w]
            if out[u].shape[1] == 0:
                out[u] = np.zeros((len(s.ids), vecs.shape[1]), dtype=np.float32)
            keep = s.sources[a:b] == w
            out[u][a:b][keep] = vecs[keep]
        self.n_sequences += len(seqs)
        self.n_sequence_tokens += sum(len(s.ids) for s in seqs)
        self.seconds += time.perf_counter() - t0
        return [(v, s.offsets) for v, s in zip(out, seqs)]

    def finish(self, means: np.ndarray) -> np.ndarray:
        """Pooled means -> vectors: the model's modules after its Pooling module (Dense, Normalize, ...), then
        L2-normalised; float32."""
        import torch

        cut = next(i for i, mod in enumerate(self.model) if type(mod).__name__ == "Pooling")
        post = [self.model[i] for i in range(cut + 1, len(self.model))]
        x = np.asarray(means, dtype=np.float32)
        if post and len(x):
            param = next((p for mod in post for p in mod.parameters()), None)
            t = torch.from_numpy(x).to(self.model.device)
            if param is not None:
                t = t.to(param.dtype)
            feats: dict[str, Any] = {"sentence_embedding": t}
            with torch.inference_mode():
                for mod in post:
                    feats = mod(feats)
            x = feats["sentence_embedding"].float().cpu().numpy()
        n = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
        return (x / np.where(n > 0, n, 1.0)).astype(np.float32)


def _check_pooled(doc: LateDocument, comp: Composed, chunk_of_token: np.ndarray) -> None:
    """Raise :class:`LateError` naming the document and chunk when a chunk of ``doc`` gets no token
    (``chunk_of_token``: :func:`assign_tokens`' chunk per pooled token), before anything is encoded."""
    empty = np.setdiff1d(np.arange(len(comp.content)), chunk_of_token)
    if len(empty):
        i = int(empty[0])
        a, b = comp.content[i]
        raise LateError(f"document {doc.doc_id!r}, {doc.chunk_name(i)}: no token of the encoder's tokenizer falls in "
                        f"its content {comp.text[a:b][:40]!r}: it holds only characters the tokenizer drops "
                        f"(zero-width or control characters such as U+200B); {len(empty)} such chunk(s) in this "
                        "document. Remove those characters from the document or merge the chunk into its "
                        "neighbour; nothing was encoded for it")


def check_tokens(encoder: LateEncoder, docs: Sequence[LateDocument]) -> None:
    """Refuse, before any window is encoded, a chunk of ``docs`` that no token of the encoder's tokenizer falls in
    (:class:`LateError` naming its document and chunk id): tokenises every distinct sequence once."""
    composed = [compose(d) for d in docs]
    texts = list(dict.fromkeys(c.text for c in composed))
    seqs = dict(zip(texts, encoder._tokenize(texts))) if texts else {}
    for doc, comp in zip(docs, composed):
        _check_pooled(doc, comp, assign_tokens(seqs[comp.text].offsets, comp.content)[1])


def late_vectors(encoder: LateEncoder, docs: Sequence[LateDocument], progress: bool = False) -> list[np.ndarray]:
    """The late-pooled chunk vectors of each document: float32 ``(len(doc.spans), dim)``, unit rows, in span order.

    Documents whose sequences are identical (the same text without prefixes, as the prefix-free chunk sets of one
    document are) are tokenised and encoded once; the windows of all sequences are batched together. A chunk's
    vector is ``finish(mean of its tokens' embeddings)`` (module docstring; the sum is accumulated in float64 as
    each batch of windows is encoded, so no document's token embeddings are held whole)."""
    t0 = time.perf_counter()
    if encoder.embedder.precision_pending:
        encoder.embedder.settle_precision([d.text for d in docs])
    composed = [compose(d) for d in docs]
    unique: dict[str, int] = {}
    for comp in composed:
        unique.setdefault(comp.text, len(unique))
    texts = list(unique)
    seqs = encoder._tokenize(texts)
    users: list[list[tuple[int, np.ndarray, np.ndarray]]] = [[] for _ in texts]  # per sequence: (doc, token, chunk)
    for d, comp in enumerate(composed):
        u = unique[comp.text]
        tok, ch = assign_tokens(seqs[u].offsets, comp.content)
        _check_pooled(docs[d], comp, ch)
        users[u].append((d, tok, ch))
    sums: list[np.ndarray | None] = [None] * len(docs)
    counts = [np.zeros(len(d.spans), dtype=np.int64) for d in docs]
    for u, w, vecs in encoder._encode_windows(seqs, progress):
        seq = seqs[u]
        a, b = seq.windows[w]
        for d, tok, ch in users[u]:
            sel = (tok >= a) & (tok < b)
            sel[sel] = seq.sources[tok[sel]] == w
            if not sel.any():
                continue
            t, c = tok[sel], ch[sel]
            order = np.argsort(c, kind="stable")
            c_sorted = c[order]
            heads = np.flatnonzero(np.r_[True, c_sorted[1:] != c_sorted[:-1]])
            acc = sums[d]
            if acc is None:
                acc = sums[d] = np.zeros((len(docs[d].spans), vecs.shape[1]), dtype=np.float64)
            acc[c_sorted[heads]] += np.add.reduceat(vecs[t[order] - a].astype(np.float64), heads, axis=0)
            counts[d] += np.bincount(c, minlength=len(docs[d].spans))
    out = []
    for d, doc in enumerate(docs):
        acc = sums[d]
        assert acc is not None  # every chunk has a token, so the document was accumulated
        out.append(encoder.finish(acc / counts[d][:, None]))
    encoder.n_sequences += len(seqs)
    encoder.n_sequence_tokens += sum(len(q.ids) for q in seqs)
    encoder.seconds += time.perf_counter() - t0
    return out


# ---------------------------------------------------------------------------------------------------------- store

def late_model_key(embedder: Embedder, window: int, overlap: int) -> str:
    """The store's model key of late-pooled vectors: ``<embedder.model_key>.<LATE_RULES>-w<window>-o<overlap>``,
    e.g. ``all-MiniLM-L6-v2-256-1a2b3c4d5e.late1-w512-o128``. It names the mode, the model (and all that its
    ``model_key`` names: backend, precision, ...), the window and the overlap; settle a pending ``dtype: auto``
    first (the model key follows it)."""
    return f"{embedder.model_key}.{LATE_RULES}-w{int(window)}-o{int(overlap)}"


def late_key(composed: Composed, chunk: int) -> str:
    """The store key of one late-pooled chunk vector: sha256 of ``"late\\0" + sequence + "\\0" + "a:b"``, where
    ``[a, b)`` is the chunk's content span in the sequence. The sequence holds the document and every prefix, so
    the key changes with anything that changes the vector (the model, window and overlap are the model key's)."""
    a, b = composed.content[chunk]
    return text_key(f"late\0{composed.text}\0{a}:{b}")


def embed_late(store: "EmbeddingStore", encoder: LateEncoder, docs: Sequence[LateDocument],
               progress: bool = False) -> list[np.ndarray]:
    """:func:`late_vectors` through the embedding store: only documents with a chunk vector not yet stored under
    :attr:`LateEncoder.model_key` are encoded, in groups of about ``store.flush_every`` chunk vectors (documents that share a sequence in one
    group, so it is encoded once), each group written as one checked shard before the next is encoded (a killed
    run resumes after its last group). Returns
    the vectors of each document, float32 ``(len(doc.spans), dim)``, as :func:`late_vectors` would."""
    if encoder.embedder.precision_pending:
        encoder.embedder.settle_precision([d.text for d in docs], store.folder)
    mk, kind = encoder.model_key, "passage"
    composed = [compose(d) for d in docs]
    keys = [[late_key(c, i) for i in range(len(c.content))] for c in composed]
    todo_keys = set(store.missing(mk, kind, [k for ks in keys for k in ks]))
    by_sequence: dict[str, list[int]] = {}  # documents sharing a sequence go to one group: it is encoded once
    for d, ks in enumerate(keys):
        if any(k in todo_keys for k in ks):
            by_sequence.setdefault(composed[d].text, []).append(d)
    buckets = list(by_sequence.values())
    group: list[int] = []
    for j, bucket in enumerate(buckets):
        group += bucket
        if sum(len(keys[g]) for g in group) >= store.flush_every or j == len(buckets) - 1:
            vecs = late_vectors(encoder, [docs[g] for g in group], progress)
            store.put(mk, kind, [k for g in group for k in keys[g]], np.concatenate(vecs))
            group = []
    return [store.get(mk, kind, ks) for ks in keys]


def documents_from_chunks(chunks: "pd.DataFrame", documents: "pd.DataFrame",
                          with_prefixes: bool) -> tuple[list[LateDocument], np.ndarray]:
    """One :class:`LateDocument` per document of ``chunks`` (one condition's rows of the chunks table: ``doc_id``,
    ``start``, ``end``, ``prefix``), its spans in offset order, with the rows' prefixes when ``with_prefixes``;
    and the row positions of ``chunks`` in the order the documents' vectors come back (so ``vecs[k]`` of the
    concatenated result belongs to row ``order[k]``)."""
    text = dict(zip(documents["doc_id"], documents["text"]))
    missing = sorted(set(chunks["doc_id"]) - set(text))
    if missing:
        raise LateError(f"chunks: {len(missing)} doc_id(s) not in documents, e.g. {missing[0]!r}")
    pos = np.arange(len(chunks))
    frame = chunks.assign(_pos=pos).sort_values(["doc_id", "start", "end"], kind="stable")
    docs, order = [], []
    for doc_id, g in frame.groupby("doc_id", sort=False):
        spans = tuple((int(s), int(e)) for s, e in zip(g["start"], g["end"]))
        prefixes = tuple(str(p) for p in g["prefix"]) if with_prefixes else ()
        ids = tuple(str(c) for c in g["chunk_id"]) if "chunk_id" in g else ()
        docs.append(LateDocument(str(doc_id), text[doc_id], spans, prefixes, ids))
        order.extend(g["_pos"].tolist())
    return docs, np.asarray(order, dtype=np.int64)


# ---------------------------------------------------------------------------------------------- stage 04's part

#: The columns of 04's ``late_report`` (one row per late-pooled condition and embedder).
REPORT_COLUMNS = ("condition", "embedder", "model_key", "window", "overlap", "n_chunks", "n_sequences",
                  "sequence_tokens", "tokens_read", "n_windows_run", "tokens_run", "seconds", "pooling")


def model_pooling(embedder: Embedder) -> str:
    """How the embedder's model pools its token states into one vector: its Pooling module's mode (what its
    ``modules.json`` and ``1_Pooling/config.json`` declare: ``mean``, ``cls``, ``max``, ``lasttoken``, ...)."""
    pool = next((m for m in embedder.sentence_transformer() if type(m).__name__ == "Pooling"), None)
    if pool is None:
        return "none"
    mode = pool.pooling_mode  # sentence-transformers 5: a mode name, or a tuple of them for concatenated poolings
    return mode if isinstance(mode, str) else "+".join(mode)


def late_pooling(embedder: Embedder, choice: str) -> str:
    """What late pooling does with ``embedder`` under ``embed.late_pooling`` = ``choice``, as the late report states
    it: ``mean`` for a mean-pooled model, ``mean (the model pools cls)`` when ``choice`` is ``mean`` for a model
    that pools otherwise. With ``model`` such a model is refused (:class:`LateError`): the mean of a CLS model's
    token states is off its training distribution, so that choice must be explicit."""
    mode = model_pooling(embedder)
    if mode == "mean":
        return "mean"
    if choice == "mean":
        return f"mean (the model pools {mode})"
    raise LateError(f"late pooling with embed.embedders.{embedder.key} ({embedder.spec.model}): the model pools "
                    f"{mode!r}, not the mean of its token states (its modules.json), and late pooling means the "
                    f"chunk's tokens. Set embed.late_pooling: mean to pool them anyway (the late report says so), "
                    f"or late-pool with a mean-pooled model")


def sequence_tokens(encoder: LateEncoder, docs: Sequence[LateDocument]) -> list[int]:
    """Content tokens of each distinct sequence of ``docs`` (:func:`compose`) under the encoder's tokenizer, in
    first-appearance order: what :func:`chunkstudy.stats.cost.late_window_tokens` charges a late condition."""
    texts = list(dict.fromkeys(compose(d).text for d in docs))
    if not texts:
        return []
    return [len(x) for x in encoder.tokenizer(texts, add_special_tokens=False, truncation=False,
                                              verbose=False)["input_ids"]]


def window_tokens(encoder: LateEncoder, lengths: Sequence[int]) -> int:
    """Tokens the encoder reads for sequences of ``lengths`` content tokens: every macro window's tokens, its
    special tokens included (:func:`macro_windows`; what :attr:`LateEncoder.n_tokens` counts when it encodes them,
    and :func:`chunkstudy.stats.cost.late_window_tokens` in closed form)."""
    special = sum(encoder.layout)
    return int(sum((b - a) + special for n in lengths for a, b in macro_windows(int(n), encoder.capacity,
                                                                                encoder.overlap)))


def late_conditions(conditions: Sequence[design.Condition]) -> list[str]:
    """The names of the conditions (:class:`chunkstudy.design.Condition`, e.g. ``Params.run_conditions``) whose
    embedding mode is ``late``, in their order: a size-matched twin (``<NAME>-fixed``) follows its condition and
    is embedded as it is."""
    return [c.name for c in conditions if c.embedding == LATE]


def embed_conditions(chunks: "pd.DataFrame", documents: "pd.DataFrame", late: Sequence[str],
                     embedders: Any, store: "EmbeddingStore", vectors: Any, ids: "pd.DataFrame", *,
                     window: int | None, overlap: int | None, pooling: str = "model", progress: bool = False) -> dict:
    """Stage 04's late pooling: every late condition's chunk vectors with every embedder, through the store.

    ``late``: the conditions whose embedding mode is late (:func:`late_conditions`; a condition whose chunks have
    prefixes has them encoded with the document, never pooled); ``embedders``: the ``embed.embedders`` records;
    ``vectors`` and ``ids``: the text vectors per embedder and their row ids
    (:func:`chunkstudy.embed_store.embed_all`, :func:`chunkstudy.embed_store.ids_table`); ``window``: tokens per
    macro window (None: each embedder's ``max_seq_length``, :func:`default_window`); ``overlap``: the windows'
    shared content tokens (None: a quarter of the window); ``pooling``: ``embed.late_pooling`` (:func:`late_pooling`:
    a model that does not mean-pool is refused unless it is ``mean``). Every chunk is checked for a token of each
    encoder's tokenizer before anything is encoded (:func:`check_tokens`).

    Each late chunk gets a row of its own after the ``n`` text rows, ``n + i`` in the chunks table's order, the
    same row in every embedder's matrix, so ``vectors[e][chunks.text_row]`` stays the rule. Returns
    ``{"chunks": the table with the late conditions' text_row moved there, "vectors": {embedder: the text rows,
    then the late rows (float32)}, "ids": ``ids`` then the late rows' (text_row, sha256 = :func:`late_key`,
    n_chars of the sequence), "report": one row per (condition, embedder): :data:`REPORT_COLUMNS`}``
    (``tokens_read``: the macro windows' tokens, whatever the cache held; ``*_run`` and ``seconds``: what this
    run encoded). Without late conditions, the inputs unchanged and an empty report."""
    import pandas as pd

    from .. import embed as _embed

    n_texts = len(ids)
    out = chunks.copy()
    names = list(late)
    unknown = [c for c in names if c not in set(out["condition"])]
    if unknown:
        raise LateError(f"late pooling: condition(s) {unknown} have no chunks in the chunks table")
    pooled: dict[str, list[np.ndarray]] = {key: [] for key in embedders}
    rows_ids: list[dict] = []
    report: list[dict] = []
    row = int(n_texts)
    loaded = {key: _embed.load_embedder(spec, key) for key, spec in embedders.items()} if late else {}
    for key, e in loaded.items():  # the parameter file's rule says so at load; a record made in code meets it here
        if e.backend != "sentence-transformers" or e.runtime != "torch":
            raise LateError(f"condition(s) {', '.join(names)}: embedding: late pools the token states of every "
                            f"embedder in torch, and embed.embedders.{key} is backend {e.backend!r}, runtime "
                            f"{e.runtime!r}")
    how = {key: late_pooling(e, pooling) for key, e in loaded.items()}  # before any document is encoded
    encoders = {key: LateEncoder(e, window=w, overlap=overlap if overlap is not None else w // 4)
                for key, e in loaded.items() for w in [window if window is not None else default_window(e)]}
    sets = {}
    for cond in late:
        sel = np.flatnonzero((out["condition"] == cond).to_numpy())
        with_prefixes = bool((out["prefix"].iloc[sel].astype(str) != "").any())
        sets[cond] = (sel, *documents_from_chunks(out.iloc[sel], documents, with_prefixes))
        for enc in encoders.values():  # a chunk no token falls in stops 04 here, before any window is encoded
            check_tokens(enc, sets[cond][1])
    for cond in late:
        sel, docs, order = sets[cond]
        rows = sel[order]  # positions in out, in the order the vectors come back
        composed = [compose(d) for d in docs]
        keys = [late_key(c, i) for c in composed for i in range(len(c.content))]
        lengths = [len(c.text) for c in composed for _ in c.content]
        for key, e in loaded.items():
            enc = LateEncoder(e, window=encoders[key].window, overlap=encoders[key].overlap)
            vecs = np.concatenate(embed_late(store, enc, docs, progress)) if docs else np.zeros((0, e.dim), "f4")
            pooled[key].append(vecs)
            lengths_tok = sequence_tokens(enc, docs)
            report.append({"condition": cond, "embedder": key, "model_key": enc.model_key, "window": enc.window,
                           "overlap": enc.overlap, "n_chunks": int(len(rows)), "n_sequences": len(lengths_tok),
                           "sequence_tokens": int(sum(lengths_tok)), "tokens_read": window_tokens(enc, lengths_tok),
                           "n_windows_run": enc.n_windows, "tokens_run": enc.n_tokens, "seconds": enc.seconds,
                           "pooling": how[key]})
        new_rows = np.arange(row, row + len(rows), dtype=np.int64)
        out.iloc[rows, out.columns.get_loc("text_row")] = new_rows
        rows_ids += [{"text_row": int(r), "sha256": k, "n_chars": int(n)} for r, k, n in zip(new_rows, keys, lengths)]
        row += len(rows)
    stacked = {key: np.concatenate([np.asarray(vectors[key], dtype=np.float32), *pooled[key]]).astype(np.float32)
               if pooled[key] else vectors[key] for key in vectors}
    new_ids = pd.DataFrame(rows_ids, columns=["text_row", "sha256", "n_chars"]).astype(
        {"text_row": "int64", "n_chars": "int64"})
    return {"chunks": out, "vectors": stacked,
            "ids": pd.concat([ids, new_ids], ignore_index=True) if len(new_ids) else ids,
            "report": pd.DataFrame(report, columns=list(REPORT_COLUMNS)).astype(
                {c: "int64" for c in REPORT_COLUMNS if c not in ("condition", "embedder", "model_key", "seconds",
                                                                  "pooling")})}
