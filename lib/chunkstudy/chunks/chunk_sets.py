"""Every chunk set of the study (docs/design.md, "Conditions"; paper 3.2 and appendix E): boundaries plus prefixes.

=========  ==========================================  ==============================================
condition  boundaries                                  prefix at embedding time
=========  ==========================================  ==============================================
A0         fixed windows, size-matched to A2 per doc   none
A1         A0                                          LLM/extractive situating context + ``"\\n\\n"``
A2         induced structure                           none
A3-d1/d2   induced structure                           heading path cut to depth 1 / 2
A3         induced structure                           heading path cut to depth 3
P          induced structure (A3's chunks)             a real depth-matched path from another document
A4         A3's chunks, own chunk_ids                  as A3 (same embedded text, so the same vectors)
G2/G3/G4   gold structure                              as A2 / A3 / A4
=========  ==========================================  ==============================================

Offsets are half-open character indices into ``documents.text`` and describe *content only*: a prefix never
shifts or enters them, so relevance (computed on offsets) cannot come from a prefix. The embedded text is
``prefix + chunking.content(text, start, end)`` (:func:`embedded_texts`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .. import design, paper, stages
from ..params import ChunkingParams
from ..corpus import model as docmodel
from . import chunking
from .chunking import ChunkingError, TokenCounter

PATH_SEP = " \u203a "  # " › "
CHUNK_COLUMNS = stages.columns("chunks")
#: The conditions cut from the induced outline (A0/A1 too: fixed windows are size-matched to it), and from gold.
INDUCED = set(design.names_where(boundaries=("fixed", "induced")))
GOLD = set(design.names_where(boundaries="gold"))


def render_prefix(title: str, path: list[str]) -> str:
    """``"[Title › Section › Subsection]\\n\\n"``: the document title, then the heading path, joined by ``" › "``.

    Empty components (an untitled lead) are left out; a lead chunk therefore renders as ``"[Title]\\n\\n"``.
    """
    parts = [p for p in [title, *path] if p]
    return "[" + PATH_SEP.join(parts) + "]\n\n"


def embedded_texts(chunks: pd.DataFrame, documents: pd.DataFrame) -> pd.Series:
    """THE text embedded for each chunk and shown to rerankers: ``prefix + content(text, start, end)``."""
    text = dict(zip(documents["doc_id"], documents["text"]))
    missing = sorted(set(chunks["doc_id"]) - set(text))
    if missing:
        raise ChunkingError(f"chunks: {len(missing)} doc_id(s) not in documents, e.g. {missing[0]!r}")
    vals = [p + chunking.content(text[d], s, e)
            for p, d, s, e in zip(chunks["prefix"], chunks["doc_id"], chunks["start"], chunks["end"])]
    return pd.Series(vals, index=chunks.index, name="embedded_text", dtype=object)


def text_rows(texts: pd.Series) -> tuple[np.ndarray, list[str]]:
    """``(row of each text, unique texts in first-appearance order)``: the embedding matrix row order."""
    codes, uniques = pd.factorize(texts, sort=False)
    return codes.astype("int64"), list(uniques)


def prefix_depth(condition: str, depths: list[int]) -> int:
    """Heading levels a condition's prefix keeps (:meth:`chunkstudy.design.Condition.prefix_depth`): A3-dN -> N;
    A3, P, A4, G3, G4 -> max(depths); else 0."""
    return design.condition(condition).prefix_depth(depths)


# -------------------------------------------------------------------------------------------------- placebo
PLACEBO_METHODS = ("permute", "shift")
PLACEBO_COLUMNS = [c for c in stages.columns("placebo") if c != "n_chunks"]


def derangement_repair(labels: np.ndarray, perm: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Repair a permutation toward a derangement of labels: position ``i`` receives item ``perm[i]``, and a
    *same-label* assignment is ``labels[perm[i]] == labels[i]``.

    One pass over the positions in order: for each same-label position ``i`` (label ``a``), pick uniformly (with
    ``rng``) a position ``j`` with ``labels[j] != a`` and ``labels[perm[j]] != a`` and swap ``perm[i]``,
    ``perm[j]``: afterwards ``i`` holds a foreign item and ``j`` holds item ``perm[i]`` of label ``a != labels[j]``,
    so both are cross-label and no other position changes. When no such ``j`` exists, ``i`` stays (a residual).

    Claim: the result has exactly ``max(0, 2m - n)`` same-label assignments, where ``n = len(labels)`` and ``m``
    the largest label count — the minimum any permutation allows (label ``a`` with ``m`` items has only ``n - m``
    foreign positions to send them to).

    Proof. (1) A swap changes only ``i`` and ``j`` and leaves both cross-label, so no swap ever creates a
    same-label position; after the pass the same-label positions are exactly those skipped. (2) For a same-label
    ``i`` of label ``a`` (count ``m_a``): ``n - m_a`` positions have another label, and at most ``m_a - 1`` of them
    hold an ``a`` item (``m_a`` items have label ``a`` and one sits at ``i``), so at least ``n - 2 m_a + 1`` valid
    ``j`` exist — one or more whenever ``m_a <= n/2``. (3) So only a label with ``m_a > n/2`` (at most one label)
    can be skipped, and it is skipped exactly when every other-label position holds an ``a`` item: then ``n - m_a``
    of its items sit abroad and ``2 m_a - n`` stay home, the minimum; no other-label position is same-label, so no
    later swap happens for any label. Hence the residual is 0 when every label has ``m_a <= n/2`` (a
    derangement exists) and ``2m - n`` otherwise. Tests check this against a brute force on small cases.

    Returns a new array; inputs are not modified.
    """
    labels = np.asarray(labels)
    perm = np.array(perm, copy=True)
    for i in range(len(perm)):
        a = labels[i]
        if labels[perm[i]] != a:
            continue
        ok = np.flatnonzero((labels != a) & (labels[perm] != a))
        if len(ok) == 0:
            continue
        j = int(ok[rng.integers(len(ok))])
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def _unique_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    uniq = pairs[["doc_id", "path"]].copy()
    uniq["path"] = [tuple(p) for p in uniq["path"]]
    uniq = uniq.drop_duplicates().sort_values(["doc_id", "path"], kind="stable").reset_index(drop=True)
    uniq["depth"] = [len(p) for p in uniq["path"]]
    return uniq


