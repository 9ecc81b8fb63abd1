"""The online Wikipedia path against a fake MediaWiki API (tests/fake_mediawiki.py): batched requests with the
API's continuations, the lazy walk-order fetch that selects exactly what fetching everything selects with far
fewer requests, revision pins a rerun can use, the User-Agent, progress, and the endpoint in the cache key."""

from pathlib import Path

import pandas as pd
import pytest
from fake_mediawiki import FakePage, FakeWiki, synthetic_wiki

from chunkstudy import config
from chunkstudy.corpus import build
from chunkstudy.corpus import wikiapi
from chunkstudy.corpus import wikipedia as W

ROOT = Path(__file__).resolve().parents[1]
UA = "chunkstudy-tests/0.1 (tests@example.org)"
TABLES = ("documents", "paragraphs", "sections_gold")
#: the paper's filters scaled to the small synthetic pages (about 300-1,600 words each; normalising a page costs
#: tens of milliseconds whatever its size, so the default tests keep to about a hundred pages): 10 documents, at
#: most 3 per topic bucket, 10 titles per request. The paper-sized run (200 documents) is a slow test.
SMALL = {"min_words": 800, "min_heading_depth": 3, "min_sections": 8, "target_docs": 10, "max_per_bucket": 3,
         "api_batch_size": 10}


def small_wiki(n: int = 100, **kw) -> FakeWiki:
    return synthetic_wiki(n, seed=5, words=(300, 1600), sections=(4, 14), max_result_chars=120_000, **kw)


def _cfg(root: Path, **corpus):
    """params/wikipedia_fa.yaml (Featured list from the API, no exports) with the small filters, no waiting."""
    return config.load(ROOT / "params" / "wikipedia_fa.yaml", root=root, overrides={
        "corpus": {"api_user_agent": UA, "api_rate_limit_s": 0.0, **SMALL, **corpus}})


def _same_tables(a: dict, b: dict) -> None:
    for t in TABLES:
        pd.testing.assert_frame_equal(a[t].reset_index(drop=True), b[t].reset_index(drop=True), obj=t)


def test_lazy_fetch_selects_the_same_documents_as_fetching_everything_with_far_fewer_requests(tmp_path):
    runs = {}
    for mode in ("all", "lazy"):
        wiki = small_wiki()
        runs[mode] = (build.build_corpus(_cfg(tmp_path / mode, api_fetch=mode), session=wiki), wiki)
    (lazy, wl), (full, wf) = runs["lazy"], runs["all"]

    # the reference is the pre-batching way: every Featured title by name, one request each, in title order
    wr = small_wiki()
    client = wikiapi.ApiClient(wr, "https://en.wikipedia.org/w/api.php", tmp_path / "ref", 0.0, user_agent=UA)
    listed = wikiapi.featured_ids_from_api(client)
    c = _cfg(tmp_path / "ref").params("corpus")
    ref = W.build_wikipedia(wikiapi.fetch_api_pages(sorted(listed), client, None, [], batch_size=1), c, set(listed), [])

    assert len(lazy["documents"]) == 10
    _same_tables(lazy, full)
    _same_tables(lazy, ref)
    # buckets come from the non-hidden categories: about half the non-biographies carry the hidden "Biography
    # with signature", which would make them biographies
    topic = {f"wiki:{p.page_id}": p.topic for p in wl.pages.values()}
    assert lazy["documents"]["topic_bucket"].tolist() == [topic[d] for d in lazy["documents"]["doc_id"]]

    fetched = lazy["stats"]["api_fetch"]["fetched"]
    assert wr.n_requests == 1 + 100  # listing + one per title: what the fetch cost before batching
    assert wf.n_list_requests() == wl.n_list_requests() == 1
    assert wf.n_content_requests() >= 100 // 10  # 10 batches, plus the continuations the API asked for
    assert fetched % 10 == 0 and fetched <= 40
    assert wl.n_content_requests() < wf.n_content_requests() / 2
    assert full["stats"]["api_fetch"] == {"mode": "all", "listed": 100, "fetched": 100, "batch_size": 10}
    assert lazy["stats"]["api_requests"]["sent"] == wl.n_requests
    f = dict(zip(lazy["corpus_funnel"]["step"], lazy["corpus_funnel"]["count"]))
    assert f["listed (titles with page ids)"] == 100 and f["pages read (main namespace)"] == fetched
    assert f["accepted (seeded bucket-capped walk)"] == 10


