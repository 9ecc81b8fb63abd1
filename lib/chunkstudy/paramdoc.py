"""The parameter reference, ``docs/parameters.md``, generated from the declaration.

Every parameter a file may state is declared once, as a typed field of a record class in :mod:`chunkstudy.params`;
:data:`chunkstudy.config.SCHEMA` is that declaration as the validator and the digests read it
(:mod:`chunkstudy.paramspec`). :func:`markdown` renders it as one Markdown page: per section its record's docstring
and a table of its keys (type, default, what the validator accepts, the declared documentation, and the stages whose
skip key covers it, from :data:`chunkstudy.stages.STAGES` and the key's digest mode; for a key whose values are
registered above the parameter layer, :func:`registered`, the names registered),
then the cross-field rules (:data:`chunkstudy.config_rules.RULES`) and the renamed keys
(:data:`chunkstudy.config.RENAMED`). The page is never edited by hand: ``tests/test_docs.py`` fails when it
differs from :func:`markdown`, naming the command that rewrites it::

    .venv/bin/python -m chunkstudy.paramdoc --write        # rewrites docs/parameters.md
    .venv/bin/python -m chunkstudy.paramdoc                # prints it
    .venv/bin/python -m chunkstudy.paramdoc --write --root ../clone   # the page of another copy of the project
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
from typing import Any, Mapping

from . import config, stages
from .config_rules import RULES
from .corpus import build as corpus_build
from .paramspec import Group, Spec
from .stagedoc import add_root, page_path, write_page

#: The page's path relative to the project root.
PAGE = "docs/parameters.md"
#: The command that regenerates :data:`PAGE` (what the staleness test prints).
COMMAND = ".venv/bin/python -m chunkstudy.paramdoc --write"

_ANCHOR_TEXT = {"params": "a path, relative to the parameter file that states it",
                "mirror": "a path, relative to `corpus.mirror`"}


def _yaml(value: Any) -> str:
    """A value as a parameter file writes it (YAML flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _md(text: str) -> str:
    """A docstring or parameter doc as Markdown: reST roles and double backticks become code spans, and a word
    holding a placeholder (``data/<name>/``, ``page_id<TAB>title``) becomes one, so no renderer takes it for HTML."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", " ".join(text.split())).replace("``", "`")
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else
                   re.sub(r"([^\s<`]*<[A-Za-z][^<>]*>[^\s,;:)`]*)", r"`\1`", part) for part in parts)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return _md(text).replace("|", "\\|")


def _type(p: Spec) -> str:
    names = "/".join(t.__name__ for t in p.types) if p.types else type(p.default).__name__
    if names == "list" and p.item is not None:
        names = f"list of {p.item.__name__}"
    elif names == "dict":
        names = "mapping" if p.item is None else f"mapping of {getattr(p.item, '__name__', 'value')}"
    return names + (" or null" if p.nullable or p.default is None else "")


def _accepts(p: Spec) -> str:
    parts = []
    each = "each " if list in p.types else ""
    if p.choices is not None:
        parts.append(f"{each}one of " + ", ".join(f"`{c}`" for c in p.choices))
    if any(b is not None for b in (p.ge, p.gt, p.le, p.lt)):
        parts.append(f"{each}in `{p.range_text}`")
    if p.name:
        parts.append("a plain name")
    if p.unique:
        parts.append("no repeats")
    if p.anchor is not None:
        parts.append(_ANCHOR_TEXT[p.anchor])
    return "; ".join(parts)


def registered() -> dict[str, tuple[tuple[str, ...], str]]:
    """The keys whose valid values a registry above the parameter layer holds (:mod:`chunkstudy.params` sits below
    it and declares them plain names), each with the names registered and what they are: ``corpus.kind``, the
    corpus loaders (:data:`chunkstudy.corpus.build.LOADERS`)."""
    return {"corpus.kind": (corpus_build.kinds(), "the registered corpus loaders")}


def read_by(dotted: str) -> tuple[str, ...]:
    """The stages whose parameter digest covers the key ``dotted`` (its section, the key, or a group above it);
    an edit of the key reruns these (and what reads their outputs). None for a key declared ``digest: never``."""
    node = config.SCHEMA.node(dotted)
    if isinstance(node, Spec) and node.digest == "never":
        return ()
    generic = dotted.replace(".*", "")
    out = []
    for s in stages.STAGES:
        if any(p == stages.ALL_PARAMS or generic == p or generic.startswith(p + ".") for p in s.params):
            out.append(s.name[:2])
    return tuple(out)


def _doc(cls: type | None) -> str:
    return _md(inspect.getdoc(cls) or "") if cls is not None and cls.__doc__ else ""


def _anchor(title: str) -> str:
    """The anchor a forge (GitHub's rule) and mkdocs give a heading of plain words and dots."""
    return "".join(c for c in title.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def _inherited(spec: Group) -> tuple[type | None, set[str]]:
    """The record class ``spec``'s record extends (``ServerClientParams``) and the keys it inherits from it."""
    bases = [b for b in (spec.record.__mro__[1:] if spec.record else ()) if dataclasses.is_dataclass(b)]
    return (bases[0], {f.name for f in dataclasses.fields(bases[0])}) if bases else (None, set())


def _section(dotted: str, spec: Group, out: list[str], nested: list[tuple[str, Group]]) -> None:
    title = dotted.replace("*", "KEY")
    out += [f"{'##' if '.' not in dotted else '###'} {title}", ""]
    doc = _doc(spec.record)
    if doc:
        out += [doc, ""]
    if dotted.endswith("*"):
        out += [f"`{dotted.replace('.*', '')}` maps names of your choice (`KEY`) to records with these keys.", ""]
    base, inherited = _inherited(spec)
    if base is not None:
        text = _doc(base)
        out += [f"From `{next(k for k in spec if k in inherited)}` on, {text[:1].lower()}{text[1:]}", ""]
    out += ["| key | type | default | accepts | what it decides | read by |", "|---|---|---|---|---|---|"]
    for key, p in sorted(spec.items(), key=lambda kv: kv[0] in inherited):  # its own keys first
        full = f"{dotted}.{key}"
        if isinstance(p, Spec):
            names, what = registered().get(full, ((), ""))
            among = [f"one of {', '.join(f'`{n}`' for n in names)} ({what})"] if what else []
            accepts = "; ".join([*among, _accepts(p), *(r.doc for r in RULES if r.own_row and r.key == full)])
            out.append(f"| `{key}` | {_type(p)} | `{_cell(_yaml(p.default))}` | {_cell(accepts)} | "
                       f"{_cell(p.doc)} | {' '.join(read_by(full)) or 'none: reruns nothing'} |")
        else:
            sub = f"{full}.*" if set(p) == {"*"} else full
            out.append(f"| `{key}` | record | | | see [{sub.replace('*', 'KEY')}](#{_anchor(sub.replace('*', 'KEY'))}) "
                       f"| {' '.join(read_by(full))} |")
            nested.append((sub, p["*"] if set(p) == {"*"} else p))
    out.append("")


def markdown() -> str:
    """The parameter reference as one Markdown page (the content of :data:`PAGE`)."""
    out = [
        "# Parameter reference",
        "",
        f"<!-- Generated from lib/chunkstudy/params.py by `{COMMAND}`; do not edit by hand. -->",
        "",
        "Every key a parameter file (`params/<corpus>.yaml`) may state, by section, as declared in",
        "`lib/chunkstudy/params.py` (one frozen, typed record per section) and validated when the file loads.",
        "A key left out takes the default shown. A misspelled or unknown key, a value of the wrong type, a value",
        "outside its range, NaN or infinity, and a renamed key all fail at load, naming the file and the dotted key.",
        "A file may start with `base: other.yaml` and restate only what differs ([running.md](running.md#parameter-files)).",
        "",
        "*read by*: the stages (01-08) whose skip key covers the key: editing it reruns them and what follows.",
        "Code reads a section as a record: `cfg.params(\"retrieve\").k`, never `cfg[\"retrieve\"][\"k\"]`.",
        "",
        "Sections: " + ", ".join(f"[{s}](#{_anchor(s)})" for s in config.SCHEMA) + "; then",
        "[cross-field rules](#cross-field-rules) and [renamed keys](#renamed-keys).",
        "",
    ]
    for section, spec in config.SCHEMA.items():
        nested: list[tuple[str, Group]] = []
        _section(section, spec, out, nested)
        while nested:
            sub, subspec = nested.pop(0)
            _section(sub, subspec, out, nested)
    out += ["## Cross-field rules", "",
            "Checked after every key passed its own check (`chunkstudy.config_rules`); a failure names the key.", "",
            "| key | rule |", "|---|---|"]
    out += [f"| `{r.key}` | {_cell(r.doc)} |" for r in RULES if not r.own_row]
    out += ["", "## Renamed keys", "", "A file that states an old key is refused with the new name.", "",
            "| old key | new key |", "|---|---|"]
    out += [f"| `{old}` | `{new}` |" for old, new in config.RENAMED.items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.paramdoc", description=__doc__.split("\n")[0])
    ap.add_argument("--write", nargs="?", const=PAGE, metavar="PATH",
                    help=f"write the page (default: {PAGE}, relative to the project root) instead of printing it")
    add_root(ap)
    args = ap.parse_args(argv)
    text = markdown()
    if args.write is None:
        sys.stdout.write(text)
        return 0
    path = page_path(args.write, args.root)
    write_page(path, text)
    print(f"paramdoc: wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
