"""The runner's model servers over one run (:class:`Services`): port claims, the broker a stage's clients ask, the
start, the wait, the stop, and what the manifests record.

* **Port claims.** Before 01, a run claims every local port of a ``serve: auto`` server its selected stages need:
  an exclusive ``flock`` on ``$TMPDIR/chunkstudy-serve-<uid>/<address>-<port>.lock`` (the resolved address,
  :attr:`chunkstudy.serving.roles.Service.endpoint`: ``localhost`` and ``127.0.0.1`` are one claim), held to the
  run's end (the kernel drops it when the run dies, however). A second run that wants a claimed port — another
  corpus, another checkout — **refuses at once**, naming the run that holds it; it never picks another port (the
  port is in the parameter file, which the stage keys and the frozen copy hold) and never shares a server that the
  other run will stop.
* **Broker.** A Unix socket (``multiprocessing.connection``, a random key) named to the stage's kernel by
  :data:`chunkstudy.llm.http.BROKER_ENV`. A client asks it before its first model call that its caches do not
  hold (:func:`chunkstudy.llm.http.ensure_served`); a fully cached replay never asks, so it starts nothing.
* **Start.** For each URL asked about: when something already answers ``GET {url}/models`` listing the model, it
  is used as it is (a server the user started; never stopped by the run). Otherwise the run starts the role's
  command under :mod:`chunkstudy.serving.supervise` (its own session; the server in its own process group; output
  to ``build/executed/<corpus>/serve-<role>.log``) and waits for ``/v1/models`` to list the model, or for the
  server to exit (then the error holds the last lines of its log), or for ``serve_timeout_s``.
* **Stop.** After each stage, a server that no later selected stage declares (:attr:`chunkstudy.stages.Stage.
  services`) is stopped by its PID: before 04 for the LLM, so the encoders get the whole GPU. On the run's end in
  any way Python sees (success, a failed stage, Ctrl-C, SIGTERM) every server it started is stopped; when the run
  is killed outright the supervisor sees its pipe close and stops the server itself.
* **Records.** Each stage's manifest lists the servers its calls went to (``services``): URL, model, started or
  reused, PID, start-up seconds, the server's version (``GET /version``), command and log. A server that exited
  during a stage is reported with the tail of its log (:meth:`Services.explain`).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import procs
from ..config import Config
from ..llm import http
from .roles import Service, ServeError, auto_services

#: seconds between two readiness probes while a server starts (the wait also ends the moment it exits)
PROBE_INTERVAL_S = 0.5
#: seconds a stopping server gets between SIGTERM and SIGKILL
STOP_GRACE_S = 30.0
#: lines of a server's log an error message shows
LOG_LINES = 30
#: seconds one readiness probe (``GET /models``, ``GET /version``) may take
PROBE_TIMEOUT_S = 5.0
#: seconds a failed stage waits, on the process, for a server of this run that no longer answers to end, so that the
#: failure names the dead server (:meth:`Services.explain`); a server that answers is not waited for
DEATH_WAIT_S = 30.0


def server_version(url: str) -> str | None:
    """The server's version: vLLM's ``GET /version`` at the URL's root; None when it does not say."""
    import requests

    root = url[:-len("/v1")] if url.endswith("/v1") else url
    try:
        r = requests.get(root + "/version", timeout=PROBE_TIMEOUT_S)
        return str(r.json().get("version")) if r.status_code == 200 else None
    except (requests.RequestException, ValueError, AttributeError):
        return None


def claim_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"chunkstudy-serve-{os.getuid()}"


@dataclass
class Running:
    """A server as the run knows it: ``how`` = started (by this run) or reused (it answered already)."""

    service: Service
    how: str
    log: Path
    pid: int | None = None
    supervisor: subprocess.Popen | None = None
    startup_s: float | None = None
    version: str | None = None
    command: list[str] = field(default_factory=list)
    exit_code: int | None = None
    exited_during: str | None = None
    stopping: bool = False
    t0: float = 0.0

    def record(self) -> dict:
        return {"roles": list(self.service.roles), "url": self.service.url, "model": self.service.model,
                "how": self.how, "pid": self.pid, "startup_s": self.startup_s, "version": self.version,
                "command": self.command, "log": str(self.log) if self.how == "started" else None}


