"""An in-memory fake of the MediaWiki Action API (``action=query``) for the Wikipedia fetch tests.

It answers what :mod:`chunkstudy.corpus.wikipedia` asks, with the rules of the real API for an ordinary (non-bot)
client, and counts every request:

* the Featured Article list: ``generator=categorymembers`` over talk pages (``Talk:X``) with ``prop=info&
  inprop=subjectid`` (and plain ``list=categorymembers``), at most 500 per reply, continued with
  ``gcmcontinue``/``cmcontinue``;
* content: ``prop=revisions|categories&rvprop=ids|timestamp|content&rvslots=main`` for at most 50 ``titles``,
  ``pageids`` or ``revids`` (more is an error here; the real API warns and drops the rest). Revisions come in
  page-id order (revision-id order for ``revids``) until the reply's content budget (``max_result_chars``, the
  real API's result size limit) is spent, then ``rvcontinue``; categories of all pages together at most
  ``cllimit`` (500 for ``max``), then ``clcontinue``; ``clshow=!hidden`` leaves out hidden categories. The
  ``continue`` value names the finished modules after ``||`` and a continued request skips them, as the real
  API does; every reply lists every page of the request, with only what that reply carries;
* ``titles`` are normalised (``_`` → space, first letter upper-cased) and, with ``redirects``, redirects are
  followed; a missing page is ``{"title": ..., "missing": true}`` (``{"pageid": ..., "missing": true}`` by id) and
  an unknown revision id goes to ``badrevids``;
* a request without a User-Agent naming a contact gets HTTP 403, as Wikimedia answers.

:func:`synthetic_wiki` builds a wiki of Featured Articles with real-looking, seeded wikitext (lead, infobox,
references, nested sections, lists, a reference tail, categories per topic, hidden tracking categories), or with
the texts of real pages given to it.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field
from typing import Callable

FEATURED = "Category:Featured articles"
_CONTACT = re.compile(r"@|https?://")


@dataclass
class FakePage:
    page_id: int
    title: str
    revisions: dict  # revid -> wikitext, or a callable returning it (generated on first use); the last is latest
    categories: list = field(default_factory=list)  # visible
    hidden: list = field(default_factory=list)
    talk_id: int = 0
    featured: bool = True
    redirect_to: str | None = None
    topic: str = ""  # the topic bucket the page was generated for

    def text(self, revid: int) -> str:
        t = self.revisions[revid]
        if callable(t):
            t = self.revisions[revid] = t()
        return t

    @property
    def latest(self) -> int:
        return max(self.revisions)


class FakeResponse:
    def __init__(self, data: dict, status: int = 200):
        self.data, self.status_code = data, status

    def raise_for_status(self):
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}: {self.data}")

    def json(self):
        return self.data


class FakeWiki:
    """A ``requests.Session`` stand-in: ``get(url, params=..., headers=..., timeout=...)``."""

    def __init__(self, pages: list[FakePage], max_result_chars: int = 8 * 1024 * 1024, category: str = FEATURED):
        self.pages = {p.page_id: p for p in pages}
        self.by_title = {p.title: p for p in pages}
        self.by_rev = {r: p for p in pages for r in p.revisions}
        self.max_result_chars = max_result_chars
        self.category = category
        self.calls: list[dict] = []
        self.headers: list[dict] = []

    # -- counts
    @property
    def n_requests(self) -> int:
        return len(self.calls)

    def n_content_requests(self) -> int:
        return sum(1 for c in self.calls if "revisions" in c.get("prop", ""))

    def n_list_requests(self) -> int:
        return sum(1 for c in self.calls if "categorymembers" in (c.get("generator", ""), c.get("list", "")))

    # -- the API
    def get(self, url, params=None, headers=None, timeout=None):
        params = {k: str(v) for k, v in (params or {}).items()}
        self.calls.append(params)
        self.headers.append(dict(headers or {}))
        if not _CONTACT.search((headers or {}).get("User-Agent", "")):
            return FakeResponse({"error": "Please set a user-agent and respect our robot policy"}, 403)
        if params.get("format") != "json" or params.get("formatversion") != "2" or params.get("action") != "query":
            return _error("badparams", "this fake answers action=query&format=json&formatversion=2 only")
        if "categorymembers" in (params.get("generator"), params.get("list")):
            return self._members(params)
        if "revisions" in params.get("prop", "").split("|"):
            return self._content(params)
        return _error("badparams", f"unsupported request {params}")

    def _members(self, p: dict) -> FakeResponse:
        gen = p.get("generator") == "categorymembers"
        pre = "gcm" if gen else "cm"
        if p.get(f"{pre}title") != self.category:
            return FakeResponse({"batchcomplete": True, "query": {"pages" if gen else "categorymembers": []}})
        limit = p.get(f"{pre}limit", "10")
        limit = 500 if limit == "max" else int(limit)
        if limit > 500:
            return _error("toomanyvalues", f"{pre}limit may not be over 500 for ordinary clients")
        members = sorted((pg for pg in self.pages.values() if pg.featured), key=lambda pg: pg.title)
        start = int(p.get(f"{pre}continue", "0"))
        chunk = members[start:start + limit]
        out: dict = {}
        if start + limit < len(members):
            out["continue"] = {f"{pre}continue": str(start + limit), "continue": f"{pre}continue||" if gen else "-||"}
        else:
            out["batchcomplete"] = True
        if gen:
            rows = [{"pageid": pg.talk_id, "ns": 1, "title": f"Talk:{pg.title}", "contentmodel": "wikitext"}
                    for pg in chunk]
            if "subjectid" in p.get("inprop", "").split("|"):
                for r, pg in zip(rows, chunk):
                    r["subjectid"] = pg.page_id
            out["query"] = {"pages": sorted(rows, key=lambda r: r["pageid"])}
        else:
            out["query"] = {"categorymembers": [{"pageid": pg.talk_id, "ns": 1, "title": f"Talk:{pg.title}"}
                                                for pg in chunk]}
        return FakeResponse(out)

    def _content(self, p: dict) -> FakeResponse:
        modes = [m for m in ("titles", "pageids", "revids") if m in p]
        if len(modes) != 1:
            return _error("invalidparammix", "exactly one of titles, pageids, revids")
        mode = modes[0]
        values = [v for v in p[mode].split("|") if v]
        if len(values) > 50:
            return _error("toomanyvalues", f"Too many values supplied for parameter \"{mode}\". The limit is 50.")
        if not {"ids", "content"} <= set(p.get("rvprop", "").split("|")) or p.get("rvslots") != "main":
            return _error("badparams", "this fake expects rvprop with ids|content and rvslots=main")
        q: dict = {}
        listed: list[dict] = []  # every page of the request, in reply order
        pageset: list[FakePage] = []
        rows: list[tuple[FakePage, int]] = []
        if mode == "titles":
            for raw in values:
                t = raw.replace("_", " ").strip()
                t = t[:1].upper() + t[1:]
                if t != raw:
                    q.setdefault("normalized", []).append({"fromencoded": False, "from": raw, "to": t})
                pg = self.by_title.get(t)
                if pg is not None and pg.redirect_to and p.get("redirects"):
                    q.setdefault("redirects", []).append({"from": t, "to": pg.redirect_to})
                    pg = self.by_title.get(pg.redirect_to)
                if pg is None:
                    listed.append({"ns": 0, "title": t, "missing": True})
                elif pg not in pageset:
                    pageset.append(pg)
            rows = [(pg, pg.latest) for pg in sorted(pageset, key=lambda x: x.page_id)]
        elif mode == "pageids":
            for v in values:
                pg = self.pages.get(int(v))
                if pg is None:
                    listed.append({"pageid": int(v), "missing": True})
                elif pg not in pageset:
                    pageset.append(pg)
            rows = [(pg, pg.latest) for pg in sorted(pageset, key=lambda x: x.page_id)]
        else:
            for v in sorted({int(v) for v in values}):
                pg = self.by_rev.get(v)
                if pg is None:
                    q.setdefault("badrevids", {})[str(v)] = {"revid": v, "missing": True}
                    continue
                rows.append((pg, v))
                if pg not in pageset:
                    pageset.append(pg)
        pages = {pg.page_id: {"pageid": pg.page_id, "ns": 0, "title": pg.title} for pg in
                 sorted(pageset, key=lambda x: x.page_id)}
        cont = p.get("continue", "")
        done = set(cont.split("||", 1)[1].split("|")) - {""} if "||" in cont else set()
        out: dict = {}
        more: dict = {}
        if "revisions" not in done:
            if "rvcontinue" in p:
                key = (tuple(int(x) for x in p["rvcontinue"].split("|")) if mode != "revids"
                       else int(p["rvcontinue"]))
                rows = [r for r in rows if ((r[0].page_id, r[1]) if mode != "revids" else r[1]) >= key]
            used = 0
            for i, (pg, rid) in enumerate(rows):
                text = pg.text(rid)
                if i and used + len(text) > self.max_result_chars:
                    more["rvcontinue"] = f"{pg.page_id}|{rid}" if mode != "revids" else str(rid)
                    break
                used += len(text)
                pages[pg.page_id].setdefault("revisions", []).append(
                    {"revid": rid, "parentid": rid - 1, "timestamp": f"2024-01-{1 + rid % 28:02d}T00:00:00Z",
                     "slots": {"main": {"contentmodel": "wikitext", "contentformat": "text/x-wiki",
                                        "content": text}}})
        if "categories" in p.get("prop", "").split("|") and "categories" not in done:
            limit = p.get("cllimit", "10")
            limit = 500 if limit == "max" else int(limit)
            if limit > 500:
                return _error("toomanyvalues", "cllimit may not be over 500 for ordinary clients")
            show = p.get("clshow", "")
            cats = []
            for pg in sorted(pageset, key=lambda x: x.page_id):
                names = (pg.categories if show == "!hidden" else pg.hidden if show == "hidden"
                         else pg.categories + pg.hidden)
                cats += [(pg.page_id, c.replace(" ", "_")) for c in sorted(set(names))]
            cats.sort()
            if "clcontinue" in p:
                a, b = p["clcontinue"].split("|", 1)
                cats = [c for c in cats if c >= (int(a), b)]
            for pid, c in cats[:limit]:
                pages[pid].setdefault("categories", []).append({"ns": 14, "title": "Category:" + c.replace("_", " ")})
            if len(cats) > limit:
                pid, c = cats[limit]
                more["clcontinue"] = f"{pid}|{c}"
        if more:
            going = {"revisions": "rvcontinue", "categories": "clcontinue"}
            finished = [m for m in p.get("prop", "").split("|") if going.get(m) not in more]
            more["continue"] = "||" + "|".join(finished)
            out["continue"] = more
        else:
            out["batchcomplete"] = True
        q["pages"] = list(pages.values()) + listed
        out["query"] = q
        return FakeResponse(out)


def _error(code: str, info: str) -> FakeResponse:
    return FakeResponse({"error": {"code": code, "info": info}})


# ------------------------------------------------------------------------------------------ synthetic pages

#: category templates per topic bucket; ``{}`` takes a seeded filler. Each resolves to its bucket under
#: chunkstudy's keyword table (``synthetic_wiki`` checks that).
TOPIC_CATEGORIES = {
    "history_war": ["Battles of the {} War", "Military history of {}", "Conflicts in 17{}", "Sieges involving {}"],
    "biography": ["18{} births", "19{} deaths", "Novelists from {}", "Politicians of {}"],
    "science_nature": ["Birds described in 18{}", "Endemic fauna of {}", "Chemical compounds of {}",
                       "Mammals of {}"],
    "arts_media": ["19{} films", "English-language albums of {}", "Novels set in {}", "Television series of {}"],
    "geography_places": ["Rivers of {}", "Populated places in {}", "Islands of {}", "Mountains of {}"],
    "other": ["Sports clubs of {}", "Cuisine of {}", "Companies based in {}", "Festivals in {}"],
}
TOPIC_WEIGHTS = {"history_war": 30, "biography": 14, "science_nature": 10, "arts_media": 14,
                 "geography_places": 10, "other": 22}
HIDDEN = ["Articles with short description", "Use dmy dates from May 2019", "Biography with signature",
          "Coordinates not on Wikidata", "EngvarB from March 2020"]
PLACES = ["Morvania", "Velna", "Tarrow", "Brennholt", "Orlen", "Kessel", "Halcyon", "Saltmarsh", "Ivory Coastline",
          "Eastmarch"]
WORDS = ("the of and a in to was is for on as by with from at that his her which were it an be this are had its "
         "first after two new city river war army king church year years during between under three later south "
         "north east west over into most when where who more time built early known named both began while "
         "government population century region people many local national college battle island mountain "
         "species album film novel season court council bridge railway station harbour village fort castle "
         "province county emperor campaign expedition treaty museum library school university company market "
         "festival record single chart tour critics reviews construction design engine route service").split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 22))]
    if rng.random() < 0.3:
        i = rng.randrange(len(words))
        words[i] = f"[[{words[i].capitalize()} {rng.choice(PLACES)}|{words[i]}]]"
    s = " ".join(words)
    return s[0].upper() + s[1:] + "."


def _paragraph(rng: random.Random, n_words: int) -> str:
    out, count = [], 0
    while count < n_words:
        s = _sentence(rng)
        if rng.random() < 0.25:
            book = f"{rng.choice(WORDS).title()} of {rng.choice(PLACES)}"
            s += f"<ref>{{{{cite book|title={book}|year=19{rng.randint(10, 99)}}}}}</ref>"
        out.append(s)
        count += len(s.split())
    return " ".join(out)


def synthetic_wikitext(rng: random.Random, title: str, categories: list[str], n_words: int, n_sections: int,
                       max_level: int) -> str:
    """A Featured-Article-shaped page: infobox, bold lead, ``n_sections`` top-level sections (the first ones
    carrying subsections down to heading level ``max_level``: 2 = ``==`` only, 4 = ``====``), about ``n_words``
    words of prose with links and references, a list, a reference tail and the category links."""
    parts = [f"{{{{Infobox {rng.choice(['settlement', 'military conflict', 'person', 'album'])}"
             f"|name={title}|date=17{rng.randint(10, 99)}}}}}",
             f"'''{title}''' " + _paragraph(rng, 40)[0].lower() + _paragraph(rng, 40)[1:]]
    headings = []
    for i in range(n_sections):
        headings.append((2, f"{rng.choice(WORDS).title()} {rng.choice(WORDS)} {i}"))
        if i < 2 and max_level >= 3:
            headings.append((3, f"{rng.choice(WORDS).title()} {i}a"))
            if max_level >= 4:
                headings.append((4, f"{rng.choice(WORDS).title()} {i}b"))
    per = max(20, n_words // max(1, len(headings)))
    for level, name in headings:
        parts.append(f"{'=' * level} {name} {'=' * level}")
        for _ in range(rng.randint(1, 3)):
            parts.append(_paragraph(rng, per // 2))
        if rng.random() < 0.15:
            parts.append("\n".join(f"* {_sentence(rng)}" for _ in range(3)))
    parts += ["== See also ==", f"* [[{rng.choice(PLACES)}]]", "== References ==", "{{reflist}}",
              "== External links ==", f"* [https://example.org/{title.replace(' ', '_')} Official site]"]
    parts += [f"[[Category:{c}]]" for c in categories]
    return "\n\n".join(parts)


def synthetic_wiki(n: int, seed: int = 1, words: tuple[int, int] = (800, 5000), sections: tuple[int, int] = (6, 20),
                   deep_share: float = 0.7, texts: list[str] | None = None, max_result_chars: int = 8 * 1024 * 1024,
                   extra_revision_share: float = 0.2) -> FakeWiki:
    """A fake wiki of ``n`` Featured Articles (page ids 1000+, talk pages 900000+), each seeded by its index.

    Topic buckets follow :data:`TOPIC_WEIGHTS`; 5-16 visible categories and 1-3 hidden ones per page (hidden
    "Biography with signature" on some non-biographies: a client that kept hidden categories would bucket those
    as biographies). Sizes are drawn from ``words`` and ``sections``; ``deep_share`` of the pages reach heading
    level 4 (depth 3). With ``texts`` (e.g. real pages from an export), page ``i`` carries ``texts[i % len]`` as
    its content instead. Some pages get an older revision too, for pinned fetches.
    """
    from chunkstudy.corpus.wikipedia import topic_bucket
    from chunkstudy.corpus.wikitext import categories as page_categories
    from chunkstudy.corpus.wikitext import is_maintenance_category

    pages = []
    text_categories: dict[int, list[str]] = {}
    topics, weights = zip(*TOPIC_WEIGHTS.items())
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        topic = rng.choices(topics, weights)[0]
        cats = sorted({rng.choice(TOPIC_CATEGORIES[topic]).format(rng.choice(PLACES) if rng.random() < 0.5
                                                                  else rng.randint(10, 99))
                       for _ in range(rng.randint(5, 16))})
        assert topic_bucket(cats) == topic, (cats, topic)
        hidden = rng.sample(HIDDEN[:2] + HIDDEN[3:], rng.randint(1, 2))
        if topic not in ("biography", "history_war") and rng.random() < 0.5:
            hidden.append("Biography with signature")
        title = f"{rng.choice(PLACES)} {rng.choice(WORDS).title()} {i}"
        page_id = 1000 + i
        latest = 500_000 + 10 * i
        if texts:
            make: Callable[[], str] | str = texts[i % len(texts)]
            if i % len(texts) not in text_categories:
                text_categories[i % len(texts)] = page_categories(make, drop_maintenance=False)
            every = text_categories[i % len(texts)]
            cats = [c for c in every if not is_maintenance_category(c)]
            hidden, topic = [c for c in every if c not in cats], topic_bucket(cats)
        else:
            nw, ns = rng.randint(*words), rng.randint(*sections)
            level = 4 if rng.random() < deep_share else rng.choice([2, 3])
            sub = random.Random(rng.random())
            make = functools.partial(synthetic_wikitext, sub, title, cats, nw, ns, level)
        revs: dict = {latest: make}
        if rng.random() < extra_revision_share:
            revs[latest - 5] = f"'''{title}''' (an older revision).\n\n== Early ==\nShort.\n"
        pages.append(FakePage(page_id, title, revs, cats, hidden, talk_id=900_000 + i, topic=topic))
    return FakeWiki(pages, max_result_chars=max_result_chars)
