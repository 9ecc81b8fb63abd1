"""Bring your own corpus: a folder of documents (Markdown or HTML) plus an optional ``questions.jsonl``.

The two folder kinds (``corpus.kind: markdown`` in :mod:`chunkstudy.corpus.mdtext`, ``corpus.kind: html`` in
:mod:`chunkstudy.corpus.htmltext`) share everything here; they differ only in the parser that turns one file
into blocks.

**Files.** ``corpus.mirror`` is the folder. Documents are the files named by ``corpus.sources`` (paths relative to
the folder) or, when it is empty, every file under the folder (sub-folders included, hidden ones not) with the
kind's extensions, in sorted path order; ``corpus.max_docs`` keeps the first N or a seeded sample of N
(``corpus.max_docs_from``). A document's ``doc_id`` is its path relative to the folder without the extension
(``guide/install.md`` -> ``guide/install``); ``source`` is the path. A file with no prose left after parsing is
skipped with a warning. Every file is resolved, links included: one that points outside the folder
(``passwd.md -> /etc/passwd``) is never read, but skipped with a warning naming where it points and counted in the
funnel (named in ``corpus.sources``, it stops the build). Text files are read as UTF-8 with a leading byte-order
mark dropped. Wikipedia's quality filters (``min_words``, ...) do not apply: every file is a document.

**Blocks to a document.** A parser yields blocks in document order: ``("heading", level, text)`` for a heading of
the document's outline (Markdown ``#``..``######`` and setext, HTML ``h1``..``h6``) and ``("para", text)`` for a
paragraph (:func:`assemble`). The structural policy is the same for both kinds:

* **Title.** Front matter ``title:`` (Markdown) or ``<title>`` (HTML), else the first level-1 heading's text, else
  the file name. The *title heading*: when the first heading of the document is its only level-1 heading, it
  names the page (as a Wikipedia page title does) and is not a section; the headings under it start at level 1.
  Any other heading is a section.
* **Levels.** A heading is one level deeper than the nearest preceding heading with a smaller source level (1
  when there is none), capped at ``model.MAX_LEVEL`` (4): levels never jump (``##`` then ``####`` is 1, 2), the
  shallowest heading level in use becomes level 1, and a heading deeper than 4 becomes a level-4 section, a
  sibling of the level-4 section above it (the same normalisation as wikitext, :class:`model.DocumentBuilder`).
* A heading with no text is skipped; a heading followed directly by another owns an empty section.

**Questions** (``questions.jsonl`` in the folder; optional: without it, use ``queries.source: generated``). One
JSON object per line: ``question`` and ``doc`` (the document's path, with or without extension, or its doc_id)
and ``evidence`` (a list of verbatim quotes; like QASPER's, each is best a whole paragraph, or a whole list,
which is one paragraph), optionally ``id`` (default ``q<line number>``), ``qtype`` and ``answer``. Evidence is
matched by the QASPER matcher (exact -> fuzzy -> section; :class:`~chunkstudy.corpus.qasper.EvidenceMatcher`),
as the demo's questions are. A line that is not a JSON object of that shape, or repeats an id, is skipped with
a warning naming the line and counted in ``stats["skipped_records"]``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from ..config import Config
from .demo import harvest_questions
from .loader import CorpusLoader
from .model import MAX_LEVEL, SECTION_COLUMNS, DocumentBuilder, depth
from .qasper import harvest_funnel, harvest_stats
from .sources import CorpusInputError, kept_documents, mirror_file, mirror_root, read_text

QUESTIONS_FILE = "questions.jsonl"


@dataclass
class ParseReport:
    """What a parser did to one file: markup dropped (``dropped``: kind -> count), problems worth a warning
    (``problems``), where the title came from and whether a title heading was taken out of the outline."""

    dropped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    title_source: str = ""
    n_headings: int = 0
    title_heading: bool = False


def assemble(doc_id: str, blocks: Iterable[tuple], meta_title: str | None, fallback_title: str,
             report: ParseReport, max_level: int = MAX_LEVEL, **doc_fields) -> tuple[dict, pd.DataFrame,
                                                                                       pd.DataFrame]:
    """One document from parser blocks (module docstring: title, title heading, levels).

    ``blocks``: ``("heading", level, text)`` / ``("para", text)``; ``meta_title``: front matter ``title:`` or
    ``<title>`` (None when absent); ``fallback_title``: the file name's title.

    >>> r = ParseReport()
    >>> doc, paras, secs = assemble("d", [("heading", 1, "Guide"), ("para", "Intro."), ("heading", 2, "Use"),
    ...                                  ("heading", 4, "Deep"), ("para", "Body.")], None, "guide", r)
    >>> doc["title"], doc["text"], list(zip(secs["title"], secs["level"]))
    ('Guide', 'Intro.\\n\\nBody.', [('', 1), ('Use', 1), ('Deep', 2)])
    """
    blocks = [b for b in blocks if not (b[0] == "heading" and not b[2].strip())]
    heads = [b for b in blocks if b[0] == "heading"]
    h1 = [b for b in heads if b[1] == 1]
    title_heading = len(h1) == 1 and heads[0] is h1[0]
    if meta_title:
        title, report.title_source = meta_title, "metadata"
    elif h1:
        title, report.title_source = h1[0][2], "first level-1 heading"
    else:
        title, report.title_source = fallback_title, "file name"
    report.title_heading = title_heading
    b = DocumentBuilder(doc_id, title, max_level=max_level)
    for blk in blocks:
        if blk[0] == "para":
            b.paragraph(blk[1])
        elif not (title_heading and blk is h1[0]):
            b.heading(blk[1], blk[2])
            report.n_headings += 1
    doc, paras, secs = b.build(**doc_fields)
    doc["n_words"] = len(doc["text"].split())
    return doc, paras, secs


def title_from_name(rel: str) -> str:
    """A readable title from a file name: ``guide/getting-started.md`` -> ``getting started``."""
    return " ".join(Path(rel).stem.replace("_", " ").replace("-", " ").split())


def document_files(cfg: Config, kind: str, extensions: tuple[str, ...],
                   outside: list[tuple[str, Path]] | None = None) -> list[tuple[str, Path]]:
    """``(relative path, path)`` of the folder's documents (module docstring: files), without reading them. A
    file named in ``corpus.sources`` must lie inside the folder. A file found in the folder that is a link to
    somewhere outside it (``passwd.md -> /etc/passwd``) is never a document: it goes to ``outside`` as
    ``(relative path, where it points)``, for the build to warn about and count. Every path returned is
    resolved and inside the folder."""
    c = cfg.params("corpus")
    folder = mirror_root(cfg, f"its {'/'.join(extensions)} files").resolve()
    if c.sources:
        out = {s_path.relative_to(folder).as_posix(): s_path
               for s_path in (mirror_file(folder, s, f"corpus.sources: {s}", kind) for s in c.sources)}
    else:
        found = sorted((p for p in folder.rglob("*") if p.suffix.lower() in extensions and p.is_file()
                        and not any(part.startswith(".") for part in p.relative_to(folder).parts)),
                       key=lambda p: p.relative_to(folder).as_posix())
        out = {}
        for p in found:
            real = p.resolve()
            if folder in real.parents:
                out[p.relative_to(folder).as_posix()] = real
            elif outside is not None:
                outside.append((p.relative_to(folder).as_posix(), real))
    return [(name, out[name]) for name in kept_documents(list(out), c.max_docs, c.max_docs_from, c.seed)]


def source_files(cfg: Config, kind: str, extensions: tuple[str, ...]) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file a folder kind reads: each document (``<kind>:file``) and
    ``questions.jsonl``."""
    named = cfg.params("corpus").mirror
    if named is None:
        return []
    try:
        docs = document_files(cfg, kind, extensions)
    except CorpusInputError:
        docs = []  # a file named outside the folder: never read; the stage itself stops on it
    folder = cfg.resolve(named)
    questions = folder / QUESTIONS_FILE
    inside = not questions.exists() or folder.resolve() in questions.resolve().parents
    return [(f"{kind}:file", p) for _, p in docs] + ([(QUESTIONS_FILE, questions)] if inside else [])


