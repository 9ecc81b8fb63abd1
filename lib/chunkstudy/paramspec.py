"""How a parameter declares itself, once, and everything that reads the declaration.

A key is a field of a frozen record class (:mod:`chunkstudy.params`): its annotation is its type, its default the
parameter file's default, and :func:`param` attaches a :class:`Spec` of what the type does not say (a range,
choices, a path's anchor, a plain-name or no-repeats rule, a line of documentation, a digest mode). :func:`schema`
completes each :class:`Spec` from its field (the default, the types its annotation accepts) and returns the
record's :class:`Group`: the one view that validation (:meth:`Spec.check`, :mod:`chunkstudy.config`), records
(:meth:`Group.freeze`), stage digests (:meth:`Group.digested`) and ``docs/parameters.md``
(:mod:`chunkstudy.paramdoc`) all read. Nothing restates a default, a type or a digest mode elsewhere.

A record may extend another (the server-client keys of ``llm``, an embedder and a reranker:
``params.ServerClientParams``); :func:`override` gives one of the inherited keys another default or digest mode
and keeps the rest of its one declaration.

It sits at the bottom of the import floors (it imports nothing of chunkstudy); :mod:`chunkstudy.params` re-exports
:func:`param`, :func:`group`, :func:`named` and :func:`override`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import abc
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from types import MappingProxyType, UnionType
from typing import Any, Literal, Mapping, Union, get_args, get_origin, get_type_hints

#: Where a relative path parameter points from. ``params``: the folder of the parameter file that states it (a base
#: file's value keeps pointing where that file meant when a child inherits it). ``mirror``: ``corpus.mirror`` (with
#: no mirror, the folder the corpus's downloads land in), for files that belong to the upstream data.
ANCHORS = ("params", "mirror")

#: Whether a key (or a whole section) enters the stage digests (:meth:`Group.digested`): ``always``; ``never`` (how
#: a model is served or timed, not what it computes: ``llm.serve`` and the other ``serve*`` keys); ``changed`` (only
#: while it differs from its default: a key added after runs were made, so adding it moved no existing run's
#: digest; a section so declared is left out whole while it is at its default).
DIGEST_MODES = ("always", "never", "changed")

#: A name that becomes one folder or file name (``corpus.name``, ``llm.cache``, ``embed.store``, embedder and
#: reranker keys): a letter or digit, then letters, digits, ``.``, ``_`` or ``-``. No separator, so no ``..``,
#: ``.``, ``''`` or ``a/../b`` can leave the folder it is meant for.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_name(value: Any) -> bool:
    """True for a plain file-system name (:data:`NAME_PATTERN`).

    >>> [is_name(v) for v in ("demo", "qasper_local", "bge-v1.5", "..", ".", "", "a/../b", "-x")]
    [True, True, True, False, False, False, False, False]
    """
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


class BadValue(ValueError):
    """A value its key's declaration refuses; the message starts with the dotted key (``chunkstudy.config`` adds the
    file)."""


@dataclass(frozen=True)
class Spec:
    """One key's declaration. :func:`param` states ``doc`` and what the field's type does not say: ``ge``/``gt``/
    ``le``/``lt`` bound a number (each element of a tuple of numbers); ``choices`` limits a ``str`` (or each
    element) to values :mod:`chunkstudy.design` declares (fixed sets are ``Literal`` types instead); ``anchor``
    marks a path (:data:`ANCHORS`); ``name`` requires a plain file-system name (:data:`NAME_PATTERN`); ``unique``
    forbids repeated elements; ``digest`` says whether the value enters the stage digests (:data:`DIGEST_MODES`).

    :func:`schema` fills in the rest from the field: ``default`` (as plain data: lists and dicts), the accepted
    ``types``, ``nullable``, and ``item``, the type of each element of a list (checked) or of each value of a
    mapping (what :meth:`freeze` makes of it)."""

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
    default: Any = None
    types: tuple[type, ...] = ()
    nullable: bool = False
    item: Any = None

    def __post_init__(self) -> None:
        if self.anchor is not None and self.anchor not in ANCHORS:
            raise ValueError(f"Spec.anchor: {self.anchor!r} is not one of {ANCHORS}")
        if self.digest not in DIGEST_MODES:
            raise ValueError(f"Spec.digest: {self.digest!r} is not one of {DIGEST_MODES}")

    def freeze(self, value: Any) -> Any:
        """A validated value as its record holds it: a list becomes a tuple, a mapping a read-only mapping whose
        list values become tuples when the declared value type is a tuple (``stats.contrasts``); the values of a
        free-form mapping (``llm.vllm_engine``) stay as the file states them."""
        if isinstance(value, list):
            return tuple(value)
        if isinstance(value, Mapping):
            return MappingProxyType({k: tuple(v) if self.item is tuple and isinstance(v, list) else v
                                     for k, v in value.items()})
        return value

    @property
    def range_text(self) -> str:
        lo = f"[{self.ge}" if self.ge is not None else f"({self.gt}" if self.gt is not None else "(-inf"
        hi = f"{self.le}]" if self.le is not None else f"{self.lt})" if self.lt is not None else "inf)"
        return f"{lo}, {hi}"

    def _in_range(self, x: Any) -> bool:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return True  # type errors are reported by the type check
        return not ((self.ge is not None and x < self.ge) or (self.gt is not None and x <= self.gt)
                    or (self.le is not None and x > self.le) or (self.lt is not None and x >= self.lt))

    def check(self, value: Any, where: str) -> Any:
        """``value`` (plain YAML data) as the key ``where`` accepts it (an int where a float is declared becomes a
        float); :class:`BadValue` naming ``where`` for a wrong type, null, NaN or infinity, a value outside the
        choices or the range, a name that is not plain, or a repeated element."""
        if value is None:
            if self.nullable or self.default is None:
                return None
            raise BadValue(f"{where}: must not be null")
        types = self.types or (type(self.default),)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if bool not in types and isinstance(value, bool):
            raise BadValue(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got a boolean {value!r}")
        if not isinstance(value, types):
            raise BadValue(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__} "
                           f"{value!r}")
        bad_number = _non_finite(value)
        if bad_number is not None:
            raise BadValue(f"{where}: {bad_number!r} is not a finite number (.nan and .inf pass no range check: "
                           "state a number)")
        items = value if isinstance(value, list) else [value]
        if self.item is not None and isinstance(value, list):
            if self.item is float:
                value = items = [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
            wrong = [v for v in value
                     if not isinstance(v, self.item) or (isinstance(v, bool) and self.item is not bool)]
            if wrong:
                raise BadValue(f"{where}: expected a list of {self.item.__name__}, got {type(wrong[0]).__name__} "
                               f"{wrong[0]!r} in it")
        if self.choices is not None:
            bad = [v for v in items if v not in self.choices]
            if bad:
                raise BadValue(f"{where}: {bad[0]!r} is not one of {list(self.choices)}")
        if self.name and not is_name(value):
            raise BadValue(f"{where}: {value!r} is not a plain name (a letter or digit, then letters, digits, "
                           "'.', '_' or '-'); it names a folder or file, which must stay inside the project")
        if any(b is not None for b in (self.ge, self.gt, self.le, self.lt)):
            bad = [v for v in items if not self._in_range(v)]
            if bad:
                raise BadValue(f"{where}: {bad[0]!r} is outside {self.range_text}")
        if self.unique and isinstance(value, list):
            seen = [v for i, v in enumerate(value) if v in value[:i]]
            if seen:
                raise BadValue(f"{where}: {seen[0]!r} is repeated in {value!r}")
        return value


class Group(dict):
    """A record's schema: ``{key: Spec | Group}`` in declaration order, ``{"*": Group}`` for named entries
    (``embed.embedders``). ``record`` is the declared class (None for a ``"*"`` group), ``default`` its default as
    plain data, ``digest`` the group's digest mode (``changed``: a section left out of every digest while it is at
    its default, as ``conditions`` is without user conditions)."""

    def __init__(self, items: Mapping[str, Any], record: type | None, default: Any, digest: str = "always") -> None:
        super().__init__(items)
        if digest not in DIGEST_MODES:
            raise ValueError(f"group digest: {digest!r} is not one of {DIGEST_MODES}")
        self.record, self.default, self.digest = record, default, digest

    def freeze(self, value: Mapping[str, Any]) -> Any:
        """Validated plain data (every key present) as the declared frozen record; a ``"*"`` group as a read-only
        mapping of records."""
        if "*" in self:
            return MappingProxyType({k: self["*"].freeze(v) for k, v in value.items()})
        assert self.record is not None
        return self.record(**{k: sub.freeze(value[k]) for k, sub in self.items()})

    def digested(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """``value`` (validated plain data, or a part of it) without what the digests leave out: a key or group
        declared ``never``, and one declared ``changed`` while it holds its default."""
        if "*" in self:
            return {k: self["*"].digested(v) for k, v in value.items()}
        out = {}
        for k, v in value.items():
            node = self[k]
            if node.digest == "never" or (node.digest == "changed" and v == node.default):
                continue
            out[k] = node.digested(v) if isinstance(node, Group) else v
        return out

    def node(self, dotted: str) -> Spec | Group:
        """The declaration at a dotted path below this group (``"llm.seed"``, ``"embed.embedders.*"``); KeyError
        naming the path when nothing is declared there."""
        node: Any = self
        for part in dotted.split(".") if dotted else ():
            if not isinstance(node, Group) or part not in node:
                raise KeyError(f"{dotted}: no parameter or section is declared there")
            node = node[part]
        return node


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinite float anywhere in a parameter value (lists and mappings included), else None.
    No parameter means NaN or infinity, and a NaN passes every comparison, so every range check too."""
    if isinstance(value, float):
        return None if math.isfinite(value) else value
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            bad = _non_finite(v)
            if bad is not None:
                return bad
    return None


