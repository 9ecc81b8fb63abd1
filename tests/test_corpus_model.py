"""Document model: builder offsets, outline normalisation, and the verifier (hypothesis properties)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy.corpus.model import SEP, DocumentBuilder, heading_paths, verify_sections

words = st.text(alphabet="abc xyz.,", min_size=0, max_size=30)
blocks = st.lists(st.one_of(st.tuples(st.just("p"), words), st.tuples(st.just("h"), st.integers(1, 7))),
                  max_size=40)


def _build(stream):
    b = DocumentBuilder("d", "T")
    for kind, v in stream:
        if kind == "p":
            b.paragraph(v)
        else:
            b.heading(v, f"H{v}")
    return b.build()


def test_worked_example_offsets_come_from_the_paragraph_table():
    b = DocumentBuilder("d1", "Title")
    b.paragraph("Lead text.")
    b.heading(1, "History")
    b.heading(3, "Early")  # a skipped level is closed up: 1 -> 2
    b.paragraph("Body.")
    doc, paras, secs = b.build()
    assert doc["text"] == "Lead text." + SEP + "Body."
    assert paras[["start", "end"]].values.tolist() == [[0, 10], [12, 17]]
    assert secs[["title", "level", "first_para", "last_para", "start", "end"]].values.tolist() == [
        ["", 1, 0, 0, 0, 10], ["History", 1, 1, 0, 12, 12], ["Early", 2, 1, 1, 12, 17]]
    assert heading_paths(secs)[secs["section_id"].iat[2]] == ["History", "Early"]
    assert verify_sections(secs, paras, len(doc["text"])) == []


@settings(max_examples=80, deadline=None)
@given(blocks)
def test_random_block_streams_always_verify_and_paragraphs_round_trip(stream):
    doc, paras, secs = _build(stream)
    assert verify_sections(secs, paras, len(doc["text"])) == []
    expected = [v.strip() for k, v in stream if k == "p" and v.strip()]
    assert [doc["text"][s:e] for s, e in zip(paras["start"], paras["end"])] == expected
    assert SEP.join(expected) == doc["text"]
    assert secs["level"].between(1, 4).all()


CORRUPTIONS = ["shift_start", "shift_end", "level_jump", "level_zero", "drop_row", "overlap", "bad_parent"]


@settings(max_examples=80, deadline=None)
@given(blocks.filter(lambda s: sum(1 for k, v in s if k == "p" and v.strip()) >= 2), st.sampled_from(CORRUPTIONS),
       st.data())
def test_random_corruptions_are_always_caught(stream, kind, data):
    doc, paras, secs = _build(stream)
    bad = secs.copy()
    nonempty = bad.index[bad["last_para"] >= bad["first_para"]].tolist()
    i = data.draw(st.sampled_from(nonempty))
    if kind == "shift_start":
        bad.loc[i, "start"] += data.draw(st.sampled_from([-1, 1]))
    elif kind == "shift_end":
        bad.loc[i, "end"] += data.draw(st.sampled_from([-1, 1]))
    elif kind == "level_jump":
        bad.loc[i, "level"] = (bad["level"].shift(1).fillna(0).astype(int)[i]) + 2
    elif kind == "level_zero":
        bad.loc[i, "level"] = 0
    elif kind == "drop_row":
        bad = bad.drop(index=i)
    elif kind == "overlap":
        bad.loc[i, "last_para"] = bad.loc[i, "last_para"] + 1
    elif kind == "bad_parent":
        bad.loc[i, "parent_id"] = "nope"
    assert verify_sections(bad.reset_index(drop=True), paras, len(doc["text"])) != []


def test_verifier_reports_a_gap_and_a_short_tiling():
    doc, paras, secs = _build([("p", "a"), ("h", 2), ("p", "b"), ("p", "c")])
    gap = secs.copy()
    gap.loc[1, "first_para"] = 2
    v = verify_sections(gap, paras, len(doc["text"]))
    assert any("gap" in x for x in v)
    short = secs.iloc[:1]
    assert any("sections end at paragraph" in x for x in verify_sections(short, paras, len(doc["text"])))
