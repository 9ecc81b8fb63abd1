"""The paper's tables, rebuilt from a run's own tables (stage 08; paper §6, Tables 1, 2 and 4, and the funnel and
construction numbers of §3-§5). Also the only place in the project that rounds numbers.

Every builder is pure: it takes the tables of stages 01-07 and returns a :class:`Table`, which keeps two views:

* ``data``: the unrounded values (what tests check, and what a reader can recompute);
* ``display``: the same rows as strings, rounded by the formatters below (:func:`fmt_num`, :func:`fmt_delta`,
  :func:`fmt_p`, :func:`fmt_ci`, :func:`fmt_pct`, :func:`fmt_int`), rendered to Markdown (``tabulate``, pipe
  format) and LaTeX (``booktabs``: ``\\toprule``/``\\midrule``/``\\bottomrule``).

Rounding policy (stated once): cov-nDCG and other metric means to 3 decimals; paired deltas, CIs and slopes to 4
decimals with an explicit sign; dz to 2 decimals; p-values to 3 decimals, ``< 0.001`` below that, and
``< 1/B`` for a p of exactly 0 (which the Monte-Carlo-correct bootstrap p, at least ``2/(B + 1)``, never is);
shares as percentages with 1 decimal; token means to 1 decimal. A missing value prints as an em dash.

The paper's own numbers (the ``paper`` columns, :data:`PAPER`) come from :mod:`chunkstudy.paper`, their one home.

Layout: :mod:`.formatting` (the formatters, the only rounding), :mod:`.record` (the :class:`Table` record and its
Markdown/LaTeX renderings), :mod:`.common` (display orders, the paper's numbers, the input check), and the
builders: :mod:`.results` (Tables 1, 2, 4, the exploratory tables, power), :mod:`.construction` (funnels,
induction, size matching, placebo), :mod:`.costs` (cost), :mod:`.multiverse` (the specification curves) and
:mod:`.modes` (the retrieval modes and Anthropic's recipe).
Every name is re-exported here: ``chunkstudy.report.tables.table2`` and the like.
"""

from __future__ import annotations

from .formatting import (  # noqa: F401
    DASH, _missing, fmt_num, fmt_delta, fmt_int, fmt_pct, fmt_ci, fmt_p, fmt_n, fmt_approx_n, fmt_needed,
)
from .record import (  # noqa: F401
    Table, latex_escape, to_latex, md_escape, markdown_table,
)
from .common import (  # noqa: F401
    METRIC_ORDER, CONTRAST_QUESTIONS, PAPER_QUERY_STEPS, PAPER, _order, _require,
    paper_source_label, NO_INFERENCE, PLACEBO_MARK, inference_mask, gated, row_notes, placebo_marks, USER_MARK,
    USER_NOTE, is_user_condition,
)
from .results import (  # noqa: F401
    table1, table2, table4, dose_response, section_recall_table, reranker_lift, per_type, power, user_contrasts,
    paired_mixedlm_note, verdict_cells, verdict_notes, percentile_stars, size_check_note,
)
from .costs import cost  # noqa: F401
from .modes import mode_retrievers, modes_contrasts, modes_per_type, recipe  # noqa: F401
from .multiverse import (AXIS_LABELS, CURVE_NOTE, SPEC_AXES, multiverse, multiverse_axes,  # noqa: F401
                         multiverse_specs, sig_shares)
from .construction import (  # noqa: F401
    corpus_funnel, INDUCTION_ROWS, induction, query_funnel, size_matching, placebo, user_conditions,
)

__all__ = [
    "DASH", "fmt_num", "fmt_delta", "fmt_int", "fmt_pct", "fmt_ci", "fmt_p", "fmt_n", "fmt_approx_n", "fmt_needed",
    "Table", "latex_escape", "to_latex", "md_escape", "markdown_table", "METRIC_ORDER", "CONTRAST_QUESTIONS",
    "PAPER_QUERY_STEPS", "PAPER", "paper_source_label", "NO_INFERENCE", "PLACEBO_MARK", "inference_mask", "gated",
    "row_notes", "placebo_marks", "table1", "table2", "table4", "dose_response",
    "section_recall_table", "reranker_lift", "per_type", "power", "corpus_funnel", "INDUCTION_ROWS", "induction",
    "query_funnel", "size_matching", "placebo", "USER_MARK", "USER_NOTE", "is_user_condition", "user_contrasts",
    "user_conditions", "cost", "paired_mixedlm_note", "verdict_cells", "verdict_notes", "percentile_stars",
    "size_check_note", "CURVE_NOTE", "SPEC_AXES",
    "multiverse", "multiverse_specs", "sig_shares", "AXIS_LABELS", "multiverse_axes", "mode_retrievers", "modes_contrasts",
    "modes_per_type", "recipe",
]
