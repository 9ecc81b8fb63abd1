"""The study's design, declared once: its conditions, its pre-registered contrasts and its metrics (paper §3.2,
§4, §5.1 and the appendix; docs/design.md, "Conditions" and "Metrics").

Everything else derives from these records, as ir_measures derives a measure's name, its table column and its
figure label from one declaration: the parameter schema's choices and defaults (:mod:`chunkstudy.config`), which
outline each condition is cut from and how its prefix is built (:mod:`chunkstudy.chunks.chunk_sets`), which conditions are
retrieved two-stage (:mod:`chunkstudy.retrieve`), the BM25 diagnostic's structures (:mod:`chunkstudy.queries.bm25`),
the depth ladder of the dose-response (:mod:`chunkstudy.stats`), the metric names 06 writes
(:mod:`chunkstudy.metrics`), Table 4, the display orders, the contrasts' questions (:mod:`chunkstudy.report.tables`) and
the figures' colours.

This module sits at the bottom of the import floors: it imports nothing of the project, and every module may read
it. A condition or metric named anywhere else is named by one of these records (a test scans the library for a
second registry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

# ---------------------------------------------------------------------------------------------------------------
# Conditions
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boundaries:
    """Where a condition's chunk boundaries come from.

    ``outline``: the section table the boundaries are cut from (fixed windows are size-matched per document to the
    chunks of the induced outline, so they need it too); ``structural``: chunks are the text between consecutive
    section starts (split above ``chunking.max_chunk_tokens``, merged below ``min_chunk_tokens``); ``label``: how figures name
    the cut, ``chunks``: how tables name its chunks."""

    kind: str
    outline: str
    structural: bool
    label: str
    chunks: str


#: The three kinds of boundaries (paper §3.2): fixed windows, induced structure, gold structure.
BOUNDARIES: dict[str, Boundaries] = {
    "fixed": Boundaries("fixed", "sections_induced", False, "fixed windows", "fixed windows"),
    "induced": Boundaries("induced", "sections_induced", True, "induced structure", "induced chunks"),
    "gold": Boundaries("gold", "sections_gold", True, "gold structure", "gold chunks"),
}

#: What is put before a chunk's content at embedding time: nothing, the A1 situating context, the heading path
#: (``[Title › Section › Subsection]``) cut to a depth, or a real path of the same depth from another document.
PREFIXES = ("none", "context", "path", "placebo")
ROUTINGS = ("flat", "two-stage")

#: The depth of a path prefix declared as ``depth=None``: the deepest of ``chunking.depths`` (3 in the paper).
FULL_DEPTH = 3


@dataclass(frozen=True)
class Condition:
    """One condition of the study (paper §3.2, appendix Table 4).

    ``boundaries``: a key of :data:`BOUNDARIES`; ``prefix``: one of :data:`PREFIXES`; ``depth``: heading levels a
    ``path``/``placebo`` prefix keeps (None = the deepest of ``chunking.depths``); ``routing``: one of
    :data:`ROUTINGS`; ``matched_to``: the condition this one is built to be compared with, and how (``matched``
    says it); ``colour``: its colour in every figure; ``boundaries_text``/``prefix_text``: its Table 4 row."""

    name: str
    boundaries: str
    prefix: str
    routing: str
    depth: int | None
    matched_to: str | None
    matched: str
    colour: str
    boundaries_text: str
    prefix_text: str

    @property
    def chunk_set(self) -> str:
        """The chunk set the condition's offsets are (``A0``, ``A2`` or ``G2``): :func:`chunk_set`."""
        return chunk_set(self.boundaries)

    @property
    def outline(self) -> str:
        """The section table the condition needs (``sections_induced`` or ``sections_gold``)."""
        return BOUNDARIES[self.boundaries].outline

    @property
    def structural(self) -> bool:
        return BOUNDARIES[self.boundaries].structural

    def prefix_depth(self, depths: list[int] | tuple[int, ...] = (FULL_DEPTH,)) -> int:
        """Heading levels the prefix keeps: the declared depth, the deepest of ``depths`` (``chunking.depths``)
        for a full path, 0 for no path."""
        if self.prefix not in ("path", "placebo"):
            return 0
        return int(self.depth) if self.depth is not None else int(max(depths))

    @property
    def shares_vectors_with(self) -> str | None:
        """A two-stage condition embeds exactly the texts of its flat twin (same boundaries, prefix and depth), so
        it shares its twin's vectors (representation constancy, guards C4); None otherwise."""
        if self.routing == "flat":
            return None
        return next(c.name for c in CONDITIONS if c.routing == "flat" and (c.boundaries, c.prefix, c.depth)
                    == (self.boundaries, self.prefix, self.depth))

    def table4(self, route_sections: int) -> tuple[str, str, str]:
        """The condition's Table 4 row: boundaries, prefix at embedding time, retrieval."""
        retrieval = "flat" if self.routing == "flat" else f"two-stage (top {route_sections} sections)"
        return self.boundaries_text, self.prefix_text, retrieval


