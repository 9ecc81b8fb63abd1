"""What is put before a chunk's content at embedding time: one function per prefix kind.

Each kind is declared once in :data:`chunkstudy.design.PREFIX_KINDS` (its name, whether it reads a heading path
or the situating contexts, its side table, the tables derived from it and whether 04's summary summarises it) and
rendered by its function here, :data:`FUNCTIONS`; a derived table's function is in :data:`DERIVED` and a summary's
in :data:`SUMMARIES` (each registry is checked against the declaration on import, as :mod:`chunkstudy.corpus.build`
checks the corpus kinds). A prefix
function takes the rows of the condition's chunk set (``doc_id, start, end, section_id, ...``: half-open content
offsets into ``documents.text``) and the condition's :class:`PrefixInputs`, and returns one prefix per row and a
side table (or None): ``(prefixes, side_table)``. Adding a kind is one entry in ``design.PREFIX_KINDS`` and one
function here (docs/extending.md, "A prefix kind").

A prefix is never part of a chunk's offsets: the embedded text is ``prefix + chunking.content(text, start, end)``
(:func:`chunkstudy.chunks.chunk_sets.embedded_texts`), so relevance (computed on offsets) cannot come from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import pandas as pd

from .. import design
from ..params import ChunkingParams
from .chunking import ChunkingError
from .placebo import placebo_assign, placebo_buckets, residual_facts, residual_summary

PATH_SEP = " \u203a "  # " › "


@dataclass(frozen=True)
class PrefixInputs:
    """What a prefix function may read besides the chunks: the ``condition`` (:class:`chunkstudy.design.Condition`),
    the documents' ``titles`` (doc_id -> title), the heading ``paths`` of the condition's outline (section_id ->
    path, outermost first; empty when it has none), the ``depth`` a heading path is cut to
    (:meth:`~chunkstudy.design.Condition.prefix_depth`), the situating ``contexts`` 02 wrote for the condition's
    chunk set (``contexts_a1`` rows: doc_id, start, end, context; None when the run has none) and the
    ``chunking`` record (the placebo's seed and method)."""

    condition: design.Condition
    titles: Mapping[str, str]
    paths: Mapping[str, Sequence[str]]
    depth: int
    contexts: pd.DataFrame | None
    chunking: ChunkingParams


#: ``(chunks, inputs) -> (one prefix per chunk, side table or None)``.
PrefixFn = Callable[[pd.DataFrame, PrefixInputs], "tuple[list[str], pd.DataFrame | None]"]


def render_prefix(title: str, path: Sequence[str]) -> str:
    """``"[Title › Section › Subsection]\\n\\n"``: the document title, then the heading path, joined by ``" › "``.

    Empty components (an untitled lead) are left out; a lead chunk therefore renders as ``"[Title]\\n\\n"``.
    """
    parts = [p for p in [title, *path] if p]
    return "[" + PATH_SEP.join(parts) + "]\n\n"


def cut_paths(chunks: pd.DataFrame, inputs: PrefixInputs) -> list[tuple[str, ...]]:
    """The heading path of each chunk's section, cut to ``inputs.depth``; a chunk with no section (its condition
    names no outline, or the outline was not given) is an error naming the condition."""
    c = inputs.condition
    sections = chunks["section_id"].tolist() if "section_id" in chunks else [None] * len(chunks)
    if any(s is None or s not in inputs.paths for s in sections):
        where = f"conditions.extra.{c.name}" if c.user else f"condition {c.name}"
        raise ChunkingError(f"{where}: a {c.prefix} prefix needs the heading paths of {c.outline or 'an outline'} "
                            "(its chunks must lie in sections of that table)")
    return [tuple(inputs.paths[str(s)][:inputs.depth]) for s in sections]


def none(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """No prefix: the chunk's content is embedded alone."""
    return [""] * len(chunks), None


def title(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """The document title alone, ``"[Title]\\n\\n"`` (a heading path of depth 0)."""
    return [render_prefix(inputs.titles[d], []) for d in chunks["doc_id"]], None


def path(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """The real heading path of the section the chunk's content starts in, cut to the condition's depth:
    ``"[Title › Section › Subsection]\\n\\n"`` (A3, A3-dN, G3; a user's ``path``)."""
    return [render_prefix(inputs.titles[d], p) for d, p in zip(chunks["doc_id"], cut_paths(chunks, inputs))], None


def placebo(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """A real heading path of the same depth from another document (P; paper §3.2): :func:`placebo_assign` over
    the unique (document, cut path) pairs of the chunks (``chunking.placebo_seed``, ``placebo_method``), each
    chunk rendered with its pair's donor title and path. The side table is the assignment with ``n_chunks``
    (chunks carrying each pair), which 04 writes under the condition's name (``placebo``)."""
    pairs = pd.DataFrame({"doc_id": chunks["doc_id"].tolist(), "path": cut_paths(chunks, inputs)})
    assigned = placebo_assign(pairs, inputs.chunking.placebo_seed, inputs.chunking.placebo_method)
    look = {(r.doc_id, tuple(r.path)): (r.placebo_doc_id, r.placebo_path) for r in assigned.itertuples(index=False)}
    prefixes = [render_prefix(inputs.titles[look[k][0]], look[k][1]) for k in zip(pairs["doc_id"], pairs["path"])]
    used = pairs.value_counts(["doc_id", "path"])
    assigned["n_chunks"] = [int(used[(d, tuple(p))]) for d, p in zip(assigned["doc_id"], assigned["path"])]
    return prefixes, assigned


def context(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """The situating context 02 wrote for each chunk of the condition's chunk set (A1: Anthropic's contextual
    retrieval recipe, or the extractive baseline), followed by ``"\\n\\n"``; an empty context gives no prefix.
    Looked up by ``(doc_id, start, end)`` among the contexts of the chunk set (``inputs.contexts``)."""
    c = inputs.condition
    if inputs.contexts is None:
        raise ChunkingError(f"condition {c.name}: its context prefix needs contexts_a1 (written by 02_induce) and "
                            "none was given")
    ctx = inputs.contexts[["doc_id", "start", "end", "context"]]
    dup = ctx.duplicated(["doc_id", "start", "end"])
    if dup.any():
        r = ctx[dup].iloc[0]
        raise ChunkingError(f"contexts_a1: {int(dup.sum())} duplicate window(s) of chunk set {c.chunk_set}, e.g. doc "
                            f"{r.doc_id!r} [{r.start},{r.end}); written by 02_induce")
    look = {(d, int(s), int(e)): x for d, s, e, x in ctx.itertuples(index=False)}
    out, missing = [], []
    for d, s, e in zip(chunks["doc_id"], chunks["start"], chunks["end"]):
        x = look.get((d, int(s), int(e)))
        if x is None:
            missing.append((d, s, e))
            x = ""
        x = str(x).strip()
        out.append(x + "\n\n" if x else "")
    if missing:
        d, s, e = missing[0]
        raise ChunkingError(f"contexts_a1: no context for {len(missing)} of {len(chunks)} {c.chunk_set} chunks, e.g. "
                            f"doc {d!r} [{s},{e}); 02_induce writes one per chunk of every chunk set a context "
                            "condition names, with the same chunking parameters as 04")
    return out, None


#: Prefix kind -> its function: exactly the kinds :data:`chunkstudy.design.PREFIX_KINDS` declares.
FUNCTIONS: dict[str, PrefixFn] = {"none": none, "title": title, "context": context, "path": path,
                                  "placebo": placebo}
if tuple(FUNCTIONS) != design.PREFIXES:  # pragma: no cover - a kind added on one side only
    raise ImportError(f"chunkstudy.chunks.prefixes.FUNCTIONS {list(FUNCTIONS)} differ from design.PREFIX_KINDS "
                      f"{list(design.PREFIXES)}: declare the kind there and give it its function here")


#: Derived table -> its function: one condition's part of its kind's side table -> that condition's part of the
#: derived table (without ``condition``, which 04 adds): exactly the tables the kinds declare
#: (:attr:`chunkstudy.design.PrefixKind.derived_tables`).
DERIVED: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {"placebo_buckets": placebo_buckets}
if set(DERIVED) != set(design.derived_tables()):  # pragma: no cover - a table added on one side only
    raise ImportError(f"chunkstudy.chunks.prefixes.DERIVED {sorted(DERIVED)} differ from the derived tables "
                      f"design.PREFIX_KINDS declares {sorted(design.derived_tables())}")


@dataclass(frozen=True)
class Summary:
    """What 04's ``summary.json`` says of a kind's side table (:attr:`chunkstudy.design.PrefixKind.summary`):
    ``pooled(side tables of the paper's conditions of the kind, concatenated; the chunking record)`` -> top-level
    keys of the summary; ``facts(one user condition's part)`` -> what ``extra`` says of that condition's table,
    under the side table's name."""

    pooled: Callable[[pd.DataFrame, ChunkingParams], dict]
    facts: Callable[[pd.DataFrame], dict]


#: Prefix kind -> its :class:`Summary`: exactly the kinds that declare ``summary=True``.
SUMMARIES: dict[str, Summary] = {"placebo": Summary(residual_summary, residual_facts)}
if set(SUMMARIES) != {k.name for k in design.PREFIX_KINDS.values() if k.summary}:  # pragma: no cover
    raise ImportError(f"chunkstudy.chunks.prefixes.SUMMARIES {sorted(SUMMARIES)} differ from the kinds "
                      "design.PREFIX_KINDS declares with summary=True")


def render(chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
    """The prefixes of ``inputs.condition``'s chunks under its kind (:data:`FUNCTIONS`), and its side table."""
    return FUNCTIONS[inputs.condition.prefix](chunks, inputs)
