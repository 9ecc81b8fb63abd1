"""The documentation stays true to the repository (docs/testing.md, "What the suite holds").

* ``docs/parameters.md`` is what :func:`chunkstudy.paramdoc.markdown` generates from ``lib/chunkstudy/params.py``,
  and the pipeline table of ``docs/running.md`` what :func:`chunkstudy.stagedoc.table` generates from the stage graph.
* Every relative link of README.md and docs/ points at a file that exists, and every ``#anchor`` at a heading of
  its page, under the anchor rule of a forge (GitHub) and of mkdocs alike.
* Every repository path the docs name (``lib/chunkstudy/stages.py``, ``params/demo.yaml``) exists, and every
  ``chunkstudy.<module>[.<name>]`` they name imports and has that name.
* Every ``docs/<page>.md`` (and the ``"Section"`` quoted after it) that the code cites exists.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path

import pytest

from chunkstudy import design, designdoc, paramdoc, stagedoc, stages
from chunkstudy.paramspec import Spec

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: The folders whose files the docs may name as repository paths (what a clone holds).
TRACKED = ("lib/", "notebooks/", "params/", "tests/", "scripts/", "bench/", "constraints/", "docs/", "examples/",
           "data/demo_raw/", "data/markdown_example_raw/", ".ci/")
#: Where code may cite a docs page.
CODE = ("lib", "notebooks", "tests", "scripts", "bench", "params", "examples", ".ci")
README_MAX_LINES = 250
#: Files the docs tell a user to create (``cp params/markdown_example.yaml params/mydocs.yaml``): examples, not
#: files of the repository.
USER_FILES = {"params/mydocs.yaml", "params/my_variant.yaml",
              # docs/extending.md's new corpus kind and its test (tests/test_extending.py)
              "lib/chunkstudy/corpus/plaintext.py", "tests/test_corpus_plaintext.py",
              # docs/extending.md's new verdict and its test (tests/test_verdicts.py)
              "lib/chunkstudy/stats/verdict/sign.py", "tests/test_sign.py",
              # docs/extending.md's new metric's test (tests/test_extending.py)
              "tests/test_metric_precision.py",
              # docs/extending.md's new prefix kind and its test (tests/test_prefix_kinds.py)
              "lib/chunkstudy/prefix/context_path.py", "tests/test_prefix_context_path.py"}


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


# ------------------------------------------------------------------------------------------------ Markdown parsing

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\S\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and code spans (where links are links)."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def _heading_text(raw: str) -> str:
    """A heading's visible text: links become their text, code spans their content, emphasis goes."""
    raw = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    raw = re.sub(r"`([^`]*)`", r"\1", raw)
    return re.sub(r"(\*\*|__|\*|_)(\S.*?\S|\S)\1", r"\2", raw)


def github_slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, ``-``, ``_`` and spaces
    stay), each space a hyphen."""
    return "".join(c for c in title.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def mkdocs_slug(title: str) -> str:
    """Python-Markdown's default ``toc`` slug (what mkdocs gives a heading)."""
    value = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


@cache
def headings(path: Path) -> dict[str, str]:
    """``{anchor: heading text}`` of a page, GitHub's numbering of repeated anchors included."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for m in _HEADING.finditer(text):
        title = _heading_text(m.group(2))
        slug = github_slug(title)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out[slug if n == 0 else f"{slug}-{n}"] = title
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every link and image of a page, outside code."""
    prose = _prose(path.read_text(encoding="utf-8"))
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(prose)]


# ------------------------------------------------------------------------------------------------------- the tests

def test_parameter_reference_is_generated_from_the_declaration():
    page = ROOT / paramdoc.PAGE
    assert page.is_file(), f"{paramdoc.PAGE} is missing: write it with `{paramdoc.COMMAND}`"
    if page.read_text(encoding="utf-8") != paramdoc.markdown():
        pytest.fail(f"{paramdoc.PAGE} is stale (lib/chunkstudy/params.py, the stage graph or the rules changed): "
                    f"regenerate it with `{paramdoc.COMMAND}` and commit it")


