"""Writing the report of stage 08 under ``figures/<corpus>/``: every table, figure, ``report.md`` and
``report.html``, through :mod:`chunkstudy.artifacts` (which knows every path)."""

from __future__ import annotations

import pandas as pd

from .. import artifacts
from ..config import Config
from . import html, tables
from .contents import render
from .bundle import Bundle


def write_all(cfg: Config, b: Bundle, params_file: str = "") -> pd.DataFrame:
    """Write every table (``tables/<name>.md`` and ``.tex``), every figure (``<name>.<fmt>``), ``report.md`` and
    ``report.html`` (:mod:`chunkstudy.report.html`: the same report, self-contained) under ``figures/<corpus>/``
    through :mod:`chunkstudy.artifacts`; returns the list of files written."""
    written = []
    for t in b.tables.values():
        written.append(("table", t.name, artifacts.write_text(cfg, artifacts.report_table(t.name, "md"),
                                                                f"# {tables.md_escape(t.title)}\n\n"
                                                                + t.markdown())))
        written.append(("table", t.name, artifacts.write_text(cfg, artifacts.report_table(t.name, "tex"), t.latex())))
    for name, fig in b.figures.items():
        written += [("figure", name, p) for p in artifacts.write_figure(cfg, name, fig)]
    markdown = render(b, cfg.params(), params_file)
    written.append(("report", "report", artifacts.write_text(cfg, "report.md", markdown)))
    written.append(("report", "report.html", artifacts.write_text(
        cfg, "report.html", html.render(b, markdown, cfg.params("figures").dpi))))
    return pd.DataFrame([(k, n, artifacts.project_relative(cfg, p)) for k, n, p in written],
                        columns=["kind", "name", "path"])
