"""The docs' tables of what the study declares, generated from the registries: the conditions, the prefix kinds,
the pre-registered contrasts, the metrics and Anthropic's recipe (:mod:`chunkstudy.design`), the corpus kinds and
the folder kinds among them (the loaders of :data:`chunkstudy.corpus.build.LOADERS`) and the data contracts
(:data:`chunkstudy.stages.DATA_CONTRACTS`).

A page holds a table as a block between a begin and an end marker naming it (:func:`begin`, :func:`end`);
:data:`PAGES` says which blocks each page holds. The blocks are never edited by hand, so no page keeps a second
wording of a declaration (a contrast's question is the one of :data:`chunkstudy.design.CONTRASTS`, wherever it is
shown): ``tests/test_docs.py`` fails when a block differs from what :data:`BLOCKS` renders, naming the command that
rewrites them (as for ``docs/parameters.md``, :mod:`chunkstudy.paramdoc`, and the pipeline table,
:mod:`chunkstudy.stagedoc`)::

    .venv/bin/python -m chunkstudy.designdoc --write        # rewrites every block of every page in PAGES
    .venv/bin/python -m chunkstudy.designdoc conditions     # prints one block
    .venv/bin/python -m chunkstudy.designdoc --write --root ../clone   # the pages of another copy of the project
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from typing import Callable

from . import config, design, paper, stages
from .corpus import build
from .corpus.folder import FolderLoader
from .paramdoc import _cell
from .stagedoc import add_root, page_path, replace_block, write_page

#: The command that rewrites every block (what the staleness test prints).
COMMAND = ".venv/bin/python -m chunkstudy.designdoc --write"


def _code(name: object) -> str:
    return f"`{name}`"


def conditions() -> str:
    """The paper's conditions (:data:`chunkstudy.design.CONDITIONS`), in its order: their Table 4 texts, routing and
    what each is built to be compared with."""
    out = ["| condition | boundaries | prefix at embedding time | retrieval | built to be compared with |",
           "|---|---|---|---|---|"]
    for c in design.CONDITIONS:
        routing = "flat" if c.routing == "flat" else f"{c.routing} (top `retrieve.route_sections` sections)"
        matched = f"{c.matched_to}: {c.matched}" if c.matched_to else c.matched
        out.append(f"| {c.name} | {_cell(c.boundaries_text)} | {_cell(c.prefix_text)} | {routing} | "
                   f"{_cell(matched)} |")
    return "\n".join(out)


def prefix_kinds() -> str:
    """The prefix kinds (:data:`chunkstudy.design.PREFIX_KINDS`): what each puts before a chunk's content, what it
    reads, the 04 tables it writes (its side table, then those derived from it, and whether 04's summary.json
    summarises it) and whether it is a control."""
    out = ["| prefix kind | what it puts before the chunk | reads | tables (04) | control |", "|---|---|---|---|---|"]
    for k in design.PREFIX_KINDS.values():
        reads = [r for r, on in (("the heading path, cut to a depth", k.heading_path),
                                 ("02's situating contexts", k.contexts)) if on]
        tables = [f"{_code(k.side_table)} (side table)"] if k.side_table else []
        tables += [f"{_code(t)} (from it)" for t in k.derived_tables]
        tables += ["its summary in `summary.json`"] if k.summary else []
        out.append(f"| `{k.name}` | {_cell(k.text)} | {'; '.join(reads) or 'nothing'} | {', '.join(tables)} | "
                   f"{'yes' if k.control else ''} |")
    return "\n".join(out)


def contrasts() -> str:
    """The pre-registered contrasts (:data:`chunkstudy.design.CONTRASTS`): each one subtraction and its question,
    with what each side is built as."""
    out = ["| contrast | question | A | B |", "|---|---|---|---|"]
    for c in design.CONTRASTS:
        a, b = design.condition(c.a), design.condition(c.b)
        out.append(f"| {c.name} = {c.a} − {c.b} | {_cell(c.question)} | {a.name}: {_cell(a.matched)} | "
                   f"{b.name}: {_cell(b.matched)} |")
    return "\n".join(out)


def metrics() -> str:
    """The metric families (:data:`chunkstudy.design.METRICS`), in table order: the canonical name, the ``metrics``
    parameter that completes it and what it is (:attr:`chunkstudy.design.Metric.rank_cut`, ``k_axis``,
    ``saturates``), the names its default gives, the role and the definition."""
    section = config.SCHEMA["metrics"]
    out = ["| metric | parameter | names by default | role | definition |", "|---|---|---|---|---|"]
    for m in design.METRICS:
        defaults = {m.parameter: section[m.parameter].default} if m.parameter else {}
        kinds = [what for what, on in (("rank cut-off, at most `retrieve.k`", m.rank_cut),
                                       ("the k axis varies it", m.k_axis),
                                       ("1 when the list holds every chunk (the report warns)", m.saturates)) if on]
        param = (_code('metrics.' + m.parameter) + "".join(f"; {k}" for k in kinds)) if m.parameter else ""
        out.append(f"| `{m.template}` | {param} | "
                   f"{', '.join(m.names(defaults))} | {m.role} | {_cell(m.definition)} |")
    return "\n".join(out)


def _summary(module: object) -> str:
    """The first paragraph of a module's docstring, as one Markdown line (a leading ``corpus.kind: x``: goes, the
    table's first column says it)."""
    first = (inspect.getdoc(module) or "").split("\n\n")[0]
    return _cell(re.sub(r"^``corpus\.kind: [\w-]+``: ", "", first))


