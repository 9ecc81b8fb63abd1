"""Wikipedia-FA: MediaWiki XML exports and the MediaWiki API in, normalised documents, filters, topic buckets and
the seeded, bucket-capped sample out (paper, data section and appendix "Topic buckets").

Sources (docs/corpus.md, "The paper's corpora"):

* :func:`iter_export` streams a MediaWiki XML export (``.xml`` or ``.xml.bz2``; a full dump works because pages
  are parsed one by one with ``iterparse`` and cleared). Main namespace only; redirects are skipped.
* :func:`~chunkstudy.corpus.wikiapi.fetch_api_pages` fetches wikitext, non-hidden categories and revision ids from the MediaWiki API, up to
  50 titles per request with the API's continuations, one request at a time with a polite rate limit and a
  User-Agent naming a contact; every raw response is cached on disk (keyed by endpoint and parameters), and a
  ``title -> revid`` pin makes a rerun fetch exactly the same revisions.
* :func:`build_wikipedia_api` fetches a listed set of pages (the Featured Article list, with page ids) in the
  seeded walk's order and, lazily, only until the walk is satisfied: the walk order (:func:`walk_order`) depends
  on page ids alone, so the result is the same as fetching everything first.

A page becomes a document through the one canonical normaliser (:mod:`chunkstudy.corpus.wikitext`).

Topic buckets: the paper names its six buckets and reports the realised counts (history/war 60, other 60,
biography 30, arts/media 22, science/nature 15, geography/places 13; :mod:`chunkstudy.paper`), but its keyword
table is not in its text. The keyword table here (:data:`TOPIC_BUCKETS`) is ours, so a run's bucket counts can
differ from the paper's; notebook 01 prints them side by side.

The kind's loader, :data:`LOADER` (:mod:`chunkstudy.corpus.build`'s registry): :func:`build` resolves the sources
(exports in ``corpus.mirror`` or downloaded, the Featured Article list, revision pins, the API) and builds;
:func:`source_files` lists the local files it reads.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Iterator, cast

import pandas as pd

from .. import artifacts
from ..config import Config
from ..params import CorpusParams
from .loader import CorpusLoader
from .model import SECTION_COLUMNS, DocumentBuilder, depth
from .sources import CorpusInputError, listed_sources, read_text, resolve_in_mirror, source_paths, walk_order
from .wikitext import categories as page_categories
from .wikiapi import (MAX_TITLES_PER_REQUEST, ApiClient, featured_ids_from_api, featured_ids_from_tsv, featured_tsv,
                      fetch_api_pages, read_revision_pins, revision_pins_tsv)
from .wikitext import is_maintenance_category, is_redirect, normalise
from ..errors import ChunkstudyError

#: Topic buckets in table order (paper, appendix "Topic buckets"). A keyword matches a category name as a whole
#: word, case-insensitively, with an optional plural "s"/"es"; a keyword ending in ``*`` matches any word that
#: starts with it. The first bucket with a match in any category wins and ``other`` is the fallback. The paper names
#: the six buckets but its keyword table is not in the text we have, so this table is ours: fixed here, versioned
#: with the code, and listed in the report.
TOPIC_BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("history_war", ("war", "battle", "military", "army", "armies", "navy", "naval", "warship", "empire",
                     "dynasty", "dynasties", "revolution", "conflict", "siege", "campaign", "regiment",
                     "soldier", "rebellion", "invasion", "fort", "fortification", "archaeolog*", "ancient", "medieval", "history")),
    ("biography", ("births", "deaths", "people", "politician", "monarch", "writer", "player", "actor",
                   "actress", "singer", "musician", "scientist", "philosopher", "president", "saint",
                   "biograph*", "alumni", "recipient", "chancellor", "emperor", "king", "queen", "women",
                   "men", "novelist", "poet", "painter", "composer", "economist", "astronaut")),
    ("science_nature", ("species", "biology", "animal", "bird", "mammal", "plant", "fungi", "fish", "insect",
                        "reptile", "amphibian*", "dinosaur", "chemi*", "physic*", "astronom*", "planet",
                        "mathemati*", "geolog*", "medicine", "medical", "disease", "disorder", "science",
                        "taxa", "genera", "organism", "hurricane", "storm", "weather", "mineral", "ecolog*",
                        "technology", "spaceflight", "apollo program", "computing", "element", "metal",
                        "statistic*", "algorithm*", "anatomy", "evolution", "zoolog*", "botan*")),
    ("arts_media", ("film", "album", "song", "music", "television", "novel", "book", "literature",
                    "video game", "painting", "art", "arts", "opera", "theatre", "theater", "comic", "manga",
                    "anime", "episode", "poem", "poetry", "band", "musical", "media", "magazine", "sculpture",
                    "fiction", "character", "animation", "series")),
    ("geography_places", ("city", "cities", "town", "village", "river", "lake", "mountain", "island",
                          "country", "countries", "state", "geography", "populated place", "capital",
                          "building", "park", "ocean", "region", "county", "counties", "province",
                          "landform", "bridge", "road", "railway", "station", "castle", "church", "structure",
                          "archipelago", "continent", "territory", "territories")),
)
BUCKETS = tuple(b for b, _ in TOPIC_BUCKETS) + ("other",)


def _keyword_pattern(keywords: Iterable[str]) -> re.Pattern:
    alts = [re.escape(k[:-1]) + r"\w*" if k.endswith("*") else re.escape(k) + r"(?:s|es)?\b" for k in keywords]
    return re.compile(r"\b(?:" + "|".join(alts) + ")", re.I)


_PATTERNS: dict[tuple, list[tuple[str, re.Pattern]]] = {}


def topic_bucket(categories: Iterable[str], table=TOPIC_BUCKETS) -> str:
    """The first bucket (in table order) whose keywords match a non-hidden category; else ``other``.

    Maintenance categories are ignored (dumps have no hidden flag; see :mod:`~chunkstudy.corpus.wikitext`).

    >>> topic_bucket(["1809 births", "Presidents of the United States"])
    'biography'
    >>> topic_bucket(["Union Army generals", "1809 births"])   # history_war comes first in table order
    'history_war'
    >>> topic_bucket(["Software companies", "Awards"])         # 'war' is matched as a word, not a substring
    'other'
    """
    key = tuple((b, tuple(k)) for b, k in table)
    if key not in _PATTERNS:
        _PATTERNS[key] = [(b, _keyword_pattern(k)) for b, k in table]
    cats = [c for c in categories if not is_maintenance_category(c)]
    for bucket, pat in _PATTERNS[key]:
        if any(pat.search(c) for c in cats):
            return bucket
    return "other"


# ---------------------------------------------------------------------------------------------- XML exports

def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(el, name: str):
    for c in el:
        if _local(c.tag) == name:
            return c
    return None


def _open(path: Path):
    return bz2.open(path, "rb") if str(path).endswith(".bz2") else open(path, "rb")


class WikiExportError(ChunkstudyError, ValueError):
    """A MediaWiki export is truncated, corrupt or not valid UTF-8 (the message names the file)."""


def iter_export(path: str | Path, warnings: list[str] | None = None, name: str | None = None,
                allow_partial: bool = False) -> Iterator[dict]:
    """Stream the main-namespace, non-redirect pages of a MediaWiki XML export (``.xml`` or ``.xml.bz2``).

    Yields ``{title, page_id, revision, timestamp, wikitext, source}`` (ids as strings). A truncated, corrupt or
    undecodable file raises :class:`WikiExportError` naming the file, once the pages before the damage are yielded;
    with ``allow_partial`` (and a ``warnings`` list) the stream ends there with a warning instead.
    """
    path = Path(path)
    name = name or path.name
    try:
        with _open(path) as fh:
            for _, el in ET.iterparse(fh, events=("end",)):
                if _local(el.tag) != "page":
                    continue
                ns = _child(el, "ns")
                rev = _child(el, "revision")
                is_redir = _child(el, "redirect") is not None
                if (ns is not None and (ns.text or "").strip() != "0") or rev is None:
                    el.clear()
                    continue
                text_el = _child(rev, "text")
                text = (text_el.text or "") if text_el is not None else ""
                page = {
                    "title": (_child(el, "title").text or "").strip(),
                    "page_id": (_child(el, "id").text or "").strip(),
                    "revision": ((_child(rev, "id").text or "").strip() if _child(rev, "id") is not None else ""),
                    "timestamp": (_child(rev, "timestamp").text or "") if _child(rev, "timestamp") is not None
                    else "",
                    "wikitext": text,
                    "source": name,
                    "redirect": is_redir or is_redirect(text),
                }
                el.clear()
                yield page
    except (EOFError, OSError, ET.ParseError, UnicodeDecodeError) as e:
        msg = f"{path}: export is truncated, corrupt or not UTF-8 ({type(e).__name__}: {e})"
        if warnings is None or not allow_partial:
            raise WikiExportError(msg) from e
        warnings.append(msg + "; kept the pages read before it (corpus.allow_partial)")


# ------------------------------------------------------------------------------- documents, filters, sample

def page_document(page: dict, drop_sections: Iterable[str]) -> tuple[dict, pd.DataFrame, pd.DataFrame, dict]:
    """Normalise one page into ``(document row, paragraphs, sections, info)``.

    ``doc_id`` is ``page["doc_id"]`` when given (the demo corpus), else ``wiki:<page_id>`` (or ``wiki:<title>``
    when the id is unknown). ``info`` holds the filter
    quantities: ``n_words`` (whitespace tokens of the flat text), ``n_sections`` (headed sections, the lead not
    counted), ``depth`` (deepest level after clamping), plus normaliser repairs.
    """
    doc_id = page.get("doc_id") or f"wiki:{page['page_id'] or page['title']}"
    builder = DocumentBuilder(doc_id, page["title"])
    try:
        report = normalise(page["wikitext"], builder, drop_sections)
    except RecursionError:  # markup nested deeper than the parser's recursion allows: name the page
        raise CorpusInputError(f"{page.get('source') or 'page'}: {page['title']!r} ({doc_id}): nested too deeply "
                               "to parse (RecursionError in the wikitext parser)") from None
    cats = page.get("categories")
    if cats is None:
        cats = page_categories(page["wikitext"])
    doc, paras, secs = builder.build(source=page.get("source", ""), revision=str(page.get("revision", "")),
                                     page_id=str(page.get("page_id", "")), timestamp=page.get("timestamp", ""),
                                     categories=list(cats))
    info = {"n_words": len(doc["text"].split()), "n_sections": report.n_headings, "depth": depth(secs),
            "n_paragraphs": len(paras), "residual_repairs": report.residual_repairs,
            "dropped_sections": list(report.dropped_sections)}
    doc["n_words"] = info["n_words"]
    return doc, paras, secs, info


def seeded_walk(candidates: pd.DataFrame, seed: int, max_per_bucket: int, target: int) -> pd.DataFrame:
    """The bucket-capped seeded sample (paper, appendix "Topic buckets").

    Candidates (columns ``doc_id``, ``topic_bucket``) are visited in :func:`walk_order`; the walk accepts a
    candidate unless its bucket already holds ``max_per_bucket`` documents, and stops at ``target``. No minimum
    per bucket, no round-robin. Returns the accepted rows in walk order with a ``walk_rank`` column.
    """
    order = walk_order(candidates["doc_id"].tolist(), seed)
    by_id = candidates.set_index("doc_id")
    counts: Counter = Counter()
    keep: list = []
    for doc_id in order:
        if len(keep) >= target:
            break
        b = by_id.at[doc_id, "topic_bucket"]
        if counts[b] >= max_per_bucket:
            continue
        counts[b] += 1
        keep.append(doc_id)
    out = by_id.loc[keep].reset_index()
    out["walk_rank"] = range(len(out))
    return out


_CANDIDATE_COLUMNS = ["doc_id", "title", "source", "topic_bucket", "featured", "n_words", "n_sections", "depth",
                      "n_paragraphs", "residual_repairs", "dropped_sections"]


class _Candidates:
    """Pages normalised into candidate rows and built documents, with the counts of what was set aside."""

    def __init__(self, drop_sections, featured: set[str] | None, warnings: list[str]):
        self.drop, self.featured, self.warnings = drop_sections, featured, warnings
        self.rows: list[dict] = []
        self.built: dict[str, tuple] = {}
        self.n_read = self.n_redirect = self.n_empty = 0

    def add(self, page: dict) -> dict | None:
        """The candidate row of ``page``, or None when it is a redirect, empty, or a duplicate (warned)."""
        self.n_read += 1
        if page.get("redirect"):
            self.n_redirect += 1
            return None
        if not (page.get("wikitext") or "").strip():
            self.n_empty += 1
            self.warnings.append(f"{page.get('source', '?')}: page {page.get('title')!r} has no text; skipped")
            return None
        doc, paras, secs, info = page_document(page, self.drop)
        if not len(paras):
            self.n_empty += 1
            self.warnings.append(f"{page.get('source', '?')}: page {page.get('title')!r} has no prose after "
                                 "normalisation; skipped")
            return None
        if doc["doc_id"] in self.built:
            self.warnings.append(f"{page.get('source', '?')}: duplicate page {doc['doc_id']} "
                                 f"({page.get('title')!r}); kept the first")
            return None
        doc["topic_bucket"] = topic_bucket(doc["categories"])
        doc["featured"] = self.featured is not None and (page["title"] in self.featured
                                                         or page.get("requested_title") in self.featured)
        self.built[doc["doc_id"]] = (doc, paras, secs)
        row = {"doc_id": doc["doc_id"], "title": page["title"], "source": doc["source"],
               "topic_bucket": doc["topic_bucket"], "featured": doc["featured"], **info}
        self.rows.append(row)
        return row


def _filter_tests(cand: pd.DataFrame, params: CorpusParams) -> dict[str, pd.Series]:
    """Each quality filter's pass/fail per candidate row, in funnel order."""
    return {
        "featured": cand["featured"] if params.require_featured else pd.Series(True, index=cand.index),
        "min_words": cand["n_words"] >= params.min_words,
        "min_heading_depth": cand["depth"] >= params.min_heading_depth,
        "min_sections": cand["n_sections"] >= params.min_sections,
    }