def _shift_order(bucket: pd.DataFrame, rng: np.random.Generator) -> tuple[list, list]:
    """``(targets, sources)`` of the older cyclic shift: document groups and their pairs shuffled, laid out
    group after group, and pair ``i`` takes the path of pair ``(i + m) mod n`` (``m`` = the largest group)."""
    groups = [list(g.itertuples(index=False)) for _, g in bucket.groupby("doc_id", sort=True)]
    laid: list = []
    for gi in rng.permutation(len(groups)):
        g = groups[gi]
        laid.extend(g[k] for k in rng.permutation(len(g)))
    n, m = len(laid), max(len(g) for g in groups)
    return laid, [laid[(i + m) % n] for i in range(n)]


def _permute_order(bucket: pd.DataFrame, rng: np.random.Generator) -> tuple[list, list]:
    """``(targets, sources)`` of a seeded uniform random permutation of the bucket, repaired toward a
    cross-document derangement (:func:`derangement_repair`)."""
    rows = list(bucket.itertuples(index=False))
    codes = pd.factorize(bucket["doc_id"], sort=True)[0]
    perm = derangement_repair(codes, rng.permutation(len(rows)), rng)
    return rows, [rows[k] for k in perm]


def placebo_assign(pairs: pd.DataFrame, seed: int, method: str) -> pd.DataFrame:
    """Depth-bucketed cross-document reassignment of heading paths (paper 3.2 "Placebo construction", E.3: "We
    bucket unique (document, path) pairs by depth and permute them within-bucket toward a cross-document
    derangement (fixed seed). We count and report residual same-document assignments.").

    ``pairs`` has ``doc_id`` and ``path`` (a tuple of heading titles, already cut to the prefix depth); duplicate
    ``(doc_id, path)`` rows are collapsed and sorted, so the result does not depend on row order. Buckets are
    ``len(path)``, taken in ascending depth, all drawing from one ``numpy.random.default_rng(seed)``.

    * ``method="permute"`` (the paper's; ``chunking.placebo_method``): a uniform random permutation of the
      bucket, then :func:`derangement_repair` swaps away same-document assignments. A document's placebo paths
      therefore come from many donor documents (:func:`placebo_donors`).
    * ``method="shift"``: the older construction — document groups and their pairs shuffled, laid out group after
      group, pair ``i`` receiving the path of pair ``(i + m) mod n`` (``m`` = the largest group). Also a
      permutation with the minimal residual, but a document's paths come from one or two neighbouring groups:
      a coherent fake document rather than a permutation.

    Both leave exactly ``max(0, 2m - n)`` same-document assignments per bucket (``n`` its size, ``m`` its largest
    document's pairs): zero whenever a cross-document derangement exists (no document holds more than half of
    the bucket), else the minimum any permutation allows (:func:`min_residual`).

    Returns one row per unique pair: ``doc_id, depth, path, placebo_doc_id, placebo_path, same_doc`` (the
    residual same-document assignment) and ``same_path`` (a non-empty foreign path with the same headings, e.g.
    two papers' "Introduction"). The placebo title is the source document's title (the whole breadcrumb is foreign).
    """
    if method not in PLACEBO_METHODS:
        raise ChunkingError(f"chunking.placebo_method {method!r} is not one of {list(PLACEBO_METHODS)}")
    order = _permute_order if method == "permute" else _shift_order
    rng = np.random.default_rng(seed)
    uniq = _unique_pairs(pairs)
    rows = []
    for depth in sorted(uniq["depth"].unique()):
        targets, sources = order(uniq[uniq["depth"] == depth], rng)
        for r, src in zip(targets, sources):
            rows.append({"doc_id": r.doc_id, "depth": int(depth), "path": list(r.path),
                         "placebo_doc_id": src.doc_id, "placebo_path": list(src.path),
                         "same_doc": src.doc_id == r.doc_id,
                         "same_path": bool(r.path) and tuple(src.path) == tuple(r.path)})
    return pd.DataFrame(rows, columns=PLACEBO_COLUMNS)


