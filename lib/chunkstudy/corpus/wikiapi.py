"""The MediaWiki API side of the Wikipedia-FA corpus (:mod:`chunkstudy.corpus.wikipedia`): a polite, cached client
(:class:`ApiClient`: one request at a time, a User-Agent naming a contact, every raw response cached on disk by
endpoint and parameters), the queries with their continuations, page content up to 50 titles per request pinned
to revision ids (:func:`fetch_api_pages`), and the Featured Article list (from the API or a TSV file).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from .wikitext import is_redirect


#: Values one request may name in ``titles``, ``pageids`` or ``revids`` for an ordinary (non-bot) client. Content
#: of several pages comes back in one reply; when it outgrows the reply size limit the API stops early and says
#: where to go on (``continue``/``rvcontinue``), which :func:`query_pages` follows.
MAX_TITLES_PER_REQUEST = 50
#: ``gcmlimit`` for ordinary clients: members of the Featured Article category per listing request.
MAX_LIST_PER_REQUEST = 500

_CONTACT = re.compile(r"[^\s@()]+@[^\s@()]+\.[^\s@()]+|https?://\S+")


def _cache_key(endpoint: str, params: dict) -> str:
    """The cache file name of one request: the endpoint and every parameter (a reply of en.wikipedia.org is never
    served to a client of de.wikipedia.org)."""
    return hashlib.sha256(json.dumps({"endpoint": endpoint, "params": params}, sort_keys=True).encode()
                          ).hexdigest()[:24]


def check_user_agent(user_agent: str | None, key: str = "corpus.api_user_agent") -> str:
    """Return ``user_agent`` if it names a client and a contact (an e-mail address or a URL), as Wikimedia's
    User-Agent policy asks of every API client (https://meta.wikimedia.org/wiki/User-Agent_policy); else raise
    a ValueError naming ``key``.

    >>> check_user_agent("chunkstudy/0.1 (https://example.org/chunkstudy; me@example.org)")
    'chunkstudy/0.1 (https://example.org/chunkstudy; me@example.org)'
    """
    ua = (user_agent or "").strip()
    if not ua or not _CONTACT.search(ua) or not re.match(r"[A-Za-z0-9][\w.-]*/", ua):
        raise ValueError(
            f"{key}: {user_agent!r} does not identify the client. Wikimedia asks every API client for a User-Agent "
            "naming the tool and a contact (https://meta.wikimedia.org/wiki/User-Agent_policy), e.g. "
            "'chunkstudy/0.1 (you@example.org)' or 'chunkstudy/0.1 (https://your.project.page)'")
    return ua


@dataclass
class ApiClient:
    """A polite, caching MediaWiki API client.

    ``session`` is anything with ``get(url, params=..., headers=..., timeout=...)`` returning an object with
    ``json()`` and ``raise_for_status()`` (a ``requests.Session`` or a test fake). Raw responses are cached as
    ``<cache_dir>/<sha256(endpoint, params)>.json`` (written as each reply arrives); a cached request is never
    sent again. Between two sent requests the client waits at least ``rate_limit_s`` seconds, one request at a
    time. Every request carries ``user_agent``, which must name the client and a contact
    (:func:`check_user_agent`).
    """

    session: Any
    endpoint: str
    cache_dir: Path
    rate_limit_s: float = 1.0
    user_agent: str = ""
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    n_sent: int = 0
    n_cached: int = 0
    _last: float | None = field(default=None, repr=False)

    def get(self, params: dict) -> dict:
        params = {"format": "json", "formatversion": "2", **params}
        path = Path(self.cache_dir) / f"{_cache_key(self.endpoint, params)}.json"
        if path.is_file():
            self.n_cached += 1
            return json.loads(path.read_text())
        check_user_agent(self.user_agent)
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
            raise ValueError(f"MediaWiki API error from {self.endpoint} for {params}: {data['error']}")
        Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(path)
        return data


def query_continued(client: ApiClient, params: dict) -> Iterator[dict]:
    """Send ``params`` and follow the API's ``continue`` protocol (every value of the reply's ``continue`` goes
    back with the next request, unchanged, until a reply has none); yield each reply."""
    cont: dict = {}
    seen = set()
    while True:
        data = client.get({**params, **cont})
        yield data
        if "continue" not in data:
            return
        cont = {k: str(v) for k, v in data["continue"].items()}
        key = json.dumps(cont, sort_keys=True)
        if key in seen:
            raise ValueError(f"MediaWiki API {client.endpoint}: continuation repeats {cont} for {params}")
        seen.add(key)


def query_pages(client: ApiClient, params: dict) -> dict:
    """One ``action=query`` request with its continuations, the pages merged.

    With several pages per request the API spreads a page's data over the replies: content that does not fit one
    reply follows with ``rvcontinue``, categories past ``cllimit`` with ``clcontinue``, and every reply lists
    every page, with only what it carries. Returns ``{"pages": {key: page}, "normalized": {from: to},
    "redirects": {from: to}, "badrevids": set}``; ``key`` is the page id (``("title", t)`` for a missing page
    without one) and each page's ``revisions`` and ``categories`` are the union over the replies, in order.
    """
    pages: dict = {}
    out: dict[str, Any] = {"pages": pages, "normalized": {}, "redirects": {}, "badrevids": set()}
    for data in query_continued(client, params):
        q = data.get("query") or {}
        for n in q.get("normalized") or []:
            out["normalized"][n["from"]] = n["to"]
        for r in q.get("redirects") or []:
            out["redirects"][r["from"]] = r["to"]
        bad = q.get("badrevids") or {}
        out["badrevids"] |= {str(b.get("revid", k)) for k, b in (bad.items() if isinstance(bad, dict)
                                                                    else ((b.get("revid"), b) for b in bad))}
        for p in q.get("pages") or []:
            key = p["pageid"] if p.get("pageid") else ("title", p.get("title"))
            have = pages.setdefault(key, {k: v for k, v in p.items() if k not in ("revisions", "categories")})
            for name, ident in (("revisions", "revid"), ("categories", "title")):
                got = have.setdefault(name, [])
                known = {x.get(ident) for x in got}
                got.extend(x for x in p.get(name) or [] if x.get(ident) not in known)
    return out


#: The parameters of a content request: wikitext of the main slot, revision id and timestamp, and the page's
#: non-hidden categories (the topic buckets classify by those; the API knows the hidden flag, a dump does not).
CONTENT_PARAMS = {"action": "query", "prop": "revisions|categories", "rvprop": "ids|timestamp|content",
                  "rvslots": "main", "clshow": "!hidden", "cllimit": "max"}


def read_revision_pins(text: str) -> dict[str, str]:
    """Parse a ``title<TAB>revid`` TSV (header line optional) into ``{title: revid}``."""
    out = {}
    for line in text.splitlines():
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 2 and parts[1].strip().isdigit():
            out[parts[0].strip()] = parts[1].strip()
    return out


def revision_pins_tsv(pages: Iterable[dict]) -> str:
    """``title<TAB>revid<TAB>page_id`` lines (with a header) of fetched pages, in the order given: the file a
    later run names in ``corpus.api_revisions`` to fetch exactly these revisions again."""
    lines = ["title\trevid\tpage_id"]
    lines += [f"{p['title']}\t{p['revision']}\t{p.get('page_id', '')}" for p in pages if str(p.get("revision", ""))]
    return "\n".join(lines) + "\n"


def _api_page(page: dict, requested: str) -> dict:
    rev = page["revisions"][0]
    slot = (rev.get("slots") or {}).get("main") or {}
    text = slot.get("content", rev.get("content", ""))
    cats = [c["title"].split(":", 1)[1] for c in page.get("categories") or []]
    return {"title": page.get("title", requested), "page_id": str(page.get("pageid", "")),
            "revision": str(rev.get("revid", "")), "timestamp": rev.get("timestamp", ""), "wikitext": text,
            "source": "api", "redirect": is_redirect(text), "categories": cats, "requested_title": requested}


def _fetch_batch(batch: list[str], client: ApiClient, revisions: dict, page_ids: dict) -> dict[str, dict | str]:
    """``{title: page dict or the reason it is not there}`` for at most one request's worth of titles."""
    got: dict[str, dict | str] = {}
    pinned = [t for t in batch if t in revisions]
    by_id = [t for t in batch if t not in revisions and t in page_ids]
    by_title = [t for t in batch if t not in revisions and t not in page_ids]
    if pinned:
        res = query_pages(client, {**CONTENT_PARAMS, "revids": "|".join(str(revisions[t]) for t in pinned)})
        by_rev = {str(r.get("revid")): p for p in res["pages"].values() for r in p.get("revisions") or []}
        for t in pinned:
            rid = str(revisions[t])
            page = by_rev.get(rid)
            if page is None:
                got[t] = f"pinned revision {rid} is missing or deleted"
            elif t in page_ids and str(page.get("pageid")) != str(page_ids[t]):
                got[t] = (f"pinned revision {rid} belongs to page {page.get('pageid')}, not to the listed page "
                          f"{page_ids[t]}")
            else:
                got[t] = {**page, "revisions": [r for r in page["revisions"] if str(r.get("revid")) == rid]}
    if by_id:
        res = query_pages(client, {**CONTENT_PARAMS, "pageids": "|".join(str(page_ids[t]) for t in by_id)})
        for t in by_id:
            got[t] = res["pages"].get(int(page_ids[t])) or res["pages"].get(str(page_ids[t])) or "not returned"
    if by_title:
        res = query_pages(client, {**CONTENT_PARAMS, "titles": "|".join(by_title), "redirects": "1"})
        by_name = {p.get("title"): p for p in res["pages"].values()}
        for t in by_title:
            name = res["normalized"].get(t, t)
            name = res["redirects"].get(name, name)
            got[t] = by_name.get(name) or "not returned"
    return got


