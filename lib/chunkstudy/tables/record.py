"""The :class:`Table` record every builder returns (unrounded ``data`` beside rounded ``display``) and its
renderings: Markdown (``tabulate``, pipe format) and LaTeX (``booktabs``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd



@dataclass(frozen=True)
class Table:
    """One table of the report: ``name`` (file stem), ``title`` (caption), ``data`` (unrounded), ``display``
    (rounded strings, the rendered rows), ``notes`` (printed under the table)."""

    name: str
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)

    def markdown(self) -> str:
        """A pipe table (tabulate) followed by its notes as a list."""
        body = self.display.to_markdown(index=False, disable_numparse=True) if len(self.display.columns) else ""
        if self.display.empty:
            body = "_(no rows)_"
        notes = "".join(f"\n- {n}" for n in self.notes)
        return body + ("\n" + notes if notes else "") + "\n"

    def latex(self) -> str:
        """A LaTeX ``table`` float with a booktabs ``tabular`` (numeric-looking columns right-aligned)."""
        return to_latex(self.display, caption=self.title, label=f"tab:{self.name}", notes=self.notes)


_NUMERIC_CELL = re.compile(r"^[\s<>+\-\u2212\d.,%\[\]/\u2014*]*$")

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"$<$", ">": r"$>$",
    "\u0394": r"$\Delta$", "\u2212": r"$-$", "\u203a": r"$\rangle$", "\u2264": r"$\le$", "\u2265": r"$\ge$",
    "\u00d7": r"$\times$", "\u2192": r"$\rightarrow$", "\u2014": "---", "\u2013": "--", "\u00b1": r"$\pm$",
}


def latex_escape(s: Any) -> str:
    """Escape LaTeX specials and map the few non-ASCII symbols the tables use (Δ − › ≤ ≥ × → —) to LaTeX."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(s))


def to_latex(display: pd.DataFrame, caption: str, label: str, notes: Sequence[str] = ()) -> str:
    """Render string rows as a booktabs table: ``\\toprule`` header ``\\midrule`` rows ``\\bottomrule``.
    Columns whose every cell looks numeric are right-aligned, the others left-aligned."""
    cols = list(display.columns)
    align = "".join("r" if len(display) and display[c].astype(str).map(lambda v: bool(_NUMERIC_CELL.match(v))).all()
                    else "l" for c in cols)
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{latex_escape(caption)}}}",
             f"\\label{{{label}}}", f"\\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(latex_escape(c) for c in cols) + r" \\", r"\midrule"]
    for row in display.itertuples(index=False):
        lines.append(" & ".join(latex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if notes:
        lines.append(r"\par\smallskip\footnotesize " + " ".join(latex_escape(n) for n in notes))
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
