"""The LLM arm (``method: llm``): the prompt, windows of whole paragraphs when a document does not fit the
context, parsing the model's reply, the violations listed back in a correction turn, and the deterministic
:func:`repair` (policies in :mod:`chunkstudy.induce`)."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..corpus import model as docmodel
from ..corpus.model import Outline
from ..params import InduceParams
from .common import InductionError, _Doc, _Lexicon, _legal_levels, _log_row, _title


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


#: characters per token of an outline reply (pretty-printed JSON, :func:`outline_reply`), for the expected reply of
#: a gold outline without a tokenizer: measured 3.68 at the lowest per document (median 3.9) with SmolLM2's
#: tokenizer over the gold outlines of the QASPER test split and the Wikipedia exports; 3.5 errs high.
OUTLINE_CHARS_PER_TOKEN = 3.5


# ---------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------
# Repair
# ---------------------------------------------------------------------------------------------------------------


def repair(items: Sequence, n_paragraphs: int, max_level: int,
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


# ---------------------------------------------------------------------------------------------------------------
# Windowing
# ---------------------------------------------------------------------------------------------------------------


def windows_for(para_texts: Sequence[str], max_paragraphs: int | None, max_chars: float,
                per_paragraph_chars: float = 0.0) -> list[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` paragraph windows, each (unless a single paragraph is longer) at most
    ``max_chars`` characters of numbered prompt, plus ``per_paragraph_chars`` for each of its paragraphs (the
    reply's share, :func:`window_plan`), and, when ``max_paragraphs`` is not None, at most that many
    paragraphs. One window — the whole document — when all fits."""
    out, lo, size = [], 0, 0.0
    cap = math.inf if max_paragraphs is None else max_paragraphs
    for i, t in enumerate(para_texts):
        add = len(t) + 8 + per_paragraph_chars  # "[123] " and the separator
        if i > lo and (i - lo >= cap or size + add > max_chars):
            out.append((lo, i))
            lo, size = i, 0.0
        size += add
    if para_texts:
        out.append((lo, len(para_texts)))
    return out


def reply_budget(n_paragraphs: int, p: Any) -> int:
    """The reply budget (``max_tokens``) the rule gives an induction call over ``n_paragraphs`` paragraphs, before
    the context bound (``p``: the ``induce`` record)::

        reply_base_tokens + ceil(reply_tokens_per_section * max(1, ceil(reply_sections_per_paragraph * n)))

    ``reply_tokens_per_section`` is what one section entry of the JSON outline the prompt asks for costs
    (measured: :data:`chunkstudy.induce` docstring), ``reply_sections_per_paragraph`` the most sections per
    paragraph the reply is expected to hold, ``reply_base_tokens`` the JSON around the list and slack."""
    sections = max(1, math.ceil(p.reply_sections_per_paragraph * n_paragraphs))
    return int(p.reply_base_tokens + math.ceil(p.reply_tokens_per_section * sections))


def prompt_tokens(para_texts: Sequence[str]) -> float:
    """The numbered prompt's tokens as the windows estimate them: characters / :data:`CHARS_PER_TOKEN` plus
    :data:`PROMPT_ALLOWANCE_TOKENS` for the instructions."""
    return sum(len(t) + 8 for t in para_texts) / CHARS_PER_TOKEN + PROMPT_ALLOWANCE_TOKENS


def window_plan(para_texts: Sequence[str], p: Any, context_tokens: int) -> list[tuple[int, int, int]]:
    """``[(lo, hi, reply budget), ...]`` of one document's induction calls (``p``: the ``induce`` record).

    Windows (:func:`windows_for`) are as large as the context holds their prompt (:func:`prompt_tokens`) plus
    their reply budget (:func:`reply_budget`, which grows with the window's paragraphs); one window, the whole
    document, whenever it fits. Each window's budget is the rule's, bounded by what its prompt leaves of
    ``context_tokens`` (smaller only for a single paragraph too long for the context; at least 1)."""
    tps, spp = p.reply_tokens_per_section, p.reply_sections_per_paragraph
    fixed = context_tokens - PROMPT_ALLOWANCE_TOKENS - p.reply_base_tokens - math.ceil(tps)
    if fixed <= 0:
        raise InductionError(f"llm.context_tokens {context_tokens} leaves no room for a document after "
                             f"{PROMPT_ALLOWANCE_TOKENS} prompt tokens and the smallest reply budget "
                             f"({p.reply_base_tokens} + {tps:g} tokens: induce.reply_base_tokens, "
                             f"induce.reply_tokens_per_section)")
    windows = windows_for(para_texts, p.window_paragraphs, fixed * CHARS_PER_TOKEN, tps * spp * CHARS_PER_TOKEN)
    return [(lo, hi, max(1, min(reply_budget(hi - lo, p), int(context_tokens - prompt_tokens(para_texts[lo:hi])))))
            for lo, hi in windows]


