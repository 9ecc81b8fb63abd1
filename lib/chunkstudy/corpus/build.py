"""Stage 01 in one call: :func:`build_corpus` reads the corpus named by the parameters and returns its tables.

Source files are ``<corpus.mirror>/<name>`` for each name in ``corpus.sources`` (the mirror path is relative to
the parameter file); with no mirror, ``corpus.fetch_urls`` are downloaded into the ``downloads`` cache first.
:func:`source_files` lists every file the stage reads without reading it (the demo's ``documents.yaml`` is read
for its file names), and :func:`fingerprint_sources` gives each one's path, size and sha256: the runner puts them
in stage 01's key, so a replaced archive or an edited ``questions.yaml`` reruns 01, and ``stats.json`` records them.

Damaged inputs fail loudly: a truncated, corrupt, undecodable or missing file stops the stage, naming it, unless
``corpus.allow_partial`` is true (then it is a warning and the readable part builds); a record of the wrong shape
(a QASPER paper or question, a demo document or question) is skipped with a warning naming it and counted in
``stats["skipped_records"]``; a corpus with no documents is an error.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from .. import artifacts
from ..config import Config, read_yaml
from . import demo, fetch, qasper, wikipedia
from .model import verify_corpus

HARVESTED_EMPTY = pd.DataFrame({c: pd.Series(dtype="object") for c in qasper.HARVESTED_COLUMNS})


class CorpusInputError(ValueError):
    """An input of stage 01 is unreadable, damaged or yields nothing (the message names the file)."""


def source_paths(cfg: Config, session=None) -> list[Path]:
    """Local paths of ``corpus.sources`` (from the mirror, or downloaded when no mirror is set; with no sources
    named, every downloaded file). A named source that is not there raises, naming it."""
    c = cfg["corpus"]
    if c["mirror"] is not None:
        root = cfg.resolve(c["mirror"])
        paths = cfg.resolve_param("corpus.sources")
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"{cfg.path.name}: corpus.sources not found in mirror {root}: {missing}")
        return paths
    if not c["fetch_urls"]:
        return []
    got = fetch.download(c["fetch_urls"], artifacts.cache_dir(cfg, "downloads"), session=session)
    if not c["sources"]:
        return got
    by_name = {p.name: p for p in got}
    missing = [s for s in c["sources"] if s not in by_name]
    if missing:
        raise FileNotFoundError(f"{cfg.path.name}: corpus.sources {missing} are not among the files of "
                                f"corpus.fetch_urls {sorted(by_name)}")
    return [by_name[s] for s in c["sources"]]


def _downloads(cfg: Config) -> Path:
    return artifacts.cache_dir(cfg, "downloads", create=False)


def _resolve_in_mirror(cfg: Config, name: str) -> Path:
    """A mirror-anchored file (e.g. ``corpus.featured_list``): relative to ``corpus.mirror``, or to the downloads
    folder when there is no mirror (config.ANCHORS)."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return p
    mirror = cfg["corpus"]["mirror"]
    return ((cfg.resolve(mirror) if mirror is not None else _downloads(cfg)) / p).resolve()


def _demo_file(mirror: Path, name: str, where: str) -> Path:
    """A file named by the demo's ``documents.yaml``: it must lie inside the mirror (``file: ../x`` would read any
    file on the machine)."""
    try:
        return artifacts.inside(mirror / name, mirror, where)
    except artifacts.PathError as e:
        raise CorpusInputError(f"{e}; demo-format files must lie inside corpus.mirror") from None


def _demo_entries(mirror: Path) -> list:
    path = mirror / "documents.yaml"
    if not path.is_file():
        raise CorpusInputError(f"{path}: not found (corpus.kind demo reads documents.yaml from corpus.mirror)")
    docs = read_yaml(_read_text(path), path) or []
    if not isinstance(docs, list):
        raise CorpusInputError(f"{path}: expected a list of documents, got {type(docs).__name__}")
    return docs


