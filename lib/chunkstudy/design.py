"""The study's design, declared once: its conditions, its pre-registered contrasts and its metrics (paper §3.2,
§4, §5.1 and the appendix; docs/design.md, "Conditions" and "Metrics").

Everything else derives from these records, as ir_measures derives a measure's name, its table column and its
figure label from one declaration: the parameter schema's choices and defaults (:mod:`chunkstudy.config`), which
outline each condition is cut from and how its prefix is built (:mod:`chunkstudy.chunks.chunk_sets`), which conditions are
retrieved two-stage (:mod:`chunkstudy.retrieve`), the BM25 diagnostic's structures (:mod:`chunkstudy.queries.bm25`),
the depth ladder of the dose-response (:mod:`chunkstudy.stats`), the metric names 06 writes
(:mod:`chunkstudy.metrics`), Table 4, the display orders, the contrasts' questions (:mod:`chunkstudy.report.tables`) and
the figures' colours.

This module sits at the bottom of the import floors: it imports nothing of the project but its metrics
(:mod:`chunkstudy.design_metrics`, re-exported here), its prefix kinds (:mod:`chunkstudy.prefix_kinds`, one class per
module of :mod:`chunkstudy.prefix`) and :func:`chunkstudy.errors.lookup`,
and every module may read it. A condition or metric named anywhere else is named by one of these records (a test scans the library for a
second registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from . import design_metrics, prefix_kinds
from .design_metrics import (  # noqa: F401  (the metrics are declared there; design is where they are read)
    METRICS, PRIMARY_METRIC, Metric, is_metric, metric_axis, metric_names, metric_of, metric_order_key,
    parameter_fields,
)
from .errors import lookup  # noqa: F401  (design.lookup: the one way a declared name is looked up)
from .prefix_kinds import PrefixKind  # noqa: F401  (design.PrefixKind: what a prefix kind declares)

#: ``design.metric(key)``: the metric family declared under ``key`` (:func:`chunkstudy.design_metrics.metric`)
metric = design_metrics.metric



# ---------------------------------------------------------------------------------------------------------------
# Conditions: boundaries (a chunk set), a prefix kind, an embedding mode, a routing
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boundaries:
    """A kind of chunk boundaries. ``outline``: the section table a structural cut is made from (None for fixed
    windows and a chunker's cut); ``structural``: chunks are the text between consecutive section starts (split
    above ``chunking.max_chunk_tokens``, merged below ``min_chunk_tokens``); ``label``: how figures name the cut,
    ``chunks``: how tables name its chunks. The function that cuts each kind is
    :data:`chunkstudy.chunks.cuts.FUNCTIONS` (checked against this declaration on import)."""

    kind: str
    outline: str | None
    structural: bool
    label: str
    chunks: str


#: The kinds of boundaries: the paper's three (§3.2: fixed windows size-matched to another cut, induced structure,
#: gold structure) and a user's chunker (:mod:`chunkstudy.chunks.chunkers`).
BOUNDARIES: dict[str, Boundaries] = {
    "fixed": Boundaries("fixed", None, False, "fixed windows", "fixed windows"),
    "induced": Boundaries("induced", "sections_induced", True, "induced structure", "induced chunks"),
    "gold": Boundaries("gold", "sections_gold", True, "gold structure", "gold chunks"),
    "chunker": Boundaries("chunker", None, False, "a chunker's cut", "chunker chunks"),
}


#: The kind that puts nothing before a chunk: a condition's prefix unless it names another.
NO_PREFIX = "none"

#: Every prefix kind, paper's and user's alike, in declared order: one class per module of
#: :mod:`chunkstudy.prefix`, found there by its file (:mod:`chunkstudy.prefix_kinds`, where
#: :class:`PrefixKind` says what a kind declares). Every decision about a kind reads its declaration, never its
#: name (a test scans the library for a comparison with a kind's name).
PREFIX_KINDS: dict[str, PrefixKind] = prefix_kinds.KINDS
if NO_PREFIX not in PREFIX_KINDS:  # pragma: no cover - the default prefix's module removed
    raise ImportError(f"chunkstudy.prefix declares no prefix kind {NO_PREFIX!r}, every condition's default")


def side_tables() -> tuple[str, ...]:
    """The 04 tables the prefix kinds' side outputs go to (:attr:`PrefixKind.side_table`), in declared order."""
    return tuple(k.side_table for k in PREFIX_KINDS.values() if k.side_table is not None)