def outline_reply(sections: pd.DataFrame, lo: int = 0, hi: int | None = None) -> str:
    """One document's outline (rows of the section table, in order) written as the reply the prompt asks for,
    pretty-printed as served models write it (4-space indents; a run of spaces is one token in BPE vocabularies,
    so the indent width hardly changes the count). With ``lo``/``hi`` only the window ``[lo, hi)``: the sections
    starting in it, numbered from ``lo``, and the one it starts inside of, if any, opening at 0."""
    s = sections.sort_values("first_para", kind="stable")  # document order; a parent before its first child
    end = int(s["last_para"].max()) + 1 if len(s) else 0
    hi = end if hi is None else hi
    # a heading at the very end owns no paragraph: it starts at the document's end
    inside = s[(s["first_para"] >= lo) & ((s["first_para"] < hi) | ((s["first_para"] == hi) & (hi >= end)))]
    before = s[s["first_para"] < lo]
    rows = ([before.iloc[-1]] if len(before) and (not len(inside) or int(inside["first_para"].iat[0]) > lo) else []) \
        + [r for _, r in inside.iterrows()]
    items = [{"title": str(r["title"]), "level": int(r["level"]), "first_paragraph": max(int(r["first_para"]) - lo, 0),
              "last_paragraph": min(int(r["last_para"]), hi - 1) - lo} for r in rows]
    return json.dumps({"sections": items}, ensure_ascii=False, indent=4)


def reply_plan(documents: pd.DataFrame, paragraphs: pd.DataFrame, induce_params: InduceParams, context_tokens: int,
               sections: pd.DataFrame | None = None) -> pd.DataFrame:
    """The induction calls :func:`induce_structure` makes (``method: llm``), one row per window: ``doc_id, lo, hi,
    n_paragraphs, prompt_tokens, reply_budget`` (:func:`window_plan`). With ``sections`` (the gold outline) each
    window also gets the reply a model reproducing that outline would write: ``n_sections``,
    ``expected_reply_tokens`` (:func:`outline_reply`'s characters / :data:`OUTLINE_CHARS_PER_TOKEN`, rounded up)
    and ``over_budget`` (expected > budget: that reply would be cut at the first try)."""
    from .common import _docs

    p = induce_params
    by_doc = dict(tuple(sections.groupby(sections["doc_id"].astype(str), sort=False))) if sections is not None else {}
    rows = []
    for d in _docs(documents, paragraphs):
        for lo, hi, budget in window_plan(d.texts, p, context_tokens):
            row = {"doc_id": d.doc_id, "lo": lo, "hi": hi, "n_paragraphs": hi - lo,
                   "prompt_tokens": prompt_tokens(d.texts[lo:hi]), "reply_budget": budget}
            if sections is not None:
                g = by_doc.get(d.doc_id)
                reply = outline_reply(g, lo, hi) if g is not None else json.dumps({"sections": []})
                n = len(json.loads(reply)["sections"])
                expected = math.ceil(len(reply) / OUTLINE_CHARS_PER_TOKEN)
                row.update(n_sections=n, expected_reply_tokens=expected, over_budget=expected > budget)
            rows.append(row)
    cols = ["doc_id", "lo", "hi", "n_paragraphs", "prompt_tokens", "reply_budget"] + (
        ["n_sections", "expected_reply_tokens", "over_budget"] if sections is not None else [])
    return pd.DataFrame(rows, columns=cols)


