"""How a parameter record's field declares itself (:mod:`chunkstudy.params` uses it for every section): its default
and a :class:`Spec` of what its type does not say (a range, choices, a path's anchor, a digest mode).

It sits at the bottom of the import floors with :mod:`chunkstudy.params`, which re-exports its names."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

#: Where a relative path parameter points from. ``params``: the folder of the parameter file that states it (a base
#: file's value keeps pointing where that file meant when a child inherits it). ``mirror``: ``corpus.mirror`` (with
#: no mirror, the folder the corpus's downloads land in), for files that belong to the upstream data.
ANCHORS = ("params", "mirror")

#: Whether a parameter enters the stage digests (:func:`chunkstudy.config.digest_of`): ``always``; ``never`` (how a
#: model is served, not what it computes: ``llm.serve`` and the other ``serve*`` keys); ``changed`` (only when it
#: differs from its default: keys added after runs were made, so adding them moved no existing run's digest).
DIGEST_MODES = ("always", "never", "changed")


@dataclass(frozen=True)
class Spec:
    """What a field's type does not say. ``ge``/``gt``/``le``/``lt`` bound a number (each element of a tuple of
    numbers); ``choices`` limits a ``str`` (or each element) to values :mod:`chunkstudy.design` declares (fixed
    sets are ``Literal`` types instead); ``anchor`` marks a path (:data:`ANCHORS`); ``name`` requires a plain
    file-system name (``config_rules.NAME_PATTERN``); ``unique`` forbids repeated elements; ``digest`` says whether
    the value enters the stage digests (:data:`DIGEST_MODES`)."""

    doc: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None
    anchor: str | None = None
    name: bool = False
    unique: bool = False
    digest: str = "always"

    def __post_init__(self) -> None:
        if self.anchor is not None and self.anchor not in ANCHORS:
            raise ValueError(f"Spec.anchor: {self.anchor!r} is not one of {ANCHORS}")
        if self.digest not in DIGEST_MODES:
            raise ValueError(f"Spec.digest: {self.digest!r} is not one of {DIGEST_MODES}")


def param(default: Any, doc: str = "", *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, choices: tuple[Any, ...] | None = None,
          anchor: str | None = None, name: bool = False, unique: bool = False, digest: str = "always") -> Any:
    """A field of a section record: its default and its :class:`Spec`. A mapping default is frozen."""
    spec = Spec(doc, ge, gt, le, lt, None if choices is None else tuple(choices), anchor, name, unique, digest)
    if isinstance(default, Mapping):
        frozen = dict(default)
        return field(default_factory=lambda: MappingProxyType(dict(frozen)), metadata={"param": spec})
    return field(default=default, metadata={"param": spec})


def group(cls: type) -> Any:
    """A field holding a nested record (``queries.targets``): the record's own defaults."""
    return field(default_factory=cls)


def named() -> Any:
    """A field holding named entries (``embed.embedders``, ``retrieve.rerankers``): none by default."""
    return field(default_factory=lambda: MappingProxyType({}))
