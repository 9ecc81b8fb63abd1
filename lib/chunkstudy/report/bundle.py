"""The report's contents, one record (stage 08): what :func:`chunkstudy.report.report.build` assembles and both
renderings read, the Markdown (:func:`chunkstudy.report.report.render`) and the HTML
(:mod:`chunkstudy.report.html`). A module of its own so that neither rendering imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from . import tables


@dataclass
class Bundle:
    """Everything one report holds: tables and figures by name (report order), notes on missing inputs, model
    warnings, and the facts the text quotes."""

    corpus: str
    tables: dict[str, tables.Table] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    models: pd.DataFrame | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    drilldown: list = field(default_factory=list)  # report.drilldown.ContrastDrill per contrast (html)
    curves: list = field(default_factory=list)  # tables.Table of every specification per contrast (html)
    environment: pd.DataFrame | None = None
    packages: pd.DataFrame | None = None