def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file stage 01 reads, resolved without reading them (the demo's ``documents.yaml``
    is read for the file names it lists). Roles: ``corpus.sources``, ``demo:documents.yaml``,
    ``demo:questions.yaml``, ``demo:file``, ``corpus.featured_list``, ``corpus.api_revisions``. With no mirror,
    sources are the downloaded files of ``corpus.fetch_urls`` (they may not be there yet)."""
    c = cfg["corpus"]
    out: list[tuple[str, Path]] = []
    if c["kind"] == "demo" and c["mirror"] is not None:
        mirror = cfg.resolve(c["mirror"])
        out.append(("demo:documents.yaml", mirror / "documents.yaml"))
        out.append(("demo:questions.yaml", mirror / "questions.yaml"))
        try:
            entries = _demo_entries(mirror)
        except (CorpusInputError, ValueError):
            entries = []  # the stage itself reports the damage; its file is fingerprinted above
        for d in entries:
            if isinstance(d, dict) and isinstance(d.get("file"), str):
                try:
                    out.append(("demo:file", _demo_file(mirror, d["file"], f"documents.yaml: {d.get('doc_id')}")))
                except CorpusInputError:
                    continue  # outside the mirror: never read; the stage itself stops on it
    elif c["sources"]:
        out += [("corpus.sources", p) for p in cfg.resolve_param("corpus.sources", _downloads(cfg))]
    elif c["mirror"] is None:
        out += [("corpus.sources", _downloads(cfg) / Path(urlparse(u).path).name) for u in c["fetch_urls"]]
    featured = c["featured_list"]
    if featured and featured != "api":
        out.append(("corpus.featured_list", _resolve_in_mirror(cfg, featured)))
    if c["api_revisions"]:
        out.append(("corpus.api_revisions", cfg.resolve_param("corpus.api_revisions")))
    return out


def fingerprint_sources(cfg: Config, previous: list[dict] | None = None) -> list[dict]:
    """``[{role, path, size, sha256, mtime_ns}]`` for :func:`source_files` (path relative to the project root; a
    file not there is ``{role, path, missing: True}``). A file whose path, size and mtime match an entry of
    ``previous`` keeps that entry's sha256 instead of being hashed again."""
    old = {(f.get("path"), f.get("size"), f.get("mtime_ns")): f.get("sha256") for f in previous or []
           if isinstance(f, dict)}
    out = []
    for role, path in source_files(cfg):
        rel = artifacts.project_relative(cfg, path)
        if not path.is_file():
            out.append({"role": role, "path": rel, "missing": True})
            continue
        st = path.stat()
        sha = old.get((rel, st.st_size, st.st_mtime_ns)) or artifacts.file_hash(path)
        out.append({"role": role, "path": rel, "size": st.st_size, "sha256": sha, "mtime_ns": st.st_mtime_ns})
    return out


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CorpusInputError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise CorpusInputError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


def _build_demo(cfg: Config, warnings: list[str]) -> dict:
    c = cfg["corpus"]
    if c["mirror"] is None:
        raise CorpusInputError(f"{cfg.path}: corpus.kind demo reads documents.yaml from corpus.mirror, which is null")
    mirror = cfg.resolve(c["mirror"])
    entries, skipped = demo.valid_documents(_demo_entries(mirror), warnings)
    text = {}
    for d in entries:
        f = _demo_file(mirror, str(d["file"]), f"documents.yaml: {d['doc_id']}")
        try:
            if not f.is_file():
                raise CorpusInputError(f"documents.yaml: {d['doc_id']}: file {f} not found")
            text[str(d["doc_id"])] = _read_text(f)
        except CorpusInputError as e:
            if not c["allow_partial"]:
                raise CorpusInputError(f"{e} (corpus.allow_partial: true builds without it)") from None
            warnings.append(f"{e}; skipped (corpus.allow_partial)")
    qpath = mirror / "questions.yaml"
    questions = (read_yaml(_read_text(qpath), qpath) or []) if qpath.is_file() else []
    if not isinstance(questions, list):
        raise CorpusInputError(f"{qpath}: expected a list of questions, got {type(questions).__name__}")
    out = demo.build_demo([d for d in entries if str(d["doc_id"]) in text], text, questions, c, warnings)
    out["stats"]["skipped_records"] = {"documents": skipped,
                                       "questions": int(out["stats"]["questions"].get("skipped_bad_records", 0))}
    return out


