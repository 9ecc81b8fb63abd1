"""Conditions a user adds to the study (``conditions.extra``; docs/chunker.md): a chunker's
boundaries (:mod:`.chunkers`), one of the study's prefix kinds, and optionally a size-matched twin.

=============  ==========================================================================================
key            meaning
=============  ==========================================================================================
chunker        ``chonkie:SemanticChunker``, ``semchunk``, ``langchain:RecursiveCharacterTextSplitter``,
               ``package.module:function``, ``file.py:function`` (:func:`.chunkers.load`)
options        keyword arguments of the chunker
prefix         ``none``; ``title`` (``[Title]``); ``path`` (the real heading path of the section the chunk
               starts in, ``[Title › Section › Subsection]``, cut to ``depth``); ``placebo`` (a real path of
               the same depth from another document, the study's permutation: :func:`chunk_sets.placebo_assign`)
depth          heading levels a path or placebo prefix keeps; null = the deepest of ``chunking.depths``
outline        the outline a path comes from: ``induced`` (02, as A3) or ``gold`` (01, as G3)
size_matched_twin  adds ``<NAME>-fixed``: fixed windows size-matched per document to this condition's mean
               content tokens (the paper's A0 rule, :func:`chunking.fixed_windows`), with the same prefix
               kind, so ``NAME − NAME-fixed`` isolates boundary placement from chunk size
overlap        the chunker's chunks may overlap (declared; otherwise an overlap is an error)
unaligned      ``error`` (text the chunker drops or rewrites stops 04, naming the document) or ``warn``
               (counted in 04's summary and warned about)
embedder       the embedder the semantic chunker uses; null = ``embed.strong`` (resolved when the parameters
               load, so changing ``embed.strong`` reruns 04)
=============  ==========================================================================================

Offsets are half-open character indices into ``documents.text`` and cover content only, as for every condition;
a prefix never enters them. Extra conditions are retrieved flat.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from .. import config, design
from ..corpus import model as docmodel
from ..params import ExtraConditionParams
from . import chunk_sets, chunkers, chunking


class ExtraConditionError(ValueError):
    """A user condition is declared wrongly (the message names the key)."""


@dataclass(frozen=True)
class ExtraCondition:
    """One user condition: its name and its declared record (``conditions.extra.<name>``,
    :class:`chunkstudy.params.ExtraConditionParams`, whose fields read through: ``c.chunker``, ``c.prefix``)."""

    name: str
    spec: ExtraConditionParams

    def __getattr__(self, key: str) -> Any:
        if key == "spec":  # not set yet (unpickling): no recursion
            raise AttributeError(key)
        return getattr(self.spec, key)

    @property
    def twin(self) -> str | None:
        """The size-matched twin's name (``<name>-fixed``), or None."""
        return self.name + design.TWIN_SUFFIX if self.spec.size_matched_twin else None

    @property
    def sections(self) -> str:
        """The section table the prefix's headings (and every chunk's ``route_key``) come from."""
        return design.EXTRA_OUTLINES[self.spec.outline]

    def prefix_depth(self, depths: Iterable[int]) -> int:
        """Heading levels the prefix keeps: 0 for none and title, else ``depth`` or the deepest of ``depths``."""
        if self.spec.prefix in ("none", "title"):
            return 0
        return int(self.spec.depth) if self.spec.depth is not None else int(max(depths))


def declared(extra: Mapping[str, Any] | None) -> list[ExtraCondition]:
    """The user conditions of a ``conditions.extra`` mapping (name -> record, or a mapping validated into one with
    the parameter file's rules and defaults), in declared order."""
    out = []
    for name, spec in (extra or {}).items():
        try:
            rec = config.record("conditions.extra.*", spec, where=f"conditions.extra.{name}")
        except config.ConfigError as e:
            raise ExtraConditionError(str(e).replace("conditions.extra.*", f"conditions.extra.{name}")) from None
        if not rec.chunker:
            raise ExtraConditionError(f"conditions.extra.{name}.chunker is required (e.g. 'semchunk', "
                                      "'chonkie:SemanticChunker', 'mypackage.mymodule:chunk')")
        out.append(ExtraCondition(str(name), rec))
    return out


