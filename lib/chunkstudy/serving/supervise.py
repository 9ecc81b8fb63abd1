"""The supervisor of one model server: ``python -m chunkstudy.serving.supervise --log LOG -- COMMAND ...``.

The runner starts it in a session of its own and keeps the write end of its standard input; the supervisor starts
COMMAND (the server) in a process group of its own, its output appended to LOG, and prints ``{"pid": PID}`` (the
server's PID, which is also its process group) on standard output. It ends the server's whole process group
(SIGTERM, then SIGKILL after ``--grace`` seconds or as soon as the server itself has exited) when

* its standard input reaches end-of-file: the runner closed it to stop the server, or the runner is gone however it
  ended (Ctrl-C, SIGTERM, a crash, SIGKILL: the kernel closes a dead process's pipes), or
* it gets SIGTERM, SIGINT or SIGHUP, or
* the server exits by itself (then the supervisor exits with the server's exit code, 128 + N for signal N).

Either way it returns only when no process of the server's group is left (:func:`end_group`).

So no server outlives the run that started it. Standard library only: the supervisor starts in a fraction of a
second and holds no model.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading

from .. import procs


def end_group(pgid: int, child: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to process group ``pgid``; wait up to ``grace_s`` seconds until the whole group has exited, not only
    ``child`` (its leader): vLLM's API server exits before its engine process, which may still hold the GPU's memory
    when the next stage starts; then SIGKILL to whatever of the group is left, and wait until it is gone."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    if not procs.wait_group_gone(pgid, grace_s, leader=child):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        procs.wait_group_gone(pgid, None, leader=child)
    child.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.serving.supervise", description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", required=True, help="the server's output is appended here")
    ap.add_argument("--cwd", default=None)
    ap.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no server command after --")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    with open(a.log, "ab", buffering=0) as out:
        try:
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=a.cwd,
                                     start_new_session=True)
        except OSError as e:
            out.write(f"supervise: cannot start {cmd[0]}: {e}\n".encode())
            print(json.dumps({"pid": None, "error": str(e)}), flush=True)
            return 127
        print(json.dumps({"pid": child.pid}), flush=True)
        exited = threading.Event()

        def stdin_closed() -> None:
            try:  # os.read, not sys.stdin: no buffered-reader lock held by a daemon thread at exit
                while os.read(0, 65536):
                    pass
            except OSError:
                pass
            stop.set()

        def watch() -> None:
            child.wait()
            exited.set()
            stop.set()

        threading.Thread(target=stdin_closed, daemon=True).start()
        threading.Thread(target=watch, daemon=True).start()
        while not stop.wait(3600):  # woken by an event; the timeout only lets signal handlers run on old Pythons
            pass
        by_itself = exited.is_set()
        end_group(child.pid, child, 0.0 if by_itself else a.grace)
        code = child.returncode
    if by_itself:
        return code if code >= 0 else 128 - code
    return 0


if __name__ == "__main__":
    sys.exit(main())
