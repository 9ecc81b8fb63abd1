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
        """A pipe table (tabulate) followed by its notes as a list; every header, cell and note escaped
        (:func:`md_escape`), so text from the corpus renders as itself."""
        body = markdown_table(self.display) if len(self.display.columns) else ""
        if self.display.empty:
            body = "_(no rows)_"
        notes = "".join(f"\n- {md_escape(n)}" for n in self.notes)
        return body + ("\n" + notes if notes else "") + "\n"

    def latex(self) -> str:
        """A LaTeX ``table`` float with a booktabs ``tabular`` (numeric-looking columns right-aligned)."""
        return to_latex(self.display, caption=self.title, label=f"tab:{self.name}", notes=self.notes)


#: Characters that could start Markdown inline markup (emphasis, code, links and images — a "]" opens nothing —,
#: entities, GitHub's strikethrough and math) or end a pipe-table cell: each is backslash-escaped in text from a run.
_MD_SPECIAL = re.compile(r"([\\`*\[|&~$])")
#: "<" only where it could open an HTML tag or an autolink ("< 0.001" stays as it is).
_MD_ANGLE = re.compile(r"<(?=[A-Za-z/!?])")
#: A run of underscores; one between two letters or digits (``07_stats``) cannot open or close emphasis
#: (CommonMark's flanking rules) and stays as it is.
_MD_UNDERSCORES = re.compile(r"_+")


def _underscores(m: re.Match) -> str:
    s, i, j = m.string, m.start(), m.end()
    inside_word = i > 0 and j < len(s) and s[i - 1].isalnum() and s[j].isalnum()
    return m.group(0) if inside_word else "\\_" * (j - i)


def md_escape(text: Any) -> str:
    """Text that renders as itself in one line of Markdown, a pipe-table cell included: line breaks become spaces
    and every character that could start inline markup or end the cell is backslash-escaped, so a ``|`` in a
    question cannot shift a table's columns and ``![x](http://...)`` in a corpus stays text, never an image or
    a link (CommonMark: a backslash before ASCII punctuation makes it literal). Characters that cannot start
    markup where they stand are left alone, so the Markdown stays readable: ``< 0.001``, ``07_stats``."""
    s = re.sub(r"[\r\n]+", " ", str(text))
    s = _MD_SPECIAL.sub(lambda m: "\\" + m.group(1), s)
    s = _MD_UNDERSCORES.sub(_underscores, s)
    return _MD_ANGLE.sub(r"\\<", s)


def markdown_table(df: pd.DataFrame) -> str:
    """A DataFrame as a Markdown pipe table (tabulate) with every header and cell escaped (:func:`md_escape`):
    the one way the report writes a table, whatever its cells hold."""
    from tabulate import tabulate

    rows = [[md_escape(v) for v in row] for row in df.itertuples(index=False)]
    return tabulate(rows, headers=[md_escape(c) for c in df.columns], tablefmt="pipe", disable_numparse=True)


_NUMERIC_CELL = re.compile(r"^[\s<>+\-\u2212\d.,%\[\]/\u2014*]*$")

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"$<$", ">": r"$>$",
    "\u0394": r"$\Delta$", "\u2212": r"$-$", "\u203a": r"$\rangle$", "\u2264": r"$\le$", "\u2265": r"$\ge$",
    "\u00d7": r"$\times$", "\u2192": r"$\rightarrow$", "\u2014": "---", "\u2013": "--", "\u00b1": r"$\pm$",
    "\u2020": r"\dag{}", "\u2021": r"\ddag{}",
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