# ------------------------------------------------------------------------------------------------ building

def _content_start(text: str, s: int, e: int) -> int:
    """The first non-whitespace offset of ``[s, e)`` (where a chunk's content starts)."""
    piece = text[s:e]
    return s + (len(piece) - len(piece.lstrip()))


def section_of(chunks: pd.DataFrame, documents: pd.DataFrame, sections: pd.DataFrame | None
               ) -> tuple[list[str | None], list[str | None]]:
    """``(section_id, route_key)`` of each chunk: the non-empty section of ``sections`` in which the chunk's
    content starts, and that section's level-1 ancestor; Nones when ``sections`` is None."""
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


def _prefixes(c: ExtraCondition, spans: pd.DataFrame, titles: Mapping[str, str], paths: Mapping,
              depth: int, placebo_seed: int, placebo_method: str) -> tuple[list[str], pd.DataFrame | None]:
    """Each chunk's prefix under the condition's kind (:data:`design.EXTRA_PREFIXES`), and the placebo table for
    a placebo prefix."""
    if c.prefix == "none":
        return [""] * len(spans), None
    if c.prefix == "title":
        return [chunk_sets.render_prefix(titles[d], []) for d in spans["doc_id"]], None
    missing = [s for s in spans["section_id"] if s is None]
    if missing:
        raise ExtraConditionError(f"conditions.extra.{c.name}: a {c.prefix} prefix needs {c.sections}")
    cut = [tuple(paths[s][:depth]) for s in spans["section_id"]]
    if c.prefix == "path":
        return [chunk_sets.render_prefix(titles[d], list(p)) for d, p in zip(spans["doc_id"], cut)], None
    return chunk_sets.placebo_prefixes(spans["doc_id"].tolist(), cut, titles, placebo_seed, placebo_method)


