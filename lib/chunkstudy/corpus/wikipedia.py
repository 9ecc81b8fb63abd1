"""Wikipedia-FA: MediaWiki XML exports and the MediaWiki API in, normalised documents, filters, topic buckets and
the seeded, bucket-capped sample out (paper, data section and appendix "Topic buckets").

Sources (issue 3):

* :func:`iter_export` streams a MediaWiki XML export (``.xml`` or ``.xml.bz2``; a full dump works because pages
  are parsed one by one with ``iterparse`` and cleared). Main namespace only; redirects are skipped.
* :func:`fetch_api_pages` fetches wikitext, categories and revision ids from the MediaWiki API with a polite
  rate limit; every raw response is cached on disk (a folder the caller gives), and a ``title -> revid`` pin
  makes a rerun fetch exactly the same revisions.

A page becomes a document through the one canonical normaliser (:mod:`chunkstudy.corpus.wikitext`).
"""

from __future__ import annotations

import bz2
import hashlib
import json
import random
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pandas as pd

from .model import SECTION_COLUMNS, DocumentBuilder, depth
from .wikitext import categories as page_categories
from .wikitext import is_maintenance_category, is_redirect, normalise

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


class ExportError(ValueError):
    """A MediaWiki export is truncated, corrupt or not valid UTF-8 (the message names the file)."""


