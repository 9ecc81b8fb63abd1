"""Progress of long loops (embedding, model calls, reranking, bootstrap, metrics), visible wherever the loop runs.

One call, :func:`bar`, wherever a loop is long::

    with progress.bar(total=len(todo), desc="embed strong (passage)", unit="text") as p:
        for group in groups:
            ...
            p.update(len(group))

Where the progress goes:

* **Under the runner** (``./run_all.sh``): the runner executes each notebook in a fresh kernel whose environment
  names a progress file (:data:`ENV`). Each loop appends throttled JSON lines to it — at most one every
  :data:`MIN_INTERVAL_S` seconds, plus its first and last — and the runner's :class:`Tail` renders them on the
  terminal that ran ``./run_all.sh``: one updating line per loop (``\\r`` on a terminal; on a pipe or a log file a
  line every :data:`LOG_INTERVAL_S` seconds), with the count done, the total, the rate and the ETA, then a final
  summary line with the time. The notebook's own output stays free of progress noise.
* **Opened by hand** (JupyterLab, or a plain Python session): a ``tqdm.auto`` bar — a widget in JupyterLab when
  ``ipywidgets`` is installed, a text bar otherwise.

A stage can also send a warning that must not stay in the kernel's log (:func:`warn`: an embedding-store shard
repaired, for one): the runner prints it at once, records it in the stage's manifest, and 08 lists it among the
report's warnings; and a note (:func:`note`: a client waiting on a silent server), which the runner prints only.

Progress never changes results: it only reports counts. Neither does :func:`timed`, which times a call repeatedly.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, TypeVar

from tqdm import tqdm

#: Environment variable naming the progress file a runner-executed kernel writes to.
ENV = "CHUNKSTUDY_PROGRESS"
#: Environment variable naming the stage whose notebook is running (set by the runner), shown in each line.
STAGE_ENV = "CHUNKSTUDY_STAGE"
#: A loop writes at most one progress record per this many seconds (besides its first and last).
MIN_INTERVAL_S = 0.5
#: Without a terminal (a pipe, a CI log), the runner prints a loop's line at most this often.
LOG_INTERVAL_S = 30.0

T = TypeVar("T")
_ids = iter(range(1, 1 << 62))
_ids_lock = threading.Lock()


def _next_id() -> int:
    with _ids_lock:
        return next(_ids)


def _append(path: str, rec: dict) -> None:
    line = (json.dumps(rec) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of one line in append mode: records never interleave
    finally:
        os.close(fd)


class _FileBar:
    """A loop's progress as JSON lines in the runner's progress file (see the module docstring)."""

    def __init__(self, path: str, total: int | None, desc: str, unit: str):
        self.path, self.total, self.desc, self.unit = path, total, desc, unit
        self.n = 0
        self.postfix: dict = {}
        self.id = f"{os.getpid()}-{_next_id()}"
        self.stage = os.environ.get(STAGE_ENV, "")
        self.t0 = time.monotonic()
        self._last = 0.0
        self._closed = False
        self._emit(force=True)

    def _emit(self, force: bool = False, done: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        rec = {"id": self.id, "stage": self.stage, "desc": self.desc, "unit": self.unit, "n": self.n,
               "total": self.total, "elapsed": now - self.t0, "done": done}
        if self.postfix:
            rec["postfix"] = ", ".join(f"{k}={v}" for k, v in self.postfix.items())
        _append(self.path, rec)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._emit()

    def set_postfix(self, refresh: bool = False, **values) -> None:
        """Extra facts shown after the meter (``failed=2``, ``requests=31``), as tqdm's ``set_postfix``."""
        self.postfix.update(values)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._emit(force=True, done=True)


