"""The cross-corpus replication table of stage 08: the confirmatory contrasts of each corpus's 07_stats side by
side, with 07's decision (``significant``, by the test that decided: ``decided_by``; before that column,
``reject_holm``) and inference floor read, never recomputed. Pure."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from .. import stages
from . import tables


def _sign(x: float) -> str:
    return "?" if pd.isna(x) else "+" if x > 0 else "\u2212" if x < 0 else "0"


def replication_table(contrasts_by_corpus: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The four pre-registered contrasts side by side across corpora (paper §6: "Three contrasts replicate across
    both corpora with the same sign and Holm significance. One is corpus-dependent.").

    Uses each corpus's confirmatory rows (primary cell) as its 07 wrote them. One row per contrast (in the first
    corpus's order) with, per corpus ``c``: ``delta[c]`` (mean paired delta), ``p_holm[c]``, ``sign[c]`` (+, −, 0,
    ? when missing), ``inference[c]`` (07 found the bootstrap fit for inference: enough documents and resamples)
    and ``significant[c]`` (07's decision, ``significant``: :mod:`chunkstudy.stats.decision`); then
    ``same_sign`` (all corpora share one non-zero sign), ``all_significant`` and ``verdict``: "replicates" (same
    sign and Holm-significant everywhere), "corpus-dependent" (significant somewhere but not replicated), or
    "null" (significant nowhere). Nothing is tested here."""
    if len(contrasts_by_corpus) < 2:
        raise ValueError(f"replication_table: need two or more corpora, got {list(contrasts_by_corpus)}")
    conf = {}
    for corpus, c in contrasts_by_corpus.items():
        stages.check(c, "contrasts", ["contrast", "mean_delta", "p_holm", "reject_holm"], f"corpus {corpus!r}")
        sel = c[c["confirmatory"].astype(bool)] if "confirmatory" in c else c
        if sel.empty:
            raise ValueError(f"replication_table: corpus {corpus!r} has no confirmatory contrasts (07_stats)")
        conf[corpus] = sel.drop_duplicates("contrast").set_index("contrast")
    first = next(iter(conf.values()))
    names = list(dict.fromkeys(first.index.tolist() + [n for c in conf.values() for n in c.index]))
    rows = []
    for name in names:
        src = next(c for c in conf.values() if name in c.index).loc[name]
        row: dict[str, Any] = {"contrast": name, "condition_a": src.get("condition_a", ""),
                               "condition_b": src.get("condition_b", "")}
        for corpus, c in conf.items():
            here = name in c.index
            d = float(c.loc[name, "mean_delta"]) if here else np.nan
            row[f"delta[{corpus}]"] = d
            calibrated = here and "decided_by" in c and c.loc[name, "decided_by"] == "calibrated"
            row[f"p_holm[{corpus}]"] = float(c.loc[name, "p_holm_cal" if calibrated else "p_holm"]) if here \
                else np.nan
            row[f"sign[{corpus}]"] = _sign(d)
            row[f"inference[{corpus}]"] = bool(tables.inference_mask(c.loc[[name]]).iat[0]) if here else False
            row[f"significant[{corpus}]"] = bool(c.loc[name, "significant" if "significant" in c else
                                                       "reject_holm"]) if here else False
        signs = {row[f"sign[{c}]"] for c in conf}
        sig = [row[f"significant[{c}]"] for c in conf]
        row["same_sign"] = len(signs) == 1 and signs <= {"+", "\u2212"}
        row["all_significant"] = all(sig)
        row["verdict"] = "replicates" if row["same_sign"] and row["all_significant"] else \
            "corpus-dependent" if any(sig) else "null"
        rows.append(row)
    return pd.DataFrame(rows)


def replication(contrasts_by_corpus: Mapping[str, pd.DataFrame]) -> tables.Table:
    """:func:`replication_table` rendered: per corpus ``Δ (Holm p)`` with a star when 07 rejected it (Holm)."""
    data = replication_table(contrasts_by_corpus)
    display = pd.DataFrame({"Contrast": data["contrast"],
                            "A \u2212 B": [f"{a} \u2212 {b}" for a, b in zip(data["condition_a"],
                                                                            data["condition_b"])]})
    for corpus in contrasts_by_corpus:
        display[f"{corpus}: \u0394 (Holm p)"] = [
            f"{tables.fmt_delta(d)} ({tables.fmt_p(p) if ok else tables.NO_INFERENCE}){' *' if s else ''}"
            for d, p, ok, s in zip(data[f"delta[{corpus}]"], data[f"p_holm[{corpus}]"], data[f"inference[{corpus}]"],
                                   data[f"significant[{corpus}]"])]
    display["Verdict"] = data["verdict"]
    notes: tuple[str, ...] = ("Primary cell of each corpus; * = Holm-significant in that corpus's 07_stats by the "
                              "test that decided there (its Holm p shown). \"replicates\" = same sign and "
                              "Holm-significant on every corpus.",)
    if not all(data[f"inference[{c}]"].all() for c in contrasts_by_corpus):
        notes += (f"{tables.NO_INFERENCE} = not enough documents or resamples for inference on that corpus (its "
                  "report says why); such a contrast is never counted as significant.",)
    return tables.Table("replication", "Replication of the pre-registered contrasts across corpora", data, display,
                        notes)