def build(documents: pd.DataFrame, sections: Mapping[str, pd.DataFrame | None], extra: Mapping[str, Any] | None,
          chunking_params: Any, counter: chunking.TokenCounter,
          embed_fns: Mapping[str, chunkers.EmbedFn] | None = None, params_dir: Path | None = None,
          _unit_cache: dict | None = None) -> dict:
    """Every user condition of ``conditions.extra`` (and its twin) on ``documents``.

    ``sections``: ``{"sections_induced": ..., "sections_gold": ...}`` (a path prefix needs its outline; either may
    be None when no condition needs it); ``chunking_params``: the ``chunking`` record (tokenizer counts, sentence
    splitter of the twins' windows, depths, placebo seed and method); ``counter``: its token counter; ``embed_fns``:
    embedder key -> texts -> unit vectors, for a semantic chunker (its ``embedder``, :func:`embed_functions`); ``params_dir``: where a
    ``file.py:function`` chunker is found.

    Returns ``{"frames": [one table per condition: condition, doc_id, start, end, section_id, route_key,
    n_content_tokens, prefix, prefix_depth, shares_vectors_with], "summary": {name: facts}}``; a placebo prefix's
    residual same-document assignments and donors are among its facts. Chunk ids and text rows are assigned with
    the paper's conditions (:func:`chunk_sets.build_all`).
    """
    conds = declared(extra)
    if not conds:
        return {"frames": [], "summary": {}}
    p = chunking_params
    titles = dict(zip(documents["doc_id"], documents["title"]))
    text_by_doc = dict(zip(documents["doc_id"], documents["text"]))
    cache = {} if _unit_cache is None else _unit_cache
    frames, summary = [], {}
    for c in conds:
        where = f"conditions.extra.{c.name}"
        table = sections.get(c.sections)
        if c.prefix in ("path", "placebo") and table is None:
            raise ExtraConditionError(f"{where}: a {c.prefix} prefix on the {c.outline} outline needs {c.sections}")
        embed_fn = (embed_fns or {}).get(c.embedder) if c.embedder else None
        fn = chunkers.load(c.chunker, c.options, counter=counter, embed_fn=embed_fn, params_dir=params_dir,
                           where=f"{where} ({c.chunker})")
        spans, report = chunkers.chunk_documents(documents, fn, name=c.name, chunker=c.chunker, overlap=c.overlap,
                                                 unaligned=c.unaligned)
        spans["n_content_tokens"] = pd.Series(
            counter([chunking.content(text_by_doc[d], s, e) for d, s, e in
                     zip(spans["doc_id"], spans["start"], spans["end"])]), index=spans.index, dtype="int64")
        sets = [(c.name, spans)]
        if c.twin is not None:
            targets = chunking.doc_means(spans)
            twin_docs = documents[documents["doc_id"].isin(targets)]
            twin = chunking.fixed_windows(twin_docs, targets, counter, p.sentence_splitter, _unit_cache=cache)
            sets.append((c.twin, twin))
        paths = docmodel.heading_paths(table) if table is not None else {}
        depth = c.prefix_depth(p.depths)
        facts: dict[str, Any] = {"chunker": c.chunker, "version": chunkers.version(c.chunker),
                                 "options": dict(c.options), "prefix": c.prefix, "prefix_depth": depth,
                                 "outline": c.outline, "overlap": c.overlap, "unaligned": c.unaligned,
                                 **{k: report[k] for k in ("empty", "unplaced", "dropped_chars", "docs_unaligned")}}
        for name, cut in sets:
            cut = cut[["doc_id", "start", "end", "n_content_tokens"]].reset_index(drop=True)
            cut["section_id"], cut["route_key"] = section_of(cut, documents, table)
            prefixes, placebo = _prefixes(c, cut, titles, paths, depth, p.placebo_seed, p.placebo_method)
            frames.append(cut.assign(condition=name, prefix=prefixes, prefix_depth=depth, shares_vectors_with=None))
            facts.setdefault("sets", {})[name] = _set_facts(cut)
            if placebo is not None:
                facts["sets"][name]["placebo"] = {**chunk_sets.placebo_donors(placebo),
                                                  "pairs": int(len(placebo)),
                                                  "min_residual": chunk_sets.min_residual(placebo)}
        if c.twin is not None:
            facts["twin"] = c.twin
            facts["size_gap"] = _size_gap(sets[0][1], sets[1][1])
        summary[c.name] = facts
    return {"frames": frames, "summary": summary}


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


def embed_functions(extra: Mapping[str, Any] | None, embedders: Mapping[str, Any], store: Any) -> dict:
    """``{embedder key: texts -> unit vectors}`` for every embedder a user condition cuts with (the semantic
    chunker's ``embedder``), through the run's embedding store ``store``
    (:class:`chunkstudy.embed_store.EmbeddingStore`),
    so the vectors it computes while cutting are the ones the run embeds with and are never computed twice."""
    from .. import embed

    keys = sorted({c.embedder for c in declared(extra) if c.embedder})
    out = {}
    for key in keys:
        model = embed.load_embedder(embedders[key], key)
        out[key] = lambda texts, model=model: store.embed(model, list(texts))
    return out


def build_for_run(cfg: Any, extra: Mapping[str, Any], documents: pd.DataFrame, sections_gold: pd.DataFrame | None,
                  sections_induced: pd.DataFrame | None, store: Any) -> dict | None:
    """:func:`build` of ``extra`` (``cfg.params("conditions").extra``; None when it declares none) for a run's
    parameters ``cfg``: the run's token counter, its embedding store for a semantic chunker, and the parameter
    file's folder for a ``file.py:function`` chunker. 04 passes the result to
    :func:`chunkstudy.chunks.chunk_sets.build_all`."""
    if not extra:
        return None
    p = cfg.params("chunking")
    return build(documents, {"sections_induced": sections_induced, "sections_gold": sections_gold}, extra, p,
                 chunking.load_counter(p.tokenizer), embed_functions(extra, cfg.params("embed").embedders, store),
                 params_dir=Path(cfg.path).parent)
