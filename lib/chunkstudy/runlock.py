"""One run per corpus at a time: ``data/<corpus>/run.lock``, held by :func:`corpus_lock` while a run of
:mod:`chunkstudy.runner` works (docs/running.md). Two runs of one corpus would write the same stage folders and
caches; runs of different corpora do not meet."""

from __future__ import annotations

import json
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import filelock

from . import artifacts, config, procs
from .errors import ChunkstudyError


class RunLocked(ChunkstudyError, RuntimeError):
    """Another live run holds the corpus's lock (:func:`corpus_lock`)."""


#: The lock file of a corpus's run, in ``data/<corpus>/``.
LOCK_NAME = "run.lock"
#: How long a run that meets a held lock waits for the holder's record, which the holder writes just after taking
#: the lock; past it, the refusal names what the lock file says. It bounds a message's detail, never whether a run
#: proceeds.
HOLDER_RECORD_WAIT_S = 10.0


def _record(raw: bytes | str) -> dict | None:
    try:
        holder = json.loads(raw)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None


def lock_holder(path: Path) -> dict | None:
    """The record in lock file ``path`` (None when there is none, or none that names a PID)."""
    try:
        return _record(path.read_text(encoding="utf-8"))
    except OSError:
        return None


def _holder_alive(holder: dict | None) -> bool:
    """Whether the run a lock file names still runs: its PID runs and started when the lock says (a PID that
    was reused by another process since is no run of ours; :func:`chunkstudy.procs.alive`)."""
    if not holder:
        return False
    return procs.alive(holder["pid"], holder.get("process_start"))


def _describe(holder: dict) -> str:
    return (f"PID {holder['pid']} ({holder.get('command') or 'command unknown'}, started "
            f"{holder.get('started') or '?'}{', on ' + holder['host'] if holder.get('host') else ''})")


@contextmanager
def corpus_lock(cfg: config.Config, command: str, log=None) -> Iterator[dict | None]:
    """Hold ``data/<corpus>/run.lock`` while a run of the corpus works: one run per corpus at a time, since two
    runs would write the same stage folders and caches. Runs of different corpora do not meet.

    The file holds the run's PID, the process's start time (:func:`chunkstudy.procs.started`), the wall-clock
    start, the host and the command; an exclusive ``flock`` on it (``filelock.FileLock``) is held while the run
    lives. A second run refuses
    at once (:class:`RunLocked`), naming the first run's PID and command. The lock is released (the file removed)
    when the run ends in any way Python sees: success, failure, Ctrl-C, SIGTERM. A run killed outright (SIGKILL, a
    crash of the machine) leaves the file behind, *stale*: the kernel dropped its flock, and its PID is dead or
    belongs to a process that started at another time. The next run takes a stale lock over and says so (through
    ``log``). Yields the stale holder it took over, or None."""
    log = log or (lambda line: print(line, flush=True))
    path = artifacts.corpus_dir(cfg) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    found: list[dict | None] = []  # the stale holder taken over (or None)
    inode: list[int] = []  # the locked file's

    def take(fd: int) -> None:
        """Called by filelock with the flock held: the file still holds the previous holder's record (stale), or
        a live run's where the file system's flock does not exclude (some network mounts): still one run."""
        holder = _record(os.pread(fd, 65536, 0))
        if holder and holder["pid"] != os.getpid() and _holder_alive(holder):
            raise RunLocked(f"corpus '{cfg.corpus}' is being run by {_describe(holder)}; this run stops before "
                            f"touching anything (lock: {artifacts.project_relative(cfg, path)})")
        found.append(holder if holder and holder["pid"] != os.getpid() else None)
        inode.append(os.fstat(fd).st_ino)
        record = {"pid": os.getpid(), "process_start": procs.started(os.getpid()), "host": platform.node(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)

    # no soft fallback: filelock's soft lock writes a record of its own into the file, where ours is
    lock = filelock.FileLock(path, mode=0o644, thread_local=False, fallback_to_soft=False, on_acquired=take)
    waiting_since = None
    while True:
        try:
            lock.acquire(blocking=False)
            break
        except filelock.Timeout:
            holder = lock_holder(path)
            if not _holder_alive(holder):
                # the holder has taken the flock but not yet written its record (the file is empty, or still holds
                # the record of a run killed earlier): wait for the record, or for the lock to come free. Past the
                # wait the refusal names what the file says (a holder in another PID namespace looks dead from here)
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since < HOLDER_RECORD_WAIT_S:
                    time.sleep(0.01)
                    continue
            raise RunLocked(f"corpus '{cfg.corpus}' is being run by {_describe(holder) if holder else 'another run'}; "
                            f"this run stops before touching anything. Wait for that run to end, or stop it "
                            f"(Ctrl-C in its terminal, or kill {holder['pid'] if holder else '<PID>'}), and run again "
                            f"(lock: {artifacts.project_relative(cfg, path)})") from None
    stale = found[-1]
    if stale:
        log(f"run_all: took over the stale lock of {_describe(stale)}, which no longer runs")
    try:
        yield stale
    finally:
        try:  # the file goes while the flock is held, so no other run can lock the removed one
            if os.stat(path).st_ino == inode[-1]:
                path.unlink()
        except OSError:
            pass
        lock.release()  # drops the flock
