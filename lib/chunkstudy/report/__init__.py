"""Stage 08, the report: every table and figure of one run, ``report.md`` and the self-contained ``report.html``
under ``figures/<corpus>/``. Only this stage rounds numbers (:mod:`.tables`' formatters).

Where it lives: :mod:`.report` (reading the inputs, the warnings, assembling a :class:`~.bundle.Bundle`, the
Markdown, writing every file through :mod:`chunkstudy.artifacts`: the notebook ``08_figures`` calls its
``gather``, ``partner_contrasts``, ``build`` and ``write_all``), :mod:`.bundle` (the record both renderings read),
:mod:`.html` (the HTML page, from ``templates/report.html.j2``, package data), :mod:`.tables` (the paper's tables,
which stages 02 and 04 also display), :mod:`.figures` (the paper's figures) and :mod:`.drilldown` (the per-query
drill-down that 06 computed, formatted).

This ``__init__`` imports nothing: a stage that displays one of the paper's tables (``from chunkstudy.report
import tables``) loads, and hashes (:func:`chunkstudy.codehash.module_closure`), the tables alone, not the figures.
"""