def placebo_prefixes(doc_ids: list[str], paths: list[tuple[str, ...]], titles: Mapping[str, str], seed: int,
                     method: str) -> tuple[list[str], pd.DataFrame]:
    """Placebo prefixes for chunks whose real (cut) heading paths are ``paths``: :func:`placebo_assign` over their
    unique (document, path) pairs, each chunk rendered with its pair's donor title and path. Returns ``(prefixes,
    placebo)``: the placebo table with ``n_chunks`` (chunks carrying each pair)."""
    pairs = pd.DataFrame({"doc_id": list(doc_ids), "path": [tuple(p) for p in paths]})
    placebo = placebo_assign(pairs, seed, method)
    look = {(r.doc_id, tuple(r.path)): (r.placebo_doc_id, r.placebo_path) for r in placebo.itertuples(index=False)}
    prefixes = [render_prefix(titles[look[k][0]], look[k][1]) for k in zip(pairs["doc_id"], pairs["path"])]
    used = pairs.value_counts(["doc_id", "path"])
    placebo["n_chunks"] = [int(used[(d, tuple(p))]) for d, p in zip(placebo["doc_id"], placebo["path"])]
    return prefixes, placebo


def placebo_donors(placebo: pd.DataFrame) -> dict:
    """Donor statistics of a placebo assignment (:func:`placebo_assign`; no rounding): per document, the number
    of distinct documents its placebo paths come from (``donors_mean``, ``donors_min``, ``donors_max``,
    ``donors_median``) and the share of its paths that come from its single largest donor
    (``top_donor_share_mean``, ``top_donor_share_max``), over its unique (document, path) pairs; plus
    ``residual_same_doc`` (pairs assigned a path of their own document) and ``n_docs``. A permutation spreads a
    document's paths over many donors; a shift gives one or two."""
    if len(placebo) == 0:
        return {"n_docs": 0, "donors_mean": math.nan, "donors_median": math.nan, "donors_min": 0, "donors_max": 0,
                "top_donor_share_mean": math.nan, "top_donor_share_max": math.nan, "residual_same_doc": 0}
    counts = placebo.groupby(["doc_id", "placebo_doc_id"]).size()
    per_doc = counts.groupby(level=0)
    donors = per_doc.size()
    top = per_doc.max() / per_doc.sum()
    return {"n_docs": int(len(donors)), "donors_mean": float(donors.mean()), "donors_median": float(donors.median()),
            "donors_min": int(donors.min()), "donors_max": int(donors.max()),
            "top_donor_share_mean": float(top.mean()), "top_donor_share_max": float(top.max()),
            "residual_same_doc": int(placebo["same_doc"].sum())}


