"""Wikipedia sources: XML exports (plain and bz2, truncated), the MediaWiki API with recorded responses and a fake
session, the Featured Article list, topic buckets, filters and the seeded bucket-capped walk."""

import bz2
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy import config
from chunkstudy.corpus import wikiapi
from chunkstudy.corpus import wikipedia as W
from chunkstudy.corpus.model import verify_corpus

FIX = Path(__file__).parent / "fixtures" / "corpus"
ROOT = Path(__file__).resolve().parents[1]


def params(**over):
    c = config.as_dict(config.load(ROOT / "params" / "wikipedia_local.yaml").params("corpus"))
    c.update(min_words=1, min_heading_depth=1, min_sections=1, require_featured=False)
    c.update(over)
    return config.record("corpus", c)


def test_export_streams_main_namespace_and_flags_redirects():
    pages = list(W.iter_export(FIX / "tiny_export.xml"))
    assert [(p["title"], p["redirect"]) for p in pages] == [
        ("Alpha Fort", False), ("Alpha", True), ("Empty page", False), ("Beta Battle", False)]
    assert pages[0]["page_id"] == "101" and pages[0]["revision"] == "9001"
    assert pages[0]["source"] == "tiny_export.xml"


def test_truncated_bz2_is_fatal_unless_allow_partial_keeps_pages_read_before_the_damage(tmp_path):
    raw = (FIX / "tiny_export.xml").read_bytes()
    whole = tmp_path / "x.xml.bz2"
    whole.write_bytes(bz2.compress(raw))
    assert len(list(W.iter_export(whole))) == 4
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(bz2.compress(raw)[: len(bz2.compress(raw)) * 3 // 4])
    warnings = []
    with pytest.raises(W.WikiExportError, match=f"{cut}.*truncated"):
        list(W.iter_export(cut, warnings))
    got = list(W.iter_export(cut, warnings, allow_partial=True))
    assert len(got) < 4
    assert len(warnings) == 1 and "cut.xml.bz2" in warnings[0] and "truncated" in warnings[0]
    with pytest.raises(ValueError, match="cut.xml.bz2"):
        list(W.iter_export(cut))


def test_a_non_utf8_byte_is_fatal_naming_the_file(tmp_path):
    """One bad byte used to end the stream quietly (5 of 26 pages kept); it now stops the read, naming the file."""
    raw = (FIX / "tiny_export.xml").read_bytes()
    bad = tmp_path / "bad.xml.bz2"
    bad.write_bytes(bz2.compress(raw.replace(b"It has two towers.", b"It has two \xff towers.")))
    with pytest.raises(W.WikiExportError, match=f"{bad}.*(not well-formed|invalid)"):
        list(W.iter_export(bad, []))


def test_build_from_export_filters_warns_on_empty_page_and_verifies():
    warnings = []
    out = W.build_wikipedia(W.iter_export(FIX / "tiny_export.xml"), params(), None, warnings)
    assert out["documents"]["title"].tolist() in (["Alpha Fort", "Beta Battle"], ["Beta Battle", "Alpha Fort"])
    assert any("Empty page" in w and "tiny_export.xml" in w for w in warnings)
    assert verify_corpus(out["documents"], out["paragraphs"], out["sections_gold"]) == {}
    alpha = out["documents"].set_index("title").loc["Alpha Fort"]
    assert alpha["text"] == ("Alpha Fort is a fort on the Velna. It was built in 1700.\n\nIt has two towers.\n\n"
                             "The fort was besieged in 1740.\n\nThe first assault failed.\n\nNorth tower\nSouth tower")
    assert alpha["categories"] == ["Forts in Morvania"] and alpha["revision"] == "9001"
    assert alpha["topic_bucket"] == "history_war"  # "Forts" is a history_war keyword
    f = dict(zip(out["corpus_funnel"]["step"], out["corpus_funnel"]["count"]))
    assert f["pages read (main namespace)"] == 4 and f["candidates (not redirect, has prose)"] == 2
    assert out["stats"]["depth_distribution"] == {"1": 1, "3": 1}


def test_filters_count_each_and_cumulatively():
    out = W.build_wikipedia(W.iter_export(FIX / "tiny_export.xml"), params(min_heading_depth=3, min_words=5), None,
                            [])
    assert out["stats"]["pass_each"]["min_heading_depth"] == 1
    assert out["documents"]["title"].tolist() == ["Alpha Fort"]
    pages = W.iter_export(FIX / "tiny_export.xml")
    with pytest.raises(ValueError, match="featured"):
        W.build_wikipedia(pages, params(require_featured=True), None, [])
    # the configuration error comes before any page is read and normalised
    assert len(list(pages)) == len(list(W.iter_export(FIX / "tiny_export.xml")))
    out = W.build_wikipedia(W.iter_export(FIX / "tiny_export.xml"), params(require_featured=True), {"Beta Battle"},
                            [])
    assert out["documents"]["title"].tolist() == ["Beta Battle"]


# ------------------------------------------------------------------------------------------------ API

UA = "chunkstudy-tests/0.1 (tests@example.org)"
ALPHA_9100 = ("'''Alpha Fort''' is a fort.<ref>x</ref>\n\n== History ==\nBuilt in 1700.\n\n=== Siege ===\n"
              "Besieged in 1740.\n\n[[Category:Forts in Morvania]]")


def tiny_wiki():
    """Alpha Fort (revisions 9001 and 9100, one hidden category), Apollo 8 and Beta Battle, all Featured; the
    redirect Alpha -> Alpha Fort."""
    from fake_mediawiki import FakePage, FakeWiki

    return FakeWiki([
        FakePage(101, "Alpha Fort", {9001: "'''Alpha Fort''' is an old fort.\n\n== History ==\nBuilt in 1700.",
                                     9100: ALPHA_9100},
                 ["Forts in Morvania", "Military history of Morvania"], ["Biography with signature"], talk_id=11),
        FakePage(102, "Apollo 8", {9200: "'''Apollo 8''' flew.\n\n== Flight ==\nIt orbited the Moon."},
                 ["Apollo program"], talk_id=12),
        FakePage(103, "Beta Battle", {9300: "'''Beta Battle''' was fought.\n\n== Course ==\nIt was short."},
                 ["Battles of Morvania"], talk_id=13),
        FakePage(104, "Alpha", {9400: "#REDIRECT [[Alpha Fort]]"}, featured=False, redirect_to="Alpha Fort"),
    ])


def _client(tmp_path, session, ua=UA):
    t = {"now": 0.0}
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        t["now"] += s

    c = wikiapi.ApiClient(session, "https://example.org/w/api.php", tmp_path / "api", rate_limit_s=1.5, sleep=sleep,
                    clock=lambda: t["now"], user_agent=ua)
    return c, sleeps


def test_api_fetch_records_revision_categories_rate_limit_and_cache(tmp_path):
    s = tiny_wiki()
    client, sleeps = _client(tmp_path, s)
    warnings = []
    pages = wikiapi.fetch_api_pages(["Alpha", "No Such Page", "apollo_8"], client, None, warnings)
    # one request for all three titles: the redirect is followed, the name normalised, the missing page warned
    assert [(p["title"], p["revision"], p["requested_title"]) for p in pages] == [
        ("Alpha Fort", "9100", "Alpha"), ("Apollo 8", "9200", "apollo_8")]
    assert pages[0]["wikitext"] == ALPHA_9100 and pages[0]["page_id"] == "101"
    assert pages[0]["categories"] == ["Forts in Morvania", "Military history of Morvania"]  # hidden one left out
    assert s.calls[0]["clshow"] == "!hidden" and s.calls[0]["rvslots"] == "main"
    assert s.calls[0]["titles"] == "Alpha|No Such Page|apollo_8" and len(s.calls) == 1
    assert warnings == ["MediaWiki API: page 'No Such Page': missing or has no revision"]
    wikiapi.fetch_api_pages(["Beta Battle"], client)
    assert sleeps == [1.5]  # one polite wait between the two sent requests
    assert len(list((tmp_path / "api").glob("*.json"))) == 2
    again = wikiapi.fetch_api_pages(["Alpha", "No Such Page", "apollo_8"], client, None, [])  # from the on-disk cache
    assert len(s.calls) == 2 and again == pages and client.n_cached == 1


def test_api_revision_pins_fetch_the_pinned_text(tmp_path):
    s = tiny_wiki()
    client, _ = _client(tmp_path, s)
    pins = wikiapi.read_revision_pins("title\trevid\nAlpha Fort\t9001\n")
    pages = wikiapi.fetch_api_pages(["Alpha Fort", "Beta Battle"], client, pins, page_ids={"Beta Battle": "103"})
    assert [c.get("revids") or c.get("pageids") for c in s.calls] == ["9001", "103"]
    assert pages[0]["revision"] == "9001" and "old fort" in pages[0]["wikitext"]
    doc, paras, secs, info = W.page_document(pages[0], ["References"])
    assert doc["text"] == "Alpha Fort is an old fort.\n\nBuilt in 1700." and doc["revision"] == "9001"
    assert pages[1]["revision"] == "9300"
    assert wikiapi.read_revision_pins(wikiapi.revision_pins_tsv(pages)) == {"Alpha Fort": "9001", "Beta Battle": "9300"}


def test_api_refuses_to_send_without_a_user_agent_naming_a_contact(tmp_path):
    s = tiny_wiki()
    for ua in ("", "python-requests/2.31", "chunkstudy/0.1 (research reproduction)"):
        client, _ = _client(tmp_path, s, ua=ua)
        with pytest.raises(ValueError, match="corpus.api_user_agent.*User-Agent"):
            wikiapi.fetch_api_pages(["Alpha Fort"], client)
    assert s.calls == []  # refused before anything was sent
    client, _ = _client(tmp_path, s)
    wikiapi.fetch_api_pages(["Alpha Fort"], client)
    assert s.headers[0]["User-Agent"] == UA


def test_featured_list_from_api_follows_continuation_and_maps_talk_pages_to_articles(tmp_path):
    from fake_mediawiki import synthetic_wiki

    s = synthetic_wiki(1201)
    client, _ = _client(tmp_path, s)
    listed = wikiapi.featured_ids_from_api(client)
    assert len(listed) == 1201 and len(s.calls) == 3  # 500 per request for an ordinary client
    assert s.calls[1]["gcmcontinue"] == "500" and s.calls[1]["continue"] == "gcmcontinue||"
    assert all(listed[p.title] == str(p.page_id) for p in s.pages.values())  # subject ids, not talk-page ids
    client, _ = _client(tmp_path / "x", tiny_wiki())
    assert list(wikiapi.featured_ids_from_api(client)) == ["Alpha Fort", "Apollo 8", "Beta Battle"]


def test_featured_list_from_tsv():
    listed = wikiapi.featured_ids_from_tsv("page_id\ttitle\n25\tAutism\n33653136\t? (film)\n")
    assert listed == {"Autism": "25", "? (film)": "33653136"}
    assert wikiapi.featured_ids_from_tsv(wikiapi.featured_tsv(listed)) == listed


# ------------------------------------------------------------------------------------ buckets and walk

@pytest.mark.parametrize("cats, bucket", [
    (["1809 births", "Presidents of the United States"], "biography"),
    (["Union Army generals", "1809 births"], "history_war"),
    (["Apollo program", "Crewed missions to the Moon"], "science_nature"),
    (["1987 manga", "Anime series"], "arts_media"),
    (["Rivers of Morvania"], "geography_places"),
    (["Software companies", "Award winners of nothing"], "other"),
    (["Articles with short description"], "other"),
    ([], "other"),
])
def test_topic_bucket_first_match_in_table_order(cats, bucket):
    assert W.topic_bucket(cats) == bucket


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(W.BUCKETS), max_size=80), st.integers(1, 15), st.integers(0, 60),
       st.integers(0, 2**31))