def corpus_kinds() -> str:
    """The corpus kinds (``corpus.kind``; the loaders of :data:`chunkstudy.corpus.build.LOADERS`, in kind order):
    the module that declares each, what it reads (:attr:`~chunkstudy.corpus.loader.CorpusLoader.doc`), the
    ``corpus`` keys that are its own (``parameters``) and where its questions come from."""
    out = ["| `corpus.kind` | module | what it reads | its own `corpus` keys | its questions |", "|---|---|---|---|---|"]
    for kind, loader in build.LOADERS.items():
        keys = ", ".join(_code(k) for k in loader.parameters)
        questions = loader.questions or "none: its queries are written (`queries.source: generated`)"
        out.append(f"| `{kind}` | `{build.MODULES[kind]}` | {_cell(loader.doc)} | {keys} | {_cell(questions)} |")
    return "\n".join(out)


def folder_kinds() -> str:
    """The folder kinds (the loaders that are :class:`chunkstudy.corpus.folder.FolderLoader`, in kind order): the
    files each reads, what its module is (the first paragraph of its docstring) and the markup its parser drops and
    counts, in the funnel's order."""
    out = ["| `corpus.kind` | files | what it is | dropped (counted in the 01 funnel and `stats.json`) |",
           "|---|---|---|---|"]
    for kind, loader in build.LOADERS.items():
        if isinstance(loader, FolderLoader):
            files = ", ".join(f"`*{e}`" for e in loader.extensions)
            module = sys.modules[build.MODULES[kind]]
            out.append(f"| `{kind}` | {files} | {_summary(module)} | {_cell(', '.join(loader.dropped) or 'nothing')} |")
    return "\n".join(out)


def recipe() -> str:
    """Anthropic's recipe as the study runs it (:data:`chunkstudy.design.RECIPE`), in step order: each step's
    condition, retrieval mode (with ``embed.strong`` where the mode reads vectors), reranking, what it is, and the
    failure reduction the paper cites for it (:mod:`chunkstudy.paper`, ``study.anthropic``)."""
    out = ["| step | condition | retrieval | reranker | what | the paper cites |", "|---|---|---|---|---|---|"]
    for s in design.RECIPE:
        mode = design.RETRIEVAL_MODES[s.mode]
        retrieval = _code(mode.name) + (" with `embed.strong`" if mode.per_embedder else "")
        reranker = "each of `retrieve.rerankers`" if s.reranked else "none"
        cited = f"{paper.value('study', 'anthropic', s.anthropic) * 100:g} %" if s.anthropic else ""
        out.append(f"| {s.name} | {s.condition} | {retrieval} | {reranker} | {_cell(s.label)} | {cited} |")
    return "\n".join(out)