def _bucket_min_residual(doc_ids: pd.Series) -> int:
    """The fewest same-document assignments a permutation of one depth bucket allows: ``max(0, 2m - n)``, ``n``
    the bucket's pairs and ``m`` those of its largest document (:func:`derangement_repair`)."""
    n, m = len(doc_ids), int(doc_ids.value_counts().max()) if len(doc_ids) else 0
    return max(0, 2 * m - n)


def min_residual(pairs: pd.DataFrame) -> int:
    """The fewest same-document assignments any within-depth permutation allows: sum of max(0, 2m - n)."""
    uniq = pairs[["doc_id", "path"]].assign(path=[tuple(p) for p in pairs["path"]]).drop_duplicates()
    uniq["depth"] = [len(p) for p in uniq["path"]]
    return int(sum(_bucket_min_residual(b["doc_id"]) for _, b in uniq.groupby("depth")))


def placebo_buckets(placebo: pd.DataFrame) -> pd.DataFrame:
    """The placebo per depth bucket and in total (``depth`` = ``"all"``; paper §3.2 and appendix E.3), the
    ``placebo_buckets`` table of 04: unique (document, path) ``pairs``, ``documents``, same-document residual
    assignments (``same_doc``) beside the minimum any within-bucket permutation allows (``min_same_doc``,
    :func:`_bucket_min_residual`; the total is :func:`min_residual`), ``chunks`` and ``same_doc_chunks`` (chunks
    carrying a residual path), ``same_path`` (foreign paths with identical headings, e.g. two papers'
    "Introduction") and the donor statistics of :func:`placebo_donors` (``donors_mean/min/max``,
    ``top_donor_share`` = the mean share from the largest donor). ``placebo``: :func:`placebo_assign`'s table with
    ``n_chunks``. No rounding."""
    def row(depth: str, b: pd.DataFrame, min_same: int) -> dict:
        d = placebo_donors(b)
        same = b["same_doc"].astype(bool)
        return {"depth": depth, "pairs": len(b), "documents": int(b["doc_id"].nunique()), "same_doc": int(same.sum()),
                "min_same_doc": int(min_same), "same_doc_chunks": int(b.loc[same, "n_chunks"].sum()),
                "chunks": int(b["n_chunks"].sum()), "same_path": int(b["same_path"].astype(bool).sum()),
                "donors_mean": d["donors_mean"], "donors_min": float(d["donors_min"]),
                "donors_max": float(d["donors_max"]), "top_donor_share": d["top_donor_share_mean"]}

    rows = [row(str(depth), b, _bucket_min_residual(b["doc_id"])) for depth, b in placebo.groupby("depth", sort=True)]
    if rows:
        rows.append(row("all", placebo, sum(r["min_same_doc"] for r in rows)))
    return pd.DataFrame(rows, columns=stages.columns("placebo_buckets"))


# ------------------------------------------------------------------------------------------------ build_all
def _with_prefixes(base: pd.DataFrame, condition: str, prefixes: list[str], depth: int,
                   shares: str | None = None) -> pd.DataFrame:
    df = base.copy()
    df.insert(0, "condition", condition)
    df["prefix"] = prefixes
    df["prefix_depth"] = depth
    df["shares_vectors_with"] = shares
    for c in ("route_key", "section_id"):
        if c not in df.columns:
            df[c] = None
    return df


