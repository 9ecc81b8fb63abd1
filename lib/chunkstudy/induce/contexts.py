"""Situating contexts (paper 3.2, condition A1): one short context per chunk of a chunk set (A1: A0's fixed
windows; any condition with a ``context`` prefix names the chunk set it is written for).

``method: llm`` — the paper's arm, Anthropic's Contextual Retrieval recipe with its prompt verbatim
(:data:`CONTEXTUAL_RETRIEVAL_PROMPT`): the whole document inside ``<document>`` tags, the window's content inside
``<chunk>`` tags. One call per window; the request allows ``contexts.request_reply_tokens`` model tokens, and the
reply (whitespace collapsed) is cut to the hard cap of ``contexts.max_context_tokens`` content tokens of the chunking
tokenizer at the last whole word that fits (the recipe's target is 50–100 tokens; the cut is recorded in
``truncated``). A failed call leaves an empty context and its error (counted, never a crash); a reply the model
cut at ``request_reply_tokens`` is asked again with a larger budget by the client before it is capped here, and
one that stays cut is such a failed call (:mod:`chunkstudy.llm`, "Cut replies").

The document as a reader sees it (``contexts.document_view``): ``full`` (default) fills ``<document>`` with
:func:`document_view` — the title, every heading line at its level and the paragraphs verbatim, in order — so A1
sees what A3's breadcrumbs carry (title and headings; guards C1 = A3 − A1). ``body`` gives the paragraphs only
(``documents.text``; docs/decisions/0003-a1-document-view.md). The view is rendered once per document, so the
document part of every prompt of one document is the same bytes (a serving engine's prefix cache reuses it). The
chunk inside ``<chunk>`` is always the window's body text. (Structure induction, by contrast, never sees a heading:
the paper strips them, :mod:`chunkstudy.induce`.)

Long documents: when the view does not fit the model's context (``llm.context_tokens`` minus
``request_reply_tokens``, the document's longest chunk and a 256-token allowance for the instructions; tokens
estimated as characters / 4), ``<document>`` holds an excerpt of whole blocks of the view (paragraphs and heading
lines, cut at their boundaries) that contains the window. ``contexts.long_document`` decides which:

* ``pages`` (default): the view is cut once into overlapping pages (:func:`excerpt_pages`: each the largest run of
  whole blocks that fits, starting every half page), and a window gets the first page that holds it whole. The
  windows of one page send the same bytes, so a serving engine's prefix cache reuses the excerpt as it does a whole
  document (a centred excerpt differs for every window and defeats it). A window no page holds whole (longer than
  about half a page) gets its centred excerpt.
* ``centred``: the largest run of whole blocks centred on each window (:func:`document_excerpt`).

The columns ``doc_start``/``doc_end`` record which body text ``[doc_start, doc_end)`` of ``documents.text`` the
model saw (``0, len(text)``: the whole document).

``method: extractive`` — a NAMED NON-LLM BASELINE for offline runs (demo, CI), never the LLM arm: the document
title, its lead sentence, then ``Key terms:`` and the most salient tf-idf terms of the window's neighbourhood
(the window and ``contexts.neighbourhood`` windows on each side; terms already in the title or lead are skipped),
adding terms until the context reaches the middle of the ``contexts.min_context_tokens``..``max_context_tokens`` range (the
paper's generated contexts run about 80 tokens, Section 6.2), never exceeding ``max_context_tokens``. A title and lead
longer than the cap are cut at a word (``truncated``); a document too short for enough terms may stay below
``min_context_tokens``.

Output: ``[doc_id, start, end, context, method, n_tokens]`` plus ``truncated, error, doc_start, doc_end,
document_view`` (``full``/``body`` for the LLM arm, empty for the extractive baseline), keyed
by ``(doc_id, start, end)`` — half-open character offsets of the window in ``documents.text`` — so contexts
survive reruns. ``n_tokens`` counts the context's tokens with ``counter`` (``chunking.load_counter`` of the
chunking tokenizer); without one, a stated approximation (words and punctuation marks) is used.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence, cast

import numpy as np
import pandas as pd

from .. import stages
from ..params import ContextsParams
from ..corpus.model import SEP
from ..errors import ChunkstudyError

#: Anthropic, "Introducing Contextual Retrieval" (2024): the prompt, verbatim.
CONTEXTUAL_RETRIEVAL_PROMPT = """<document>
{{WHOLE_DOCUMENT}}
</document>
Here is the chunk we want to situate within the whole document
<chunk>
{{CHUNK_CONTENT}}
</chunk>
Please give a short succinct context to situate this chunk within the overall document for the purposes of \
improving search retrieval of the chunk. Answer only with the succinct context and nothing else."""

#: ``contexts.long_document``: how a document too long for the model's context is excerpted (module docstring).
LONG_DOCUMENT = ("pages", "centred")
CONTEXT_COLUMNS = stages.columns("contexts_a1")
DOCUMENT_VIEWS = ("full", "body")
CONTEXT_PROMPT_ALLOWANCE_TOKENS = 256
CONTEXT_CHARS_PER_TOKEN = 4.0
_APPROX = re.compile(r"\w+|[^\w\s]")


class ContextsError(ChunkstudyError, ValueError):
    """Bad input to A1 contexts (names the table and the document)."""


def approx_counter(texts: Sequence[str]) -> list[int]:
    """Fallback token counter: words and punctuation marks (a WordPiece count is usually a little higher)."""
    return [len(_APPROX.findall(t)) for t in texts]


def render_prompt(document: str, chunk: str) -> str:
    """The Contextual Retrieval prompt with the document and the chunk filled in (plain replacement, so braces
    in the text are harmless)."""
    return CONTEXTUAL_RETRIEVAL_PROMPT.replace("{{WHOLE_DOCUMENT}}", document).replace("{{CHUNK_CONTENT}}", chunk)


def cap_tokens(text: str, max_tokens: int, counter: Callable) -> tuple[str, bool]:
    """``text`` with whitespace collapsed, cut at the last whole word that keeps it within ``max_tokens``
    (the longest fitting prefix of words, found by bisection); ``(text, was_cut)``."""
    words = text.split()
    full = " ".join(words)
    if not words or counter([full])[0] <= max_tokens:
        return full, False
    lo, hi = 0, len(words)  # invariant: words[:lo] fits, words[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if counter([" ".join(words[:mid])])[0] <= max_tokens:
            lo = mid
        else:
            hi = mid
    return " ".join(words[:lo]), True


# ------------------------------------------------------------------------------------------- document view


class _View:
    """One document rendered for ``<document>``: ``text`` (the view) and, for each body segment placed in it,
    ``(text_start, text_end, view_start)`` so that body offsets map to view offsets and back."""

    def __init__(self, text: str, segments: list[tuple[int, int, int]]):
        self.text = text
        self.segments = segments

    def view_start(self, pos: int) -> int:
        """View offset of a window starting at body offset ``pos`` (in a separator: the next segment's start)."""
        for ts, te, vs in self.segments:
            if pos < te:
                return vs + max(0, pos - ts)
        ts, te, vs = self.segments[-1]
        return vs + (te - ts)

    def view_end(self, pos: int) -> int:
        """View offset of a window ending at body offset ``pos`` (in a separator: the previous segment's end)."""
        for ts, te, vs in reversed(self.segments):
            if pos > ts:
                return vs + (min(pos, te) - ts)
        return self.segments[0][2]

    def to_body(self, a: int, b: int) -> tuple[int, int]:
        """The body range ``[start, end)`` covered by the view range ``[a, b)`` (headings carry no body)."""
        lo = hi = None
        for ts, te, vs in self.segments:
            ve = vs + (te - ts)
            s, e = max(a, vs), min(b, ve)
            if s < e:
                lo = ts + (s - vs) if lo is None else lo
                hi = ts + (e - vs)
        return (lo, cast(int, hi)) if lo is not None else (0, 0)  # hi is set with lo


def _heading_line(title: str, level: int) -> str:
    return "#" * level + " " + " ".join(str(title).split())


def _render(doc_id: str, title: str, text: str, secs: pd.DataFrame | None, view: str) -> _View:
    """The view of one document (:func:`document_view`); ``secs`` are its section rows in outline order."""
    if view == "body":
        return _View(text, [(0, len(text), 0)])
    if secs is None or len(secs) == 0:
        raise ContextsError(f"sections: document {doc_id!r} has no sections, so its headings cannot be shown "
                            "(contexts.document_view: full needs sections_gold, written by 01_corpus)")
    blocks: list[str] = []
    segments: list[tuple[int, int, int]] = []
    pos = 0

    def add(block: str) -> int:
        nonlocal pos
        if blocks:
            pos += len(SEP)
        at = pos
        blocks.append(block)
        pos += len(block)
        return at

    if " ".join(str(title).split()):
        add(_heading_line(title, 1))
    for t, lv, a, b in zip(secs["title"], secs["level"], secs["start"], secs["end"]):
        if isinstance(t, str) and t.strip():
            add(_heading_line(t, int(lv) + 1))
        a, b = int(a), int(b)
        if b > a:
            segments.append((a, b, add(text[a:b])))
    body = SEP.join(text[a:b] for a, b, _ in segments)
    if body != text:
        raise ContextsError(f"sections: the sections of document {doc_id!r} do not tile its text (their bodies, "
                            f"joined, give {len(body)} of {len(text)} characters); written by 01_corpus")
    return _View(SEP.join(blocks), segments)


def document_view(documents: pd.DataFrame, sections: pd.DataFrame, doc_id: str) -> str:
    """Document ``doc_id`` as a reader sees it, in Markdown: the title as ``# Title``, then each section's heading
    line one level deeper than its outline level (``## `` for level 1 ... ``##### `` for level 4, so the title
    is the only top heading) followed by the section's own paragraphs, verbatim; blocks joined by a blank line
    (:data:`~chunkstudy.corpus.model.SEP`). An empty heading (an untitled lead) has no line; a heading directly
    followed by a sub-heading has no paragraphs. Whitespace inside a title or heading is collapsed to single
    spaces (one line each). Every paragraph of ``documents.text`` appears verbatim and in order: the sections
    must tile the text (raises :class:`ContextsError`, naming the document, otherwise).

    ``sections`` is a section table (gold: ``sections_gold``), in outline order. The result depends only on the
    document, so every window of one document gets the same bytes."""
    docs = documents[documents["doc_id"].astype(str) == str(doc_id)]
    if docs.empty:
        raise ContextsError(f"documents: document {doc_id!r} is not in the documents table")
    row = docs.iloc[0]
    secs = sections[sections["doc_id"].astype(str) == str(doc_id)]
    return _render(str(doc_id), str(row["title"]), str(row["text"]), secs, "full").text


def document_excerpt(text: str, start: int, end: int, max_chars: int) -> tuple[int, int]:
    """The ``[a, b)`` character range given to the model as ``<document>``: the whole text when it fits in
    ``max_chars``, else the largest run of whole blocks (paragraphs, or the heading lines of a document view: cut
    at ``SEP``) around the window's centre that fits, and always at least the blocks holding the window itself
    (so ``a`` and ``b`` always sit on block boundaries, even when those blocks alone exceed ``max_chars``)."""
    n = len(text)
    if n <= max_chars:
        return 0, n
    bounds = [0] + [m.end() for m in re.finditer(re.escape(SEP), text)]
    ends = [m.start() for m in re.finditer(re.escape(SEP), text)] + [n]
    centre = (start + end) // 2
    half = max_chars // 2
    a_want, b_want = max(0, centre - half), min(n, centre + half)
    if a_want == 0:
        b_want = min(n, max_chars)
    if b_want == n:
        a_want = max(0, n - max_chars)
    a = min(min((b for b in bounds if b >= a_want), default=start), start)
    b = max(max((e for e in ends if e <= b_want), default=end), end)
    return max(x for x in bounds if x <= a), min(x for x in ends if x >= b)


def excerpt_pages(text: str, max_chars: int) -> list[tuple[int, int]]:
    """Overlapping excerpts of whole blocks (cut at ``SEP``) covering ``text``: page ``j`` starts at the last block
    start at or before ``j * max_chars // 2`` and runs over the most whole blocks that fit ``max_chars`` (at least
    one block, even a longer one). ``[(0, len(text))]`` when the whole text fits. Pages start in increasing order
    and the last one reaches the end of the text; consecutive pages overlap by about half a page, so a window up
    to about half a page long lies whole in some page."""
    import bisect

    n = len(text)
    if n <= max_chars:
        return [(0, n)]
    starts = [0] + [m.end() for m in re.finditer(re.escape(SEP), text)]
    ends = [m.start() for m in re.finditer(re.escape(SEP), text)] + [n]
    stride = max(1, max_chars // 2)
    pages: list[tuple[int, int]] = []
    j = 0
    while not pages or pages[-1][1] < n:
        a = starts[bisect.bisect_right(starts, j * stride) - 1]
        k = bisect.bisect_right(ends, a + max_chars) - 1  # the last block end within the budget
        b = ends[k] if k >= 0 and ends[k] > a else ends[bisect.bisect_right(ends, a)]
        if not pages or (a, b) != pages[-1]:
            pages.append((a, b))
        j += 1
    return pages


def page_excerpt(pages: Sequence[tuple[int, int]], text: str, start: int, end: int,
                 max_chars: int) -> tuple[int, int]:
    """The first of ``pages`` (:func:`excerpt_pages`) that holds ``[start, end)`` whole; the centred excerpt
    (:func:`document_excerpt`) when none does."""
    for a, b in pages:
        if a <= start and end <= b:
            return a, b
    return document_excerpt(text, start, end, max_chars)


def _check(documents: pd.DataFrame, windows: pd.DataFrame) -> dict[str, tuple[str, str]]:
    for col in ("doc_id", "start", "end"):
        if col not in windows.columns:
            raise ContextsError(f"windows: missing column {col!r}; windows come from chunks.cuts.context_windows")
    docs = {str(d): (str(t), x) for d, t, x in zip(documents["doc_id"], documents["title"], documents["text"])}
    for d, s, e in zip(windows["doc_id"], windows["start"], windows["end"]):
        if str(d) not in docs:
            raise ContextsError(f"windows: document {d!r} is not in the documents table")
        if not 0 <= int(s) < int(e) <= len(docs[str(d)][1]):
            raise ContextsError(f"windows: document {d!r} has window [{s},{e}) outside its text "
                                f"(0..{len(docs[str(d)][1])}) or empty")
    return docs


def lead_sentence(text: str, max_chars: int = 600) -> str:
    """The document's first sentence (regex cut after ``.?!`` followed by whitespace and a capital), at most
    ``max_chars`` characters, cut at a word."""
    first = text.split(SEP, 1)[0]
    m = re.search(r"[.!?][\"')\]]*\s+(?=[A-Z0-9\"'(\[])", first)
    s = first[: m.end()].strip() if m else first.strip()
    if len(s) > max_chars:
        s = s[:max_chars].rsplit(" ", 1)[0]
    return s


def _with_terms(head: str, terms: list[str], lo_t: int, hi_t: int, counter: Callable) -> str:
    """``head`` plus the fewest leading ``terms`` whose count reaches ``lo_t`` tokens, or the most that stay within
    ``hi_t`` (token counts grow with the number of terms, so both are found by bisection)."""
    def render(k: int) -> str:
        return f"{head} Key terms: {', '.join(terms[:k])}." if k else head

    def n(k: int) -> int:
        return counter([render(k)])[0]

    lo, hi = 0, len(terms)  # largest k within hi_t
    if n(hi) > hi_t:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if n(mid) <= hi_t else (lo, mid)
        kmax = lo
    else:
        kmax = hi
    if n(kmax) < lo_t:
        return render(kmax)
    a, b = 0, kmax  # smallest k in 0..kmax reaching lo_t: n(b) >= lo_t
    if n(a) >= lo_t:
        return render(a)
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (a, mid) if n(mid) >= lo_t else (mid, b)
    return render(b)


def _extractive(docs, windows: pd.DataFrame, p: Any, counter: Callable) -> list[dict]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    lo_t, hi_t, nb = p.min_context_tokens, p.max_context_tokens, p.neighbourhood
    w = windows.reset_index(drop=True)
    texts = [docs[str(d)][1][int(s):int(e)] for d, s, e in zip(w["doc_id"], w["start"], w["end"])]
    vec = TfidfVectorizer(stop_words="english", sublinear_tf=True, token_pattern=r"(?u)\b[^\W\d_]{3,}\b")
    try:
        mat = vec.fit_transform(texts).tocsr()
        vocab = np.asarray(vec.get_feature_names_out())
    except ValueError:
        mat, vocab = None, np.asarray([])
    rows = []
    for doc_id, g in w.groupby("doc_id", sort=False):
        title, text = docs[str(doc_id)]
        lead = lead_sentence(text)
        head = f"{title}. {lead}".strip() if lead else f"{title}."
        seen = set(re.findall(r"[a-z]+", head.lower()))
        head_capped, cut = cap_tokens(head, hi_t, counter)  # one head per document
        order = g.sort_values("start").index.to_list()
        for pos, i in enumerate(order):
            terms: list[str] = []
            if mat is not None and mat.shape[1]:
                nbh = order[max(0, pos - nb): pos + nb + 1]
                wts = np.asarray(mat[nbh].sum(axis=0)).ravel()
                idx = np.flatnonzero(wts > 0)
                top = idx[np.argsort(-wts[idx], kind="stable")][: 60 + len(seen)]
                terms = [str(vocab[j]) for j in top if vocab[j] not in seen][:60]
            ctx = head_capped
            if not cut and terms:
                ctx = _with_terms(head_capped, terms, (lo_t + hi_t) // 2, hi_t, counter)
            rows.append({"doc_id": str(doc_id), "start": int(w.at[i, "start"]), "end": int(w.at[i, "end"]),
                         "context": ctx, "method": "extractive", "truncated": cut, "error": "",
                         "doc_start": 0, "doc_end": len(text), "document_view": "", "_i": i})
    rows.sort(key=lambda r: r.pop("_i"))
    return rows


def _llm(docs, windows: pd.DataFrame, p: Any, client, counter: Callable,
         sections: pd.DataFrame | None) -> list[dict]:
    from .. import llm

    req_max, hi_t, view = p.request_reply_tokens, p.max_context_tokens, p.document_view  # schema-checked
    if view == "full" and sections is None:
        raise ContextsError("contexts.document_view is 'full' but no sections table was given: pass sections_gold "
                            "(written by 01_corpus) so that <document> shows the title and headings")
    long_document = p.long_document  # one of LONG_DOCUMENT (schema-checked)
    by_doc = dict(tuple(cast(pd.DataFrame, sections).groupby(cast(pd.DataFrame, sections)["doc_id"].astype(str),
                                                                sort=False))) if view == "full" else {}
    views: dict[str, _View] = {}  # rendered once per document: the same bytes for all its windows
    budgets: dict[str, int] = {}  # one excerpt budget per document (its longest chunk's), so pages are shared
    pages: dict[str, list[tuple[int, int]]] = {}
    longest = {str(d): int(x) for d, x in (windows["end"] - windows["start"]).groupby(windows["doc_id"]).max().items()}
    metas, reqs = [], []
    for d, s, e in zip(windows["doc_id"], windows["start"], windows["end"]):
        d, s, e = str(d), int(s), int(e)
        title, text = docs[d]
        if d not in views:
            views[d] = _render(d, title, text, by_doc.get(d), view)
            budgets[d] = int((client.context_tokens - req_max - CONTEXT_PROMPT_ALLOWANCE_TOKENS)
                             * CONTEXT_CHARS_PER_TOKEN - longest[d])
            if budgets[d] <= 0:
                raise ContextsError(f"llm.context_tokens {client.context_tokens} cannot hold the longest chunk of "
                                    f"document {d!r} ({longest[d]} characters) plus the reply")
            pages[d] = excerpt_pages(views[d].text, budgets[d]) if long_document == "pages" else []
        v = views[d]
        chunk = text[s:e].strip()
        vs, ve = v.view_start(s), v.view_end(e)
        a, b = page_excerpt(pages[d], v.text, vs, max(ve, vs), budgets[d])
        doc_a, doc_b = v.to_body(a, b)
        metas.append((d, s, e, doc_a, doc_b))
        reqs.append(llm.Request([{"role": "user", "content": render_prompt(v.text[a:b], chunk)}],
                                max_tokens=req_max, tag=f"a1:{d}:{s}:{e}"))
    rows = []
    for (d, s, e, a, b), r in zip(metas, client.generate(reqs, desc="A1 contexts")):
        ctx, cut = cap_tokens(r.text, hi_t, counter) if not r.error else ("", False)
        rows.append({"doc_id": d, "start": s, "end": e, "context": ctx, "method": "llm", "truncated": cut,
                     "error": r.error or "", "doc_start": a, "doc_end": b, "document_view": view})
    return rows


def a1_contexts(documents: pd.DataFrame, windows: pd.DataFrame, contexts_params: ContextsParams, client=None,
                counter: Callable[[list[str]], list[int]] | None = None,
                sections: pd.DataFrame | None = None) -> pd.DataFrame:
    """One situating context per window (module docstring); ``contexts_params`` is the ``contexts`` record,
    ``cfg.params("contexts")``.

    ``windows`` holds ``doc_id, start, end`` (half-open character offsets into ``documents.text``) of one cut, or
    of several with a ``chunk_set`` column (:func:`chunkstudy.chunks.cuts.context_windows`: the chunks of every
    chunk set a context condition names, A0's windows for A1). Each chunk set is situated on its own (the
    extractive baseline weighs terms over the windows of one cut) and its rows carry its name, so a context is
    keyed by ``(chunk_set, doc_id, start, end)``. ``client`` (:func:`llm.make_client`) is needed for ``method: llm``
    only; ``counter(texts) -> token counts`` is the chunking tokenizer's (``chunking.load_counter``). ``sections``
    (``sections_gold``) gives the headings of the document view; ``method: llm`` with ``document_view: full``
    needs it. Returns the columns of :data:`CONTEXT_COLUMNS` (without ``chunk_set`` for windows without one) in
    the order of ``windows``; inputs are not modified.
    """
    if "chunk_set" in windows.columns:
        parts = [a1_contexts(documents, g.drop(columns="chunk_set"), contexts_params, client, counter, sections)
                 .assign(chunk_set=str(name)) for name, g in windows.groupby("chunk_set", sort=False)]
        return pd.concat(parts, ignore_index=True)[CONTEXT_COLUMNS] if parts else \
            pd.DataFrame(columns=CONTEXT_COLUMNS)
    columns = [c for c in CONTEXT_COLUMNS if c != "chunk_set"]
    method = contexts_params.method
    counter = counter or approx_counter
    docs = _check(documents, windows)
    if len(windows) == 0:
        return pd.DataFrame(columns=columns)
    if method == "extractive":
        rows = _extractive(docs, windows, contexts_params, counter)
    elif method == "llm":
        if client is None:
            raise ContextsError("contexts.method is 'llm' but no LLM client was given (llm.make_client)")
        rows = _llm(docs, windows, contexts_params, client, counter, sections)
    out = pd.DataFrame(rows)
    out["n_tokens"] = counter(out["context"].tolist()) if len(out) else []
    dup = out.duplicated(["doc_id", "start", "end"])
    if dup.any():
        r = out[dup].iloc[0]
        raise ContextsError(f"windows: duplicate window ({r.doc_id!r}, {r.start}, {r.end})")
    return out[columns].astype({"start": "int64", "end": "int64", "n_tokens": "int64", "doc_start": "int64",
                                "doc_end": "int64"})


def a1_summary(contexts: pd.DataFrame) -> dict:
    """Counts for the stage report: windows, method, token statistics, cut (``truncated``: at
    ``contexts.max_context_tokens``) and failed contexts, and of those the calls whose reply stayed cut at its
    budget (``cut_failed``; a reply cut and then finished with a larger budget is counted by the client,
    ``llm.describe``) (no rounding)."""
    n = contexts["n_tokens"]
    # the windows tile each document, so the largest window end is the document's length
    doc_len = contexts.groupby("doc_id")["end"].transform("max")
    excerpted = (contexts["doc_start"] > 0) | (contexts["doc_end"] < doc_len)
    views = sorted(set(contexts["document_view"]) - {""}) if "document_view" in contexts else []
    return {"n_windows": int(len(contexts)), "method": ",".join(sorted(set(contexts["method"]))),
            "document_view": ",".join(views) or "none (no model sees the document)",
            "tokens_mean": float(n.mean()) if len(n) else float("nan"),
            "tokens_min": int(n.min()) if len(n) else 0, "tokens_max": int(n.max()) if len(n) else 0,
            "truncated": int(contexts["truncated"].sum()), "failed": int((contexts["error"] != "").sum()),
            "cut_failed": int(contexts["error"].str.startswith("LengthCut").sum()),
            "excerpted_docs": int(contexts.loc[excerpted, "doc_id"].nunique())}