def doc_id_of(rel: str) -> str:
    """``guide/install.md`` -> ``guide/install``."""
    p = Path(rel)
    return p.with_suffix("").as_posix()


def read_questions(path: Path, doc_ids: Iterable[str], warnings: list[str]) -> tuple[list[dict], int]:
    """The records of ``questions.jsonl`` in the demo's question shape (``query_id``, ``doc_id``, ``qtype``,
    ``question``, ``answer``, ``evidence``) and how many lines were skipped (each warned, naming the line).

    ``doc`` may be the document's path (``install.md``), its path without extension or its doc_id. A ``doc``
    that names no document is passed on and dropped by the harvest (``dropped: document not in corpus``)."""
    ids = set(doc_ids)
    out, seen, skipped = [], set(), 0
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}: line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            warnings.append(f"{where}: not valid JSON ({e.msg}); skipped")
            skipped += 1
            continue
        problem = _question_problem(rec)
        qid = str(rec["id"] if rec.get("id") is not None else f"q{n:04d}") if problem is None else ""
        if problem is None and qid in seen:
            problem = f"id {qid!r} repeats an earlier line's"
        if problem:
            warnings.append(f"{where}: {problem}; skipped")
            skipped += 1
            continue
        seen.add(qid)
        doc = rec["doc"].strip()
        doc_id = doc if doc in ids else doc_id_of(doc)
        out.append({"query_id": qid, "doc_id": doc_id, "qtype": rec.get("qtype"), "question": rec["question"],
                    "answer": rec.get("answer") or "", "evidence": list(rec["evidence"])})
    return out, skipped


