"""The retrieval modes' tables (stage 08; docs/beyond.md, "Retrieval modes" and "Anthropic's recipe"): the
contrasts in each mode, their per-query-type cuts by mode, and Anthropic's recipe. Every number is 07's; this
module rounds and words them. Exploratory, all of them: the primary cell stays dense (Table 1)."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from ... import design
from .common import _require, gated, inference_mask, row_notes
from .formatting import DASH, fmt_ci, fmt_delta, fmt_n, fmt_num, fmt_p, fmt_pct
from .record import Table


def mode_retrievers(retrievers: Mapping[str, tuple[design.RetrievalMode, str | None]],
                    embedder: str) -> dict[str, design.RetrievalMode]:
    """The retrievers compared across modes: each mode's with ``embedder`` (``embed.strong``) or with none."""
    return {name: mode for name, (mode, emb) in retrievers.items() if emb in (None, embedder)}


def modes_contrasts(contrasts: pd.DataFrame, metric: str, retrievers: Mapping[str, design.RetrievalMode],
                    reranker: str) -> Table:
    """Every contrast of 07's contrast tables (``contrasts``: the paper's family, the user's after them) in the
    cell of ``metric`` × each retriever of :func:`mode_retrievers` × ``reranker``: Δ, the 95% CI, p, Holm p within
    the cell's family, dz and the sizes; the dense rows of the paper's contrasts are Table 1's."""
    _require(contrasts, ["contrast", "condition_a", "condition_b", "metric", "embedder", "reranker", "mean_delta",
                         "ci_low", "ci_high", "p", "p_holm", "dz", "n_queries", "n_docs"], "contrasts")
    c = contrasts[(contrasts["metric"] == metric) & contrasts["embedder"].isin(list(retrievers))
                  & (contrasts["reranker"] == reranker)].copy()
    order = {name: i for i, name in enumerate(retrievers)}
    names = list(dict.fromkeys(contrasts["contrast"]))
    c = c.assign(_c=c["contrast"].map(names.index), _m=c["embedder"].map(order)).sort_values(["_c", "_m"])
    d = c.drop(columns=["_c", "_m"]).reset_index(drop=True)
    ok = inference_mask(d)
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))
    conf = d["confirmatory"].astype(bool) if "confirmatory" in d else pd.Series(False, index=d.index)
    display = pd.DataFrame({
        "Contrast": [f"{n}: {a} \u2212 {b}" for n, a, b in zip(d["contrast"], d["condition_a"], d["condition_b"])],
        "Mode": [retrievers[e].label + (" (Table 1)" if k else "") for e, k in zip(d["embedder"], conf)],
        "Retriever": d["embedder"],
        "\u0394": d["mean_delta"].map(fmt_delta),
        "95% CI": gated([fmt_ci(lo, hi) for lo, hi in zip(d["ci_low"], d["ci_high"])], ok),
        "p": gated([fmt_p(p, b) for p, b in zip(d["p"], n_boot)], ok),
        "Holm p (its cell)": gated([fmt_p(p, b) for p, b in zip(d["p_holm"], n_boot)], ok),
        "dz": d["dz"].map(lambda x: fmt_num(x, 2)),
        "n (q / docs)": [fmt_n(q, n) for q, n in zip(d["n_queries"], d["n_docs"])],
    })
    notes: tuple[str, ...] = (
        "Each mode's contrasts are a cell of their own: Holm within the cell's family (the paper's four, or your "
        "contrasts), exploratory; only the dense primary cell (Table 1) is confirmatory. Every mode ranks the same "
        "chunks and scores them on content offsets: the modes differ in what ranks them (BM25 reads each "
        "condition's prefix + content, the text it embeds), never in what counts as relevant.",)
    notes += row_notes([f"{n} ({e})" for n, e in zip(d["contrast"], d["embedder"])], d.get("note", []))
    return Table("modes_contrasts", f"Exploratory: the contrasts in each retrieval mode ({metric}, reranker "
                 f"{reranker})", d, display, notes)


