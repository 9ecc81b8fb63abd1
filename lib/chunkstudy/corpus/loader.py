"""What a corpus kind is: one :class:`CorpusLoader`, declared by the module that builds it.

A kind's module in :mod:`chunkstudy.corpus` declares its loader as the module attribute ``LOADER``; the registry
(:data:`chunkstudy.corpus.build.LOADERS`) finds it there (:func:`chunkstudy.plugins.discover`), so the module is
the whole registration. The loader carries everything the rest of the study asks about its kind: its
``corpus.kind`` name, the line the docs show for it, the ``corpus`` keys it reads beyond the common ones, where its
questions come from, and its two entry points. Nothing outside the module decides anything by the kind's name.

The ``corpus`` keys themselves stay declared in :class:`chunkstudy.params.CorpusParams` (a parameter file keeps one
``corpus`` section whatever its kind); a loader's ``parameters`` says which of them are its own, and is checked
against that declaration when the loader is made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config import Config
from ..params import CorpusParams
from ..paramspec import is_name

#: The ``corpus`` keys every kind reads (or the study reads for it), so no loader lists them: ``name`` (the output
#: folder), ``kind`` (which loader), ``mirror`` (where its inputs are) and ``allow_partial`` (whether a damaged
#: input file stops the build).
COMMON_PARAMETERS: tuple[str, ...] = ("name", "kind", "mirror", "allow_partial")

#: ``build(cfg, session, warnings) -> tables``: the kind's own inputs read into ``{documents, paragraphs,
#: sections_gold, corpus_funnel, stats}`` (and ``harvested`` when it has questions with gold evidence); ``session``
#: (a ``requests.Session`` or a fake) serves downloads and APIs, and every problem with a single input is appended to
#: ``warnings``.
Build = Callable[[Config, Any, list[str]], dict]
#: ``source_files(cfg) -> [(role, path)]``: every file ``build`` reads, resolved without reading them, so a
#: replaced input reruns stage 01.
SourceFiles = Callable[[Config], list[tuple[str, Path]]]


@dataclass(frozen=True, kw_only=True)
class CorpusLoader:
    """One ``corpus.kind``: its name, its documentation line, its own parameters, its questions and its two entry
    points.

    * ``kind``: the value of ``corpus.kind`` that selects it (a plain name).
    * ``doc``: one line saying what it reads (docs/corpus.md's generated "Corpus kinds" table shows it).
    * ``parameters``: the ``corpus`` keys it reads beyond :data:`COMMON_PARAMETERS`, each a field of
      :class:`~chunkstudy.params.CorpusParams` (a key it does not list, it ignores).
    * ``questions``: where its own questions with gold evidence come from (``"questions.jsonl"``), for the messages
      of stage 01; None when it has none (then queries are written: ``queries.source: generated``). A kind whose
      questions file may be absent says so with ``stats["questions"]["file"] = None``.
    * ``build`` and ``source_files``: the entry points (:data:`Build`, :data:`SourceFiles`).
    """

    kind: str
    doc: str
    build: Build
    source_files: SourceFiles
    parameters: tuple[str, ...] = ()
    questions: str | None = None

    def __post_init__(self) -> None:
        where = f"CorpusLoader {self.kind!r}"
        if not is_name(self.kind):
            raise ValueError(f"{where}: the kind must be a plain name (a letter or digit, then letters, digits, "
                             "'.', '_' or '-')")
        if not self.doc.strip() or "\n" in self.doc.strip():
            raise ValueError(f"{where}: doc must be one line saying what the kind reads, got {self.doc!r}")
        known = [f.name for f in dataclasses.fields(CorpusParams)]
        unknown = [k for k in self.parameters if k not in known]
        if unknown:
            raise ValueError(f"{where}: parameters {unknown} are not keys of the corpus section "
                             f"(chunkstudy.params.CorpusParams: {known})")
        common = [k for k in self.parameters if k in COMMON_PARAMETERS]
        repeated = sorted({k for k in self.parameters if self.parameters.count(k) > 1})
        if common or repeated:
            raise ValueError(f"{where}: parameters lists {common + repeated}: a key is listed once, and the common "
                             f"keys {list(COMMON_PARAMETERS)} not at all")