def _question_problem(rec) -> str | None:
    if not isinstance(rec, dict):
        return f"a {type(rec).__name__}, not an object"
    for key in ("question", "doc"):
        if not isinstance(rec.get(key), str) or not rec[key].strip():
            return f"{key} is missing or not a string ({rec.get(key)!r})"
    ev = rec.get("evidence")
    if not (isinstance(ev, list) and ev and all(isinstance(e, str) for e in ev)):
        return f"evidence is {repr(ev)[:60]}, not a non-empty list of quotes"
    for key in ("id", "qtype", "answer"):
        if rec.get(key) is not None and not isinstance(rec[key], (str, int) if key == "id" else str):
            return f"{key} is a {type(rec[key]).__name__}"
    return None


Parser = Callable[[str, str, str], tuple[dict, pd.DataFrame, pd.DataFrame, ParseReport]]


@dataclass
class _Parsed:
    """What parsing a folder's files gave: each built document's row, paragraphs and sections (file order), the
    markup dropped over all files (kind -> count), where the titles came from (source -> count), how many files
    had no prose left, and how many documents had a title heading taken out of their outline."""

    docs: list[dict] = field(default_factory=list)
    paragraphs: list[pd.DataFrame] = field(default_factory=list)
    sections: list[pd.DataFrame] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    titles: Counter = field(default_factory=Counter)
    n_empty: int = 0
    n_title_heading: int = 0


def _skip_or_stop(problem: CorpusInputError, allow_partial: bool, warnings: list[str]) -> None:
    """A file that cannot be read or parsed stops the build, naming the file and the way out; with
    ``corpus.allow_partial`` it is warned about and skipped instead."""
    if not allow_partial:
        raise CorpusInputError(f"{problem} (corpus.allow_partial: true builds without it)") from None
    warnings.append(f"{problem}; skipped (corpus.allow_partial)")


def _read_file(path: Path, allow_partial: bool, warnings: list[str]) -> str | None:
    """A document file's text (UTF-8, :func:`~chunkstudy.corpus.sources.read_text`); None when it is missing or
    undecodable and ``corpus.allow_partial`` skips it (:func:`_skip_or_stop`)."""
    try:
        if not path.is_file():
            raise CorpusInputError(f"{path}: not found (corpus.sources)")
        return read_text(path)
    except CorpusInputError as e:
        _skip_or_stop(e, allow_partial, warnings)
        return None


def _parse_file(parse: Parser, text: str, doc_id: str, rel: str, path: Path, kind: str, allow_partial: bool,
                warnings: list[str]) -> tuple[dict, pd.DataFrame, pd.DataFrame, ParseReport] | None:
    """``parse(text, doc_id, rel)``; a parser that recursed deeper than Python allows names the file and stops
    the build, or is skipped (None) under ``corpus.allow_partial``."""
    try:
        return parse(text, doc_id, rel)
    except RecursionError:
        deep = CorpusInputError(f"{path}: nested too deeply to parse (RecursionError in the {kind} parser)")
        _skip_or_stop(deep, allow_partial, warnings)
        return None


