"""Peak memory per stage of a real run: runs ``python -m chunkstudy.runner CORPUS ...`` and reports, for each stage
it runs, the kernel's peak resident set (``VmHWM``, the kernel's own high-water mark, read from /proc) and the
runner's.

    .venv/bin/python bench/stage_memory.py qasper_local [runner options] [--out FILE.json]

papermill starts one kernel per stage, so each kernel process belongs to the stage the runner announced last
("NN_name running ..."). Linux only (/proc). VmHWM is read every ``--every`` seconds while a process lives; a
process's last reading is at most that long before it exits, which misses nothing a stage keeps (its outputs are
written before the kernel ends) but can miss a spike in its last fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE_LINE = re.compile(r"^(\d\d_\w+)\s+(running|ran|skipped)")


def children(pid: int) -> set[int]:
    """Every live descendant of ``pid``."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            if k not in found:
                found.add(k)
                todo.append(k)
    return found


def hwm_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--out", type=Path, help="write the per-stage table as JSON here too")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between readings of /proc")
    a, rest = ap.parse_known_args(argv)

    proc = subprocess.Popen([sys.executable, "-m", "chunkstudy.runner", a.corpus, *rest], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    stage = {"now": None}
    first_stage: dict[int, str | None] = {}  # pid -> stage running when it was first seen
    peak: dict[int, float] = {}
    seconds: dict[str, float] = {}
    runner_peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for pid in children(proc.pid):
                first_stage.setdefault(pid, stage["now"])
                m = hwm_mib(pid)
                if m is not None:
                    peak[pid] = max(peak.get(pid, 0.0), m)
            m = hwm_mib(proc.pid)
            if m is not None:
                runner_peak[0] = max(runner_peak[0], m)
            done.wait(a.every)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        m = STAGE_LINE.match(line)
        if m and m.group(2) == "running":
            stage["now"] = m.group(1)
        elif m and m.group(2) == "ran":
            seconds[m.group(1)] = float(line.split()[2])
    rc = proc.wait()
    done.set()
    t.join()

    per_stage: dict[str, float] = {}
    for pid, name in first_stage.items():
        if name is not None and pid in peak:
            per_stage[name] = max(per_stage.get(name, 0.0), peak[pid])
    rows = [{"stage": s, "seconds": seconds.get(s), "peak_rss_mib": round(per_stage.get(s, 0.0), 1)}
            for s in sorted(set(per_stage) | set(seconds))]
    print("\nstage            seconds   peak RSS (MiB, the stage's kernel)")
    for r in rows:
        print(f"{r['stage']:<16} {r['seconds'] if r['seconds'] is not None else '-':>7}   {r['peak_rss_mib']:>8.1f}")
    print(f"runner process peak RSS: {runner_peak[0]:.1f} MiB")
    if a.out:
        a.out.write_text(json.dumps({"corpus": a.corpus, "rc": rc, "stages": rows,
                                     "runner_peak_rss_mib": round(runner_peak[0], 1)}, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
