"""Stage 01 in one call: :func:`build_corpus` builds the corpus named by the parameters, through its kind's loader.

**Corpus kinds.** Each ``corpus.kind`` is one :class:`~chunkstudy.corpus.loader.CorpusLoader`, declared as
``LOADER`` by the module of this package that builds it; :data:`LOADERS` collects them
(:func:`chunkstudy.plugins.discover`), so a new kind is one new module and nothing else. A loader's ``build(cfg,
session, warnings) -> tables`` reads the kind's own inputs and returns ``{documents, paragraphs, sections_gold,
corpus_funnel, stats}`` (plus ``harvested`` when the kind has questions with gold evidence), and its
``source_files(cfg) -> [(role, path)]`` lists every file that build reads, resolved without reading them. This
module only dispatches, then does what every kind shares: an empty corpus is an error, every gold structure is
verified, and ``stats`` records the warnings, the kind and the fingerprints of the source files.

``corpus.kind`` is a plain name in the parameter layer (params sits below corpus/ in the import order and cannot
know the loaders): :func:`kind_of` refuses a name no loader declares, naming the parameter file, the key and every
registered kind, and the runner asks it before the first stage runs.

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

import pandas as pd

from .. import artifacts, plugins
from ..config import Config, ConfigError
from .loader import CorpusLoader
from .model import verify_corpus
from .qasper import HARVESTED_COLUMNS
from .sources import CorpusInputError, source_paths  # noqa: F401  (public names of stage 01)
from ..errors import ChunkstudyError

HARVESTED_EMPTY = pd.DataFrame({c: pd.Series(dtype="object") for c in HARVESTED_COLUMNS})


def _registry() -> list[tuple[str, CorpusLoader]]:
    """``(module, loader)`` for every module of this package that declares ``LOADER``, in kind-name order (the order
    of every list of kinds: the docs' tables, the parameter reference, the error messages). Two modules declaring
    one kind fail the import, naming both."""
    found = plugins.discover("chunkstudy.corpus", "LOADER", CorpusLoader)
    plugins.refuse_shared(found, "LOADER", lambda loader: [("corpus.kind", loader.kind)], ImportError)
    return sorted(found, key=lambda registered: registered[1].kind)


_REGISTERED = _registry()
#: ``corpus.kind`` -> the loader that builds it (found in this package's modules: :func:`_registry`).
LOADERS: dict[str, CorpusLoader] = {loader.kind: loader for _, loader in _REGISTERED}
#: ``corpus.kind`` -> the module that declares its loader (``chunkstudy.corpus.mdtext``).
MODULES: dict[str, str] = {loader.kind: module for module, loader in _REGISTERED}


def kinds() -> tuple[str, ...]:
    """The registered ``corpus.kind`` names, in name order: the values ``corpus.kind`` accepts."""
    return tuple(LOADERS)


class UnknownKind(ConfigError):
    """``corpus.kind`` names no registered loader (the message names the file, the key and every kind)."""


def kind_of(cfg: Config) -> CorpusLoader:
    """The loader of ``cfg``'s ``corpus.kind``; :class:`UnknownKind` naming the parameter file, the key, the value
    and every registered kind when no loader declares it."""
    kind = cfg.params("corpus").kind
    if kind not in LOADERS:
        raise UnknownKind(f"{cfg.path}: corpus.kind: {kind!r} is not one of {list(LOADERS)} (the corpus loaders of "
                          "lib/chunkstudy/corpus/; docs/corpus.md, \"Corpus kinds\")")
    return LOADERS[kind]


def source_files(cfg: Config) -> list[tuple[str, Path]]:
    """``(role, path)`` of every file stage 01 reads, resolved without reading them (the loader's
    ``source_files``). A role is the key that names the file (``corpus.sources``, ``corpus.featured_list``), the
    kind and what the file is (``demo:documents.yaml``, ``markdown:file``), or the file's own name
    (``questions.jsonl``). With no mirror, sources are the downloaded files of ``corpus.fetch_urls`` (they may not
    be there yet)."""
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


def require_questions(cfg: Config, out: dict, source: str) -> None:
    """Stop stage 01 when the queries are to be the corpus's own questions (``queries.source: harvested``) and
    none is usable: 01 is the stage that knows (03-04 would run, embeddings and all, and 05 fail on an empty
    query table). The message names the parameter file, the corpus, where the questions came from (the loader's
    ``questions``) and the funnel's counts. ``source`` is ``queries.source``."""
    if source != "harvested" or len(out["harvested"]):
        return
    loader = kind_of(cfg)
    head = f"{cfg.path.name}: corpus {cfg.corpus!r} has no usable question: "
    tail = "; queries.source is 'harvested' (set it to 'generated', with an llm backend, to write queries instead)"
    if loader.questions is None:
        raise CorpusInputError(head + f"corpus.kind {loader.kind} has no questions of its own" + tail)
    q = out["stats"].get("questions") or {}
    if "file" in q and not q["file"]:  # the loader looked for its questions file and found none
        raise CorpusInputError(head + f"no {loader.questions} in corpus.mirror "
                               f"{cfg.resolve(cfg.params('corpus').mirror)}" + tail)
    dropped = {k: v for k, v in q.items() if k.startswith("dropped_") and isinstance(v, int) and v
               and k != "dropped_only_figure_table_or_unmatched_evidence"}  # a part of dropped_no_evidence
    why = ", ".join(f"{k.removeprefix('dropped_').replace('_', ' ')} {v}" for k, v in dropped.items())
    raise CorpusInputError(head + f"{q.get('questions_read', 0)} read from {loader.questions}, 0 usable"
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