def _parse_files(files: list[tuple[str, Path]], kind: str, parse: Parser, allow_partial: bool,
                 warnings: list[str]) -> _Parsed:
    """Every ``(relative path, path)`` of ``files`` read and parsed, in order. Skipped with a warning: an
    unreadable file (under ``corpus.allow_partial``), a second file of the same doc_id (the first is kept) and a
    file with no prose left; a parser's problems are warned about, prefixed with the file's path."""
    got = _Parsed()
    built: set[str] = set()
    for rel, path in files:
        doc_id = doc_id_of(rel)
        text = _read_file(path, allow_partial, warnings)
        if text is None:
            continue
        if doc_id in built:
            warnings.append(f"{rel}: doc_id {doc_id!r} repeats another file's (same path, other extension); "
                            "kept the first")
            continue
        parsed = _parse_file(parse, text, doc_id, rel, path, kind, allow_partial, warnings)
        if parsed is None:
            continue
        doc, paras, secs, report = parsed
        got.dropped.update(report.dropped)
        warnings.extend(f"{rel}: {p}" for p in report.problems)
        if not len(paras):
            got.n_empty += 1
            warnings.append(f"{rel}: no prose left after parsing; skipped")
            continue
        built.add(doc_id)
        got.titles[report.title_source] += 1
        got.n_title_heading += int(report.title_heading)
        got.docs.append(doc)
        got.paragraphs.append(paras)
        got.sections.append(secs)
    return got


