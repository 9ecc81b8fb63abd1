"""The model-call layer's throughput against a local OpenAI-compatible server (tests/fake_openai_server.py, each
call sleeping a fixed latency the way a real server spends time generating): concurrent vs sequential calls, and
a cached replay vs the first run, printed as ratios measured in one run.

    .venv/bin/python bench/bench_llm_client.py                    # 64 calls of 0.1 s, concurrency 8
    .venv/bin/python bench/bench_llm_client.py --calls 128 --latency 0.05 --concurrency 16
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chunkstudy import config, llm

ROOT = Path(__file__).resolve().parents[1]


def timed(client: llm.Client, reqs: list[llm.Request]) -> float:
    t0 = time.perf_counter()
    out = client.generate(reqs)
    bad = [r.error for r in out if r.error]
    if bad:
        raise SystemExit(f"calls failed: {bad[:3]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=64)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai_server.py"), "--lifetime", "600"],
                           stdout=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{int(srv.stdout.readline().split()[1])}/v1"
        params = {"backend": "openai", "base_url": base, "model": "bench", "max_retries": 0, "timeout_s": 30.0}
        with tempfile.TemporaryDirectory() as tmp:
            def reqs(tag):
                return [llm.Request([{"role": "user", "content": f"slow:{a.latency}"}], seed=i, tag=tag)
                        for i in range(a.calls)]

            seq = timed(llm.make_client(config.record("llm", {**params, "concurrency": 1}), Path(tmp) / "seq"),
                        reqs("seq"))
            conc_client = llm.make_client(config.record("llm", {**params, "concurrency": a.concurrency}),
                                          Path(tmp) / "conc")
            conc = timed(conc_client, reqs("conc"))
            replay = timed(llm.make_client(config.record("llm", {**params, "concurrency": a.concurrency}),
                                           Path(tmp) / "conc"),
                           reqs("conc"))
        print(f"{a.calls} calls of {a.latency:g} s latency")
        print(f"sequential {seq:.2f} s | concurrency {a.concurrency} {conc:.2f} s | cached replay {replay:.4f} s")
        print(f"speed-up, concurrent vs sequential: {seq / conc:.1f}x (ideal {a.concurrency}x)")
        print(f"speed-up, cached replay vs first concurrent run: {conc / replay:.0f}x")
    finally:
        srv.kill()
        srv.wait(timeout=10)


if __name__ == "__main__":
    main()
