"""07's check of its own tests (stage 07's ``size_check``; docs/design.md, "Calibrated at the sizes users bring"):
at the run's own documents and queries per document, how often the percentile bootstrap and the calibrated test
reject a true null — family-wise (Holm) and per contrast — and how often the paired MixedLM's 95% CI covers it, in
null studies drawn from the run's own re-centred deltas (:mod:`.calibration`). 08 prints "measured size at this run's
structure: X % (± SE)" of the test that decided. Pure; never rounds."""

from __future__ import annotations

import math
from typing import Any, Mapping

import pandas as pd

from .. import stages
from .calibration import Pool, mixed_coverage, pool_from_scores, rates

#: The simulation's procedure (:data:`.calibration.PROCEDURES`) of each test a family can be decided by
#: (:mod:`.decision`).
PROCEDURE_OF = {"percentile": "percentile", "calibrated": "wild"}
SIZE_CHECK_COLUMNS = stages.columns("size_check")


def size_check_rows(pool: Pool | None, family: str, cell: str, decided_by: str, stats_params: Any,
                    mixed: bool, note: str = "") -> list[dict[str, Any]]:
    """07's check of one family (module docstring), at the run's own documents and queries per document: for the
    percentile and the calibrated test, the family-wise size (``contrast`` "any", Holm) and each contrast's size,
    and, with ``mixed``, the paired MixedLM's CI coverage per contrast; ``stats.check_sims`` studies
    (``stats.check_mixed_sims`` for the model), ``stats.check_n_boot`` resamples, seed ``stats.seed``. ``pool``
    None: one row saying why (``note``)."""
    p = stats_params
    alpha = float(p.alpha)
    base = dict(family=family, cell=cell, alpha=alpha, n_boot=int(p.check_n_boot), seed=int(p.seed))
    if pool is None:
        return [dict(base, rule=decided_by, decided=True, measure="family-wise size", contrast="any", rate=math.nan,
                     mc_se=math.nan, n_sims=0, n_docs=0, queries_per_doc=math.nan, note=note)]
    g = int(pool.docs.size)
    base.update(n_docs=g, queries_per_doc=float(pool.counts.mean()), note=note)
    rows = []
    for test, procedure in PROCEDURE_OF.items():
        r = rates(pool, g, procedure, n_sims=int(p.check_sims), n_boot=int(p.check_n_boot), seed=int(p.seed),
                  alpha=alpha)
        common = dict(base, rule=test, decided=test == decided_by, n_sims=int(p.check_sims))
        rows.append(dict(common, measure="family-wise size", contrast="any", rate=r["familywise"],
                         mc_se=r["familywise_se"]))
        rows += [dict(common, measure="size", contrast=name, rate=float(e), mc_se=float(se))
                 for name, e, se in zip(pool.names, r["each"], r["each_se"])]
    if mixed:
        c = mixed_coverage(pool, g, n_sims=int(p.check_mixed_sims), seed=int(p.seed), alpha=alpha)
        rows += [dict(base, rule="paired MixedLM", decided=False, measure="CI coverage", contrast=name,
                      rate=float(e), mc_se=float(se), n_sims=int(p.check_mixed_sims))
                 for name, e, se in zip(pool.names, c["each"], c["each_se"])]
    return rows


def size_check_table(scores: pd.DataFrame, queries: pd.DataFrame, stats_params: Any, primary: Any, corpus: str,
                     families: Mapping[str, tuple[Mapping[str, tuple[str, str]], pd.DataFrame]]) -> pd.DataFrame:
    """07's ``size_check`` (:func:`size_check_rows`) of each family in the primary cell: ``families`` maps a label
    (``confirmatory``, ``exploratory (user-added)``) to its contrasts and its 07 contrast table, whose primary-cell
    rows say which test decided (``decided_by``). A family with no contrast, or whose pool cannot be built (a
    contrast absent from the primary cell, fewer than 2 documents), gets one row saying why."""
    rows: list[dict[str, Any]] = []
    cell = tuple(primary)
    name = "|".join(cell)
    for label, (contrasts, table) in families.items():
        if not contrasts:
            continue
        here = table[table["cell"] == name] if "cell" in table else table
        decided_by = str(here["decided_by"].iat[0]) if "decided_by" in here and len(here) else "percentile"
        try:
            pool: Pool | None = pool_from_scores(scores, queries, contrasts, cell, corpus)
            note = ""
        except (ValueError, KeyError) as e:
            pool, note = None, f"not checked: {e}"
        if pool is not None and pool.docs.size < 2:
            pool, note = None, "not checked: 1 document"
        rows += size_check_rows(pool, label, name, decided_by, stats_params,
                                mixed=label == "confirmatory" and bool(stats_params.mixedlm), note=note)
    return pd.DataFrame(rows, columns=SIZE_CHECK_COLUMNS)