def thaw(value: Any) -> Any:
    """Records, read-only mappings and tuples back to the plain dicts and lists the validator reads."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: thaw(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------------ declaring keys

def _field(default: Any, spec: Spec) -> Any:
    if isinstance(default, Mapping):
        frozen = dict(default)
        return field(default_factory=lambda: MappingProxyType(dict(frozen)), metadata={"param": spec})
    return field(default=default, metadata={"param": spec})


def param(default: Any, doc: str = "", *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, choices: tuple[Any, ...] | None = None,
          anchor: str | None = None, name: bool = False, unique: bool = False, digest: str = "always") -> Any:
    """A field of a section record: its default and its :class:`Spec`. A mapping default is frozen."""
    return _field(default, Spec(doc, ge, gt, le, lt, None if choices is None else tuple(choices), anchor, name,
                                unique, digest))


def override(record: type, key: str, default: Any = MISSING, *, digest: str | None = None) -> Any:
    """The field ``key`` that the class being declared inherits from ``record``, with another ``default`` and/or
    ``digest`` mode; its type, documentation and range stay the one declaration in ``record``. The subclass states
    the key's annotation again (a dataclass field needs one): :func:`schema` refuses one that differs."""
    f = {f.name: f for f in fields(record)}[key]
    if default is MISSING:
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
    spec = f.metadata["param"]
    return _field(default, spec if digest is None else replace(spec, digest=digest))