def build_corpus(cfg: Config, session=None) -> dict:
    """Build ``{documents, paragraphs, sections_gold, harvested, corpus_funnel, stats}`` for ``cfg``'s corpus.

    ``session`` (a ``requests.Session`` or a fake) is used for downloads and the MediaWiki API. A damaged or
    unreadable input file raises :class:`CorpusInputError` naming it (unless ``corpus.allow_partial``: then a
    warning); records of the wrong shape are skipped, warned about and counted (``stats["skipped_records"]``);
    other problems with single inputs (an empty page, unmatched evidence) are collected in ``stats["warnings"]``.
    ``stats["sources"]`` fingerprints every file read; ``stats["verification_failures"]`` lists any document
    whose gold structure does not verify (the notebook raises on it). No documents at all raises.
    """
    c = cfg["corpus"]
    warnings: list[str] = []
    if c["kind"] == "qasper":
        try:
            papers = qasper.read_qasper(source_paths(cfg, session), warnings, allow_partial=c["allow_partial"])
        except qasper.QasperReadError as e:
            raise CorpusInputError(f"{e} (corpus.allow_partial: true builds from the readable part)") from None
        out = qasper.build_qasper(papers, c, warnings)
    elif c["kind"] == "wikipedia":
        try:
            out = _build_wikipedia(cfg, session, warnings)
        except wikipedia.ExportError as e:
            raise CorpusInputError(f"{e} (corpus.allow_partial: true keeps the pages read before it)") from None
        out["harvested"] = HARVESTED_EMPTY.copy()
    else:
        out = _build_demo(cfg, warnings)
    if not len(out["documents"]):
        shown = "".join(f"\n  {w}" for w in warnings[:10])
        raise CorpusInputError(f"{cfg.path.name}: corpus {cfg.corpus!r} ({c['kind']}) has no documents; the "
                               f"filters or the inputs left nothing.{' Warnings:' + shown if shown else ''}")
    bad = verify_corpus(out["documents"], out["paragraphs"], out["sections_gold"])
    out["stats"]["verification_failures"] = bad
    out["stats"]["warnings"] = warnings
    out["stats"].setdefault("skipped_records", {})
    out["stats"]["sources"] = fingerprint_sources(cfg)
    out["stats"]["corpus"] = cfg.corpus
    out["stats"]["kind"] = c["kind"]
    out["stats"]["n_documents"] = len(out["documents"])
    return out


def sources_table(out: dict) -> pd.DataFrame:
    """The fingerprints of the files stage 01 read (``stats["sources"]``) as a table."""
    return pd.DataFrame(out["stats"].get("sources") or [], columns=["role", "path", "size", "sha256"])


def skipped_records(out: dict) -> pd.DataFrame:
    """Records skipped for their shape (``stats["skipped_records"]``) as a table: ``record`` (papers, questions,
    documents), ``skipped`` (the warnings name each one)."""
    counts = out["stats"].get("skipped_records") or {}
    return pd.DataFrame({"record": list(counts), "skipped": [int(v) for v in counts.values()]},
                        columns=["record", "skipped"])