def _passing(cand: pd.DataFrame, params: CorpusParams) -> pd.Series:
    ok = pd.Series(True, index=cand.index)
    for passed in _filter_tests(cand, params).values():
        ok &= passed.astype(bool)
    return ok


def _target(params: CorpusParams) -> int:
    return params.target_docs if params.max_docs is None else min(params.target_docs,
                                                                             params.max_docs)


def _require_featured_list(params: CorpusParams, featured) -> None:
    if params.require_featured and featured is None:
        raise ValueError("corpus.require_featured is true but no Featured Article list was given "
                         "(corpus.featured_list: a TSV in the mirror, or 'api')")


def build_wikipedia(pages: Iterable[dict], params: CorpusParams, featured: set[str] | None = None,
                    warnings: list[str] | None = None) -> dict:
    """Normalise, filter, bucket and sample pages into the 01_corpus tables.

    ``params`` is the ``corpus`` section (min_words, min_heading_depth, min_sections, drop_sections,
    require_featured, seed, max_per_bucket, target_docs, max_docs). Returns ``{documents, paragraphs,
    sections_gold, corpus_funnel, stats}``; the funnel is cumulative in the order candidates → featured →
    min_words → min_heading_depth → min_sections → accepted (walk), and ``stats["pass_each"]`` holds each
    filter's count on its own.
    """
    warnings = [] if warnings is None else warnings
    _require_featured_list(params, featured)
    cands = _Candidates(params.drop_sections, featured, warnings)
    for page in pages:
        cands.add(page)
    return _finish(cands, params)