_INDUCED = "induced structure"
_GOLD = "gold structure"

#: Every condition of the study, in the paper's order (the order of every table, figure and parameter choice).
CONDITIONS: tuple[Condition, ...] = (
    Condition("A0", "fixed", "none", "flat", None, "A2", "size-matched per document to A2's mean chunk length",
              "#8c8c8c", "fixed windows, size-matched per document to A2, edges at sentence boundaries", "none"),
    Condition("A1", "fixed", "context", "flat", None, "A0", "A0's windows with a situating context",
              "#a6761d", "A0", "LLM situating context (contextual-retrieval prompt)"),
    Condition("A2", "induced", "none", "flat", None, "A0", "the structural cut A0 is size-matched to",
              "#9ecae1", _INDUCED, "none"),
    Condition("A3-d1", "induced", "path", "flat", 1, "A2", "A2's chunks with a depth-1 heading path",
              "#6baed6", _INDUCED, "heading path, depth 1"),
    Condition("A3-d2", "induced", "path", "flat", 2, "A2", "A2's chunks with a depth-2 heading path",
              "#3182bd", _INDUCED, "heading path, depth 2"),
    Condition("A3", "induced", "path", "flat", None, "A2", "A2's chunks with the full heading path",
              "#08519c", _INDUCED, "heading path, depth 3"),
    Condition("P", "induced", "placebo", "flat", None, "A3", "A3's chunks with a depth-matched path of another "
              "document", "#7b3294", _INDUCED, "real heading path of the same depth from another document (placebo)"),
    Condition("A4", "induced", "path", "two-stage", None, "A3", "A3's chunks and vectors, routed",
              "#e6550d", "induced structure (A3's chunks and vectors)", "as A3"),
    Condition("G2", "gold", "none", "flat", None, "A2", "A2 on the gold outline",
              "#a1d99b", _GOLD, "none"),
    Condition("G3", "gold", "path", "flat", None, "A3", "A3 on the gold outline",
              "#31a354", _GOLD, "heading path, depth 3"),
    Condition("G4", "gold", "path", "two-stage", None, "A4", "A4 on the gold outline",
              "#006d2c", "gold structure (G3's chunks and vectors)", "as G3"),
)

CONDITION_NAMES: tuple[str, ...] = tuple(c.name for c in CONDITIONS)
_BY_NAME = {c.name: c for c in CONDITIONS}


def lookup(declared: Mapping[str, Any], name: str, what: str, error: type[Exception] = ValueError) -> Any:
    """``declared[name]``; an unknown name raises ``error`` listing the declared ones (``what`` names them)."""
    try:
        return declared[name]
    except KeyError:
        raise error(f"unknown {what} {name!r}; {what}s: {list(declared)}") from None


def condition(name: str) -> Condition:
    """The declared condition ``name``; a ValueError lists the valid names."""
    return lookup(_BY_NAME, name, "condition")


def chunk_set(boundaries: str) -> str:
    """The chunk set of a kind of boundaries: the flat, prefix-free condition cut that way (``fixed`` -> ``A0``,
    ``induced`` -> ``A2``, ``gold`` -> ``G2``). Every other condition reuses its chunk set's offsets."""
    return next(c.name for c in CONDITIONS if c.boundaries == boundaries and c.prefix == "none"
                and c.routing == "flat")


#: The chunk sets, in the paper's order: the cuts every condition's offsets come from.
CHUNK_SETS: tuple[str, ...] = tuple(chunk_set(b) for b in BOUNDARIES)


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

#: The prefix kinds a user-added condition may take: the study's own (none, a real heading path, the placebo) and
#: the document title alone (a path of depth 0).
EXTRA_PREFIXES = ("none", "title", "path", "placebo")
#: The outline a user condition's heading paths (and route keys) come from.
EXTRA_OUTLINES = {"induced": "sections_induced", "gold": "sections_gold"}
#: How a user condition's size-matched twin is named: ``<NAME>-fixed``.
TWIN_SUFFIX = "-fixed"
#: The family of the user's contrasts: exploratory, Holm-corrected apart from the confirmatory four.
EXTRA_FAMILY = "user"
#: The paper's family (:data:`CONTRASTS`).
PAPER_FAMILY = "paper"