def test_parameter_reference_lists_every_declared_key():
    """The generator is complete: every key of the schema has its row, nested groups included."""
    from chunkstudy import config

    text = paramdoc.markdown()

    def walk(spec: dict, dotted: str) -> None:
        for key, p in spec.items():
            full = f"{dotted}.{key}" if dotted else key
            if isinstance(p, Spec):
                section = full.rsplit(".", 1)[0].replace("*", "KEY")
                block = text.split(f"# {section}\n", 1)[1].split("\n#", 1)[0]
                assert f"| `{key}` |" in block, f"{full} has no row in the reference"
            elif set(p) == {"*"}:
                walk(p["*"], f"{full}.*")
            else:
                walk(p, full)

    walk(config.SCHEMA, "")
    assert "| `retrieve.k` |" not in text and "| `k` | int | `50` | in `[1, inf)` |" in text


def test_every_declared_key_says_what_it_decides():
    """Every key's declaration carries its "what it decides" line (``param(default, doc)``), so no row of the
    reference leaves that column empty; a new key without one fails here, naming it."""
    from chunkstudy import config

    def undocumented(spec: dict, dotted: str) -> list[str]:
        out = []
        for key, p in spec.items():
            full = f"{dotted}.{key}" if dotted else key
            if isinstance(p, Spec):
                out += [] if p.doc.strip() else [full]
            else:
                out += undocumented(p, full)
        return out

    missing = undocumented(config.SCHEMA, "")
    assert not missing, (f"{len(missing)} key(s) declared without a 'what it decides' line in "
                         f"lib/chunkstudy/params.py (param(default, doc)): {', '.join(missing)}")


def test_pipeline_table_is_generated_from_the_stage_graph():
    page = ROOT / stagedoc.PAGE
    text = page.read_text(encoding="utf-8")
    if text != stagedoc.rewrite(text, stagedoc.PAGE):
        pytest.fail(f"the pipeline table of {stagedoc.PAGE} is stale (lib/chunkstudy/stages.py changed): regenerate "
                    f"it with `{stagedoc.COMMAND}` and commit it")


def test_pipeline_table_shows_every_declared_edge():
    """The generator is complete: each stage's row names every stage it reads (the hand copy said 07 "reads 03,
    06"), every artifact it reads and writes, and its servers and devices; a page without its markers is refused."""
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2:-1] for line in stagedoc.table().splitlines()
            if line.startswith("| `")}
    assert list(rows) == list(stages.STAGE_NAMES)
    for s in stages.STAGES:
        params, reads, servers, devices, writes = (c.strip() for c in rows[s.name])
        writers = {stages.writer(n) for n in stages.reads(s.name)}
        assert [w[:2] for w in stages.STAGE_NAMES if w in writers] == \
            [part.split(":")[0] for part in reads.split("; ") if part[:2].isdigit()], s.name
        assert ("the manifests of every earlier stage" in reads) == s.manifests, s.name
        named = {n.split(" (")[0].removesuffix(".json").removesuffix("/") for part in reads.split("; ")
                 for n in part.partition(": ")[2].split(", ")}
        assert set(stages.reads(s.name)) <= named, s.name
        assert [n.removesuffix(".json").removesuffix("/") for n in writes.split("; ")[0].split(", ") if s.writes] == \
            [a.name for a in s.writes], s.name
        assert (servers.split(", ") if servers else []) == list(s.services), s.name
        assert (devices.split(", ") if devices else []) == list(s.devices), s.name
    assert "04: chunks, embedding_report.json, late_report; 05: retrieval_timing.json" in rows["07_stats"][1]
    assert "cost" in rows["07_stats"][4].split(", ")
    with pytest.raises(ValueError, match="docs/x.md: needs the marker line"):
        stagedoc.rewrite("# no markers\n", "docs/x.md")