def _finish(cands: _Candidates, params: CorpusParams) -> dict:
    built = cands.built
    cand = pd.DataFrame(cands.rows, columns=_CANDIDATE_COLUMNS)
    tests = _filter_tests(cand, params)
    funnel = [{"step": "pages read (main namespace)", "count": cands.n_read},
              {"step": "candidates (not redirect, has prose)", "count": len(cand)}]
    ok = pd.Series(True, index=cand.index)
    for name, passed in tests.items():
        ok &= passed.astype(bool)
        funnel.append({"step": f"pass {name}" + ("" if name != "featured" or params.require_featured
                                                 else " (not required)"), "count": int(ok.sum())})
    passing = cand[ok].reset_index(drop=True)
    accepted = seeded_walk(passing, params.seed, params.max_per_bucket, _target(params))
    funnel.append({"step": "accepted (seeded bucket-capped walk)", "count": len(accepted)})

    docs = pd.DataFrame([built[d][0] for d in accepted["doc_id"]])
    if len(docs):
        docs["split"] = None
        docs["walk_rank"] = accepted["walk_rank"].to_numpy()
    else:
        docs = pd.DataFrame(columns=["doc_id", "title", "text", "source", "revision", "topic_bucket", "split",
                                     "n_words", "categories"])
    paras = (pd.concat([built[d][1] for d in accepted["doc_id"]], ignore_index=True) if len(accepted)
             else pd.DataFrame(columns=["doc_id", "para_idx", "start", "end"]))
    secs = (pd.concat([built[d][2] for d in accepted["doc_id"]], ignore_index=True) if len(accepted)
            else pd.DataFrame(columns=SECTION_COLUMNS))
    depth_dist = Counter(int(x) for x in accepted["depth"]) if len(accepted) else Counter()
    stats = {
        "pages_read": cands.n_read, "redirects": cands.n_redirect, "empty_pages": cands.n_empty,
        "candidates": len(cand),
        "pass_each": {k: int(v.sum()) for k, v in tests.items()},
        "passing_all_filters": len(passing),
        "accepted": len(accepted),
        "passing_per_bucket": {b: int((passing["topic_bucket"] == b).sum()) for b in BUCKETS},
        "per_bucket": {b: int((accepted["topic_bucket"] == b).sum()) for b in BUCKETS},
        "featured_in_accepted": int(accepted["featured"].sum()) if len(accepted) else 0,
        "mean_sections_per_doc": float(accepted["n_sections"].mean()) if len(accepted) else 0.0,
        "mean_words_per_doc": float(accepted["n_words"].mean()) if len(accepted) else 0.0,
        "depth_distribution": {str(k): v for k, v in sorted(depth_dist.items())},
        "residual_markup_repairs": int(accepted["residual_repairs"].sum()) if len(accepted) else 0,
        "dropped_tail_sections": dict(Counter(t for ts in accepted["dropped_sections"] for t in ts))
        if len(accepted) else {},
        "candidates_table": cand.drop(columns=["dropped_sections"]).to_dict("records"),
    }
    return {"documents": docs, "paragraphs": paras, "sections_gold": secs,
            "corpus_funnel": pd.DataFrame(funnel), "stats": stats}


