"""What each condition costs, as pure functions over the pipeline's tables (docs/beyond.md, "Cost"), and the Pareto
front of quality against a cost. Pure; never rounds.

A condition's cost is the work of building and searching its index *alone*: work two conditions share (the induced
outline of A2 and A3, the document passes of two late-pooled chunk sets) is charged to each, so the columns do not
add up across conditions. Units are in the column names' docstrings below:

* LLM work (:func:`llm_calls_from_records`, :func:`llm_cost`): calls, prompt and reply tokens of the calls a
  condition needs (induction for every condition cut from the induced outline, A1's contexts for A1), counted by
  the server's ``usage`` when the call record holds one, else estimated from characters
  (:data:`CHARS_PER_TOKEN`); ``llm_tokens_counted`` says which.
* Embedding work (:func:`embedding_cost`): chunks, distinct embedded texts, content and prefix tokens (the
  chunking tokenizer's, ``chunks.n_content_tokens``/``n_prefix_tokens``) of the condition's distinct texts, and
  the prefix share.
* Per embedder (:func:`index_cost`): tokens the encoder reads (each distinct text's tokens plus its special tokens,
  cut at ``max_seq_length``; for a late-pooled condition the macro windows' tokens, :func:`late_window_tokens`),
  and the index: vectors (one per chunk, plus one centroid per section for a two-stage condition) × dimensions ×
  bytes per value.
* Time (:func:`timing_cost`): embedding seconds at the rate this run measured for the embedder, and retrieval
  latency per query, when the stages recorded them; GPU-plan estimates (:func:`estimated_seconds`) divide the
  work by published or measured rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import design


#: Characters per token where a call's record holds no token count: the estimate ``chunkstudy.plan`` and the A1
#: windows use (a central estimate; the LLM client's own budget check uses a conservative 2.5).
CHARS_PER_TOKEN = 4.0
#: What a call record's tag says it was for: the tag's first field -> the use.
USES = {"induce": "induce", "a1": "a1", "queries": "queries"}
LLM_COLUMNS = ["condition", "llm_calls", "llm_prompt_tokens", "llm_reply_tokens", "llm_seconds", "llm_tokens_counted"]


def llm_calls_from_records(records: Iterable[Mapping[str, Any]],
                           prompt_chars: Mapping[str, int] | None = None) -> pd.DataFrame:
    """One row per LLM call record (``calls.jsonl``'s records, :class:`chunkstudy.llm.CallCache`): ``key, use,
    doc_id, calls, prompt_tokens, reply_tokens, tokens_counted, seconds``.

    * ``use``: from the tag (``induce:<doc>:<lo>:r<round>``, ``a1:<doc>:<start>:<end>``, ``queries:...``; another
      tag gives ``other``), ``doc_id`` its document ("" for queries).
    * ``calls = 1 + cuts``: a reply cut at its budget was asked again with twice the budget (the record's ``cuts``).
    * With the server's counts (the record's ``usage``, summed by the client over every reply of the call, its cut
      replies included): ``prompt_tokens`` and ``reply_tokens`` are its ``prompt_tokens`` and
      ``completion_tokens``; ``tokens_counted`` = ``usage``.
    * Else (a record written before the client kept ``usage``, or a backend that reports none) an estimate,
      ``tokens_counted`` = ``estimate``: ``prompt_tokens`` = the record's ``prompt_chars`` (or ``prompt_chars[key]``
      given here) / :data:`CHARS_PER_TOKEN` per attempt (each sends the prompt again), NaN when neither says
      (a record the client has not read since: 02 adds ``prompt_chars`` to it when it reads it from the cache);
      ``reply_tokens`` = the reply's characters / :data:`CHARS_PER_TOKEN` plus each cut reply at its budget: the
      ``i``-th of ``cuts`` at ``max_tokens · 2^i``, capped at the budget of the reply returned
      (``max_tokens_used``: the context caps the doubling).
    * ``seconds``: wall seconds of every attempt (``attempt_seconds``, cut and failed attempts included); a record
      without it counts its producing attempt alone (``seconds``)."""
    rows = []
    given = prompt_chars or {}
    for rec in records:
        tag = str(rec.get("tag") or "")
        head = tag.split(":", 1)[0]
        use = USES.get(head, "other")
        doc_id = tag.split(":", 1)[1].rsplit(":", 2)[0] if use in ("induce", "a1") and tag.count(":") >= 3 else ""
        cuts = int(rec.get("cuts") or 0)
        usage = rec.get("usage") or {}
        if usage.get("prompt_tokens") is not None and usage.get("completion_tokens") is not None:
            prompt, reply, counted = float(usage["prompt_tokens"]), float(usage["completion_tokens"]), "usage"
        else:
            chars = rec.get("prompt_chars", given.get(str(rec.get("key")), None))
            prompt = float(chars) / CHARS_PER_TOKEN * (1 + cuts) if chars is not None else math.nan
            reply = len(str(rec.get("text") or "")) / CHARS_PER_TOKEN + cut_budgets(rec)
            counted = "estimate"
        seconds = rec.get("attempt_seconds")
        rows.append({"key": str(rec.get("key", "")), "use": use, "doc_id": doc_id, "calls": 1 + cuts,
                     "prompt_tokens": prompt, "reply_tokens": reply, "tokens_counted": counted,
                     "seconds": float(rec.get("seconds") or 0.0) if seconds is None else float(seconds)})
    cols = ["key", "use", "doc_id", "calls", "prompt_tokens", "reply_tokens", "tokens_counted", "seconds"]
    return pd.DataFrame(rows, columns=cols)


def cut_budgets(rec: Mapping[str, Any]) -> float:
    """Tokens of a record's cut replies, each counted at its budget: the ``i``-th of ``cuts`` replies was asked
    with ``max_tokens · 2^i`` (the record's requested ``params.max_tokens``), at most the budget of the reply
    returned (``max_tokens_used``, where the context capped the doubling). 0 without cuts or a budget."""
    cuts = int(rec.get("cuts") or 0)
    budget = (rec.get("params") or {}).get("max_tokens")
    if not cuts or budget is None:
        return 0.0
    cap = rec.get("max_tokens_used")
    return float(sum(min(int(budget) * 2 ** i, int(cap) if cap is not None else math.inf) for i in range(cuts)))


def llm_cost(calls: pd.DataFrame, uses: Mapping[str, Collection[str]]) -> pd.DataFrame:
    """Per condition of ``uses`` (condition -> the uses it needs, e.g. ``{"A1": ["induce", "a1"], "G3": []}``), the
    LLM work: ``llm_calls`` (generating calls), ``llm_prompt_tokens`` and ``llm_reply_tokens`` (tokens; NaN when a
    needed call's prompt size is unknown), ``llm_seconds`` (wall seconds of the producing calls, as recorded) and
    ``llm_tokens_counted`` (``usage``, ``estimate``, ``mixed``, or "" without calls). ``calls``:
    :func:`llm_calls_from_records`'s table.

        llm_x(condition) = Σ_{calls c with c.use ∈ uses[condition]} c.x"""
    rows = []
    for cond, need in uses.items():
        sel = calls[calls["use"].isin(list(need))]
        counted = sorted(set(sel["tokens_counted"]))
        prompt = math.nan if sel["prompt_tokens"].isna().any() else float(sel["prompt_tokens"].sum())
        rows.append({"condition": cond, "llm_calls": int(sel["calls"].sum()), "llm_prompt_tokens": prompt,
                     "llm_reply_tokens": float(sel["reply_tokens"].sum()),
                     "llm_seconds": float(sel["seconds"].sum()),
                     "llm_tokens_counted": counted[0] if len(counted) == 1 else ("mixed" if counted else "")})
    return pd.DataFrame(rows, columns=LLM_COLUMNS)


def _distinct_texts(chunks: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, text_row): the first chunk of each distinct embedded text of a condition."""
    return chunks.drop_duplicates(["condition", "text_row"])


def embedding_cost(chunks: pd.DataFrame) -> pd.DataFrame:
    """Per condition of the chunks table (``condition, text_row, n_content_tokens, n_prefix_tokens``): ``n_chunks``;
    ``n_texts`` (distinct embedded texts: a text two chunks share is embedded once); over those texts
    ``content_tokens``, ``prefix_tokens`` and ``tokens_embedded = content_tokens + prefix_tokens`` (tokens of the
    chunking tokenizer, no special tokens, not truncated); ``prefix_share = prefix_tokens / tokens_embedded``
    (0 without a prefix). In the paper's condition order as given (first appearance)."""
    order = list(dict.fromkeys(chunks["condition"]))
    n = chunks.groupby("condition", sort=False).size()
    d = _distinct_texts(chunks).groupby("condition", sort=False).agg(
        n_texts=("text_row", "size"), content_tokens=("n_content_tokens", "sum"),
        prefix_tokens=("n_prefix_tokens", "sum"))
    out = d.reindex(order)
    out.insert(0, "n_chunks", n.reindex(order).astype("int64"))
    out["tokens_embedded"] = out["content_tokens"] + out["prefix_tokens"]
    total = out["tokens_embedded"].astype(float)
    out["prefix_share"] = np.where(total > 0, out["prefix_tokens"] / total.where(total > 0, 1.0), 0.0)
    return out.reset_index(names="condition")


@dataclass(frozen=True)
class EncoderShape:
    """What an embedder's index and reads cost per vector: ``dim`` values of ``bytes_per_value`` bytes (4 for the
    float32 vectors the store keeps), ``max_seq_length`` tokens read at most per text, ``special_tokens`` added to
    each text (2 for [CLS] and [SEP])."""

    dim: int
    bytes_per_value: int
    max_seq_length: int
    special_tokens: int


def late_window_tokens(n_sequence_tokens: Sequence[int] | np.ndarray, window: int, overlap: int,
                       special_tokens: int) -> int:
    """Tokens an encoder reads to late-pool sequences of ``n_sequence_tokens`` content tokens each, in macro
    windows of ``window`` tokens (``special_tokens`` of them special) overlapping by ``overlap``
    (:func:`chunkstudy.chunks.late.macro_windows`):

        Σ_s [n_s ≤ c] (n_s + special) + [n_s > c] · W(n_s) · window,  c = window − special,
        W(n) = 1 + ⌈(n − c) / (c − overlap)⌉ windows."""
    c = int(window) - int(special_tokens)
    if c < 1 or not 0 <= overlap < c:
        raise ValueError(f"late_window_tokens: need 0 <= overlap < window - special tokens, got window {window}, "
                         f"overlap {overlap}, special tokens {special_tokens}")
    total = 0
    for n in np.asarray(n_sequence_tokens, dtype=np.int64).tolist():
        if n <= 0:
            continue
        total += n + special_tokens if n <= c else (1 + -(-(n - c) // (c - overlap))) * int(window)
    return int(total)


def index_cost(chunks: pd.DataFrame, encoders: Mapping[str, EncoderShape], two_stage: Collection[str],
               tokens_read: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (condition, embedder): ``tokens_read`` (tokens the encoder reads: over the condition's distinct texts
    ``min(content + prefix + special_tokens, max_seq_length)``; for the (condition, embedder) pairs of the optional
    ``tokens_read`` table, columns ``condition, embedder, tokens_read``, its value instead: a late-pooled
    condition's :func:`late_window_tokens`), ``n_vectors`` (= chunks: one index entry per chunk), ``n_route_vectors``
    (distinct ``route_key`` for a condition in ``two_stage``: its section centroids; else 0), ``dim`` and
    ``index_bytes = (n_vectors + n_route_vectors) · dim · bytes_per_value``."""
    order = list(dict.fromkeys(chunks["condition"]))
    texts = _distinct_texts(chunks)
    per_text = (texts["n_content_tokens"] + texts["n_prefix_tokens"]).to_numpy()
    override = {} if tokens_read is None else {(r.condition, r.embedder): float(r.tokens_read)
                                               for r in tokens_read.itertuples()}
    n_chunks = chunks.groupby("condition", sort=False).size()
    routes = chunks.groupby("condition", sort=False)["route_key"].nunique()
    rows = []
    for cond in order:
        mine = (texts["condition"] == cond).to_numpy()
        for emb, shape in encoders.items():
            read = override.get((cond, emb))
            if read is None:
                read = float(np.minimum(per_text[mine] + shape.special_tokens, shape.max_seq_length).sum())
            nv, nr = int(n_chunks[cond]), int(routes[cond]) if cond in two_stage else 0
            rows.append({"condition": cond, "embedder": emb, "tokens_read": read, "n_vectors": nv,
                         "n_route_vectors": nr, "dim": int(shape.dim),
                         "index_bytes": (nv + nr) * int(shape.dim) * int(shape.bytes_per_value)})
    return pd.DataFrame(rows, columns=["condition", "embedder", "tokens_read", "n_vectors", "n_route_vectors", "dim",
                                       "index_bytes"])


def timing_cost(per_embedder: pd.DataFrame, embed_rates: pd.DataFrame | None,
                retrieval: pd.DataFrame | None) -> pd.DataFrame:
    """``per_embedder`` (:func:`index_cost`; an ``embedding`` column, ``independent`` or ``late``, where it has one)
    with measured time, where a stage recorded it:

    * ``embed_seconds`` (s) = ``tokens_read / rate``, the rate (tokens per second) this run measured for the
      embedder in the row's embedding mode: ``embed_rates`` (columns ``embedder, tokens, seconds`` and optionally
      ``embedding``, default ``independent``) summed per (embedder, mode): what 04 embedded and how long it took,
      every condition of the mode together. A condition is so charged the work it needs alone, whatever another
      condition left in the cache (a late condition whose windows an earlier one had already encoded is charged
      them at the same rate). NaN where the run measured no rate (a rerun that encoded nothing);
    * ``latency_ms_per_query`` (ms) = ``1000 · seconds / n_queries`` of ``retrieval`` (columns ``embedder,
      condition, n_queries, seconds``: 05's search wall time per cell, the median of its timed repeats, summed
      over rerankers if several rows), and ``latency_ms_min`` / ``latency_ms_max``, the fastest and slowest
      repeat per query (``seconds_min`` / ``seconds_max``; the one measurement where 05 recorded no repeats).
    """
    out = per_embedder.copy()
    out["embed_seconds"] = math.nan
    if embed_rates is not None and len(embed_rates):
        r = embed_rates.assign(embedding=embed_rates["embedding"].fillna("independent")) \
            if "embedding" in embed_rates else embed_rates.assign(embedding="independent")
        g = r.groupby(["embedder", "embedding"])[["tokens", "seconds"]].sum()
        rate = (g["tokens"] / g["seconds"]).where(g["seconds"] > 0)
        modes = out["embedding"] if "embedding" in out else pd.Series("independent", index=out.index)
        out["embed_seconds"] = [t / rate.get((e, m), math.nan) for t, e, m in
                                zip(out["tokens_read"], out["embedder"], modes)]
    return latency(out, retrieval)


def latency(table: pd.DataFrame, retrieval: pd.DataFrame | None) -> pd.DataFrame:
    """``table`` (rows of ``condition, embedder``) with :func:`timing_cost`'s latency columns from ``retrieval``."""
    out = table.copy()
    for col in ("latency_ms_per_query", "latency_ms_min", "latency_ms_max"):
        out[col] = math.nan
    if retrieval is not None and len(retrieval):
        t = retrieval.assign(**{c: retrieval[c] if c in retrieval else retrieval["seconds"]
                                for c in ("seconds_min", "seconds_max")})
        g = t.groupby(["condition", "embedder"])[["seconds", "seconds_min", "seconds_max", "n_queries"]].agg(
            {"seconds": "sum", "seconds_min": "sum", "seconds_max": "sum", "n_queries": "max"})
        for col, src in (("latency_ms_per_query", "seconds"), ("latency_ms_min", "seconds_min"),
                         ("latency_ms_max", "seconds_max")):
            lat = 1000.0 * g[src] / g["n_queries"]
            out[col] = [lat.get((c, e), math.nan) for c, e in zip(out["condition"], out["embedder"])]
    return out


def lexical_cost(dense: pd.DataFrame, lexical: Mapping[str, Any] | None, retrievers: Mapping[str, Any],
                 retrieval: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rows of :func:`timing_cost`'s columns for the retrievers of a lexical mode (``retrievers``: name ->
    (mode, embedder), :func:`chunkstudy.design.retrievers`), per condition of 05's ``lexical_report``
    (``lexical``: its ``conditions``, each ``n_chunks, n_tokens, n_vocab, index_bytes, n_sections, section_bytes,
    index_seconds``), with the dense rows of their embedder (``dense``: :func:`timing_cost`'s) added where the mode
    also reads vectors (hybrid: both indexes are built and searched):

    * ``tokens_read`` = the BM25 tokens indexed (the bm25s tokenizer's, repeats counted) [+ the embedder's];
    * ``n_vectors`` = the chunks indexed, ``n_route_vectors`` = the sections indexed for a routed condition
      [+ the embedder's centroids], ``dim`` = the embedder's (0 for BM25 alone: its index is sparse);
    * ``index_bytes`` = the BM25 indexes' (a float32 weight and an int32 id per (term, chunk) pair, an int32 pointer
      per term: :attr:`chunkstudy.retrieve.lexical.LexicalIndex.nbytes`) [+ the embedder's];
    * ``embed_seconds`` = the seconds 05 took to build the BM25 indexes [+ the embedder's embedding seconds];
    * the latency columns from ``retrieval`` (05's timing of the retriever's own search: a hybrid search's includes
      its dense half)."""
    cols = ["condition", "embedder", "tokens_read", "n_vectors", "n_route_vectors", "dim", "index_bytes",
            "embed_seconds"]
    rows = []
    for name, (mode, emb) in retrievers.items():
        if not mode.lexical:
            continue
        for lx in (lexical or {}).get("conditions", []):
            own = {"tokens_read": float(lx["n_tokens"]), "n_vectors": int(lx["n_chunks"]),
                   "n_route_vectors": int(lx["n_sections"]), "dim": 0,
                   "index_bytes": int(lx["index_bytes"]) + int(lx["section_bytes"]),
                   "embed_seconds": float(lx["index_seconds"])}
            if mode.dense:
                d = dense[(dense["condition"] == lx["condition"]) & (dense["embedder"] == emb)]
                if d.empty:
                    continue
                r = d.iloc[0]
                own = {"tokens_read": own["tokens_read"] + float(r["tokens_read"]), "n_vectors": int(r["n_vectors"]),
                       "n_route_vectors": own["n_route_vectors"] + int(r["n_route_vectors"]), "dim": int(r["dim"]),
                       "index_bytes": own["index_bytes"] + int(r["index_bytes"]),
                       "embed_seconds": own["embed_seconds"] + float(r["embed_seconds"])}
            rows.append({"condition": lx["condition"], "embedder": name, **own})
    return latency(pd.DataFrame(rows, columns=cols), retrieval)


def estimated_seconds(table: pd.DataFrame, rates: Mapping[str, tuple[float, float]]) -> pd.DataFrame:
    """``table`` with ``est_seconds_low`` and ``est_seconds_high`` (s): the work in each column named in ``rates``
    divided by its rate range ``(low, high)`` in units per second (e.g. ``{"llm_prompt_tokens": (34e3, 45e3),
    "llm_reply_tokens": (4.2e3, 6.9e3), "tokens_read": (62e3, 5e5)}``, the GPU plan's rates):

        est_seconds_low = Σ_col table[col] / high_col,   est_seconds_high = Σ_col table[col] / low_col"""
    bad = {c: r for c, r in rates.items() if not (0 < r[0] <= r[1])}
    if bad:
        raise ValueError(f"estimated_seconds: rates must satisfy 0 < low <= high, got {bad}")
    missing = [c for c in rates if c not in table.columns]
    if missing:
        raise KeyError(f"estimated_seconds: columns {missing} not in the table; it has {list(table.columns)}")
    out = table.copy()
    out["est_seconds_low"] = sum((table[c] / hi for c, (lo, hi) in rates.items()), start=pd.Series(0.0, table.index))
    out["est_seconds_high"] = sum((table[c] / lo for c, (lo, hi) in rates.items()), start=pd.Series(0.0, table.index))
    return out


def pareto_front(table: pd.DataFrame, maximise: str, minimise: str | Sequence[str]) -> pd.Series:
    """Whether each row is on the Pareto front of ``maximise`` (a quality column, e.g. the condition's mean
    cov-nDCG@10) against the cost column(s) ``minimise``: True when no other row is at least as good on every
    objective and strictly better on one (``b`` dominates ``a`` when ``b.q ≥ a.q``, ``b.cost ≤ a.cost`` for every
    cost, and one of them strictly). Identical rows do not dominate each other (both stay on the front). A row
    with NaN in any objective is not placed (False) and dominates nothing. Bool Series on ``table``'s index."""
    costs = [minimise] if isinstance(minimise, str) else list(minimise)
    missing = [c for c in [maximise, *costs] if c not in table.columns]
    if missing:
        raise KeyError(f"pareto_front: columns {missing} not in the table; it has {list(table.columns)}")
    # every objective as "smaller is better"
    x = np.column_stack([-table[maximise].to_numpy(dtype=float), *[table[c].to_numpy(dtype=float) for c in costs]])
    ok = ~np.isnan(x).any(axis=1)
    front = ok.copy()
    pts = x[ok]
    idx = np.flatnonzero(ok)
    for j, i in enumerate(idx):
        le = (pts <= pts[j]).all(axis=1)
        lt = (pts < pts[j]).any(axis=1)
        if (le & lt).any():
            front[i] = False
    return pd.Series(front, index=table.index, name="pareto")


#: The columns of 07's ``cost`` table, in order (:func:`cost_table`).
COST_COLUMNS = ["condition", "embedder", "quality", "embedding", *LLM_COLUMNS[1:], "llm_tokens", "n_chunks",
                "n_texts", "content_tokens", "prefix_tokens", "tokens_embedded", "prefix_share", "tokens_read", "n_vectors",
                "n_route_vectors", "dim", "index_bytes", "embed_seconds", "latency_ms_per_query", "latency_ms_min",
                "latency_ms_max", "pareto_tokens", "pareto_llm"]


def llm_uses(conditions: Sequence[Any], induce_llm: bool, contexts_llm: bool) -> dict[str, list[str]]:
    """The LLM uses each condition needs (for :func:`llm_cost`): the induction for every condition whose chunks or
    heading paths come from the induced outline, when the induction is an LLM's (``induce_llm``); A1's contexts
    for a condition whose prefix kind reads them (:attr:`chunkstudy.design.PrefixKind.contexts`), when an LLM
    writes them (``contexts_llm``). ``conditions``: records with ``name``, ``prefix`` (a key of
    :data:`chunkstudy.design.PREFIX_KINDS`) and ``outline`` (:class:`chunkstudy.design.Condition`); fixed windows
    size-matched to the induced cut count the induction too (their sizes come from it): a record's ``needs()``
    (the section tables it is built from) decides where it has one."""
    out: dict[str, list[str]] = {}
    for c in conditions:
        needs = []
        tables = c.needs() if hasattr(c, "needs") else (getattr(c, "outline", None),)
        induced = "sections_induced" in tables
        if induce_llm and induced:
            needs.append("induce")
        if contexts_llm and design.lookup(design.PREFIX_KINDS, str(c.prefix), f"prefix kind of {c.name}").contexts:
            needs.append("a1")
        out[str(c.name)] = needs
    return out


def cost_table(chunks: pd.DataFrame, quality: pd.DataFrame, calls: pd.DataFrame,
               uses: Mapping[str, Collection[str]], encoders: Mapping[str, EncoderShape],
               two_stage: Collection[str], late_report: pd.DataFrame | None = None,
               embed_report: pd.DataFrame | None = None, retrieval: pd.DataFrame | None = None,
               lexical: Mapping[str, Any] | None = None, retrievers: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """07's cost table: one row per (condition, embedder) of ``quality`` (``condition, embedder, quality``: the
    primary metric's mean without a reranker), columns :data:`COST_COLUMNS`.

    * ``embedding``: ``late`` for the conditions of ``late_report`` (04's, :func:`chunkstudy.chunks.late.
      embed_conditions`: their ``tokens_read`` are the macro windows', whatever the store held, and their
      ``embed_seconds`` those tokens at the late rate this run measured, ``tokens_run / seconds`` over every late
      condition that encoded windows), else ``independent``;
    * LLM columns: :func:`llm_cost` of ``calls`` (:func:`llm_calls_from_records`) and ``uses``;
    * :func:`embedding_cost`, :func:`index_cost` (``encoders``, ``two_stage``), :func:`timing_cost` (``embed_report``:
      04's ``embedding_report`` rows, ``embedder, n_tokens, seconds``; a rerun that embedded nothing gives no rate);
    * ``pareto_tokens``: on the front of ``quality`` against ``tokens_read``, ``pareto_llm``: against LLM tokens
      (prompt + reply), each among the rows of one embedder (:func:`pareto_front`);
    * a lexical mode's retrievers (``retrievers``: name -> (mode, embedder); ``lexical``: 05's ``lexical_report``):
      their rows' index and time columns from :func:`lexical_cost`, ``embedding`` ``none`` where the mode reads no
      vectors."""
    late = late_report if late_report is not None and len(late_report) else None
    override = late[["condition", "embedder", "tokens_read"]] if late is not None else None
    late_names = set(late["condition"]) if late is not None else set()
    per = index_cost(chunks, encoders, two_stage, override)
    per.insert(2, "embedding", ["late" if c in late_names else "independent" for c in per["condition"]])
    rates = None
    if embed_report is not None and len(embed_report):
        r = embed_report.rename(columns={"n_tokens": "tokens"})
        rates = r[(r["tokens"] > 0) & (r["seconds"] > 0)][["embedder", "tokens", "seconds"]].assign(
            embedding="independent")
    if late is not None:  # the late rate: every window this run encoded, whichever condition encoded it
        own = late[["embedder", "tokens_run", "seconds"]].rename(columns={"tokens_run": "tokens"})
        own = own[(own["tokens"] > 0) & (own["seconds"] > 0)].assign(embedding="late")
        rates = own if rates is None else pd.concat([rates, own], ignore_index=True)
    per = timing_cost(per, rates, retrieval).drop(columns="embedding")
    lex = lexical_cost(per, lexical, retrievers or {}, retrieval)
    if len(lex):
        per = pd.concat([per, lex], ignore_index=True)
    no_vectors = {name for name, (mode, _) in (retrievers or {}).items() if not mode.dense}
    table = (quality[["condition", "embedder", "quality"]]
             .merge(llm_cost(calls, uses), on="condition", how="left")
             .merge(embedding_cost(chunks), on="condition", how="left")
             .merge(per, on=["condition", "embedder"], how="left"))
    table.insert(3, "embedding", ["none" if e in no_vectors else "late" if c in late_names else "independent"
                                  for c, e in zip(table["condition"], table["embedder"])])
    table["llm_tokens"] = table["llm_prompt_tokens"] + table["llm_reply_tokens"]
    table["pareto_tokens"] = False
    table["pareto_llm"] = False
    for _, idx in table.groupby("embedder", sort=False).groups.items():
        part = table.loc[idx]
        table.loc[idx, "pareto_tokens"] = pareto_front(part, "quality", "tokens_read")
        table.loc[idx, "pareto_llm"] = pareto_front(part, "quality", "llm_tokens")
    return table[COST_COLUMNS].reset_index(drop=True)


#: The LLM call cache's file in its folder (``chunkstudy.llm.cache.CACHE_FILE``; named here so that 07 does not
#: import the model clients, and a change there does not rerun it).
LLM_CALLS_FILE = "calls.jsonl"


def read_call_records(path: Any) -> list[dict]:
    """The records of an LLM call cache file (one JSON object per line, the last one per ``key`` kept, as the
    cache reads them), read and never repaired; a line that is not a JSON object (a torn tail) is skipped; none
    when the file does not exist (a run without an LLM)."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return []
    out: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("key") is not None:
            out[str(rec["key"])] = rec
    return list(out.values())


def cost_for_run(cfg: Any, condition_means: pd.DataFrame, chunks: pd.DataFrame, embedding_report: Sequence[Mapping],
                 late_report: pd.DataFrame, retrieval_timing: Sequence[Mapping],
                 lexical_report: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """:func:`cost_table` of a run's parameters ``cfg``: 04's ``chunks``, ``embedding_report`` and
    ``late_report``, 05's ``retrieval_timing`` and ``lexical_report`` (the lexical modes' indexes), the LLM call
    records of the run's cache (``llm.cache``: induction and A1's contexts; none without an LLM), and 07's
    ``condition_means`` of the primary metric without a reranker as the quality, in every retriever. Each
    embedder's index holds float32 vectors (4 bytes) of its ``dim``; its reads add 2 special tokens per text and
    stop at its ``max_seq_length`` (as 04 resolved it and its report records; a report written before it did: the
    stated length, else the model's own, :func:`chunkstudy.models.own_max_seq_length`)."""
    from .. import artifacts
    from ..models import ASSUMED_SEQ_LENGTH, own_max_seq_length

    p = cfg.params()
    report = pd.DataFrame(list(embedding_report))
    timing = pd.DataFrame(list(retrieval_timing))
    records = read_call_records(artifacts.cache_dir(cfg, p.llm.cache, create=False) / LLM_CALLS_FILE)
    uses = llm_uses(p.run_conditions, p.induce.method == "llm", p.contexts.method == "llm")
    dims = dict(zip(report["embedder"], report["dim"])) if len(report) else {}
    lengths = dict(zip(report["embedder"], report["max_seq_length"])) if "max_seq_length" in report else {}
    encoders = {key: EncoderShape(int(dims.get(key, 0)), 4, int(lengths.get(key) or spec.max_seq_length or
                                                                 own_max_seq_length(spec.model)[0] or
                                                                 ASSUMED_SEQ_LENGTH), 2)
                for key, spec in p.embed.embedders.items()}
    two_stage = set(p.routed_retrieve.two_stage_conditions)
    m = condition_means
    quality = m[(m["metric"] == p.stats.primary_metric) & (m["reranker"] == "none")][
        ["condition", "embedder", "mean"]].rename(columns={"mean": "quality"})
    order = {c: i for i, c in enumerate(dict.fromkeys(chunks["condition"]))}
    quality = quality.assign(_o=quality["condition"].map(order)).sort_values(["embedder", "_o"], kind="stable")
    return cost_table(chunks, quality.drop(columns="_o"), llm_calls_from_records(records), uses, encoders,
                      two_stage, late_report=late_report, embed_report=report, retrieval=timing,
                      lexical=lexical_report, retrievers=p.retrievers)
