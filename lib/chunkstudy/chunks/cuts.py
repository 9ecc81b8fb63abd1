"""The chunk sets of a run: one cut of every document per :class:`chunkstudy.design.ChunkSet`, shared by every
condition that takes its offsets (a prefix never moves them).

Each kind of boundaries is declared in :data:`chunkstudy.design.BOUNDARIES` and cut by its function here,
:data:`FUNCTIONS` (checked against the declaration on import):

* ``induced`` / ``gold``: structural chunks of that outline (:func:`chunking.structural_chunks`: the text between
  consecutive section starts, split above ``chunking.max_chunk_tokens``, merged below ``min_chunk_tokens``);
* ``fixed``: windows size-matched per document to the mean content tokens of the chunk set they are matched to
  (the paper's A0 rule, :func:`chunking.fixed_windows`: A0 to A2, a user's twin ``<NAME>-fixed`` to ``NAME``);
* ``chunker``: a user's chunker (:mod:`.chunkers`), its chunks placed on exact offsets.

:func:`cut_all` cuts every chunk set a run's conditions name, each once, a matched set before the windows matched
to it. 04 cuts them all; 02 cuts the chunk sets whose conditions carry a situating context
(:func:`context_windows`), so both stages cut identical ``(doc_id, start, end)`` with the same function. Offsets are
half-open character indices into ``documents.text``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from .. import design, stages
from ..corpus import model as docmodel
from ..params import ChunkingParams
from . import chunkers, chunking
from .chunking import ChunkingError, TokenCounter


@dataclass
class CutInputs:
    """What a cut may read: the corpus (``documents``, ``paragraphs``), the ``outlines`` by table name
    (``sections_induced``, ``sections_gold``; None when the run has not got one), the ``chunking`` record and its
    token ``counter``; for a user's chunker the embedding functions of a semantic chunker (``embed_fns``: embedder
    key -> texts -> unit vectors) and the folder a ``file.py:function`` chunker is found in (``params_dir``).
    ``cache`` holds each document's sentence bounds and token counts across cuts."""

    documents: pd.DataFrame
    paragraphs: pd.DataFrame
    outlines: Mapping[str, pd.DataFrame | None]
    chunking: ChunkingParams
    counter: TokenCounter
    embed_fns: Mapping[str, chunkers.EmbedFn] = field(default_factory=dict)
    params_dir: Path | None = None
    cache: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Cut:
    """A chunk set as cut: ``spans`` (``doc_id, start, end, n_content_tokens``, and ``section_id, route_key`` for a
    structural cut) and what the cut reports (a chunker's empty, unplaced and dropped counts; else empty)."""

    chunk_set: design.ChunkSet
    spans: pd.DataFrame
    report: Mapping[str, Any] = field(default_factory=dict)


#: ``(chunk set, inputs, the cuts made so far) -> Cut``.
CutFn = Callable[[design.ChunkSet, CutInputs, Mapping[str, Cut]], Cut]


def _outline(cs: design.ChunkSet, inputs: CutInputs) -> pd.DataFrame:
    table = inputs.outlines.get(str(cs.outline))
    if table is None:
        raise ChunkingError(f"chunk set {cs.name} is cut from {cs.outline}, which was not given (written by "
                            f"{stages.writer(str(cs.outline))})")
    return table


def structural(cs: design.ChunkSet, inputs: CutInputs, done: Mapping[str, Cut]) -> Cut:
    """Structural chunks of the chunk set's outline (``induced``: A2; ``gold``: G2)."""
    p = inputs.chunking
    spans = chunking.structural_chunks(inputs.documents, inputs.paragraphs, _outline(cs, inputs), inputs.counter,
                                       p.max_chunk_tokens, p.min_chunk_tokens, p.sentence_splitter,
                                       _unit_cache=inputs.cache)
    return Cut(cs, spans)


def fixed(cs: design.ChunkSet, inputs: CutInputs, done: Mapping[str, Cut]) -> Cut:
    """Fixed windows matched per document to the mean content tokens of ``cs.matched_to``'s chunks (already cut),
    over the documents that cut covers (A0: every document with text)."""
    matched = done[str(cs.matched_to)].spans
    targets = chunking.doc_means(matched)
    docs = inputs.documents[inputs.documents["doc_id"].isin(targets)]
    spans = chunking.fixed_windows(docs, targets, inputs.counter, inputs.chunking.sentence_splitter,
                                   _unit_cache=inputs.cache)
    return Cut(cs, spans)