def build_wikipedia_api(listed: dict[str, str], fetch: Callable[[list[str]], Iterable[dict]], params: CorpusParams,
                        featured: set[str] | None = None, warnings: list[str] | None = None,
                        batch_size: int = MAX_TITLES_PER_REQUEST, lazy: bool = True, progress: bool = False,
                        status: Callable[[], dict] | None = None) -> dict:
    """The 01_corpus tables of the listed pages (``{title: page id}``, e.g. the Featured Article list), fetched
    with ``fetch(titles) -> pages`` in :func:`walk_order`, ``batch_size`` titles at a time.

    ``lazy``: fetch a batch only when the walk reaches a page not yet fetched, and stop once the walk holds
    ``target_docs`` documents or every topic bucket is full. Because the walk order depends on the page ids
    alone (known from the list before any content) and each fetched page keeps its listed id, the pages
    fetched are a prefix of the walk order that contains every page the full walk would visit before it stops:
    the documents, paragraphs and sections are identical to fetching every listed page first (``lazy=False``),
    which the function checks. What differs is the funnel and the candidate statistics, which count the pages
    fetched; two funnel rows say how many were listed and fetched. ``progress`` shows a progress bar (accepted
    documents of the target when lazy, pages otherwise) with ``status()`` (e.g. request counts) as postfix.
    """
    from .. import progress as _progress

    warnings = [] if warnings is None else warnings
    _require_featured_list(params, featured)
    ids: dict[str, str] = {}
    for title, pid in listed.items():
        ids.setdefault(f"wiki:{pid}", title)
    order = walk_order(list(ids), params.seed)
    target, cap = _target(params), params.max_per_bucket
    cands = _Candidates(params.drop_sections, featured, warnings)
    passing: dict[str, str] = {}
    fetched = 0
    bar = _progress.bar(target if lazy else len(order), "Wikipedia walk (accepted)" if lazy else
                        "Wikipedia fetch (pages)", unit="doc" if lazy else "page", disable=not progress)

    def fetch_next() -> int:
        nonlocal fetched
        chunk = order[fetched:fetched + batch_size]
        rows = [r for r in (cands.add(p) for p in fetch([ids[d] for d in chunk])) if r is not None]
        if rows:
            df = pd.DataFrame(rows, columns=_CANDIDATE_COLUMNS)
            ok = _passing(df, params)
            passing.update(zip(df.loc[ok, "doc_id"], df.loc[ok, "topic_bucket"]))
        fetched += len(chunk)
        if status is not None:
            bar.set_postfix(pages=fetched, **status(), refresh=False)
        return len(chunk)

    accepted: list[str] = []
    try:
        if not lazy:
            while fetched < len(order):
                bar.update(fetch_next())
        else:
            counts: Counter = Counter()
            i = 0
            while i < len(order) and len(accepted) < target and any(counts[b] < cap for b in BUCKETS):
                if i == fetched:
                    fetch_next()
                d, i = order[i], i + 1
                b = passing.get(d)
                if b is None or counts[b] >= cap:
                    continue
                counts[b] += 1
                accepted.append(d)
                bar.update(1)
    finally:
        bar.close()
    out = _finish(cands, params)
    if lazy and out["documents"]["doc_id"].tolist() != accepted:
        raise RuntimeError("the lazy Wikipedia walk and the walk over the fetched pages disagree: "
                           f"{accepted[:5]}... vs {out['documents']['doc_id'].tolist()[:5]}... "
                           "(set corpus.api_fetch: all to fetch every listed page)")
    head = pd.DataFrame([{"step": "listed (titles with page ids)", "count": len(order)},
                         {"step": ("fetched (lazily, in walk order, until the walk was satisfied)" if lazy
                                   else "fetched (every listed page)"), "count": fetched}])
    out["corpus_funnel"] = pd.concat([head, out["corpus_funnel"]], ignore_index=True)
    out["stats"]["api_fetch"] = {"mode": "lazy" if lazy else "all", "listed": len(order), "fetched": fetched,
                                 "batch_size": batch_size}
    return out


