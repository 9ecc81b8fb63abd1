"""Structure induction (paper, Section 3.3 "Induced structure"): an outline for each document, headings unseen.

Two inducers, one output contract (the section table of :mod:`chunkstudy.corpus.model`, plus a log):

``method: llm`` — the paper's arm.
    The model sees the document's paragraphs numbered ``[0] .. [m-1]`` with every heading stripped and returns
    JSON ``{"sections": [{"title", "level", "first_paragraph", "last_paragraph"}, ...]}`` (a JSON schema is
    sent where the backend enforces one). Hard constraints: the sections tile the paragraphs exactly, levels lie
    in 1..4, the first is 1 and a level is at most one deeper than the previous one; a heading directly
    followed by a sub-heading owns no paragraphs (``last_paragraph = first_paragraph - 1``). The reply is
    verified mechanically (:func:`model.verify_sections` plus type checks). On failure the model gets
    ``self_correct_rounds`` (default 1) correction turns listing the specific violations; if the reply is still
    invalid, :func:`repair` snaps it to a legal tiling. A document with no usable reply at all falls back to a
    single level-1 section (status ``failed``, counted; see below).

``method: texttiling`` — a NAMED NON-LLM BASELINE and the offline default; never the LLM arm.
    TextTiling (Hearst 1997) over paragraphs: gap scores are cosines between tf-idf vectors (or embeddings when
    ``embed`` is given) of the ``texttiling_block`` paragraphs on each side of a gap; a gap's depth score is
    ``(left peak - s) + (right peak - s)``; boundaries are valleys whose depth exceeds
    ``mean - texttiling_depth_cutoff * sd`` of all depth scores (Hearst's liberal cutoff at 0.5). Boundaries
    are ranked by depth and split into ``texttiling_levels`` equal-count bands: the deepest band opens level-1
    sections, the next level 2, and so on (then made legal: a level is at most one deeper than the previous).
    Each section is titled with the ``title_terms`` most salient tf-idf terms of its whole subtree, leaving out
    terms its ancestors' titles already use.

Policies (stated, and recorded in the log):

* **Whole documents.** A document is induced in ONE call whenever its numbered prompt plus the reply fit the
  model's context: ``llm.context_tokens`` minus ``llm.max_reply_tokens`` (the reply's allowance: about 60 sections of
  JSON at 2,048) minus a 512-token allowance for the instructions, tokens estimated as characters / 4 (the
  served model's tokenizer is not available to the client). The paper's model sees "the document's paragraphs";
  with its 131k-token context every Wikipedia-FA article and QASPER paper fits.
* **Long documents.** Only a document whose prompt does not fit is cut into consecutive windows of whole
  paragraphs that fit; ``induce.window_paragraphs`` (default null: "as the context allows") additionally caps
  the paragraphs per call when set. Each window is induced as a document of its own (numbered from 0, corrected
  and repaired on its own); the windows' outlines are concatenated, so every window starts a level-1 section
  (which is why windows are a last resort: they move the A2/A3/P/A4 boundaries and routing sections of exactly
  the longest documents). The log records the window count (``n_windows``), :func:`induction_stats` the
  windowed documents; a document's status is the worst of its windows'.
* **Repair** (:func:`repair`): keep each section whose ``first_paragraph`` is an integer (ints, integral floats
  and digit strings are accepted); clamp it into ``0..m``; order sections by start (stable); the first section
  starts at 0; each section ends where the next one starts (the reported ``last_paragraph`` is ignored: gaps go
  to the preceding section, overlaps to the following one); levels are clamped to ``1..max_level``, the first is
  1 and each is at most one deeper than the previous; a missing or non-string title becomes the section's
  salient terms (a non-string scalar becomes its string). A valid outline is returned unchanged.
* **Failure.** No section with a usable start after all rounds (unparseable JSON, an empty reply, an empty
  list, a backend error) — the document gets one level-1 section titled with the document title, status
  ``failed``. The paper counts "usable" = ok + repaired.

Statuses: ``ok`` (valid on the first reply), ``repaired`` (valid only after self-correction or repair),
``failed`` (fallback).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import paper, stages
from .corpus import model as docmodel
from .corpus.model import Outline


def _paper_row(kind: str) -> dict:
    p = paper.values(kind, "induction")
    gold = p.get("gold_sections_per_doc")
    return {"corpus": paper.label(kind), "usable": f"{p['usable']:,}/{p['documents']:,}",
            "induced_whole": f"{p['induced_whole']:,}/{p['documents']:,}", "repaired": p["repaired"],
            "sections_per_doc": p["sections_per_doc"], "gold_sections_per_doc": gold,
            "identity_with_gold": p["span_identity"]}


#: The paper's induction results (Section 3.3), shown next to ours; read from :mod:`chunkstudy.paper`.
PAPER_INDUCTION = {kind: _paper_row(kind) for kind in ("wikipedia", "qasper")}

OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "sections": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "title": {"type": "string"},
                    "level": {"type": "integer", "minimum": 1, "maximum": 4},
                    "first_paragraph": {"type": "integer", "minimum": 0},
                    "last_paragraph": {"type": "integer", "minimum": -1},
                },
                "required": ["title", "level", "first_paragraph", "last_paragraph"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["sections"],
    "additionalProperties": False,
}

PROMPT = """Below are the paragraphs of a document, numbered from 0 to {last}. All of its headings have been \
removed. Recover the document's section structure: where each section starts and ends, its level in the \
hierarchy, and a short heading for it.