def derived_tables() -> tuple[str, ...]:
    """The 04 tables computed from the prefix kinds' side tables (:attr:`PrefixKind.derived_tables`), in declared
    order."""
    return tuple(t for k in PREFIX_KINDS.values() for t in k.derived_tables)


#: ``design.prefix_tables()``: every 04 table the prefix kinds declare, with its columns
#: (:func:`chunkstudy.prefix_kinds.tables`): what 04 writes beside its chunks, and what the stage graph gathers
#: among its writes.
prefix_tables = prefix_kinds.tables


#: The prefix kinds, in declared order (the parameters' choices).
PREFIXES: tuple[str, ...] = tuple(PREFIX_KINDS)

#: How a condition's embedded texts become vectors: ``independent`` = each chunk's ``prefix + content`` is encoded
#: on its own (every condition of the paper); ``late`` = late pooling (:mod:`chunkstudy.chunks.late`): the document
#: is encoded once (past the encoder's window, in overlapping macro windows) and each chunk's content tokens are
#: mean-pooled, its prefix tokens encoded but never pooled. The embedding stage serves exactly these modes.
EMBEDDINGS: tuple[str, ...] = ("independent", "late")
INDEPENDENT = "independent"
LATE = "late"
ROUTINGS = ("flat", "two-stage")

#: The depth of a path prefix declared as ``depth=None``: the deepest of ``chunking.depths`` (3 in the paper).
FULL_DEPTH = 3
#: The family of the paper's conditions and contrasts (:data:`CONTRASTS`).
PAPER_FAMILY = "paper"
#: The family of the user's conditions and contrasts: exploratory, Holm-corrected apart from the confirmatory four.
EXTRA_FAMILY = "user"
#: How a user condition's size-matched twin is named: ``<NAME>-fixed``.
TWIN_SUFFIX = "-fixed"
#: The outline a user condition names (``outline: induced`` or ``gold``) -> its section table.
OUTLINES = {"induced": "sections_induced", "gold": "sections_gold"}


@dataclass(frozen=True)
class Chunker:
    """A user's chunker, the cut of a ``chunker`` chunk set: its name (``semchunk``, ``chonkie:SemanticChunker``,
    ``package.module:function``, ``file.py:function``; :func:`chunkstudy.chunks.chunkers.load`), its keyword
    ``options``, whether its chunks may ``overlap``, what an ``unaligned`` chunk does (``error`` or ``warn``) and
    the ``embedder`` a semantic chunker embeds with."""

    name: str
    options: Mapping[str, Any]
    overlap: bool = False
    unaligned: str = "error"
    embedder: str | None = None


@dataclass(frozen=True)
class ChunkSet:
    """A cut of every document whose offsets conditions share (a prefix never moves them). ``boundaries``: a key of
    :data:`BOUNDARIES`; ``matched_to``: for fixed windows, the chunk set whose per-document mean content tokens
    they match (the paper's A0 rule: A0 to A2, a user's twin to its condition); ``chunker``: a chunker's cut."""

    name: str
    boundaries: str
    matched_to: str | None = None
    chunker: Chunker | None = None

    def __post_init__(self) -> None:
        lookup(BOUNDARIES, self.boundaries, "kind of boundaries")
        if (self.boundaries == "fixed") != (self.matched_to is not None):
            raise ValueError(f"chunk set {self.name}: fixed windows, and only they, are matched to another chunk set")
        if (self.boundaries == "chunker") != (self.chunker is not None):
            raise ValueError(f"chunk set {self.name}: a chunker's cut, and only it, names a chunker")

    @property
    def outline(self) -> str | None:
        """The section table a structural cut is made from (None otherwise)."""
        return BOUNDARIES[self.boundaries].outline

    @property
    def structural(self) -> bool:
        return BOUNDARIES[self.boundaries].structural


