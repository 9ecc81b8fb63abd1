"""chunkstudy.procs: liveness (a live, a dead, a zombie and a reused PID), a whole process group gone, log tails,
and a server's readiness against a real loopback HTTP server. Nothing here waits for time to pass: a zombie is
made with ``waitid(WNOWAIT)`` (the child has exited, it is not reaped), a process group is waited for after its
processes said they run, and the HTTP server answers by a script of replies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chunkstudy import procs


def _exited_child() -> subprocess.Popen:
    """A child that has exited and is not yet reaped: a zombie until ``.wait()``."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # returns once it has exited; leaves it unreaped
    return child


def test_a_live_process_is_alive_and_keeps_its_start():
    me = os.getpid()
    assert procs.alive(me)
    start = procs.started(me)
    assert isinstance(start, float) and start > 0
    assert procs.started(me) == start  # the same process, the same start: what a lock's record compares
    assert procs.alive(me, start) and procs.alive(me, str(start))  # as a file holds it, too


def test_a_dead_process_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not procs.alive(child.pid) and procs.started(child.pid) is None


def test_a_zombie_has_ended():
    child = _exited_child()
    try:
        assert os.path.exists(f"/proc/{child.pid}") or sys.platform != "linux"  # the PID still exists
        assert not procs.alive(child.pid) and procs.started(child.pid) is None
    finally:
        child.wait()


def test_a_reused_pid_is_not_the_process_a_record_names():
    """A record names a process by PID and start; a process holding that PID with another start (the kernel
    gave the PID to a new process) is not it. The start is in 0.01 s, the kernel's clock tick."""
    me = os.getpid()
    start = procs.started(me)
    assert start is not None
    assert not procs.alive(me, start + 0.01) and not procs.alive(me, start - 1)
    assert not procs.alive(me, "0") and not procs.alive(me, "not a number")


def test_a_process_group_is_gone_only_when_all_of_it_has_ended():
    """A leader in a session of its own with a child in its group (a server and its engine): while either runs
    the group is not gone; after SIGTERM to the group both end and the wait says so, the leader reaped by its
    Popen (its exit code kept)."""
    leader = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        member = int(leader.stdout.readline())  # the leader started its child: both are in the group now
        assert procs.group(leader.pid) == sorted([leader.pid, member])
        assert procs.wait_group_gone(leader.pid, 0, leader=leader) is False  # looks once: still there
        os.kill(member, signal.SIGKILL)  # the member ends first; the leader's `wait` returns and it exits
        assert procs.wait_group_gone(leader.pid, None, leader=leader) is True
        assert procs.group(leader.pid) == [] and leader.returncode == 0  # sh's `wait` returned, then sh ended
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()
        leader.stdout.close()


def test_a_group_counts_zombies_as_ended_and_waits_for_its_leader_to_be_reaped():
    leader = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        member = int(leader.stdout.readline())
        os.killpg(leader.pid, signal.SIGTERM)
        os.waitid(os.P_PID, leader.pid, os.WEXITED | os.WNOWAIT)  # the leader has exited, unreaped: a zombie
        assert leader.pid not in procs.group(leader.pid)
        assert procs.wait_group_gone(leader.pid, None, leader=leader) is True  # reaps it (and outlives the member)
        assert leader.returncode == -signal.SIGTERM and not procs.alive(member)
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()
        leader.stdout.close()


def test_tail_gives_the_last_lines_indented_and_says_when_there_are_none(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"one\ntwo\nthr\xffee\nfour\n")
    assert procs.tail(log, 2) == "    thr\ufffdee\n    four"
    assert procs.tail(str(log), 10, indent="") == "one\ntwo\nthr\ufffdee\nfour"
    assert procs.tail(tmp_path / "missing.log", 5) == "    (no log)"
    assert procs.tail(None, 5) == "    (no log)"
    (tmp_path / "empty.log").write_text("")
    assert procs.tail(tmp_path / "empty.log", 5) == "    (empty)"


# ------------------------------------------------------------------------------------------------ readiness


class _Scripted(ThreadingHTTPServer):
    """A loopback server whose ``GET /v1/models`` answers from a script, one reply per request, the last one
    repeated: ``(status, model ids)``, or ``(status, body bytes)`` for a reply that is no model list. It records
    each request's Authorization header."""

    def __init__(self, script: list[tuple[int, list[str]]]):
        self.script, self.seen = list(script), []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805 - the server is `self` here
                self.seen.append((handler.path, handler.headers.get("Authorization")))
                status, ids = self.script.pop(0) if len(self.script) > 1 else self.script[0]
                body = ids if isinstance(ids, bytes) else json.dumps(
                    {"object": "list", "data": [{"id": i, "max_model_len": 512} for i in ids]}).encode()
                handler.send_response(status)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def scripted():
    servers = []

    def start(script):
        server = _Scripted(script)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _never_exits(waits: list[float]):
    def exited(seconds: float) -> bool:
        waits.append(seconds)
        return False
    return exited