def chunker(cs: design.ChunkSet, inputs: CutInputs, done: Mapping[str, Cut]) -> Cut:
    """A user's chunker (:func:`chunkers.load`) run on every document, its chunks placed on exact offsets
    (:func:`chunkers.chunk_documents`), with their content tokens."""
    ch = cs.chunker
    assert ch is not None  # ChunkSet guarantees it for chunker boundaries
    embed_fn = inputs.embed_fns.get(ch.embedder) if ch.embedder else None
    where = f"conditions.extra.{cs.name}"
    fn = chunkers.load(ch.name, ch.options, counter=inputs.counter, embed_fn=embed_fn, params_dir=inputs.params_dir,
                       where=f"{where} ({ch.name})")
    spans, report = chunkers.chunk_documents(inputs.documents, fn, name=cs.name, chunker=ch.name, overlap=ch.overlap,
                                             unaligned=ch.unaligned)
    text = dict(zip(inputs.documents["doc_id"], inputs.documents["text"]))
    spans["n_content_tokens"] = pd.Series(
        inputs.counter([chunking.content(text[d], s, e) for d, s, e in
                        zip(spans["doc_id"], spans["start"], spans["end"])]), index=spans.index, dtype="int64")
    return Cut(cs, spans, report)


#: Kind of boundaries -> its cut: exactly the kinds :data:`chunkstudy.design.BOUNDARIES` declares.
FUNCTIONS: dict[str, CutFn] = {"fixed": fixed, "induced": structural, "gold": structural, "chunker": chunker}
if tuple(FUNCTIONS) != tuple(design.BOUNDARIES):  # pragma: no cover - a kind added on one side only
    raise ImportError(f"chunkstudy.chunks.cuts.FUNCTIONS {list(FUNCTIONS)} differ from design.BOUNDARIES "
                      f"{list(design.BOUNDARIES)}: declare the kind there and give it its cut here")


def chunk_sets_of(conditions: Iterable[design.Condition]) -> dict[str, design.ChunkSet]:
    """The chunk sets ``conditions`` take their offsets from, each once, every matched set before the windows
    matched to it (A2 before A0, ``NAME`` before ``NAME-fixed``), otherwise in the order the conditions name them.
    Two conditions naming one set by name must declare the same cut."""
    declared: dict[str, design.ChunkSet] = {}
    for c in conditions:
        other = declared.setdefault(c.chunk_set, c.cut)
        if other != c.cut:
            raise ChunkingError(f"conditions name two different chunk sets {c.chunk_set!r}: {other} and {c.cut}")
    order: dict[str, design.ChunkSet] = {}

    def visit(cs: design.ChunkSet) -> None:
        if cs.name in order:
            return
        if cs.matched_to is not None:
            visit(declared.get(cs.matched_to) or design.lookup(design.CHUNK_SETS, cs.matched_to, "chunk set",
                                                              ChunkingError))
        order[cs.name] = cs

    for cs in declared.values():
        visit(cs)
    return order


def cut_all(chunk_sets: Mapping[str, design.ChunkSet] | Sequence[design.ChunkSet], inputs: CutInputs
            ) -> dict[str, Cut]:
    """Cut every chunk set (in the order given: :func:`chunk_sets_of`), each with its kind's function
    (:data:`FUNCTIONS`). A fixed or structural cut must tile every document (a bug otherwise: never expected)."""
    sets = list(chunk_sets.values()) if isinstance(chunk_sets, Mapping) else list(chunk_sets)
    done: dict[str, Cut] = {}
    for cs in sets:
        got = FUNCTIONS[cs.boundaries](cs, inputs, done)
        if cs.boundaries != "chunker":
            bad = chunking.verify_tiling(got.spans, inputs.documents)
            if bad:
                d, v = next(iter(bad.items()))
                raise ChunkingError(f"{cs.name} chunks do not tile document {d!r}: {v}")
        done[cs.name] = got
    return done