#: The paper's chunk sets, in its order: every paper condition takes the offsets of one (a user condition may too).
CHUNK_SETS: dict[str, ChunkSet] = {s.name: s for s in (
    ChunkSet("A0", "fixed", matched_to="A2"),
    ChunkSet("A2", "induced"),
    ChunkSet("G2", "gold"),
)}
#: Which paper chunk set each kind of boundaries (but a chunker's) names: ``fixed`` -> A0, ``induced`` -> A2, ...
PAPER_CUTS: dict[str, str] = {s.boundaries: s.name for s in CHUNK_SETS.values()}


@dataclass(frozen=True)
class Condition:
    """One condition, the paper's or a user's (paper §3.2, appendix Table 4; ``conditions.extra``): boundaries, a
    prefix, an embedding mode and a routing.

    ``boundaries``: a key of :data:`BOUNDARIES`; the offsets come from :attr:`cut`, the paper's chunk set of those
    boundaries (:data:`CHUNK_SETS`) unless ``own_cut`` declares another (a user's chunker, a twin). ``prefix``: a
    key of :data:`PREFIX_KINDS`; ``depth``: heading levels a heading-path prefix keeps (None = the deepest of
    ``chunking.depths``); ``embedding``: one of :data:`EMBEDDINGS`; ``routing``: one of :data:`ROUTINGS`.
    ``paths_from``: the outline a fixed or chunker cut's chunks are placed in (``section_id``, ``route_key``) and
    whose heading paths their prefix reads (a structural cut uses its own outline; the paper's fixed windows have
    none). ``family``: :data:`PAPER_FAMILY` or :data:`EXTRA_FAMILY`; ``twin_of``: the condition a size-matched twin
    is matched to; ``of``: the condition whose chunks, prefixes and side tables this one takes whole (a user's
    ``of: A4`` with ``embedding: late``: boundaries, prefix, depth and routing are then that condition's);
    ``placebo_seed``: a placebo prefix's own permutation seed (None: ``chunking.placebo_seed``). The paper's conditions also state ``matched_to`` (the condition this one is built to be
    compared with) and how (``matched``), their colour in every figure, and their Table 4 row
    (``boundaries_text``, ``prefix_text``)."""

    name: str
    boundaries: str
    prefix: str = NO_PREFIX
    routing: str = "flat"
    depth: int | None = None
    matched_to: str | None = None
    matched: str = ""
    colour: str = ""
    boundaries_text: str = ""
    prefix_text: str = ""
    embedding: str = INDEPENDENT
    family: str = PAPER_FAMILY
    own_cut: ChunkSet | None = None
    paths_from: str | None = None
    twin_of: str | None = None
    of: str | None = None
    placebo_seed: int | None = None

    def __post_init__(self) -> None:
        where = f"condition {self.name}"
        lookup(BOUNDARIES, self.boundaries, f"kind of boundaries of {where}")
        lookup(PREFIX_KINDS, self.prefix, f"prefix kind of {where}")
        lookup(dict.fromkeys(EMBEDDINGS), self.embedding, f"embedding mode of {where}")
        lookup(dict.fromkeys(ROUTINGS), self.routing, f"routing of {where}")
        if self.own_cut is None and self.boundaries not in PAPER_CUTS:
            raise ValueError(f"{where}: {self.boundaries} boundaries need their own chunk set (own_cut)")
        if self.own_cut is not None and self.own_cut.boundaries != self.boundaries:
            raise ValueError(f"{where}: boundaries {self.boundaries} but its chunk set is {self.own_cut.boundaries}")

    @property
    def cut(self) -> ChunkSet:
        """The chunk set whose offsets the condition takes."""
        return self.own_cut if self.own_cut is not None else CHUNK_SETS[PAPER_CUTS[self.boundaries]]

    @property
    def chunk_set(self) -> str:
        """The name of :attr:`cut` (``A0``, ``A2``, ``G2``, or a user's ``SEM``, ``SEM-fixed``)."""
        return self.cut.name

    @property
    def outline(self) -> str | None:
        """The section table the condition's sections and heading paths come from: a structural cut's own outline,
        else ``paths_from`` (None: its chunks belong to no section)."""
        return self.cut.outline if self.cut.structural else self.paths_from

    @property
    def structural(self) -> bool:
        return self.cut.structural

    @property
    def prefix_kind(self) -> PrefixKind:
        return PREFIX_KINDS[self.prefix]

    @property
    def user(self) -> bool:
        """True for a condition a user added (``conditions.extra``)."""
        return self.family == EXTRA_FAMILY

    def prefix_depth(self, depths: list[int] | tuple[int, ...] = (FULL_DEPTH,)) -> int:
        """Heading levels the prefix keeps: the declared depth, the deepest of ``depths`` (``chunking.depths``)
        for a full path, 0 for a prefix that reads no heading path."""
        if not self.prefix_kind.heading_path:
            return 0
        return int(self.depth) if self.depth is not None else int(max(depths))

    @property
    def shares_vectors_with(self) -> str | None:
        """A two-stage condition embeds exactly the texts of its flat twin (same chunk set, prefix, depth and
        embedding mode), so it shares its twin's vectors (representation constancy, guards C4); None otherwise."""
        if self.routing == "flat" or self.of is not None:
            return None
        return next((c.name for c in CONDITIONS if c.routing == "flat" and c.vector_key == self.vector_key), None)

    @property
    def vector_key(self) -> tuple:
        """What the condition's vectors depend on: chunk set, prefix kind, depth and embedding mode."""
        return (self.chunk_set, self.prefix, self.depth, self.embedding)

    def needs(self) -> tuple[str, ...]:
        """The section tables 04 needs to build the condition: its cut's (fixed windows: the cut they match), and
        its outline when its prefix reads a heading path."""
        return tuple(dict.fromkeys(cut_needs(self.cut) + ((self.outline,) if self.outline is not None
                                                           and self.prefix_kind.heading_path else ())))

    def table4(self, route_sections: int) -> tuple[str, str, str]:
        """The condition's Table 4 row: boundaries, prefix at embedding time, retrieval."""
        retrieval = "flat" if self.routing == "flat" else f"two-stage (top {route_sections} sections)"
        return self.boundaries_text, self.prefix_text, retrieval