def test_declared_tables_are_generated_from_the_registries():
    """The conditions, prefix kinds, contrasts, metrics, recipe steps, data contracts and corpus kinds are shown only
    as generated blocks, and each block equals what its registry renders (a hand copy drifted: C1's question had three
    wordings)."""
    stale = []
    for page, names in designdoc.PAGES.items():
        text = (ROOT / page).read_text(encoding="utf-8")
        if text != designdoc.rewrite(text, page, names):
            stale.append(page)
    if stale:
        pytest.fail(f"the generated tables of {', '.join(stale)} are stale (lib/chunkstudy/design.py, the corpus kinds "
                    f"or lib/chunkstudy/stages.py changed): regenerate them with `{designdoc.COMMAND}` and commit them")
    held = [n for names in designdoc.PAGES.values() for n in names]
    assert sorted(set(held)) == sorted(designdoc.BLOCKS), "a declared table that no page shows"
    for page in PAGES:  # a block opened in a page PAGES does not name would never be rewritten
        if _rel(page) not in designdoc.PAGES:
            assert not designdoc.blocks_in(page.read_text(encoding="utf-8")), _rel(page)


def test_the_generators_rewrite_the_pages_of_the_project_they_are_given(tmp_path, capsys):
    """``--root`` points designdoc and paramdoc at another copy of the project (a clone; the walk-throughs' copy in
    tests/test_extending.py): its stale pages are rewritten to what this checkout's pages hold, whatever the working
    directory, and this checkout's pages are left as they are."""
    pages = [paramdoc.PAGE, *designdoc.PAGES]
    before = {page: (ROOT / page).read_bytes() for page in pages}
    for page in pages:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / page).read_text(encoding="utf-8")
        stale = text.replace(text.split("\n")[-2], "a stale line") if page == paramdoc.PAGE else re.sub(
            r"(-->\n\n\|.*\|\n\|[-|]+\|\n)\|.*\|\n", r"\1| a stale row |\n", text)
        assert stale != text
        (tmp_path / page).write_text(stale, encoding="utf-8")
    assert designdoc.main(["--write", "--root", str(tmp_path)]) == 0
    assert paramdoc.main(["--write", "--root", str(tmp_path)]) == 0
    assert {page: (tmp_path / page).read_bytes() for page in pages} == before
    assert {page: (ROOT / page).read_bytes() for page in pages} == before
    assert str(tmp_path / "docs" / "corpus.md") in capsys.readouterr().out


def test_declared_tables_show_every_declaration():
    """The generators are complete: a row per condition, prefix kind, contrast (with design.py's one wording of its
    question), metric family, corpus kind and recipe step; a page whose markers are missing or unknown is refused."""
    from chunkstudy.corpus import build
    from chunkstudy.corpus.folder import FolderLoader

    def first_cells(block: str) -> list[str]:
        return [line.split("|")[1].strip() for line in block.splitlines()[2:] if line.startswith("|")]

    assert first_cells(designdoc.conditions()) == list(design.CONDITION_NAMES)
    assert first_cells(designdoc.prefix_kinds()) == [f"`{k}`" for k in design.PREFIX_KINDS]
    rows = [line.split(" | ") for line in designdoc.contrasts().splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(f"| {c.name} = {c.a} − {c.b}", c.question) for c in design.CONTRASTS]
    assert first_cells(designdoc.metrics()) == [f"`{m.template}`" for m in design.METRICS]
    assert "cov-nDCG@10" in designdoc.metrics() and "budget-cov@512, budget-cov@1024" in designdoc.metrics()
    assert first_cells(designdoc.corpus_kinds()) == [f"`{k}`" for k in build.LOADERS]
    folder_kinds = [k for k, loader in build.LOADERS.items() if isinstance(loader, FolderLoader)]
    assert {"markdown", "html"} <= set(folder_kinds)
    assert first_cells(designdoc.folder_kinds()) == [f"`{k}`" for k in folder_kinds]
    wikipedia = next(r for r in designdoc.corpus_kinds().splitlines() if r.startswith("| `wikipedia`"))
    assert "`min_words`" in wikipedia and "`drop_numeric_only`" not in wikipedia and "queries.source" in wikipedia
    assert first_cells(designdoc.recipe()) == [s.name for s in design.RECIPE]
    assert "35 %" in designdoc.recipe() and "49 %" in designdoc.recipe()  # the paper's citations, from paper.py
    with pytest.raises(ValueError, match="docs/x.md: opens the generated blocks"):
        designdoc.rewrite("# no markers\n", "docs/x.md", ("contrasts",))
    with pytest.raises(ValueError, match="needs the marker line"):
        designdoc.rewrite(designdoc.begin("contrasts") + "\n", "docs/x.md", ("contrasts",))


