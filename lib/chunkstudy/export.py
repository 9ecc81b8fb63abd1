"""Take the benchmark anywhere: a finished run in the formats the IR ecosystem reads (BEIR, TREC), and an outside
TREC run scored by this study's span-level metrics (docs/export.md).

``python -m chunkstudy.export params/demo.yaml [--out DIR]`` writes, under ``data/<corpus>/export/`` (or ``DIR``),
one folder per condition (a BEIR dataset, plus TREC files):

==========================  ==================================================================================
``<cond>/corpus.jsonl``     one line per chunk: ``{"_id": chunk_id, "title": document title, "text": the text
                            as embedded (prefix + content)}``
``<cond>/queries.jsonl``    one line per query: ``{"_id": query_id, "text": question, "metadata": {doc_id, qtype}}``
``<cond>/qrels/test.tsv``   BEIR qrels (``query-id  corpus-id  score``, header line): binary relevance by the
                            paper's rule (:func:`chunkstudy.relevance.relevant`: ``|c ∩ g| >= span_frac·|g|`` or
                            ``>= chunk_frac·|c|``), every relevant chunk of the query's document in this condition
``<cond>/qrels.txt``        the same in TREC format (``qid 0 docid rel``)
``<cond>/qrels_graded.txt`` graded: ``rel = round(GRADE_SCALE · gain)``, ``gain`` the chunk's own coverage weight
                            ``(1/S) Σ_j |c ∩ g_j| / |g_j|`` (the gain cov-nDCG gives it when nothing before it
                            covered the same gold characters); every chunk with ``gain > 0``
``<cond>/runs/<e>__<r>.trec``  per cell (embedder × reranker), TREC run lines ``qid Q0 docid rank score tag``
==========================  ==================================================================================

Definitions, so that an outside tool agrees with the study (``tests/test_export.py`` runs ``ir_measures``):

* **nDCG@10** (binary) and **MRR**: ``ir_measures``' ``nDCG@10`` and ``RR`` on ``qrels.txt`` and a run file equal
  the study's ``nDCG@10`` and ``MRR`` per query. Two conventions differ and are handled here: trec_eval orders a
  run by its score column (ties by document id), so the **score column encodes the study's rank** (``k + 1 −
  rank``; a reranked list's scores are not monotone in rank, and tied scores would be reordered) and the model's
  score is kept in ``05_retrieve/runs``; and trec_eval leaves out a query with no relevant chunk, which the study
  scores 0 (its mean over all queries therefore equals ir_measures' mean times ``judged / all``).
* **recall@50** differs by definition: the study's is span-level (the share of gold spans at least ``span_frac``
  covered by the union of the top 50 chunks; paper §5.1), ``ir_measures``' ``R@50`` is chunk-level (the share of
  relevant chunks in the top 50). They agree when every gold span has exactly one relevant chunk that covers it on
  its own; in general neither bounds the other. Both are reported; only the study's is a paper metric.
* **Graded qrels**: with linear gains, ``nDCG@10`` on ``qrels_graded.txt`` equals cov-nDCG@10 up to the rounding
  of grades (``1/GRADE_SCALE``) for a chunk set that does not overlap itself (every paper condition): there each
  chunk's marginal coverage is its own gain whatever came before. For overlapping chunk sets (a user condition
  with ``overlap: true``) cov-nDCG discounts re-covered characters and the two differ.

:func:`score_trec_run` goes the other way: a TREC run made elsewhere (BM25 from Pyserini, a ColBERT run) over a
condition's exported ``corpus.jsonl`` is scored with the study's span-level metrics against that chunk set.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from . import artifacts, config, metrics, relevance
from .chunks import chunk_sets
from .params import MetricsParams
from .errors import ChunkstudyError

#: Graded relevance is an integer: ``round(GRADE_SCALE · gain)`` (a gain resolution of 1e-6).
GRADE_SCALE = 1_000_000
#: The reranker name an imported run's scores carry (:func:`score_trec_run`).
IMPORTED = "imported"


class ExportError(ChunkstudyError, ValueError):
    """An export or an imported run is inconsistent (the message names the file, the line or the key)."""


# ------------------------------------------------------------------------------------------------- qrels

def qrels(chunks: pd.DataFrame, queries: pd.DataFrame, condition: str, metrics_params: MetricsParams) -> pd.DataFrame:
    """Per query, every chunk of ``condition`` in the query's document that touches a gold span: ``query_id,
    chunk_id, relevant`` (bool, the paper's rule: relevant to at least one gold span) and ``gain`` (the chunk's own
    coverage weight ``(1/S) Σ_j |c ∩ g_j| / |g_j|``). Sorted by query, then chunk id."""
    p = metrics_params
    c = chunks.loc[chunks["condition"] == condition, ["doc_id", "chunk_id", "start", "end"]]
    rows = [(qid, d, int(s), int(e), len(spans)) for qid, d, spans in
            zip(queries["query_id"].astype(str), queries["doc_id"].astype(str), queries["spans"])
            for s, e in (list(spans) if spans is not None else [])]
    g = pd.DataFrame(rows, columns=["query_id", "doc_id", "gs", "ge", "n_spans"])
    m = g.merge(c.astype({"doc_id": str}), on="doc_id")
    ov = relevance.overlap(m["start"], m["end"], m["gs"], m["ge"])
    m = m.assign(rel=relevance.relevant(m["start"], m["end"], m["gs"], m["ge"], p.span_frac, p.chunk_frac),
                 part=ov / (m["ge"] - m["gs"]).clip(lower=1) / m["n_spans"])
    m = m[ov > 0]
    out = m.groupby(["query_id", "chunk_id"], sort=True).agg(relevant=("rel", "any"), gain=("part", "sum"))
    return out.reset_index()


# ------------------------------------------------------------------------------------------------ writing

def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def trec_run_text(runs: pd.DataFrame, tag: str, k: int) -> str:
    """TREC run lines ``qid Q0 docid rank score tag`` of one cell and condition of ``05_retrieve/runs``; the score
    column is ``k + 1 − rank`` (the module docstring says why)."""
    r = runs.sort_values(["query_id", "rank"], kind="stable")
    return "".join(f"{q} Q0 {c} {int(n)} {k + 1 - int(n)} {tag}\n"
                   for q, c, n in zip(r["query_id"], r["chunk_id"], r["rank"]))


def export_run(cfg: config.Config, out: Path | None = None) -> pd.DataFrame:
    """Write a finished run's benchmark (the module docstring's files) under ``out`` (default
    ``data/<corpus>/export/``); returns one row per file written: ``condition, kind, path, rows``."""
    out = Path(out) if out is not None else artifacts.corpus_dir(cfg) / "export"
    chunks, queries = artifacts.read(cfg, "chunks"), artifacts.read(cfg, "queries")
    documents, runs = artifacts.read(cfg, "documents"), artifacts.read(cfg, "runs")
    titles = dict(zip(documents["doc_id"], documents["title"]))
    texts = chunk_sets.embedded_texts(chunks, documents)
    k = cfg.params("retrieve").k
    q_lines = _jsonl([{"_id": str(q), "text": t, "metadata": {"doc_id": str(d), "qtype": str(qt)}}
                      for q, t, d, qt in zip(queries["query_id"], queries["text"], queries["doc_id"],
                                             queries["qtype"])])
    written = []

    def put(cond: str, kind: str, rel: str, text: str, n: int) -> None:
        path = out / cond / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with artifacts.atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written.append({"condition": cond, "kind": kind, "path": str(path), "rows": n})

    for cond, cc in chunks.groupby("condition", sort=False):
        put(cond, "corpus", "corpus.jsonl", _jsonl([{"_id": i, "title": titles[d], "text": texts[j]} for j, i, d in
                                                    zip(cc.index, cc["chunk_id"], cc["doc_id"])]), len(cc))
        put(cond, "queries", "queries.jsonl", q_lines, len(queries))
        qr = qrels(chunks, queries, cond, cfg.params("metrics"))
        rel = qr[qr["relevant"]]
        put(cond, "qrels", "qrels/test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
            f"{q}\t{c}\t1\n" for q, c in zip(rel["query_id"], rel["chunk_id"])), len(rel))
        put(cond, "qrels", "qrels.txt", "".join(f"{q} 0 {c} 1\n" for q, c in zip(rel["query_id"], rel["chunk_id"])),
            len(rel))
        graded = qr.assign(grade=np.rint(qr["gain"] * GRADE_SCALE).astype(np.int64))
        graded = graded[graded["grade"] > 0]
        put(cond, "qrels_graded", "qrels_graded.txt", "".join(
            f"{q} 0 {c} {g}\n" for q, c, g in zip(graded["query_id"], graded["chunk_id"], graded["grade"])),
            len(graded))
        for (emb, rr), r in runs[runs["condition"] == cond].groupby(["embedder", "reranker"], sort=True):
            put(cond, "run", f"runs/{emb}__{rr}.trec", trec_run_text(r, f"{cond}.{emb}.{rr}", k), len(r))
    return pd.DataFrame(written, columns=["condition", "kind", "path", "rows"])


# ------------------------------------------------------------------------------------------------ import

def read_trec_run(source: str | Path | io.TextIOBase) -> pd.DataFrame:
    """A TREC run file (``qid Q0 docid rank score tag``, whitespace-separated) as ``query_id, chunk_id, rank,
    score, tag``; a malformed line raises :class:`ExportError` naming the file and the line."""
    name = getattr(source, "name", str(source))
    text = source.read() if hasattr(source, "read") else Path(source).read_text(encoding="utf-8")
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if not f:
            continue
        if len(f) != 6:
            raise ExportError(f"{name}: line {i}: expected 'qid Q0 docid rank score tag' (6 fields), got {line!r}")
        try:
            rows.append((f[0], f[2], int(f[3]), float(f[4]), f[5]))
        except ValueError:
            raise ExportError(f"{name}: line {i}: rank must be an integer and score a number: {line!r}") from None
    return pd.DataFrame(rows, columns=["query_id", "chunk_id", "rank", "score", "tag"])


def score_trec_run(run: str | Path | pd.DataFrame, chunks: pd.DataFrame, queries: pd.DataFrame, condition: str,
                   metrics_params: Any, corpus: str, k: int) -> pd.DataFrame:
    """Score an outside TREC run by the study's span-level metrics against ``condition``'s chunk set.

    ``run``: a TREC run file (or :func:`read_trec_run`'s table) whose document ids are ``chunk_id``\\ s of
    ``condition`` (the ``_id``\\ s of its exported ``corpus.jsonl``). Each query's list is ordered as trec_eval
    orders it (score descending, ties by document id descending) and cut to ``k`` (``retrieve.k``: the study's
    lists have that length); queries the run lacks score 0, as an empty list does in the study. Returns the
    ``scores`` table (:func:`chunkstudy.metrics.score_runs`) with ``embedder`` = the run's tag and ``reranker`` =
    :data:`IMPORTED`. A document id that is not a chunk of ``condition``, or a query id not in ``queries``, raises
    :class:`ExportError` naming it."""
    r = run.copy() if isinstance(run, pd.DataFrame) else read_trec_run(run)
    cc = chunks[chunks["condition"] == condition]
    if cc.empty:
        raise ExportError(f"score_trec_run: condition {condition!r} has no chunks; conditions: "
                          f"{sorted(chunks['condition'].unique())}")
    unknown = sorted(set(r["chunk_id"]) - set(cc["chunk_id"]))
    if unknown:
        raise ExportError(f"score_trec_run: {len(unknown)} document id(s) of the run are not chunks of {condition}, "
                          f"e.g. {unknown[0]!r} (ids are the _id of {condition}/corpus.jsonl)")
    bad_q = sorted(set(r["query_id"].astype(str)) - set(queries["query_id"].astype(str)))
    if bad_q:
        raise ExportError(f"score_trec_run: {len(bad_q)} query id(s) of the run are not queries of this run, e.g. "
                          f"{bad_q[0]!r}")
    tags = sorted(set(r["tag"]))
    r = r.sort_values(["query_id", "score", "chunk_id"], ascending=[True, False, False], kind="stable")
    r = r.drop_duplicates(["query_id", "chunk_id"])  # trec_eval counts a document once per query
    r["rank"] = r.groupby("query_id").cumcount() + 1
    r = r[r["rank"] <= k]
    runs = pd.DataFrame({"embedder": "+".join(tags) or "run", "reranker": IMPORTED, "condition": condition,
                         "query_id": r["query_id"].astype(str), "rank": r["rank"].astype(int),
                         "chunk_id": r["chunk_id"], "score": r["score"]})
    return metrics.score_runs(runs, cc, queries, metrics_params, corpus)


# ------------------------------------------------------------------------------------------- outside check

def check_with_ir_measures(cfg: config.Config, written: pd.DataFrame) -> pd.DataFrame:
    """Score every exported run file (``written``: :func:`export_run`'s result) with ``ir_measures`` (the ``dev``
    extra) and compare with the run's own ``06_metrics/scores``, per query. One row per cell (condition, embedder,
    reranker): the largest absolute difference of ``nDCG@10`` (binary qrels) vs the study's nDCG@10, ``RR`` vs MRR,
    ``nDCG@10`` on the graded qrels vs cov-nDCG@10, and ``R@50`` vs recall@50 (different definitions: the module
    docstring), a query absent from ir_measures' output (no relevant chunk) counting as 0; and ``n_queries``."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    scores = artifacts.read(cfg, "scores").pivot_table(
        index=["condition", "embedder", "reranker", "query_id"], columns="metric", values="value")
    qids = artifacts.read(cfg, "queries")["query_id"].astype(str).tolist()
    k, cutoff = cfg.params("metrics").recall_k, cfg.params("metrics").cutoff
    pairs = (("nDCG", f"nDCG@{cutoff}", nDCG @ cutoff, "qrels.txt"), ("RR", "MRR", RR, "qrels.txt"),
             ("graded_nDCG", f"cov-nDCG@{cutoff}", nDCG @ cutoff, "qrels_graded.txt"),
             ("R", f"recall@{k}", R @ k, "qrels.txt"))
    rows = []
    for f in written[written["kind"] == "run"].itertuples():
        path = Path(f.path)
        emb, rr = path.stem.split("__")
        run = list(ir_measures.read_trec_run(str(path)))
        ours = scores.loc[(f.condition, emb, rr)]
        row: dict[str, Any] = {"condition": f.condition, "embedder": emb, "reranker": rr, "n_queries": len(qids)}
        for name, metric, measure, qrels_file in pairs:
            qrels_ = list(ir_measures.read_trec_qrels(str(path.parents[1] / qrels_file)))
            theirs = {m.query_id: m.value for m in ir_measures.iter_calc([measure], qrels_, run)}
            row[f"max_diff_{name}"] = max(abs(theirs.get(q, 0.0) - float(ours.loc[q, metric])) for q in qids)
        rows.append(row)
    return pd.DataFrame(rows)


