"""The pipeline table of ``docs/running.md``, generated from the stage graph (:data:`chunkstudy.stages.STAGES`).

One row per stage, in run order: the parameters it reads (the sections or single keys of its declaration), what it
reads (per artifact, grouped by the stage that writes it, with the parameters that switch a read off and the reads
it does without; the files outside the data store it reads: source files, code of the user's, the earlier
manifests, the replication partner's run, the other models it loads), the model servers its calls may go to, the
sections whose models it runs on a device, and what it writes (tables;
``.json`` facts; ``name/`` vector folders; output folders outside its data folder). The table sits in
:data:`PAGE` between :data:`BEGIN` and :data:`END` and is never edited by hand: ``tests/test_docs.py`` fails when
it differs from :func:`table`, naming the command that rewrites it (as for ``docs/parameters.md``,
:mod:`chunkstudy.paramdoc`)::

    .venv/bin/python -m chunkstudy.stagedoc --write        # rewrites the table in docs/running.md
    .venv/bin/python -m chunkstudy.stagedoc                # prints it

It also holds what the three docs generators (this one, :mod:`chunkstudy.paramdoc`, :mod:`chunkstudy.designdoc`)
do alike: a generated block replaced between its markers (:func:`replace_block`), the ``--root`` option naming the
project whose pages ``--write`` rewrites (:func:`add_root`, :func:`page_path`) and the atomic write
(:func:`write_page`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import artifacts, config, stages

#: The page that holds the table, relative to the project root.
PAGE = "docs/running.md"
#: The command that regenerates the table in :data:`PAGE` (what the staleness test prints).
COMMAND = ".venv/bin/python -m chunkstudy.stagedoc --write"
BEGIN = f"<!-- The pipeline table: generated from lib/chunkstudy/stages.py by `{COMMAND}`; do not edit by hand. -->"
END = "<!-- End of the generated pipeline table. -->"


def _code(name: str) -> str:
    return f"`{name}`"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _artifact(a: stages.Artifact) -> str:
    """How the table names an artifact: a table by its name, a JSON file with ``.json``, a vector folder with
    ``/``."""
    if isinstance(a, stages.Json):
        return f"{a.name}.json"
    if isinstance(a, stages.Vectors):
        return f"{a.name}/"
    return a.name


def _read(r: stages.Read) -> str:
    out = _artifact(stages.artifact(r.name))
    if r.when is not None:
        out += f" (not when {r.unless})" if r.unless else " (under some parameters)"
    if r.optional:
        out += " (optional)"
    return out


def _reads(s: stages.Stage) -> str:
    by_writer: dict[str, list[str]] = {}
    for r in s.reads:
        by_writer.setdefault(stages.writer(r.name), []).append(_read(r))
    parts = [f"{w[:2]}: {', '.join(by_writer[w])}" for w in stages.STAGE_NAMES if w in by_writer]
    if s.source_files is not None:
        parts.insert(0, f"source files ({s.source_files.doc})" if s.source_files.doc else "source files")
    if s.user_code is not None:
        parts.append(f"your code: {s.user_code.doc or s.user_code.field} ({_code(s.user_code.param)})")
    parts += [f"the model {_code(k)} names" for k in s.models]
    if s.manifests:
        parts.append("the manifests of every earlier stage")
    parts += [f"the replication partner's {_artifact(stages.artifact(r.name))}" + (f" ({r.doc})" if r.doc else "")
              for r in s.partner]
    return "; ".join(parts) or "nothing of the store"


def _params(s: stages.Stage) -> str:
    if stages.ALL_PARAMS in s.params:
        return "every section"
    return ", ".join(_code(p) for p in s.params)


def _writes(s: stages.Stage) -> str:
    parts = [", ".join(_artifact(a) for a in s.writes)] if s.writes else []
    parts += [f"`{f.root}/<corpus>/`" + (f" ({f.doc})" if f.doc else "") for f in s.folders]
    return "; ".join(parts)


def table() -> str:
    """The pipeline table as Markdown (the lines between :data:`BEGIN` and :data:`END`), with a note on reading it."""
    out = ["| stage | parameters it reads | what it reads (by writing stage) | model servers | devices | writes "
           "(under `data/<corpus>/<stage>/`) |", "|---|---|---|---|---|---|"]
    for s in stages.STAGES:
        out.append(f"| `{s.name}` | {_cell(_params(s))} | {_cell(_reads(s))} | {_cell(', '.join(s.services))} | "
                   f"{_cell(', '.join(s.devices))} | {_cell(_writes(s))} |")
    out += ["", "A read marked *not when ...* is off under those parameters (it is then no input of the stage's "
            "key); an *optional* one the stage does without, saying what it leaves out; *the model a key names*: "
            "one more model the stage loads in process. *model servers*: the roles whose `serve: auto` server the "
            "runner starts for the stage ([servers.md](servers.md)). *devices*: the sections whose models the stage "
            "runs on the device their parameters name; when one asks for CUDA, the runner checks for a device "
            "before the first selected stage starts. The models of a selected stage's servers, devices and keys "
            "are those the runner finds in the local model cache before 01."]
    return "\n".join(out)


def replace_block(text: str, begin: str, end: str, body: str, where: str) -> str:
    """``text`` with the lines between its marker lines ``begin`` and ``end`` replaced by ``body`` (a blank line on
    each side); ValueError naming ``where`` when a marker is missing or repeated. Every generated block of the docs
    is kept this way (this table, and :mod:`chunkstudy.designdoc`'s)."""
    for marker in (begin, end):
        if text.count(marker) != 1:
            raise ValueError(f"{where}: needs the marker line {marker!r} once (found {text.count(marker)})")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n\n{body}\n\n{end}{tail}"


def rewrite(text: str, where: str = PAGE) -> str:
    """``text`` (the content of :data:`PAGE`) with the lines between its :data:`BEGIN` and :data:`END` markers
    replaced by :func:`table`; ValueError naming ``where`` when a marker is missing."""
    return replace_block(text, BEGIN, END, table(), where)


def add_root(ap: argparse.ArgumentParser) -> None:
    """The ``--root`` option every docs generator takes (stagedoc, paramdoc, designdoc): the project whose pages
    ``--write`` rewrites, e.g. a clone."""
    ap.add_argument("--root", type=Path, default=None,
                    help="the project whose pages --write rewrites, a relative PATH under it (default: the nearest "
                         "folder above the working directory holding pyproject.toml)")


def page_path(page: str | Path, root: Path | None) -> Path:
    """``page`` (absolute, or relative to the project root ``root``, default the project above the working
    directory)."""
    path = Path(page)
    return path if path.is_absolute() else (root.resolve() if root is not None else config.find_root(Path.cwd())) / path


def write_page(path: Path, text: str) -> None:
    """Write a generated page atomically: a killed write leaves the page as it was."""
    with artifacts.atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.stagedoc", description=__doc__.split("\n")[0])
    ap.add_argument("--write", nargs="?", const=PAGE, metavar="PATH",
                    help=f"rewrite the table in the page (default: {PAGE}, relative to the project root) instead of "
                         "printing it")
    add_root(ap)
    args = ap.parse_args(argv)
    if args.write is None:
        sys.stdout.write(table() + "\n")
        return 0
    path = page_path(args.write, args.root)
    write_page(path, rewrite(path.read_text(encoding="utf-8"), str(path)))
    print(f"stagedoc: rewrote the pipeline table in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
