"""The placebo (paper §3.2 "Placebo construction", appendix E.3): real heading paths reassigned across documents
within depth buckets, toward a cross-document derangement, rendered before each chunk (P), with the residual and
donor statistics of the assignment.

The kind (:class:`Placebo`) renders each chunk with its (document, cut path) pair's donor title and path
(:func:`placebo_assign`), writes the assignment per condition to 04's ``placebo`` table, derives ``placebo_buckets``
from it (:func:`placebo_buckets`) and puts :func:`residual_summary` into 04's ``summary.json``. It is the paper's
control: not a structure of the chunk's own document.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..prefix_kinds import PrefixError, PrefixInputs, PrefixKind, cut_paths, render_prefix
from ..schema import B, F, I, L, S, Table

PLACEBO_METHODS = ("permute", "shift")

#: 04's table of the assignments, one part per placebo condition.
TABLE = Table("placebo", {"condition": S, "doc_id": S, "depth": I, "path": L, "placebo_doc_id": S,
                          "placebo_path": L, "same_doc": B, "same_path": B, "n_chunks": I},
              "per placebo condition, one row per unique (document, path)", required=("condition", "doc_id"))
#: 04's table of the placebo per depth bucket, derived from each condition's part of :data:`TABLE`.
BUCKETS = Table("placebo_buckets", {"condition": S, "depth": S, "pairs": I, "documents": I, "same_doc": I,
                                    "min_same_doc": I, "same_doc_chunks": I, "chunks": I, "same_path": I,
                                    "donors_mean": F, "donors_min": F, "donors_max": F, "top_donor_share": F},
                "per placebo condition, the placebo per depth bucket and in total (depth 'all')")
#: The columns of :func:`placebo_assign` (04's ``placebo`` table adds ``condition`` and ``n_chunks``).
PLACEBO_COLUMNS = [c for c in TABLE.columns if c not in ("condition", "n_chunks")]


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
        raise PrefixError(f"chunking.placebo_method {method!r} is not one of {list(PLACEBO_METHODS)}")
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


#: The columns of :func:`placebo_buckets` (04's ``placebo_buckets`` table adds ``condition``).
BUCKET_COLUMNS = [c for c in BUCKETS.columns if c != "condition"]


def placebo_buckets(placebo: pd.DataFrame) -> pd.DataFrame:
    """The placebo per depth bucket and in total (``depth`` = ``"all"``; paper §3.2 and appendix E.3), the
    ``placebo_buckets`` table of 04: unique (document, path) ``pairs``, ``documents``, same-document residual
    assignments (``same_doc``) beside the minimum any within-bucket permutation allows (``min_same_doc``,
    :func:`_bucket_min_residual`; the total is :func:`min_residual`), ``chunks`` and ``same_doc_chunks`` (chunks
    carrying a residual path), ``same_path`` (foreign paths with identical headings, e.g. two papers'
    "Introduction") and the donor statistics of :func:`placebo_donors` (``donors_mean/min/max``,
    ``top_donor_share`` = the mean share from the largest donor). ``placebo``: :func:`placebo_assign`'s table with
    ``n_chunks``, of one condition (04 adds the ``condition`` column). No rounding."""
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
    return pd.DataFrame(rows, columns=BUCKET_COLUMNS)


def residual_summary(pooled: pd.DataFrame, chunking: Any) -> dict:
    """What 04's ``summary.json`` says of the paper's placebo (paper §3.2 and appendix E.3): over ``pooled`` (the
    side tables of its placebo conditions, :func:`placebo_assign`'s rows with ``n_chunks``, concatenated) the
    assigned pairs, the residual same-document pairs and the chunks carrying them beside the fewest any permutation
    allows (:func:`min_residual`), foreign paths with identical headings, the donor statistics
    (:func:`placebo_donors`) and the construction method (``chunking.placebo_method``). No rounding."""
    return {"placebo_pairs": int(len(pooled)), "placebo_residual_same_doc": int(pooled["same_doc"].sum()),
            "placebo_residual_chunks": int(pooled.loc[pooled["same_doc"], "n_chunks"].sum()),
            "placebo_min_residual": min_residual(pooled), "placebo_same_path": int(pooled["same_path"].sum()),
            "placebo_donors": placebo_donors(pooled), "placebo_method": chunking.placebo_method}


def residual_facts(part: pd.DataFrame) -> dict:
    """What 04's ``summary.json`` says of one user condition's placebo (under ``extra``): its donor statistics
    (:func:`placebo_donors`), its assigned ``pairs`` and the fewest same-document assignments a permutation allows
    (``min_residual``). ``part``: the condition's side table."""
    return {**placebo_donors(part), "pairs": int(len(part)), "min_residual": min_residual(part)}


class Placebo(PrefixKind):
    """A real heading path of the same depth from another document (P; paper §3.2): :func:`placebo_assign` over
    the unique (document, cut path) pairs of the chunks (``chunking.placebo_seed`` or the condition's own,
    ``chunking.placebo_method``), each chunk rendered with its pair's donor title and path. The side table is the
    assignment with ``n_chunks`` (chunks carrying each pair)."""

    name = "placebo"
    order = 50
    text = "a real heading path of the same depth from another document (the placebo)"
    heading_path = True
    control = True
    side = TABLE
    derived = (BUCKETS,)
    summary = True

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        pairs = pd.DataFrame({"doc_id": chunks["doc_id"].tolist(), "path": cut_paths(chunks, inputs)})
        assigned = placebo_assign(pairs, inputs.chunking.placebo_seed, inputs.chunking.placebo_method)
        look = {(r.doc_id, tuple(r.path)): (r.placebo_doc_id, r.placebo_path)
                for r in assigned.itertuples(index=False)}
        prefixes = [render_prefix(inputs.titles[look[k][0]], look[k][1]) for k in zip(pairs["doc_id"], pairs["path"])]
        used = pairs.value_counts(["doc_id", "path"])
        assigned["n_chunks"] = [int(used[(d, tuple(p))]) for d, p in zip(assigned["doc_id"], assigned["path"])]
        return prefixes, assigned

    def derive(self, table: str, part: pd.DataFrame) -> pd.DataFrame:
        return placebo_buckets(part)

    def pooled(self, parts: pd.DataFrame, chunking: Any) -> dict:
        return residual_summary(parts, chunking)

    def facts(self, part: pd.DataFrame) -> dict:
        return residual_facts(part)


KIND = Placebo()