def cut_needs(cut: ChunkSet, others: Mapping[str, ChunkSet] | None = None) -> tuple[str, ...]:
    """The section tables a chunk set is cut from: a structural cut's outline; fixed windows need what the cut they
    match needs (looked up in ``others``, then among the paper's :data:`CHUNK_SETS`); a chunker needs none."""
    if cut.outline is not None:
        return (cut.outline,)
    if cut.matched_to is not None:
        pool = {**CHUNK_SETS, **(others or {})}
        return cut_needs(pool[cut.matched_to], others) if cut.matched_to in pool else ()
    return ()


_INDUCED = "induced structure"
_GOLD = "gold structure"

#: Every condition of the study, in the paper's order (the order of every table, figure and parameter choice).
CONDITIONS: tuple[Condition, ...] = (
    Condition("A0", "fixed", "none", matched_to="A2", matched="size-matched per document to A2's mean chunk length",
              colour="#8c8c8c", boundaries_text="fixed windows, size-matched per document to A2, edges at sentence "
              "boundaries", prefix_text="none"),
    Condition("A1", "fixed", "context", matched_to="A0", matched="A0's windows with a situating context",
              colour="#a6761d", boundaries_text="A0",
              prefix_text="LLM situating context (contextual-retrieval prompt)"),
    Condition("A2", "induced", "none", matched_to="A0", matched="the structural cut A0 is size-matched to",
              colour="#9ecae1", boundaries_text=_INDUCED, prefix_text="none"),
    Condition("A3-d1", "induced", "path", depth=1, matched_to="A2", matched="A2's chunks with a depth-1 heading path",
              colour="#6baed6", boundaries_text=_INDUCED, prefix_text="heading path, depth 1"),
    Condition("A3-d2", "induced", "path", depth=2, matched_to="A2", matched="A2's chunks with a depth-2 heading path",
              colour="#3182bd", boundaries_text=_INDUCED, prefix_text="heading path, depth 2"),
    Condition("A3", "induced", "path", matched_to="A2", matched="A2's chunks with the full heading path",
              colour="#08519c", boundaries_text=_INDUCED, prefix_text="heading path, depth 3"),
    Condition("P", "induced", "placebo", matched_to="A3",
              matched="A3's chunks with a depth-matched path of another document", colour="#7b3294",
              boundaries_text=_INDUCED, prefix_text="real heading path of the same depth from another document "
              "(placebo)"),
    Condition("A4", "induced", "path", "two-stage", matched_to="A3", matched="A3's chunks and vectors, routed",
              colour="#e6550d", boundaries_text="induced structure (A3's chunks and vectors)", prefix_text="as A3"),
    Condition("G2", "gold", "none", matched_to="A2", matched="A2 on the gold outline", colour="#a1d99b",
              boundaries_text=_GOLD, prefix_text="none"),
    Condition("G3", "gold", "path", matched_to="A3", matched="A3 on the gold outline", colour="#31a354",
              boundaries_text=_GOLD, prefix_text="heading path, depth 3"),
    Condition("G4", "gold", "path", "two-stage", matched_to="A4", matched="A4 on the gold outline", colour="#006d2c",
              boundaries_text="gold structure (G3's chunks and vectors)", prefix_text="as G3"),
)