def fetch_api_pages(titles: Iterable[str], client: ApiClient, revisions: dict[str, str] | None = None,
                    warnings: list[str] | None = None, page_ids: dict[str, str] | None = None,
                    batch_size: int = MAX_TITLES_PER_REQUEST) -> list[dict]:
    """Fetch wikitext, non-hidden categories and revision id of each title, ``batch_size`` titles per request
    (plus the continuations the API asks for), in the order given.

    A title pinned in ``revisions`` is fetched at that revision (``revids=``), so a rerun gets the same text; a
    title with a page id in ``page_ids`` (the Featured Article list gives them) is fetched by id (``pageids=``),
    so its document id is known before its content; any other title by name, following redirects. A missing
    page gives a warning naming the title (raised when ``warnings`` is None). Pages come back in the shape of
    :func:`iter_export` plus ``categories`` and ``requested_title``.
    """
    if not 1 <= int(batch_size) <= MAX_TITLES_PER_REQUEST:
        raise ValueError(f"corpus.api_batch_size: {batch_size} is outside 1..{MAX_TITLES_PER_REQUEST} (titles per "
                         "MediaWiki API request for an ordinary client)")
    revisions, page_ids, titles = revisions or {}, page_ids or {}, list(titles)
    out = []
    for start in range(0, len(titles), batch_size):
        batch = titles[start:start + batch_size]
        got = _fetch_batch(batch, client, revisions, page_ids)
        for title in batch:
            page = got.get(title, "not returned")
            if isinstance(page, dict) and (page.get("missing") or page.get("invalid") or not page.get("revisions")):
                page = "missing or has no revision"
            if isinstance(page, str):
                msg = f"MediaWiki API: page {title!r}: {page}"
                if warnings is None:
                    raise ValueError(msg)
                warnings.append(msg)
                continue
            out.append(_api_page(page, title))
    return out