def test_data_contracts_are_the_stage_graphs_contracts():
    """docs/design.md's "Data contracts" shows, for each table of ``stages.DATA_CONTRACTS`` in run order, its writer
    and exactly the columns ``stages.check`` demands with their kinds (the hand copy listed ``provenance`` for
    ``queries``, a column no reader may rely on)."""
    rows = [line.split(" | ") for line in designdoc.data_contracts().splitlines()[2:]]
    assert [r[0].removeprefix("| ") for r in rows] == [f"`{n}`" for n in stages.DATA_CONTRACTS]
    in_run_order = sorted(stages.DATA_CONTRACTS, key=lambda n: stages.STAGE_NAMES.index(stages.writer(n)))
    assert list(stages.DATA_CONTRACTS) == in_run_order
    for (name, writer, columns, _), table in zip(rows, map(stages.table, stages.DATA_CONTRACTS)):
        assert writer == stages.writer(table.name)
        assert columns == ", ".join(f"`{c}` {table.columns[c]}" for c in table.contract), name
    assert "`provenance`" not in rows[stages.DATA_CONTRACTS.index("queries")][2]


def test_notebooks_point_to_the_generated_tables_instead_of_listing_them():
    """No notebook's prose lists the metrics or the corpus kinds (two or more of their names in one markdown cell):
    a notebook names the generated table in docs/design.md or docs/corpus.md instead, so that a metric or a kind
    added to its registry leaves no notebook behind (06 listed five metrics, 01 five corpus kinds)."""
    from chunkstudy import config
    from chunkstudy.corpus import build

    section = config.SCHEMA["metrics"]
    metric_names = {n for m in design.METRICS
                    for n in m.names({m.parameter: section[m.parameter].default} if m.parameter else {})}
    lists = []
    for stage in stages.STAGES:
        text = (ROOT / stage.notebook).read_text(encoding="utf-8")
        for cell in re.findall(r"^# %% \[markdown\]\n((?:#.*\n)*)", text, re.M):
            metrics = sorted(n for n in metric_names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w@])", cell))
            kinds = sorted(k for k in build.LOADERS if f"`{k}`" in cell)
            lists += [f"{stage.notebook}: {found}" for found in (metrics, kinds) if len(found) > 1]
    assert not lists, f"notebook prose lists declared names; point to the generated table instead: {lists}"


