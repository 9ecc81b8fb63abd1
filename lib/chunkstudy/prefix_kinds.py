"""What is put before a chunk's content at embedding time: the prefix kinds, each one class in one file of
:mod:`chunkstudy.prefix`, found there by its file (:func:`chunkstudy.plugins.discover`).

A kind is a :class:`PrefixKind` subclass whose module declares an instance of it as ``KIND``. The class holds
everything about the kind: its name and its place among the parameters' choices (``order``), the line the docs
show (``text``), what it reads (``heading_path``, ``contexts``), its role (``control``), the tables it writes
(``side``, ``derived``) with their columns, and the code that renders it (:meth:`PrefixKind.render`), derives its
tables (:meth:`PrefixKind.derive`) and summarises them (:meth:`PrefixKind.pooled`, :meth:`PrefixKind.facts`). Every
decision about a kind reads this declaration, never its name: 02 situates the chunk sets of the kinds that read
contexts, 04 renders each condition's prefixes and writes every declared table, 07 charges the LLM's contexts to
the conditions of such kinds, the parameter rules give a control its seed, and the figures draw a control dashed.

:data:`KINDS` is the registry (``chunkstudy.design.PREFIX_KINDS``), in declared order. The declarations sit in the
foundation, with the code that renders them, because the conditions and the parameter rules read them; a kind
therefore imports nothing above this module (pandas, numpy, and the helpers here), and reads its condition and
the chunking parameters through :class:`PrefixInputs`.

A prefix is never part of a chunk's offsets: the embedded text is ``prefix + content``
(:func:`chunkstudy.chunks.chunk_sets.embedded_texts`), so relevance (computed on offsets) cannot come from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Protocol, Sequence

import pandas as pd

from . import plugins
from .errors import ChunkstudyError
from .schema import Table

#: The package whose modules declare the prefix kinds (each under :data:`ATTRIBUTE`).
PACKAGE = "chunkstudy.prefix"
ATTRIBUTE = "KIND"

PATH_SEP = " \u203a "  # " › "


class PrefixError(ChunkstudyError, ValueError):
    """A condition's prefixes cannot be rendered from its inputs (the message names the condition and what is
    missing), or a prefix kind's declaration is inconsistent (the message names its module)."""


class ConditionView(Protocol):
    """What a prefix kind reads of its condition (:class:`chunkstudy.design.Condition` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def prefix(self) -> str: ...

    @property
    def chunk_set(self) -> str: ...

    @property
    def outline(self) -> str | None: ...

    @property
    def user(self) -> bool: ...


@dataclass(frozen=True)
class PrefixInputs:
    """What a prefix kind may read besides the chunks: the ``condition``, the documents' ``titles`` (doc_id ->
    title), the heading ``paths`` of the condition's outline (section_id -> path, outermost first; empty when it
    has none), the ``depth`` a heading path is cut to (:meth:`chunkstudy.design.Condition.prefix_depth`), the
    situating ``contexts`` 02 wrote for the condition's chunk set (``contexts_a1`` rows: doc_id, start, end,
    context; None unless the kind reads contexts) and the ``chunking`` parameters
    (:class:`chunkstudy.params.ChunkingParams`, with the condition's own ``placebo_seed`` when it sets one; typed
    ``Any`` here because the parameters are declared above this module)."""

    condition: ConditionView
    titles: Mapping[str, str]
    paths: Mapping[str, Sequence[str]]
    depth: int
    contexts: pd.DataFrame | None
    chunking: Any

    @property
    def where(self) -> str:
        """The condition as the user names it: ``conditions.extra.NAME`` for theirs, ``condition NAME`` else."""
        c = self.condition
        return f"conditions.extra.{c.name}" if c.user else f"condition {c.name}"


class PrefixKind:
    """One prefix kind: subclass it in a module of :mod:`chunkstudy.prefix` and declare ``KIND = YourKind()``.

    Declared as class attributes:

    * ``name``: the kind's name, a ``prefix`` value of the parameters; ``order``: its place among the kinds (the
      parameters' choices and the docs' table; the paper's are 10-50);
    * ``text``: one line saying what it puts before the content (the docs' table);
    * ``heading_path``: it reads the heading path of the section the chunk's content starts in, cut to the
      condition's depth (04 loads the condition's outline; the kind has a depth);
    * ``contexts``: it reads the situating contexts 02 writes for the condition's chunk set (``contexts_a1``: 02
      situates that chunk set, and 07 charges the LLM calls that wrote them to the condition);
    * ``control``: a control, not a structure of the chunk's own document (the placebo): it takes
      ``chunking.placebo_seed`` or the condition's own ``placebo_seed``, the figures draw it dashed, and the first
      paper condition of such a kind is Figure 1's placebo;
    * ``side``: the 04 table its side output goes to (a :class:`~chunkstudy.schema.Table` whose first column is
      ``condition``), one part per condition, or None; :meth:`render` returns a part exactly when it is declared;
    * ``derived``: 04 tables computed from each condition's part of ``side`` by :meth:`derive` (first column
      ``condition``);
    * ``summary``: 04's ``summary.json`` says what :meth:`pooled` says of the paper conditions' parts, and under
      ``extra`` what :meth:`facts` says of each user condition's part.

    Its tables are gathered among 04's writes (:data:`chunkstudy.stages.STAGES`), 04 writes them, and the
    generated docs list them; nothing else names them.
    """

    name: ClassVar[str]
    order: ClassVar[int]
    text: ClassVar[str]
    heading_path: ClassVar[bool] = False
    contexts: ClassVar[bool] = False
    control: ClassVar[bool] = False
    side: ClassVar[Table | None] = None
    derived: ClassVar[tuple[Table, ...]] = ()
    summary: ClassVar[bool] = False

    @property
    def tables(self) -> tuple[Table, ...]:
        """Its 04 tables: the side table, then those derived from it."""
        return ((self.side,) if self.side is not None else ()) + self.derived

    @property
    def side_table(self) -> str | None:
        """The name of the 04 table its side output goes to, or None."""
        return None if self.side is None else self.side.name

    @property
    def derived_tables(self) -> tuple[str, ...]:
        """The names of the 04 tables derived from its side table."""
        return tuple(t.name for t in self.derived)

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        """One prefix per row of ``chunks`` (the condition's chunk set: ``doc_id, start, end, section_id, ...``,
        half-open content offsets into ``documents.text``), and the condition's part of the side table (its
        declared columns but ``condition``, which 04 adds) or None when the kind declares none."""
        raise NotImplementedError(f"prefix kind {self.name}: render")

    def derive(self, table: str, part: pd.DataFrame) -> pd.DataFrame:
        """The condition's part of the derived table ``table`` (one of :attr:`derived`) from its side-table part."""
        raise NotImplementedError(f"prefix kind {self.name}: derive {table}")

    def pooled(self, parts: pd.DataFrame, chunking: Any) -> dict:
        """Top-level keys of 04's ``summary.json``: what the kind says of the side-table parts of the run's paper
        conditions of the kind, concatenated (``chunking``: the chunking parameters)."""
        raise NotImplementedError(f"prefix kind {self.name}: pooled")

    def facts(self, part: pd.DataFrame) -> dict:
        """What 04's ``summary.json`` says, under ``extra``, of one user condition's side-table part."""
        raise NotImplementedError(f"prefix kind {self.name}: facts")


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
        raise PrefixError(f"{inputs.where}: a {c.prefix} prefix needs the heading paths of "
                          f"{c.outline or 'an outline'} (its chunks must lie in sections of that table)")
    return [tuple(inputs.paths[str(s)][:inputs.depth]) for s in sections]