def _build_wikipedia(cfg: Config, session, warnings: list[str]) -> dict:
    """Wikipedia from XML exports and/or the MediaWiki API.

    With no exports, the Featured Article list (``featured_list: api`` or a ``page_id<TAB>title`` TSV) is the
    candidate list: its pages are fetched in the seeded walk's order, ``api_batch_size`` per request, and with
    ``api_fetch: lazy`` only until the walk is satisfied (:func:`wikipedia.build_wikipedia_api`). Every page
    fetched is recorded as ``title<TAB>revid`` in ``api_revisions_out`` (default
    ``data/<corpus>/cache/mediawiki_api/api_revisions.tsv``) and a list fetched from the API beside it as
    ``<stem>_featured_list.tsv``, so a later run that names them in ``api_revisions`` and ``featured_list``
    fetches the same text of the same list.
    """
    c = cfg["corpus"]
    client = None
    if c["api_titles"] or c["featured_list"] == "api" or (not c["sources"] and c["mirror"] is None):
        if session is None:
            import requests

            session = requests.Session()
        client = wikipedia.ApiClient(session, c["api_endpoint"], artifacts.cache_dir(cfg, "mediawiki_api"),
                                     c["api_rate_limit_s"], user_agent=c["api_user_agent"] or "")
    featured = listed = None
    if c["featured_list"] == "api":
        listed = wikipedia.featured_ids_from_api(client, progress=True)
    elif c["featured_list"]:
        listed = wikipedia.featured_ids_from_tsv(_resolve_in_mirror(cfg, c["featured_list"]).read_text())
    if listed is not None:
        featured = set(listed)
    sources = source_paths(cfg, session) if c["sources"] else []
    titles = list(c["api_titles"])
    pins = {}
    if c["api_revisions"]:
        pins = wikipedia.read_revision_pins(cfg.resolve(c["api_revisions"]).read_text())
    fetched: list[dict] = []

    def fetch(names: list[str], ids: dict | None = None) -> list[dict]:
        got = wikipedia.fetch_api_pages(names, client, pins, warnings, page_ids=ids, batch_size=c["api_batch_size"])
        fetched.extend({k: p[k] for k in ("title", "revision", "page_id")} for p in got)
        return got

    if not titles and not sources and listed is not None and client is not None:
        # the online path of the paper's spec: the Featured Article list, fetched in walk order
        out = wikipedia.build_wikipedia_api(
            listed, lambda names: fetch(names, listed), c, featured, warnings, batch_size=c["api_batch_size"],
            lazy=c["api_fetch"] == "lazy", progress=True,
            status=lambda: {"requests": client.n_sent, "cached": client.n_cached})
    else:
        def pages():
            for p in sources:
                yield from wikipedia.iter_export(p, warnings, allow_partial=c["allow_partial"])
            if titles:
                yield from fetch(titles)

        out = wikipedia.build_wikipedia(pages(), c, featured, warnings)
    out["stats"]["revisions"] = dict(zip(out["documents"].get("title", []), out["documents"].get("revision", [])))
    if client is not None:
        out["stats"]["api_requests"] = {"sent": client.n_sent, "cached": client.n_cached}
        # the record a rerun needs: revision pins of every fetched page, and a Featured list fetched online
        pins_out = (cfg.resolve(c["api_revisions_out"]) if c["api_revisions_out"]
                    else artifacts.cache_dir(cfg, "mediawiki_api") / "api_revisions.tsv")
        record = out["stats"]["api_record"] = {}
        for key, path, text in (
                ("api_revisions", pins_out, wikipedia.revision_pins_tsv(fetched) if fetched else None),
                ("featured_list", pins_out.with_name(f"{pins_out.stem}_featured_list.tsv"),
                 wikipedia.featured_tsv(listed) if listed and c["featured_list"] == "api" else None)):
            if text is not None:
                with artifacts.atomic_path(path) as tmp:
                    tmp.write_text(text, encoding="utf-8")
                inside = path.resolve().is_relative_to(cfg.root.resolve())  # stats.json stays portable
                record[key] = str(path.resolve().relative_to(cfg.root.resolve()) if inside else path)
    return out


class VerificationError(ValueError):
    """A gold structure failed verification (the message names the documents and their violations)."""


def require_verified(out: dict) -> None:
    """Raise :class:`VerificationError` when any gold structure has violations (stage 01 never writes them)."""
    bad = out["stats"].get("verification_failures") or {}
    if bad:
        lines = [f"  {d}: {'; '.join(v[:3])}" for d, v in list(bad.items())[:10]]
        raise VerificationError(f"sections_gold: {len(bad)} document(s) fail verification (01_corpus):\n"
                                + "\n".join(lines))


def section_trees(documents: pd.DataFrame, sections: pd.DataFrame, n_docs: int = 3) -> pd.DataFrame:
    """The gold outline of the first ``n_docs`` documents as a display table: the title indented by level,
    the paragraph range and the character span (half-open offsets into ``documents.text``)."""
    ids = list(documents["doc_id"][:n_docs])
    s = sections[sections["doc_id"].isin(ids)].copy()
    s["outline"] = ["    " * (int(lv) - 1) + (t if t else "(lead)") for lv, t in zip(s["level"], s["title"])]
    s["n_paragraphs"] = s["last_para"] - s["first_para"] + 1
    s["n_chars"] = s["end"] - s["start"]
    return s[["doc_id", "level", "outline", "first_para", "last_para", "n_paragraphs", "start", "end", "n_chars"]]