def test_run_all_usage_lists_every_parameter_file():
    """./run_all.sh's usage names the corpora a user can run: exactly the parameter files of params/ (a hand-kept
    list named 7 of 20)."""
    done = subprocess.run(["bash", str(ROOT / "run_all.sh"), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    listed = done.stdout.split("params/CORPUS.yaml:", 1)[1].split(")")[0].split()
    assert listed == sorted(p.stem for p in (ROOT / "params").glob("*.yaml"))


def _writes_part(stage: str) -> str:
    """The "**Writes** ..." paragraph of a stage's notebook header (its first markdown cell), as Markdown."""
    text = (ROOT / "notebooks" / f"{stage}.py").read_text(encoding="utf-8")
    cell = text.split("# %% [markdown]\n", 1)[1].split("\n# %%", 1)[0]
    md = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in cell.splitlines())
    assert md.count("**Writes**") == 1, f"notebooks/{stage}.py: its header has no single **Writes** part"
    return md.split("**Writes**", 1)[1].split("\n\n", 1)[0]


def _written_names(stage: stages.Stage, part: str) -> set[str]:
    """The artifact names a Writes part names in code spans: ``05_retrieve/runs``, ``runs``, ``stats.json``,
    ``embeddings/<embedder>.npy``; a parameter or a column (``retrieve.k``, ``chunks.text_row``, ``doc_id``) and
    what a stage's folder holds (``figures/<corpus>/``, ``tables/*.md``) are not names of artifacts
    (:func:`_not_artifacts`)."""
    out = set()
    for span in re.findall(r"`([^`]+)`", part):
        parts = span.split("/")
        if parts[0] in stages.STAGE_NAMES:
            parts = parts[1:]
        name = parts[0].removesuffix(".json")
        if re.fullmatch(r"[a-z][a-z0-9_]*", name):
            out.add(name)
    return out - _not_artifacts(stage)


def _not_artifacts(stage: stages.Stage) -> set[str]:
    """Names a Writes part may hold that are no artifact: the columns of the stage's tables (``doc_id``) and what
    its folders hold (``figures``, ``tables``)."""
    declared = {a.name for a in stage.writes}
    columns = {c for a in stage.writes if isinstance(a, stages.Table) for c in a.columns}
    held = {f.root for f in stage.folders} | {w.strip(" /") for f in stage.folders for w in f.doc.split(",")}
    return (columns | held) - declared


@pytest.mark.parametrize("stage", stages.STAGES, ids=lambda s: s.name)
def test_notebook_header_names_what_the_stage_writes(stage: stages.Stage):
    """Each notebook's "**Writes**" header names every artifact its stage declares (``stages.py``) and no other (05
    left out lexical_report.json, 07 the user's contrasts and power tables); 04 names the prefix kinds' tables by
    their registry, ``design.prefix_tables()``."""
    part = _writes_part(stage.name)
    named = _written_names(stage, part)
    declared = {a.name for a in stage.writes}
    # the prefix kinds' tables are named by their registry, which a new kind's table joins with no edit here
    by_registry = {t.name for t in design.prefix_tables()} if "`design.prefix_tables()`" in part else set()
    assert not declared - named - by_registry, \
        f"notebooks/{stage.name}.py: its Writes header leaves out {sorted(declared - named - by_registry)}"
    assert not named - declared, (f"notebooks/{stage.name}.py: its Writes header names {sorted(named - declared)}, "
                                  "which the stage does not declare it writes")


def test_slugs_follow_both_rules():
    assert github_slug("Policy: seeds and ties") == mkdocs_slug("Policy: seeds and ties") == "policy-seeds-and-ties"
    assert github_slug("conditions.extra.KEY") == "conditionsextrakey"
    assert github_slug("A — B") == "a--b" and mkdocs_slug("A — B") == "a-b"  # why linked anchors are checked twice


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page: Path):
    broken = []
    for line, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        where = f"{_rel(page)}:{line}: ({target})"
        if not dest.exists():
            broken.append(f"{where} points at {file}, which does not exist")
            continue
        if anchor:
            if dest.suffix != ".md":
                broken.append(f"{where}: an anchor into a file that is not Markdown")
                continue
            titles = headings(dest)
            if anchor not in titles:
                broken.append(f"{where}: no heading of {_rel(dest)} has the anchor #{anchor}; "
                              f"its anchors: {sorted(titles)}")
            elif mkdocs_slug(titles[anchor]) != anchor:
                broken.append(f"{where}: mkdocs gives the heading '{titles[anchor]}' the anchor "
                              f"#{mkdocs_slug(titles[anchor])}; reword the heading so both rules agree")
    assert not broken, "\n".join(broken)


_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TRACKED) + r")[\w./-]*)")


