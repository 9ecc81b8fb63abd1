"""Chunk boundaries: sentence bounds, structural chunks, size-matched fixed windows (paper 3.2, "Size matching").

Conventions
-----------
* Offsets are half-open character indices ``[start, end)`` into ``documents.text``.
* Every chunk set tiles each document exactly: the first chunk starts at 0, each chunk ends where the next one
  starts, the last ends at ``len(text)``. Whitespace between two chunks (the paragraph separator ``"\\n\\n"`` or
  the space after a sentence) belongs to the *preceding* chunk, because cuts fall where a sentence starts.
* The content of a chunk, as embedded and as counted, is :func:`content`: the chunk's characters with leading and
  trailing whitespace removed (so a chunk's trailing separator is never embedded). Relevance (06_metrics) uses
  the raw offsets; whitespace carries no evidence.
* Token counts are *content* tokens of the embedder's own tokenizer, without special tokens
  (:func:`load_counter`). Prefix tokens are counted apart, in :mod:`chunkstudy.chunks.chunk_sets`.

Sentence boundaries come from pysbd 0.3 (English, ``clean=False``), run paragraph by paragraph (a paragraph start
is always a sentence start); each returned sentence is located in order with ``str.find`` from the end of the
previous one (what pysbd's ``char_span=True`` computes, without its per-sentence regex compilation, and exact for
repeated sentences). ``splitter="regex"`` is a fast fallback: a cut after ``.?!`` (and
closing quotes/brackets) followed by whitespace and an upper-case letter, digit, quote or bracket. A text is
segmented once per process (memoised on its sha256) and, with a store in use (:func:`use_bounds_store`, the
content-keyed :mod:`chunkstudy.chunks.bounds_store` that 02, 03 and 04 share), once per run: pysbd costs about 74 s
on the QASPER test split, which each of the three stages used to pay.

Token counts while cutting are sums over sentence units (each unit counted on its own). With a WordPiece
tokenizer (BERT/BGE/MiniLM) that sum equals the count of the concatenated text, because units meet at whitespace;
the reported ``n_content_tokens`` is always the direct count of :func:`content`.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from .. import models, progress
from ..params import ChunkingParams
from ..corpus import model as docmodel
from ..errors import ChunkstudyError

TokenCounter = Callable[[list], list]

STRUCTURAL_COLUMNS = ["doc_id", "start", "end", "section_id", "route_key", "n_content_tokens"]
WINDOW_COLUMNS = ["doc_id", "start", "end", "n_content_tokens"]


class ChunkingError(ChunkstudyError, ValueError):
    """Input tables cannot be chunked (the message names the document and the offending row)."""


# --------------------------------------------------------------------------------------------- token counting
@dataclass
class _HFCounter:
    """``counter(texts) -> [n tokens of each text]``: the tokenizer's content tokens, no special tokens, no
    truncation (a text longer than the model's window is counted whole)."""

    name: str
    _backend: Any = None
    _slow: Any = None

    def __call__(self, texts: Sequence[str]) -> list[int]:
        texts = list(texts)
        if not texts:
            return []
        if self._backend is not None:
            return [len(e.ids) for e in self._backend.encode_batch(texts, add_special_tokens=False)]
        ids = self._slow(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(x) for x in ids]


@functools.lru_cache(maxsize=None)
def load_counter(tokenizer_name: str) -> TokenCounter:
    """The content-token counter of ``tokenizer_name`` (a parameter-file model name, see :func:`models.resolve`).

    Memoised per process, so every stage and every condition counts with the same object.
    """
    path = models.resolve(tokenizer_name)
    if (Path(path) / "tokenizer.json").is_file():
        # the fast tokenizer's own backend, without importing transformers (seconds saved in every stage)
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
        backend.no_truncation()
        backend.no_padding()
        return _HFCounter(tokenizer_name, _backend=backend)
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - re-raised with the parameter that named it
        raise ChunkingError(f"chunking.tokenizer {tokenizer_name!r} (resolved to {path!r}) cannot be loaded: {e}")
    if getattr(tok, "is_fast", False):
        import copy

        backend = copy.deepcopy(tok.backend_tokenizer)
        backend.no_truncation()
        backend.no_padding()
        return _HFCounter(tokenizer_name, _backend=backend)
    return _HFCounter(tokenizer_name, _slow=tok)


# ----------------------------------------------------------------------------------------- sentence boundaries
_REGEX_CUT = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+(?=[A-Z0-9\"'\u201c\u2018(\[])")


@functools.lru_cache(maxsize=None)
def _pysbd_segmenter():
    import pysbd

    # char_span=False: pysbd's char_span mode compiles one regex per sentence (half its run time on QASPER);
    # _block_starts locates the sentences in order instead, which is what char_span computes.
    return pysbd.Segmenter(language="en", clean=False, char_span=False)


def _block_starts(block: str, splitter: str) -> list[int]:
    """Sentence starts inside one paragraph block (offsets relative to the block)."""
    if splitter == "regex":
        return [0] + [m.end() for m in _REGEX_CUT.finditer(block)]
    if splitter != "pysbd":
        raise ChunkingError(f"sentence splitter {splitter!r} is not one of ['pysbd', 'regex']")
    starts, pos = [], 0
    for sent in _pysbd_segmenter().segment(block):
        sent = sent.strip()
        s = block.find(sent, pos) if sent else -1
        if s < 0:  # clean=False keeps the text verbatim, so this is not expected; skip rather than guess
            continue
        starts.append(s)
        pos = s + len(sent)
    return starts


def _segment(text: str, splitter: str) -> tuple[int, ...]:
    """The sentence starts of ``text`` under ``splitter``, computed (what :func:`sentence_bounds` stores)."""
    out = {0}
    for m in re.finditer(r"[^\n]+(?:\n(?!\n)[^\n]*)*", text):  # blocks between blank lines (paragraphs)
        block, base = m.group(), m.start()
        for s in _block_starts(block, splitter):
            # a sentence starts at its first non-whitespace character
            while s < len(block) and block[s].isspace():
                s += 1
            if s < len(block):
                out.add(base + s)
    return tuple(sorted(out))


#: The code that decides a text's bounds: its source is part of :func:`bounds_method`, so bounds stored by one
#: version of it are never read by another.
_SEGMENTATION_CODE = (_segment, _block_starts, _pysbd_segmenter)


@functools.lru_cache(maxsize=None)
def bounds_method(splitter: str) -> str:
    """The identity of the segmentation ``splitter`` names, as stored bounds are keyed: the splitter, pysbd's version
    (``pysbd``) or the cut pattern (``regex``), and a digest of the code that turns either into bounds
    (:data:`_SEGMENTATION_CODE`). E.g. ``"pysbd-0.3.4-1f2e3d4c5b6a"``."""
    if splitter not in ("pysbd", "regex"):
        raise ChunkingError(f"sentence splitter {splitter!r} is not one of ['pysbd', 'regex']")
    import inspect
    from importlib import metadata

    h = hashlib.sha256(_REGEX_CUT.pattern.encode("utf-8"))
    for fn in _SEGMENTATION_CODE:
        h.update(inspect.getsource(inspect.unwrap(fn)).encode("utf-8"))
    version = metadata.version("pysbd") if splitter == "pysbd" else "re"
    return f"{splitter}-{version}-{h.hexdigest()[:12]}"


class BoundsStore(Protocol):
    """Where :func:`sentence_bounds` finds and keeps bounds across processes (stages), keyed by
    ``(bounds_method(splitter), text_key(text))``: :class:`chunkstudy.chunks.bounds_store.BoundsStore`."""

    def get(self, method: str, key: str) -> Sequence[int] | None: ...

    def put(self, method: str, key: str, bounds: Sequence[int]) -> None: ...


def text_key(text: str) -> str:
    """The content key of a text: sha256 of its UTF-8 bytes (hex), as the embedding store keys texts."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class _Segmentation:
    """This process's bounds: a memo keyed by ``(text_key, splitter)``, the store behind it, and the counts a stage
    reports (:func:`segmentation_counts`)."""

    memo: dict[tuple[str, str], tuple[int, ...]]
    store: BoundsStore | None = None
    segmented: int = 0
    from_store: int = 0


_SEG = _Segmentation({})


def use_bounds_store(store: BoundsStore | None) -> None:
    """Read and keep sentence bounds through ``store`` from now on in this process (None: memo only), with an
    empty memo and the counts at zero. A stage calls it first, so its counts are its own: 02, 03 and 04 run in
    separate kernels, and the first to meet a text segments it, the others read it from the store."""
    global _SEG
    _SEG = _Segmentation({}, store)


def segmentation_counts() -> dict[str, int]:
    """The distinct texts this process needed bounds for since :func:`use_bounds_store`: ``segmented`` (the
    splitter ran) and ``from_store`` (read back, not segmented); a stage writes them into its stats."""
    return {"texts": _SEG.segmented + _SEG.from_store, "segmented": _SEG.segmented, "from_store": _SEG.from_store}


def _valid_bounds(bounds: Sequence[int] | None, text: str) -> bool:
    if not bounds or bounds[0] != 0 or bounds[-1] >= len(text):
        return False
    return all(isinstance(b, int) for b in bounds) and all(a < b for a, b in zip(bounds, bounds[1:]))


def _bounds_of(text: str, splitter: str) -> tuple[int, ...]:
    key = text_key(text)
    got = _SEG.memo.get((key, splitter))
    if got is not None:
        return got
    stored = _SEG.store.get(bounds_method(splitter), key) if _SEG.store is not None else None
    if _valid_bounds(stored, text):
        bounds = tuple(stored)  # type: ignore[arg-type]
        _SEG.from_store += 1
    else:
        bounds = _segment(text, splitter)
        _SEG.segmented += 1
        if _SEG.store is not None:
            _SEG.store.put(bounds_method(splitter), key, bounds)
    _SEG.memo[(key, splitter)] = bounds
    return bounds


def sentence_bounds(text: str, splitter: str = "pysbd") -> list[int]:
    """Sorted character offsets where a sentence may start; always includes 0 and every paragraph start.

    Used both to snap fixed-window edges and to split long structural chunks. Never includes ``len(text)``.
    Each distinct ``(text, splitter)`` is segmented once per process (memoised on the text's sha256), and once per
    run when a store is in use (:func:`use_bounds_store`): bounds found there are read, not recomputed, and any
    other text's are added to it.
    """
    if not text:
        return [0]
    if splitter not in ("pysbd", "regex"):
        raise ChunkingError(f"sentence splitter {splitter!r} is not one of ['pysbd', 'regex']")
    return list(_bounds_of(text, splitter))


def content(text: str, start: int, end: int) -> str:
    """The content string of chunk ``[start, end)`` as embedded and counted: ``text[start:end].strip()``."""
    return text[start:end].strip()


# ------------------------------------------------------------------------------------------------ unit table
@dataclass
class _Units:
    """One document cut at its sentence bounds: ``bounds[i]`` starts unit i; ``cum[i]`` tokens before it."""

    text: str
    bounds: list[int]  # unit starts, then len(text) appended
    cum: np.ndarray  # len(bounds), cum[0] = 0

    def index(self, offset: int) -> int:
        i = bisect.bisect_left(self.bounds, offset)
        if i >= len(self.bounds) or self.bounds[i] != offset:
            raise KeyError(offset)
        return i

    def tokens(self, i: int, j: int) -> float:
        return float(self.cum[j] - self.cum[i])


def _units(text: str, counter: TokenCounter, splitter: str) -> _Units:
    b = sentence_bounds(text, splitter) + [len(text)]
    counts = counter([content(text, b[i], b[i + 1]) for i in range(len(b) - 1)])
    return _Units(text, b, np.concatenate([[0.0], np.cumsum(np.asarray(counts, dtype=float))]))


def _nearest_cut(u: _Units, target: float, lo: int, hi: int) -> int | None:
    """The unit index in ``(lo, hi)`` whose cumulative token count is nearest ``target`` (ties: the earlier)."""
    if hi - lo < 2:
        return None
    j = int(np.searchsorted(u.cum[lo + 1:hi], target)) + lo + 1
    cands = [c for c in (j - 1, j) if lo < c < hi]
    return min(cands, key=lambda c: (abs(u.cum[c] - target), c))


def _split(u: _Units, lo: int, hi: int, max_tokens: int) -> list[tuple[int, int]]:
    """Split units ``[lo, hi)`` into ``ceil(T / max_tokens)`` near-equal parts at sentence bounds; recurse on any
    part still above ``max_tokens``. A single sentence above the limit stays whole (it has no inner bound)."""
    total = u.tokens(lo, hi)
    if total <= max_tokens or hi - lo < 2:
        return [(lo, hi)]
    k = math.ceil(total / max_tokens)
    cuts, prev = [], lo
    for j in range(1, k):
        c = _nearest_cut(u, u.cum[lo] + j * total / k, prev, hi)
        if c is None:
            break
        cuts.append(c)
        prev = c
    edges = [lo, *cuts, hi]  # k >= 2 and hi - lo >= 2, so at least one cut landed: every part is smaller
    out = []
    for a, b in zip(edges, edges[1:]):
        out.extend(_split(u, a, b, max_tokens))
    return out


# --------------------------------------------------------------------------------------------- structural
def _by_doc(df: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    if df is None or len(df) == 0:
        return {}
    return dict(tuple(df.groupby("doc_id", sort=False)))


def _merge_small(pieces: list[dict], min_tokens: int, max_tokens: int) -> list[dict]:
    """Merge every piece below ``min_tokens`` into a neighbour until none is left (or one piece remains).

    The smallest piece goes first (ties: the earlier). Its neighbour is chosen by, in order: same top-level
    section (``route_key``), the merged piece staying within ``max_tokens``, the smaller neighbour, the earlier.
    The merged piece keeps the section and route of its larger part (ties: the earlier part).
    """
    pieces = [dict(p) for p in pieces]
    while len(pieces) > 1:
        small = [i for i, p in enumerate(pieces) if p["tokens"] < min_tokens]
        if not small:
            break
        i = min(small, key=lambda i: (pieces[i]["tokens"], i))
        nbrs = [j for j in (i - 1, i + 1) if 0 <= j < len(pieces)]
        j = min(nbrs, key=lambda j: (pieces[j]["route_key"] != pieces[i]["route_key"],
                                     pieces[i]["tokens"] + pieces[j]["tokens"] > max_tokens,
                                     pieces[j]["tokens"], j))
        a, b = sorted((i, j))
        keep = pieces[a] if pieces[a]["tokens"] >= pieces[b]["tokens"] else pieces[b]
        merged = {**keep, "lo": pieces[a]["lo"], "hi": pieces[b]["hi"],
                  "tokens": pieces[a]["tokens"] + pieces[b]["tokens"]}
        pieces[a:b + 1] = [merged]
    return pieces


def _doc_structural(doc_id: str, text: str, secs: pd.DataFrame, u: _Units, max_tokens: int,
                    min_tokens: int) -> list[dict]:
    if not text:
        return []
    if secs is None or len(secs) == 0:
        raise ChunkingError(f"sections: document {doc_id!r} has text but no sections")
    secs = secs.reset_index(drop=True)
    top = docmodel.top_level_ids(secs)
    nonempty = [r for r in secs.itertuples(index=False) if int(r.end) > int(r.start)]
    if not nonempty or int(nonempty[0].start) != 0:
        raise ChunkingError(f"sections: document {doc_id!r}: the first non-empty section starts at "
                            f"{nonempty[0].start if nonempty else None}, expected 0 (sections must tile the text)")
    starts = []
    for r in nonempty:
        try:
            starts.append(u.index(int(r.start)))
        except KeyError:
            raise ChunkingError(f"sections: document {doc_id!r}, section {r.section_id!r} starts at "
                                f"{int(r.start)}, which is not a paragraph start") from None
    if any(b <= a for a, b in zip(starts, starts[1:])):
        raise ChunkingError(f"sections: document {doc_id!r}: non-empty section starts are not increasing")
    ends = starts[1:] + [len(u.bounds) - 1]
    pieces = []
    for r, lo, hi in zip(nonempty, starts, ends):
        for a, b in _split(u, lo, hi, max_tokens):
            pieces.append({"lo": a, "hi": b, "tokens": u.tokens(a, b), "section_id": r.section_id,
                           "route_key": top[r.section_id]})
    return _merge_small(pieces, min_tokens, max_tokens)


def _finish(rows: list[dict], text_by_doc: Mapping[str, str], counter: TokenCounter, columns: list[str]
            ) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("start", "end", "n_content_tokens") else object)
                             for c in columns})
    df = pd.DataFrame(rows)
    df["n_content_tokens"] = counter([content(text_by_doc[d], s, e)
                                      for d, s, e in zip(df["doc_id"], df["start"], df["end"])])
    return df[columns].astype({"start": "int64", "end": "int64", "n_content_tokens": "int64"})


def _units_for(documents: pd.DataFrame, counter: TokenCounter, splitter: str,
               cache: dict | None = None) -> dict[str, _Units]:
    cache = {} if cache is None else cache
    todo = [(d, t) for d, t in zip(documents["doc_id"], documents["text"])
            if (d, splitter) not in cache or cache[(d, splitter)].text != t]
    for doc_id, text in progress.track(todo, desc=f"sentence bounds and token counts ({splitter})", unit="doc"):
        cache[(doc_id, splitter)] = _units(text, counter, splitter)
    return {d: cache[(d, splitter)] for d in documents["doc_id"]}


def structural_chunks(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections: pd.DataFrame,
                      counter: TokenCounter, max_chunk_tokens: int, min_chunk_tokens: int,
                      splitter: str, _unit_cache: dict | None = None) -> pd.DataFrame:
    """Structural chunks of one outline (gold or induced), paper 3.2.

    A chunk is the text between consecutive section starts (an empty section contributes no chunk; its title
    still reaches its descendants' heading paths). A chunk above ``max_chunk_tokens`` content tokens is split at
    sentence bounds into ``ceil(T / max_chunk_tokens)`` near-equal parts; then every chunk below
    ``min_chunk_tokens`` is merged into a neighbour, preferring one in the same top-level section (see
    :func:`_merge_small`). A single sentence above ``max_chunk_tokens`` is not split, and merging may exceed it when
    no neighbour fits. The three policy values are ``chunking.max_chunk_tokens``, ``min_chunk_tokens`` and
    ``sentence_splitter``.

    Returns ``[doc_id, start, end, section_id, route_key, n_content_tokens]`` in document order, where
    ``section_id`` is the (larger) section the chunk came from and ``route_key`` the section_id of its level-1
    ancestor (:func:`model.top_level_ids`). ``paragraphs`` is accepted for symmetry with the verifier; offsets come
    from the section table, which the corpus/induction stages derive from the paragraph table.
    """
    del paragraphs  # section offsets already come from the paragraph table (model.sections_from_outline)
    max_tokens, min_tokens = max_chunk_tokens, min_chunk_tokens
    if min_tokens > max_tokens:
        raise ChunkingError(f"chunking: min_chunk_tokens {min_tokens} exceeds max_chunk_tokens {max_tokens}")
    units = _units_for(documents, counter, splitter, _unit_cache)
    secs_by = _by_doc(sections)
    rows, text_by_doc = [], dict(zip(documents["doc_id"], documents["text"]))
    for doc_id, text in text_by_doc.items():
        u = units[doc_id]
        for p in _doc_structural(doc_id, text, secs_by.get(doc_id), u, max_tokens, min_tokens):
            rows.append({"doc_id": doc_id, "start": u.bounds[p["lo"]], "end": u.bounds[p["hi"]],
                         "section_id": p["section_id"], "route_key": p["route_key"]})
    return _finish(rows, text_by_doc, counter, STRUCTURAL_COLUMNS)


def structural_for(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections: pd.DataFrame,
                   chunking_params: ChunkingParams, counter: TokenCounter | None = None) -> pd.DataFrame:
    """:func:`structural_chunks` of one outline under the run's ``chunking`` record (``cfg.params("chunking")``):
    its tokenizer's counter (or ``counter``, when the caller holds it), ``max_chunk_tokens``, ``min_chunk_tokens``
    and ``sentence_splitter``. The chunks 04 cuts for A2/G2 from the same outline; 02 compares the induced and
    gold ones (span identity). (03 reads four keys of the section only, so it calls :func:`structural_chunks`.)"""
    p = chunking_params
    return structural_chunks(documents, paragraphs, sections, counter or load_counter(p.tokenizer),
                             p.max_chunk_tokens, p.min_chunk_tokens, p.sentence_splitter)


def fixed_windows(documents: pd.DataFrame, targets: Mapping[str, float], counter: TokenCounter,
                  splitter: str, _unit_cache: dict | None = None) -> pd.DataFrame:
    """Fixed windows of about ``targets[doc_id]`` content tokens per document, edges snapped to sentence bounds.

    With ``N`` the document's content tokens, the window count is ``k = max(1, floor(N / target + 0.5))`` and cut
    ``j`` (``j = 1..k-1``) is the sentence bound whose cumulative token count is nearest ``j * N / k`` (strictly
    after the previous cut), so windows hold ``N / k`` tokens give or take half a sentence. Windows ignore
    paragraphs and sections. Returns ``[doc_id, start, end, n_content_tokens]``; every document must have a
    positive finite target unless its text is empty.
    """
    units = _units_for(documents, counter, splitter, _unit_cache)
    rows, text_by_doc = [], dict(zip(documents["doc_id"], documents["text"]))
    for doc_id, text in text_by_doc.items():
        if not text:
            continue
        if doc_id not in targets:
            raise ChunkingError(f"fixed_windows: no window target for document {doc_id!r}")
        target = float(targets[doc_id])
        if not math.isfinite(target) or target <= 0:
            raise ChunkingError(f"fixed_windows: document {doc_id!r} has window target {target!r}; expected > 0")
        u = units[doc_id]
        m = len(u.bounds) - 1
        total = u.tokens(0, m)
        k = max(1, math.floor(total / target + 0.5))
        edges = [0]
        for j in range(1, k):
            c = _nearest_cut(u, j * total / k, edges[-1], m)
            if c is not None:
                edges.append(c)
        edges.append(m)
        for a, b in zip(edges, edges[1:]):
            rows.append({"doc_id": doc_id, "start": u.bounds[a], "end": u.bounds[b]})
    return _finish(rows, text_by_doc, counter, WINDOW_COLUMNS)


def doc_means(chunks: pd.DataFrame) -> dict[str, float]:
    """Per-document mean ``n_content_tokens`` of a chunk table (the A0 window target when given A2 chunks)."""
    return {d: float(v) for d, v in chunks.groupby("doc_id", sort=False)["n_content_tokens"].mean().items()}


def verify_tiling(chunks: pd.DataFrame, documents: pd.DataFrame) -> dict[str, list[str]]:
    """``{doc_id: violations}`` for documents whose chunks do not tile the text exactly (empty dict = valid).

    Checks: chunks sorted by start begin at 0, have no gap, overlap or empty chunk, and end at ``len(text)``;
    a document with text has at least one chunk; no chunk names an unknown document.
    """
    bad: dict[str, list[str]] = {}
    by = _by_doc(chunks)
    for doc_id, text in zip(documents["doc_id"], documents["text"]):
        g = by.pop(doc_id, None)
        v = []
        if g is None or len(g) == 0:
            if text:
                v.append("no chunks")
        else:
            s = g["start"].to_numpy()
            e = g["end"].to_numpy()
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
            if s[0] != 0:
                v.append(f"first chunk starts at {s[0]}")
            if e[-1] != len(text):
                v.append(f"last chunk ends at {e[-1]}, text length {len(text)}")
            if (e <= s).any():
                v.append(f"{int((e <= s).sum())} empty chunk(s)")
            if (s[1:] != e[:-1]).any():
                i = int(np.flatnonzero(s[1:] != e[:-1])[0])
                v.append(f"gap/overlap: chunk ends at {e[i]}, next starts at {s[i + 1]}")
        if v:
            bad[doc_id] = v
    for doc_id in by:
        bad[doc_id] = ["chunks name a document that is not in the documents table"]
    return bad
