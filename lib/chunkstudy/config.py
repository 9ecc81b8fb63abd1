"""Parameter files: loading, ``base:`` inheritance, validation and per-stage digests.

A parameter file (``params/<corpus>.yaml``) is the single source of every threshold, k, seed and model name
the pipeline uses. What it may state is declared once, as typed record classes in :mod:`chunkstudy.params`;
:data:`SCHEMA` is derived from them, and a file is validated against it on load: an unknown key or a bad value
raises :class:`ConfigError` naming the file, the dotted key and the valid choices. ``cfg.params("llm")`` is the
section as its record (:class:`chunkstudy.params.LLMParams`), the one way a notebook or a function reads it.

``base: other.yaml`` (a path relative to the file) loads that file first and deep-merges this one over it, so
``params/qasper_local.yaml`` restates only what differs from ``params/qasper.yaml``. An explicitly empty mapping
replaces instead of merging: ``rerankers: {}`` removes the base file's rerankers.

Each notebook stage declares the parameter sections it reads (:data:`STAGE_SECTIONS`); :func:`stage_digest`
hashes exactly those, so changing ``metrics.budgets`` reruns 06 onwards but not 04.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, overload

import yaml

from . import params, stages
from .config_rules import RULES, Rule, dotted_value
from .paramspec import BadValue, Group, Spec, is_name, schema, thaw
from .params import (ChunkingParams, ConditionsParams, ContextsParams, ContrastsParams, CorpusParams, EmbedParams,
                     FiguresParams, InduceParams, LLMParams, MetricsParams, Params, QueriesParams, RetrieveParams,
                     StatsParams)
from .errors import ChunkstudyError


class ConfigError(ChunkstudyError, ValueError):
    """A parameter file is malformed: the message names the file and the key."""


#: Every parameter the pipeline reads, by section: the declaration of :mod:`chunkstudy.params` as one
#: :class:`~chunkstudy.paramspec.Group` of sections, each a ``Group`` of :class:`~chunkstudy.paramspec.Spec` by key
#: (``"*"`` maps any name to an entry's group: ``embed.embedders.*``).
SCHEMA: Group = schema(params.Params)

#: Chunkers that embed while they cut (their ``embedder`` resolves to ``embed.strong`` when the file loads, so the
#: digest of 04 names it).
EMBEDDING_CHUNKERS = ("chonkie:SemanticChunker",)

#: Keys a parameter file may no longer state, and the key that took each one's place: ``max_tokens`` meant four
#: things in four sections (now each name says which tokens it counts), and ``stats.primary_embedder`` and
#: ``retrieve.rerank_embedder`` named the one role of ``embed.strong``. A file stating an old key is refused with
#: the new name (:func:`renamed_key`), never silently ignored.
RENAMED: dict[str, str] = {
    "llm.max_tokens": "llm.max_reply_tokens",
    "contexts.max_tokens": "contexts.max_context_tokens",
    "contexts.min_tokens": "contexts.min_context_tokens",
    "contexts.request_max_tokens": "contexts.request_reply_tokens",
    "queries.gen_max_tokens": "queries.gen_reply_tokens",
    "chunking.max_tokens": "chunking.max_chunk_tokens",
    "chunking.min_tokens": "chunking.min_chunk_tokens",
    "stats.primary_embedder": "embed.strong",
    "retrieve.rerank_embedder": "embed.strong",
}


def renamed_key(raw: Mapping, file: Path | str, where: str = "") -> None:
    """Raise :class:`ConfigError` naming ``file`` when ``raw`` (a parameter file's mapping, or the section
    ``where`` of one) states a key of :data:`RENAMED`."""
    for k, v in raw.items():
        dotted = f"{where}.{k}" if where else str(k)
        if dotted in RENAMED:
            raise ConfigError(f"{file}: {dotted} was renamed to {RENAMED[dotted]}")
        if isinstance(v, Mapping) and not where:
            renamed_key(v, file, dotted)


#: The parameters each notebook stage reads (its digest covers exactly these): sections (``"llm"``) or single
#: keys (``"corpus.kind"``), from the stage declarations (:data:`chunkstudy.stages.STAGES`); 08 reads every section
#: (the report names the models and settings of every stage).
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    s.name: tuple(SCHEMA) if stages.ALL_PARAMS in s.params else s.params for s in stages.STAGES}


@dataclass
class Config:
    """A validated parameter file. Read it through :meth:`params`: ``cfg.params("metrics").cutoff``.

    ``data`` holds the same values as plain dicts and lists: what the stage digests hash (:meth:`digest`) and
    what the path resolution reads; no stage reads a parameter from it."""

    data: dict
    path: Path
    root: Path = field(default_factory=lambda: Path.cwd())
    #: the frozen copy these parameters were read from (:func:`frozen_yaml`); ``path`` is then the user's file it was
    #: made from, which anchors relative paths and names the parameters in messages
    frozen: Path | None = None
    _record: Params = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._record = SCHEMA.freeze(self.data)

    @overload
    def params(self) -> Params: ...
    @overload
    def params(self, name: Literal["corpus"]) -> CorpusParams: ...
    @overload
    def params(self, name: Literal["llm"]) -> LLMParams: ...
    @overload
    def params(self, name: Literal["induce"]) -> InduceParams: ...
    @overload
    def params(self, name: Literal["contexts"]) -> ContextsParams: ...
    @overload
    def params(self, name: Literal["queries"]) -> QueriesParams: ...
    @overload
    def params(self, name: Literal["chunking"]) -> ChunkingParams: ...
    @overload
    def params(self, name: Literal["embed"]) -> EmbedParams: ...
    @overload
    def params(self, name: Literal["retrieve"]) -> RetrieveParams: ...
    @overload
    def params(self, name: Literal["metrics"]) -> MetricsParams: ...
    @overload
    def params(self, name: Literal["stats"]) -> StatsParams: ...
    @overload
    def params(self, name: Literal["figures"]) -> FiguresParams: ...
    @overload
    def params(self, name: Literal["conditions"]) -> ConditionsParams: ...
    @overload
    def params(self, name: Literal["contrasts"]) -> ContrastsParams: ...

    def params(self, name: str | None = None) -> Any:
        """A section as its frozen typed record (:mod:`chunkstudy.params`): ``cfg.params("llm").seed``; with no
        name, the whole file (:class:`chunkstudy.params.Params`). Library functions take these, never dicts."""
        if name is None:
            return self._record
        if name not in SCHEMA:
            raise KeyError(f"{name!r} is not a parameter section; sections: {list(SCHEMA)}")
        return getattr(self._record, name)

    @property
    def corpus(self) -> str:
        return self._record.corpus.name

    @overload
    def resolve(self, p: str | Path) -> Path: ...
    @overload
    def resolve(self, p: None) -> None: ...
    @overload
    def resolve(self, p: str | Path | None) -> Path | None: ...

    def resolve(self, p: str | Path | None) -> Path | None:
        """A path from the parameter file, relative to that file's folder."""
        if p is None:
            return None
        p = Path(p).expanduser()
        return p if p.is_absolute() else (self.path.parent / p).resolve()

    def resolve_param(self, dotted: str, mirror_default: Path | None = None) -> Path | list[Path] | None:
        """The file(s) a path parameter names, by its declared anchor (:data:`ANCHORS`): ``params`` values
        relative to the parameter file, ``mirror`` values relative to ``corpus.mirror`` (or ``mirror_default``,
        the downloads folder, when the mirror is null). None for null and for values that name no file ('api')."""
        section, key = dotted.split(".")
        spec = SCHEMA[section][key]
        value = self.data[section][key]
        if spec.anchor is None:
            raise KeyError(f"{dotted} is not a path parameter")
        if value is None or (isinstance(value, str) and value in _NOT_PATHS):
            return None
        folder: Path | None
        if spec.anchor == "params":
            folder = self.path.parent
        elif self._record.corpus.mirror is not None:
            folder = self.resolve(self._record.corpus.mirror)
        else:
            folder = mirror_default
        values = value if isinstance(value, list) else [value]
        out = []
        for v in values:
            p = Path(str(v)).expanduser()
            if not p.is_absolute():
                if folder is None:
                    raise ConfigError(f"{self.path}: {dotted}: {v!r} is relative to corpus.mirror, which is null")
                p = folder / p
            out.append(p.resolve())
        return out if isinstance(value, list) else out[0]

    def digest(self, sections: tuple[str, ...] | None = None) -> str:
        """Digest of the given sections or dotted keys (``"corpus.kind"``); all sections when None
        (:func:`digest_of`)."""
        return digest_of(self.data, sections)

    def values(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """``{key: value}`` of sections (``"stats"``) and dotted keys (``"corpus.kind"``)."""
        return {k: dotted_value(self.data, k) for k in keys}


def digested(data: Mapping[str, Any], sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """What :func:`digest_of` hashes: ``{section or dotted key: value}`` of validated ``data`` for the given sections
    or dotted keys (all sections when None), less what their declarations leave out of digests
    (:meth:`chunkstudy.paramspec.Group.digested`): ``never`` keys, and ``changed`` keys and sections while at their
    defaults. A section or dotted key so left out is absent, as it was before it was declared. Stage manifests
    record it (``params_read``), so a rerun can name the parameter that changed."""
    kept = SCHEMA.digested(data)
    part = {}
    for k in sections or tuple(data):
        SCHEMA.node(k)  # a key nothing declares is an error, not an absence
        try:
            part[k] = dotted_value(kept, k)
        except KeyError:
            continue
    return part


def digest_of(data: Mapping[str, Any], sections: tuple[str, ...] | None = None) -> str:
    """:meth:`Config.digest` of validated ``data`` (``cfg.data``, or a part of it): the sha256 (16 hex) of
    :func:`digested`."""
    return hashlib.sha256(json.dumps(digested(data, sections), sort_keys=True, default=str).encode()).hexdigest()[:16]


def declaration_digest(conditions: Any, contrasts: Any) -> str:
    """The digest of what the user added (the ``conditions`` and ``contrasts`` records, as plain data): stage
    manifests record it (``user_declared``) and the report compares 01's with the one it reads."""
    return digest_of({"conditions": thaw(conditions), "contrasts": thaw(contrasts)})


# ------------------------------------------------------------------------------------------ typed section records

def _group(dotted: str) -> Group:
    """The declaration of a section or nested group by dotted name (``"llm"``, ``"queries.targets"``,
    ``"embed.embedders.*"``); ``""`` is the whole file."""
    node = SCHEMA.node(dotted)
    if not isinstance(node, Group):
        raise KeyError(f"{dotted} is a parameter, not a section")
    return node


def record_type(dotted: str) -> type:
    """The declared record class (:mod:`chunkstudy.params`) of a section (``record_type("llm")``) or a nested
    group (``"queries.targets"``, ``"embed.embedders.*"``, ``"retrieve.rerankers.*"``)."""
    cls = _group(dotted).record
    if cls is None:
        raise KeyError(f"{dotted} is not a section or group but a mapping of named ones: {dotted}.*")
    return cls


def record(dotted: str, values: Mapping[str, Any] | None = None, *, where: str | Path = "") -> Any:
    """A section's (or nested group's) values as its declared frozen record (:func:`record_type`): keys not given
    take the declared default, and every value is checked as a parameter file's would be (types, choices,
    ranges), so a record holds only valid values. A record of the same type passes through unchanged. Lists
    become tuples; a ``"*"`` group (embedders, rerankers) becomes a read-only mapping of records. Tests build
    the records a function takes with it: ``config.record("metrics", {"cutoff": 5})``; the section's keys go in
    ``values``, and any other keyword is refused (a TypeError naming it)."""
    cls = record_type(dotted)
    if isinstance(values, cls):
        return values
    group = _group(dotted)
    return group.freeze(_validate(group, thaw(values or {}), dotted, Path(str(where or "<parameters>"))))


def as_dict(rec: Any) -> dict:
    """A record as plain dicts and lists (for JSON, manifests and reports)."""
    return thaw(rec)


def path_params() -> list[tuple[str, str]]:
    """``(dotted key, anchor)`` of every path parameter in :data:`SCHEMA`."""
    return [(f"{sec}.{k}", p.anchor) for sec, spec in SCHEMA.items() if "*" not in spec
            for k, p in spec.items() if isinstance(p, Spec) and p.anchor is not None]


def _merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and v and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _duplicate_keys(node: yaml.Node, where: str = "") -> list[tuple[str, int, int]]:
    """``(dotted key, line, first line)`` of every key that a YAML mapping states twice (1-based lines)."""
    found = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            dotted = f"{where}.{key}" if where else str(key)
            if key in seen:
                found.append((dotted, k.start_mark.line + 1, seen[key]))
            else:
                seen[key] = k.start_mark.line + 1
            found += _duplicate_keys(v, dotted)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            found += _duplicate_keys(v, f"{where}[{i}]")
    return found


def _refuse_aliases(text: str, where: str | Path) -> None:
    """Raise at the first YAML alias (``*name``, a ``<<:`` merge included), from the parser's events: before
    anything is composed, so an alias bomb (each level a list of aliases of the one before, 10^n nodes once
    expanded) costs one pass over the text. An anchor alone (``&name``) is harmless and allowed."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"{where}: line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                              "allowed: an alias can expand to exponentially many values; state the value again")


def read_yaml(text: str, where: str | Path) -> Any:
    """Parse YAML strictly: invalid YAML, an alias (:func:`_refuse_aliases`) or a key stated twice in one mapping
    (YAML would silently keep the last) raises :class:`ConfigError` naming ``where`` (the file), the line and the
    dotted key. Every step is linear in the text."""
    try:
        _refuse_aliases(text, where)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        dups = _duplicate_keys(node) if node is not None else []
        if dups:
            key, line, first = dups[0]
            raise ConfigError(f"{where}: line {line}: duplicate key '{key}' (first stated on line {first})")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {e}") from None


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    if path in seen:
        raise ConfigError(f"{path}: 'base:' inheritance loops through {' -> '.join(map(str, seen))}")
    if not path.is_file():
        raise ConfigError(f"parameter file not found: {path}")
    raw = read_yaml(path.read_text(), path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    renamed_key(raw, path)
    base = raw.pop("base", None)
    if base is None:
        return raw
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{path}: base: expected the name of a parameter file (a string), got "
                          f"{type(base).__name__} {base!r}")
    base_path = (path.parent / base).resolve()
    inherited = _anchor_paths(_read_yaml(base_path, seen + (path,)), base_path.parent)
    if isinstance(inherited.get("corpus"), dict):
        inherited["corpus"].pop("name", None)  # a variant never writes over its base's results (see load)
    return _merge(inherited, raw)


#: literal values of path parameters that name no file (``featured_list: api`` fetches the list online)
_NOT_PATHS = {"api"}


def _anchor_paths(raw: dict, folder: Path) -> dict:
    """Make the relative ``params``-anchored values a base file states absolute, so they keep pointing where that
    file meant even when a child file in another folder inherits them (the child's own values stay relative to it).
    ``mirror``-anchored values stay as written: they are resolved against the final ``corpus.mirror``."""
    out = copy.deepcopy(raw)
    for section, spec in SCHEMA.items():
        values = out.get(section)
        if not isinstance(values, dict) or "*" in spec:
            continue
        for key, p in spec.items():
            v = values.get(key)
            if isinstance(p, Spec) and p.anchor == "params" and isinstance(v, str) and v not in _NOT_PATHS:
                values[key] = str((folder / v).expanduser().resolve())
    extra = (out.get("conditions") or {}).get("extra") if isinstance(out.get("conditions"), dict) else None
    for spec in (extra or {}).values():  # a user chunker in a file ("mine.py:chunk") is relative to its file too
        ref = spec.get("chunker") if isinstance(spec, dict) else None
        module, sep, func = ref.rpartition(":") if isinstance(ref, str) else ("", "", "")
        if sep and module.endswith(".py"):
            spec["chunker"] = f"{(folder / module).expanduser().resolve()}:{func}"
    return out


def _validate(spec: Any, value: Any, where: str, file: Path) -> Any:
    if isinstance(spec, Spec):
        try:
            return spec.check(value, where)
        except BadValue as e:
            raise ConfigError(f"{file}: {e}") from None
    # a section: dict of specs (or a "*" wildcard mapping any name to a sub-spec)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{file}: {where}: expected a mapping, got {type(value).__name__}")
    if "*" in spec:
        bad = [k for k in value if not is_name(k)]
        if bad:  # embedder and reranker keys name vector files and cache entries
            raise ConfigError(f"{file}: {where}: key {bad[0]!r} is not a plain name (a letter or digit, then "
                              "letters, digits, '.', '_' or '-')")
        return {k: _validate(spec["*"], v, f"{where}.{k}", file) for k, v in value.items()}
    unknown = sorted(set(value) - set(spec))
    renamed_key({k: None for k in unknown}, file, where)
    if unknown:
        raise ConfigError(
            f"{file}: unknown key '{where + '.' if where else ''}{unknown[0]}'; valid keys here: {sorted(spec)}")
    out = {}
    for k, sub in spec.items():
        key = f"{where}.{k}" if where else k
        if k in value:
            out[k] = _validate(sub, value[k], key, file)
        elif isinstance(sub, Spec):
            out[k] = copy.deepcopy(sub.default)
        else:
            out[k] = _validate(sub, {}, key, file)
    return out


def check_rules(data: dict, file: Path | str, rules: tuple[Rule, ...] = RULES) -> None:
    """Apply the cross-field rules (:data:`chunkstudy.config_rules.RULES`) to validated parameters; the first
    failure raises, naming the file and the dotted key."""
    for rule in rules:
        problem = rule.test(data)
        if problem:
            raise ConfigError(f"{file}: {rule.key}: {problem}")


#: The top-level key of a frozen copy (:func:`frozen_yaml`): the parameter file the copy was made from.
FROZEN_KEY = "frozen_from"


def frozen_yaml(cfg: Config) -> str:
    """``cfg``'s resolved parameters as the text of a *frozen copy*: every value as validated (defaults filled in,
    ``base:`` merged), and under :data:`FROZEN_KEY` the file they came from. The runner writes one per run and
    hands it to every notebook, so the whole run reads the parameters its skip keys were computed from, whatever
    happens to the user's file meanwhile. :func:`load` of the copy gives back ``cfg.data``, with ``path`` = the
    original file (relative paths keep their anchor, messages name the user's file) and ``frozen`` = the copy."""
    return ("# The resolved parameters of one run, frozen at its start (chunkstudy.config.frozen_yaml): the runner's\n"
            "# notebooks read this copy, not the file named below, so an edit during the run has no effect.\n"
            + yaml.safe_dump({FROZEN_KEY: str(cfg.path), **cfg.data}, sort_keys=False, allow_unicode=True))


def load(path: str | Path, root: str | Path | None = None, overrides: Mapping | None = None) -> Config:
    """Load, merge (``base:``), validate and return a parameter file.

    ``corpus.name`` (the folder under ``data/`` and ``figures/`` the run writes) is the one the file states, else
    the file's name without ``.yaml``; it is never inherited through ``base:``, so a variant cannot silently write
    over its base corpus's results.
    The project root (under which ``data/`` and ``figures/`` live) is ``root``, else ``$CHUNKSTUDY_ROOT``, else
    the nearest folder above the file holding ``pyproject.toml`` and ``lib/chunkstudy``.
    ``overrides`` (a nested mapping) is merged last; tests use it to change one value.
    """
    path = params_path(path, root)
    raw = _read_yaml(path)
    frozen = None
    if FROZEN_KEY in raw:  # a run's frozen copy (frozen_yaml): its values, anchored at and named by the original file
        frozen, origin = path, raw.pop(FROZEN_KEY)
        if not isinstance(origin, str) or not Path(origin).is_absolute():
            raise ConfigError(f"{path}: {FROZEN_KEY} must be the absolute path of the parameter file the copy was "
                              f"made from, got {origin!r}")
        path = Path(origin)
    if overrides:
        raw = _merge(raw, overrides)
    corpus = raw.get("corpus")
    if corpus is None or (isinstance(corpus, dict) and "name" not in corpus):
        if not is_name(path.stem):
            raise ConfigError(f"{path}: corpus.name is not stated and the file name {path.stem!r} is not a plain "
                              "name to use instead; state corpus.name")
        raw["corpus"] = {**(corpus or {}), "name": path.stem}
    data = _validate(SCHEMA, raw, "", path)
    for spec in data["conditions"]["extra"].values():  # the semantic chunker embeds with embed.strong by default
        if spec["embedder"] is None and spec["chunker"] in EMBEDDING_CHUNKERS:
            spec["embedder"] = data["embed"]["strong"]
    check_rules(data, path)
    if root is None and os.environ.get("CHUNKSTUDY_ROOT"):
        root = os.environ["CHUNKSTUDY_ROOT"]  # set by the runner for the notebooks it executes
    return Config(data=data, path=path, root=Path(root).resolve() if root else find_root(path), frozen=frozen)


def _project_root(start: Path) -> Path | None:
    for p in [start, *start.parents]:
        if (p / "pyproject.toml").is_file() and (p / "lib" / "chunkstudy").is_dir():
            return p
    return None


def find_root(start: Path) -> Path:
    """The project root: the nearest folder above ``start`` holding pyproject.toml (else the cwd)."""
    return _project_root(start) or Path.cwd().resolve()


def params_path(path: str | Path, root: str | Path | None = None) -> Path:
    """Where a parameter file named ``path`` is. Absolute paths are taken as they are, and a path relative to
    ``root`` when a root is given. Otherwise a relative path that exists from the working directory is used; else
    it is relative to the project root — the nearest folder above the working directory holding pyproject.toml,
    else the project the package was installed from. So ``params/demo.yaml`` names the same file from the project
    root (the runner, a shell) and from ``notebooks/`` (a kernel JupyterLab started there)."""
    path = Path(path).expanduser()
    if path.is_absolute():
        return path.resolve()
    if root is not None:
        return (Path(root) / path).resolve()
    if (Path.cwd() / path).is_file():
        return (Path.cwd() / path).resolve()
    tried = []
    for base in (_project_root(Path.cwd().resolve()), _project_root(Path(__file__).resolve().parent)):
        if base is not None and base not in tried:
            if (base / path).is_file():
                return (base / path).resolve()
            tried.append(base)
    raise ConfigError(f"parameter file not found: {path} (looked in the working directory {Path.cwd()} and in the "
                      f"project root{'s' if len(tried) > 1 else ''} {', '.join(map(str, tried)) or '(none found)'})")


def stage_digest(cfg: Config, stage: str) -> str:
    """Stable digest of the parameters ``stage`` reads (upstream changes reach it through its input hashes)."""
    if stage not in STAGE_SECTIONS:
        raise ConfigError(f"unknown stage {stage!r}; stages: {sorted(STAGE_SECTIONS)}")
    return cfg.digest(STAGE_SECTIONS[stage])