def featured_ids_from_api(client: ApiClient, category: str = "Category:Featured articles",
                          progress: bool = False) -> dict[str, str]:
    """``{article title: page id}`` of the members of ``category``, in the API's order.

    Listed with ``generator=categorymembers`` (500 per request) and ``prop=info&inprop=subjectid``: a member that
    is a talk page (``Talk:X``) stands for its article, whose page id is the talk page's ``subjectid``; the ids
    let the seeded walk order the articles before any content is fetched. ``progress`` shows a progress counter (:mod:`chunkstudy.progress`).
    """
    from .. import progress as _progress

    out: dict[str, str] = {}
    params = {"action": "query", "generator": "categorymembers", "gcmtitle": category,
              "gcmlimit": str(MAX_LIST_PER_REQUEST), "prop": "info", "inprop": "subjectid"}
    with _progress.bar(None, f"listing {category}", unit="title", disable=not progress) as bar:
        for data in query_continued(client, params):
            members = (data.get("query") or {}).get("pages") or []
            for m in sorted(members, key=lambda p: p.get("title", "")):
                title, ns = m["title"], int(m.get("ns", 0))
                if ns % 2 == 1:  # a talk namespace: the member stands for its subject page
                    title, pid = title.split(":", 1)[1], m.get("subjectid")
                else:
                    pid = m.get("pageid")
                if pid and title not in out:
                    out[title] = str(pid)
            bar.update(len(members))
    return out


def featured_ids_from_tsv(text: str) -> dict[str, str]:
    """``{title: page_id}`` from a ``page_id<TAB>title`` list (a header line is skipped)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].strip().isdigit():
            out[parts[1].strip()] = parts[0].strip()
    return out


def featured_tsv(listed: dict[str, str]) -> str:
    """``page_id<TAB>title`` lines (with a header) of a Featured Article list: the format ``corpus.featured_list``
    reads, so a later run can walk exactly the list this one walked."""
    return "page_id\ttitle\n" + "".join(f"{pid}\t{t}\n" for t, pid in sorted(listed.items()))