Return only JSON of the form {{"sections": [{{"title": "...", "level": 1, "first_paragraph": 0, \
"last_paragraph": 3}}, ...]}}, listing the sections in document order, under these hard constraints:
- The sections tile the paragraphs exactly: the first section starts at paragraph 0, each section starts right \
after the previous one ends (first_paragraph = previous last_paragraph + 1), and the last section ends at \
paragraph {last}. No paragraph is skipped or repeated.
- A section whose heading is directly followed by a sub-heading owns no paragraphs: give it \
last_paragraph = first_paragraph - 1.
- level is an integer from 1 to {max_level}; the first section has level 1, and a section is at most one level \
deeper than the section before it.
- title is a short heading (a few words) that the document's author could have written.

Paragraphs:
{paragraphs}"""

CORRECTION = """Your answer violates the constraints:
{violations}
Return the corrected, complete JSON for all paragraphs 0 to {last}, and nothing else."""

PROMPT_ALLOWANCE_TOKENS = 512
CHARS_PER_TOKEN = 4.0

LOG_COLUMNS = stages.columns("induction_log")


class InductionError(ValueError):
    """Bad input to induction (the message names the table and the document)."""


# --------------------------------------------------------------------------------------------------- parsing


def _as_int(v: Any) -> int | None:
    """An integer from an int, an integral float or a digit string; ``None`` otherwise (bools are not ints)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_reply(text: str) -> tuple[list | None, list[str]]:
    """The ``sections`` list of a model reply (tolerating code fences and text around the JSON), and the
    problems found. ``None`` when no list can be read."""
    if not isinstance(text, str) or not text.strip():
        return None, ["the reply is empty"]
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    for open_, close in (("{", "}"), ("[", "]")):
        i, j = text.find(open_), text.rfind(close)
        if 0 <= i < j:
            candidates.append(text[i:j + 1])
    for c in candidates:
        try:
            obj = json.loads(c)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("sections"), list):
            return obj["sections"], []
        if isinstance(obj, list):
            return obj, ["the reply is a bare list; expected {\"sections\": [...]}"]
        return None, ["the reply is JSON but has no \"sections\" list"]
    return None, ["the reply is not valid JSON"]


def type_violations(items: Sequence) -> list[str]:
    """Type problems of parsed section items, in the words the correction prompt uses."""
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            out.append(f"section {i}: expected an object, got {type(it).__name__}")
            continue
        for k in ("first_paragraph", "last_paragraph", "level"):
            if k not in it:
                out.append(f"section {i}: missing {k!r}")
            elif not isinstance(it[k], int) or isinstance(it[k], bool):
                out.append(f"section {i}: {k!r} must be an integer, got {it[k]!r}")
        if not isinstance(it.get("title"), str):
            out.append(f"section {i}: 'title' must be a string, got {it.get('title')!r}")
    return out