# -------------------------------------------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("params", help="parameter file of a finished run (e.g. params/demo.yaml)")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default data/<corpus>/export/)")
    ap.add_argument("--check", action="store_true", help="score the exported runs with ir_measures (dev extra) "
                    "and print the largest per-query difference from the study's metrics, per cell")
    a = ap.parse_args(argv)
    cfg = config.load(a.params)
    try:
        written = export_run(cfg, a.out)
    except FileNotFoundError as e:
        print(f"export: {e}; run ./run_all.sh {cfg.corpus} through 05_retrieve first", file=sys.stderr)
        return 2
    summary: Mapping[str, Any] = written.groupby("kind")["rows"].agg(["count", "sum"]).to_dict("index")
    print(f"export: {len(written)} files for {written['condition'].nunique()} conditions under "
          f"{Path(written['path'].iat[0]).parents[1] if len(written) else a.out}: "
          + ", ".join(f"{k} {v['count']} files / {v['sum']} rows" for k, v in summary.items()))
    if a.check:
        check = check_with_ir_measures(cfg, written)
        print(check.to_string(index=False))
        worst = check[["max_diff_nDCG", "max_diff_RR"]].to_numpy().max()
        print(f"ir_measures vs the study: largest |difference| of nDCG@10 and MRR over {len(check)} cells = "
              f"{worst:.3g} (recall@50 differs by definition; see the module docstring)")
        return 0 if worst <= 1e-9 else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