def data_contracts() -> str:
    """The data contracts (:data:`chunkstudy.stages.DATA_CONTRACTS`), in run order: each table's writer, the columns
    (and kinds) every table of that name holds at least (:attr:`chunkstudy.stages.Table.contract`, what
    :func:`chunkstudy.stages.check` demands) and its description. The other columns a writer declares are left to
    ``stages.py``: they may come and go without breaking a reader."""
    out = ["| table | written by | columns it holds at least | what it is |", "|---|---|---|---|"]
    for name in stages.DATA_CONTRACTS:
        t = stages.table(name)
        columns = ", ".join(f"`{c}` {t.columns[c]}" for c in t.contract)
        out.append(f"| `{name}` | {stages.writer(name)} | {columns} | {_cell(t.doc)} |")
    return "\n".join(out)


#: Each block's name -> the declaration it is generated from and the function that renders it.
BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "conditions": ("lib/chunkstudy/design.py", conditions),
    "prefix kinds": ("lib/chunkstudy/prefix/", prefix_kinds),
    "contrasts": ("lib/chunkstudy/design.py", contrasts),
    "metrics": ("lib/chunkstudy/design_metrics.py", metrics),
    "corpus kinds": ("lib/chunkstudy/corpus/", corpus_kinds),
    "folder kinds": ("lib/chunkstudy/corpus/", folder_kinds),
    "recipe": ("lib/chunkstudy/design.py", recipe),
    "data contracts": ("lib/chunkstudy/stages.py", data_contracts),
}

#: Each page (relative to the project root) -> the blocks it holds, in the page's order.
PAGES: dict[str, tuple[str, ...]] = {
    "README.md": ("contrasts",),
    "docs/design.md": ("conditions", "prefix kinds", "contrasts", "data contracts", "metrics"),
    "docs/corpus.md": ("corpus kinds", "folder kinds"),
    "docs/beyond.md": ("recipe",),
}


def begin(name: str) -> str:
    """The line that opens block ``name``."""
    return f"<!-- The {name} table: generated from {BLOCKS[name][0]} by `{COMMAND}`; do not edit by hand. -->"


def end(name: str) -> str:
    """The line that closes block ``name``."""
    return f"<!-- End of the generated {name} table. -->"


def blocks_in(text: str) -> list[str]:
    """The names of the blocks ``text`` opens, in its order (an unknown name is returned as written)."""
    return re.findall(r"^<!-- The (.+?) table: generated from \S+ by `" + re.escape(COMMAND) + "`", text, re.M)


def rewrite(text: str, where: str, names: tuple[str, ...]) -> str:
    """``text`` (a page's content) with the lines between each of ``names``' markers replaced by the block's
    rendering; ValueError naming ``where`` when a marker is missing or repeated, or the page opens a block it is
    not declared to hold."""
    found = blocks_in(text)
    if found != list(names):
        raise ValueError(f"{where}: opens the generated blocks {found}, expected {list(names)} (designdoc.PAGES)")
    for name in names:
        text = replace_block(text, begin(name), end(name), BLOCKS[name][1](), where)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.designdoc", description=__doc__.split("\n")[0])
    ap.add_argument("block", nargs="?", choices=list(BLOCKS), help="print this block")
    ap.add_argument("--write", action="store_true", help="rewrite every block of every page instead of printing")
    add_root(ap)
    args = ap.parse_args(argv)
    if not args.write:
        for name in [args.block] if args.block else list(BLOCKS):
            sys.stdout.write(BLOCKS[name][1]() + "\n\n")
        return 0
    for page, names in PAGES.items():
        path = page_path(page, args.root)
        write_page(path, rewrite(path.read_text(encoding="utf-8"), page, names))
        print(f"designdoc: rewrote {', '.join(names)} in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
