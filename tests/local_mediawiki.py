"""A local MediaWiki Action API on 127.0.0.1 for the Wikipedia-FA rehearsal (issue 41; ``params/rehearsal_wikipedia.yaml``):
the API the bench and the fetch tests talk to in memory (tests/fake_mediawiki.py: the real API's limits for an
ordinary client, continuations, normalised titles, redirects, a 403 without a contact in the User-Agent), served
over HTTP, holding the local mirror's pages instead of synthetic ones.

:func:`mirror_wiki` builds the wiki from the mirror (``../shared/data/wikipedia``): every main-namespace page of the
MediaWiki XML exports with its own title, page id, revision id, wikitext and categories (maintenance categories
hidden, as the real API marks them), and the Featured list of ``featured_articles_2022-01-09.tsv``: a page the list
names (by page id or title) is a member of ``Category:Featured articles`` through its talk page, as on enwiki.
:class:`LocalMediaWiki` serves it at ``{url}/w/api.php``; every request is counted (``wiki.calls``).
``python tests/local_mediawiki.py [--port N]`` serves it by hand.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from fake_mediawiki import FakePage, FakeWiki

EXPORTS = ("enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2", "enwiki-table-markup.xml.bz2",
           "enwiki-minidump-2021.xml.bz2")
FEATURED_TSV = "featured_articles_2022-01-09.tsv"
#: the talk page of page ``n`` has id ``TALK_OFFSET + n`` (ids only need to be distinct and stable)
TALK_OFFSET = 10**9


def mirror_wiki(folder: Path) -> FakeWiki:
    """The mirror's pages as a wiki (module docstring)."""
    from chunkstudy.corpus.wikipedia import iter_export
    from chunkstudy.corpus.wikitext import categories, is_maintenance_category

    listed_ids, listed_titles = set(), set()
    for line in (folder / FEATURED_TSV).read_text(encoding="utf-8").splitlines()[1:]:
        pid, _, title = line.partition("\t")
        listed_ids.add(pid.strip())
        listed_titles.add(title.strip())
    pages, seen = [], set()
    for name in EXPORTS:
        for p in iter_export(folder / name):
            if p["redirect"] or p["title"] in seen or not p["page_id"].isdigit():
                continue
            seen.add(p["title"])
            every = categories(p["wikitext"], drop_maintenance=False)
            visible = [c for c in every if not is_maintenance_category(c)]
            pid = int(p["page_id"])
            revid = int(p["revision"]) if p["revision"].isdigit() else pid
            pages.append(FakePage(pid, p["title"], {revid: p["wikitext"]}, visible,
                                  [c for c in every if c not in visible], talk_id=TALK_OFFSET + pid,
                                  featured=p["page_id"] in listed_ids or p["title"] in listed_titles))
    return FakeWiki(pages)


class LocalMediaWiki:
    """``with LocalMediaWiki(wiki) as api:`` serves ``wiki`` (a :class:`FakeWiki`) on a free port of 127.0.0.1 in
    a thread; ``api.endpoint`` is the ``corpus.api_endpoint``."""

    def __init__(self, wiki: FakeWiki, port: int = 0):
        self.wiki, self.port = wiki, port
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the API is not serving"
        return f"http://127.0.0.1:{self._server.server_address[1]}/w/api.php"

    def __enter__(self) -> "LocalMediaWiki":
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                u = urlsplit(self.path)
                if u.path != "/w/api.php":
                    status, body = 404, {"error": {"code": "notfound", "info": u.path}}
                else:
                    with api._lock:  # the fake counts and generates pages as it answers: one request at a time
                        r = api.wiki.get(api.endpoint, params=dict(parse_qsl(u.query)),
                                         headers={"User-Agent": self.headers.get("User-Agent", "")})
                    status, body = r.status_code, r.data
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


if __name__ == "__main__":
    import argparse
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "lib"))
    ap = argparse.ArgumentParser(description="serve the local mirror's Wikipedia pages as a MediaWiki API")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mirror", default=os.environ.get("CHUNKSTUDY_SHARED_DATA", str(root.parent / "shared" / "data"))
                    + "/wikipedia")
    a = ap.parse_args()
    with LocalMediaWiki(mirror_wiki(Path(a.mirror)), a.port) as served:
        print(f"corpus.api_endpoint: {served.endpoint}   # Ctrl-C stops it", flush=True)
        threading.Event().wait()