def _a1_prefixes(a0: pd.DataFrame, contexts_a1: pd.DataFrame | None) -> list[str]:
    if contexts_a1 is None:
        raise ChunkingError("A1 is in chunking.conditions but no contexts_a1 table was given (written by 02_induce)")
    ctx = contexts_a1[["doc_id", "start", "end", "context"]]
    dup = ctx.duplicated(["doc_id", "start", "end"])
    if dup.any():
        r = ctx[dup].iloc[0]
        raise ChunkingError(f"contexts_a1: {int(dup.sum())} duplicate window(s), e.g. doc {r.doc_id!r} "
                            f"[{r.start},{r.end}); written by 02_induce")
    look = {(d, int(s), int(e)): c for d, s, e, c in ctx.itertuples(index=False)}
    out, missing = [], []
    for d, s, e in zip(a0["doc_id"], a0["start"], a0["end"]):
        c = look.get((d, int(s), int(e)))
        if c is None:
            missing.append((d, s, e))
            c = ""
        c = str(c).strip()
        out.append(c + "\n\n" if c else "")
    if missing:
        d, s, e = missing[0]
        raise ChunkingError(f"contexts_a1: no context for {len(missing)} of {len(a0)} A0 windows, e.g. doc {d!r} "
                            f"[{s},{e}); 02_induce must cut windows with chunking.a0_windows and the same "
                            f"chunking parameters")
    return out


