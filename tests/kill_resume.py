"""Kill ``./run_all.sh demo`` with SIGKILL in the middle of stage 04, run it again, and compare the final tables
with an uninterrupted run (issue 13, acceptance "Kill and resume").

``python tests/kill_resume.py WORKDIR`` runs, in two fresh project roots under WORKDIR (so ``data/`` of the
checkout is never touched), side by side:

* ``reference``: the demo pipeline, uninterrupted;
* ``resumed``: the same pipeline, killed (SIGKILL to the runner's process group, as ``kill -9`` of run_all.sh)
  as soon as stage 04's embedding store has written its first shard, then run again to the end.

Both runs execute the checkout's notebooks with ``params/demo.yaml`` exactly as ``run_all.sh`` does
(``python -m chunkstudy.runner``). The tables ``chunks``, ``runs``, ``scores`` and ``contrasts`` must be identical
(``pandas.testing.assert_frame_equal(check_exact=True)``). Prints what it measured as JSON; exits 1 on a mismatch.
:func:`kill_and_resume` is what the slow test calls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"chunks": "04_chunk_embed", "runs": "05_retrieve", "scores": "06_metrics", "contrasts": "07_stats"}


def _runner(root: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}
    env.pop("CHUNKSTUDY_ROOT", None)
    cmd = [sys.executable, "-m", "chunkstudy.runner", str(ROOT / "params" / "demo.yaml"), "--root", str(root),
           "--notebooks", str(ROOT / "notebooks")]
    fh = open(log, "ab")
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _shards(root: Path) -> list[Path]:
    """Files the embedding store (``embed.store: embeddings``) has completed (hidden names are temporary)."""
    return sorted(p for p in (root / "data" / "demo" / "cache" / "embeddings").glob("**/*")
                  if p.is_file() and not p.name.startswith("."))


def _kernels_of(pid: int) -> list[int]:
    """Processes started on behalf of ``pid`` (a kernel carries JPY_PARENT_PID; it runs in its own session)."""
    out = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"JPY_PARENT_PID={pid}\0".encode() in env.read_bytes():
                out.append(int(env.parent.name))
        except OSError:
            continue
    return out


def _wait(proc: subprocess.Popen, what: str, timeout: float) -> None:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"{what}: did not finish in {timeout:.0f} s")
    if rc != 0:
        raise RuntimeError(f"{what}: runner exited with {rc}")


def _read(root: Path) -> dict:
    import pandas as pd

    return {t: pd.read_parquet(root / "data" / "demo" / stage / f"{t}.parquet") for t, stage in TABLES.items()}


def kill_and_resume(workdir: Path, timeout: float = 3600.0) -> dict:
    """Run both pipelines (module docstring); return the measurements; raise AssertionError when a table differs."""
    import pandas as pd

    ref_root, res_root = workdir / "reference", workdir / "resumed"
    for r in (ref_root, res_root):
        r.mkdir(parents=True, exist_ok=False)
    t0 = time.monotonic()
    reference = _runner(ref_root, workdir / "reference.log")
    victim = _runner(res_root, workdir / "resumed.log")
    stage04 = res_root / "data" / "demo" / "04_chunk_embed"
    while not _shards(res_root):
        if victim.poll() is not None:
            raise RuntimeError(f"the run to kill ended ({victim.returncode}) before 04 wrote a shard; see "
                               f"{workdir / 'resumed.log'}")
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("no embedding shard appeared")
        time.sleep(0.2)
    killed_at = time.monotonic() - t0
    kernels = _kernels_of(victim.pid)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    deadline = time.monotonic() + 60
    while (alive := [p for p in kernels if Path(f"/proc/{p}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.2)  # the orphaned kernel notices its parent is gone and exits (ipykernel's parent poller)
    state = {"seconds_to_kill": round(killed_at, 1),
             "shards_when_killed": len(_shards(res_root)),
             "manifests_when_killed": sorted(p.parent.name for p in (res_root / "data" / "demo").glob("*/manifest.json")),
             "04_manifest_when_killed": (stage04 / "manifest.json").exists(),
             "kernels_left_running": alive}
    t1 = time.monotonic()
    resume = _runner(res_root, workdir / "resumed.log")
    _wait(resume, "resumed run", timeout)
    state["resume_seconds"] = round(time.monotonic() - t1, 1)
    _wait(reference, "reference run", timeout)
    state["total_seconds"] = round(time.monotonic() - t0, 1)
    log = (workdir / "resumed.log").read_text(errors="replace")
    state["resumed_log_tail"] = log.strip().splitlines()[-9:]
    state["unencrypted_kernel_warnings"] = sum(
        (workdir / f).read_text(errors="replace").count("without encryption") for f in ("reference.log", "resumed.log"))
    ref, res = _read(ref_root), _read(res_root)
    state["rows"] = {t: len(df) for t, df in ref.items()}
    for t in TABLES:
        pd.testing.assert_frame_equal(res[t], ref[t], check_exact=True, obj=t)
    state["identical"] = list(TABLES)
    return state


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[0] + "\nusage: python tests/kill_resume.py WORKDIR", file=sys.stderr)
        return 2
    try:
        state = kill_and_resume(Path(argv[0]).resolve())
    except AssertionError as e:
        print(f"kill_resume: tables differ: {e}", file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