def _local_paras(paras: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    p = paras.iloc[lo:hi].copy()
    p["para_idx"] = np.arange(hi - lo, dtype="int64")
    return p.reset_index(drop=True)


def build_messages(para_texts: Sequence[str], max_level: int) -> list[dict]:
    body = "\n\n".join(f"[{i}] {t}" for i, t in enumerate(para_texts))
    return [{"role": "user", "content": PROMPT.format(last=len(para_texts) - 1, max_level=max_level,
                                                      paragraphs=body)}]


# ---------------------------------------------------------------------------------------------------------------
# The LLM arm
# ---------------------------------------------------------------------------------------------------------------


def schema_bound(items: list | None, problems: Sequence[str]) -> bool:
    """Whether a parsed reply (:func:`parse_reply`) is what :data:`OUTPUT_SCHEMA` asks for: a ``sections`` list
    read without problems whose items have the schema's types (tiling and levels are not the schema's)."""
    return items is not None and not problems and not type_violations(items)


def _budget(st: dict) -> int:
    """A call's budget: the window's; in a correction turn bounded by what its longer prompt (the previous reply
    and the violations added) leaves of the context."""
    added = sum(len(str(m.get("content") or "")) for m in st["messages"][1:])
    return max(1, min(st["budget"], int(st["room"] - added / CHARS_PER_TOKEN)))


def _window_states(docs: list[_Doc], p: Any, context_tokens: int) -> list[dict]:
    """One state per (document, window of :func:`window_plan`), in document order: the window's paragraphs
    ``[lo, hi)`` (the document's paragraph numbers, half-open; ``paras`` renumbered from 0), its reply ``budget``
    and the ``room`` its prompt leaves of ``context_tokens`` (tokens), its conversation so far (``messages``), and
    what :func:`_ask` records of its replies (empty until asked)."""
    states = []
    for d in docs:
        for lo, hi, budget in window_plan(d.texts, p, context_tokens):
            states.append({"doc": d, "lo": lo, "hi": hi, "paras": _local_paras(d.paras, lo, hi), "budget": budget,
                           "room": context_tokens - prompt_tokens(d.texts[lo:hi]),
                           "messages": build_messages(d.texts[lo:hi], p.max_level), "items": None,
                           "violations": None, "first_violations": None, "rounds": 0, "errors": [],
                           "parsed_round": None, "cut_calls": 0, "cut_failed": 0})
    return states


def _ask(client, batch: list[dict], label: str, max_level: int) -> None:
    """Send each window state of ``batch`` its conversation once (one ``client.generate`` for all; ``label`` names
    the progress bar) and record the reply on the state: the items it parsed to (the last parsed items stay when a
    reply parses to none), its violations (a failed call is one), the first round's violations, the round
    (0-based) of the first schema-bound reply, and counts of rounds asked, cut calls and failed cuts."""
    from .. import llm

    reqs = [llm.Request(st["messages"], json_schema=OUTPUT_SCHEMA,
                        max_tokens=_budget(st),
                        tag=f"induce:{st['doc'].doc_id}:{st['lo']}:r{st['rounds']}") for st in batch]
    for st, r in zip(batch, client.generate(reqs, desc=label)):
        st["rounds"] += 1
        st["reply"] = r.text
        st["cut_calls"] += bool(getattr(r, "cuts", 0))
        if r.error:
            st["errors"].append(r.error)
            st["cut_failed"] += r.error.startswith("LengthCut")
            items, problems = None, [f"the model call failed: {r.error}"]
        else:
            items, problems = parse_reply(r.text)
            if st["parsed_round"] is None and schema_bound(items, problems):
                st["parsed_round"] = st["rounds"] - 1
        st["items"] = items if items is not None else st["items"]
        st["violations"] = problems + (outline_violations(items, st["paras"], max_level)
                                       if items is not None else [])
        if st["first_violations"] is None:
            st["first_violations"] = list(st["violations"])


def _self_correct(client, states: list[dict], rounds: int, max_level: int) -> None:
    """Up to ``rounds`` correction turns: every window whose last reply has violations gets that reply and its
    violations (the first 30, in :data:`CORRECTION`) added to its conversation and is asked again; stops early
    once no window has any."""
    for _ in range(rounds):
        bad = [st for st in states if st["violations"]]
        if not bad:
            break
        for st in bad:
            st["messages"] = st["messages"] + [
                {"role": "assistant", "content": st["reply"] or ""},
                {"role": "user", "content": CORRECTION.format(
                    violations="\n".join(f"- {v}" for v in st["violations"][:30]), last=st["hi"] - st["lo"] - 1)}]
        _ask(client, bad, "induction self-correction", max_level)


def _window_outline(st: dict, d: _Doc, p: Any, lex: _Lexicon) -> tuple[list[Outline], str, str | None]:
    """A window's outline, in the window's own paragraph numbers (0 = its first), its status and what fixed it
    (None when nothing needed to): the model's items when they have no violations ("ok", or "repaired" by
    "self-correction" when the first reply had some), else :func:`repair` of them ("repaired" by "repair") when
    that is a valid tiling, else one section titled as the document over the window ("failed", "fallback")."""
    lo, m = st["lo"], st["hi"] - st["lo"]
    title_fn = lambda s, e: _title(lex.terms(d.doc_id, lo + s, lo + e + 1, p.title_terms))  # noqa: E731
    if not st["violations"]:
        local = [Outline(it["title"], it["level"], it["first_paragraph"], it["last_paragraph"]) for it in st["items"]]
        return (local, "repaired", "self-correction") if st["first_violations"] else (local, "ok", None)
    repaired = repair(st["items"], m, p.max_level, title_fn)
    if repaired is not None and is_valid_outline(repaired, st["paras"], p.max_level):
        return repaired, "repaired", "repair"
    return [Outline(d.title, 1, 0, m - 1)], "failed", "fallback"


#: window statuses from best to worst: a document's status is its worst window's
_STATUS_RANK = {"ok": 0, "repaired": 1, "failed": 2}


def _document_sections(d: _Doc, windows: list[dict], p: Any, lex: _Lexicon) -> tuple[pd.DataFrame, str, set[str]]:
    """A document's sections from its windows' outlines (:func:`_window_outline`, shifted to the document's
    paragraph numbers and joined in order), its status (its worst window's) and what fixed its windows; an
    assembled outline that is not a valid tiling raises :class:`InductionError` naming the document."""
    outline: list[Outline] = []
    status, fixed = "ok", set()
    for st in windows:
        local, st_status, fix = _window_outline(st, d, p, lex)
        lo = st["lo"]
        outline += [Outline(o.title, o.level, o.first_para + lo, o.last_para + lo) for o in local]
        status = max(status, st_status, key=_STATUS_RANK.__getitem__)
        fixed |= {fix} if fix else set()
    secs = docmodel.sections_from_outline(d.doc_id, d.paras, outline, len(d.text))
    v = docmodel.verify_sections(secs, d.paras, len(d.text), p.max_level)
    if v:
        raise InductionError(f"induction: document {d.doc_id!r} assembled an invalid outline: {v[:3]}")
    return secs, status, fixed


def _document_log(doc_id: str, windows: list[dict], status: str, fixed: set[str], n_sections: int,
                  model: str) -> dict:
    """A document's row of the induction log (:func:`_log_row`) from its window states: rounds (the most any
    window took), the first round's violations (the first 20 kept), errors (500 characters at most), how the
    windows' replies parsed (first try, after correction, never), cut calls and the largest reply budget
    (tokens)."""
    first_v = [x for st in windows for x in (st["first_violations"] or [])]
    pr = [st["parsed_round"] for st in windows]
    return _log_row(
        doc_id, status, "llm", rounds=max(st["rounds"] for st in windows), n_windows=len(windows),
        n_sections=n_sections, fixed_by="+".join(sorted(fixed)), n_violations=len(first_v),
        violations=json.dumps(first_v[:20]), error="; ".join(e for st in windows for e in st["errors"])[:500],
        model=model, parsed_first=sum(r == 0 for r in pr),
        parsed_corrected=sum(r is not None and r > 0 for r in pr), parsed_never=sum(r is None for r in pr),
        cut_calls=sum(st["cut_calls"] for st in windows), cut_failed=sum(st["cut_failed"] for st in windows),
        reply_budget=max(st["budget"] for st in windows))


def _llm(docs: list[_Doc], p: Any, lex: _Lexicon, client) -> tuple[list, list]:
    """The LLM arm over ``docs``: every window asked once (batched), up to ``p.self_correct_rounds`` correction
    turns for those with violations, then each document's sections and its log row, in the order of ``docs``."""
    states = _window_states(docs, p, client.context_tokens)
    _ask(client, states, "induction", p.max_level)
    _self_correct(client, states, p.self_correct_rounds, p.max_level)
    by_doc: dict[str, list[dict]] = {}
    for st in states:
        by_doc.setdefault(st["doc"].doc_id, []).append(st)
    sections, log = [], []
    for d in docs:
        secs, status, fixed = _document_sections(d, by_doc[d.doc_id], p, lex)
        sections.append(secs)
        log.append(_document_log(d.doc_id, by_doc[d.doc_id], status, fixed, len(secs), client.model))
    return sections, log
