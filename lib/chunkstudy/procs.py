"""Processes as the ops code sees them, said once: whether a process runs, whether a whole process group is gone,
the last lines of a log, and whether a model server is ready. The runner and its corpus lock
(:mod:`chunkstudy.runlock`), the model servers (:mod:`chunkstudy.serving`) and the GPU tools (:mod:`chunkstudy.gpu`)
all ask here; nothing of theirs reads ``/proc`` itself, so no two of them can disagree on whether a process lives.

* **Liveness** (:func:`alive`, :func:`started`) is ``psutil``'s: a zombie (a process that has exited but is not
  yet reaped by its parent) has *ended* — it holds no memory, GPU memory included, and serves nothing. A PID is
  reused by the kernel once its process is gone, so a PID written to a file (a lock's record) names the same
  process only while it also started when the file says: :func:`started` gives that start as seconds after the
  machine's boot (the kernel's clock ticks, 0.01 s on Linux: unaffected by changes of the wall clock), and
  ``alive(pid, started=...)`` is false for a process that started at another time.
* **Process groups** (:func:`group`, :func:`wait_group_gone`): a model server runs in a process group of its own;
  it is gone when no process of the group is left that has not ended (vLLM's API server exits before its engine,
  which may still hold the GPU).
* **Log tails** (:func:`tail`): the last lines of a log, indented for an error message.
* **Readiness** (:func:`wait_served`): poll ``GET {url}/models`` of an OpenAI-compatible server until it lists
  the model, lists only others, its process exits, or a time limit passes; the caller turns the outcome into its
  own error. One reply is read one way (:func:`model_list`), also by the LLM's pre-flight and by a served model's
  entry before its canary request. Its users: the runner's servers (:meth:`chunkstudy.serving.lifecycle.Services.ensure`) and
  ``scripts/serve_llm.sh`` (:func:`chunkstudy.gpu.wait_ready`). :mod:`chunkstudy.devicecheck` keeps a loop of its
  own: it runs on a lent GPU machine with torch and the standard library only (no psutil, no requests).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import psutil

#: seconds between two looks at whether a process group is gone (:func:`wait_group_gone`)
GROUP_POLL_S = 0.1
#: process states that have ended although the PID still exists (not yet reaped)
_ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def started(pid: int) -> float | None:
    """When process ``pid`` started, in seconds after the machine's boot (rounded to 0.01 s, the kernel's clock
    tick), or None when no such process runs (a zombie has ended). Two processes that ever held one PID have
    different starts."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _ENDED:
            return None
        return round(proc.create_time() - psutil.boot_time(), 2)
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # psutil.ZombieProcess is a NoSuchProcess
        return None


def alive(pid: int, started_at: float | str | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie has ended) and, when ``started_at`` is given (a value of
    :func:`started`, also as a string, as a file holds it), whether it is the process that started then: a PID
    the kernel has given to another process since is not alive. A process this user may not inspect counts as
    running (it exists; its start cannot be compared)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in _ENDED:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    if started_at is None:
        return True
    try:
        return started(pid) == round(float(started_at), 2)
    except (TypeError, ValueError):
        return False  # a record whose start is no number names no process of ours


def group(pgid: int) -> list[int]:
    """The PIDs of process group ``pgid`` that have not ended (zombies left out), in increasing order."""
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() not in _ENDED:
                out.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # ended while we looked, or not ours to see
    return sorted(out)


def wait_group_gone(pgid: int, timeout_s: float | None, leader: subprocess.Popen | None = None) -> bool:
    """Wait until no process of group ``pgid`` is left that has not ended, or ``timeout_s`` seconds pass (None:
    no limit); whether the group is gone. ``leader``, the group's leader when it is this process's child, is
    reaped on the way (by ``Popen.poll``, so its exit code stays with the ``Popen``) and the group counts as gone
    only once it is. With ``timeout_s`` 0 this looks once."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        if (leader is None or leader.poll() is not None) and not group(pgid):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(GROUP_POLL_S)


def tail(path: str | Path | None, n: int, indent: str = "    ") -> str:
    """The last ``n`` lines of the text file ``path`` (undecodable bytes replaced), each after ``indent``, for an
    error message; ``(no log)`` when there is no such file and ``(empty)`` when it holds no line."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if path else None
    except OSError:
        lines = None
    if lines is None:
        return f"{indent}(no log)"
    return "\n".join(indent + line for line in lines[-n:]) or f"{indent}(empty)"


