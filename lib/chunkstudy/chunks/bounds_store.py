"""The persistent sentence-bound store: each text's sentence starts (:func:`chunkstudy.chunks.chunking.sentence_bounds`)
kept under its content key, so that 02_induce, 03_queries and 04_chunk_embed segment each document once per run
(the first stage to meet a text segments it; the others read it back) and a rerun segments nothing.

Layout: ``data/<corpus>/cache/sentence_bounds/<method>.jsonl``, one file per segmentation method
(:func:`chunking.bounds_method`: the splitter, pysbd's version and a digest of the code that makes bounds, so a
changed splitter or segmentation code never reads another's bounds), one JSON record per text, ``{"key": <sha256 of
the text>, "starts": [0, ...]}``, appended as the text is segmented (one ``write`` of one line with ``O_APPEND``: a
killed stage keeps what it segmented). On first read of a method's file an unterminated last line (a write cut by
a kill) is cut off; any other line that is not such a record is skipped and named in a warning, and its text is
segmented again. :func:`chunking.sentence_bounds` also rejects a record that does not fit its text (not starting at
0, not increasing, past the end). The runner never clears ``cache/``; deleting the folder costs one segmentation per
text. One writer at a time (the runner's corpus lock).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Sequence

from .. import artifacts, progress
from ..config import Config

#: The store's folder under ``data/<corpus>/cache/``
CACHE = "sentence_bounds"


class BoundsWarning(UserWarning):
    """A line of a sentence-bound store file was damaged and skipped (its text is segmented again)."""


def _record(line: bytes) -> tuple[str, list[int]] | None:
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(rec, dict) and isinstance(rec.get("key"), str) and isinstance(rec.get("starts"), list)
            and all(isinstance(b, int) and not isinstance(b, bool) for b in rec["starts"])):
        return None
    return rec["key"], rec["starts"]


class BoundsStore:
    """Sentence bounds keyed by ``(method, sha256 of the text)`` under ``folder`` (see the module docstring).

    ``report[method]`` says what reading that method's file found: ``records`` kept, ``torn_tail`` (1 when an
    unterminated last line was cut off) and ``bad_lines`` (line numbers skipped)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.report: dict[str, dict] = {}
        self._bounds: dict[str, dict[str, list[int]]] = {}

    def path(self, method: str) -> Path:
        return self.folder / f"{method}.jsonl"

    def _load(self, method: str) -> dict[str, list[int]]:
        if method in self._bounds:
            return self._bounds[method]
        path = self.path(method)
        out: dict[str, list[int]] = {}
        rep: dict = {"records": 0, "torn_tail": 0, "bad_lines": []}
        if path.is_file():
            data = path.read_bytes()
            lines = data.split(b"\n")
            tail = lines.pop()  # the bytes after the last newline (b"" when the file ends with one)
            if tail:
                rec = _record(tail)
                if rec is None:  # a write cut by a kill: cut it off, so the next append starts a line of its own
                    rep["torn_tail"] = 1
                    with open(path, "r+b") as f:
                        f.truncate(len(data) - len(tail))
                else:  # a whole record without its newline: keep it, terminate it
                    lines.append(tail)
                    with open(path, "ab") as f:
                        f.write(b"\n")
            for i, line in enumerate(lines, start=1):
                rec = _record(line)
                if rec is None:
                    rep["bad_lines"].append(i)
                    continue
                out[rec[0]] = rec[1]
            rep["records"] = len(out)
            if rep["bad_lines"]:
                message = (f"sentence-bound store {path}: lines {rep['bad_lines'][:10]} are damaged and were "
                           f"skipped; their texts are segmented again")
                warnings.warn(message, BoundsWarning, stacklevel=3)
                progress.warn(message)
        self.report[method] = rep
        self._bounds[method] = out
        return out

    def get(self, method: str, key: str) -> list[int] | None:
        """The stored starts of the text whose sha256 is ``key`` under ``method``, or None."""
        return self._load(method).get(key)

    def put(self, method: str, key: str, bounds: Sequence[int]) -> None:
        """Keep ``bounds`` for text ``key``: in memory and, at once, as one appended line of the method's file."""
        known = self._load(method)
        starts = [int(b) for b in bounds]
        if known.get(key) == starts:
            return
        known[key] = starts
        self.folder.mkdir(parents=True, exist_ok=True)
        line = (json.dumps({"key": key, "starts": starts}, separators=(",", ":")) + "\n").encode("utf-8")
        fd = os.open(self.path(method), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def open_for(cfg: Config) -> BoundsStore:
    """The run's store, ``data/<corpus>/cache/sentence_bounds/`` (02, 03 and 04 hand it to
    :func:`chunking.use_bounds_store`)."""
    return BoundsStore(artifacts.cache_dir(cfg, CACHE))
