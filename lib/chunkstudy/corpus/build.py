"""Stage 01 in one call: :func:`build_corpus` builds the corpus named by the parameters, through the kind's entry
point.

**Corpus kinds.** Each ``corpus.kind`` is one module in :data:`KINDS` with the same two entry points
(:class:`CorpusKind`): ``build(cfg, session, warnings) -> tables`` reads the kind's own inputs and returns
``{documents, paragraphs, sections_gold, corpus_funnel, stats}`` (plus ``harvested`` when the kind has questions
with gold evidence), and ``source_files(cfg) -> [(role, path)]`` lists every file that build reads, resolved
without reading them. This module only dispatches, then does what every kind shares: an empty corpus is an
error, every gold structure is verified, and ``stats`` records the warnings, the kind and the fingerprints of the
source files. The kinds are ``params.CORPUS_KINDS`` (the ``corpus.kind`` type; params sits below corpus/ in the
import order, so the registry is checked against that list on import). A new kind is a module with the two entry
points, its name in ``params.CorpusKind`` and an entry here.

:func:`fingerprint_sources` gives each source file's path, size and sha256: the runner puts them in stage 01's
key, so a replaced archive or an edited ``questions.yaml`` reruns 01, and ``stats.json`` records them.

Damaged inputs fail loudly: a truncated, corrupt, undecodable or missing file stops the stage, naming it, unless
``corpus.allow_partial`` is true (then it is a warning and the readable part builds); a record of the wrong shape
(a QASPER paper or question, a demo document or question, a line of a folder corpus's ``questions.jsonl``) is
skipped with a warning naming it and counted in ``stats["skipped_records"]``; a corpus with no documents is an
error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pandas as pd

from .. import artifacts
from ..config import Config
from ..params import CORPUS_KINDS
from . import demo, htmltext, mdtext, qasper, wikipedia
from .model import verify_corpus
from .sources import CorpusInputError, source_paths  # noqa: F401  (public names of stage 01)
from ..errors import ChunkstudyError

HARVESTED_EMPTY = pd.DataFrame({c: pd.Series(dtype="object") for c in qasper.HARVESTED_COLUMNS})


class CorpusKind(Protocol):
    """The entry points of one corpus kind (a module of :mod:`chunkstudy.corpus`)."""

    def build(self, cfg: Config, session, warnings: list[str]) -> dict: ...

    def source_files(self, cfg: Config) -> list[tuple[str, Path]]: ...


#: ``corpus.kind`` -> the module that builds it.
KINDS: dict[str, CorpusKind] = {"demo": demo, "wikipedia": wikipedia, "qasper": qasper, "markdown": mdtext,
                                "html": htmltext}
if tuple(KINDS) != CORPUS_KINDS:  # pragma: no cover - a kind added on one side only
    raise ImportError(f"chunkstudy.corpus.build.KINDS {list(KINDS)} differ from params.CORPUS_KINDS "
                      f"{list(CORPUS_KINDS)}: add the kind to both")


def kind_of(cfg: Config) -> CorpusKind:
    """The entry points of ``cfg``'s ``corpus.kind``."""
    kind = cfg.params("corpus").kind
    if kind not in KINDS:
        raise ValueError(f"{cfg.path}: corpus.kind {kind!r} is not one of {sorted(KINDS)}")
    return KINDS[kind]


def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file stage 01 reads, resolved without reading them (the kind's
    ``source_files``). Roles: ``corpus.sources``, ``demo:documents.yaml``, ``demo:questions.yaml``,
    ``demo:file``, ``corpus.featured_list``, ``corpus.api_revisions``, ``markdown:file``, ``html:file``,
    ``questions.jsonl``. With no mirror, sources are the downloaded files of ``corpus.fetch_urls`` (they may
    not be there yet)."""
    return kind_of(cfg).source_files(cfg)


def fingerprint_sources(cfg: Config, previous: list[dict] | None = None) -> list[dict]:
    """``[{role, path, size, sha256, mtime_ns}]`` for :func:`source_files` (path relative to the project root; a
    file not there is ``{role, path, missing: True}``). A file whose path, size and mtime match an entry of
    ``previous`` keeps that entry's sha256 instead of being hashed again."""
    old = {(f.get("path"), f.get("size"), f.get("mtime_ns")): f.get("sha256") for f in previous or []
           if isinstance(f, dict)}
    out = []
    for role, path in source_files(cfg):
        rel = artifacts.project_relative(cfg, path)
        if not path.is_file():
            out.append({"role": role, "path": rel, "missing": True})
            continue
        st = path.stat()
        sha = old.get((rel, st.st_size, st.st_mtime_ns)) or artifacts.file_hash(path)
        out.append({"role": role, "path": rel, "size": st.st_size, "sha256": sha, "mtime_ns": st.st_mtime_ns})
    return out