# ------------------------------------------------------------------------------------ the kind's entry points

def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every local file :func:`build` reads: the exports of ``corpus.sources``
    (``corpus.sources``), a Featured Article TSV (``corpus.featured_list``) and revision pins
    (``corpus.api_revisions``). Pages fetched from the API are pinned by ``api_revisions``, not fingerprinted."""
    c = cfg.params("corpus")
    out = listed_sources(cfg)
    if c.featured_list and c.featured_list != "api":
        out.append(("corpus.featured_list", resolve_in_mirror(cfg, c.featured_list)))
    if c.api_revisions:
        out.append(("corpus.api_revisions", cast(Path, cfg.resolve_param("corpus.api_revisions"))))
    return out


def build(cfg: Config, session, warnings: list[str]) -> dict:
    """Wikipedia from the sources ``cfg`` names (:func:`_build`); a truncated or corrupt export raises
    :class:`~chunkstudy.corpus.sources.CorpusInputError` naming it, unless ``corpus.allow_partial``."""
    try:
        return _build(cfg, session, warnings)
    except WikiExportError as e:
        raise CorpusInputError(f"{e} (corpus.allow_partial: true keeps the pages read before it)") from None


def _build(cfg: Config, session, warnings: list[str]) -> dict:
    """Wikipedia from XML exports and/or the MediaWiki API.

    With no exports, the Featured Article list (``featured_list: api`` or a ``page_id<TAB>title`` TSV) is the
    candidate list: its pages are fetched in the seeded walk's order, ``api_batch_size`` per request, and with
    ``api_fetch: lazy`` only until the walk is satisfied (:func:`build_wikipedia_api`). Every page
    fetched is recorded as ``title<TAB>revid`` in ``api_revisions_out`` (default
    ``data/<corpus>/cache/mediawiki_api/api_revisions.tsv``) and a list fetched from the API beside it as
    ``<stem>_featured_list.tsv``, so a later run that names them in ``api_revisions`` and ``featured_list``
    fetches the same text of the same list.
    """
    c = cfg.params("corpus")
    client = None
    if c.api_titles or c.featured_list == "api" or (not c.sources and c.mirror is None):
        if session is None:
            import requests

            session = requests.Session()
        client = ApiClient(session, c.api_endpoint, artifacts.cache_dir(cfg, "mediawiki_api"),
                           c.api_rate_limit_s, user_agent=c.api_user_agent or "")
    featured = listed = None
    if c.featured_list == "api":
        listed = featured_ids_from_api(cast(ApiClient, client), progress=True)
    elif c.featured_list:
        listed = featured_ids_from_tsv(read_text(resolve_in_mirror(cfg, c.featured_list)))
    if listed is not None:
        featured = set(listed)
    sources = source_paths(cfg, session) if c.sources else []
    titles = list(c.api_titles)
    pins = {}
    if c.api_revisions:
        pins = read_revision_pins(read_text(cfg.resolve(c.api_revisions)))
    fetched: list[dict] = []

    def fetch(names: list[str], ids: dict | None = None) -> list[dict]:
        got = fetch_api_pages(names, cast(ApiClient, client), pins, warnings, page_ids=ids, batch_size=c.api_batch_size)
        fetched.extend({k: p[k] for k in ("title", "revision", "page_id")} for p in got)
        return got

    if not titles and not sources and listed is not None and client is not None:
        # the online path of the paper's spec: the Featured Article list, fetched in walk order
        out = build_wikipedia_api(
            listed, lambda names: fetch(names, listed), c, featured, warnings, batch_size=c.api_batch_size,
            lazy=c.api_fetch == "lazy", progress=True,
            status=lambda: {"requests": client.n_sent, "cached": client.n_cached})
    else:
        def pages():
            for p in sources:
                yield from iter_export(p, warnings, allow_partial=c.allow_partial)
            if titles:
                yield from fetch(titles)

        out = build_wikipedia(pages(), c, featured, warnings)
    out["stats"]["revisions"] = dict(zip(out["documents"].get("title", []), out["documents"].get("revision", [])))
    if client is not None:
        out["stats"]["api_requests"] = {"sent": client.n_sent, "cached": client.n_cached}
        # the record a rerun needs: revision pins of every fetched page, and a Featured list fetched online
        pins_out = (cfg.resolve(c.api_revisions_out) if c.api_revisions_out
                    else artifacts.cache_dir(cfg, "mediawiki_api") / "api_revisions.tsv")
        record = out["stats"]["api_record"] = {}
        for key, path, text in (
                ("api_revisions", pins_out, revision_pins_tsv(fetched) if fetched else None),
                ("featured_list", pins_out.with_name(f"{pins_out.stem}_featured_list.tsv"),
                 featured_tsv(listed) if listed and c.featured_list == "api" else None)):
            if text is not None:
                with artifacts.atomic_path(path) as tmp:
                    tmp.write_text(text, encoding="utf-8")
                inside = path.resolve().is_relative_to(cfg.root.resolve())  # stats.json stays portable
                record[key] = str(path.resolve().relative_to(cfg.root.resolve()) if inside else path)
    return out


#: ``corpus.kind: wikipedia``. It has no questions of its own: its queries are written (``queries.source:
#: generated``).
LOADER = CorpusLoader(
    kind="wikipedia",
    doc="MediaWiki XML exports (`.xml`, `.xml.bz2`) that `corpus.sources` names and/or pages of the MediaWiki API "
        "(`corpus.api_titles`, or the Featured Article list of `corpus.featured_list`)",
    parameters=("sources", "fetch_urls", "featured_list", "require_featured", "api_titles", "api_endpoint",
                "api_rate_limit_s", "api_revisions", "api_user_agent", "api_batch_size", "api_fetch",
                "api_revisions_out", "min_words", "min_heading_depth", "min_sections", "drop_sections", "target_docs",
                "max_per_bucket", "seed", "max_docs"),
    build=build, source_files=source_files)
