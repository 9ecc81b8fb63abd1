"""Where stage 01's input files are: the helpers every corpus kind uses to find and read its inputs.

A corpus kind (:mod:`chunkstudy.corpus.build`'s registry) reads its own inputs with these: the files named by
``corpus.sources`` in ``corpus.mirror`` (or downloaded from ``corpus.fetch_urls`` when there is no mirror:
:func:`source_paths`), files that must lie inside the mirror (:func:`mirror_file`), mirror-anchored parameters
(:func:`resolve_in_mirror`), and text files read as UTF-8 with an error naming the file (:func:`read_text`).
Every failure to read an input is a :class:`CorpusInputError` whose message names the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, cast
from urllib.parse import urlparse

from .. import artifacts
from ..config import Config
from . import fetch
from ..errors import ChunkstudyError


class CorpusInputError(ChunkstudyError, ValueError):
    """An input of stage 01 is unreadable, damaged or yields nothing (the message names the file)."""


def downloads(cfg: Config) -> Path:
    """The folder ``corpus.fetch_urls`` are downloaded into (not created here)."""
    return artifacts.cache_dir(cfg, "downloads", create=False)


def mirror_root(cfg: Config, what: str) -> Path:
    """``corpus.mirror`` resolved; a kind that reads ``what`` from the mirror cannot run without one."""
    mirror = cfg.params("corpus").mirror
    if mirror is None:
        raise CorpusInputError(f"{cfg.path}: corpus.kind {cfg.params('corpus').kind} reads {what} from corpus.mirror, "
                               "which is null")
    return existing_mirror(cfg)


def existing_mirror(cfg: Config) -> Path:
    """``corpus.mirror`` resolved, after checking that it is a folder: a mirror that does not exist raises
    :class:`CorpusInputError` naming the parameter file, the key and the path (it used to surface as "has no
    documents", naming neither)."""
    mirror = cfg.params("corpus").mirror
    if mirror is None:
        raise CorpusInputError(f"{cfg.path}: corpus.mirror is null: there is no mirror folder to read")
    folder = cfg.resolve(mirror)
    if not folder.exists():
        raise CorpusInputError(f"{cfg.path}: corpus.mirror: the folder {folder} does not exist (corpus.mirror: "
                               f"{cfg.params('corpus').mirror!r}, relative to the parameter file's folder)")
    if not folder.is_dir():
        raise CorpusInputError(f"{cfg.path}: corpus.mirror: {folder} is not a folder")
    return folder


def source_paths(cfg: Config, session=None) -> list[Path]:
    """Local paths of ``corpus.sources`` (from the mirror, or downloaded when no mirror is set; with no sources
    named, every downloaded file). A named source that is not there raises, naming it."""
    c = cfg.params("corpus")
    if c.mirror is not None:
        root = existing_mirror(cfg)
        paths = cast("list[Path]", cfg.resolve_param("corpus.sources"))  # a list parameter: a list of paths
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"{cfg.path.name}: corpus.sources not found in mirror {root}: {missing}")
        return paths
    if not c.fetch_urls:
        return []
    got = fetch.download(c.fetch_urls, artifacts.cache_dir(cfg, "downloads"), session=session)
    if not c.sources:
        return got
    by_name = {p.name: p for p in got}
    missing = [s for s in c.sources if s not in by_name]
    if missing:
        raise FileNotFoundError(f"{cfg.path.name}: corpus.sources {missing} are not among the files of "
                                f"corpus.fetch_urls {sorted(by_name)}")
    return [by_name[s] for s in c.sources]


def listed_sources(cfg: Config) -> list[tuple[str, Path]]:
    """``("corpus.sources", path)`` of each file :func:`source_paths` would read, resolved without reading or
    downloading anything (with no mirror, the downloaded files of ``corpus.fetch_urls``, which may not be there
    yet)."""
    c = cfg.params("corpus")
    if c.sources:
        paths = cast("list[Path]", cfg.resolve_param("corpus.sources", downloads(cfg)))
        return [("corpus.sources", p) for p in paths]
    if c.mirror is None:
        return [("corpus.sources", downloads(cfg) / Path(urlparse(u).path).name) for u in c.fetch_urls]
    return []