CONDITION_NAMES: tuple[str, ...] = tuple(c.name for c in CONDITIONS)
_BY_NAME = {c.name: c for c in CONDITIONS}


def condition(name: str) -> Condition:
    """The paper's condition ``name``; a ValueError lists the valid names."""
    return lookup(_BY_NAME, name, "condition")


def names_where(**fields: Any) -> tuple[str, ...]:
    """Names of the conditions whose fields equal the given values (a tuple of values means any of them), in the
    paper's order, e.g. ``names_where(routing="two-stage")`` -> ``("A4", "G4")``."""
    def ok(c: Condition) -> bool:
        return all(getattr(c, k) in (v if isinstance(v, tuple) else (v,)) for k, v in fields.items())
    return tuple(c.name for c in CONDITIONS if ok(c))


#: Conditions retrieved route-to-section (``retrieve.two_stage_conditions``' default).
TWO_STAGE: tuple[str, ...] = names_where(routing="two-stage")
#: Conditions with structural chunks (``queries.bm25_condition``'s choices).
STRUCTURAL: tuple[str, ...] = tuple(c.name for c in CONDITIONS if c.structural)


def depth_ladder() -> tuple[tuple[str, int], ...]:
    """The breadcrumb-depth ladder of the dose-response (paper §6): the flat conditions on the induced outline
    whose prefix is nothing or a real heading path, with the depth injected (0 = no path), by depth:
    ``(("A2", 0), ("A3-d1", 1), ("A3-d2", 2), ("A3", 3))``."""
    rungs = [(c.name, c.prefix_depth()) for c in CONDITIONS
             if c.boundaries == "induced" and c.routing == "flat" and c.prefix in ("none", "path")]
    return tuple(sorted(rungs, key=lambda r: r[1]))


@dataclass(frozen=True)
class Contrast:
    """A pre-registered contrast ``A − B`` and the mechanism question it asks (paper §3.2)."""

    name: str
    a: str
    b: str
    question: str