def outline_violations(items: Sequence, paras: pd.DataFrame, max_level: int) -> list[str]:
    """All violations of a parsed reply against one (window's) paragraph table, numbered from 0.

    Type problems first; a type-clean list is then checked with :func:`model.verify_sections` (tiling, bounds,
    levels)."""
    if not items:
        return ["the sections list is empty"]
    tv = type_violations(items)
    if tv:
        return tv
    outline = [Outline(it["title"], it["level"], it["first_paragraph"], it["last_paragraph"]) for it in items]
    secs = docmodel.sections_from_outline("w", paras, outline)
    return docmodel.verify_sections(secs, paras, None, max_level)


# ---------------------------------------------------------------------------------------------------- repair


def repair(items: Sequence, n_paragraphs: int, max_level: int = docmodel.MAX_LEVEL,
           title_fn: Callable[[int, int], str] | None = None) -> list[Outline] | None:
    """Snap a near-valid reply to a legal tiling of ``n_paragraphs`` paragraphs (algorithm in the module
    docstring); ``None`` when no item has a usable ``first_paragraph``. ``title_fn(first, last)`` supplies a
    title for items without one (default: ``"Section k"``)."""
    m = n_paragraphs
    kept = []
    for order, it in enumerate(items or []):
        if not isinstance(it, dict):
            continue
        first = _as_int(it.get("first_paragraph"))
        if first is None:
            continue
        level = _as_int(it.get("level"))
        title = it.get("title")
        kept.append((min(max(first, 0), m), order, level, title))
    if not kept or m == 0:
        return None
    kept.sort(key=lambda t: (t[0], t[1]))
    starts = [k[0] for k in kept]
    starts[0] = 0
    ends = [s - 1 for s in starts[1:]] + [m - 1]
    levels = _legal_levels([k[2] for k in kept], max_level)
    out = []
    for i, ((_, _, _, title), s, e, lv) in enumerate(zip(kept, starts, ends, levels)):
        if title is None or isinstance(title, (dict, list)):
            title = title_fn(s, e) if title_fn else f"Section {i + 1}"
        elif not isinstance(title, str):
            title = str(title)
        out.append(Outline(title, lv, s, e))
    return out


def is_valid_outline(outline: Sequence[Outline], paras: pd.DataFrame, max_level: int) -> bool:
    secs = docmodel.sections_from_outline("w", paras, outline)
    return not docmodel.verify_sections(secs, paras, None, max_level)


# ------------------------------------------------------------------------------------------------- windowing