def bar(total: int | None, desc: str, unit: str = "it", disable: bool = False):
    """A progress bar for one loop of ``total`` items (``None`` when unknown): the runner's progress file when the
    runner set :data:`ENV`, else ``tqdm.auto``. Use it as a context manager, or call ``close()`` when done."""
    path = os.environ.get(ENV)
    if disable or total == 0:  # nothing to count: no line at all
        return tqdm(total=total, disable=True)
    if path:
        return _Closing(_FileBar(path, total, desc, unit))
    import warnings

    with warnings.catch_warnings():  # tqdm.auto warns when a kernel lacks ipywidgets, then draws a text bar
        warnings.simplefilter("ignore")
        from tqdm.auto import tqdm as auto_tqdm

        return auto_tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)


class _Closing:
    """Context-manager wrapper so both kinds of bar are used the same way (``with bar(...) as p: p.update(k)``)."""

    def __init__(self, inner: _FileBar):
        self._inner = inner

    def __enter__(self) -> _FileBar:
        return self._inner

    def __exit__(self, *exc) -> None:
        self._inner.close()

    def update(self, n: int = 1) -> None:
        self._inner.update(n)

    def set_postfix(self, refresh: bool = False, **values) -> None:
        self._inner.set_postfix(**values)

    def close(self) -> None:
        self._inner.close()


def warn(message: str) -> None:
    """Show ``message`` in the runner's output (``NN_stage | WARNING: ...``) when the runner executes this
    notebook; the runner also records it in the stage's manifest, and 08 puts it among the report's warnings. Outside
    the runner it does nothing (the caller's own ``warnings.warn`` is what a notebook opened by hand shows)."""
    path = os.environ.get(ENV)
    if path:
        _append(path, {"id": f"{os.getpid()}-{_next_id()}", "stage": os.environ.get(STAGE_ENV, ""),
                       "warning": str(message)})


def note(message: str) -> None:
    """Show ``message``, a line that is no warning (a client saying what it waits for), in the runner's output
    (``NN_stage | message``) when the runner executes this notebook, else on stderr (a notebook opened by hand)."""
    path = os.environ.get(ENV)
    if path:
        _append(path, {"id": f"{os.getpid()}-{_next_id()}", "stage": os.environ.get(STAGE_ENV, ""),
                       "note": str(message)})
    else:
        print(message, file=sys.stderr, flush=True)