def resolve_in_mirror(cfg: Config, name: str) -> Path:
    """A mirror-anchored file (e.g. ``corpus.featured_list``): relative to ``corpus.mirror``, or to the downloads
    folder when there is no mirror (config.ANCHORS)."""
    p = Path(name).expanduser()
    if p.is_absolute():
        return p
    mirror = cfg.params("corpus").mirror
    return ((cfg.resolve(mirror) if mirror is not None else downloads(cfg)) / p).resolve()


def mirror_file(mirror: Path, name: str, where: str, kind: str) -> Path:
    """A file named by an input (``file:`` of the demo's ``documents.yaml``, a document of a folder corpus): it
    must lie inside the mirror (``file: ../x`` would read any file on the machine)."""
    try:
        return artifacts.inside(mirror / name, mirror, where)
    except artifacts.PathError as e:
        raise CorpusInputError(f"{e}; {kind}-format files must lie inside corpus.mirror") from None


def read_text(path: Path) -> str:
    """A text input read as UTF-8, a leading byte-order mark dropped (``utf-8-sig``: editors on Windows write one,
    and kept it would hide the ``#`` of a first-line heading); an undecodable or unreadable file raises
    :class:`CorpusInputError` naming it. Every text file stage 01 reads goes through here."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise CorpusInputError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise CorpusInputError(f"{path}: cannot be read ({type(e).__name__}: {e})") from None


def _walk_key(seed: int, doc_id: str) -> bytes:
    return hashlib.sha256(f"{seed}\x00{doc_id}".encode()).digest()


def walk_order(doc_ids: Iterable[str], seed: int) -> list[str]:
    """The seeded walk's order (:func:`chunkstudy.corpus.wikipedia.seeded_walk`, and a seeded
    ``corpus.max_docs`` sample, :func:`kept_documents`): ``doc_ids`` sorted by ``sha256(seed, doc_id)`` (ties by id).

    A seeded shuffle in which the relative order of two documents depends on the seed and their two ids only,
    never on which other pages exist, were fetched, or pass the filters: the order of a subset is the full
    order restricted to it. That is what lets the API path fetch in walk order and stop once the walk is
    satisfied with the same result as fetching everything first, and makes an XML dump and the API choose the
    same Featured Articles when they hold the same revisions.

    >>> walk_order(["wiki:3", "wiki:1", "wiki:2"], 7) == [d for d in walk_order(["wiki:1", "wiki:2", "wiki:3",
    ...                                                   "wiki:9"], 7) if d != "wiki:9"]
    True
    """
    return sorted(doc_ids, key=lambda d: (_walk_key(seed, d), d))


def kept_documents(ids: list, max_docs: int | None, max_docs_from: str, seed: int) -> list:
    """The documents a ``corpus.max_docs`` cap keeps, in their given order: all when it is null; else the first N
    (``corpus.max_docs_from: first``), or a seeded sample of N (``seeded``: the first N of :func:`walk_order`
    under ``corpus.seed``, so the same seed picks the same documents and a larger sample holds a smaller one).

    The first N in id order are not a sample: the first 150 QASPER test papers in id order (the oldest arXiv ids)
    all have flat, depth-1 section trees, while 39% of the split's papers nest deeper.

    >>> kept_documents(["a", "b", "c"], 2, "first", 1)
    ['a', 'b']
    """
    if max_docs is None:
        return list(ids)
    if max_docs_from == "first":
        return list(ids)[:max_docs]
    keep = set(walk_order(ids, seed)[:max_docs])
    return [d for d in ids if d in keep]
