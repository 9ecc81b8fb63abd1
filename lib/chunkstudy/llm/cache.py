"""The persistent call cache (``calls.jsonl``, :class:`CallCache`): one JSON record per successful call, appended as
it completes, checked and repaired on open (see :mod:`chunkstudy.llm`, "Cache")."""

from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path
from typing import Any


#: The cache file in the cache folder: one JSON record per successful call
CACHE_FILE = "calls.jsonl"


def _as_record(raw: bytes) -> dict | None:
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("key"), str) and "text" in rec else None


def _salvage(raw: bytes) -> dict | None:
    """A whole record at the end of a damaged line: a torn record followed, on the same line, by the next one
    (what caches written before the torn-tail repair hold)."""
    pos = len(raw)
    while True:
        pos = raw.rfind(b'{"key"', 0, pos)
        if pos <= 0:
            return None
        rec = _as_record(raw[pos:])
        if rec is not None:
            return rec


class CallCache:
    """Append-only JSONL store of finished calls, keyed by :func:`cache_key`. Thread-safe within a process;
    each record is one ``write`` of one line with ``O_APPEND``, flushed at once, so a kill loses at most the
    call in flight. A record given a field it lacked (:meth:`amend`) is appended again whole; the last line of a
    key is the one read. ``folder=None`` keeps records in memory only.

    On open the file is checked (:attr:`report`): ``lines`` read, ``records`` kept, ``torn_tail`` (1 when an
    unterminated last line was dropped and the file truncated to its last whole line; a last line that is a whole
    record without its newline is kept and terminated), ``bad_lines`` (line numbers of damaged lines elsewhere,
    with a warning naming the file), ``salvaged`` (whole records recovered from damaged lines) and
    ``empty_replies`` (records with an empty text, left out so that a rerun asks again) and ``cut_replies`` (records
    of a reply cut at its ``max_tokens``, which this client never writes, left out the same way).
    """

    def __init__(self, folder: Path | None):
        self.folder = Path(folder) if folder is not None else None
        self.path = Path(folder) / CACHE_FILE if folder is not None else None
        self._records: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.report: dict = {"lines": 0, "records": 0, "torn_tail": 0, "bad_lines": [], "salvaged": 0,
                             "empty_replies": 0, "cut_replies": 0}
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            records, self.report = self._load(self.path, repair=True)
            self._records.update(records)

    @staticmethod
    def _load(path: Path, repair: bool = False) -> tuple[dict[str, dict], dict]:
        """``(records by key, report)``; with ``repair`` a torn tail is cut off the file (see the class)."""
        report: dict[str, Any]
        report = {"lines": 0, "records": 0, "torn_tail": 0, "bad_lines": [], "salvaged": 0, "empty_replies": 0,
                  "cut_replies": 0}
        out: dict[str, dict] = {}
        if not path.is_file():
            return out, report
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # the bytes after the last newline (b"" when the file ends with one)

        def keep(rec: dict) -> None:
            if not str(rec.get("text") or "").strip():
                report["empty_replies"] += 1
                return
            if rec.get("finish_reason") == "length":  # a cut reply is never a success (an imported cache's)
                report["cut_replies"] += 1
                return
            out[rec["key"]] = rec

        for i, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            report["lines"] += 1
            rec = _as_record(raw)
            if rec is None:
                report["bad_lines"].append(i)
                rec = _salvage(raw)
                if rec is None:
                    continue
                report["salvaged"] += 1
            keep(rec)
        if tail.strip():
            report["lines"] += 1
            rec = _as_record(tail)
            if rec is not None:  # a whole record that lost only its newline: keep it, end the line
                keep(rec)
                if repair:
                    with open(path, "ab") as f:
                        f.write(b"\n")
            else:
                report["torn_tail"] = 1
                if repair:
                    with open(path, "r+b") as torn:
                        torn.truncate(len(data) - len(tail))
                warnings.warn(f"{path}: dropped a torn last line ({len(tail)} bytes, line {len(lines) + 1}) left by "
                              f"an interrupted write" + ("; the file now ends at the last whole record" if repair
                                                         else ""), stacklevel=3)
        if report["bad_lines"]:
            shown = ", ".join(map(str, report["bad_lines"][:10])) + (" ..." if len(report["bad_lines"]) > 10 else "")
            warnings.warn(f"{path}: {len(report['bad_lines'])} damaged line(s) skipped (line {shown}); "
                          f"{report['salvaged']} whole record(s) recovered from them", stacklevel=3)
        report["records"] = len(out)
        return out, report

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> list[dict]:
        return list(self._records.values())

    def put(self, rec: dict) -> None:
        with self._lock:
            if rec["key"] in self._records:
                return
            self._append(rec)

    def amend(self, key: str, **fields: Any) -> None:
        """Add ``fields`` to the stored record of ``key`` (a field it already has keeps its value): the amended
        record is appended as a line of its own, and a later open keeps the last line of a key, so the reply
        itself never changes. For what a record written by an older client lacks (``prompt_chars``)."""
        with self._lock:
            rec = self._records.get(key)
            new = {k: v for k, v in fields.items() if rec is not None and k not in rec}
            if rec is not None and new:
                self._append({**rec, **new})

    def _append(self, rec: dict) -> None:
        """Keep ``rec`` and write it as one line, in one ``write`` with ``O_APPEND`` (hold the lock)."""
        line = json.dumps(rec, ensure_ascii=False) + "\n"
        self._records[rec["key"]] = rec
        if self.path is not None:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
