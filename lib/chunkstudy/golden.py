"""Golden results: a run's headline numbers, pinned in a file that changes only in a commit saying why.

As Anserini's regression YAMLs do, ``tests/golden/<corpus>.json`` states the corpus counts and the primary cell's
results of one parameter file. :func:`headline` reads them from a finished run's tables; :func:`compare` lists the
differences beyond a tolerance. ``.venv/bin/python -m chunkstudy.golden demo --write`` re-pins after a deliberate
change (say why in the commit message).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from . import artifacts, config
from .stats import verdicts


def headline(cfg: config.Config) -> dict:
    """Counts and primary-cell numbers of a finished run (unrounded)."""
    cell_key = cfg.params().primary_cell
    chunks = artifacts.read(cfg, "chunks")
    contrasts = artifacts.read(cfg, "contrasts")
    means = artifacts.read(cfg, "condition_means")
    primary = contrasts[contrasts["confirmatory"]].sort_values("contrast")
    cell = means[(means["metric"] == cell_key.metric) & (means["embedder"] == cell_key.embedder)
                 & (means["reranker"] == cell_key.reranker)]
    return {
        "corpus": cfg.corpus,
        "documents": int(len(artifacts.read(cfg, "documents"))),
        "queries": int(len(artifacts.read(cfg, "queries"))),
        "chunks_per_condition": {k: int(v) for k, v in chunks.groupby("condition").size().items()},
        "primary_cell": cell_key.name,
        "condition_means": {r.condition: float(r.mean) for r in cell.itertuples()},
        "contrasts": {r.contrast: {"mean_delta": float(r.mean_delta), "p": float(r.p), "p_holm": float(r.p_holm),
                                   "dz": float(r.dz)} for r in primary.itertuples()},
        **_beyond(cfg, primary, cell_key.name),
    }


#: Sections of :func:`headline` a golden file pins only when it has them (golden files pinned before these existed
#: leave them out, and :func:`compare` does not count them as unexpected there): the user's contrasts of the
#: primary cell, the exact columns of 07's cost table, the correctly specified secondary model (07's
#: ``mixedlm_paired``), each contrast's specification curve and the curve read by axis, 07's check of its own tests
#: (``size_check``: each family's family-wise size per test, and the paired MixedLM's coverage per contrast), the
#: contrasts of the primary metric in each retrieval mode but the dense one (``modes``) and Anthropic's recipe
#: (``recipe``); each registered verdict's section too (:func:`optional`; the calibrated test's ``calibrated``,
#: TOST's ``tost``).
OPTIONAL = ("user_contrasts", "cost", "mixedlm_paired", "multiverse", "multiverse_axes", "size_check", "modes",
            "recipe")


def optional() -> tuple[str, ...]:
    """:data:`OPTIONAL` and each registered verdict's section, read when called (a verdict registered at run time
    counts)."""
    return (*OPTIONAL, *(v.golden_section for v in verdicts.statistics()))


#: The cost table's columns a golden pins: the exact counts (never the measured seconds).
COST_PINNED = ("embedding", "llm_calls", "llm_tokens", "tokens_embedded", "prefix_share", "tokens_read",
               "index_bytes", "pareto_tokens", "pareto_llm")


#: The specification curve's columns a golden pins (07's ``multiverse_summary``, per contrast).
MULTIVERSE_PINNED = ("n_declared", "n_specs", "n_analyses", "primary_delta", "median_delta", "n_zero",
                     "share_same_sign", "share_sig_positive", "share_sig_negative", "null_p", "stouffer_z", "stouffer_p")
#: The curve read by axis (07's ``multiverse_axes``), per contrast, axis and value.
MULTIVERSE_AXES_PINNED = ("n_specs", "n_analyses", "share_same_sign", "share_sig_positive", "share_sig_negative")


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _beyond(cfg: config.Config, primary, cell: str) -> dict:
    """The :func:`optional` sections of a finished run's headline, those its tables hold."""
    out: dict = {}
    user = artifacts.read(cfg, "user_contrasts") if artifacts.exists(cfg, "user_contrasts") else None
    if user is not None and len(user):
        rows = user[user["cell"] == cell].sort_values("contrast")
        shown = verdicts.carried(user)
        out["user_contrasts"] = {
            r.contrast: {"mean_delta": float(r.mean_delta), "p": float(r.p), "p_holm": float(r.p_holm),
                         **{k: x for v in shown for k, x in v.golden_user(r).items()}}
            for r in rows.itertuples()}
    for v in verdicts.carried(primary):
        out[v.golden_section] = {r.contrast: v.golden(r) for r in primary.itertuples()}
    if artifacts.exists(cfg, "mixedlm_paired"):
        paired = artifacts.read(cfg, "mixedlm_paired")
        out["mixedlm_paired"] = {r.contrast: {"coef": float(r.coef), "se": float(r.se), "p_holm": float(r.p_holm)}
                                 for r in paired.sort_values("contrast").itertuples()}
    if artifacts.exists(cfg, "cost"):
        table = artifacts.read(cfg, "cost")
        out["cost"] = {f"{r['condition']} / {r['embedder']}": {c: (r[c].item() if hasattr(r[c], "item") else r[c])
                                                               for c in COST_PINNED}
                       for _, r in table.iterrows()}
    if artifacts.exists(cfg, "size_check"):
        checked = artifacts.read(cfg, "size_check")
        pinned = checked[checked["measure"] != "size"]
        if len(pinned):
            out["size_check"] = {f"{r.family} / {r.rule} / {r.contrast}": float(r.rate) for r in pinned.itertuples()}
    out.update(_modes(cfg))
    curves = artifacts.read(cfg, "multiverse_summary") if artifacts.exists(cfg, "multiverse_summary") else None
    if curves is not None and len(curves):
        out["multiverse"] = {str(r["contrast"]): {c: _plain(r[c]) for c in MULTIVERSE_PINNED}
                             for _, r in curves.iterrows()}
    axes = artifacts.read(cfg, "multiverse_axes") if artifacts.exists(cfg, "multiverse_axes") else None
    if axes is not None and len(axes):
        by_axis: dict = {}
        for _, r in axes.iterrows():
            by_axis.setdefault(str(r["contrast"]), {}).setdefault(str(r["axis"]), {})[str(r["level"])] = {
                c: _plain(r[c]) for c in MULTIVERSE_AXES_PINNED}
        out["multiverse_axes"] = by_axis
    return out