def needs(conditions: Iterable[design.Condition]) -> dict[str, list[str]]:
    """``{section table: [conditions that need it]}`` (:meth:`chunkstudy.design.Condition.needs`; a fixed cut
    needs what the cut it is matched to needs, among the run's chunk sets too)."""
    conds = list(conditions)
    sets = {c.chunk_set: c.cut for c in conds}
    out: dict[str, list[str]] = {}
    for c in conds:
        for table in dict.fromkeys(design.cut_needs(c.cut, sets) + c.needs()):
            out.setdefault(table, []).append(c.name)
    return out


def require_outlines(conditions: Iterable[design.Condition], outlines: Mapping[str, pd.DataFrame | None]) -> None:
    """A ChunkingError naming the conditions that need a section table that was not given, and its writer."""
    for table, names in needs(conditions).items():
        if outlines.get(table) is None:
            raise ChunkingError(f"conditions {sorted(names)} need {table} ({stages.writer(table)})")


# ------------------------------------------------------------------------------------------------ sections

def _content_start(text: str, s: int, e: int) -> int:
    """The first non-whitespace offset of ``[s, e)`` (where a chunk's content starts)."""
    piece = text[s:e]
    return s + (len(piece) - len(piece.lstrip()))


def section_of(chunks: pd.DataFrame, documents: pd.DataFrame, sections: pd.DataFrame | None
               ) -> tuple[list[str | None], list[str | None]]:
    """``(section_id, route_key)`` of each chunk: the non-empty section of ``sections`` in which the chunk's
    content starts, and that section's level-1 ancestor; Nones when ``sections`` is None. This is how a fixed or
    chunker cut's chunks are placed in a condition's outline (a structural cut carries its own)."""
    if sections is None:
        return [None] * len(chunks), [None] * len(chunks)
    top = docmodel.top_level_ids(sections)
    text = dict(zip(documents["doc_id"], documents["text"]))
    by_doc: dict[str, tuple[list[int], list[str]]] = {}
    for d, g in sections[sections["end"] > sections["start"]].groupby("doc_id", sort=False):
        g = g.sort_values("start", kind="stable")
        by_doc[d] = (g["start"].astype(int).tolist(), g["section_id"].tolist())
    sec, route = [], []
    for d, s, e in zip(chunks["doc_id"], chunks["start"], chunks["end"]):
        starts, ids = by_doc.get(d, ([], []))
        i = bisect.bisect_right(starts, _content_start(text[d], int(s), int(e))) - 1
        sid = ids[max(i, 0)] if ids else None
        sec.append(sid)
        route.append(top.get(sid) if sid is not None else None)
    return sec, route


# ------------------------------------------------------------------------------------------------ 02's windows

def context_windows(documents: pd.DataFrame, paragraphs: pd.DataFrame, outlines: Mapping[str, pd.DataFrame | None],
                    conditions: Iterable[design.Condition], chunking_params: ChunkingParams,
                    counter: TokenCounter | None = None) -> pd.DataFrame:
    """The chunks 02 writes a situating context for: every chunk of every chunk set a condition with a context
    prefix names (:attr:`chunkstudy.design.PrefixKind.contexts`; the paper's A1: A0's windows), cut exactly as 04
    cuts it (:func:`cut_all`). Columns ``chunk_set, doc_id, start, end``; empty when no condition reads contexts.
    A chunker's cut cannot be named (02 runs before any chunker: the parameter rules refuse it)."""
    conds = [c for c in conditions if c.prefix_kind.contexts]
    cols = ["chunk_set", "doc_id", "start", "end"]
    if not conds:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("start", "end") else object) for c in cols})
    wanted = dict.fromkeys(c.chunk_set for c in conds)
    p = chunking_params
    sets = chunk_sets_of(conds)
    if any(s.boundaries == "chunker" for s in sets.values()):
        raise ChunkingError(f"conditions {[c.name for c in conds if c.cut.boundaries == 'chunker']}: a context "
                            "prefix needs a chunk set 02 can cut (fixed, induced or gold), not a chunker's")
    cuts = cut_all(sets, CutInputs(documents, paragraphs, outlines, p, counter or chunking.load_counter(p.tokenizer)))
    return pd.concat([cuts[n].spans[["doc_id", "start", "end"]].assign(chunk_set=n)[cols] for n in wanted],
                     ignore_index=True)
