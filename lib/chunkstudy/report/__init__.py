"""Stage 08, the report: every table and figure of one run, ``report.md`` and the self-contained ``report.html``
under ``figures/<corpus>/`` (the notebook ``08_figures`` calls :func:`gather`, :func:`partner_contrasts`,
:func:`build` and :func:`write_all`). Only this stage rounds numbers (:mod:`.tables`' formatters).

Where it lives: :mod:`.contents` (reading the inputs, the warnings, assembling a :class:`~.bundle.Bundle`, the
Markdown), :mod:`.bundle` (the record both renderings read), :mod:`.html` (the HTML page, from
``templates/report.html.j2``, package data), :mod:`.write` (writing every file through
:mod:`chunkstudy.artifacts`), :mod:`.tables` (the paper's tables), :mod:`.figures` (the paper's figures) and
:mod:`.drilldown` (the per-query drill-down that 06 computed, formatted).
"""

from .bundle import Bundle
from .contents import (FIGURE_CAPTIONS, INPUT_JSON, INPUT_TABLES, PAPER_BM25, Partner, build, corpus_size_warnings,
                       environment_table, gather, inference_thresholds, inference_warnings, model_warnings,
                       models_used, package_versions, partner_contrasts, placebo_warnings, power_markdown,
                       power_sentences, precision_text, render, replication, replication_table, run_facts,
                       stage_warnings, table_markdown, tables_markdown, user_registration, warnings_markdown)
from .write import write_all

__all__ = ["Bundle", "FIGURE_CAPTIONS", "INPUT_JSON", "INPUT_TABLES", "PAPER_BM25", "Partner", "build",
           "corpus_size_warnings", "environment_table", "gather", "inference_thresholds", "inference_warnings",
           "model_warnings", "models_used", "package_versions", "partner_contrasts", "placebo_warnings",
           "power_markdown", "power_sentences", "precision_text", "render", "replication", "replication_table",
           "run_facts", "stage_warnings", "table_markdown", "tables_markdown", "user_registration",
           "warnings_markdown", "write_all"]
