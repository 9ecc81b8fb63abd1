"""The bundled demo corpus (``data/demo_raw/``): wikitext articles and harvested-style questions.

Files (see ``data/demo_raw/README.md``): ``documents.yaml`` (a list of ``{doc_id, title, file, categories}``),
``<doc_id>.wiki`` (MediaWiki wikitext) and ``questions.yaml`` (a list of ``{query_id, doc_id, qtype, question,
answer, evidence: [paragraph strings]}``).

Articles go through the same canonical normaliser, filters and bucket walk as Wikipedia exports
(:func:`~chunkstudy.corpus.wikipedia.build_wikipedia`), and questions through the same evidence matcher as QASPER
(:class:`~chunkstudy.corpus.qasper.EvidenceMatcher`: exact → fuzzy → section fallback). Evidence that matches
nothing (e.g. a table caption naming no section) is reported and left out; a question left with no evidence is
dropped and counted.

The kind's loader, :data:`LOADER` (:mod:`chunkstudy.corpus.build`'s registry): :func:`build` reads
``documents.yaml``, the files it names (inside ``corpus.mirror``) and ``questions.yaml``; :func:`source_files`
lists them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from ..config import Config, read_yaml
from ..params import CorpusParams
from .loader import CorpusLoader
from .qasper import HARVESTED_COLUMNS, EvidenceMatcher, _norm, harvest_funnel, harvest_stats
from .sources import CorpusInputError, mirror_file, mirror_root, read_text
from .wikipedia import build_wikipedia


def _strings_problem(entry, keys: tuple[str, ...]) -> str | None:
    """Why ``entry`` is not a mapping holding a non-empty string under each of ``keys``, or None."""
    if not isinstance(entry, dict):
        return f"entry is a {type(entry).__name__}, not a mapping"
    for key in keys:
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            return f"{key} is missing or not a string ({entry.get(key)!r})"
    return None


def document_shape_problem(entry) -> str | None:
    """What is wrong with one ``documents.yaml`` entry, or None: a mapping with string ``doc_id``, ``title``,
    ``file`` and an optional list of string ``categories``."""
    problem = _strings_problem(entry, ("doc_id", "title", "file"))
    if problem:
        return problem
    cats = entry.get("categories")
    if cats is not None and not (isinstance(cats, list) and all(isinstance(c, str) for c in cats)):
        return "categories is not a list of strings"
    return None


def valid_documents(entries: list, warnings: list[str]) -> tuple[list[dict], int]:
    """The well-shaped ``documents.yaml`` entries and how many were skipped (each skip warned, naming it)."""
    good, skipped = [], 0
    for i, d in enumerate(entries):
        problem = document_shape_problem(d)
        if problem:
            name = d.get("doc_id") if isinstance(d, dict) else None
            warnings.append(f"documents.yaml: document {name if name else f'#{i}'}: {problem}; skipped")
            skipped += 1
        else:
            good.append(d)
    return good, skipped


def question_shape_problem(q) -> str | None:
    """What is wrong with one ``questions.yaml`` entry, or None: string ``query_id``, ``doc_id``, ``question``,
    and ``evidence`` a list of strings (a scalar would be read character by character)."""
    problem = _strings_problem(q, ("query_id", "doc_id", "question"))
    if problem:
        return problem
    ev = q.get("evidence")
    if ev is not None and not (isinstance(ev, list) and all(isinstance(e, str) for e in ev)):
        return f"evidence is a {type(ev).__name__}, not a list of paragraph strings"
    return None


def demo_pages(documents: list[dict], wikitext: dict[str, str]) -> list[dict]:
    """Turn ``documents.yaml`` entries plus their wikitext (``{doc_id: text}``) into pages for
    :func:`~chunkstudy.corpus.wikipedia.build_wikipedia` (``doc_id`` kept, categories from the YAML)."""
    pages = []
    for d in documents:
        for key in ("doc_id", "title", "file"):
            if key not in d:
                raise ValueError(f"documents.yaml: entry {d!r} lacks {key!r}")
        pages.append({"doc_id": str(d["doc_id"]), "title": d["title"], "page_id": str(d["doc_id"]),
                      "revision": "demo", "timestamp": "", "wikitext": wikitext.get(str(d["doc_id"]), ""),
                      "source": f"demo:{d['file']}", "redirect": False,
                      "categories": list(d.get("categories") or [])})
    return pages


def harvest_questions(questions: list[dict], documents: pd.DataFrame, paragraphs: pd.DataFrame,
                      sections: pd.DataFrame, threshold: float, warnings: list[str] | None = None,
                      where: str = "questions.yaml") -> tuple[pd.DataFrame, Counter]:
    """Resolve each question's evidence strings to spans of the accepted documents (one annotator per question).
    Warnings name the questions file as ``where``.

    Returns the harvested table (columns :data:`~chunkstudy.corpus.qasper.HARVESTED_COLUMNS`) and counts for the
    funnel. A question about a document that was not accepted is counted as ``dropped: document not in corpus``.
    """
    warnings = [] if warnings is None else warnings
    texts = dict(zip(documents["doc_id"], documents["text"]))
    by_p = dict(tuple(paragraphs.groupby("doc_id", sort=False)))
    by_s = dict(tuple(sections.groupby("doc_id", sort=False)))
    matchers: dict[str, EvidenceMatcher] = {}
    counts: Counter = Counter()
    rows = []
    for i, q in enumerate(questions):
        counts["questions read"] += 1
        problem = question_shape_problem(q)
        if problem:
            qid = q.get("query_id") if isinstance(q, dict) and isinstance(q.get("query_id"), str) else f"#{i}"
            warnings.append(f"{where}: question {qid}: {problem}; skipped")
            counts["skipped (bad record)"] += 1
            continue
        qid, doc_id = q["query_id"], q["doc_id"]
        if doc_id not in texts:
            counts["dropped: document not in corpus"] += 1
            warnings.append(f"{where}: question {qid} names document {doc_id!r}, which is not in the corpus")
            continue
        if doc_id not in matchers:
            matchers[doc_id] = EvidenceMatcher(texts[doc_id], by_p[doc_id], by_s[doc_id], threshold)
        found: dict[tuple[int, int], str] = {}
        n_ev = n_miss = 0
        strings = set()  # distinct evidence strings as annotated (the paper's spans-per-question count)
        for ev in q.get("evidence") or []:
            n_ev += 1
            strings.add(_norm(str(ev)))
            m = matchers[doc_id].match(str(ev))
            counts[f"evidence: {m[0] if m else 'unmatched'}"] += 1
            if m is None:
                n_miss += 1
                warnings.append(f"{where}: question {qid} ({doc_id}): evidence matches no paragraph or "
                                f"section: {_norm(str(ev))[:80]!r}")
                continue
            found.setdefault((m[1][0], m[1][1]), m[0])
        if not found:
            counts["dropped: no text evidence" if n_ev else "dropped: no evidence"] += 1
            continue
        spans = sorted(found)
        rows.append({"query_id": qid, "doc_id": doc_id, "qtype": q.get("qtype"), "text": _norm(q.get("question") or ""),
                     "spans": [list(s) for s in spans], "match_rules": [found[s] for s in spans],
                     "n_spans": len(spans), "answer": _norm(str(q.get("answer") or "")), "split": None,
                     "n_annotations": 1, "n_evidence": n_ev, "n_float_evidence": 0, "n_unmatched": n_miss,
                     "n_strings": len(strings)})
        counts["usable"] += 1
    return pd.DataFrame(rows, columns=HARVESTED_COLUMNS), counts


def build_demo(documents: list[dict], wikitext: dict[str, str], questions: list[dict], params: CorpusParams,
               warnings: list[str] | None = None) -> dict:
    """The demo corpus tables: Wikipedia-style documents plus harvested questions, funnel and stats."""
    warnings = [] if warnings is None else warnings
    out = build_wikipedia(demo_pages(documents, wikitext), params, featured=None, warnings=warnings)
    harvested, counts = harvest_questions(questions, out["documents"], out["paragraphs"], out["sections_gold"],
                                          params.fuzzy_threshold, warnings)
    qstats = harvest_stats(harvested, out["sections_gold"], counts)
    qstats["papers_read"] = len(out["documents"])
    qstats["dropped_document_not_in_corpus"] = int(counts["dropped: document not in corpus"])
    qstats["skipped_bad_records"] = int(counts["skipped (bad record)"])
    out["harvested"] = harvested
    out["stats"]["questions"] = qstats
    funnel = harvest_funnel(qstats)
    funnel["step"] = "questions: " + funnel["step"].str.replace("papers", "documents")
    out["corpus_funnel"] = pd.concat([out["corpus_funnel"].assign(value=float("nan")), funnel], ignore_index=True)
    return out


# ------------------------------------------------------------------------------------ the kind's entry points

def _entries(mirror: Path) -> list:
    path = mirror / "documents.yaml"
    if not path.is_file():
        raise CorpusInputError(f"{path}: not found (corpus.kind demo reads documents.yaml from corpus.mirror)")
    path = mirror_file(mirror, "documents.yaml", "documents.yaml", "demo")  # a link out of the mirror is refused
    docs = read_yaml(read_text(path), path) or []
    if not isinstance(docs, list):
        raise CorpusInputError(f"{path}: expected a list of documents, got {type(docs).__name__}")
    return docs


def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file :func:`build` reads: ``demo:documents.yaml``, ``demo:questions.yaml`` and
    each ``demo:file`` that ``documents.yaml`` names (read for the names; a file outside the mirror is never
    listed, as the build never reads it)."""
    named = cfg.params("corpus").mirror
    if named is None:
        return []
    mirror = cfg.resolve(named)
    out = [(f"demo:{name}", mirror / name) for name in ("documents.yaml", "questions.yaml")
           if not (mirror / name).exists() or mirror.resolve() in (mirror / name).resolve().parents]
    try:
        entries = _entries(mirror)
    except (CorpusInputError, ValueError):
        entries = []  # the stage itself reports the damage; its file is fingerprinted above
    for d in entries:
        if isinstance(d, dict) and isinstance(d.get("file"), str):
            try:
                out.append(("demo:file", mirror_file(mirror, d["file"], f"documents.yaml: {d.get('doc_id')}", "demo")))
            except CorpusInputError:
                continue  # outside the mirror: never read; the stage itself stops on it
    return out