def _tables(got: _Parsed) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The documents, paragraphs and gold sections tables of the built documents (empty, with their columns,
    when none was built)."""
    documents = pd.DataFrame(got.docs) if got.docs else pd.DataFrame(columns=["doc_id", "title", "text", "source",
                                                                               "n_words"])
    paragraphs = pd.concat(got.paragraphs, ignore_index=True) if got.paragraphs else pd.DataFrame(
        columns=["doc_id", "para_idx", "start", "end"])
    sections = pd.concat(got.sections, ignore_index=True) if got.sections else pd.DataFrame(columns=SECTION_COLUMNS)
    return documents, paragraphs, sections


def _corpus_stats(got: _Parsed, n_files: int, n_outside: int, documents: pd.DataFrame, sections: pd.DataFrame,
                  drop_labels: dict[str, str]) -> tuple[dict, pd.DataFrame]:
    """The corpus half of ``stats`` (counts, markup dropped per ``drop_labels`` key, title sources, means per
    document, the outline depth distribution) and of the funnel (files read, skipped, built, markup dropped)."""
    depths = Counter(depth(s) for s in got.sections)
    n_docs = len(got.docs)
    stats = {"files_read": n_files, "documents_built": n_docs, "empty_documents": got.n_empty,
             "markup_dropped": {k: int(got.dropped[k]) for k in drop_labels},
             "title_from": dict(got.titles), "title_headings": got.n_title_heading,
             "mean_sections_per_doc": float(sections.groupby("doc_id").size().mean()) if n_docs else 0.0,
             "mean_words_per_doc": float(documents["n_words"].mean()) if n_docs else 0.0,
             "depth_distribution": {str(k): v for k, v in sorted(depths.items())}}
    stats["outside_links"] = n_outside
    funnel = pd.DataFrame(
        [{"step": "files read", "count": n_files},
         {"step": "skipped: outside the folder (links)", "count": n_outside},
         {"step": "skipped: no prose", "count": got.n_empty},
         {"step": "documents built", "count": n_docs}]
        + [{"step": f"dropped: {label}", "count": int(got.dropped[k])} for k, label in drop_labels.items()])
    return stats, funnel


def _questions(folder: Path, kind: str, documents: pd.DataFrame, paragraphs: pd.DataFrame, sections: pd.DataFrame,
               fuzzy_threshold: float, warnings: list[str]) -> tuple[pd.DataFrame, dict, int, pd.DataFrame]:
    """The folder's ``questions.jsonl`` (none: no questions) harvested with exact spans: the harvested table, the
    question stats, how many records were skipped, and the question half of the funnel (its steps prefixed
    ``questions:``)."""
    qpath = folder / QUESTIONS_FILE
    if qpath.is_file():  # a link to a file outside the folder is refused, as a document's would be skipped
        qpath = mirror_file(folder, QUESTIONS_FILE, QUESTIONS_FILE, kind)
    questions, skipped = read_questions(qpath, documents.get("doc_id", []), warnings) if qpath.is_file() else ([], 0)
    harvested, counts = harvest_questions(questions, documents, paragraphs, sections, fuzzy_threshold,
                                          warnings, where=QUESTIONS_FILE)
    counts["questions read"] += skipped
    qstats = harvest_stats(harvested, sections, counts)
    qstats["papers_read"] = len(documents)
    qstats["dropped_document_not_in_corpus"] = int(counts["dropped: document not in corpus"])
    qstats["skipped_bad_records"] = skipped
    qstats["file"] = QUESTIONS_FILE if qpath.is_file() else None
    qfunnel = harvest_funnel(qstats)
    qfunnel["step"] = "questions: " + qfunnel["step"].str.replace("papers", "documents")
    return harvested, qstats, skipped, qfunnel


def build(cfg: Config, warnings: list[str], kind: str, extensions: tuple[str, ...], parse: Parser,
          drop_labels: dict[str, str]) -> dict:
    """The tables of a folder corpus: every document parsed by ``parse(text, doc_id, source)``, questions from
    ``questions.jsonl`` harvested with exact spans. ``drop_labels`` names the parser's drop counters in the funnel
    (``code_block`` -> ``code blocks``) in the order they are shown. A missing or undecodable file stops the build
    unless ``corpus.allow_partial``."""
    c = cfg.params("corpus")
    folder = mirror_root(cfg, f"its {'/'.join(extensions)} files")
    outside: list[tuple[str, Path]] = []
    files = document_files(cfg, kind, extensions, outside)
    for rel, real in outside:
        warnings.append(f"{rel}: a link to {real}, outside corpus.mirror {folder.resolve()}; skipped (a document "
                        "must lie inside the folder)")
    got = _parse_files(files, kind, parse, c.allow_partial, warnings)
    documents, paragraphs, sections = _tables(got)
    stats, funnel = _corpus_stats(got, len(files), len(outside), documents, sections, drop_labels)
    harvested, qstats, skipped, qfunnel = _questions(folder, kind, documents, paragraphs, sections,
                                                     c.fuzzy_threshold, warnings)
    stats["questions"] = qstats
    stats["skipped_records"] = {"questions": skipped}
    if len(documents):
        documents["revision"] = None
        documents["topic_bucket"] = None
        documents["split"] = None
    return {"documents": documents, "paragraphs": paragraphs, "sections_gold": sections, "harvested": harvested,
            "corpus_funnel": pd.concat([funnel.assign(value=float("nan")), qfunnel], ignore_index=True),
            "stats": stats}


#: The ``corpus`` keys every folder kind reads beyond the common ones: which files (``sources``, ``max_docs``,
#: ``max_docs_from``, ``seed``) and how its questions' evidence is matched (``fuzzy_threshold``).
PARAMETERS: tuple[str, ...] = ("sources", "max_docs", "max_docs_from", "seed", "fuzzy_threshold")


@dataclass(frozen=True, kw_only=True)
class FolderLoader(CorpusLoader):
    """The loader of a folder kind (:func:`loader`): what every loader carries, and the file extensions it reads
    and the markup its parser drops and counts (``dropped``: the funnel's labels, in its order), which
    docs/corpus.md's generated "Folder kinds" table shows."""

    extensions: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def loader(kind: str, extensions: tuple[str, ...], parse: Parser, drop_labels: dict[str, str]) -> FolderLoader:
    """The :class:`FolderLoader` of a folder kind whose files ``parse`` reads (the Markdown and HTML modules differ
    only in their parser): its entry points are :func:`source_files` and :func:`build` of this module, its ``doc``
    says which files it reads, its parameters are :data:`PARAMETERS` and its questions come from
    ``questions.jsonl``. ``drop_labels`` names the parser's drop counters in the funnel, in order."""

    def source_files_of_kind(cfg: Config) -> list[tuple[str, Path]]:
        return source_files(cfg, kind, extensions)

    def build_kind(cfg: Config, session, warnings: list[str]) -> dict:
        return build(cfg, warnings, kind, extensions, parse, drop_labels)

    source_files_of_kind.__doc__ = (f"``(role, path)`` of every file the {kind} kind reads: each "
                                    f"{'/'.join(extensions)} file (``{kind}:file``) and ``questions.jsonl``.")
    build_kind.__doc__ = f"The {kind} folder of ``corpus.mirror`` (:func:`chunkstudy.corpus.folder.build`)."
    files = " / ".join(f"`*{e}`" for e in extensions)
    return FolderLoader(kind=kind, doc=f"every {files} file under `corpus.mirror` (or the files `corpus.sources` "
                                       f"names), and its `{QUESTIONS_FILE}`",
                        parameters=PARAMETERS, questions=QUESTIONS_FILE, build=build_kind,
                        source_files=source_files_of_kind, extensions=tuple(extensions),
                        dropped=tuple(drop_labels.values()))
