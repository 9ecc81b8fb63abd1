"""Your own chunker as a condition: adapters for chunker libraries and plain functions, and the exact placement of
their chunks on the document text (docs/chunker.md).

A chunker named in ``conditions.extra`` is one of:

================================  ========================================================================
``chonkie:RecursiveChunker``      chonkie's recursive, sentence and semantic chunkers; sizes count the run's
``chonkie:SentenceChunker``       own tokens (``chunking.tokenizer``) unless ``options.tokenizer`` names one of
``chonkie:SemanticChunker``       chonkie's offline counters (``character``, ``word``, ``byte``). The semantic
                                  chunker embeds with the run's strong embedder (``embed.strong``, through the
                                  embedding store): never a hub download. (chonkie's TokenChunker is not
                                  adapted: it derives offsets from decoded tokens, which a WordPiece tokenizer
                                  does not decode to the original text, so its spans miss the text.)
``semchunk``                      semchunk's ``chunkerify(counter, chunk_size)``, the run's tokens, with offsets
``langchain:<Splitter>``          a class of ``langchain_text_splitters`` (``RecursiveCharacterTextSplitter``,
                                  ``CharacterTextSplitter``, ...) built with ``options``; ``length_function:
                                  tokens`` measures in the run's tokens instead of characters; its chunks
                                  carry langchain's own start offsets (``add_start_index``), verified here
``package.module:function``       any function ``f(text, **options)`` importable from ``sys.path``, or
``file.py:function``              from a file beside the parameter file; it returns ``(start, end)`` character
                                  spans, or chunk texts that are located in the document
================================  ========================================================================

Placement (:func:`place`) turns a chunker's output into half-open character offsets ``[start, end)`` into
``documents.text`` and verifies them, as the study's own chunk sets are verified:

* a span must lie inside the text; a span that comes with its text (chonkie, semchunk, a dict) must hold exactly
  that text, ``text[start:end] == chunk``;
* a chunk text is located exactly (``str.find``), leftmost at or after the end of the previous chunk (after the
  previous chunk's start when the condition declares ``overlap: true``; in a text that repeats itself an
  overlapping chunk may then be found too early, which the coverage check reports as dropped text: an
  overlapping chunker should return offsets, as the adapters here do);
* chunks may overlap only when the condition declares it (``overlap: true``); otherwise an overlap is an error;
* a chunk that is empty or only whitespace is left out and counted (it carries nothing to embed or to score);
* text the chunker *drops* (a non-whitespace character no chunk covers) or *rewrites* (a chunk text that is not in
  the document, a span whose text differs) is an error naming the condition and the document
  (:class:`ChunkerError`), or, under ``unaligned: warn``, a :class:`ChunkerWarning` with the counts, which 04's
  summary records: never a silent misalignment. Whitespace between chunks may be dropped (semchunk and
  langchain strip it); it carries no evidence.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np
import pandas as pd

from ..errors import ChunkstudyError

#: ``texts -> float32 (n, dim)`` unit vectors: the run's strong embedder through the embedding store.
EmbedFn = Callable[[Sequence[str]], np.ndarray]
#: ``texts -> [content tokens of each]``: the run's token counter (:func:`chunkstudy.chunks.chunking.load_counter`).
Counter = Callable[[list], list]

#: The chunkers of each library this module adapts (``<library>:<name>``; ``semchunk`` alone is semchunk's one).
CHONKIE_CHUNKERS = ("RecursiveChunker", "SentenceChunker", "SemanticChunker")
#: The library each adapter needs, and the distribution pip installs it from (the ``chunkers`` extra).
LIBRARIES = {"chonkie": "chonkie", "semchunk": "semchunk", "langchain": "langchain-text-splitters"}
#: chonkie's token counters that need no download (``options.tokenizer``); any other name would fetch one.
CHONKIE_OFFLINE_TOKENIZERS = ("character", "word", "byte")
UNALIGNED = ("error", "warn")


class ChunkerError(ChunkstudyError, ValueError):
    """A chunker cannot be loaded, or its chunks cannot be placed exactly on a document (the message names the
    condition, the chunker and the document)."""


class ChunkerWarning(UserWarning):
    """Under ``unaligned: warn``: a chunker dropped or rewrote text; the counts are in the message and in 04's
    summary."""


# ------------------------------------------------------------------------------------------------- placement

@dataclass(frozen=True)
class Piece:
    """One chunk as a chunker returned it: a span (``start``, ``end``), a text, or both."""

    start: int | None
    end: int | None
    text: str | None


@dataclass
class Placement:
    """One document's chunks placed on its text: ``spans`` sorted by ``(start, end)`` (half-open character
    offsets), and what could not be placed: ``unplaced`` (chunk texts not in the document, or spans whose text
    differs: rewritten text), ``dropped_chars`` (non-whitespace characters no chunk covers), ``empty`` (chunks
    left out as empty or whitespace only). ``problems`` describes the first few unplaced chunks and dropped runs."""

    spans: list[tuple[int, int]]
    unplaced: int = 0
    dropped_chars: int = 0
    empty: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def aligned(self) -> bool:
        return self.unplaced == 0 and self.dropped_chars == 0


def _snippet(s: str, n: int = 60) -> str:
    s = " ".join(s.split())
    return repr(s if len(s) <= n else s[:n] + "…")


def _as_int(v: Any) -> int | None:
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    return None


def pieces(output: Any, where: str) -> list[Piece]:
    """A chunker's output as :class:`Piece` records. Accepted, per chunk: a ``(start, end)`` pair of integers, a
    string (a chunk text to locate), a mapping with ``start``/``end`` (and optionally ``text``), or an object
    with ``start_index``/``end_index`` (and ``text``: chonkie's ``Chunk``). ``where`` names the condition and the
    document in the error for anything else."""
    if isinstance(output, (str, bytes, Mapping)) or not hasattr(output, "__iter__"):
        raise ChunkerError(f"{where}: the chunker returned {type(output).__name__}, expected a list of chunks "
                           "((start, end) pairs or chunk texts)")
    out = []
    for i, c in enumerate(list(output)):
        if isinstance(c, str):
            out.append(Piece(None, None, c))
            continue
        if isinstance(c, Mapping):
            s, e, t = c.get("start"), c.get("end"), c.get("text")
        elif hasattr(c, "start_index") and hasattr(c, "end_index"):
            s, e, t = c.start_index, c.end_index, getattr(c, "text", None)
        elif isinstance(c, (tuple, list)) and len(c) == 2:
            s, e, t = c[0], c[1], None
        else:
            raise ChunkerError(f"{where}: chunk {i} is {type(c).__name__} {c!r:.80}; expected a (start, end) pair, "
                               "a chunk text, a mapping with start/end, or an object with start_index/end_index")
        si, ei = _as_int(s), _as_int(e)
        if si is None or ei is None:
            raise ChunkerError(f"{where}: chunk {i} has start {s!r} and end {e!r}; expected integer character "
                               "offsets")
        if t is not None and not isinstance(t, str):
            raise ChunkerError(f"{where}: chunk {i} has text of type {type(t).__name__}; expected a string")
        out.append(Piece(si, ei, t))
    return out


def place(text: str, chunks: Sequence[Piece], *, where: str, overlap: bool) -> Placement:
    """Place one document's chunks on its ``text`` (half-open character offsets) and verify them: see the module
    docstring. Raises :class:`ChunkerError` (naming ``where``) for a span outside the text and for chunks that
    overlap when ``overlap`` is False; what was dropped or rewritten is counted in the result (the caller decides
    whether that is an error: :func:`check_alignment`)."""
    spans: list[tuple[int, int]] = []
    p = Placement(spans)
    cursor, prev_start = 0, -1
    n = len(text)
    for i, c in enumerate(chunks):
        if c.start is None:
            t = c.text or ""
            if not t.strip():
                p.empty += 1
                continue
            pos = text.find(t, prev_start + 1 if overlap else cursor)
            if pos < 0:
                p.unplaced += 1
                if len(p.problems) < 3:
                    hint = ""
                    if text.find(t) >= 0:
                        hint = (" (it occurs earlier, overlapping the previous chunk: declare overlap: true)"
                                if not overlap else " (it occurs only before the previous chunk: out of order)")
                    p.problems.append(f"chunk {i} is not in the text after the previous chunk{hint}: "
                                      f"{_snippet(t)}")
                continue
            s, e = pos, pos + len(t)
        else:
            s, e = c.start, cast(int, c.end)  # a span: pieces() sets both or neither
            if not 0 <= s <= e <= n:
                raise ChunkerError(f"{where}: chunk {i} has span [{s}, {e}), outside the text [0, {n})")
            if c.text is not None and text[s:e] != c.text:
                p.unplaced += 1
                if len(p.problems) < 3:
                    p.problems.append(f"chunk {i}'s text differs from the document at [{s}, {e}): the chunker "
                                      f"returned {_snippet(c.text)}, the document holds {_snippet(text[s:e])}")
                continue
            if not text[s:e].strip():
                p.empty += 1
                continue
        spans.append((s, e))
        cursor, prev_start = max(cursor, e), s
    spans.sort()
    if not overlap:
        for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
            if s1 < e0:
                raise ChunkerError(f"{where}: chunks [{s0}, {e0}) and [{s1}, {e1}) overlap; a condition whose "
                                   "chunker overlaps chunks declares overlap: true")
    covered = np.zeros(n + 1, dtype=np.int64)
    for s, e in spans:
        covered[s] += 1
        covered[e] -= 1
    gap = np.cumsum(covered)[:n] == 0
    if gap.any():
        chars = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) if n else np.zeros(0, dtype=np.uint32)
        lost = gap & ~np.isin(chars, _WHITESPACE)
        p.dropped_chars = int(lost.sum())
        if p.dropped_chars:
            first = int(np.flatnonzero(lost)[0])
            end = first
            while end < n and gap[end]:
                end += 1
            p.problems.append(f"{p.dropped_chars} non-whitespace character(s) are in no chunk, first at "
                              f"[{first}, {end}): {_snippet(text[first:end])}")
    return p


#: Code points ``str.isspace`` accepts (what :func:`place` forgives in gaps between chunks).
_WHITESPACE = np.array([c for c in range(0x3000 + 1) if chr(c).isspace()], dtype=np.uint32)


def check_alignment(placement: Placement, *, where: str, unaligned: str) -> None:
    """Raise :class:`ChunkerError` naming ``where`` when the chunker dropped or rewrote text and ``unaligned`` is
    ``error``; under ``warn`` the caller counts it (:func:`chunk_documents`)."""
    if unaligned not in UNALIGNED:
        raise ChunkerError(f"{where}: unaligned {unaligned!r} is not one of {list(UNALIGNED)}")
    if placement.aligned or unaligned == "warn":
        return
    what = []
    if placement.unplaced:
        what.append(f"{placement.unplaced} chunk(s) whose text is not in the document (rewritten)")
    if placement.dropped_chars:
        what.append(f"{placement.dropped_chars} non-whitespace character(s) in no chunk (dropped)")
    raise ChunkerError(f"{where}: the chunker's output does not align with the document text: {' and '.join(what)};"
                       f" {'; '.join(placement.problems)}. Chunks must be exact character spans of the text "
                       "(unaligned: warn counts and skips them instead)")


# -------------------------------------------------------------------------------------------------- adapters

def _chonkie_embeddings(embed_fn: EmbedFn, tokenizer: Any) -> Any:
    """chonkie's ``BaseEmbeddings`` over the run's strong embedder: ``embed_fn`` (texts -> unit vectors, through
    the embedding store) and the run's tokenizer. The class is made on first use, so chonkie is imported only when
    a chonkie chunker is asked for."""
    from chonkie.embeddings import BaseEmbeddings

    class RunEmbeddings(BaseEmbeddings):
        def __init__(self) -> None:
            super().__init__()
            self._dim: int | None = None

        def embed(self, text: str) -> np.ndarray:
            return self.embed_batch([text])[0]

        def embed_batch(self, texts: list[str]) -> list[np.ndarray]:
            v = np.asarray(embed_fn(list(texts)), dtype=np.float32)
            if len(texts):
                self._dim = int(v.shape[1])
            return list(v)

        def similarity(self, u: np.ndarray, v: np.ndarray) -> np.float32:
            return np.float32(np.dot(u, v))  # unit vectors: the cosine

        @property
        def dimension(self) -> int:
            if self._dim is None:
                self.embed("dimension probe")
            return int(self._dim or 0)

        def get_tokenizer(self) -> Any:
            return tokenizer

    return RunEmbeddings()


def _count_one(counter: Counter) -> Callable[[str], int]:
    return lambda s: int(counter([s])[0])


def _run_tokenizer(counter: Counter) -> Any:
    """What a library gets to count the run's tokens: the fast tokenizer itself where the counter has one (chonkie
    and semchunk call it without special tokens), else a ``str -> int`` counter."""
    backend = getattr(counter, "_backend", None)
    return backend if backend is not None else _count_one(counter)


def _chonkie(name: str, options: dict, counter: Counter, embed_fn: EmbedFn | None, where: str) -> Callable:
    if name not in CHONKIE_CHUNKERS:
        raise ChunkerError(f"{where}: chonkie:{name} is not one of the chonkie chunkers adapted here: "
                           f"{['chonkie:' + c for c in CHONKIE_CHUNKERS]}")
    import chonkie

    opts = dict(options)
    tok = opts.pop("tokenizer", None)
    if tok is not None and tok not in CHONKIE_OFFLINE_TOKENIZERS:
        raise ChunkerError(f"{where}: options.tokenizer {tok!r}: chonkie would download it; leave it out (the run's "
                           f"chunking.tokenizer counts) or use one of {list(CHONKIE_OFFLINE_TOKENIZERS)}")
    tokenizer = tok if tok is not None else _run_tokenizer(counter)
    cls = getattr(chonkie, name)
    try:
        if name == "SemanticChunker":
            if "embedding_model" in opts:
                raise ChunkerError(f"{where}: options.embedding_model: the semantic chunker embeds with the run's "
                                   "strong embedder (embed.strong); leave it out")
            if embed_fn is None:
                raise ChunkerError(f"{where}: chonkie:SemanticChunker needs the run's strong embedder (embed.strong)")
            if tok is not None:
                raise ChunkerError(f"{where}: options.tokenizer: the semantic chunker counts with the run's tokenizer")
            chunker = cls(embedding_model=_chonkie_embeddings(embed_fn, tokenizer), **opts)
        else:
            chunker = cls(tokenizer=tokenizer, **opts)
    except ChunkerError:
        raise
    except (TypeError, ValueError) as e:
        raise ChunkerError(f"{where}: chonkie.{name}({_opts_text(opts)}) refused its options: {e}") from None
    return chunker.chunk


def _semchunk(options: dict, counter: Counter, where: str) -> Callable:
    import semchunk

    opts = dict(options)
    if "chunk_size" not in opts:
        raise ChunkerError(f"{where}: semchunk needs options.chunk_size (tokens of chunking.tokenizer)")
    size, overlap = opts.pop("chunk_size"), opts.pop("overlap", None)
    if opts:
        raise ChunkerError(f"{where}: semchunk options {sorted(opts)} are not known; semchunk takes chunk_size "
                           "and overlap")
    try:
        chunker = semchunk.chunkerify(_count_one(counter), size)
    except (TypeError, ValueError) as e:
        raise ChunkerError(f"{where}: semchunk.chunkerify(chunk_size={size!r}) refused: {e}") from None

    def run(text: str) -> list[dict]:
        texts, offsets = chunker(text, offsets=True, overlap=overlap)
        return [{"start": s, "end": e, "text": t} for t, (s, e) in zip(texts, offsets)]
    return run


def _langchain(name: str, options: dict, counter: Counter, where: str) -> Callable:
    import langchain_text_splitters as lts

    cls = getattr(lts, name, None)
    if not (inspect.isclass(cls) and issubclass(cls, lts.TextSplitter)):
        known = sorted(n for n, c in vars(lts).items() if inspect.isclass(c) and issubclass(c, lts.TextSplitter)
                       and c is not lts.TextSplitter)
        raise ChunkerError(f"{where}: langchain:{name} is not a text splitter of langchain_text_splitters; "
                           f"splitters: {known}")
    opts = dict(options)
    if opts.get("length_function") == "tokens":
        opts["length_function"] = _count_one(counter)
    elif "length_function" in opts:
        raise ChunkerError(f"{where}: options.length_function {opts['length_function']!r}: 'tokens' (the run's "
                           "chunking.tokenizer) or leave it out (characters)")
    opts.pop("add_start_index", None)  # always on: langchain places its chunks itself, knowing its overlap
    try:
        splitter = cls(add_start_index=True, **opts)
    except (TypeError, ValueError) as e:
        raise ChunkerError(f"{where}: langchain_text_splitters.{name}({_opts_text(options)}) refused its options: "
                           f"{e}") from None

    def run(text: str) -> list[dict | str]:
        out: list[dict | str] = []
        for d in splitter.create_documents([text]):
            s = d.metadata.get("start_index", -1)
            # a start langchain could not find (-1) leaves the text to locate (and to verify) here
            out.append({"start": s, "end": s + len(d.page_content), "text": d.page_content} if s >= 0
                       else d.page_content)
        return out
    return run


def _opts_text(options: Mapping) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


def _load_function(ref: str, params_dir: Path | None, where: str) -> Callable:
    module_name, _, func = ref.rpartition(":")
    if module_name.endswith(".py"):
        path = Path(module_name).expanduser()
        if not path.is_absolute():
            if params_dir is None:
                raise ChunkerError(f"{where}: {module_name} is relative to the parameter file, which is unknown here")
            path = params_dir / path
        path = path.resolve()
        if not path.is_file():
            raise ChunkerError(f"{where}: chunker file {path} does not exist (a .py path is relative to the "
                               "parameter file's folder)")
        unique = "chunkstudy_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(unique, path)
        if spec is None or spec.loader is None:
            raise ChunkerError(f"{where}: cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:  # noqa: BLE001 - the user's module: name it
            sys.modules.pop(unique, None)
            raise ChunkerError(f"{where}: importing {path} failed: {type(e).__name__}: {e}") from None
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ChunkerError(f"{where}: cannot import module {module_name!r}: {e}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ChunkerError(f"{where}: {module_name} has no function {func!r}")
    return fn


def load(chunker: str, options: Mapping[str, Any], *, counter: Counter,
         embed_fn: EmbedFn | None = None, params_dir: Path | None = None, where: str = "chunker") -> Callable:
    """The chunker ``chunker`` (see the module docstring) built with ``options``: a function ``text -> chunks``
    (any output :func:`pieces` accepts). ``counter`` is the run's token counter, ``embed_fn`` its strong embedder
    (the semantic chunker's), ``params_dir`` the parameter file's folder (``file.py:function`` is relative to it).
    Raises :class:`ChunkerError` naming ``where`` when the chunker is unknown, its library is missing or it
    refuses its options."""
    options = dict(options or {})
    lib, sep, name = chunker.partition(":")
    try:
        if chunker == "semchunk" or lib == "semchunk" and name in ("", "chunk", "chunkerify"):
            return _semchunk(options, counter, where)
        if lib == "chonkie" and sep:
            return _chonkie(name, options, counter, embed_fn, where)
        if lib == "langchain" and sep:
            return _langchain(name, options, counter, where)
    except ImportError as e:
        raise ChunkerError(f"{where}: {chunker} needs the {LIBRARIES[lib if lib in LIBRARIES else 'semchunk']} "
                           f"package (pip install 'chunkstudy[chunkers]'): {e}") from None
    if not sep or not name or not lib:
        raise ChunkerError(f"{where}: chunker {chunker!r} is not a library chunker ({known_chunkers()}) nor a "
                           "'module:function' or 'file.py:function' reference")
    fn = _load_function(chunker, params_dir, where)
    return lambda text: fn(text, **options)


def known_chunkers() -> list[str]:
    """The library chunkers this module adapts by name (a ``module:function`` is accepted besides)."""
    return ([f"chonkie:{c}" for c in CHONKIE_CHUNKERS] + ["semchunk", "langchain:<TextSplitter class>"])


def is_library(chunker: str) -> bool:
    """True when ``chunker`` names a library adapter (not a user function)."""
    lib = chunker.partition(":")[0]
    return chunker == "semchunk" or lib in LIBRARIES


def source_file(chunker: str, params_dir: Path | None) -> Path | None:
    """The file a user chunker's code lives in (its module's file; a ``.py`` path relative to ``params_dir``), so
    the runner can rerun 04 when that code changes; None for a library chunker and for a module it cannot find."""
    if is_library(chunker):
        return None
    module_name = chunker.rpartition(":")[0]
    if module_name.endswith(".py"):
        path = Path(module_name).expanduser()
        if not path.is_absolute() and params_dir is not None:
            path = params_dir / path
        return path.resolve() if path.is_file() else None
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None) if spec is not None else None
    return Path(origin).resolve() if origin and Path(origin).is_file() else None


def version(chunker: str) -> str | None:
    """The installed version of a library chunker's package (recorded in 04's summary); None for a function."""
    lib = "semchunk" if chunker == "semchunk" else chunker.partition(":")[0]
    if lib not in LIBRARIES:
        return None
    try:
        return metadata.version(LIBRARIES[lib])
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------- one chunk set

SPAN_COLUMNS = ["doc_id", "start", "end"]


def chunk_documents(documents: pd.DataFrame, chunk: Callable[[str], Any], *, name: str, chunker: str,
                    overlap: bool, unaligned: str) -> tuple[pd.DataFrame, dict]:
    """Run ``chunk`` (:func:`load`) on every document and place its chunks (:func:`place`).

    Returns ``(spans, report)``: ``spans`` has ``doc_id, start, end`` (half-open character offsets into
    ``documents.text``; document order, then ``(start, end)``); ``report`` counts ``n_chunks``, ``empty``
    (whitespace-only chunks left out), ``unplaced`` and ``dropped_chars`` (non-zero only under ``unaligned: warn``,
    which also emits one :class:`ChunkerWarning` per condition naming the first documents) and lists
    ``docs_unaligned``. An exception inside the chunker is re-raised as :class:`ChunkerError` naming the
    condition and the document."""
    rows: list[tuple[str, int, int]] = []
    report: dict[str, Any] = {"n_chunks": 0, "empty": 0, "unplaced": 0, "dropped_chars": 0, "docs_unaligned": []}
    for doc_id, text in zip(documents["doc_id"], documents["text"]):
        where = f"conditions.extra.{name} ({chunker}): document {doc_id!r}"
        if not text:
            continue
        try:
            out = chunk(text)
        except ChunkerError:
            raise
        except Exception as e:  # noqa: BLE001 - the chunker's own failure, named with the document
            raise ChunkerError(f"{where}: the chunker raised {type(e).__name__}: {e}") from e
        p = place(text, pieces(out, where), where=where, overlap=overlap)
        check_alignment(p, where=where, unaligned=unaligned)
        rows.extend((doc_id, s, e) for s, e in p.spans)
        report["empty"] += p.empty
        report["unplaced"] += p.unplaced
        report["dropped_chars"] += p.dropped_chars
        if not p.aligned:
            report["docs_unaligned"].append(str(doc_id))
    report["n_chunks"] = len(rows)
    if report["docs_unaligned"]:
        docs = report["docs_unaligned"]
        warnings.warn(f"conditions.extra.{name} ({chunker}): unaligned: warn: {report['unplaced']} chunk(s) whose "
                      f"text is not in the document were skipped and {report['dropped_chars']} non-whitespace "
                      f"character(s) are in no chunk, in {len(docs)} document(s), e.g. {docs[:3]}", ChunkerWarning,
                      stacklevel=2)
    spans = pd.DataFrame(rows, columns=SPAN_COLUMNS).astype({"start": "int64", "end": "int64"})
    return spans, report
