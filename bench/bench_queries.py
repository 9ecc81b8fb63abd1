"""Benchmark: the query stage's CPU pieces on a synthetic corpus. Ratios measured in one run.

    .venv/bin/python bench/bench_queries.py [--chunks 3000] [--queries 300] [--docs 100]

Prints:

* ``bm25 corpus: bm25s / brute``: time to score every query against every chunk with one bm25s index, over the
  same scoring written out in Python (the test oracle), same tokens;
* ``bm25 document scope / corpus scope``: :func:`bm25.diagnostic` with per-document indexes included, over
  scoring one corpus index alone (what the document scope costs on top);
* ``leakage long / short``: :func:`leakage.check` against a structural-size span (2,000 words) over a sentence-run
  span (40 words): ROUGE-L's LCS is O(|query|·|span|) in pure Python.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from chunkstudy.queries import bm25, leakage  # noqa: E402

WORDS = [f"w{i}" for i in range(3000)]


def brute(corpus, q, k1=1.5, b=0.75):
    n, avgdl = len(corpus), sum(map(len, corpus)) / len(corpus)
    df = Counter(t for d in corpus for t in set(d))
    out = np.zeros(n)
    for j, d in enumerate(corpus):
        tf = Counter(d)
        out[j] = sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
                     for t in q if tf[t])
    return out


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--docs", type=int, default=100)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    zipf = 1 / np.arange(1, len(WORDS) + 1)
    zipf /= zipf.sum()
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(80, 250)), p=zipf)) for _ in range(a.chunks)]
    qs = [" ".join(rng.choice(WORDS, size=8, p=zipf)) for _ in range(a.queries)]
    toks, qtoks = bm25.tokenize(texts), bm25.tokenize(qs)

    t_build, index = timed(lambda: bm25.build_index(toks))
    t_score, _ = timed(lambda: [bm25.scores(index, q) for q in qtoks])
    t_lib = t_build + t_score
    n_brute = max(5, a.queries // 20)
    t_brute, _ = timed(lambda: [brute(toks, q) for q in qtoks[:n_brute]])
    t_brute *= a.queries / n_brute
    print(f"bm25 corpus: bm25s / brute = {t_lib / t_brute:.4f}  ({t_lib:.2f}s vs ~{t_brute:.1f}s for "
          f"{a.queries} queries x {a.chunks} chunks; brute extrapolated from {n_brute})")

    doc_of = [f"d{i % a.docs}" for i in range(a.chunks)]
    starts, docs_text, rows = {}, {}, []
    for i, (d, t) in enumerate(zip(doc_of, texts)):
        s = starts.get(d, 0)
        rows.append({"doc_id": d, "start": s, "end": s + len(t)})
        docs_text[d] = docs_text.get(d, "") + t + "\n\n"
        starts[d] = s + len(t) + 2
    chunks = pd.DataFrame(rows)
    documents = pd.DataFrame({"doc_id": list(docs_text), "text": list(docs_text.values())})
    queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(a.queries)],
                            "doc_id": [f"d{i % a.docs}" for i in range(a.queries)], "qtype": "factoid", "text": qs,
                            "spans": [[[0, 50]] for _ in range(a.queries)]})
    t_diag, _ = timed(lambda: bm25.diagnostic(documents, chunks, queries))
    t_one = t_lib
    print(f"bm25 diagnostic (both scopes) / corpus scoring alone = {t_diag / t_one:.2f}  ({t_diag:.2f}s vs {t_one:.2f}s)")

    sentence = "The crew of the spacecraft orbited the moon ten times before returning home safely. " * 3
    section = " ".join(rng.choice(WORDS[:500], size=2000))
    q = "Which lunar mission circled the satellite repeatedly and came back unharmed?"
    n = 200
    t_short, _ = timed(lambda: [leakage.check(q, [sentence]) for _ in range(n)])
    t_long, _ = timed(lambda: [leakage.check(q, [section]) for _ in range(n // 10)])
    t_long *= 10
    print(f"leakage long / short = {t_long / t_short:.1f}  ({t_short / n * 1e3:.2f} ms vs {t_long / n * 1e3:.2f} ms "
          "per check)")


if __name__ == "__main__":
    main()