def test_wait_served_polls_until_the_model_is_listed(scripted):
    server = scripted([(503, []), (503, []), (200, ["m"])])
    waits: list[float] = []
    r = procs.wait_served(server.url, "m", timeout_s=600, interval_s=0.5, probe_timeout_s=5,
                          headers={"Authorization": "Bearer k"}, exited=_never_exits(waits))
    assert (r.state, r.served, r.last) == ("served", ["m"], "listed")
    assert server.seen == [("/v1/models", "Bearer k")] * 3
    assert waits == [0.0, 0.5, 0.0, 0.5]  # before each next probe: a look, then a wait of one interval


def test_wait_served_stops_at_once_on_another_model_an_exit_or_the_time_limit(scripted):
    other = scripted([(200, ["served-model"])])
    waits: list[float] = []
    r = procs.wait_served(other.url, "m", timeout_s=600, interval_s=0.5, probe_timeout_s=5, headers={},
                          exited=_never_exits(waits))
    assert (r.state, r.served, waits, len(other.seen)) == ("other", ["served-model"], [], 1)
    starting = scripted([(503, [])])
    r = procs.wait_served(starting.url, "m", timeout_s=600, interval_s=0.5, probe_timeout_s=5, headers={},
                          exited=lambda seconds: True)
    assert (r.state, r.served, r.last, len(starting.seen)) == ("exited", None, "HTTP 503", 1)
    waits.clear()
    r = procs.wait_served(starting.url, "m", timeout_s=0, interval_s=0.5, probe_timeout_s=5, headers={},
                          exited=_never_exits(waits))
    assert (r.state, r.last, waits) == ("timeout", "HTTP 503", [0.0])


def test_wait_served_names_what_answered_when_nothing_serves(scripted):
    server = scripted([(200, [])])
    server.shutdown()
    server.server_close()  # nothing listens on its port now
    r = procs.wait_served(server.url, "m", timeout_s=0, interval_s=0.5, probe_timeout_s=5, headers={},
                          exited=lambda seconds: False)
    assert (r.state, r.served, r.last) == ("timeout", None, "ConnectionError")


def test_model_list_reads_a_reply_the_one_way_every_caller_reads_it(scripted):
    """procs.model_list is the one reading of ``GET /models``: a list keeps each entry whole (vLLM's
    ``max_model_len`` with it); a 200 reply without a list, or with an entry that names no model, is "no model
    list" with its text kept; another status is named with its text; nothing listening is the transport error's
    name. served_models (readiness), the LLM's pre-flight and a served model's entry read it."""
    server = scripted([(200, ["a", "b"]), (200, b'{"object": "list"}'), (200, b'{"data": [{"object": "m"}]}'),
                       (401, b'{"error": "bad key"}')])
    ok = procs.model_list(server.url, {"Authorization": "Bearer k"}, 5)
    assert (ok.url, ok.status, ok.ids, ok.why) == (server.url + "/models", 200, ["a", "b"], "listed")
    assert ok.entries == [{"id": "a", "max_model_len": 512}, {"id": "b", "max_model_len": 512}]
    for body in ('{"object": "list"}', '{"data": [{"object": "m"}]}'):
        bad = procs.model_list(server.url, {}, 5)
        assert (bad.status, bad.entries, bad.ids, bad.why, bad.text) == (200, None, None, "no model list", body)
    denied = procs.model_list(server.url, {}, 5)
    assert (denied.status, denied.entries, denied.why, denied.text) == (401, None, "HTTP 401", '{"error": "bad key"}')
    assert server.seen[0] == ("/v1/models", "Bearer k")
    server.shutdown()
    server.server_close()
    gone = procs.model_list(server.url, {}, 5)
    assert (gone.status, gone.entries, gone.why) == (None, None, "ConnectionError")
    assert procs.served_models(server.url, {}, 5) == (None, "ConnectionError")


def test_a_served_models_entry_and_the_llm_preflight_read_model_list(scripted, tmp_path):
    from chunkstudy import config, identity, llm

    server = scripted([(200, ["served-model"]), (200, ["other"]), (403, b"forbidden"), (200, b"[]")])
    assert identity.model_entry(server.url, "served-model", {}, 5) == {"id": "served-model", "max_model_len": 512}
    assert identity.model_entry(server.url, "served-model", {}, 5) == {}  # listed without it: the canary tells
    record = config.record("llm", {"backend": "openai", "base_url": server.url, "model": "served-model",
                                   "api_key_env": "CHUNKSTUDY_TEST_NO_KEY"})
    backend = llm.make_client(record, tmp_path).backend
    with pytest.raises(llm.PreflightError, match=r"GET .*/v1/models answered HTTP 403: forbidden\. Is the API key "
                                                 r"in \$CHUNKSTUDY_TEST_NO_KEY right\?"):
        backend.preflight()
    with pytest.raises(llm.PreflightError, match=r"GET .*/v1/models is not an OpenAI model list: \[\]"):
        backend.preflight()
    server.shutdown()
    server.server_close()
    with pytest.raises(identity.IdentityError, match=r"no server answers at .*/v1/models \(ConnectionError\)"):
        identity.model_entry(server.url, "served-model", {}, 5)