class Services:
    """The servers of one run (module docstring). Use as a context manager around the stages; ``stage(name)``
    around each one; ``after(name, later)`` once it is done."""

    def __init__(self, cfg: Config, selected: list[str], executed_dir: Path, log: Callable[[str], Any],
                 command: str = ""):
        self.cfg, self.executed_dir, self.log, self.command = cfg, executed_dir, log, command
        self.plan = auto_services(cfg, selected)
        self.by_url = {s.url: s for s in self.plan}
        self.running: dict[str, Running] = {}
        self.known: dict[str, Running] = {}  # the last server of each URL, kept after its stop (manifests)
        self.exited: list[Running] = []  # servers that exited by themselves
        self.current: str | None = None
        self.asked: dict[str, set[str]] = {}  # stage -> URLs its clients asked for
        self._lock = threading.Lock()
        self._url_locks = {u: threading.Lock() for u in self.by_url}
        self._claims: list[int] = []
        self._listener: Any = None
        self._env_saved: str | None = None
        self._broker_dir: Path | None = None
        self._broker_thread: threading.Thread | None = None
        self._closing = False

    # ------------------------------------------------------------------------------------------ run scope
    def __enter__(self) -> "Services":
        if not self.plan:
            return self
        try:
            for s in self.plan:
                if s.local:
                    self._claim(s)
            self._open_broker()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closing = True
        try:
            for url in list(self.running):
                self.stop(url)
        finally:
            if self._listener is not None:
                self._close_broker()
                if self._env_saved is None:
                    os.environ.pop(http.BROKER_ENV, None)
                else:
                    os.environ[http.BROKER_ENV] = self._env_saved
            for fd in self._claims:
                os.close(fd)  # drops the flock
            self._claims.clear()

    def _claim(self, s: Service) -> None:
        folder = claim_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{s.endpoint}.lock"  # any spelling of one endpoint (localhost, 127.0.0.1) is one claim
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            os.close(fd)
            raise ServeError(
                f"port {s.port} ({s.roles[0]}.base_url {s.url}, serve: auto) is claimed by another run, PID "
                f"{holder.get('pid', '?')} ({holder.get('command') or 'command unknown'}, corpus "
                f"{holder.get('corpus', '?')}): it starts and stops the server there. This run stops before 01. "
                f"Wait for that run to end, or give this corpus another port in {s.roles[0]}.base_url "
                f"(claim: {path})") from None
        record = {"pid": os.getpid(), "corpus": self.cfg.corpus, "command": self.command, "url": s.url,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._claims.append(fd)

    def _open_broker(self) -> None:
        from multiprocessing.connection import Listener

        key = secrets.token_bytes(16)
        folder = Path(tempfile.mkdtemp(prefix="chunkstudy-broker-"))
        self._listener = Listener(str(folder / "s"), family="AF_UNIX", authkey=key)
        self._env_saved = os.environ.get(http.BROKER_ENV)
        os.environ[http.BROKER_ENV] = f"{self._listener.address} {key.hex()}"  # the kernel inherits it
        self._broker_dir = folder
        self._broker_thread = threading.Thread(target=self._serve_broker, args=(self._listener,), daemon=True)
        self._broker_thread.start()

    def _close_broker(self) -> None:
        """Close the broker's socket, wake its accepting thread (closing alone leaves it blocked in ``accept``
        on Linux) and remove its folder."""
        listener, self._listener = self._listener, None
        sock = getattr(getattr(listener, "_listener", None), "_socket", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        listener.close()
        if self._broker_thread is not None:
            self._broker_thread.join(timeout=10)
            self._broker_thread = None
        if self._broker_dir is not None:
            shutil.rmtree(self._broker_dir, ignore_errors=True)
            self._broker_dir = None

    def _serve_broker(self, listener: Any) -> None:
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError):
                return  # closed at the run's end
            except Exception:  # noqa: BLE001 - a client that failed the handshake; keep serving the others
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Any) -> None:
        with conn:
            try:
                ask = conn.recv()
                self.ensure(list(ask.get("ensure", [])), str(ask.get("role", "")))
                conn.send({"ok": True})
            except ServeError as e:
                conn.send({"ok": False, "error": str(e)})
            except (OSError, EOFError):
                pass  # the asking client is gone
            except Exception as e:  # noqa: BLE001 - the client gets the reason instead of a closed socket
                conn.send({"ok": False, "error": f"starting the server failed: {type(e).__name__}: {e}"})

    # ---------------------------------------------------------------------------------------- per stage
    def stage(self, name: str) -> None:
        self.current = name
        self.asked.setdefault(name, set())

    def records(self, name: str) -> list[dict]:
        """What stage ``name``'s manifest records of the servers its calls went to."""
        with self._lock:
            return [self.known[u].record() for u in sorted(self.asked.get(name, ())) if u in self.known]

    def after(self, name: str, later: list[str]) -> None:
        """Stage ``name`` is done: stop every server no stage of ``later`` declares."""
        self.current = None
        for url, run in list(self.running.items()):
            if not set(run.service.stages) & set(later):
                self.stop(url)

    def explain(self, name: str) -> str:
        """For a failed stage: every server that exited while it ran, with the tail of its log ("" when none).

        A server this run started that no longer answers ``GET /models`` is waited for first, on its supervisor's
        exit (at most :data:`DEATH_WAIT_S`): a dying server drops its connections before its process has ended,
        so on a loaded machine the stage's clients fail (a share of calls "unreachable") before the exit is seen.
        Waiting for the exit status, not for a time, lets the failure name the server that died; a server that
        answers is not waited for."""
        out = []
        for run in list(self.running.values()):
            sup = run.supervisor
            if sup is None:
                continue  # the user's server: not ours to wait for
            if sup.poll() is None and not self._answers(run.service):
                try:
                    sup.wait(timeout=DEATH_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass  # alive but silent: the stage's own error says what the clients saw
            if sup.poll() is not None:
                self._watched(run)
        with self._lock:
            gone = [r for r in self.exited if r.exited_during == name]
        for r in gone:
            out.append(f"the server of {', '.join(r.service.roles)} (PID {r.pid}, {r.service.url}) exited with code "
                       f"{r.exit_code} during {name}; its finished calls are cached. Last lines of "
                       f"{self._rel(r.log)}:\n{procs.tail(r.log, LOG_LINES)}")
        return "\n".join(out)

    @staticmethod
    def _answers(s: Service) -> bool:
        """Whether the server at ``s.url`` answers ``GET /models`` now (one probe)."""
        served, _ = procs.served_models(s.url, http.auth_headers(s.api_key_env), PROBE_TIMEOUT_S)
        return served is not None

    # ---------------------------------------------------------------------------------------- a server
    def ensure(self, urls: list[str], role: str) -> None:
        """Make every URL of ``urls`` answer (module docstring): the servers that must start start together (the
        replicas of a role come up in parallel), then each is waited for. URLs of no ``serve: auto`` role are the
        user's: nothing to do."""
        mine = sorted(u for u in dict.fromkeys(urls) if u in self.by_url)
        if self.current is not None:
            self.asked.setdefault(self.current, set()).update(mine)
        locks = [self._url_locks[u] for u in mine]
        for lock in locks:
            lock.acquire()
        try:
            launched = [run for run in (self._reuse_or_launch(u, role) for u in mine) if run is not None]
            failures = []
            for run in launched:
                try:
                    self._await(run)
                except ServeError as e:
                    failures.append(e)
            if failures:
                raise failures[0]
        finally:
            for lock in locks:
                lock.release()

    def _reuse_or_launch(self, url: str, role: str) -> Running | None:
        s = self.by_url[url]
        run = self.running.get(url)
        if run is not None and (run.how == "reused" or (run.supervisor and run.supervisor.poll() is None)):
            return None
        if self._closing:
            raise ServeError(f"the run is stopping: {role} gets no server at {url}")
        served, _ = procs.served_models(url, http.auth_headers(s.api_key_env), PROBE_TIMEOUT_S)
        if served is None:
            return self._launch(s)
        if s.model not in served:
            raise ServeError(f"{role}: a server already answers at {url} but serves {served}, not {s.model!r}; "
                             f"stop it, or give {role}.base_url another port")
        with self._lock:
            self.running[url] = self.known[url] = Running(s, "reused", self.executed_dir / f"{s.name}.log",
                                                          version=server_version(url))
        self.log(f"{'':<16} serve: {role} uses the server already answering at {url}")
        return None

    def _launch(self, s: Service) -> Running:
        self.executed_dir.mkdir(parents=True, exist_ok=True)
        logf = self.executed_dir / f"{s.name}.log"
        argv = s.argv(self.cfg.frozen or self.cfg.path)
        with open(logf, "a", encoding="utf-8") as f:
            f.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} ./run_all.sh starts {', '.join(s.roles)} at {s.url}: "
                    f"{' '.join(argv)}\n")
        t0 = time.monotonic()
        sup = subprocess.Popen([sys.executable, "-m", "chunkstudy.serving.supervise", "--log", str(logf),
                                "--cwd", str(self.cfg.root), "--grace", str(STOP_GRACE_S), "--", *argv],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        first = sup.stdout.readline() if sup.stdout is not None else b""
        try:
            pid = json.loads(first or b"{}").get("pid")
        except ValueError:
            pid = None
        run = Running(s, "started", logf, pid, sup, command=argv, t0=t0)
        with self._lock:
            self.running[s.url] = self.known[s.url] = run
        threading.Thread(target=self._watch, args=(run,), daemon=True).start()
        self.log(f"{'':<16} serve: starting {', '.join(s.roles)} at {s.url} (PID {pid}; log "
                 f"{self._rel(logf)}) ...")
        return run

    def _await(self, run: Running) -> None:
        """Wait for ``/v1/models`` to list the model, the server to exit, or ``serve_timeout_s``."""
        s, sup, logf = run.service, run.supervisor, run.log
        assert sup is not None

        def exited(seconds: float) -> bool:
            if seconds:
                try:
                    sup.wait(timeout=seconds)  # returns at once when the server has exited
                except subprocess.TimeoutExpired:
                    pass
            return sup.poll() is not None or run.pid is None

        r = procs.wait_served(s.url, s.model, timeout_s=s.timeout_s - (time.monotonic() - run.t0),
                              interval_s=PROBE_INTERVAL_S, probe_timeout_s=PROBE_TIMEOUT_S,
                              headers=http.auth_headers(s.api_key_env), exited=exited)
        if r.state == "other":
            self.stop(s.url)
            raise ServeError(f"{s.roles[0]}: the server started at {s.url} serves {r.served}, not {s.model!r} "
                             f"(the served model name must be {s.roles[0]}.model)")
        if r.state == "exited":
            code = sup.wait()
            run.stopping = True  # a failed start is this error, not a death during the stage
            self.stop(s.url)
            with self._lock:
                self.exited = [x for x in self.exited if x is not run]
            raise ServeError(f"{s.roles[0]}: the server exited with code {code} before it served "
                             f"{s.model!r} at {s.url} ({' '.join(run.command)}). Last lines of "
                             f"{self._rel(logf)}:\n{procs.tail(logf, LOG_LINES)}")
        if r.state == "timeout":
            self.stop(s.url)
            raise ServeError(f"{s.roles[0]}: the server did not serve {s.model!r} at {s.url} within "
                             f"{s.timeout_s:g} s (serve_timeout_s); stopped. Last lines of {self._rel(logf)}:\n"
                             f"{procs.tail(logf, LOG_LINES)}")
        run.startup_s = round(time.monotonic() - run.t0, 1)
        run.version = server_version(s.url)
        self.log(f"{'':<16} serve: {', '.join(s.roles)} answers at {s.url} after {run.startup_s:.1f} s"
                 + (f" (version {run.version})" if run.version else ""))

    def _watch(self, run: Running) -> None:
        """Note the server's exit (the supervisor exits with it) and the stage it happened in."""
        assert run.supervisor is not None
        run.supervisor.wait()
        self._watched(run)

    def _watched(self, run: Running) -> None:
        with self._lock:
            if run.exit_code is not None:
                return  # noted already
            code = run.exit_code = run.supervisor.returncode if run.supervisor is not None else None
            if self._closing or run.stopping:
                return
            run.exited_during = self.current or "between stages"
            self.exited.append(run)
        self.log(f"{'':<16} serve: the server of {', '.join(run.service.roles)} (PID {run.pid}) exited with "
                 f"code {code}; log: {self._rel(run.log)}")

    def stop(self, url: str) -> None:
        """Stop the server this run started at ``url`` (close its supervisor's pipe: it ends the server's process
        group; SIGKILL to both if that takes longer than the grace); forget a reused one."""
        with self._lock:
            run = self.running.pop(url, None)
        if run is None or run.supervisor is None:
            return
        sup = run.supervisor
        was_up = sup.poll() is None
        run.stopping = True
        if was_up:
            try:
                if sup.stdin is not None:
                    sup.stdin.close()
            except OSError:
                pass
            try:
                sup.wait(timeout=STOP_GRACE_S + 15)
            except subprocess.TimeoutExpired:
                for pg in (run.pid, sup.pid):
                    try:
                        os.killpg(pg, 9) if pg else None
                    except (ProcessLookupError, PermissionError):
                        pass
                sup.wait()
        if sup.stdout is not None:
            sup.stdout.close()
        if was_up:
            self.log(f"{'':<16} serve: stopped {', '.join(run.service.roles)} at {url} (PID {run.pid})")

    def _rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.cfg.root))
        except ValueError:
            return str(p)