def build(cfg: Config, session, warnings: list[str]) -> dict:
    """The demo corpus of ``corpus.mirror`` (``documents.yaml``, its files, ``questions.yaml``): see the module
    docstring. A missing or undecodable document file stops the build unless ``corpus.allow_partial``."""
    c = cfg.params("corpus")
    mirror = mirror_root(cfg, "documents.yaml")
    entries, skipped = valid_documents(_entries(mirror), warnings)
    text = {}
    for d in entries:
        f = mirror_file(mirror, str(d["file"]), f"documents.yaml: {d['doc_id']}", "demo")
        try:
            if not f.is_file():
                raise CorpusInputError(f"documents.yaml: {d['doc_id']}: file {f} not found")
            text[str(d["doc_id"])] = read_text(f)
        except CorpusInputError as e:
            if not c.allow_partial:
                raise CorpusInputError(f"{e} (corpus.allow_partial: true builds without it)") from None
            warnings.append(f"{e}; skipped (corpus.allow_partial)")
    qpath = mirror / "questions.yaml"
    if qpath.is_file():  # a link out of the mirror is refused
        qpath = mirror_file(mirror, "questions.yaml", "questions.yaml", "demo")
    questions = (read_yaml(read_text(qpath), qpath) or []) if qpath.is_file() else []
    if not isinstance(questions, list):
        raise CorpusInputError(f"{qpath}: expected a list of questions, got {type(questions).__name__}")
    out = build_demo([d for d in entries if str(d["doc_id"]) in text], text, questions, c, warnings)
    out["stats"]["skipped_records"] = {"documents": skipped,
                                       "questions": int(out["stats"]["questions"].get("skipped_bad_records", 0))}
    return out


#: ``corpus.kind: demo``. The articles go through Wikipedia's filters and seeded walk (their keys are its own too),
#: the questions through QASPER's evidence matcher (``fuzzy_threshold``).
LOADER = CorpusLoader(
    kind="demo",
    doc="`documents.yaml`, the wikitext files it names and `questions.yaml` in `corpus.mirror` (the bundled "
        "`data/demo_raw/`)",
    parameters=("require_featured", "min_words", "min_heading_depth", "min_sections", "drop_sections", "target_docs",
                "max_per_bucket", "seed", "max_docs", "fuzzy_threshold"),
    questions="questions.yaml", build=build, source_files=source_files)