def _overrides(kind: PrefixKind, method: str) -> bool:
    return getattr(type(kind), method) is not getattr(PrefixKind, method)


def _checked(module: str, kind: PrefixKind) -> PrefixKind:
    """``kind`` when its declaration holds together; else a :class:`PrefixError` naming ``module``."""
    where = f"{module}.{ATTRIBUTE}"
    missing = [a for a in ("name", "order", "text") if not hasattr(kind, a)]
    if missing:
        raise PrefixError(f"{where}: a prefix kind declares {missing}")
    if not _overrides(kind, "render"):
        raise PrefixError(f"{where}: prefix kind {kind.name} does not define render(chunks, inputs)")
    for t in kind.tables:
        if next(iter(t.columns), None) != "condition":
            raise PrefixError(f"{where}: table {t.name}'s first column must be 'condition' (one part per condition)")
    if kind.side is None and (kind.derived or kind.summary):
        raise PrefixError(f"{where}: prefix kind {kind.name} derives tables {list(kind.derived_tables)} or a "
                          f"summary (summary={kind.summary}) from a side table, and declares none")
    needs = ["derive"] * bool(kind.derived) + ["pooled", "facts"] * kind.summary
    lacking = [m for m in needs if not _overrides(kind, m)]
    if lacking:
        raise PrefixError(f"{where}: prefix kind {kind.name} declares what needs {lacking} and does not define them")
    return kind


def discover(package: str = PACKAGE) -> dict[str, PrefixKind]:
    """Every prefix kind the modules of ``package`` declare, by name, in declared ``order``; two kinds sharing a
    name, an order or a table are refused, naming both modules."""
    found = [(m, _checked(m, k)) for m, k in plugins.discover(package, ATTRIBUTE, PrefixKind)]
    plugins.refuse_shared(found, ATTRIBUTE, lambda k: [("name", k.name), ("order", k.order),
                                                       *(("table", t.name) for t in k.tables)], PrefixError)
    return {k.name: k for _, k in sorted(found, key=lambda mk: mk[1].order)}


#: Every prefix kind, paper's and user's alike, in declared order.
KINDS: dict[str, PrefixKind] = discover()


def tables() -> tuple[Table, ...]:
    """The 04 tables the kinds declare, in declared order: each kind's side table, then the tables derived from it."""
    return tuple(t for k in KINDS.values() for t in k.tables)