#: The recipe's columns a golden pins, per step (07's ``recipe``).
RECIPE_PINNED = ("failure", "baseline_failure", "reduction", "ci_low", "ci_high", "p", "n_queries")


def _modes(cfg: config.Config) -> dict:
    """The ``modes`` and ``recipe`` sections of a run with more than the dense mode: per retriever of the strong
    embedder in a lexical mode (``bm25``, ``hybrid-<strong>``), the paper's contrasts of the primary metric without
    a reranker (as Table 1 pins them); per recipe step (and reranker), :data:`RECIPE_PINNED`."""
    p = cfg.params()
    if len(p.retrieve.modes) < 2:
        return {}
    metric, strong, _ = p.primary_cell
    contrasts = artifacts.read(cfg, "contrasts")
    out: dict = {"modes": {}}
    for name, (mode, emb) in p.retrievers.items():
        if not mode.lexical or emb not in (None, strong):
            continue
        rows = contrasts[(contrasts["metric"] == metric) & (contrasts["embedder"] == name)
                         & (contrasts["reranker"] == "none")].sort_values("contrast")
        out["modes"][name] = {r.contrast: {"mean_delta": float(r.mean_delta), "p": float(r.p),
                                           "p_holm": float(r.p_holm), "dz": float(r.dz)} for r in rows.itertuples()}
    recipe = artifacts.read(cfg, "recipe") if artifacts.exists(cfg, "recipe") else None
    if recipe is not None and len(recipe):
        out["recipe"] = {f"{r['step']} / {r['reranker']}": {c: (r[c].item() if hasattr(r[c], "item") else r[c])
                                                            for c in RECIPE_PINNED} for _, r in recipe.iterrows()}
    return out


def compare(expected, actual, tol: float = 1e-6, where: str = "") -> list[str]:
    """Differences between two headline dicts: numbers beyond ``tol`` (absolute), anything else unequal. At the
    top level, an :func:`optional` section the pinned file does not hold is not compared."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in sorted(set(expected) | set(actual)):
            if not where and k in optional() and k not in expected:
                continue
            if k not in actual or k not in expected:
                out.append(f"{where}{k}: {'missing' if k not in actual else 'unexpected'}")
            else:
                out += compare(expected[k], actual[k], tol, f"{where}{k}.")
        return out
    if isinstance(expected, float) or isinstance(actual, float):
        both_nan = isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) \
            and math.isnan(actual)
        if both_nan or abs(float(expected) - float(actual)) <= tol:
            return []
    elif expected == actual:
        return []
    return [f"{where.rstrip('.')}: pinned {expected!r}, got {actual!r}"]


def golden_path(root: Path, corpus: str) -> Path:
    return root / "tests" / "golden" / f"{corpus}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--write", action="store_true", help="re-pin the golden file from the current run")
    args = ap.parse_args(argv)
    root = Path.cwd()
    cfg = config.load(root / "params" / f"{args.corpus}.yaml", root=root)
    got = headline(cfg)
    path = golden_path(root, cfg.corpus)
    if args.write:
        artifacts.write_json_file(path, got)
        print(f"pinned {path}")
        return 0
    diffs = compare(json.loads(path.read_text()), got)
    print("\n".join(diffs) or f"{cfg.corpus}: matches {path}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