@pytest.mark.slow
def test_paper_sized_walk_lazy_selects_the_same_200_documents_with_far_fewer_requests(tmp_path):
    """200 documents, at most 60 per bucket, 50 titles per request, from 1,500 listed Featured Articles."""
    paper = {"target_docs": 200, "max_per_bucket": 60, "api_batch_size": 50}
    outs, wikis = {}, {}
    for m in ("all", "lazy"):
        wikis[m] = small_wiki(1500)
        outs[m] = build.build_corpus(_cfg(tmp_path / m, api_fetch=m, **paper), session=wikis[m])
    _same_tables(outs["lazy"], outs["all"])
    assert len(outs["lazy"]["documents"]) == 200
    assert outs["lazy"]["stats"]["api_fetch"]["fetched"] < 1500 / 2
    assert wikis["lazy"].n_requests < wikis["all"].n_requests / 2
    assert wikis["all"].n_list_requests() == 3 and wikis["all"].n_content_requests() >= 1500 // 50


@pytest.mark.parametrize("target, cap, stops_early", [(200, 1, True), (1000, 1000, False)])
def test_lazy_fetch_stops_when_every_bucket_is_full_and_reads_everything_when_the_walk_needs_it(
        tmp_path, target, cap, stops_early):
    outs = {m: build.build_corpus(_cfg(tmp_path / m, api_fetch=m, target_docs=target, max_per_bucket=cap),
                                  session=small_wiki(50)) for m in ("all", "lazy")}
    _same_tables(outs["lazy"], outs["all"])
    per_bucket = outs["lazy"]["stats"]["per_bucket"]
    if stops_early:  # six buckets of one: the walk is satisfied at six documents
        assert set(per_bucket.values()) == {1} and outs["lazy"]["stats"]["api_fetch"]["fetched"] < 50
    else:  # every passing page is accepted, so every listed page must be read
        assert outs["lazy"]["stats"]["api_fetch"]["fetched"] == 50
        assert sum(per_bucket.values()) == outs["all"]["stats"]["passing_all_filters"]


def test_batches_follow_content_and_category_continuations_to_complete_pages(tmp_path):
    cats = [f"Battles of the {i} War" for i in range(12)]  # 50 pages x 12 = 600 categories > cllimit 500
    pages = [FakePage(2000 + i, f"Page {i}", {70000 + i: f"'''Page {i}''' " + "word " * (800 + 37 * i)
                                               + "\n\n== A ==\nText."}, cats, ["Articles with short description"],
                      talk_id=3000 + i) for i in range(50)]
    wiki = FakeWiki(pages, max_result_chars=60_000)  # about 12 pages of content per reply
    client = wikiapi.ApiClient(wiki, "https://en.wikipedia.org/w/api.php", tmp_path, 0.0, user_agent=UA)
    got = wikiapi.fetch_api_pages([p.title for p in pages], client, page_ids={p.title: str(p.page_id) for p in pages})
    assert [(g["title"], g["wikitext"], g["categories"]) for g in got] == [
        (p.title, p.text(p.latest), sorted(cats, key=lambda c: c.replace(" ", "_"))) for p in pages]  # API order
    assert all(len(c["pageids"].split("|")) == 50 for c in wiki.calls)  # one batch, asked again with continuations
    assert any("rvcontinue" in c for c in wiki.calls) and any("clcontinue" in c for c in wiki.calls)
    # the replies the API's rules make: content packed up to the size limit (at least one page a reply),
    # categories 500 a reply, both continued in the same requests until the longer one is done
    replies, used = 1, 0
    for n in (len(p.text(p.latest)) for p in pages):
        if used and used + n > 60_000:
            replies, used = replies + 1, 0
        used += n
    assert replies > 2 and wiki.n_requests == client.n_sent == max(replies, 2)
    with pytest.raises(ValueError, match="api_batch_size"):
        wikiapi.fetch_api_pages(["Page 1"], client, batch_size=51)


