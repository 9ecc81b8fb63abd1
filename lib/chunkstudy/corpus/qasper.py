"""QASPER: the official archives in, flattened papers and harvested questions with gold spans out (paper, data
section; docs/corpus.md, "The paper's corpora").

* **Reading.** :func:`read_qasper` accepts ``qasper-train-dev-v0.3.tgz``, ``qasper-test-and-evaluator-v0.3.tgz``
  or the ``qasper-{train,dev,test}-v0.3.json`` files extracted from them, and merges whatever splits are given
  (a ``split`` column records each paper's split).
* **Flattening** (:func:`flatten_paper`): the abstract is a level-1 section titled "Abstract" (one paragraph per
  non-empty line block), then each ``full_text`` section, where QASPER writes nesting as ``"A ::: B"``; a nested
  section whose ancestors were not written as sections of their own gets empty ancestor headings, so the tree is
  the path QASPER records. Each paragraph string is one paragraph.
* **Evidence matching** (:func:`match_evidence`): ``exact`` (whitespace-normalised equality with a paragraph), then
  ``fuzzy`` (best ``rapidfuzz.fuzz.ratio`` >= ``fuzzy_threshold``), then ``section`` (the evidence names a section
  title, equal after case folding or by ``fuzz.ratio`` >= threshold, or else is contained, by
  ``rapidfuzz.fuzz.partial_ratio`` >= threshold, in one section's own text: the span is that section with its
  sub-sections; :class:`EvidenceMatcher`).
  Evidence that matches nothing is reported (document and question named) and left out.
* **Figures and tables.** Evidence strings starting with ``FLOAT SELECTED:`` quote a figure/table caption, which
  is not part of the flat text; they are not matched and are counted apart (the same choice as the official
  evaluator's ``--text_evidence_only``). A question whose only evidence is figures/tables has no text evidence
  and is dropped as "no evidence".
* **Annotators.** A question has one or more annotations. Unanswerable annotations are ignored; a question with
  no answerable annotation is dropped as unanswerable. The gold spans combine the answerable annotations that
  have matched text evidence by ``corpus.evidence_annotators`` (:func:`combine_annotators`): ``union``
  (the default, and the paper's counting: its numbers are unions over annotators), ``majority`` (a paragraph
  cited by at least half of them; with one annotator, its evidence) or ``first``. ``qtype`` is the majority
  answer type among answerable annotations (extractive / abstractive / boolean; ties go to the first
  annotation's type). Measured effect (multi-span share / matched spans per question):

  =====================  ===============================  ==================================================
  policy                 test split (1,298 usable)        all three splits (4,250 usable)
  =====================  ===============================  ==================================================
  ``union``              57.3% / 2.31                     42.7% / 1.92  (paper: 43%)
  ``majority``           45.7% / 1.97                     39.1% / 1.81
  ``first``              30.0% / 1.66                     —
  strings, as annotated  58.9% / 2.60                     44.2% / 2.10  (paper: 43.9% / 2.10)
  =====================  ===============================  ==================================================

  The test split has about 2.4 annotations per question (train mostly one), so its shares run higher than the
  merged splits'. The funnel (:func:`harvest_stats`) reports both levels, labelled: the *evidence strings as
  annotated* (distinct across annotators, before matching: the paper's 2.10 spans/question and 43.9%) and the
  *matched spans* the metric scores (fewer: two strings that match one paragraph are one span, and a section
  fallback swallows the paragraphs nested in it, :func:`_merge_nested`).
* **Usable questions.** A question is usable when it has an answerable annotation, is not numeric-only, and has
  at least one matched text-evidence span. Measured on the test split (1,451 questions read): 79 dropped as
  unanswerable, 13 as numeric-only, 61 without text evidence (41 of them cite only figures/tables or evidence
  that matches nothing), 1,298 usable over 407 papers. On all three splits this gives 4,250 usable over 1,504
  papers against the paper's 4,303 over 1,508 (docs/decisions/0002-qasper-question-funnel.md): a residual gap of
  53 questions (1.2%) that no simple drop rule closes (strict digits-only numeric rules reach at most 4,273;
  keeping figure/table-only questions gives 4,455, and they have no text span to score, so that is not offered as
  a parameter).
* **Numeric-only** (``corpus.drop_numeric_only``, default true): a question is dropped when every answerable
  non-boolean annotation's answer is only digits, punctuation and units-free symbols (``"3,044"``,
  ``"85.3%"``), the items the study leaves out. ``false`` keeps them: 1,310 usable on the test split (+12; one
  of the 13 then fails for lack of text evidence).
* **The kind's loader**, :data:`LOADER` (:mod:`chunkstudy.corpus.build`'s registry): :func:`build` reads the archives named
  by ``corpus.sources`` (in ``corpus.mirror``, or downloaded from ``corpus.fetch_urls``); :func:`source_files`
  lists them.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import IO, Iterable, cast

import pandas as pd
from rapidfuzz import fuzz, process

from ..config import Config
from ..params import CorpusParams
from .loader import CorpusLoader
from .model import SECTION_COLUMNS, DocumentBuilder
from .sources import CorpusInputError, kept_documents, listed_sources, source_paths
from ..errors import ChunkstudyError

_SPLIT = re.compile(r"qasper-(train|dev|test)-v[\d.]+\.json$")
FLOAT_PREFIX = "FLOAT SELECTED"
MATCH_RULES = ("exact", "fuzzy", "section")
HARVESTED_COLUMNS = ["query_id", "doc_id", "qtype", "text", "spans", "match_rules", "n_spans", "answer",
                     "split", "n_annotations", "n_evidence", "n_float_evidence", "n_unmatched", "n_strings"]


def _split_of(name: str) -> str:
    m = _SPLIT.search(Path(name).name)
    return m.group(1) if m else Path(name).stem


class QasperReadError(ChunkstudyError, ValueError):
    """A QASPER file is missing, truncated, corrupt, not UTF-8 or not QASPER JSON (the message names the file)."""


def read_qasper(paths: Iterable[str | Path], warnings: list[str] | None = None,
                allow_partial: bool = False) -> dict[str, tuple[str, dict]]:
    """``{paper_id: (split, record)}`` from QASPER archives (``.tgz``) and/or extracted ``.json`` files.

    A paper id present in two splits keeps the first and warns. An unreadable file (missing, truncated, corrupt,
    not UTF-8, not a mapping of papers) raises :class:`QasperReadError` naming it; with ``allow_partial`` (and a
    ``warnings`` list) it is a warning instead and the papers read before the damage are kept.
    """
    out: dict[str, tuple[str, dict]] = {}

    def add(split: str, data: dict, name: str):
        if not isinstance(data, dict):
            raise ValueError(f"expected a mapping of paper id -> record, got {type(data).__name__}")
        for pid, rec in data.items():
            if pid in out:
                _warn(warnings, f"{name}: paper {pid} already read from split {out[pid][0]!r}; kept the first")
                continue
            out[pid] = (split, rec)

    for path in paths:
        path = Path(path)
        try:
            if path.suffix in (".tgz", ".gz") or path.name.endswith(".tar.gz"):
                with tarfile.open(path, "r:gz") as tar:
                    members = [m for m in tar.getmembers() if m.isfile() and _SPLIT.search(m.name)]
                    if not members:
                        raise ValueError("no qasper-*-v0.3.json inside")
                    for m in sorted(members, key=lambda m: m.name):
                        add(_split_of(m.name), json.load(io.TextIOWrapper(cast(IO[bytes], tar.extractfile(m)),
                                                                              "utf-8-sig")),
                            f"{path.name}:{m.name}")
            else:
                add(_split_of(path.name), json.loads(path.read_text(encoding="utf-8-sig")), path.name)
        except (OSError, EOFError, ValueError, tarfile.TarError) as e:  # ValueError: JSON and UTF-8 errors too
            msg = f"{path}: cannot read QASPER file ({type(e).__name__}: {e})"
            if warnings is None or not allow_partial:
                raise QasperReadError(msg) from None
            warnings.append(msg + "; kept the papers read before it (corpus.allow_partial)")
    return out


def _is_str_list(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, str) for v in x)


def paper_shape_problem(record) -> str | None:
    """What is wrong with the shape of one QASPER paper record, or None. Checked before flattening: a string where
    a list belongs would otherwise be iterated character by character (each character a paragraph)."""
    if not isinstance(record, dict):
        return f"record is a {type(record).__name__}, not a mapping"
    for key in ("title", "abstract"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key} is a {type(record[key]).__name__}, not a string"
    full = record.get("full_text")
    if not isinstance(full, list):
        return "record has no full_text list"
    for i, sec in enumerate(full):
        if not isinstance(sec, dict):
            return f"full_text[{i}] is a {type(sec).__name__}, not a section mapping"
        if sec.get("section_name") is not None and not isinstance(sec["section_name"], str):
            return f"full_text[{i}].section_name is a {type(sec['section_name']).__name__}, not a string"
        if sec.get("paragraphs") is not None and not _is_str_list(sec["paragraphs"]):
            return f"full_text[{i}].paragraphs is not a list of strings"
    if record.get("qas") is not None and not isinstance(record["qas"], list):
        return f"qas is a {type(record['qas']).__name__}, not a list"
    return None


def question_shape_problem(qa) -> str | None:
    """What is wrong with the shape of one QASPER question (an entry of ``qas``), or None."""
    if not isinstance(qa, dict):
        return f"question is a {type(qa).__name__}, not a mapping"
    qid = qa.get("question_id")
    if not isinstance(qid, str) or not qid.strip():
        return f"question_id is missing or not a string ({qid!r})"
    if not isinstance(qa.get("question"), str):
        return "question text is missing or not a string"
    answers = qa.get("answers")
    if answers is not None and not isinstance(answers, list):
        return f"answers is a {type(answers).__name__}, not a list"
    for i, a in enumerate(answers or []):
        ans = a.get("answer") if isinstance(a, dict) else None
        if not isinstance(ans, dict):
            return f"answers[{i}] has no answer mapping"
        for key in ("evidence", "extractive_spans", "highlighted_evidence"):
            if ans.get(key) is not None and not _is_str_list(ans[key]):
                return f"answers[{i}].answer.{key} is not a list of strings"
        if ans.get("free_form_answer") is not None and not isinstance(ans["free_form_answer"], str):
            return f"answers[{i}].answer.free_form_answer is not a string"
    return None


def _warn(warnings: list[str] | None, msg: str) -> None:
    if warnings is None:
        raise ValueError(msg)
    warnings.append(msg)


def _norm(s: str) -> str:
    return " ".join((s or "").split())


def flatten_paper(paper_id: str, record: dict, split: str = "") -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """One QASPER paper as ``(document row, paragraphs, sections)`` (module docstring: flattening).

    Raises ``ValueError`` naming the paper when ``full_text`` is missing or not a list.
    """
    full = record.get("full_text")
    if not isinstance(full, list):
        raise ValueError(f"QASPER paper {paper_id}: record has no full_text list")
    b = DocumentBuilder(paper_id, _norm(record.get("title") or ""))
    b.heading(1, "Abstract")
    for block in re.split(r"\n\s*\n", record.get("abstract") or ""):
        b.paragraph(_norm(block))
    cur: list[str] = []
    for sec in full:
        name = sec.get("section_name") or ""
        path = [_norm(p) for p in name.split(":::")] if name.strip() else [""]
        common = 0
        while common < min(len(cur), len(path) - 1) and cur[common] == path[common]:
            common += 1
        for lvl in range(common, len(path)):
            b.heading(lvl + 1, path[lvl])
        cur = path
        for p in sec.get("paragraphs") or []:
            b.paragraph(_norm(p))
    doc, paras, secs = b.build(source="qasper", split=split)
    doc["n_words"] = len(doc["text"].split())
    return doc, paras, secs


class EvidenceMatcher:
    """Match evidence strings to one document: exact → fuzzy → section fallback.

    * ``exact``: the whitespace-normalised evidence equals a paragraph; the span is that paragraph.
    * ``fuzzy``: the best ``rapidfuzz.fuzz.ratio`` against the paragraphs is >= ``threshold``; that paragraph.
    * ``section``: the evidence names a section (QASPER annotators sometimes cite a heading such as
      ``"Baseline Systems"`` or ``"Dataset ::: Final Dataset"``, matched by its last part): equal to a section title after case folding, or ``fuzz.ratio`` >= threshold
      with one; otherwise it is contained (``fuzz.partial_ratio`` >= threshold) in one section's own text. The
      span is the section with its sub-sections (start of the section to the end of its last descendant).

    :meth:`match` returns ``(rule, [start, end])`` (half-open offsets into the text) or ``None``.
    """

    def __init__(self, text: str, paras: pd.DataFrame, sections: pd.DataFrame, threshold: float):
        self.threshold = float(threshold)
        self.spans = [(int(s), int(e)) for s, e in zip(paras["start"], paras["end"])]
        self.texts = [_norm(text[s:e]) for s, e in self.spans]
        self.index: dict[str, int] = {}
        for i, t in enumerate(self.texts):
            self.index.setdefault(t, i)
        rows = list(sections.itertuples(index=False))
        self.subtree: list[tuple[int, int]] = []  # (start, end) of each section with its descendants
        for i, r in enumerate(rows):
            end = int(r.end)
            for r2 in rows[i + 1:]:
                if int(r2.level) <= int(r.level):
                    break
                end = max(end, int(r2.end))
            self.subtree.append((int(r.start), end))
        self.titles = [_norm(r.title).casefold() for r in rows]
        self.own = [_norm(text[int(r.start):int(r.end)]) for r in rows]

    def match(self, evidence: str) -> tuple[str, list[int]] | None:
        ev = _norm(evidence)
        if not ev:
            return None
        if ev in self.index:
            s, e = self.spans[self.index[ev]]
            return "exact", [s, e]
        if self.texts:
            best = process.extractOne(ev, self.texts, scorer=fuzz.ratio, score_cutoff=self.threshold)
            if best is not None:
                s, e = self.spans[best[2]]
                return "fuzzy", [s, e]
        return self._section(ev)

    def _section(self, ev: str) -> tuple[str, list[int]] | None:
        key = _norm(ev.split(":::")[-1]).casefold()  # QASPER cites nested sections as "A ::: B"
        hit = next((i for i, t in enumerate(self.titles) if t and t == key), None)
        if hit is None and self.titles:
            best = process.extractOne(key, self.titles, scorer=fuzz.ratio, score_cutoff=self.threshold)
            hit = best[2] if best is not None else None
        if hit is None:
            scores = [(fuzz.partial_ratio(ev, t) if t and len(ev) <= len(t) else 0.0, i)
                      for i, t in enumerate(self.own)]
            good = [(sc, i) for sc, i in scores if sc >= self.threshold]
            hit = max(good, key=lambda x: (x[0], -x[1]))[1] if good else None
        if hit is None or self.subtree[hit][1] <= self.subtree[hit][0]:
            return None
        return "section", list(self.subtree[hit])


_NUMERIC_ONLY = re.compile(r"^[\d\s.,%+\-−–/×x:;()~<>=$€£]*\d[\d\s.,%+\-−–/×x:;()~<>=$€£]*$")


def is_numeric_only(answer: str) -> bool:
    """True when an answer is only a number (digits with separators, signs, %, currency): ``"3,044"``, ``"85.3%"``.

    >>> is_numeric_only("85.3%"), is_numeric_only("3,044"), is_numeric_only("BERT"), is_numeric_only("")
    (True, True, False, False)
    """
    return bool(_NUMERIC_ONLY.match(answer.strip()))


def answer_type(ans: dict) -> str | None:
    """``boolean`` / ``extractive`` / ``abstractive`` for an answerable annotation, ``None`` when unanswerable."""
    if ans.get("unanswerable"):
        return None
    if ans.get("yes_no") is not None:
        return "boolean"
    if any(_norm(x) for x in ans.get("extractive_spans") or []):
        return "extractive"
    if _norm(ans.get("free_form_answer") or ""):
        return "abstractive"
    return None


def answer_text(ans: dict) -> str:
    if ans.get("yes_no") is not None:
        return "Yes" if ans["yes_no"] else "No"
    spans = [_norm(x) for x in ans.get("extractive_spans") or [] if _norm(x)]
    return " | ".join(spans) if spans else _norm(ans.get("free_form_answer") or "")


def combine_annotators(per_annotation: list[dict[tuple[int, int], str]], policy: str
                       ) -> dict[tuple[int, int], str]:
    """Combine the matched spans of the answerable annotations that have text evidence.

    ``majority``: spans cited by at least half of them (a lone annotator's spans are kept as they are; when no
    span reaches half, the annotators disagree completely and the union is kept rather than the question lost);
    ``union``: spans cited by any; ``first``: the first annotation's. Each span keeps its best match rule.

    >>> a, b = {(0, 5): "exact", (7, 9): "exact"}, {(0, 5): "fuzzy"}
    >>> sorted(combine_annotators([a, b], "majority")), sorted(combine_annotators([a, b], "first"))
    ([(0, 5), (7, 9)], [(0, 5), (7, 9)])
    >>> sorted(combine_annotators([a, b, {(0, 5): "exact"}], "majority"))
    [(0, 5)]
    >>> sorted(combine_annotators([{(0, 5): "exact"}, {(7, 9): "exact"}, {(11, 12): "exact"}], "majority"))
    [(0, 5), (7, 9), (11, 12)]
    """
    sets = [s for s in per_annotation if s]
    if not sets:
        return {}
    if policy == "first":
        return dict(sets[0])
    votes = Counter(k for s in sets for k in s)
    keep = [k for k, v in votes.items() if policy == "union" or 2 * v >= len(sets)]
    if not keep:  # annotators cite disjoint paragraphs: no majority, keep the question with the union
        keep = list(votes)
    best: dict[tuple[int, int], str] = {}
    for s in sets:
        for k, rule in s.items():
            if k in keep and (k not in best or MATCH_RULES.index(rule) < MATCH_RULES.index(best[k])):
                best[k] = rule
    return best


def harvest_paper(paper_id: str, record: dict, doc: dict, paras: pd.DataFrame, secs: pd.DataFrame,
                  threshold: float, drop_numeric_only: bool, warnings: list[str] | None = None,
                  annotators: str = "union") -> tuple[list[dict], Counter]:
    """Harvest one paper's questions (module docstring). Returns ``(rows, counts)``; ``counts`` feeds the funnel.

    Each row: ``query_id`` (QASPER question id), ``doc_id``, ``qtype``, ``text``, ``spans`` (sorted, unique
    ``[start, end]`` half-open offsets into the document text), ``match_rules`` (one rule per span, aligned with
    ``spans``), ``n_spans``, ``answer`` (first answerable annotation), counts of evidence strings.
    """
    matcher = EvidenceMatcher(doc["text"], paras, secs, threshold)
    counts: Counter = Counter()
    rows = []
    for i, qa in enumerate(record.get("qas") or []):
        counts["questions read"] += 1
        problem = question_shape_problem(qa)
        if problem:
            qname = qa.get("question_id") if isinstance(qa, dict) and isinstance(qa.get("question_id"), str) \
                and qa.get("question_id") else f"#{i}"
            _warn(warnings, f"QASPER paper {paper_id}, question {qname}: {problem}; skipped")
            counts["questions skipped (bad record)"] += 1
            continue
        qid = qa["question_id"]
        answers = [a.get("answer") or {} for a in qa.get("answers") or []]
        answerable = [a for a in answers if answer_type(a) is not None]
        if not answerable:
            counts["dropped: unanswerable"] += 1
            continue
        if drop_numeric_only and all(is_numeric_only(answer_text(a)) for a in answerable
                                     if answer_type(a) != "boolean") and \
                any(answer_type(a) != "boolean" for a in answerable):
            counts["dropped: numeric-only"] += 1
            continue
        per_ann: list[dict[tuple[int, int], str]] = []
        strings: set[str] = set()  # distinct text-evidence strings of the answerable annotations, before matching
        n_ev = n_float = n_miss = 0
        for a in answerable:
            got: dict[tuple[int, int], str] = {}
            for ev in a.get("evidence") or []:
                if not _norm(ev):
                    continue
                if ev.strip().startswith(FLOAT_PREFIX):
                    n_float += 1
                    continue
                n_ev += 1
                strings.add(_norm(ev))
                m = matcher.match(ev)
                counts[f"evidence: {m[0] if m else 'unmatched'}"] += 1
                if m is None:
                    n_miss += 1
                    _warn(warnings, f"QASPER paper {paper_id}, question {qid}: evidence matches no paragraph or "
                                    f"section: {_norm(ev)[:80]!r}")
                    continue
                key = (m[1][0], m[1][1])
                if key not in got or MATCH_RULES.index(m[0]) < MATCH_RULES.index(got[key]):
                    got[key] = m[0]
            per_ann.append(got)
        found = combine_annotators(per_ann, annotators)
        counts["evidence: figure/table"] += n_float
        if not found:
            counts["dropped: no text evidence" if n_ev or n_float else "dropped: no evidence"] += 1
            continue
        spans = _merge_nested(sorted(found))
        types = [answer_type(a) for a in answerable]
        tally = Counter(types)
        top = max(tally.values())
        qtype = next(t for t in types if tally[t] == top)
        rows.append({"query_id": qid, "doc_id": paper_id, "qtype": qtype, "text": _norm(qa.get("question")),
                     "spans": [list(s) for s in spans], "match_rules": [found.get(s, "section") for s in spans],
                     "n_spans": len(spans), "answer": answer_text(answerable[0]), "split": doc.get("split", ""),
                     "n_annotations": len(answerable), "n_evidence": n_ev, "n_float_evidence": n_float,
                     "n_unmatched": n_miss, "n_strings": len(strings)})
        counts["usable"] += 1
    return rows, counts


def _merge_nested(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop spans contained in another span (a section fallback that swallows a matched paragraph)."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
        if out and s >= out[-1][0] and e <= out[-1][1]:
            continue
        out.append((s, e))
    return out


def build_qasper(papers: dict[str, tuple[str, dict]], params: CorpusParams, warnings: list[str] | None = None) -> dict:
    """Flatten and harvest papers (``read_qasper`` output) into the 01_corpus tables and the funnel.

    ``params`` is the ``corpus`` section (fuzzy_threshold, drop_numeric_only, max_docs). Papers are processed in
    sorted id order; ``max_docs`` keeps the first N or a seeded sample of N (:func:`kept_documents`). A paper
    without ``full_text`` warns and is skipped.
    """
    warnings = [] if warnings is None else warnings
    ids = kept_documents(sorted(papers), params.max_docs, params.max_docs_from, params.seed)
    docs, paras_l, secs_l, rows = [], [], [], []
    counts: Counter = Counter()
    for pid in ids:
        split, rec = papers[pid]
        problem = paper_shape_problem(rec)
        if problem:
            warnings.append(f"QASPER paper {pid}: {problem}; skipped")
            counts["papers skipped (bad record)"] += 1
            qas = rec.get("qas") if isinstance(rec, dict) else None
            counts["questions read"] += len(qas) if isinstance(qas, list) else 0
            continue
        doc, paras, secs = flatten_paper(pid, rec, split)
        r, c = harvest_paper(pid, rec, doc, paras, secs, params.fuzzy_threshold, params.drop_numeric_only,
                             warnings, params.evidence_annotators)
        counts.update(c)
        docs.append(doc)
        paras_l.append(paras)
        secs_l.append(secs)
        rows.extend(r)
    documents = pd.DataFrame(docs)
    if len(documents):
        documents["revision"] = None
        documents["topic_bucket"] = None
    harvested = pd.DataFrame(rows, columns=HARVESTED_COLUMNS)
    paragraphs = pd.concat(paras_l, ignore_index=True) if paras_l else pd.DataFrame(
        columns=["doc_id", "para_idx", "start", "end"])
    sections = pd.concat(secs_l, ignore_index=True) if secs_l else pd.DataFrame(columns=SECTION_COLUMNS)
    stats = harvest_stats(harvested, sections, counts)
    stats["papers_read"] = len(ids)
    stats["papers_built"] = len(documents)
    stats["skipped_records"] = {"papers": int(counts["papers skipped (bad record)"]),
                                "questions": int(counts["questions skipped (bad record)"])}
    stats["splits"] = dict(Counter(papers[p][0] for p in ids))
    funnel = harvest_funnel(stats)
    return {"documents": documents, "paragraphs": paragraphs, "sections_gold": sections, "harvested": harvested,
            "corpus_funnel": funnel, "stats": stats}


def harvest_stats(harvested: pd.DataFrame, sections: pd.DataFrame, counts: Counter) -> dict:
    """Funnel numbers (paper, data section): questions read → usable, papers with a usable question, evidence
    match shares (exact / fuzzy / section over matched evidence strings), the share of depth-1 papers (over all
    built papers), and the multi-span share and mean spans per usable question at two levels:

    * ``share_multi_string`` / ``mean_strings`` — *evidence strings as annotated*: distinct text-evidence strings
      (whitespace-normalised; figure/table captions left out) across the answerable annotations, before
      matching. This is the paper's count (2.10 spans/question, 43.9% multi-span). NaN when the table has no
      ``n_strings`` (a harvest that does not record it).
    * ``share_multi_span`` / ``mean_spans`` — *matched spans*, what the metric scores: the spans after matching
      and combining annotators (``corpus.evidence_annotators``); two strings that match one paragraph are one
      span and a section fallback swallows the paragraphs inside it, so this level is lower."""
    matched = sum(counts[f"evidence: {r}"] for r in MATCH_RULES)
    depths = sections.groupby("doc_id")["level"].max() if len(sections) else pd.Series(dtype=int)
    n_q = len(harvested)
    strings = pd.to_numeric(harvested["n_strings"], errors="coerce") if "n_strings" in harvested else \
        pd.Series(dtype=float)
    has_strings = n_q > 0 and bool(strings.notna().all())
    return {
        "questions_read": int(counts["questions read"]),
        "usable": n_q,
        "dropped_unanswerable": int(counts["dropped: unanswerable"]),
        "dropped_numeric_only": int(counts["dropped: numeric-only"]),
        "dropped_no_evidence": int(counts["dropped: no evidence"] + counts["dropped: no text evidence"]),
        "dropped_only_figure_table_or_unmatched_evidence": int(counts["dropped: no text evidence"]),
        "papers_with_usable_questions": int(harvested["doc_id"].nunique()) if n_q else 0,
        "evidence_strings_matched": int(matched),
        "evidence_unmatched": int(counts["evidence: unmatched"]),
        "evidence_figure_table": int(counts["evidence: figure/table"]),
        "share_exact": counts["evidence: exact"] / matched if matched else 0.0,
        "share_fuzzy": counts["evidence: fuzzy"] / matched if matched else 0.0,
        "share_section": counts["evidence: section"] / matched if matched else 0.0,
        "share_multi_span": float((harvested["n_spans"] > 1).mean()) if n_q else 0.0,
        "mean_spans": float(harvested["n_spans"].mean()) if n_q else 0.0,
        "share_multi_string": float((strings > 1).mean()) if has_strings else float("nan"),
        "mean_strings": float(strings.mean()) if has_strings else float("nan"),
        "share_depth1_papers": float((depths == 1).mean()) if len(depths) else 0.0,
        "depth_distribution": {str(k): int(v) for k, v in sorted(Counter(depths.tolist()).items())},
        "qtype_counts": {str(k): int(v) for k, v in harvested["qtype"].value_counts().items()} if n_q else {},
    }


def harvest_funnel(stats: dict) -> pd.DataFrame:
    """The funnel as a table: ``step``, ``count`` and, for shares and means, ``value`` (shares are fractions in
    [0, 1]). Multi-span share and spans per question appear at both levels of :func:`harvest_stats`, labelled:
    evidence strings as annotated (the paper's count) and matched spans (what the metric scores)."""
    rows = [("questions read", stats["questions_read"], None),
            ("dropped: unanswerable", stats["dropped_unanswerable"], None),
            ("dropped: numeric-only", stats["dropped_numeric_only"], None),
            ("dropped: no text evidence", stats["dropped_no_evidence"], None),
            ("usable questions", stats["usable"], None),
            ("papers read", stats.get("papers_read", 0), None),
            ("papers with usable questions", stats["papers_with_usable_questions"], None),
            ("evidence matched: exact", None, stats["share_exact"]),
            ("evidence matched: fuzzy", None, stats["share_fuzzy"]),
            ("evidence matched: section fallback", None, stats["share_section"]),
            ("evidence unmatched (strings)", stats["evidence_unmatched"], None),
            ("evidence figure/table (strings, not matched)", stats["evidence_figure_table"], None),
            ("multi-span questions: evidence strings as annotated", None, stats.get("share_multi_string")),
            ("multi-span questions: matched spans (scored)", None, stats["share_multi_span"]),
            ("spans per question: evidence strings as annotated", None, stats.get("mean_strings")),
            ("spans per question: matched spans (scored)", None, stats["mean_spans"]),
            ("depth-1 papers", None, stats["share_depth1_papers"])]
    return pd.DataFrame(rows, columns=["step", "count", "value"]).astype({"count": "Int64", "value": "float64"})


# ------------------------------------------------------------------------------------ the kind's entry points

def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file :func:`build` reads: the archives of ``corpus.sources``."""
    return listed_sources(cfg)


def build(cfg: Config, session, warnings: list[str]) -> dict:
    """QASPER from the archives of ``corpus.sources`` (``session`` downloads them when there is no mirror). A
    damaged archive raises :class:`~chunkstudy.corpus.sources.CorpusInputError` naming it, unless
    ``corpus.allow_partial``."""
    c = cfg.params("corpus")
    try:
        papers = read_qasper(source_paths(cfg, session), warnings, allow_partial=c.allow_partial)
    except QasperReadError as e:
        raise CorpusInputError(f"{e} (corpus.allow_partial: true builds from the readable part)") from None
    return build_qasper(papers, c, warnings)


#: ``corpus.kind: qasper``.
LOADER = CorpusLoader(
    kind="qasper",
    doc="the official QASPER archives (or the JSON files inside them) that `corpus.sources` names, in "
        "`corpus.mirror` or downloaded from `corpus.fetch_urls`",
    parameters=("sources", "fetch_urls", "max_docs", "max_docs_from", "seed", "fuzzy_threshold", "drop_numeric_only",
                "evidence_annotators"),
    questions="the QASPER archives (corpus.sources)", build=build, source_files=source_files)