def extra_condition_names(extra: Mapping[str, Any] | None) -> list[str]:
    """Every condition a ``conditions.extra`` mapping adds, each twin right after its condition, in declared
    order: ``{"SEM": {..., "size_matched_twin": True}}`` -> ``["SEM", "SEM-fixed"]``."""
    out = []
    for name, spec in (extra or {}).items():
        twin = spec.get("size_matched_twin") if isinstance(spec, Mapping) else getattr(spec, "size_matched_twin")
        out += [name, name + TWIN_SUFFIX] if twin else [name]
    return out


def extra_question(a: str, b: str) -> str:
    """The question a user contrast ``a − b`` asks when the design says it: a condition against its size-matched
    twin isolates boundary placement from chunk size; "" otherwise."""
    return "boundary placement vs. chunk size (size-matched twin)" if b == a + TWIN_SUFFIX else ""


# ---------------------------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One metric family, declared once (as ir_measures declares a measure): ``key`` names it in code;
    ``template`` is its canonical name with the ``metrics`` parameter that completes it in braces (``parameter``;
    a list parameter such as ``budgets`` gives one metric per element, ``budget-cov@512``, ...); ``role``: ``primary`` (the confirmatory
    metric), ``secondary`` or ``budget``; ``definition``: one line (the formulas are in :mod:`chunkstudy.metrics`)."""

    key: str
    template: str
    parameter: str | None
    role: str
    definition: str

    def names(self, metrics_params: Mapping[str, Any]) -> list[str]:
        """The canonical names this family takes under ``metrics_params`` (the ``metrics`` section)."""
        if self.parameter is None:
            return [self.template]
        values = metrics_params[self.parameter]
        values = values if isinstance(values, (list, tuple)) else [values]
        return [self.template.format(**{self.parameter: int(v)}) for v in values]

    def argument(self, name: str) -> int | None:
        """The parameter value in ``name`` when ``name`` belongs to this family (``cov-nDCG@10`` -> 10; 0 for a
        family without a parameter), else None."""
        if self.parameter is None:
            return 0 if name == self.template else None
        head, _, tail = self.template.partition("{")
        m = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail.partition("}")[2]), str(name))
        return int(m.group(1)) if m else None


#: Every metric 06 computes, in table order (primary first, then the secondary ladder; paper §5.1).
METRICS: tuple[Metric, ...] = (
    Metric("cov-nDCG", "cov-nDCG@{cutoff}", "cutoff", "primary",
           "coverage-nDCG: novelty gains over gold spans, greedy ideal over the condition's own chunks"),
    Metric("recall", "recall@{recall_k}", "recall_k", "secondary",
           "share of gold spans covered to >= span_frac by the union of the top recall_k chunks"),
    Metric("MRR", "MRR", None, "secondary", "1 / rank of the first relevant chunk (0 when none is)"),
    Metric("nDCG", "nDCG@{cutoff}", "cutoff", "secondary",
           "binary nDCG from the relevance rule (trec_eval ndcg_cut)"),
    Metric("budget-cov", "budget-cov@{budgets}", "budgets", "budget",
           "gold characters covered within a token budget, prefix tokens charged"),
)

_METRIC_BY_KEY = {m.key: m for m in METRICS}
#: The confirmatory metric's family (coverage-nDCG).
PRIMARY_METRIC: Metric = next(m for m in METRICS if m.role == "primary")


def metric(key: str) -> Metric:
    """The declared metric family ``key`` (``cov-nDCG``, ``recall``, ``MRR``, ``nDCG``, ``budget-cov``)."""
    return lookup(_METRIC_BY_KEY, key, "metric")


def metric_names(metrics_params: Mapping[str, Any]) -> list[str]:
    """The canonical metric names for a ``metrics`` section, in table order, e.g. ``['cov-nDCG@10', 'recall@50',
    'MRR', 'nDCG@10', 'budget-cov@512', 'budget-cov@1024', 'budget-cov@2048']``."""
    return [n for m in METRICS for n in m.names(metrics_params)]


def metric_of(name: str) -> tuple[Metric, int] | None:
    """``(family, parameter value)`` of a canonical metric name, or None for a name no family declares."""
    for m in METRICS:
        arg = m.argument(name)
        if arg is not None:
            return m, arg
    return None


def is_metric(name: str, key: str) -> bool:
    """True when the canonical name ``name`` belongs to family ``key`` (``is_metric("recall@50", "recall")``)."""
    return metric(key).argument(name) is not None


def metric_order_key(name: str) -> tuple:
    """Sort key putting metric names in table order (family, then parameter value; unknown names last)."""
    found = metric_of(name)
    return (METRICS.index(found[0]), found[1], "") if found else (len(METRICS), 0, str(name))


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
