"""The canonical wikitext normaliser: what it drops, what it keeps, headings, tail sections, categories."""

from chunkstudy.corpus.model import DocumentBuilder, verify_sections
from chunkstudy.corpus import wikitext as W

DROP = ["References", "Notes", "External links", "See also", "Further reading", "Bibliography", "Sources",
        "Citations"]

PAGE = """{{Infobox person|name=Ada|birth_date={{birth date|1815|12|10}}}}
'''Ada''' was a [[mathematics|mathematician]] from [[London]].<ref>{{cite book|title=X}}</ref> She wrote
notes.<!-- a comment --> [[File:Ada.jpg|thumb|A portrait of Ada]]

She worked with [[Charles Babbage]]&nbsp;on the {{lang|fr|machine analytique}}.

== Early life ==
Born in 1815.<ref name="b"/>

==== Education ====
Tutored at home.

* Mathematics
* Music

{| class="wikitable"
|+ Tutors
|-
| Somerville || 1830
|}

=== Marriage ===
<math>x^{2}</math>Married in 1835.

== See also ==
* [[Analytical Engine]]

=== Related ===
More links.

== Legacy ==
Remembered as a pioneer.

== References ==
{{reflist}}

[[Category:1815 births]]
[[Category:English mathematicians|Lovelace]]
[[Category:Articles with hCards]]
[[de:Ada Lovelace]]
"""


def _norm(text, drop=DROP):
    b = DocumentBuilder("d", "Ada")
    rep = W.normalise(text, b, drop)
    doc, paras, secs = b.build()
    return doc, paras, secs, rep


def test_paragraphs_keep_prose_links_and_lists_and_drop_markup():
    doc, paras, secs, rep = _norm(PAGE)
    ptexts = [doc["text"][s:e] for s, e in zip(paras["start"], paras["end"])]
    assert ptexts == [
        "Ada was a mathematician from London. She wrote notes.",
        "She worked with Charles Babbage on the machine analytique.",
        "Born in 1815.",
        "Tutored at home.",
        "Mathematics\nMusic",
        "Married in 1835.",
        "Remembered as a pioneer.",
    ]
    assert W.forbidden_markup(doc["text"]) == []
    assert "Infobox" not in doc["text"] and "portrait" not in doc["text"] and "Somerville" not in doc["text"]
    assert verify_sections(secs, paras, len(doc["text"])) == []


def test_heading_levels_are_closed_up_and_tail_sections_dropped_with_their_subsections():
    doc, paras, secs, rep = _norm(PAGE)
    assert secs[["title", "level"]].values.tolist() == [
        ["", 1], ["Early life", 1], ["Education", 2], ["Marriage", 2], ["Legacy", 1]]
    assert rep.dropped_sections == ["See also", "References"]
    assert "More links" not in doc["text"]


def test_deep_headings_clamp_to_level_4():
    text = "Lead.\n== A ==\nx\n=== B ===\ny\n==== C ====\nz\n===== D =====\nw\n====== E ======\nv\n"
    doc, paras, secs, _ = _norm(text)
    assert secs["level"].tolist() == [1, 1, 2, 3, 4, 4]
    assert verify_sections(secs, paras, len(doc["text"])) == []


def test_categories_written_in_the_page_minus_maintenance_ones():
    assert W.categories(PAGE) == ["1815 births", "English mathematicians"]


def test_unbalanced_italics_do_not_hide_headings():
    # One unbalanced '' inside <small> made mwparserfromhell nest the rest of Angela Merkel (2021) in a tag.
    text = "Lead ''x <small>(designated)''</small>\n\n== A ==\nBody ''one''.\n\n== B ==\nTwo.\n"
    doc, paras, secs, _ = _norm(text)
    assert secs["title"].tolist() == ["", "A", "B"]
    assert doc["text"].split("\n\n")[1] == "Body one."


def test_split_headings_follows_mediawiki_line_rules():
    parts = W.split_headings("lead\n== A ==\nx\n<!--\n== not a heading ==\n-->\n=== B ==\ny\n")
    assert [(lv, t.strip()) for lv, t, _ in parts] == [(0, ""), (2, "A"), (2, "= B")]


def test_residual_markup_guard_removes_and_counts():
    doc, paras, secs, rep = _norm("Broken {{template without end and text.\n\nNext }} para <ref>x.\n")
    assert W.forbidden_markup(doc["text"]) == []
    assert rep.residual_repairs >= 1


def test_forbidden_markup_detector():
    assert W.forbidden_markup("a {{b}} <REF>") == ["{{", "}}", "<ref"]
    assert set(W.FORBIDDEN) == {"{{", "}}", "<ref", "{|", "|}"}