def copied(record: type) -> list[tuple[str, Any, Any]]:
    """``(name, type, field)`` of every key the record class ``record`` declares, each field a fresh copy of its
    declaration (:func:`override`), its type resolved: what :func:`dataclasses.make_dataclass` takes to declare the
    same keys in a record assembled from several (the ``metrics`` section, from each metric's ``Parameters``)."""
    hints = get_type_hints(record)
    return [(f.name, hints[f.name], override(record, f.name)) for f in fields(record)]


def group(cls: type, digest: str = "always") -> Any:
    """A field holding a nested record (a section, ``queries.targets``): the record's own defaults. ``digest``:
    ``changed`` leaves the whole group out of every digest while it is at its default (:data:`DIGEST_MODES`)."""
    return field(default_factory=cls, metadata={"group_digest": digest})


def named() -> Any:
    """A field holding named entries (``embed.embedders``, ``retrieve.rerankers``): none by default."""
    return field(default_factory=lambda: MappingProxyType({}))


# ---------------------------------------------------------------------------------------------- the derived view

def _complete(f: dataclasses.Field, hint: Any, key: str) -> Spec:
    """The declared :class:`Spec` of one field, completed from its annotation (accepted types, null, choices, element
    type) and its default."""
    s = f.metadata.get("param")
    if not isinstance(s, Spec):
        raise TypeError(f"chunkstudy.params: {key} is declared without param(...)")
    nullable, choices, item = False, s.choices, None
    types: tuple[type, ...] = (str, list)  # str | tuple[str, ...]: one value or several
    if get_origin(hint) in (Union, UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        nullable = len(args) < len(get_args(hint))
        hint, item = (None, str) if set(args) == {str, tuple[str, ...]} else (args[0], None)
    origin = get_origin(hint)
    if hint is not None and origin is Literal:
        choices = get_args(hint)
        types = (type(choices[0]),)
    elif origin is tuple:
        types, elem = (list,), get_args(hint)[0]
        if get_origin(elem) is Literal:
            choices, item = get_args(elem), type(get_args(elem)[0])
        else:
            item = elem
    elif origin is abc.Mapping:
        types, item = (dict,), get_origin(get_args(hint)[1]) or get_args(hint)[1]
    elif hint in (int, float, str, bool):
        types = (hint,)
    elif hint is not None:
        raise TypeError(f"chunkstudy.params: {key}: the type {hint!r} has no check")
    default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]
    return replace(s, choices=None if choices is None else tuple(choices), default=thaw(default), types=types,
                   nullable=nullable, item=item)


def _same_type_as_inherited(cls: type, name: str, hint: Any, key: str) -> None:
    for base in cls.__mro__[1:]:
        if is_dataclass(base) and name in {f.name for f in fields(base)}:
            if get_type_hints(base)[name] != hint:
                raise TypeError(f"chunkstudy.params: {key} is declared {hint!r} here but {base.__name__} declares "
                                f"it {get_type_hints(base)[name]!r}")
            return


def schema(cls: type, dotted: str = "", digest: str = "always") -> Group:
    """The :class:`Group` of a declared record class: a :class:`Spec` per key, a nested :class:`Group` per nested
    record, ``{"*": Group}`` for named entries (``Mapping[str, Record]``). ``dotted`` names it in errors."""
    hints = get_type_hints(cls)
    items: dict[str, Any] = {}
    for f in fields(cls):
        key = f"{dotted}.{f.name}" if dotted else f.name
        hint = hints[f.name]
        _same_type_as_inherited(cls, f.name, hint, key)
        if is_dataclass(hint):
            items[f.name] = schema(hint, key, f.metadata.get("group_digest", "always"))  # type: ignore[arg-type]
        elif get_origin(hint) is abc.Mapping and is_dataclass(get_args(hint)[1]):
            items[f.name] = Group({"*": schema(get_args(hint)[1], f"{key}.*")}, None, {})
        else:
            items[f.name] = _complete(f, hint, key)
    return Group(items, cls, thaw(cls()), digest)