def track(items: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it") -> Iterator[T]:
    """Iterate ``items`` while reporting progress (one tick per item)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as p:
        for x in items:
            yield x
            p.update(1)


# ---------------------------------------------------------------------------------------------- the runner side
def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:d}:{s % 60:02d}"


def render(rec: dict) -> str:
    """One progress line: ``stage | desc: 40%|####      | 40/100 [00:12<00:18, 3.25text/s]`` (tqdm's meter)."""
    prefix = f"{rec['stage']} | {rec['desc']}" if rec.get("stage") else rec["desc"]
    return tqdm.format_meter(rec["n"], rec["total"], rec["elapsed"], unit=rec["unit"], prefix=prefix, ncols=110,
                             postfix=rec.get("postfix"))


def summary(rec: dict) -> str:
    """The final line of a finished loop: counts, wall time and rate."""
    prefix = f"{rec['stage']} | {rec['desc']}" if rec.get("stage") else rec["desc"]
    total = f"/{rec['total']}" if rec.get("total") not in (None, rec["n"]) else ""
    extra = f"; {rec['postfix']}" if rec.get("postfix") else ""
    return (f"{prefix}: {rec['n']}{total} {rec['unit']} in {_fmt_seconds(rec['elapsed'])} "
            f"({_fmt_rate(rec['n'], rec['elapsed'])} {rec['unit']}/s{extra})")


def _fmt_rate(n: float, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    rate = n / seconds
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}" if rate >= 10 else f"{rate:.2f}"


class Tail:
    """Follow a progress file from the runner process and print it to ``out`` (a thread; :meth:`stop` flushes).

    On a terminal each loop is one line rewritten in place (``\\r``); elsewhere (a pipe, a CI log) a loop's line
    appears once it has run ``start_after_s``, then at most every :data:`LOG_INTERVAL_S` seconds, and its
    :func:`summary` once finished — never a flood; a loop that finishes within ``start_after_s`` prints nothing.
    """

    def __init__(self, path: Path, out: IO[str] | None = None, tty: bool | None = None, poll_s: float = 0.25,
                 log_interval_s: float = LOG_INTERVAL_S, start_after_s: float = 1.0):
        self.path = Path(path)
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.poll_s, self.log_interval_s, self.start_after_s = poll_s, log_interval_s, start_after_s
        self._pos = 0
        self._buf = b""
        self._stop = threading.Event()
        self._printed: dict[str, float] = {}  # loop id -> monotonic time its line was last printed (non-tty)
        self._open_line = False  # a \r line is on screen without its newline
        self.warnings: list[str] = []  # the warnings the stage sent (:func:`warn`), in order
        self._thread = threading.Thread(target=self._run, name="progress-tail", daemon=True)

    def __enter__(self) -> "Tail":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll()  # whatever arrived after the last poll
        if self._open_line:
            self.out.write("\n")
            self._open_line = False
        self.out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def _records(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        self._pos += len(data)
        data = self._buf + data
        *lines, self._buf = data.split(b"\n")  # the last piece may be a line still being written
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def poll(self) -> None:
        for rec in self._records():
            self._show(rec)
        self.out.flush()

    def _show(self, rec: dict) -> None:
        if "warning" in rec or "note" in rec:
            if "warning" in rec:
                self.warnings.append(rec["warning"])
            prefix = f"{rec['stage']} | " if rec.get("stage") else ""
            line = f"WARNING: {rec['warning']}" if "warning" in rec else rec["note"]
            self.out.write(("\r\x1b[K" if self._open_line else "") + f"{prefix}{line}\n")
            self._open_line = False
            return
        if self.tty:
            self.out.write("\r\x1b[K" + (summary(rec) + "\n" if rec["done"] else render(rec)))
            self._open_line = not rec["done"]
            return
        now = time.monotonic()
        if rec["done"]:
            # a loop that took less than start_after_s is not worth a line of a log
            if rec["id"] in self._printed or rec["elapsed"] >= self.start_after_s:
                self.out.write(summary(rec) + "\n")
            self._printed.pop(rec["id"], None)
        elif rec["total"] is not None and rec["n"] >= rec["total"]:
            pass  # finished: its summary follows
        elif rec["id"] not in self._printed:
            if rec["elapsed"] >= self.start_after_s:  # a loop that ends within a second gets its summary only
                self.out.write(render(rec) + "\n")
                self._printed[rec["id"]] = now
        elif now - self._printed[rec["id"]] >= self.log_interval_s:
            self.out.write(render(rec) + "\n")
            self._printed[rec["id"]] = now


#: The timing columns of :func:`timed` (05's ``retrieval_timing``).
TIMING_COLUMNS = ("seconds", "seconds_min", "seconds_max", "repeats")


def timed(call: Callable[[], Any], repeats: int, budget_s: float = 1.0) -> tuple[Any, dict]:
    """``call()``'s result (its first call, which also warms the caches) and its wall seconds: the median and range
    of up to ``repeats`` more timed calls (:data:`TIMING_COLUMNS`; fewer once they took ``budget_s`` together: a
    slow call is timed well enough by one or two, and a run of large cells is not made much longer), or with 0
    repeats the first call's alone. One run of a sub-millisecond call is timer jitter and warm-up: 05 times each
    cell's search so (``retrieve.timing_repeats``). Like the bars, it never changes a result."""
    t0 = time.perf_counter()
    out = call()
    times = [time.perf_counter() - t0]
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
        if sum(times[1:]) >= budget_s:
            break
    timed_runs = times[1:] or times
    return out, {"seconds": float(statistics.median(timed_runs)), "seconds_min": min(timed_runs),
                 "seconds_max": max(timed_runs), "repeats": len(times) - 1}
