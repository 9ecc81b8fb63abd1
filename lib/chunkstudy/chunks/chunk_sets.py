"""Every condition's chunks (docs/design.md, "Conditions"; paper 3.2 and appendix E; :func:`build_all`, the
function 04 runs): the paper's and the user's alike, each a :class:`chunkstudy.design.Condition` — the offsets of
a chunk set (:mod:`.cuts`) and a prefix (its kind's :meth:`~chunkstudy.prefix_kinds.PrefixKind.render`).

=========  ==========================================  ==============================================
condition  boundaries (chunk set)                      prefix at embedding time
=========  ==========================================  ==============================================
A0         fixed windows, size-matched to A2 per doc   none
A1         A0                                          LLM/extractive situating context + ``"\\n\\n"``
A2         induced structure                           none
A3-d1/d2   induced structure                           heading path cut to depth 1 / 2
A3         induced structure                           heading path cut to depth 3
P          induced structure (A3's chunks)             a real depth-matched path from another document
A4         A3's chunks, own chunk_ids                  as A3 (same embedded text, so the same vectors)
G2/G3/G4   gold structure                              as A2 / A3 / A4
user       a chunker's cut (or A0, A2, G2), a twin     any prefix kind of ``design.PREFIX_KINDS``
=========  ==========================================  ==============================================

Offsets are half-open character indices into ``documents.text`` and describe *content only*: a prefix never
shifts or enters them, so relevance (computed on offsets) cannot come from a prefix. The embedded text is
``prefix + chunking.content(text, start, end)`` (:func:`embedded_texts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from .. import design, paper, prefix_kinds, stages
from ..corpus import model as docmodel
from ..params import ChunkingParams
from . import chunkers, chunking, cuts
from .chunking import ChunkingError, TokenCounter

CHUNK_COLUMNS = stages.columns("chunks")


def embedded_texts(chunks: pd.DataFrame, documents: pd.DataFrame) -> pd.Series:
    """THE text embedded for each chunk and shown to rerankers: ``prefix + content(text, start, end)``."""
    text = dict(zip(documents["doc_id"], documents["text"]))
    missing = sorted(set(chunks["doc_id"]) - set(text))
    if missing:
        raise ChunkingError(f"chunks: {len(missing)} doc_id(s) not in documents, e.g. {missing[0]!r}")
    vals = [p + chunking.content(text[d], s, e)
            for p, d, s, e in zip(chunks["prefix"], chunks["doc_id"], chunks["start"], chunks["end"])]
    return pd.Series(vals, index=chunks.index, name="embedded_text", dtype=object)


def text_rows(texts: pd.Series) -> tuple[np.ndarray, list[str]]:
    """``(row of each text, unique texts in first-appearance order)``: the embedding matrix row order."""
    codes, uniques = pd.factorize(texts, sort=False)
    return codes.astype("int64"), list(uniques)


# ------------------------------------------------------------------------------------------------ build_all

def _frame(cut: cuts.Cut, c: design.Condition, documents: pd.DataFrame,
           outlines: Mapping[str, pd.DataFrame | None]) -> pd.DataFrame:
    """The condition's rows before its prefix: its chunk set's spans, placed in its outline's sections (a
    structural cut carries its own; a fixed or chunker cut is placed in ``paths_from``, :func:`cuts.section_of`)."""
    if c.structural or c.outline is None:
        df = cut.spans.copy()
        for col in ("route_key", "section_id"):
            if col not in df.columns:
                df[col] = None
        return df
    df = cut.spans[["doc_id", "start", "end", "n_content_tokens"]].reset_index(drop=True)
    df["section_id"], df["route_key"] = cuts.section_of(df, documents, outlines.get(c.outline))
    return df


def _contexts_of(contexts: pd.DataFrame | None, chunk_set: str) -> pd.DataFrame | None:
    if contexts is None:
        return None
    stages.check(contexts, "contexts_a1", ["chunk_set", "doc_id", "start", "end", "context"], "chunk_sets.build_all")
    return contexts[contexts["chunk_set"] == chunk_set]


def build_all(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame | None,
              sections_induced: pd.DataFrame | None, contexts_a1: pd.DataFrame | None, chunking_params: ChunkingParams,
              counter: TokenCounter | None = None, conditions: Iterable[design.Condition] | None = None, *,
              embed_fns: Mapping[str, chunkers.EmbedFn] | None = None, params_dir: Path | None = None) -> dict:
    """Build every condition of ``conditions`` (:class:`chunkstudy.design.Condition`; None = the paper's
    conditions in ``chunking_params.conditions``, the ``chunking`` record): cut each chunk set they name once
    (:func:`cuts.cut_all`), then give each condition its prefixes (its kind's
    :meth:`~chunkstudy.prefix_kinds.PrefixKind.render`). ``contexts_a1``: 02's
    situating contexts, keyed by ``(chunk_set, doc_id, start, end)`` (needed when a condition's prefix reads
    them); ``embed_fns`` and ``params_dir``: a user's semantic chunker's embedders and a ``file.py`` chunker's
    folder (:class:`cuts.CutInputs`).

    Returns a dict:

    * ``"chunks"``: one row per chunk and condition, columns :data:`CHUNK_COLUMNS`, conditions in the given order;
      ``chunk_id`` is ``"<condition>|<doc_id>|<nnnn>"`` (unique across conditions); ``text_row`` indexes the
      unique embedded texts (``"texts"``), the same rows for every embedder. A4/G4 share A3/G3's offsets, prefixes
      and text rows; a condition that takes another whole (:attr:`chunkstudy.design.Condition.of`, e.g. a
      late-pooled ``of: A4``) gets that condition's rows, prefixes and side tables under its own name (it must
      come after it in ``conditions``).
    * ``"texts"``: the unique embedded texts in row order (a list of str).
    * ``"size_matching"``: per document, the A0 target (mean content tokens of its A2 chunks) and the realised
      chunk counts and means of the paper's chunk sets A0, A2 and G2, with ``gap_A0_A2 = mean_A0 - mean_A2``.
    * one entry per side table the prefix kinds declare (:func:`chunkstudy.design.side_tables`,
      :attr:`~chunkstudy.design.PrefixKind.side_table`; the placebo's ``placebo``), each the side
      outputs of its conditions keyed by ``condition`` (:func:`keyed`; empty when no condition of the run has it),
      then one per table derived from them (:func:`chunkstudy.design.derived_tables`; the placebo's
      ``placebo_buckets``): its kind's :meth:`~chunkstudy.prefix_kinds.PrefixKind.derive` of each part whose kind declares it, keyed
      likewise.
    * ``"summary"``: realised pooled means per paper chunk set, the A0-A2 gap, what the kinds that declare a
      summary say of their side tables (:meth:`~chunkstudy.prefix_kinds.PrefixKind.pooled`; the paper's placebo residuals), unique-text
      share, and under ``"extra"`` the facts of the user's conditions.
    """
    p = chunking_params
    conds = list(design.run_conditions(p.conditions) if conditions is None else conditions)
    counter = counter or chunking.load_counter(p.tokenizer)
    outlines = {"sections_induced": sections_induced, "sections_gold": sections_gold}
    cuts.require_outlines(conds, outlines)
    cut = cuts.cut_all(cuts.chunk_sets_of(conds),
                       cuts.CutInputs(documents, paragraphs, outlines, p, counter, dict(embed_fns or {}), params_dir))
    frames, sides = _prefixed(conds, _Build(cut, documents, outlines, contexts_a1, p))
    chunks, texts = _chunk_rows(frames, documents, counter)
    size, summary = _summaries(conds, cut, chunks, texts, sides, p)
    return {"chunks": chunks, "texts": texts, "size_matching": size,
            **{table: keyed(parts, table) for table, parts in {**sides, **_derived(conds, sides)}.items()},
            "summary": summary}


@dataclass(frozen=True)
class _Build:
    """What every condition of one :func:`build_all` is prefixed from: the chunk sets ``cut``, the ``documents``,
    the ``outlines`` (section table name -> table or None), 02's ``contexts`` and the ``chunking`` record."""

    cut: Mapping[str, cuts.Cut]
    documents: pd.DataFrame
    outlines: Mapping[str, pd.DataFrame | None]
    contexts: pd.DataFrame | None
    chunking: ChunkingParams


#: Side tables by table, each condition -> its part.
Sides = dict[str, dict[str, pd.DataFrame]]


def _prefixed(conds: list[design.Condition], b: _Build) -> tuple[list[pd.DataFrame], Sides]:
    """Each condition's rows with its prefixes (its kind's ``render``), in order, and the side tables: per table
    the kinds declare (:func:`chunkstudy.design.side_tables`), condition -> its part. A condition that takes
    another whole (``of``) gets that one's rows and side-table parts under its own name."""
    titles = dict(zip(b.documents["doc_id"], b.documents["title"]))
    # gold and induced section ids may coincide ("doc::s003"), so their heading paths are kept apart
    paths_of = {o: docmodel.heading_paths(t) if t is not None else {} for o, t in b.outlines.items()}
    p = b.chunking
    frames: list[pd.DataFrame] = []
    sides: Sides = {table: {} for table in design.side_tables()}
    built: dict[str, pd.DataFrame] = {}
    for c in conds:
        if c.of is not None:  # the chunks, prefixes and side tables of the condition it takes whole, renamed
            if c.of not in built:
                raise ChunkingError(f"conditions.extra.{c.name}: of: {c.of} is not a condition of this run "
                                    f"{[x.name for x in conds if x.of is None]}")
            frames.append(built[c.of].assign(condition=c.name, shares_vectors_with=None))
            for parts in sides.values():
                if c.of in parts:
                    parts[c.name] = parts[c.of]
            continue
        base = _frame(b.cut[c.chunk_set], c, b.documents, b.outlines)
        depth = c.prefix_depth(p.depths)
        inputs = prefix_kinds.PrefixInputs(c, titles, paths_of.get(str(c.outline), {}), depth,
                                           _contexts_of(b.contexts, c.chunk_set) if c.prefix_kind.contexts else None,
                                           p if c.placebo_seed is None else replace(p, placebo_seed=c.placebo_seed))
        pre, side = c.prefix_kind.render(base, inputs)
        declared = c.prefix_kind.side
        table = None if declared is None else declared.name
        if (side is None) != (declared is None) or len(pre) != len(base):
            raise ChunkingError(f"prefix kind {c.prefix}: its render returned {len(pre)} prefixes for {len(base)} "
                                f"chunks of {c.name} and {'no side table' if side is None else 'a side table'}; it "
                                f"declares side={table!r}")
        if side is not None and declared is not None:
            lacking = [col for col in declared.columns if col != "condition" and col not in side.columns]
            if lacking:
                raise ChunkingError(f"prefix kind {c.prefix}: its side table for {c.name} lacks the columns "
                                    f"{lacking} it declares for {table!r}")
            sides[declared.name][c.name] = side
        df = base.copy()
        df.insert(0, "condition", c.name)
        df["prefix"] = pre
        df["prefix_depth"] = depth
        df["shares_vectors_with"] = c.shares_vectors_with
        frames.append(df)
        built[c.name] = df
    return frames, sides


def _derived(conds: list[design.Condition], sides: Sides) -> Sides:
    """The tables derived from the side tables (:func:`chunkstudy.design.derived_tables`), condition -> its part:
    for each condition whose kind declares the table, its kind's ``derive`` of the condition's
    side-table part (a condition that takes another whole has its kind and a copy of its part)."""
    out: Sides = {table: {} for table in design.derived_tables()}
    for c in conds:
        kind = c.prefix_kind
        part = sides[str(kind.side_table)].get(c.name) if kind.side_table is not None else None
        for table in kind.derived_tables:
            if part is not None:
                out[table][c.name] = kind.derive(table, part)
    return out


def _chunk_rows(frames: list[pd.DataFrame], documents: pd.DataFrame,
                counter: TokenCounter) -> tuple[pd.DataFrame, list[str]]:
    """The conditions' rows as 04's ``chunks`` (:data:`CHUNK_COLUMNS`): their ``chunk_id``, prefix tokens and
    ``text_row`` into the unique embedded texts, which are returned beside them."""
    chunks = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CHUNK_COLUMNS)
    chunks["chunk_id"] = (chunks["condition"] + "|" + chunks["doc_id"] + "|"
                          + chunks.groupby(["condition", "doc_id"], sort=False).cumcount().map("{:04d}".format))
    uniq_prefix = list(dict.fromkeys(chunks["prefix"]))
    n_pre = dict(zip(uniq_prefix, counter(uniq_prefix)))
    chunks["n_prefix_tokens"] = chunks["prefix"].map(n_pre).astype("int64")
    rows, texts = text_rows(embedded_texts(chunks, documents))
    chunks["text_row"] = rows
    return chunks[CHUNK_COLUMNS], texts


def _summaries(conds: list[design.Condition], cut: Mapping[str, cuts.Cut], chunks: pd.DataFrame, texts: list[str],
               sides: Sides, p: ChunkingParams) -> tuple[pd.DataFrame, dict]:
    """04's ``size_matching`` table and ``summary.json`` (:func:`_summary`, :func:`_kind_summaries`, the user's
    conditions under ``extra``); ``sides``: the side tables, table -> condition -> part."""
    paper_sets = {n: cut[n].spans for n in design.CHUNK_SETS if n in cut}
    size = _size_matching(paper_sets)
    summary = _summary(chunks, paper_sets, size, texts, p.max_chunk_tokens, p.min_chunk_tokens)
    summary.update(_kind_summaries([c for c in conds if not c.user], sides, p))
    extra = _user_facts([c for c in conds if c.user], cut, chunks, sides, p.depths)
    if extra:
        summary["extra"] = extra
    return size, summary


def _kind_summaries(paper: list[design.Condition], sides: Sides, p: ChunkingParams) -> dict:
    """What each kind that declares a summary (:attr:`chunkstudy.design.PrefixKind.summary`; the placebo's
    residuals) says of its side table, pooled over the ``paper`` conditions of the kind that have a part
    (its ``pooled``); nothing for a kind no paper condition of the run has."""
    out: dict[str, Any] = {}
    for kind in design.PREFIX_KINDS.values():
        if not kind.summary:
            continue
        parts = sides.get(str(kind.side_table), {})
        mine = [parts[c.name] for c in paper if c.prefix_kind.name == kind.name and c.name in parts]
        if mine:
            out.update(kind.pooled(pd.concat(mine, ignore_index=True), p))
    return out


def keyed(tables: Mapping[str, pd.DataFrame], table: str) -> pd.DataFrame:
    """One side table per condition as the declared table ``table``, keyed by its first column ``condition``."""
    cols = stages.columns(table)
    parts = [t.assign(condition=name)[cols] for name, t in tables.items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def _size_matching(sets: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per document, ``n_<set>`` and ``mean_<set>`` of each paper chunk set cut; for the fixed set A0 its
    ``target`` (the mean of the set it is matched to, A2) and ``gap_A0_A2``."""
    parts = []
    for name in design.CHUNK_SETS:
        if name in sets:
            g = sets[name].groupby("doc_id", sort=False)["n_content_tokens"]
            parts.append(pd.DataFrame({f"n_{name}": g.size(), f"mean_{name}": g.mean().astype(float)}))
    if not parts:
        return pd.DataFrame(columns=["doc_id"])
    out = pd.concat(parts, axis=1).rename_axis("doc_id").reset_index()
    for cs in design.CHUNK_SETS.values():
        if cs.name in sets and cs.matched_to is not None and cs.matched_to in sets:
            out.insert(1, "target", out[f"mean_{cs.matched_to}"])
            out[f"gap_{cs.name}_{cs.matched_to}"] = out[f"mean_{cs.name}"] - out[f"mean_{cs.matched_to}"]
    return out


def _summary(chunks: pd.DataFrame, sets: Mapping[str, pd.DataFrame], size: pd.DataFrame, texts: list[str],
             mx: int, mn: int) -> dict:
    """04's ``summary.json``: per condition the chunk count and mean content/prefix tokens; per paper chunk set its
    realised count and pooled mean content tokens (the size-matching numbers, paper §3.2), chunks over/under the
    split/merge bounds; the A0 - A2 gap pooled and per document (mean and max |gap|, documents whose |gap|
    exceeds the paper's bound ``size_gap_tolerance``)."""
    by = chunks.groupby("condition", sort=False)
    out: dict[str, Any] = {
        "n_chunks": {k: int(v) for k, v in by.size().items()},
        "mean_content_tokens": {k: float(v) for k, v in by["n_content_tokens"].mean().items()},
        "mean_prefix_tokens": {k: float(v) for k, v in by["n_prefix_tokens"].mean().items()},
        "realised_n": {k: int(len(v)) for k, v in sets.items()},
        "realised_mean": {k: float(v["n_content_tokens"].mean()) for k, v in sets.items()},
        "over_max": {k: int((v["n_content_tokens"] > mx).sum()) for k, v in sets.items()
                     if design.CHUNK_SETS[k].structural},
        "under_min": {k: int((v["n_content_tokens"] < mn).sum()) for k, v in sets.items()
                      if design.CHUNK_SETS[k].structural},
        "n_texts": len(texts),
        "n_chunk_rows": int(len(chunks)),
        "unique_text_share": float(len(texts) / len(chunks)) if len(chunks) else math.nan,
    }
    for cs in design.CHUNK_SETS.values():
        if cs.matched_to is None or cs.name not in sets:
            continue
        fixed, induced = cs.name, cs.matched_to
        gap = size[f"gap_{fixed}_{induced}"].abs()
        tolerance = paper.value("study", "design", "size_gap_max")
        out[f"size_gap_{fixed}_{induced}"] = out["realised_mean"][fixed] - out["realised_mean"][induced]
        out[f"max_abs_doc_gap_{fixed}_{induced}"] = float(gap.max()) if len(size) else 0.0
        out[f"mean_abs_doc_gap_{fixed}_{induced}"] = float(gap.mean()) if len(size) else 0.0
        out["size_gap_tolerance"] = tolerance
        out[f"n_docs_{fixed}_{induced}"] = int(len(size))
        out[f"docs_over_tolerance_{fixed}_{induced}"] = int((gap > tolerance).sum())
    return out


def _set_facts(cut: pd.DataFrame) -> dict:
    n = cut["n_content_tokens"]
    return {"n_chunks": int(len(cut)), "n_docs": int(cut["doc_id"].nunique()),
            "mean_content_tokens": float(n.mean()) if len(n) else math.nan,
            "max_content_tokens": int(n.max()) if len(n) else 0}


def _size_gap(spans: pd.DataFrame, twin: pd.DataFrame) -> dict:
    """The twin's size match (paper §3.2, "Size matching"): pooled means and the per-document mean gap."""
    a, b = chunking.doc_means(twin), chunking.doc_means(spans)
    gaps = [abs(a[d] - b[d]) for d in a if d in b]
    return {"mean_twin": float(twin["n_content_tokens"].mean()) if len(twin) else math.nan,
            "mean_condition": float(spans["n_content_tokens"].mean()) if len(spans) else math.nan,
            "mean_abs_doc_gap": float(sum(gaps) / len(gaps)) if gaps else math.nan,
            "max_abs_doc_gap": float(max(gaps)) if gaps else math.nan}


_SPEC_OUTLINE = {v: k for k, v in design.OUTLINES.items()}


def _user_facts(conds: list[design.Condition], cut: Mapping[str, cuts.Cut], chunks: pd.DataFrame,
                sides: Sides, depths: Any) -> dict:
    """``summary["extra"]``: per user condition (its twin under it) what 04 built: the chunker, its version and
    options (or the paper chunk set it takes), the prefix and its depth, the outline, the chunker's placement
    counts, the chunks of the condition and of its twin (``sets``, with what a kind that declares a summary says of
    the condition's side table, under the table's name: a placebo's residuals and donors) and the twin's size
    gap."""
    out: dict[str, Any] = {}
    for c in conds:
        owner = out.setdefault(c.twin_of or c.name, {})
        if c.twin_of is None:
            ch = c.cut.chunker
            facts: dict[str, Any] = {"prefix": c.prefix, "prefix_depth": c.prefix_depth(depths),
                                     "outline": _SPEC_OUTLINE.get(str(c.paths_from))}
            if ch is not None:
                report = cut[c.chunk_set].report
                facts = {"chunker": ch.name, "version": chunkers.version(ch.name), "options": dict(ch.options),
                         **facts, "overlap": ch.overlap, "unaligned": ch.unaligned,
                         **{k: report[k] for k in ("empty", "unplaced", "dropped_chars", "docs_unaligned")}}
            else:
                facts = {"chunker": None, "boundaries": c.boundaries, "chunk_set": c.chunk_set,
                         **({"of": c.of} if c.of is not None else {}), **facts}
            owner.update(facts)
        rows = chunks[chunks["condition"] == c.name]
        owner.setdefault("sets", {})[c.name] = _set_facts(rows)
        kind = c.prefix_kind
        part = sides.get(str(kind.side_table), {}).get(c.name)
        if kind.summary and part is not None:
            owner["sets"][c.name][str(kind.side_table)] = kind.facts(part)
        if c.twin_of is not None:
            owner["twin"] = c.name
            owner["size_gap"] = _size_gap(cut[str(c.cut.matched_to)].spans, cut[c.chunk_set].spans)
    return out


def chunks_side_by_side(chunks: pd.DataFrame, documents: pd.DataFrame, doc_id: str,
                        conds: tuple[str, ...] = tuple(design.CHUNK_SETS), preview: int = 70) -> pd.DataFrame:
    """One document cut under several conditions, one column per condition and one row per chunk position:
    ``"[start, end) n tok | prefix-free opening words…"`` (for display only)."""
    text = dict(zip(documents["doc_id"], documents["text"]))
    if doc_id not in text:
        raise ChunkingError(f"chunks_side_by_side: document {doc_id!r} is not in documents")
    cols = {}
    for c in conds:
        g = chunks[(chunks["condition"] == c) & (chunks["doc_id"] == doc_id)].sort_values("start")
        cols[c] = pd.Series([f"[{s}, {e}) {n} tok | {chunking.content(text[doc_id], s, e)[:preview]}"
                             for s, e, n in zip(g["start"], g["end"], g["n_content_tokens"])], dtype=object)
    return pd.DataFrame(cols).fillna("")


# ------------------------------------------------------------------------------------------------ 04 in one call

def embed_functions(conditions: Iterable[design.Condition], embedders: Mapping[str, Any], store: Any) -> dict:
    """``{embedder key: texts -> unit vectors}`` for every embedder a user's chunker cuts with (a semantic
    chunker's ``embedder``), through the run's embedding store ``store``
    (:class:`chunkstudy.embed_store.EmbeddingStore`), so the vectors it computes while cutting are the ones the run
    embeds with and are never computed twice."""
    from .. import embed

    keys = sorted({c.cut.chunker.embedder for c in conditions if c.cut.chunker and c.cut.chunker.embedder})
    out = {}
    for key in keys:
        model = embed.load_embedder(embedders[key], key)
        out[key] = lambda texts, model=model: store.embed(model, list(texts))
    return out


def build_for_run(cfg: Any, conditions: Iterable[design.Condition], documents: pd.DataFrame,
                  paragraphs: pd.DataFrame, sections_gold: pd.DataFrame | None, sections_induced: pd.DataFrame | None,
                  contexts_a1: pd.DataFrame | None, store: Any) -> dict:
    """:func:`build_all` of ``conditions`` (the run's: ``cfg.params().run_conditions``, ``chunking.conditions`` and
    ``conditions.extra``) under the run's parameters ``cfg``: its ``chunking`` record and token counter, its
    embedding store for a semantic chunker (:func:`embed_functions`) and the parameter file's folder for a
    ``file.py:function`` chunker. What 04 runs."""
    p = cfg.params()
    conds = list(conditions)
    return build_all(documents, paragraphs, sections_gold, sections_induced, contexts_a1, p.chunking,
                     chunking.load_counter(p.chunking.tokenizer), conds,
                     embed_fns=embed_functions(conds, p.embed.embedders, store), params_dir=Path(cfg.path).parent)