def modes_per_type(per_type_df: pd.DataFrame, metric: str, retrievers: Mapping[str, design.RetrievalMode],
                   reranker: str) -> Table:
    """07's per-query-type cuts in the cell of ``metric`` × each retriever × ``reranker``: one row per contrast
    and query type, Δ and its 95% CI per mode (unadjusted, hypothesis-generating)."""
    _require(per_type_df, ["contrast", "condition_a", "condition_b", "qtype", "metric", "embedder", "reranker",
                           "mean_delta", "ci_low", "ci_high"], "per_type")
    d = per_type_df[(per_type_df["metric"] == metric) & per_type_df["embedder"].isin(list(retrievers))
                    & (per_type_df["reranker"] == reranker)].reset_index(drop=True)
    ok = inference_mask(d)
    d = d.assign(_cell=[f"{fmt_delta(m)} {fmt_ci(lo, hi) if good else ''}".strip()
                        for m, lo, hi, good in zip(d["mean_delta"], d["ci_low"], d["ci_high"], ok)])
    keys = list(dict.fromkeys(zip(d["contrast"], d["condition_a"], d["condition_b"], d["qtype"])))
    rows = []
    for name, a, b, qtype in keys:
        sel = d[(d["contrast"] == name) & (d["qtype"] == qtype)].set_index("embedder")
        rows.append({"Contrast": f"{name}: {a} \u2212 {b}", "Query type": qtype,
                     **{retrievers[r].label: sel["_cell"].get(r, DASH) for r in retrievers}})
    display = pd.DataFrame(rows, columns=["Contrast", "Query type", *[m.label for m in retrievers.values()]])
    return Table("modes_per_type", f"Exploratory: contrasts by query type in each retrieval mode ({metric}, "
                 f"reranker {reranker}; \u0394 [95% CI])", d.drop(columns="_cell"), display,
                 ("Unadjusted, hypothesis-generating. Where the queries have the underspecified type (generated "
                  "queries), it is the one that needs document context: a prefix that helps one mode there and not "
                  "another says which mode lacks that context.",))


def recipe(recipe_df: pd.DataFrame) -> Table:
    """07's ``recipe`` (:func:`chunkstudy.stats.recipe.recipe_table`): each step's top-k failure, its reduction
    from the baseline's with the 95% CI and p (no CI or p where the floors fail), beside the reduction the paper
    cites from Anthropic for the step."""
    _require(recipe_df, ["step", "description", "condition", "embedder", "reranker", "k", "failure", "reduction",
                         "ci_low", "ci_high", "p", "anthropic"], "recipe")
    d = recipe_df.reset_index(drop=True)
    ok = inference_mask(d)
    k = int(d["k"].iat[0]) if len(d) else 20
    n_boot = d["n_boot"] if "n_boot" in d else pd.Series([None] * len(d))
    display = pd.DataFrame({
        "Step": d["step"], "What": d["description"], "Condition": d["condition"], "Retriever": d["embedder"],
        "Reranker": d["reranker"], f"Failure@{k}": d["failure"].map(lambda x: fmt_pct(x, 1)),
        "Reduction": d["reduction"].map(lambda x: fmt_pct(x, 1)),
        "95% CI": gated([f"[{fmt_pct(lo, 1)}, {fmt_pct(hi, 1)}]" for lo, hi in zip(d["ci_low"], d["ci_high"])], ok),
        "p": gated([fmt_p(p, b) for p, b in zip(d["p"], n_boot)], ok),
        "Anthropic [4]": d["anthropic"].map(lambda x: DASH if pd.isna(x) else fmt_pct(x, 0)),
        "n (q / docs)": [fmt_n(q, n) for q, n in zip(d["n_queries"], d["n_docs"])],
    })
    notes: tuple[str, ...] = (
        f"Failure@{k} = 1 \u2212 recall@{k}, span-level: the share of a query's gold spans that the union of the top "
        f"{k} chunks does not cover to metrics.span_frac (Anthropic counts the relevant chunks missing from the top "
        f"{k}), averaged over the queries a step shares with the baseline (step R0). Reduction = 1 \u2212 failure / "
        "baseline failure, its CI the document-clustered bootstrap of the ratio itself (stats.n_boot resamples of "
        "documents, the contrasts' draws); p tests a reduction of 0.",
        "Anthropic [4]: the reductions the paper cites from Anthropic's internal benchmark (35 % with contextual "
        "embeddings, 49 % with contextual BM25 fused in; Anthropic's post adds 67 % with a reranker). Their models, "
        "chunks and benchmark are not these: set side by side, not compared.")
    notes += row_notes([f"{s} ({r})" for s, r in zip(d["step"], d["reranker"])], d.get("note", []))
    unranked = [s.name for s in design.RECIPE if s.reranked]
    if unranked and not (d["reranker"] != "none").any():
        notes += (f"{', '.join(unranked)} (the recipe's reranked steps) not run: this run declares no reranker "
                  "(retrieve.rerankers).",)
    return Table("recipe", f"Exploratory: Anthropic's contextual-retrieval recipe, top-{k} failure and its "
                 "reduction", d, display, notes)

