"""Benchmark: MediaWiki API requests of the paper's Wikipedia-FA fetch (params/wikipedia_fa.yaml: the Featured
Article list, 200 documents under the quality filters, at most 60 per topic bucket), against the fake API of the
tests (tests/fake_mediawiki.py), counted in one run:

    .venv/bin/python bench/bench_wikifetch.py [--listed 6700] [--synthetic]

Page texts are the real articles of the local MediaWiki export (``../shared/data/wikipedia``, read through
:func:`chunkstudy.corpus.wikipedia.iter_export`, cycled over the listed titles, with their own categories), or
synthetic pages with ``--synthetic``. The fake applies the API's limits for an ordinary client: 500 list
members and 50 titles per request, 500 categories per reply, an 8 MiB reply. Prints:

* ``one per title``: the fetch before batching (listing + one request per Featured Article), counted on a sample
  of titles and scaled (every single-page reply fits, so it is listing + N);
* ``batched, all``: every listed page, 50 per request, with the continuations the API asks for;
* ``batched, lazy``: the pages in walk order until the walk holds 200 documents (what ``api_fetch: lazy`` does),
  with the pages fetched and the documents selected; the documents are checked to be the same as ``all``'s
  when ``--check`` is given (normalises every listed page: minutes).

At 1 request/s (``corpus.api_rate_limit_s``) the request count is also the fetch time in seconds.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "tests"))

from fake_mediawiki import synthetic_wiki  # noqa: E402

from chunkstudy import config  # noqa: E402
from chunkstudy.corpus import build  # noqa: E402
from chunkstudy.corpus import wikiapi  # noqa: E402
from chunkstudy.corpus import wikipedia as W  # noqa: E402

UA = "chunkstudy-bench/0.1 (bench@example.org)"
SHARED = Path(os.environ.get("CHUNKSTUDY_SHARED_DATA", ROOT.parent / "shared" / "data"))
EXPORT = SHARED / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


class UncachedClient(wikiapi.ApiClient):
    """Counts requests without writing the replies to disk (the ``all`` count would cache N page texts)."""

    def get(self, params: dict) -> dict:
        params = {"format": "json", "formatversion": "2", **params}
        self.n_sent += 1
        return self.session.get(self.endpoint, params=params, headers={"User-Agent": self.user_agent}).json()


def make_wiki(n: int, texts):
    return synthetic_wiki(n, seed=20260710, texts=texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listed", type=int, default=6700, help="Featured Articles listed (about 6,700 on enwiki)")
    ap.add_argument("--synthetic", action="store_true", help="synthetic page texts instead of the real export")
    ap.add_argument("--check", action="store_true", help="also build 'all' and compare the documents")
    args = ap.parse_args()
    texts = None
    if not args.synthetic:
        if not EXPORT.is_file():
            sys.exit(f"{EXPORT} is absent: set CHUNKSTUDY_SHARED_DATA or pass --synthetic")
        texts = [p["wikitext"] for p in W.iter_export(EXPORT) if not p["redirect"] and len(p["wikitext"]) > 2000]
    n = args.listed
    print(f"listed Featured Articles: {n}; page texts: "
          f"{'synthetic' if texts is None else f'{len(texts)} real articles of {EXPORT.name}, cycled'}")

    wiki = make_wiki(n, texts)
    client = UncachedClient(wiki, "https://en.wikipedia.org/w/api.php", Path("."), 0.0, user_agent=UA)
    listed = wikiapi.featured_ids_from_api(client)
    n_list = client.n_sent
    sample = list(listed)[:200]
    before = client.n_sent
    wikiapi.fetch_api_pages(sample, client, None, [], page_ids=listed, batch_size=1)
    per_title = (client.n_sent - before) / len(sample)
    one_per_title = n_list + round(per_title * n)
    before = client.n_sent
    for start in range(0, n, 50):  # fetch every listed page in batches, counting, keeping nothing
        wikiapi.fetch_api_pages(list(listed)[start:start + 50], client, None, [], page_ids=listed)
    batched_all = n_list + client.n_sent - before
    print(f"  listing requests: {n_list} (= ceil({n}/500) = {math.ceil(n / 500)})")
    print(f"  one per title   : {one_per_title:6d} requests ({per_title:.2f} per title on a sample of {len(sample)})")
    print(f"  batched, all    : {batched_all:6d} requests (content batches ceil({n}/50) = {math.ceil(n / 50)}, "
          f"plus continuations)")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config.load(ROOT / "params" / "wikipedia_fa.yaml", root=tmp,
                          overrides={"corpus": {"api_user_agent": UA, "api_rate_limit_s": 0.0}})
        lazy_wiki = make_wiki(n, texts)
        t = time.perf_counter()
        out = build.build_corpus(cfg, session=lazy_wiki)
        dt = time.perf_counter() - t
        f = out["stats"]["api_fetch"]
        print(f"  batched, lazy   : {lazy_wiki.n_requests:6d} requests ({lazy_wiki.n_list_requests()} listing + "
              f"{lazy_wiki.n_content_requests()} content), {f['fetched']} of {f['listed']} pages fetched, "
              f"{len(out['documents'])} documents, per bucket {out['stats']['per_bucket']}; build {dt:.0f} s")
        print(f"  ratio one-per-title / lazy: {one_per_title / lazy_wiki.n_requests:.0f}x; "
              f"all / lazy: {batched_all / lazy_wiki.n_requests:.1f}x")
        if args.check:
            cfg_all = config.load(ROOT / "params" / "wikipedia_fa.yaml", root=Path(tmp) / "all", overrides={
                "corpus": {"api_user_agent": UA, "api_rate_limit_s": 0.0, "api_fetch": "all"}})
            full = build.build_corpus(cfg_all, session=make_wiki(n, texts))
            same = all(out[t].reset_index(drop=True).equals(full[t].reset_index(drop=True))
                       for t in ("documents", "paragraphs", "sections_gold"))
            print(f"  lazy documents == all documents: {same}")


if __name__ == "__main__":
    main()