def test_revision_pins_and_featured_list_recorded_make_a_rerun_fetch_the_same_text(tmp_path):
    first = build.build_corpus(_cfg(tmp_path / "a"), session=small_wiki())
    rec = {k: str(tmp_path / "a" / v) for k, v in first["stats"]["api_record"].items()}
    assert rec["api_revisions"].endswith("data/wikipedia_fa/cache/mediawiki_api/api_revisions.tsv")
    pins = wikiapi.read_revision_pins(Path(rec["api_revisions"]).read_text())
    assert len(pins) == first["stats"]["api_fetch"]["fetched"]
    assert set(first["documents"]["title"]) <= set(pins)
    assert len(wikiapi.featured_ids_from_tsv(Path(rec["featured_list"]).read_text())) == 100

    def edited():  # a year later: every article edited, and a new Featured Article early in the walk
        wiki = small_wiki(120)
        for p in wiki.pages.values():
            p.revisions[p.latest + 1] = p.text(p.latest).replace("\n\n== ", "\n\nA later edit.\n\n== ", 1)
            wiki.by_rev[p.latest] = p
        return wiki

    again = build.build_corpus(_cfg(tmp_path / "b", featured_list=rec["featured_list"],
                                    api_revisions=rec["api_revisions"]), session=edited())
    _same_tables(first, again)
    unpinned = build.build_corpus(_cfg(tmp_path / "c"), session=edited())
    assert not unpinned["documents"]["text"].equals(first["documents"]["text"])


def test_api_revisions_out_names_where_the_pins_go(tmp_path):
    out = build.build_corpus(_cfg(tmp_path, api_revisions_out=str(tmp_path / "pins" / "fa.tsv")),
                             session=small_wiki(30))
    assert out["stats"]["api_record"] == {"api_revisions": "pins/fa.tsv", "featured_list": "pins/fa_featured_list.tsv"}
    assert (tmp_path / "pins" / "fa.tsv").is_file() and (tmp_path / "pins" / "fa_featured_list.tsv").is_file()


def test_the_fetch_refuses_to_start_without_a_user_agent_and_checks_the_batch_size(tmp_path):
    wiki = small_wiki(10)
    with pytest.raises(ValueError, match="corpus.api_user_agent"):
        build.build_corpus(_cfg(tmp_path, api_user_agent=None), session=wiki)
    with pytest.raises(ValueError, match="corpus.api_batch_size"):
        build.build_corpus(_cfg(tmp_path, api_batch_size=500), session=wiki)
    assert wiki.n_requests == 0


def test_progress_bar_shows_accepted_documents_of_the_target(tmp_path, capsys):
    build.build_corpus(_cfg(tmp_path), session=small_wiki())
    err = capsys.readouterr().err
    assert "Wikipedia walk (accepted)" in err and "10/10" in err and "requests=" in err


def test_cache_key_holds_the_endpoint(tmp_path):
    """Issue 13 §5: a de.wikipedia client got the English reply from the shared cache."""
    en = FakeWiki([FakePage(1, "Berlin", {10: "'''Berlin''' is a city."})])
    de = FakeWiki([FakePage(1, "Berlin", {20: "'''Berlin''' ist eine Stadt."})])
    cache = tmp_path / "api"
    got = {}
    for name, wiki in (("en", en), ("de", de)):
        client = wikiapi.ApiClient(wiki, f"https://{name}.wikipedia.org/w/api.php", cache, 0.0, user_agent=UA)
        got[name] = wikiapi.fetch_api_pages(["Berlin"], client)[0]["wikitext"]
        assert client.n_sent == 1
    assert got == {"en": "'''Berlin''' is a city.", "de": "'''Berlin''' ist eine Stadt."}
    client = wikiapi.ApiClient(de, "https://de.wikipedia.org/w/api.php", cache, 0.0, user_agent=UA)
    assert wikiapi.fetch_api_pages(["Berlin"], client)[0]["wikitext"] == got["de"] and client.n_cached == 1


@pytest.mark.realdata
@pytest.mark.slow
def test_lazy_equals_full_on_real_pages_under_the_papers_filters(tmp_path, shared_data):
    """Real page texts (the MediaWiki exports) behind the fake API, the paper's filters (3,000 words, depth 3, 12
    sections), 15 documents of at most 4 per bucket."""
    texts = [p["wikitext"] for p in W.iter_export(
        shared_data / "wikipedia" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
        if not p["redirect"] and len(p["wikitext"]) > 2000]
    paper = {"min_words": 3000, "min_heading_depth": 3, "min_sections": 12, "target_docs": 15, "max_per_bucket": 4}
    outs, wikis = {}, {}
    for m in ("all", "lazy"):
        wikis[m] = synthetic_wiki(len(texts), seed=9, texts=texts)
        outs[m] = build.build_corpus(_cfg(tmp_path / m, api_fetch=m, **paper), session=wikis[m])
    _same_tables(outs["lazy"], outs["all"])
    assert len(outs["lazy"]["documents"]) == 15
    assert wikis["lazy"].n_content_requests() < wikis["all"].n_content_requests()