def windows_for(para_texts: Sequence[str], max_paragraphs: int | None, max_chars: float) -> list[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` paragraph windows, each (unless a single paragraph is longer) at most
    ``max_chars`` characters of numbered prompt and, when ``max_paragraphs`` is not None, at most that many
    paragraphs. One window — the whole document — when all fits."""
    out, lo, size = [], 0, 0.0
    cap = math.inf if max_paragraphs is None else max_paragraphs
    for i, t in enumerate(para_texts):
        add = len(t) + 8  # "[123] " and the separator
        if i > lo and (i - lo >= cap or size + add > max_chars):
            out.append((lo, i))
            lo, size = i, 0.0
        size += add
    if para_texts:
        out.append((lo, len(para_texts)))
    return out


def _local_paras(paras: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    p = paras.iloc[lo:hi].copy()
    p["para_idx"] = np.arange(hi - lo, dtype="int64")
    return p.reset_index(drop=True)


def build_messages(para_texts: Sequence[str], max_level: int) -> list[dict]:
    body = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(para_texts))
    return [{"role": "user", "content": PROMPT.format(last=len(para_texts) - 1, max_level=max_level,
                                                      paragraphs=body)}]


# -------------------------------------------------------------------------------------------- salient terms


@dataclass
class _Lexicon:
    """tf-idf over every paragraph of the input (sklearn ``TfidfVectorizer``: English stop words, sublinear tf,
    tokens of 3+ letters), shared by the TextTiling gap scores and the salient-term titles."""

    matrix: Any
    vocab: np.ndarray
    row_of: dict = field(default_factory=dict)  # (doc_id, para_idx) -> row

    @classmethod
    def fit(cls, texts: Sequence[str], keys: Sequence[tuple[str, int]]) -> "_Lexicon":
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(stop_words="english", sublinear_tf=True, token_pattern=r"(?u)\b[^\W\d_]{3,}\b",
                              lowercase=True, dtype=np.float64)
        try:
            mat = vec.fit_transform(list(texts)).tocsr()
            vocab = np.asarray(vec.get_feature_names_out())
        except ValueError:  # no usable term anywhere
            from scipy import sparse

            mat, vocab = sparse.csr_matrix((len(texts), 0)), np.asarray([], dtype=object)
        return cls(mat, vocab, {k: i for i, k in enumerate(keys)})

    def rows(self, doc_id: str, lo: int, hi: int):
        return self.matrix[[self.row_of[(doc_id, i)] for i in range(lo, hi)]]

    def terms(self, doc_id: str, lo: int, hi: int, k: int, exclude: set[str] = frozenset()) -> list[str]:
        """The ``k`` highest summed tf-idf terms of paragraphs ``lo..hi-1`` (ties by term), minus ``exclude``."""
        if hi <= lo or k <= 0 or self.matrix.shape[1] == 0:
            return []
        w = np.asarray(self.rows(doc_id, lo, hi).sum(axis=0)).ravel()
        idx = np.flatnonzero(w > 0)
        top = idx[np.argsort(-w[idx], kind="stable")][: k + len(exclude) + 8]  # vocab is sorted: ties by term
        return [str(self.vocab[j]) for j in top if self.vocab[j] not in exclude][:k]


def _title(terms: list[str]) -> str:
    return ", ".join(terms).capitalize() if terms else ""


# ------------------------------------------------------------------------------------------------ TextTiling


def gap_scores(vectors: np.ndarray, block: int) -> np.ndarray:
    """Cosine similarity at each gap ``g = 1..n-1`` (between paragraphs g-1 and g) of the summed vectors of the
    ``block`` paragraphs before and after it (fewer at the edges); 0 when a side has no terms."""
    n = vectors.shape[0]
    out = np.zeros(max(n - 1, 0))
    for g in range(1, n):
        a = vectors[max(0, g - block):g].sum(axis=0)
        b = vectors[g:min(n, g + block)].sum(axis=0)
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        out[g - 1] = float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0
    return out


def depth_scores(scores: np.ndarray) -> np.ndarray:
    """Hearst's depth score of each gap: ``(left peak - s) + (right peak - s)``, where a peak is reached by
    climbing from the gap while the score does not decrease."""
    n = len(scores)
    out = np.zeros(n)
    for i in range(n):
        lp = scores[i]
        j = i - 1
        while j >= 0 and scores[j] >= lp:
            lp = scores[j]
            j -= 1
        rp = scores[i]
        j = i + 1
        while j < n and scores[j] >= rp:
            rp = scores[j]
            j += 1
        out[i] = (lp - scores[i]) + (rp - scores[i])
    return out


def texttiling_boundaries(vectors: np.ndarray, block: int, cutoff: float, levels: int) -> list[tuple[int, int]]:
    """``[(first paragraph, level), ...]`` of the sections after the lead (paragraph 0 always opens a level-1
    section). Boundaries are valleys of the gap score with depth > mean - cutoff * sd; ranked by depth (ties
    by position) into ``levels`` equal-count bands, deepest band = level 1."""
    n = vectors.shape[0]
    if n < 2:
        return []
    s = gap_scores(vectors, block)
    d = depth_scores(s)
    thr = d.mean() - cutoff * d.std()
    valley = [i for i in range(len(s)) if (i == 0 or s[i] <= s[i - 1]) and (i == len(s) - 1 or s[i] <= s[i + 1])]
    chosen = [i for i in valley if d[i] > thr and d[i] > 0]
    ranked = sorted(chosen, key=lambda i: (-d[i], i))
    levels = max(1, levels)
    band = {g: min(levels, 1 + (r * levels) // len(ranked)) for r, g in enumerate(ranked)} if ranked else {}
    return [(g + 1, band[g]) for g in sorted(chosen)]


def _legal_levels(levels: list[int | None], max_level: int) -> list[int]:
    """Levels made legal: the first is 1, each lies in ``1..max_level`` and is at most one deeper than the
    previous; a missing level (``None``) repeats the previous one."""
    out, prev = [], 0
    for i, lv in enumerate(levels):
        lv = 1 if i == 0 else min(max(prev if lv is None else lv, 1), prev + 1, max_level)
        out.append(lv)
        prev = lv
    return out


def _subtree_end(starts: list[int], levels: list[int], i: int, n: int) -> int:
    for j in range(i + 1, len(starts)):
        if levels[j] <= levels[i]:
            return starts[j]
    return n


def titled_outline(doc_id: str, starts: list[int], levels: list[int], n: int, lex: _Lexicon,
                   k: int) -> list[Outline]:
    """Sections from starts and levels, titled by the salient terms of each subtree minus its ancestors'."""
    out, anc = [], []  # anc: stack of (level, set of title terms)
    for i, (s, lv) in enumerate(zip(starts, levels)):
        e = (starts[i + 1] if i + 1 < len(starts) else n) - 1
        while anc and anc[-1][0] >= lv:
            anc.pop()
        used = set().union(*(t for _, t in anc)) if anc else set()
        terms = lex.terms(doc_id, s, _subtree_end(starts, levels, i, n), k, used)
        anc.append((lv, set(terms)))
        out.append(Outline(_title(terms), lv, s, e))
    return out


# ---------------------------------------------------------------------------------------------------- driver


@dataclass
class _Doc:
    doc_id: str
    title: str
    text: str
    paras: pd.DataFrame
    texts: list[str]


def _docs(documents: pd.DataFrame, paragraphs: pd.DataFrame) -> list[_Doc]:
    for col in ("doc_id", "title", "text"):
        if col not in documents.columns:
            raise InductionError(f"documents: missing column {col!r}; written by 01_corpus")
    by_p = {d: g.sort_values("para_idx").reset_index(drop=True) for d, g in paragraphs.groupby("doc_id", sort=False)}
    out = []
    for doc_id, title, text in zip(documents["doc_id"], documents["title"], documents["text"]):
        p = by_p.get(doc_id)
        if p is None or len(p) == 0:
            raise InductionError(f"paragraphs: document {doc_id!r} has no paragraphs; written by 01_corpus")
        if list(p["para_idx"]) != list(range(len(p))):
            raise InductionError(f"paragraphs: document {doc_id!r} is not numbered 0..n-1")
        if int(p["end"].iat[-1]) != len(text):
            raise InductionError(f"paragraphs: document {doc_id!r} ends at {int(p['end'].iat[-1])}, "
                                 f"its text has {len(text)} characters")
        texts = [text[s:e] for s, e in zip(p["start"], p["end"])]
        out.append(_Doc(str(doc_id), str(title), text, p, texts))
    return out


def _fit_lexicon(docs: list[_Doc]) -> _Lexicon:
    return _Lexicon.fit([t for d in docs for t in d.texts], [(d.doc_id, i) for d in docs for i in range(len(d.texts))])


def _log_row(doc_id: str, status: str, method: str, **kw) -> dict:
    row = {"doc_id": doc_id, "status": status, "method": method, "rounds": 0, "n_windows": 1, "n_sections": 0,
           "fixed_by": "", "n_violations": 0, "violations": "[]", "error": "", "model": ""}
    row.update(kw)
    return row


def _texttiling(docs: list[_Doc], p: Mapping, lex: _Lexicon, embed: Callable | None):
    sections, log = [], []
    max_level = int(p.get("max_level", docmodel.MAX_LEVEL))
    levels_wanted = min(int(p.get("texttiling_levels", 3)), max_level)
    for d in docs:
        n = len(d.texts)
        if embed is not None:
            vecs = np.asarray(embed(d.texts), dtype=np.float64)
        else:
            vecs = lex.rows(d.doc_id, 0, n).toarray()
        bounds = texttiling_boundaries(vecs, int(p.get("texttiling_block", 2)),
                                       float(p.get("texttiling_depth_cutoff", 0.5)), levels_wanted)
        starts = [0] + [b for b, _ in bounds]
        levels = _legal_levels([1] + [lv for _, lv in bounds], max_level)
        outline = titled_outline(d.doc_id, starts, levels, n, lex, int(p.get("title_terms", 3)))
        secs = docmodel.sections_from_outline(d.doc_id, d.paras, outline, len(d.text))
        v = docmodel.verify_sections(secs, d.paras, len(d.text), max_level)
        if v:  # cannot happen by construction; a loud error beats a silently broken outline
            raise InductionError(f"texttiling: document {d.doc_id!r} produced an invalid outline: {v[:3]}")
        sections.append(secs)
        log.append(_log_row(d.doc_id, "ok", "texttiling", n_sections=len(secs)))
    return sections, log


def _llm(docs: list[_Doc], p: Mapping, lex: _Lexicon, client) -> tuple[list, list]:
    from . import llm

    max_level = int(p.get("max_level", docmodel.MAX_LEVEL))
    rounds = int(p.get("self_correct_rounds", 1))
    budget_tokens = client.context_tokens - client.max_tokens - PROMPT_ALLOWANCE_TOKENS
    if budget_tokens <= 0:
        raise InductionError(f"llm.context_tokens {client.context_tokens} leaves no room for a document after "
                             f"llm.max_reply_tokens {client.max_tokens} and {PROMPT_ALLOWANCE_TOKENS} prompt tokens")
    max_chars = budget_tokens * CHARS_PER_TOKEN
    # one state per (document, window)
    states = []
    for d in docs:
        cap = p.get("window_paragraphs")
        for lo, hi in windows_for(d.texts, None if cap is None else int(cap), max_chars):
            states.append({"doc": d, "lo": lo, "hi": hi, "paras": _local_paras(d.paras, lo, hi),
                           "messages": build_messages(d.texts[lo:hi], max_level), "items": None,
                           "violations": None, "first_violations": None, "rounds": 0, "errors": []})

    def ask(batch: list[dict], label: str) -> None:
        reqs = [llm.Request(st["messages"], json_schema=OUTPUT_SCHEMA,
                            tag=f"induce:{st['doc'].doc_id}:{st['lo']}:r{st['rounds']}") for st in batch]
        for st, r in zip(batch, client.generate(reqs, desc=label)):
            st["rounds"] += 1
            st["reply"] = r.text
            if r.error:
                st["errors"].append(r.error)
                items, problems = None, [f"the model call failed: {r.error}"]
            else:
                items, problems = parse_reply(r.text)
            st["items"] = items if items is not None else st["items"]
            st["violations"] = problems + (outline_violations(items, st["paras"], max_level)
                                           if items is not None else [])
            if st["first_violations"] is None:
                st["first_violations"] = list(st["violations"])

    ask(states, "induction")
    for _ in range(rounds):
        bad = [st for st in states if st["violations"]]
        if not bad:
            break
        for st in bad:
            st["messages"] = st["messages"] + [
                {"role": "assistant", "content": st["reply"] or ""},
                {"role": "user", "content": CORRECTION.format(
                    violations="\n".join(f"- {v}" for v in st["violations"][:30]), last=st["hi"] - st["lo"] - 1)}]
        ask(bad, "induction self-correction")

    sections, log = [], []
    by_doc: dict[str, list[dict]] = {}
    for st in states:
        by_doc.setdefault(st["doc"].doc_id, []).append(st)
    rank = {"ok": 0, "repaired": 1, "failed": 2}
    for d in docs:
        outline, status, fixed = [], "ok", set()
        for st in by_doc[d.doc_id]:
            lo, hi = st["lo"], st["hi"]
            m = hi - lo
            title_fn = lambda s, e, lo=lo: _title(lex.terms(d.doc_id, lo + s, lo + e + 1, 3))  # noqa: E731
            if not st["violations"]:
                local = [Outline(it["title"], it["level"], it["first_paragraph"], it["last_paragraph"])
                         for it in st["items"]]
                st_status = "ok" if not st["first_violations"] else "repaired"
                if st_status == "repaired":
                    fixed.add("self-correction")
            else:
                local = repair(st["items"], m, max_level, title_fn)
                if local is not None and is_valid_outline(local, st["paras"], max_level):
                    st_status = "repaired"
                    fixed.add("repair")
                else:
                    local = [Outline(d.title, 1, 0, m - 1)]
                    st_status = "failed"
                    fixed.add("fallback")
            outline += [Outline(o.title, o.level, o.first_para + lo, o.last_para + lo) for o in local]
            status = max(status, st_status, key=rank.get)
        secs = docmodel.sections_from_outline(d.doc_id, d.paras, outline, len(d.text))
        v = docmodel.verify_sections(secs, d.paras, len(d.text), max_level)
        if v:
            raise InductionError(f"induction: document {d.doc_id!r} assembled an invalid outline: {v[:3]}")
        sections.append(secs)
        sts = by_doc[d.doc_id]
        first_v = [x for st in sts for x in (st["first_violations"] or [])]
        log.append(_log_row(
            d.doc_id, status, "llm", rounds=max(st["rounds"] for st in sts), n_windows=len(sts),
            n_sections=len(secs), fixed_by="+".join(sorted(fixed)), n_violations=len(first_v),
            violations=json.dumps(first_v[:20]), error="; ".join(e for st in sts for e in st["errors"])[:500],
            model=client.model))
    return sections, log


def induce_structure(documents: pd.DataFrame, paragraphs: pd.DataFrame, induce_params: Mapping,
                     client=None, embed: Callable[[list[str]], np.ndarray] | None = None
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Induce an outline for every document; return ``(sections_induced, induction_log)``.

    ``sections_induced`` follows the section schema of :mod:`chunkstudy.corpus.model` (offsets are half-open
    character indices into ``documents.text``, from the paragraph table) and verifies for every document.
    ``induction_log`` has one row per document: ``doc_id, status ("ok" | "repaired" | "failed"), method,
    rounds (model calls per window, max over windows), n_windows, n_sections, fixed_by, n_violations and
    violations (of the first reply, JSON list, first 20), error, model``.

    ``induce_params`` is ``cfg["induce"]``. ``method: llm`` needs ``client`` (:func:`llm.make_client`);
    ``method: texttiling`` ignores it and uses ``embed(texts) -> vectors`` for gap scores when given (else
    tf-idf). Inputs are not modified.
    """
    method = induce_params.get("method", "texttiling")
    docs = _docs(documents, paragraphs)
    lex = _fit_lexicon(docs)
    if method == "texttiling":
        sections, log = _texttiling(docs, induce_params, lex, embed)
    elif method == "llm":
        if client is None:
            raise InductionError("induce.method is 'llm' but no LLM client was given (llm.make_client)")
        sections, log = _llm(docs, induce_params, lex, client)
    else:
        raise InductionError(f"induce.method {method!r} is not one of ['llm', 'texttiling']")
    secs = pd.concat(sections, ignore_index=True) if sections else pd.DataFrame(columns=docmodel.SECTION_COLUMNS)
    return secs, pd.DataFrame(log, columns=LOG_COLUMNS)


# ----------------------------------------------------------------------------------------------------- stats


def span_identity(induced: pd.DataFrame, gold: pd.DataFrame) -> float:
    """Share of induced spans ``(doc_id, start, end)`` (half-open character offsets) that are byte-identical to
    a gold span of the same document (paper 3.3: "induced chunk spans byte-identical to a gold span"). Empty
    spans are left out. NaN when there are no induced spans."""
    def spans(df):
        df = df[df["end"] > df["start"]]
        return set(zip(df["doc_id"].astype(str), df["start"].astype(int), df["end"].astype(int)))

    ind, gld = spans(induced), spans(gold)
    return len(ind & gld) / len(ind) if ind else float("nan")


def induction_stats(sections_induced: pd.DataFrame, log: pd.DataFrame, sections_gold: pd.DataFrame | None = None,
                    induced_chunks: pd.DataFrame | None = None, gold_chunks: pd.DataFrame | None = None) -> dict:
    """Counts and rates of an induction run (no rounding).

    ``usable`` = ok + repaired; ``induced_whole`` = documents induced in one call (not cut into windows);
    ``sections_per_doc`` counts every outline row (empty parent sections too);
    ``identity_with_gold`` is :func:`span_identity` of the structural chunks of both outlines when
    ``induced_chunks``/``gold_chunks`` are given (``identity_basis: "structural chunks"``, the paper's measure),
    else of the non-empty section spans (``"section spans"``)."""
    st = log["status"].value_counts()
    out = {
        "n_docs": int(len(log)),
        "ok": int(st.get("ok", 0)), "repaired": int(st.get("repaired", 0)), "failed": int(st.get("failed", 0)),
        "method": ",".join(sorted(set(log["method"]))) if "method" in log else "",
        "model": ",".join(sorted(set(m for m in log.get("model", pd.Series(dtype=str)) if m))),
        "windowed_docs": int((log["n_windows"] > 1).sum()) if "n_windows" in log else 0,
        "sections_per_doc": float(sections_induced.groupby("doc_id").size().mean()) if len(sections_induced)
        else float("nan"),
        "depth_mean": float(sections_induced.groupby("doc_id")["level"].max().mean()) if len(sections_induced)
        else float("nan"),
    }
    out["usable"] = out["ok"] + out["repaired"]
    out["induced_whole"] = out["n_docs"] - out["windowed_docs"]
    if sections_gold is not None and len(sections_gold):
        out["gold_sections_per_doc"] = float(sections_gold.groupby("doc_id").size().mean())
        if "level" in sections_gold.columns:
            out["gold_depth_mean"] = float(sections_gold.groupby("doc_id")["level"].max().mean())
    if induced_chunks is not None and gold_chunks is not None:
        out["identity_with_gold"] = span_identity(induced_chunks, gold_chunks)
        out["identity_basis"] = "structural chunks"
    elif sections_gold is not None:
        out["identity_with_gold"] = span_identity(sections_induced, sections_gold)
        out["identity_basis"] = "section spans"
    return out


def stats_table(stats: dict, corpus_kind: str) -> pd.DataFrame:
    """Our stats next to the paper's row for the same corpus kind (``wikipedia`` or ``qasper``; the demo has
    no paper row). ``induced_whole`` = documents induced in one call (not windowed) / documents. Values are not
    rounded."""
    ours = {"corpus": f"this run ({stats.get('method', '')})", "usable": f"{stats['usable']}/{stats['n_docs']}",
            "induced_whole": f"{stats['induced_whole']}/{stats['n_docs']}", "repaired": stats["repaired"],
            "sections_per_doc": stats["sections_per_doc"],
            "gold_sections_per_doc": stats.get("gold_sections_per_doc"),
            "identity_with_gold": stats.get("identity_with_gold")}
    rows = [ours]
    if corpus_kind in PAPER_INDUCTION:
        rows.append({**PAPER_INDUCTION[corpus_kind], "corpus": PAPER_INDUCTION[corpus_kind]["corpus"] + " (paper, Gemma)"})
    return pd.DataFrame(rows).set_index("corpus")


def outline_view(sections: pd.DataFrame, doc_id: str) -> pd.DataFrame:
    """One document's outline as an indented tree: ``[heading, paragraphs]`` rows (for display)."""
    s = sections[sections["doc_id"] == doc_id]
    return pd.DataFrame({
        "heading": [("· " * (lv - 1)) + (t or "(untitled lead)") for lv, t in zip(s["level"], s["title"])],
        "paragraphs": [f"{a}-{b}" if b >= a else f"(empty at {a})" for a, b in zip(s["first_para"], s["last_para"])],
    }).reset_index(drop=True)


def outlines_side_by_side(gold: pd.DataFrame, induced: pd.DataFrame, doc_id: str) -> pd.DataFrame:
    """Gold and induced trees of one document next to each other (rows aligned by position, padded)."""
    g, i = outline_view(gold, doc_id), outline_view(induced, doc_id)
    n = max(len(g), len(i))
    g = g.reindex(range(n)).fillna("")
    i = i.reindex(range(n)).fillna("")
    return pd.DataFrame({"gold": g["heading"], "gold paragraphs": g["paragraphs"], "induced": i["heading"],
                         "induced paragraphs": i["paragraphs"]})


def model_note(llm_params: Mapping, induce_params: Mapping, contexts_params: Mapping) -> str:
    """A plain statement of what produced induced structure and A1 contexts, and whether that is the study's
    class of model (``llm.capable``); reports print it above their numbers."""
    parts = []
    model = f"{llm_params.get('backend')} model {llm_params.get('model') or '(none)'}"
    below = not llm_params.get("capable", False)
    for what, method, baseline in (("Structure induction", induce_params.get("method"), "texttiling"),
                                   ("A1 contexts", contexts_params.get("method"), "extractive")):
        if method == baseline:
            parts.append(f"{what}: the non-LLM '{method}' BASELINE, not the paper's LLM arm.")
        else:
            parts.append(f"{what}: {model}" + (" - BELOW the study's model class (llm.capable is false); "
                                                "numbers show the pipeline, not the paper's result." if below
                                                else " (llm.capable: a model of the study's class)."))
    return " ".join(parts)
