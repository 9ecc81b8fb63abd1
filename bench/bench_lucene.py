"""Lucene's BM25 (Anserini, as Pyserini ships it) beside the ``bm25`` mode's on one condition of a finished run
(docs/beyond.md, "Retrieval modes"): the same tokens on both sides, compared per query.

Pyserini is not a dependency of the project: it needs a JDK (Debian bookworm has 17; Pyserini >= 0.23 needs 21) and
its import pulls in torch, faiss and transformers. So this script drives a throwaway environment that holds
``pyserini==0.22.1`` installed with ``--no-deps`` (for its Anserini 0.22.1 fat jar and its indexer), pyjnius, numpy,
pandas, scipy and tqdm, and searches Lucene through pyjnius directly:

    python3 -m venv /tmp/lucene && /tmp/lucene/bin/pip install --no-deps pyserini==0.22.1 && \\
        /tmp/lucene/bin/pip install pyjnius numpy pandas scipy tqdm requests
    .venv/bin/python bench/bench_lucene.py --run params/tiny_beyond.yaml --condition A3 --lucene-python /tmp/lucene/bin/python

The condition's indexed texts (prefix + content) and the queries are tokenized by the mode's tokenizer
(``retrieve.bm25``) and written pre-tokenized; Anserini indexes them with ``--pretokenized`` (a whitespace analyzer:
no stemming, no stopwords of its own) and Lucene searches a bag of the query's tokens (a repeated token boosted by its
count, as bm25s counts it) under ``BM25Similarity(k1, b)``. Printed: the queries whose matched chunks are the same
set, those whose order is the same, and the relative difference of the scores. Lucene stores each document's length
in one byte (``SmallFloat``), which bm25s's ``lucene`` method, exact in its lengths (Kamphuis et al. 2020's "Lucene
(accurate)"), does not: the scores differ by that quantisation, and a near tie may swap. The last number shows that
this is the whole difference: Lucene's formula computed by hand with the one-byte lengths against Lucene's scores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from chunkstudy import artifacts, config
from chunkstudy.chunks import chunk_sets
from chunkstudy.retrieve import lexical

SEARCH = r"""
import json, glob, sys
from collections import Counter
import jnius_config, pyserini
jnius_config.set_classpath(glob.glob(pyserini.__path__[0] + "/resources/jars/anserini-*-fatjar.jar")[0])
from jnius import autoclass
A = autoclass
reader = A("org.apache.lucene.index.DirectoryReader").open(
    A("org.apache.lucene.store.FSDirectory").open(A("java.nio.file.Paths").get(sys.argv[1])))
searcher = A("org.apache.lucene.search.IndexSearcher")(reader.getContext())
searcher.setSimilarity(A("org.apache.lucene.search.similarities.BM25Similarity")(float(sys.argv[3]),
                                                                                  float(sys.argv[4])))
queries, out = json.load(open(sys.argv[2])), {}
for qid, toks in queries.items():
    b = A("org.apache.lucene.search.BooleanQuery$Builder")()
    for t, c in Counter(toks).items():
        b.add(A("org.apache.lucene.search.BoostQuery")(A("org.apache.lucene.search.TermQuery")(
            A("org.apache.lucene.index.Term")("contents", t)), float(c)),
              A("org.apache.lucene.search.BooleanClause$Occur").SHOULD)
    hits = searcher.search(b.build(), 100000).scoreDocs if toks else []
    out[qid] = [(searcher.doc(h.doc).get("id"), h.score) for h in hits]
