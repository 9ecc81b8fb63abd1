"""QASPER: reading archives/JSON, flattening with ':::' nesting, evidence matching and harvesting policies."""

from chunkstudy import config
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from chunkstudy.corpus import qasper as Q
from chunkstudy.corpus.model import verify_corpus

FIX = Path(__file__).parent / "fixtures" / "corpus"
PARAMS = {"fuzzy_threshold": 90.0, "drop_numeric_only": True, "max_docs": None, "evidence_annotators": "majority"}


def official_name(folder):
    """The tiny fixture under the upstream file name (which tells its split), written at test time: the hook that
    keeps upstream data out of the repository matches on that name."""
    path = folder / "qasper-test-v0.3.json"
    shutil.copy(FIX / "tiny_qasper_fixture.json", path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    warnings = []
    papers = Q.read_qasper([official_name(tmp_path_factory.mktemp("qasper"))], warnings)
    return Q.build_qasper(papers, config.record("corpus", PARAMS), warnings), warnings


def test_reads_tgz_and_json_and_merges_splits(tmp_path):
    tgz = tmp_path / "qasper-train-dev-v0.3.tgz"
    data = json.loads((FIX / "tiny_qasper_fixture.json").read_text())
    train = tmp_path / "qasper-train-v0.3.json"
    train.write_text(json.dumps({"9999.00001": data["2001.00001"]}))
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(train, arcname="qasper-train-v0.3.json")
    warnings = []
    papers = Q.read_qasper([tgz, official_name(tmp_path)], warnings)
    assert {k: v[0] for k, v in papers.items()} == {"9999.00001": "train", "2001.00001": "test", "2001.00002": "test"}
    assert warnings == []
    # an unreadable file is fatal, naming it; allow_partial makes it a warning and keeps the rest
    with pytest.raises(Q.QasperReadError, match="missing.tgz"):
        Q.read_qasper([tgz, official_name(tmp_path), tmp_path / "missing.tgz"], warnings)
    papers = Q.read_qasper([tgz, official_name(tmp_path), tmp_path / "missing.tgz"], warnings, allow_partial=True)
    assert len(papers) == 3 and len(warnings) == 1 and "missing.tgz" in warnings[0]


def _truncated_copy(src: Path, dst: Path, keep: float) -> Path:
    blob = src.read_bytes()
    dst.write_bytes(blob[: int(len(blob) * keep)])
    return dst


def test_truncated_archive_and_bad_bytes_are_fatal_naming_the_file(tmp_path):
    """A cut .tgz used to drop a whole split with a warning; a non-UTF-8 .json the same. Both now stop the read."""
    data = json.loads((FIX / "tiny_qasper_fixture.json").read_text())
    train = tmp_path / "qasper-train-v0.3.json"
    train.write_text(json.dumps({f"9999.{i:05d}": data["2001.00001"] for i in range(200)}))
    tgz = tmp_path / "qasper-train-dev-v0.3.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(train, arcname="qasper-train-v0.3.json")
    (tmp_path / "cut").mkdir()
    cut = _truncated_copy(tgz, tmp_path / "cut" / "qasper-train-dev-v0.3.tgz", 0.5)
    with pytest.raises(Q.QasperReadError, match=r"cut/qasper-train-dev-v0.3.tgz"):
        Q.read_qasper([cut], [])
    bad = tmp_path / "qasper-test-v0.3.json"
    bad.write_bytes(json.dumps(data).encode().replace(b"tiny things", b"tiny \xff things", 1))
    with pytest.raises(Q.QasperReadError, match=r"qasper-test-v0.3.json.*(UnicodeDecodeError|utf-8)"):
        Q.read_qasper([bad], [])


def test_a_byte_order_mark_does_not_stop_a_qasper_file(tmp_path):
    # issue 22 §2: a UTF-8 BOM is not text, in every reader (json.loads refuses a string that starts with one)
    data = json.loads((FIX / "tiny_qasper_fixture.json").read_text())
    bom = tmp_path / "qasper-test-v0.3.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
    tgz = tmp_path / "qasper-train-dev-v0.3.tgz"
    member = tmp_path / "m" / "qasper-dev-v0.3.json"
    member.parent.mkdir()
    member.write_bytes(b"\xef\xbb\xbf" + json.dumps({"9999.00001": data["2001.00001"]}).encode())
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(member, arcname="qasper-dev-v0.3.json")
    got = Q.read_qasper([bom, tgz], [])
    assert set(got) == set(data) | {"9999.00001"}


@pytest.mark.realdata
def test_truncated_real_archive_is_fatal(shared_data, tmp_path):
    src = shared_data / "qasper" / "qasper-test-and-evaluator-v0.3.tgz"
    cut = _truncated_copy(src, tmp_path / src.name, 0.6)
    with pytest.raises(Q.QasperReadError, match=src.name):
        Q.read_qasper([cut], [])
    warnings = []
    assert Q.read_qasper([cut], warnings, allow_partial=True) == {} and src.name in warnings[0]


def _paper(**over):
    rec = json.loads((FIX / "tiny_qasper_fixture.json").read_text())["2001.00001"]
    rec.update(over)
    return rec


def test_records_of_the_wrong_shape_are_skipped_named_and_counted():
    """QASPER paragraphs or evidence given as a string used to be read character by character (a gold span over the
    wrong text); a missing question_id became the id "None"."""
    good = _paper()
    bad_paras = _paper(full_text=[{"section_name": "Intro", "paragraphs": "one long string"}])
    bad_qas = _paper()
    bad_qas["qas"] = [dict(q) for q in bad_qas["qas"]]
    first = bad_qas["qas"][0]
    bad_qas["qas"][0] = {**first, "answers": [{"answer": {**a["answer"], "evidence": "The encoder has two layers."}}
                                              for a in first["answers"]]}
    bad_qas["qas"][1] = {k: v for k, v in bad_qas["qas"][1].items() if k != "question_id"}
    papers = {"1.good": ("test", good), "2.paras": ("test", bad_paras), "3.qas": ("test", bad_qas)}
    warnings = []
    out = Q.build_qasper(papers, config.record("corpus", PARAMS), warnings)
    assert out["stats"]["skipped_records"] == {"papers": 1, "questions": 2}
    assert out["documents"]["doc_id"].tolist() == ["1.good", "3.qas"]
    assert any("2.paras" in w and "paragraphs is not a list of strings" in w for w in warnings)
    assert any(f"3.qas, question {first['question_id']}" in w and "evidence is not a list" in w for w in warnings)
    assert any("3.qas, question #1" in w and "question_id is missing" in w for w in warnings)
    h = out["harvested"]
    assert "None" not in set(h["query_id"])
    assert set(h[h["doc_id"] == "3.qas"]["query_id"]) == set(h[h["doc_id"] == "1.good"]["query_id"]) - {
        first["question_id"], good["qas"][1]["question_id"]}


def test_flatten_abstract_then_nested_sections():
    rec = json.loads((FIX / "tiny_qasper_fixture.json").read_text())["2001.00001"]
    doc, paras, secs = Q.flatten_paper("2001.00001", rec, "test")
    assert doc["title"] == "A Tiny Paper" and doc["split"] == "test"
    assert secs[["title", "level"]].values.tolist() == [
        ["Abstract", 1], ["Introduction", 1], ["Method", 1], ["Encoder", 2], ["Decoder", 2], ["Attention", 3],
        ["Results", 1]]
    assert doc["text"].split("\n\n") == ["We study tiny things.", "Tiny things matter.", "We propose TinyNet.",
                                         "The encoder has two layers.", "Attention is dot-product.",
                                         "TinyNet reaches 85.3% accuracy.",
                                         "It beats the baseline by a wide margin on every dataset we tried."]


def test_harvest_rules_policies_and_funnel(built):
    out, warnings = built
    h = out["harvested"].set_index("query_id")
    text = out["documents"].set_index("doc_id").at["2001.00001", "text"]
    assert set(h.index) == {"q-exact", "q-fuzzy", "q-section", "q-multi"}
    assert h.at["q-exact", "match_rules"] == ["exact"] and h.at["q-exact", "n_float_evidence"] == 1
    s, e = h.at["q-exact", "spans"][0]
    assert text[s:e] == "The encoder has two layers."
    assert h.at["q-fuzzy", "match_rules"] == ["fuzzy"] and h.at["q-fuzzy", "qtype"] == "boolean"
    s, e = h.at["q-section", "spans"][0]  # the empty "Decoder" heading: its subtree is the Attention paragraph
    assert h.at["q-section", "match_rules"] == ["section"] and text[s:e] == "Attention is dot-product."
    assert h.at["q-section", "qtype"] == "abstractive"
    assert [text[s:e] for s, e in h.at["q-multi", "spans"]] == ["Tiny things matter.", "We propose TinyNet."]
    assert h.at["q-multi", "n_unmatched"] == 1
    st = out["stats"]
    assert (st["questions_read"], st["usable"], st["dropped_unanswerable"], st["dropped_numeric_only"],
            st["dropped_no_evidence"]) == (8, 4, 1, 1, 1)
    assert st["share_exact"] == pytest.approx(4 / 6) and st["share_fuzzy"] == pytest.approx(1 / 6)
    assert st["share_multi_span"] == pytest.approx(0.25) and st["mean_spans"] == pytest.approx(5 / 4)
    # the string level: distinct text-evidence strings across the answerable annotations, before matching (the
    # paper's count); q-multi's three strings (one repeated by a second annotator, one unmatched) vs its two spans
    assert h["n_strings"].to_dict() == {"q-exact": 1, "q-fuzzy": 1, "q-section": 1, "q-multi": 3}
    assert st["share_multi_string"] == pytest.approx(0.25) and st["mean_strings"] == pytest.approx(6 / 4)
    f = out["corpus_funnel"].set_index("step")["value"]
    assert f["spans per question: evidence strings as annotated"] == pytest.approx(6 / 4)
    assert f["spans per question: matched spans (scored)"] == pytest.approx(5 / 4)
    assert f["multi-span questions: matched spans (scored)"] == pytest.approx(0.25)


def test_the_paper_policy_is_the_union_over_annotators(root):
    from chunkstudy import config

    assert config.load(root / "params" / "qasper.yaml").data["corpus"]["evidence_annotators"] == "union"
    assert config.load(root / "params" / "qasper_local.yaml").data["corpus"]["evidence_annotators"] == "union"


def test_bad_inputs_are_reported_by_name_and_the_rest_builds(built):
    out, warnings = built
    assert any("2001.00002" in w and "full_text" in w for w in warnings)
    assert any("2001.00001" in w and "q-multi" in w and "matches no paragraph" in w for w in warnings)
    assert out["documents"]["doc_id"].tolist() == ["2001.00001"]
    assert verify_corpus(out["documents"], out["paragraphs"], out["sections_gold"]) == {}
    with pytest.raises(ValueError, match="2001.00002"):
        Q.flatten_paper("2001.00002", {"title": "x", "abstract": "y"})


def test_annotator_policies():
    a, b, c = {(0, 5): "exact", (7, 9): "exact"}, {(0, 5): "fuzzy"}, {(0, 5): "exact", (20, 30): "section"}
    assert sorted(Q.combine_annotators([a, b, c], "union")) == [(0, 5), (7, 9), (20, 30)]
    assert Q.combine_annotators([a, b, c], "majority") == {(0, 5): "exact"}
    assert Q.combine_annotators([{}, b], "first") == {(0, 5): "fuzzy"}  # first annotation with text evidence
    assert Q.combine_annotators([{}, {}], "majority") == {}


def test_numeric_only_and_answer_types():
    assert [Q.is_numeric_only(x) for x in ["85.3%", "3,044", "-0.5", "BERT", "2 layers", ""]] == [
        True, True, True, False, False, False]
    assert Q.answer_type({"unanswerable": True}) is None
    assert Q.answer_type({"yes_no": False}) == "boolean"
    assert Q.answer_type({"extractive_spans": [" x "], "yes_no": None}) == "extractive"
    assert Q.answer_type({"extractive_spans": [], "free_form_answer": "y", "yes_no": None}) == "abstractive"


def test_matcher_prefers_exact_then_fuzzy_then_section():
    rec = json.loads((FIX / "tiny_qasper_fixture.json").read_text())["2001.00001"]
    doc, paras, secs = Q.flatten_paper("p", rec)
    m = Q.EvidenceMatcher(doc["text"], paras, secs, 90)
    assert m.match("  Tiny things   matter. ")[0] == "exact"
    assert m.match("Tiny things matter!")[0] == "fuzzy"
    rule, (s, e) = m.match("Results")
    assert rule == "section" and doc["text"][s:e].startswith("TinyNet reaches")
    assert m.match("beats the baseline by a wide margin")[0] == "section"  # contained in one section's text
    assert m.match("Completely unrelated sentence about the weather in Oslo.") is None


def test_docstring_examples():
    import doctest

    from chunkstudy.corpus import wikipedia

    for mod in (Q, wikipedia):
        assert doctest.testmod(mod).failed == 0


def test_max_docs_keeps_the_first_papers_or_a_seeded_sample(tmp_path):
    from chunkstudy.corpus import sources
    papers = Q.read_qasper([official_name(tmp_path)], [])
    ids = sorted(papers)
    first = Q.build_qasper(papers, config.record("corpus", {**PARAMS, "max_docs": 1}), [])
    assert list(first["documents"]["doc_id"]) == ids[:1]
    for seed in range(8):  # (the fixture's second paper has no usable question: no document of its own)
        out = Q.build_qasper(papers,
                             config.record("corpus",
                                           {**PARAMS, "max_docs": 1, "max_docs_from": "seeded", "seed": seed}), [])
        assert set(out["documents"].get("doc_id", [])) <= set(sources.walk_order(ids, seed)[:1])
    picked = {tuple(sources.kept_documents(ids, 1, "seeded", s))
              for s in range(20)}
    assert len(picked) == len(ids) > 1  # the seed decides; every paper can be drawn


@pytest.mark.realdata
def test_the_first_test_papers_by_id_are_flat_and_a_seeded_sample_is_not(shared_data):
    """Why params/qasper_smoke.yaml samples its papers: the oldest arXiv ids of the test split have depth-1 section
    trees only, so a first-N subset would have no nested headings (G3 = G2, no depth ladder)."""
    from chunkstudy.corpus import sources
    papers = Q.read_qasper([shared_data / "qasper" / "qasper-test-and-evaluator-v0.3.tgz"], [])
    ids = sorted(papers)

    def nested(keep):
        return sum(any(":::" in (s.get("section_name") or "") for s in papers[p][1]["full_text"]) for p in keep)

    assert nested(ids[:150]) == 0 and nested(ids) > 100
    sample = sources.kept_documents(ids, 150, "seeded", 20260710)
    assert len(sample) == 150 and nested(sample) >= 30