def iter_export(path: str | Path, warnings: list[str] | None = None, name: str | None = None,
                allow_partial: bool = False) -> Iterator[dict]:
    """Stream the main-namespace, non-redirect pages of a MediaWiki XML export (``.xml`` or ``.xml.bz2``).

    Yields ``{title, page_id, revision, timestamp, wikitext, source}`` (ids as strings). A truncated, corrupt or
    undecodable file raises :class:`ExportError` naming the file, once the pages before the damage are yielded;
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
            raise ExportError(msg) from e
        warnings.append(msg + "; kept the pages read before it (corpus.allow_partial)")


# ------------------------------------------------------------------------------------------- MediaWiki API

def _cache_key(params: dict) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:24]


@dataclass
class ApiClient:
    """A polite, caching MediaWiki API client.

    ``session`` is anything with ``get(url, params=..., headers=..., timeout=...)`` returning an object with
    ``json()`` and ``raise_for_status()`` (a ``requests.Session`` or a test fake). Raw responses are cached as
    ``<cache_dir>/<sha256(params)>.json``; a cached request is never sent again. Between two sent requests the
    client waits at least ``rate_limit_s`` seconds.
    """

    session: object
    endpoint: str
    cache_dir: Path
    rate_limit_s: float = 1.0
    user_agent: str = "chunkstudy/0.1 (research reproduction; https://github.com/)"
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    n_sent: int = 0
    n_cached: int = 0
    _last: float | None = field(default=None, repr=False)

    def get(self, params: dict) -> dict:
        params = {"format": "json", "formatversion": "2", **params}
        path = Path(self.cache_dir) / f"{_cache_key(params)}.json"
        if path.is_file():
            self.n_cached += 1
            return json.loads(path.read_text())
        if self._last is not None:
            wait = self.rate_limit_s - (self.clock() - self._last)
            if wait > 0:
                self.sleep(wait)
        resp = self.session.get(self.endpoint, params=params, headers={"User-Agent": self.user_agent}, timeout=60)
        self._last = self.clock()
        self.n_sent += 1
        resp.raise_for_status()
        data = resp.json()
        if "error" in data:
            raise ValueError(f"MediaWiki API error for {params}: {data['error']}")
        Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(path)
        return data


def read_revision_pins(text: str) -> dict[str, str]:
    """Parse a ``title<TAB>revid`` TSV (header line optional) into ``{title: revid}``."""
    out = {}
    for line in text.splitlines():
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 2 and parts[1].strip().isdigit():
            out[parts[0].strip()] = parts[1].strip()
    return out


def fetch_api_pages(titles: Iterable[str], client: ApiClient, revisions: dict[str, str] | None = None,
                    warnings: list[str] | None = None) -> list[dict]:
    """Fetch wikitext, non-hidden categories and revision id for each title (one request per title).

    With a pin in ``revisions`` the request asks for that revision id (``revids=``) so a rerun fetches the same
    text; otherwise the latest revision is fetched and its id recorded. Categories come from
    ``prop=categories&clshow=!hidden`` (the API knows the hidden flag). A missing page gives a warning naming
    the title. Pages come back in the same shape as :func:`iter_export` plus ``categories``.
    """
    revisions = revisions or {}
    out = []
    for title in titles:
        params = {"action": "query", "prop": "revisions|categories", "rvprop": "ids|timestamp|content",
                  "rvslots": "main", "clshow": "!hidden", "cllimit": "max", "redirects": "1"}
        if title in revisions:
            params["revids"] = str(revisions[title])
        else:
            params["titles"] = title
        data = client.get(params)
        pages = (data.get("query") or {}).get("pages") or []
        page = pages[0] if pages else {}
        if not page or page.get("missing") or page.get("invalid") or not page.get("revisions"):
            msg = f"MediaWiki API: page {title!r} is missing or has no revision"
            if warnings is None:
                raise ValueError(msg)
            warnings.append(msg)
            continue
        rev = page["revisions"][0]
        slot = (rev.get("slots") or {}).get("main") or {}
        text = slot.get("content", rev.get("content", ""))
        cats = [c["title"].split(":", 1)[1] for c in page.get("categories") or []]
        out.append({"title": page.get("title", title), "page_id": str(page.get("pageid", "")),
                    "revision": str(rev.get("revid", "")), "timestamp": rev.get("timestamp", ""),
                    "wikitext": text, "source": "api", "redirect": False, "categories": cats})
    return out


def featured_from_api(client: ApiClient, category: str = "Category:Featured articles") -> list[str]:
    """Article titles in ``Category:Featured articles`` (its members are talk pages; ``Talk:`` is removed)."""
    titles, cont = [], {}
    while True:
        data = client.get({"action": "query", "list": "categorymembers", "cmtitle": category, "cmlimit": "500",
                           **cont})
        for m in (data.get("query") or {}).get("categorymembers", []):
            t = m["title"]
            titles.append(t.split(":", 1)[1] if t.startswith("Talk:") else t)
        if "continue" not in data:
            return titles
        cont = {k: v for k, v in data["continue"].items() if k != "continue"}


def featured_from_tsv(text: str) -> set[str]:
    """Titles from the mirror's ``page_id<TAB>title`` list (a header line is skipped)."""
    out = set()
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].strip().isdigit():
            out.add(parts[1].strip())
    return out


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
    report = normalise(page["wikitext"], builder, drop_sections)
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

    Candidates (columns ``doc_id``, ``topic_bucket``) are sorted by ``doc_id`` and shuffled with
    ``random.Random(seed)``; the walk accepts a candidate unless its bucket already holds ``max_per_bucket``
    documents, and stops at ``target``. No minimum per bucket, no round-robin. Returns the accepted rows in walk
    order with a ``walk_rank`` column.
    """
    order = sorted(candidates["doc_id"].tolist())
    random.Random(seed).shuffle(order)
    by_id = candidates.set_index("doc_id")
    counts: Counter = Counter()
    keep = []
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


def build_wikipedia(pages: Iterable[dict], params: dict, featured: set[str] | None = None,
                    warnings: list[str] | None = None) -> dict:
    """Normalise, filter, bucket and sample pages into the 01_corpus tables.

    ``params`` is the ``corpus`` section (min_words, min_heading_depth, min_sections, drop_sections,
    require_featured, seed, max_per_bucket, target_docs, max_docs). Returns ``{documents, paragraphs,
    sections_gold, corpus_funnel, stats}``; the funnel is cumulative in the order candidates → featured →
    min_words → min_heading_depth → min_sections → accepted (walk), and ``stats["pass_each"]`` holds each
    filter's count on its own.
    """
    warnings = [] if warnings is None else warnings
    if params["require_featured"] and featured is None:
        raise ValueError("corpus.require_featured is true but no Featured Article list was given "
                         "(corpus.featured_list: a TSV in the mirror, or 'api')")
    drop = params["drop_sections"]
    rows, built = [], {}
    n_read = n_redirect = n_empty = 0
    for page in pages:
        n_read += 1
        if page.get("redirect"):
            n_redirect += 1
            continue
        if not (page.get("wikitext") or "").strip():
            n_empty += 1
            warnings.append(f"{page.get('source', '?')}: page {page.get('title')!r} has no text; skipped")
            continue
        doc, paras, secs, info = page_document(page, drop)
        if not len(paras):
            n_empty += 1
            warnings.append(f"{page.get('source', '?')}: page {page.get('title')!r} has no prose after "
                            "normalisation; skipped")
            continue
        if doc["doc_id"] in built:
            warnings.append(f"{page.get('source', '?')}: duplicate page {doc['doc_id']} ({page.get('title')!r}); "
                            "kept the first")
            continue
        doc["topic_bucket"] = topic_bucket(doc["categories"])
        doc["featured"] = featured is not None and page["title"] in featured
        built[doc["doc_id"]] = (doc, paras, secs)
        rows.append({"doc_id": doc["doc_id"], "title": page["title"], "source": doc["source"],
                     "topic_bucket": doc["topic_bucket"], "featured": doc["featured"], **info})
    cand = pd.DataFrame(rows, columns=["doc_id", "title", "source", "topic_bucket", "featured", "n_words",
                                       "n_sections", "depth", "n_paragraphs", "residual_repairs",
                                       "dropped_sections"])
    tests = {
        "featured": cand["featured"] if params["require_featured"] else pd.Series(True, index=cand.index),
        "min_words": cand["n_words"] >= params["min_words"],
        "min_heading_depth": cand["depth"] >= params["min_heading_depth"],
        "min_sections": cand["n_sections"] >= params["min_sections"],
    }
    funnel = [{"step": "pages read (main namespace)", "count": n_read},
              {"step": "candidates (not redirect, has prose)", "count": len(cand)}]
    ok = pd.Series(True, index=cand.index)
    for name, passed in tests.items():
        ok &= passed.astype(bool)
        funnel.append({"step": f"pass {name}" + ("" if name != "featured" or params["require_featured"]
                                                 else " (not required)"), "count": int(ok.sum())})
    passing = cand[ok].reset_index(drop=True)
    target = params["target_docs"] if params.get("max_docs") is None else min(params["target_docs"],
                                                                               params["max_docs"])
    accepted = seeded_walk(passing, params["seed"], params["max_per_bucket"], target)
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
        "pages_read": n_read, "redirects": n_redirect, "empty_pages": n_empty, "candidates": len(cand),
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
