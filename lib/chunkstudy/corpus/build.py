"""Stage 01 in one call: :func:`build_corpus` reads the corpus named by the parameters and returns its tables.

Source files are ``<corpus.mirror>/<name>`` for each name in ``corpus.sources`` (the mirror path is relative to
the parameter file); with no mirror, ``corpus.fetch_urls`` are downloaded into the ``downloads`` cache first.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from .. import artifacts
from ..config import Config
from . import demo, fetch, qasper, wikipedia
from .model import verify_corpus

HARVESTED_EMPTY = pd.DataFrame({c: pd.Series(dtype="object") for c in qasper.HARVESTED_COLUMNS})


def source_paths(cfg: Config, session=None) -> list[Path]:
    """Local paths of ``corpus.sources`` (from the mirror, or downloaded when no mirror is set; with no sources
    named, every downloaded file). A named source that is not there raises, naming it."""
    c = cfg["corpus"]
    if c["mirror"] is not None:
        root = cfg.resolve(c["mirror"])
        paths = [root / s for s in c["sources"]]
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


def _resolve_in_mirror(cfg: Config, name: str) -> Path:
    mirror = cfg["corpus"]["mirror"]
    return (cfg.resolve(mirror) / name) if mirror is not None else cfg.resolve(name)


def build_corpus(cfg: Config, session=None) -> dict:
    """Build ``{documents, paragraphs, sections_gold, harvested, corpus_funnel, stats}`` for ``cfg``'s corpus.

    ``session`` (a ``requests.Session`` or a fake) is used for downloads and the MediaWiki API. Problems with
    single inputs (a truncated export, an empty page, a bad QASPER record, unmatched evidence) are collected in
    ``stats["warnings"]`` and the rest still builds; ``stats["verification_failures"]`` lists any document whose
    gold structure does not verify (the notebook raises on it).
    """
    c = cfg["corpus"]
    warnings: list[str] = []
    if c["kind"] == "qasper":
        papers = qasper.read_qasper(source_paths(cfg, session), warnings)
        out = qasper.build_qasper(papers, c, warnings)
    elif c["kind"] == "wikipedia":
        out = _build_wikipedia(cfg, session, warnings)
        out["harvested"] = HARVESTED_EMPTY.copy()
    else:
        root = cfg.resolve(c["mirror"])
        docs = yaml.safe_load((root / "documents.yaml").read_text()) or []
        text = {}
        for d in docs:
            f = root / str(d.get("file", ""))
            if not f.is_file():
                warnings.append(f"documents.yaml: {d.get('doc_id')}: file {f.name} not found; skipped")
                continue
            text[str(d["doc_id"])] = f.read_text(encoding="utf-8")
        qpath = root / "questions.yaml"
        questions = (yaml.safe_load(qpath.read_text()) or []) if qpath.is_file() else []
        out = demo.build_demo(docs, text, questions, c, warnings)
    bad = verify_corpus(out["documents"], out["paragraphs"], out["sections_gold"]) if len(out["documents"]) else {}
    out["stats"]["verification_failures"] = bad
    out["stats"]["warnings"] = warnings
    out["stats"]["corpus"] = cfg.corpus
    out["stats"]["kind"] = c["kind"]
    out["stats"]["n_documents"] = len(out["documents"])
    return out


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
    if not 1 <= c["api_batch_size"] <= wikipedia.MAX_TITLES_PER_REQUEST:
        raise ValueError(f"{cfg.path.name}: corpus.api_batch_size: {c['api_batch_size']} is outside "
                         f"1..{wikipedia.MAX_TITLES_PER_REQUEST} (titles per MediaWiki API request for an ordinary "
                         "client)")
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
                yield from wikipedia.iter_export(p, warnings)
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