def _named_paths(text: str) -> set[str]:
    """Repository paths a page names inside code (spans and blocks): placeholders (``<corpus>``, ``NN``, ``*``)
    and paths a run writes are not names of files."""
    code = " ".join([*(m.group(0) for m in _FENCE.finditer(text)), *(m.group(2) for m in _CODE_SPAN.finditer(
        _FENCE.sub("", text)))])
    out = set()
    for m in _PATH.finditer(code):
        path = m.group(1).rstrip(".,:;")
        end = m.end(1)
        if end < len(code) and code[end] in "<{*[":  # a placeholder follows: docs/<page>.md, bench/<name>.py
            continue
        if re.search(r"(^|/)NN|\.\.\.|…|(^|/)[A-Z]{2,}(\.|/|$)", path) or path in USER_FILES:
            continue  # a placeholder (NN_stage, CORPUS, ...) or a file the reader makes
        out.add(path)
    return out


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_named_paths_exist(page: Path):
    missing = sorted(p for p in _named_paths(page.read_text(encoding="utf-8")) if not (ROOT / p).exists())
    assert not missing, f"{_rel(page)} names files that are not in the repository: {missing}"


_MODULE = re.compile(r"\bchunkstudy((?:\.[A-Za-z_]\w*)+)")


def _resolves(dotted: str) -> str | None:
    """None when ``chunkstudy.<dotted>`` is a module, or a module's (nested) attribute; else what is wrong."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = "chunkstudy." + ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and not name.startswith(e.name) and e.name != name:
                return f"importing {name} failed: {e}"
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return f"{name} has no {'.'.join(parts[i:])}"
            obj = getattr(obj, attr)
        return None
    return "no such module"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_named_modules_import(page: Path):
    text = page.read_text(encoding="utf-8")
    names = sorted({m.group(1)[1:].rstrip(".") for m in _MODULE.finditer(text)})
    problems = [f"chunkstudy.{n}: {why}" for n in names if (why := _resolves(n))]
    assert not problems, f"{_rel(page)} names what the package does not hold:\n" + "\n".join(problems)


#: ``docs/<page>.md`` and, when a comma and a quoted title follow it, the section (a title may wrap a line).
_CITATION = re.compile(r"(?<![\w./-])docs/([\w./-]*\w)"
                       r"(?:,\s*(?:\"([^\"]{1,80})\"|'([^']{1,80})'|“([^”]{1,80})”))?")
#: ``owner/repo docs/x.md``: another repository's page (a source named in a comment), not one of ours
_OTHER_REPO = re.compile(r"[\w-]+/[\w.-]+[\s\"']+$")


def _code_files() -> list[Path]:
    out = []
    for top in CODE:
        base = ROOT / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        out += [p for p in files if p.suffix in {".py", ".sh", ".yaml", ".yml", ".j2", ""} and
                "__pycache__" not in p.parts and p.name != "test_docs.py"]
    return out


def test_code_cites_pages_and_sections_that_exist():
    bad = []
    for f in _code_files():
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for m in _CITATION.finditer(text):
            if _OTHER_REPO.search(text[max(0, m.start() - 80):m.start()]):
                continue
            target, section = m.group(1), m.group(2) or m.group(3) or m.group(4)
            line = text.count("\n", 0, m.start()) + 1
            where = f"{_rel(f)}:{line}"
            page = ROOT / "docs" / target
            if not page.is_file():
                candidates = sorted((ROOT / "docs").glob(target + "*.md")) if not target.endswith(".md") else []
                if len(candidates) != 1:
                    bad.append(f"{where} cites docs/{target}, which does not exist")
                    continue
                page = candidates[0]
            if section and page.suffix == ".md":
                titles = {t.lower() for t in headings(page).values()}
                section = " ".join(section.split())
                if section.lower() not in titles:
                    bad.append(f"{where} cites section \"{section}\" of {_rel(page)}, which has no such heading")
    assert not bad, "\n".join(bad)


def test_readme_is_a_landing_page():
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (f"README.md has {n} lines, over {README_MAX_LINES}: move the detail into a page "
                                   "of docs/ and link it")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "./run_all.sh demo" in text and "./run_tests.sh" in text