def build_corpus(cfg: Config, session=None) -> dict:
    """Build ``{documents, paragraphs, sections_gold, harvested, corpus_funnel, stats}`` for ``cfg``'s corpus.

    ``session`` (a ``requests.Session`` or a fake) is used for downloads and the MediaWiki API. A damaged or
    unreadable input file raises :class:`CorpusInputError` naming it (unless ``corpus.allow_partial``: then a
    warning); records of the wrong shape are skipped, warned about and counted (``stats["skipped_records"]``);
    other problems with single inputs (an empty page, unmatched evidence) are collected in ``stats["warnings"]``.
    ``stats["sources"]`` fingerprints every file read; ``stats["verification_failures"]`` lists any document
    whose gold structure does not verify (the notebook raises on it). No documents at all raises. A kind without
    questions (Wikipedia) gets an empty ``harvested`` table.
    """
    c = cfg.params("corpus")
    warnings: list[str] = []
    out = kind_of(cfg).build(cfg, session, warnings)
    out.setdefault("harvested", HARVESTED_EMPTY.copy())
    if not len(out["documents"]):
        shown = "".join(f"\n  {w}" for w in warnings[:10])
        where = f" from corpus.mirror {cfg.resolve(c.mirror)}" if c.mirror is not None else ""
        raise CorpusInputError(f"{cfg.path.name}: corpus {cfg.corpus!r} ({c.kind}) has no documents{where}; "
                               f"the filters or the inputs left nothing.{' Warnings:' + shown if shown else ''}")
    bad = verify_corpus(out["documents"], out["paragraphs"], out["sections_gold"])
    out["stats"]["verification_failures"] = bad
    out["stats"]["warnings"] = warnings
    out["stats"].setdefault("skipped_records", {})
    out["stats"]["sources"] = fingerprint_sources(cfg)
    out["stats"]["corpus"] = cfg.corpus
    out["stats"]["kind"] = c.kind
    out["stats"]["n_documents"] = len(out["documents"])
    return out


def sources_table(out: dict) -> pd.DataFrame:
    """The fingerprints of the files stage 01 read (``stats["sources"]``) as a table."""
    return pd.DataFrame(out["stats"].get("sources") or [], columns=["role", "path", "size", "sha256"])


def skipped_records(out: dict) -> pd.DataFrame:
    """Records skipped for their shape (``stats["skipped_records"]``) as a table: ``record`` (papers, questions,
    documents), ``skipped`` (the warnings name each one)."""
    counts = out["stats"].get("skipped_records") or {}
    return pd.DataFrame({"record": list(counts), "skipped": [int(v) for v in counts.values()]},
                        columns=["record", "skipped"])


#: Where each corpus kind's questions come from, for the message of :func:`require_questions`.
QUESTIONS_FROM = {"demo": "questions.yaml", "qasper": "the QASPER archives (corpus.sources)",
                  "markdown": "questions.jsonl", "html": "questions.jsonl"}


def require_questions(cfg: Config, out: dict, source: str) -> None:
    """Stop stage 01 when the queries are to be the corpus's own questions (``queries.source: harvested``) and
    none is usable: 01 is the stage that knows (03-04 would run, embeddings and all, and 05 fail on an empty
    query table). The message names the parameter file, the corpus, where the questions came from and the
    funnel's counts. ``source`` is ``queries.source``."""
    if source != "harvested" or len(out["harvested"]):
        return
    kind = cfg.params("corpus").kind
    head = f"{cfg.path.name}: corpus {cfg.corpus!r} has no usable question: "
    tail = "; queries.source is 'harvested' (set it to 'generated', with an llm backend, to write queries instead)"
    if kind not in QUESTIONS_FROM:
        raise CorpusInputError(head + f"corpus.kind {kind} has no questions of its own" + tail)
    q = out["stats"].get("questions") or {}
    if kind in ("markdown", "html") and not q.get("file"):
        raise CorpusInputError(head + "no questions.jsonl in corpus.mirror "
                               f"{cfg.resolve(cfg.params('corpus').mirror)}" + tail)
    dropped = {k: v for k, v in q.items() if k.startswith("dropped_") and isinstance(v, int) and v
               and k != "dropped_only_figure_table_or_unmatched_evidence"}  # a part of dropped_no_evidence
    why = ", ".join(f"{k.removeprefix('dropped_').replace('_', ' ')} {v}" for k, v in dropped.items())
    raise CorpusInputError(head + f"{q.get('questions_read', 0)} read from {QUESTIONS_FROM[kind]}, 0 usable"
                           + (f" (dropped: {why})" if why else "") + "; the warnings of 01_corpus/stats.json name "
                           "each one" + tail)


class VerificationError(ChunkstudyError, ValueError):
    """A gold structure failed verification (the message names the documents and their violations)."""


def require_verified(out: dict) -> None:
    """Raise :class:`VerificationError` when any gold structure has violations (stage 01 never writes them)."""
    bad = out["stats"].get("verification_failures") or {}
    if bad:
        lines = [f"  {d}: {'; '.join(v[:3])}" for d, v in list(bad.items())[:10]]
        raise VerificationError(f"sections_gold: {len(bad)} document(s) fail verification (01_corpus):\n"
                                + "\n".join(lines))


def section_trees(documents: pd.DataFrame, sections: pd.DataFrame, n_docs: int = 3) -> pd.DataFrame:
    """The gold outline of the first ``n_docs`` documents as a display table: the title indented by level,
    the paragraph range and the character span (half-open offsets into ``documents.text``)."""
    ids = list(documents["doc_id"][:n_docs])
    s = sections[sections["doc_id"].isin(ids)].copy()
    s["outline"] = ["    " * (int(lv) - 1) + (t if t else "(lead)") for lv, t in zip(s["level"], s["title"])]
    s["n_paragraphs"] = s["last_para"] - s["first_para"] + 1
    s["n_chars"] = s["end"] - s["start"]
    return s[["doc_id", "level", "outline", "first_para", "last_para", "n_paragraphs", "start", "end", "n_chars"]]