def test_seeded_walk_caps_buckets_reaches_target_when_possible_and_is_reproducible(buckets, cap, target, seed):
    cand = pd.DataFrame({"doc_id": [f"d{i:03d}" for i in range(len(buckets))], "topic_bucket": buckets})
    got = W.seeded_walk(cand, seed, cap, target)
    counts = Counter(got["topic_bucket"])
    assert max(counts.values(), default=0) <= cap
    possible = sum(min(cap, n) for n in Counter(buckets).values())
    assert len(got) == min(target, possible)
    assert got["doc_id"].tolist() == W.seeded_walk(cand.iloc[::-1], seed, cap, target)["doc_id"].tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(W.BUCKETS), min_size=1, max_size=80), st.data(), st.integers(0, 2**31))
def test_walk_order_of_a_subset_is_the_full_order_restricted_so_walking_a_prefix_is_enough(buckets, data, seed):
    """What the lazy API fetch rests on: the walk's order of any subset (pages that pass the filters, pages
    fetched so far) is the full order restricted to it, so the walk over a prefix of the order that reaches the
    stopping point accepts what the walk over everything accepts."""
    ids = [f"wiki:{i}" for i in range(len(buckets))]
    full = W.walk_order(ids, seed)
    subset = data.draw(st.lists(st.sampled_from(ids), unique=True))
    assert W.walk_order(subset, seed) == [d for d in full if d in set(subset)]
    cand = pd.DataFrame({"doc_id": ids, "topic_bucket": buckets})
    cap, target = data.draw(st.integers(1, 10)), data.draw(st.integers(0, 40))
    everything = W.seeded_walk(cand, seed, cap, target)["doc_id"].tolist()
    rank = {d: i for i, d in enumerate(full)}
    stop = max((rank[d] for d in everything), default=-1)  # where the full walk took its last document
    prefix = set(full[:stop + 1 + data.draw(st.integers(0, 5))])
    assert W.seeded_walk(cand[cand["doc_id"].isin(prefix)], seed, cap, target)["doc_id"].tolist() == everything


def test_walk_order_is_a_seeded_shuffle():
    ids = [f"wiki:{i}" for i in range(200)]
    a, b = W.walk_order(ids, 1), W.walk_order(ids, 2)
    assert sorted(a) == sorted(ids) and a != b and a != sorted(ids) and a == W.walk_order(ids[::-1], 1)