def build_all(documents: pd.DataFrame, paragraphs: pd.DataFrame, sections_gold: pd.DataFrame | None,
              sections_induced: pd.DataFrame | None, contexts_a1: pd.DataFrame | None, chunking_params: ChunkingParams,
              counter: TokenCounter | None = None,
              extra: Mapping[str, Any] | None = None) -> dict:
    """Build every condition in ``chunking_params.conditions`` (the ``chunking`` record, ``cfg.params("chunking")``;
    a mapping is validated into one, its missing keys at the schema's defaults), and the user's conditions
    ``extra`` (:func:`chunkstudy.chunks.extra_conditions.build`'s result: their chunks follow the paper's, share the text
    rows, and their facts go to ``summary["extra"]``).

    Returns a dict:

    * ``"chunks"``: one row per chunk and condition, columns :data:`CHUNK_COLUMNS`; ``chunk_id`` is
      ``"<condition>|<doc_id>|<nnnn>"`` (unique across conditions); ``text_row`` indexes the unique embedded
      texts (``"texts"``), the same rows for every embedder. A4/G4 share A3/G3's offsets, prefixes and text rows.
    * ``"texts"``: the unique embedded texts in row order (a list of str).
    * ``"size_matching"``: per document, the A0 target (mean content tokens of its A2 chunks) and the realised
      chunk counts and means of A0, A2 and G2, with ``gap_A0_A2 = mean_A0 - mean_A2``.
    * ``"placebo"``: :func:`placebo_assign` over the A3 (induced, full-depth) pairs, plus ``n_chunks`` using each.
    * ``"summary"``: realised pooled means per chunk set, the A0-A2 gap, placebo residuals, unique-text share.
    """
    p = chunking_params
    conds = list(p.conditions)  # each one of design.CONDITION_NAMES (schema-checked)
    counter = counter or chunking.load_counter(p.tokenizer)
    splitter, mx, mn, depths = p.sentence_splitter, p.max_chunk_tokens, p.min_chunk_tokens, list(p.depths)
    cache: dict = {}
    titles = dict(zip(documents["doc_id"], documents["title"]))

    fixed, induced, gold = design.CHUNK_SETS  # A0 (size-matched to A2), A2, G2: every condition reuses one
    outlines = {"sections_induced": sections_induced, "sections_gold": sections_gold}
    need = {o: sorted(c for c in conds if design.condition(c).outline == o) for o in outlines}
    for outline, table in outlines.items():
        if need[outline] and table is None:
            raise ChunkingError(f"conditions {need[outline]} need {outline} ({stages.writer(outline)})")
    sets: dict[str, pd.DataFrame] = {}
    if need["sections_induced"]:
        sets[induced] = chunking.structural_chunks(documents, paragraphs, sections_induced, counter, mx, mn,
                                                   splitter, _unit_cache=cache)
        sets[fixed] = chunking.fixed_windows(documents, chunking.doc_means(sets[induced]), counter, splitter,
                                             _unit_cache=cache)
    if need["sections_gold"]:
        sets[gold] = chunking.structural_chunks(documents, paragraphs, sections_gold, counter, mx, mn, splitter,
                                                _unit_cache=cache)
    for name, df in sets.items():
        bad_tiles = chunking.verify_tiling(df, documents)
        if bad_tiles:
            d, v = next(iter(bad_tiles.items()))
            raise ChunkingError(f"{name} chunks do not tile document {d!r}: {v}")  # a bug, never expected

    # gold and induced section ids may coincide ("doc::s003"), so their heading paths are kept apart
    paths_of = {o: docmodel.heading_paths(t) if t is not None else {} for o, t in outlines.items()}

    def breadcrumb(df: pd.DataFrame, depth: int, paths: dict) -> list[str]:
        return [render_prefix(titles[d], paths[s][:depth]) for d, s in zip(df["doc_id"], df["section_id"])]

    frames, placebo = [], None
    for cond in conds:
        spec = design.condition(cond)
        depth = spec.prefix_depth(depths)
        base = sets[spec.chunk_set]
        paths = paths_of[spec.outline]
        if spec.prefix == "none":
            pre = [""] * len(base)
        elif spec.prefix == "context":
            pre = _a1_prefixes(base, contexts_a1)
        elif spec.prefix == "placebo":
            pre, placebo = placebo_prefixes(base["doc_id"].tolist(), [tuple(paths[s][:depth])
                                                                      for s in base["section_id"]],
                                            titles, p.placebo_seed, p.placebo_method)
        else:  # a heading path
            pre = breadcrumb(base, depth, paths)
        frames.append(_with_prefixes(base, cond, pre, depth, spec.shares_vectors_with))

    frames += list(extra["frames"]) if extra else []
    chunks = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CHUNK_COLUMNS)
    chunks["chunk_id"] = (chunks["condition"] + "|" + chunks["doc_id"] + "|"
                          + chunks.groupby(["condition", "doc_id"], sort=False).cumcount().map("{:04d}".format))
    uniq_prefix = list(dict.fromkeys(chunks["prefix"]))
    n_pre = dict(zip(uniq_prefix, counter(uniq_prefix)))
    chunks["n_prefix_tokens"] = chunks["prefix"].map(n_pre).astype("int64")
    rows, texts = text_rows(embedded_texts(chunks, documents))
    chunks["text_row"] = rows
    chunks = chunks[CHUNK_COLUMNS]

    size = _size_matching(sets)
    summary = _summary(chunks, sets, size, placebo, texts, mx, mn)
    if placebo is not None:
        summary["placebo_method"] = p.placebo_method
    if extra and extra["summary"]:
        summary["extra"] = dict(extra["summary"])
    if placebo is None:
        placebo = pd.DataFrame(columns=stages.columns("placebo"))
    return {"chunks": chunks, "texts": texts, "size_matching": size, "placebo": placebo,
            "placebo_buckets": placebo_buckets(placebo), "summary": summary}


def _size_matching(sets: dict[str, pd.DataFrame]) -> pd.DataFrame:
    parts = []
    for name in design.CHUNK_SETS:
        if name in sets:
            g = sets[name].groupby("doc_id", sort=False)["n_content_tokens"]
            parts.append(pd.DataFrame({f"n_{name}": g.size(), f"mean_{name}": g.mean().astype(float)}))
    if not parts:
        return pd.DataFrame(columns=["doc_id"])
    out = pd.concat(parts, axis=1).rename_axis("doc_id").reset_index()
    fixed, induced, _ = design.CHUNK_SETS
    if induced in sets:
        out.insert(1, "target", out[f"mean_{induced}"])
        out[f"gap_{fixed}_{induced}"] = out[f"mean_{fixed}"] - out[f"mean_{induced}"]
    return out