print(json.dumps(out))
"""


def lucene_length(n: int) -> int:
    """A document length as Lucene 9 keeps it: ``SmallFloat.byte4ToInt(SmallFloat.intToByte4(n))`` (one byte: exact
    below 24, then 3 significant bits)."""
    if n < 24:
        return n
    i = n - 24
    shift = max(i.bit_length() - 4, 0)
    enc = i if i.bit_length() < 4 else ((i >> shift) & 0x07) | ((shift + 1) << 3)
    bits, sh = enc & 0x07, (enc >> 3) - 1
    return 24 + (bits if sh == -1 else (bits | 0x08) << sh)


def quantized_scores(tokens: list[list[str]], q_tokens: list[list[str]], k1: float, b: float) -> list[dict]:
    """Lucene's BM25 by hand, its lengths one byte (:func:`lucene_length`), avgdl exact, per query a dict chunk
    position -> score (the matched chunks)."""
    from collections import Counter

    n = len(tokens)
    avgdl = sum(map(len, tokens)) / n
    df = Counter(t for toks in tokens for t in set(toks))
    tf = [Counter(toks) for toks in tokens]
    out = []
    for q in q_tokens:
        got: dict[int, float] = {}
        for t, c in Counter(q).items():
            if t not in df:
                continue
            idf = np.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            for j in range(n):
                if tf[j][t]:
                    norm = k1 * (1 - b + b * lucene_length(len(tokens[j])) / avgdl)
                    got[j] = got.get(j, 0.0) + c * idf * tf[j][t] / (tf[j][t] + norm)
        out.append(got)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a finished run's parameter file")
    ap.add_argument("--condition", default="A3")
    ap.add_argument("--lucene-python", required=True, help="the throwaway environment's python (see above)")
    ap.add_argument("--java-home", default="/usr/lib/jvm/java-17-openjdk-amd64")
    a = ap.parse_args()
    cfg = config.load(a.run)
    p = cfg.params("retrieve").bm25
    chunks = artifacts.read(cfg, "chunks")
    cc = chunks[chunks["condition"] == a.condition].reset_index(drop=True)
    tokens = lexical.tokenize(list(chunk_sets.embedded_texts(cc, artifacts.read(cfg, "documents"))), p)
    queries = artifacts.read(cfg, "queries")
    q_tokens = lexical.tokenize(queries["text"].astype(str).tolist(), p)
    env = {**os.environ, "JAVA_HOME": a.java_home}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "coll").mkdir()
        with open(t / "coll" / "docs.jsonl", "w") as f:
            for cid, toks in zip(cc["chunk_id"], tokens):
                f.write(json.dumps({"id": cid, "contents": " ".join(toks)}) + "\n")
        (t / "q.json").write_text(json.dumps(dict(zip(queries["query_id"].astype(str), q_tokens))))
        subprocess.run([a.lucene_python, "-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input",
                        str(t / "coll"), "--index", str(t / "idx"), "--generator", "DefaultLuceneDocumentGenerator",
                        "--threads", "1", "--pretokenized"], env=env, check=True, capture_output=True)
        got = json.loads(subprocess.run([a.lucene_python, "-c", SEARCH, str(t / "idx"), str(t / "q.json"),
                                         str(p.k1), str(p.b)], env=env, check=True, capture_output=True,
                                        text=True).stdout)
    index = lexical.build_index(tokens, p)
    idx, scores, n = lexical.flat_search(index, q_tokens, cc["chunk_id"], len(cc))
    same_set = same_order = same_top10 = 0
    rel: list[float] = []
    for i, qid in enumerate(queries["query_id"].astype(str)):
        ours = [(cc["chunk_id"][j], s) for j, s in zip(idx[i, :n[i]], scores[i, :n[i]])]
        theirs = got[qid]
        lucene = dict((c, s) for c, s in theirs)
        same_set += set(lucene) == {c for c, _ in ours}
        same_order += [c for c, _ in ours] == [c for c, _ in theirs]
        same_top10 += [c for c, _ in ours][:10] == [c for c, _ in theirs][:10]
        rel += [abs(s - lucene[c]) / s for c, s in ours if c in lucene and s > 0]
    by_hand = quantized_scores(tokens, q_tokens, p.k1, p.b)
    hand = [abs(by_hand[i][j] - s) / s for i, qid in enumerate(queries["query_id"].astype(str))
            for c, s in got[qid] for j in [int(np.flatnonzero(cc["chunk_id"].to_numpy() == c)[0])]]
    nq = len(queries)
    print(f"{a.run}, {a.condition}: {len(cc):,} chunks, {nq:,} queries; bm25s {p.method} k1 {p.k1} b {p.b} vs Lucene "
          f"BM25Similarity: same matched chunks for {same_set}/{nq} queries, the same order for {same_order}/{nq}, "
          f"the same top 10 for {same_top10}/{nq}; score relative difference median {np.median(rel):.2%}, "
          f"95th percentile {np.percentile(rel, 95):.2%}, max {max(rel):.2%}; Lucene's BM25 by hand with its "
          f"one-byte document lengths (SmallFloat) against Lucene: largest relative difference {max(hand):.1e}")


if __name__ == "__main__":
    main()
