"""The model side of generated queries: the prompts per query type and the paraphrase prompt (their hashes are
the prompt versions recorded with every query), and the lenient reply parser."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Sequence

from . import leakage
from .common import _cut


QUERY_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                "additionalProperties": False}


SYSTEM = ("You write search queries for testing a document retrieval system. "
          'Reply with JSON only, in the form {"query": "..."}.')


RULES = ("\n\nRules: write the query in your own words. Do not copy any run of four or more words from the "
         "text above, and avoid its distinctive phrasing. Do not mention 'the passage', 'the text', 'the section' "
         "or 'the article'. Do not answer the query.\n"
         'Reply with JSON only: {{"query": "<your query>"}}')  # doubled braces: PROMPTS go through str.format


PROMPTS = {
    "factoid": ('The following passage comes from the document "{title}".\n\nPassage:\n"""\n{evidence1}\n"""\n\n'
                "Write one specific factual question that this passage answers." + RULES),
    "underspecified": ('The following passage comes from the document "{title}".\n\nPassage:\n"""\n{evidence1}\n'
                       '"""\n\nWrite one question that this passage answers, but refer to its main person, place, '
                       "object or event only vaguely, the way someone who has forgotten the name would (for "
                       'example "the commander", "the city", "the ship", "the treaty"). Never use a proper name '
                       "from the passage, and never use the document title." + RULES),
    "multihop": ('The following two passages come from different sections of the document "{title}".\n\n'
                 'Passage 1:\n"""\n{evidence1}\n"""\n\nPassage 2:\n"""\n{evidence2}\n"""\n\n'
                 "Write one question that can only be answered by combining information from both passages."
                 + RULES),
    "structural": ('The following is one whole section of the document "{title}".\n\nSection:\n"""\n{evidence1}\n'
                   '"""\n\nWrite one broad question whose answer is this section as a whole (what it covers or '
                   "explains), not a single detail." + RULES),
}


PARAPHRASE = ("Paraphrase this search query. Keep its meaning, and keep it exactly as specific or as vague as it is: "
              "add no names, facts or details. Use different words and a different sentence structure.\n\n"
              'Query: {query}\n\nReply with JSON only: {{"query": "<the paraphrase>"}}')


def template_hash(template: str) -> str:
    """SHA-256 (16 hex chars) of a prompt template: the prompt *version* recorded with every query."""
    return hashlib.sha256((SYSTEM + "\n" + template).encode()).hexdigest()[:16]


def generation_messages(qtype: str, title: str, evidence: Sequence[str], max_chars: int) -> list[dict]:
    """The chat messages asking for one query of ``qtype`` about ``evidence`` (the span texts)."""
    if qtype not in PROMPTS:
        raise ValueError(f"unknown query type {qtype!r}; types: {list(PROMPTS)}")
    need = 2 if qtype == "multihop" else 1
    if len(evidence) != need:
        raise ValueError(f"{qtype} query needs {need} span text(s), got {len(evidence)}")
    fields = {"title": title, **{f"evidence{i + 1}": _cut(t, max_chars) for i, t in enumerate(evidence)}}
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[qtype].format(**fields)}]


def paraphrase_messages(query: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PARAPHRASE.format(query=query)}]


_LABEL = re.compile(r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?(?:query|question|paraphrase|q)\s*[:：]\s*", re.I)


def _json_query(reply: str) -> str | None:
    """The string ``query`` of the first JSON object in ``reply`` that has one (the shape of :data:`QUERY_SCHEMA`)."""
    for m in re.finditer(r"\{.*?\}", reply, flags=re.S):
        try:
            obj = json.loads(m.group())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("query"), str):
            return obj["query"]
    return None


def parse_query(reply: str) -> str | None:
    """The query in a model reply, or ``None`` when the reply holds no usable query (< 3 words).

    Accepts a JSON object with a string ``query`` anywhere in the reply; otherwise the first non-empty line,
    without a leading "Query:"/"Question:" label, bullet, or surrounding quotes.
    """
    if not isinstance(reply, str):
        return None
    text = _json_query(reply)
    if text is None:
        lines = [ln for ln in reply.splitlines() if ln.strip() and not ln.strip().startswith(("{", "}", "```"))]
        text = _LABEL.sub("", lines[0]) if lines else ""
    text = " ".join(text.split()).strip().strip("\"'“”‘’`").strip()
    return text if len(leakage.words(text)) >= 3 else None


def reply_shape(reply: str) -> str:
    """How a reply met :data:`QUERY_SCHEMA`: ``"schema"`` (a JSON object whose ``query`` is a string, the shape
    asked for), ``"lenient"`` (not that shape, but :func:`parse_query` reads a usable query from it) or
    ``"never"``."""
    if isinstance(reply, str) and _json_query(reply) is not None:
        return "schema"
    return "lenient" if parse_query(reply) is not None else "never"


def names_title(query: str, title: str) -> bool:
    """Whether ``query`` contains the document title as whole words (case-insensitive)."""
    t = leakage.words(title)
    q = leakage.words(query)
    return bool(t) and any(q[i:i + len(t)] == t for i in range(len(q) - len(t) + 1))