def _summary(chunks, sets, size, placebo, texts, mx, mn) -> dict:
    """04's ``summary.json``: per condition the chunk count and mean content/prefix tokens; per chunk set its
    realised count and pooled mean content tokens (the size-matching numbers, paper §3.2), chunks over/under the
    split/merge bounds; the A0 - A2 gap pooled and per document (mean and max |gap|, documents whose |gap|
    exceeds the paper's bound ``size_gap_tolerance``); the placebo's residuals (:func:`placebo_buckets`)."""
    by = chunks.groupby("condition", sort=False)
    out: dict[str, Any] = {
        "n_chunks": {k: int(v) for k, v in by.size().items()},
        "mean_content_tokens": {k: float(v) for k, v in by["n_content_tokens"].mean().items()},
        "mean_prefix_tokens": {k: float(v) for k, v in by["n_prefix_tokens"].mean().items()},
        "realised_n": {k: int(len(v)) for k, v in sets.items()},
        "realised_mean": {k: float(v["n_content_tokens"].mean()) for k, v in sets.items()},
        "over_max": {k: int((v["n_content_tokens"] > mx).sum()) for k, v in sets.items()
                     if design.condition(k).structural},
        "under_min": {k: int((v["n_content_tokens"] < mn).sum()) for k, v in sets.items()
                      if design.condition(k).structural},
        "n_texts": len(texts),
        "n_chunk_rows": int(len(chunks)),
        "unique_text_share": float(len(texts) / len(chunks)) if len(chunks) else math.nan,
    }
    fixed, induced, _ = design.CHUNK_SETS
    if fixed in sets:
        gap = size[f"gap_{fixed}_{induced}"].abs()
        tolerance = paper.value("study", "design", "size_gap_max")
        out[f"size_gap_{fixed}_{induced}"] = out["realised_mean"][fixed] - out["realised_mean"][induced]
        out[f"max_abs_doc_gap_{fixed}_{induced}"] = float(gap.max()) if len(size) else 0.0
        out[f"mean_abs_doc_gap_{fixed}_{induced}"] = float(gap.mean()) if len(size) else 0.0
        out["size_gap_tolerance"] = tolerance
        out[f"n_docs_{fixed}_{induced}"] = int(len(size))
        out[f"docs_over_tolerance_{fixed}_{induced}"] = int((gap > tolerance).sum())
    if placebo is not None:
        out["placebo_pairs"] = int(len(placebo))
        out["placebo_residual_same_doc"] = int(placebo["same_doc"].sum())
        out["placebo_residual_chunks"] = int(placebo.loc[placebo["same_doc"], "n_chunks"].sum())
        out["placebo_min_residual"] = min_residual(placebo)
        out["placebo_same_path"] = int(placebo["same_path"].sum())
        out["placebo_donors"] = placebo_donors(placebo)
    return out


def chunks_side_by_side(chunks: pd.DataFrame, documents: pd.DataFrame, doc_id: str,
                        conds: tuple[str, ...] = design.CHUNK_SETS, preview: int = 70) -> pd.DataFrame:
    """One document cut under several conditions, one column per condition and one row per chunk position:
    ``"[start, end) n tok | prefix-free opening words…"`` (for display only)."""
    text = dict(zip(documents["doc_id"], documents["text"]))
    if doc_id not in text:
        raise ChunkingError(f"chunks_side_by_side: document {doc_id!r} is not in documents")
    cols = {}
    for c in conds:
        g = chunks[(chunks["condition"] == c) & (chunks["doc_id"] == doc_id)].sort_values("start")
        cols[c] = pd.Series([f"[{s}, {e}) {n} tok | {chunking.content(text[doc_id], s, e)[:preview]}"
                             for s, e, n in zip(g["start"], g["end"], g["n_content_tokens"])], dtype=object)
    return pd.DataFrame(cols).fillna("")