# --------------------------------------------------------------------------------------------------- readiness


@dataclass(frozen=True)
class ModelList:
    """One ``GET {url}/models`` of an OpenAI-compatible server (:func:`model_list`): the ``url`` asked, the HTTP
    ``status`` (None: nothing answered), the ``entries`` of its model list (each a dict with at least ``id``; vLLM's
    also hold ``max_model_len``; None unless a 200 reply held a list), ``why`` (``listed``, ``HTTP 503``, the
    transport exception's name, ``no model list``) and the reply's ``text`` (for an error message)."""

    url: str
    status: int | None
    entries: list[dict] | None
    why: str
    text: str = ""

    @property
    def ids(self) -> list[str] | None:
        """The model ids listed, or None when there is no list."""
        return None if self.entries is None else [str(e["id"]) for e in self.entries]


def model_list(url: str, headers: Mapping[str, str], timeout_s: float,
               get: Callable[..., Any] | None = None) -> ModelList:
    """``GET {url}/models`` once, read the one way every caller reads it: readiness (:func:`served_models`), the LLM's
    pre-flight (:meth:`chunkstudy.llm.backends.OpenAIBackend.preflight`) and a served model's entry before its
    canary (:func:`chunkstudy.identity.model_entry`). ``get``: the client's ``requests``-style get (a session's,
    to reuse its connections; default ``requests.get``)."""
    import requests

    target = url.rstrip("/") + "/models"
    try:
        r = (get or requests.get)(target, headers=dict(headers), timeout=timeout_s)
    except requests.RequestException as e:
        return ModelList(target, None, None, type(e).__name__)
    if r.status_code != 200:
        return ModelList(target, r.status_code, None, f"HTTP {r.status_code}", r.text)
    try:
        entries = [dict(m) for m in r.json()["data"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        entries = None
    if entries is None or any("id" not in m for m in entries):  # every entry names its model
        return ModelList(target, 200, None, "no model list", r.text)
    return ModelList(target, 200, entries, "listed", r.text)


def served_models(url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[list[str] | None, str]:
    """``GET {url}/models`` once (:func:`model_list`): ``(the model ids it lists, "listed")``, or ``(None, why)``
    when nothing answers there with a model list (``why``: ``HTTP 503``, the exception's name, ``no model
    list``)."""
    listed = model_list(url, headers, timeout_s)
    return listed.ids, listed.why


@dataclass(frozen=True)
class Readiness:
    """How :func:`wait_served` ended: ``state`` is ``served`` (the model is listed), ``other`` (the server lists
    only other models), ``exited`` (its process ended first) or ``timeout``; ``served`` the ids listed (None when
    nothing answered), ``last`` the last probe's answer (``listed``, ``HTTP 503``, ``ConnectionError``, ...),
    ``seconds`` the time the wait took."""

    state: str
    served: list[str] | None
    last: str
    seconds: float


def wait_served(url: str, model: str, *, timeout_s: float, interval_s: float, probe_timeout_s: float,
                headers: Mapping[str, str], exited: Callable[[float], bool]) -> Readiness:
    """Poll ``GET {url}/models`` until it lists ``model`` (``served``), answers without it (``other``: at once,
    no further poll), the server's process has ended (``exited``), or ``timeout_s`` seconds have passed
    (``timeout``; 0 probes once). Between two probes it calls ``exited(interval_s)``: it waits up to that long,
    returning early when the process ends, and says whether it has; ``exited(0)`` only looks. Each probe may take
    ``probe_timeout_s`` seconds."""
    t0 = time.monotonic()
    while True:
        served, last = served_models(url, headers, probe_timeout_s)
        state = None if served is None else "served" if model in served else "other"
        if state is None and exited(0.0):
            state = "exited"
        if state is None and time.monotonic() - t0 >= timeout_s:
            state = "timeout"
        if state is not None:
            return Readiness(state, served, last, time.monotonic() - t0)
        exited(interval_s)