#: The confirmatory family (``stats.contrasts``' default): C1 = A3−A1, C2 = A3−P, C3 = G3−A3, C4 = A4−A3.
CONTRASTS: tuple[Contrast, ...] = (
    Contrast("C1", "A3", "A1", "organization vs. contextualization"),
    Contrast("C2", "A3", "P", "content vs. tokens"),
    Contrast("C3", "G3", "A3", "cost of induction"),
    Contrast("C4", "A4", "A3", "routing vs. flat"),
)


def contrast_question(a: str, b: str) -> str:
    """The question of the declared contrast ``a − b`` ("" for a contrast the study does not pre-register)."""
    return next((c.question for c in CONTRASTS if (c.a, c.b) == (a, b)), "")


# ---------------------------------------------------------------------------------------------------------------
# Conditions and contrasts a user adds (``conditions.extra``, ``contrasts.extra``; docs/chunker.md)
# ---------------------------------------------------------------------------------------------------------------

def _field(spec: Any, key: str) -> Any:
    """A key of a ``conditions.extra`` entry: a validated record (:class:`chunkstudy.params.ExtraConditionParams`)
    or, in the parameter rules, its plain dict."""
    return spec.get(key) if isinstance(spec, Mapping) else getattr(spec, key)


def user_conditions(extra: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """The conditions a ``conditions.extra`` mapping declares, each twin right after its condition, in declared
    order (:data:`EXTRA_FAMILY`; validated entries: :class:`chunkstudy.params.ExtraConditionParams`).

    ``boundaries: chunker`` (the default) cuts with the entry's ``chunker`` into a chunk set of the condition's own
    name; ``fixed``, ``induced`` or ``gold`` takes the paper's chunk set of that kind (A0, A2, G2). A twin
    (``size_matched_twin``) is ``<NAME>-fixed``: fixed windows matched per document to the condition's cut, with
    the same prefix kind, depth and outline. Heading paths (and a chunker's route keys) come from ``outline``.
    ``of: <paper condition>`` takes that condition whole (its boundaries, prefix, depth and routing; 04 copies its
    chunks, prefixes and side tables), with the entry's own ``embedding``."""
    out: list[Condition] = []
    for name, spec in (extra or {}).items():
        name = str(name)
        of = _field(spec, "of")
        if of is not None:
            src = condition(str(of))
            out.append(Condition(name, src.boundaries, src.prefix, src.routing, src.depth,
                                 embedding=str(_field(spec, "embedding") or INDEPENDENT), family=EXTRA_FAMILY,
                                 paths_from=src.paths_from, of=src.name))
            continue
        boundaries = _field(spec, "boundaries") or "chunker"
        own = None
        if boundaries == "chunker":
            own = ChunkSet(name, "chunker", chunker=Chunker(
                str(_field(spec, "chunker")), dict(_field(spec, "options") or {}), bool(_field(spec, "overlap")),
                str(_field(spec, "unaligned")), _field(spec, "embedder")))
        common = dict(prefix=str(_field(spec, "prefix")), depth=_field(spec, "depth"),
                      embedding=str(_field(spec, "embedding") or INDEPENDENT), family=EXTRA_FAMILY,
                      paths_from=OUTLINES[str(_field(spec, "outline"))], placebo_seed=_field(spec, "placebo_seed"))
        cond = Condition(name, boundaries, own_cut=own, **common)
        out.append(cond)
        if _field(spec, "size_matched_twin"):
            twin = name + TWIN_SUFFIX
            out.append(Condition(twin, "fixed", own_cut=ChunkSet(twin, "fixed", matched_to=cond.chunk_set),
                                 twin_of=name, **common))
    return tuple(out)


def run_conditions(paper: Sequence[str], extra: Mapping[str, Any] | None = None) -> tuple[Condition, ...]:
    """Every condition of a run: the paper's named in ``paper`` (``chunking.conditions``, in that order), then the
    user's (:func:`user_conditions` of ``conditions.extra``). :attr:`chunkstudy.params.Params.run_conditions`."""
    return tuple(condition(n) for n in paper) + user_conditions(extra)


def extra_condition_names(extra: Mapping[str, Any] | None) -> list[str]:
    """Every condition a ``conditions.extra`` mapping adds, each twin right after its condition, in declared
    order: ``{"SEM": {..., "size_matched_twin": True}}`` -> ``["SEM", "SEM-fixed"]``."""
    out = []
    for name, spec in (extra or {}).items():
        out += [name, name + TWIN_SUFFIX] if _field(spec, "size_matched_twin") else [name]
    return out


def extra_question(a: str, b: str) -> str:
    """The question a user contrast ``a − b`` asks when the design says it: a condition against its size-matched
    twin isolates boundary placement from chunk size; "" otherwise."""
    return "boundary placement vs. chunk size (size-matched twin)" if b == a + TWIN_SUFFIX else ""


# ---------------------------------------------------------------------------------------------------------------
# Retrieval modes (dense, lexical, hybrid) and Anthropic's contextual-retrieval recipe
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetrievalMode:
    """How 05 ranks a condition's chunks for a query (``retrieve.modes``; docs/beyond.md, "Retrieval modes"); every
    decision about a mode reads this record, never its name (a test scans the library). ``dense``: by an embedder's
    vectors (the paper's); ``lexical``: by BM25 over the condition's indexed texts, exactly what it embeds
    (``prefix + content``; ``retrieve.bm25``); both: the two rankings fused (``retrieve.fusion``). Relevance stays
    on content offsets in every mode. ``retriever``: the mode's name, with an embedder, as the second coordinate of
    a cell (the ``embedder`` column of runs, scores and 07's tables): ``{embedder}`` for the dense mode, so a
    dense-only run keeps every cell's name and the primary cell stays ``<metric>|<strong>|none``. ``label``: how
    tables name it; ``question``: what its contrasts answer beside the dense ones."""

    name: str
    dense: bool
    lexical: bool
    retriever: str
    label: str
    question: str

    @property
    def per_embedder(self) -> bool:
        """True when the mode has one retriever per embedder (it reads vectors)."""
        return "{embedder}" in self.retriever

    def retriever_name(self, embedder: str) -> str:
        """The retriever of this mode with ``embedder`` (ignored by a mode that reads no vectors)."""
        return self.retriever.format(embedder=embedder)


#: The paper's retrieval mode (the primary cell's; every run has it).
DENSE = "dense"
#: Every retrieval mode, in declared order (``retrieve.modes``' choices).
RETRIEVAL_MODES: dict[str, RetrievalMode] = {
    DENSE: RetrievalMode(DENSE, True, False, "{embedder}", "dense",
                         "the paper's question: does the mechanism help an embedding index?"),
    "bm25": RetrievalMode("bm25", False, True, "bm25", "BM25",
                          "does the prefix help a lexical index (a heading path's, a context's or a foreign path's "
                          "vocabulary entering BM25)?"),
    "hybrid": RetrievalMode("hybrid", True, True, "hybrid-{embedder}", "hybrid (dense + BM25, fused)",
                            "does the mechanism still help once lexical matching is fused in (DAPR: hybrid "
                            "retrieval is strongest overall but fails where document context is needed)?"),
}
MODES: tuple[str, ...] = tuple(RETRIEVAL_MODES)


def retrievers(modes: Sequence[str], embedders: Sequence[str]) -> dict[str, tuple[RetrievalMode, str | None]]:
    """A run's retrievers, ``{name: (mode, embedder or None)}``: each of ``modes`` with each embedder where it reads
    vectors, once where not: ``["dense", "bm25", "hybrid"]`` × strong, weak -> strong, weak, bm25, hybrid-strong,
    hybrid-weak."""
    out: dict[str, tuple[RetrievalMode, str | None]] = {}
    for name in modes:
        mode = lookup(RETRIEVAL_MODES, name, "retrieval mode")
        for emb in (embedders if mode.per_embedder else (None,)):
            out[mode.retriever_name(emb or "")] = (mode, emb)
    return out


@dataclass(frozen=True)
class RecipeStep:
    """A step of Anthropic's contextual-retrieval recipe as the study runs it (docs/beyond.md, "Anthropic's recipe"):
    a paper condition in a mode, reranked or not; ``anthropic``: the key of the failure reduction the paper cites
    for it (:mod:`chunkstudy.paper`, ``study.anthropic``), None where it cites none."""

    name: str
    condition: str
    mode: str
    reranked: bool
    label: str
    anthropic: str | None = None

    def __post_init__(self) -> None:
        condition(self.condition)
        lookup(RETRIEVAL_MODES, self.mode, f"retrieval mode of recipe step {self.name}")


#: The recipe's steps; the first is the baseline every reduction is measured against (Anthropic's: embeddings of
#: plain chunks). Its top-k failure is ``1 − recall@k`` (``stats.recipe_k``, 20 as Anthropic's), span-level.
RECIPE: tuple[RecipeStep, ...] = (
    RecipeStep("R0", "A0", DENSE, False, "embeddings on fixed windows (the baseline)"),
    RecipeStep("R1", "A0", "bm25", False, "plain BM25 on fixed windows"),
    RecipeStep("R2", "A0", "hybrid", False, "embeddings + plain BM25, fused"),
    RecipeStep("R3", "A1", DENSE, False, "contextual embeddings (A1)", "contextual_embeddings"),
    RecipeStep("R4", "A1", "bm25", False, "contextual BM25 (A1's contexts indexed)"),
    RecipeStep("R5", "A1", "hybrid", False, "contextual embeddings + contextual BM25, fused", "contextual_hybrid"),
    RecipeStep("R6", "A1", "hybrid", True, "contextual embeddings + contextual BM25, fused, reranked"),
)


def recipe_modes() -> tuple[str, ...]:
    """The modes the recipe's steps name (declared order): a run reports the recipe when it retrieves in them all."""
    used = {s.mode for s in RECIPE}
    return tuple(m for m in MODES if m in used)


def cell_name(metric: str, embedder: str, reranker: str) -> str:
    """The canonical name of a cell (one metric × one embedder × one reranker setting):
    ``"<metric>|<embedder>|<reranker>"``, e.g. ``"cov-nDCG@10|strong|none"``."""
    return f"{metric}|{embedder}|{reranker}"


class PrimaryCell(NamedTuple):
    """The primary cell (paper §4): the one metric × embedder × reranker fixed in advance whose pre-registered
    contrasts are the confirmatory family; every other cell is exploratory. ``stats.primary_metric`` ×
    ``embed.strong`` × ``stats.primary_reranker`` (cov-nDCG@10 × strong × none by default), built once from the
    parameters by :attr:`chunkstudy.params.Params.primary_cell`. A tuple, so it compares equal to
    ``(metric, embedder, reranker)`` and indexes a table keyed that way."""

    metric: str
    embedder: str
    reranker: str

    @property
    def name(self) -> str:
        """The cell's canonical name (:func:`cell_name`), e.g. ``"cov-nDCG@10|strong|none"``."""
        return cell_name(self.metric, self.embedder, self.reranker)


def condition_order_key(name: str) -> tuple:
    """Sort key putting condition names in the paper's order (unknown names last, alphabetically)."""
    return (CONDITION_NAMES.index(name), "") if name in _BY_NAME else (len(CONDITION_NAMES), str(name))


def two_stage_conditions(conditions: Sequence[Condition], two_stage: Sequence[str]) -> tuple[str, ...]:
    """The conditions retrieved route-to-section: ``retrieve.two_stage_conditions`` (``two_stage``) and every
    condition of ``conditions`` that takes one of theirs whole (:attr:`Condition.of`: a late-pooled A4 routes as
    A4). :attr:`chunkstudy.params.Params.routed_retrieve`."""
    base = tuple(two_stage)
    return base + tuple(c.name for c in conditions if c.of is not None and c.of in base and c.name not in base)
