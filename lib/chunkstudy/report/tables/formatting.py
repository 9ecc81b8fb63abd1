"""Formatting: the only rounding in the project (the policy is stated in :mod:`chunkstudy.report.tables`). Every
formatter maps a missing value to an em dash (:data:`DASH`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

DASH = "\u2014"



def _missing(x: Any) -> bool:
    if x is None or x is pd.NA:
        return True
    try:
        return bool(np.isnan(x))
    except (TypeError, ValueError):
        return False


def fmt_num(x: Any, digits: int = 3) -> str:
    """``x`` to ``digits`` decimals; missing -> em dash."""
    return DASH if _missing(x) else f"{float(x):.{digits}f}"


def fmt_delta(x: Any, digits: int = 4) -> str:
    """A signed difference, e.g. ``+0.0129`` / ``-0.0326``; missing -> em dash."""
    return DASH if _missing(x) else f"{float(x):+.{digits}f}"


def fmt_int(x: Any) -> str:
    """An integer with thousands separators (``1,579``); missing -> em dash."""
    return DASH if _missing(x) else f"{int(round(float(x))):,}"


def fmt_pct(x: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage (``0.789`` -> ``78.9%``); missing -> em dash."""
    return DASH if _missing(x) else f"{100 * float(x):.{digits}f}%"


def fmt_ci(lo: Any, hi: Any, digits: int = 4) -> str:
    """A signed interval ``[+0.0100, +0.0300]``; missing -> em dash."""
    if _missing(lo) or _missing(hi):
        return DASH
    return f"[{float(lo):+.{digits}f}, {float(hi):+.{digits}f}]"


def fmt_p(p: Any, n_boot: Any = None) -> str:
    """A p-value: 3 decimals; ``< 0.001`` below 0.001; ``< 1/B`` (e.g. ``< 0.0001``) when a bootstrap p is
    exactly 0 with ``n_boot = B`` resamples (its resolution); missing -> em dash."""
    if _missing(p):
        return DASH
    p = float(p)
    if p == 0.0 and not _missing(n_boot) and n_boot:
        return f"< {1.0 / float(n_boot):.2g}"
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3f}"


def fmt_n(n_queries: Any, n_docs: Any) -> str:
    """``"951 / 184"``: queries / documents."""
    return f"{fmt_int(n_queries)} / {fmt_int(n_docs)}"


def fmt_approx_n(x: Any) -> str:
    """A corpus size read off a simulated power curve, to 2 significant digits (``276.1`` -> ``280``,
    ``1424`` -> ``1,400``, ``19.2`` -> ``19``); missing -> em dash."""
    if _missing(x):
        return DASH
    v = float(x)
    if v <= 0:
        return fmt_int(v)
    return fmt_int(round(v, 1 - int(math.floor(math.log10(v)))))


def fmt_needed(n: Any, status: str, largest: Any) -> str:
    """The documents a contrast needs, as the report prints it: ``≈ 280``, ``> 5,000`` (no simulated size
    reaches the target), ``≤ 5`` (the smallest already does), ``no effect`` (target dz 0) or an em dash."""
    if status == "interpolated":
        return f"\u2248 {fmt_approx_n(n)}"
    if status == "at_or_below_smallest":
        return f"\u2264 {fmt_int(n)}"
    if status == "above_largest":
        return f"> {fmt_int(largest)}"
    if status == "no_effect":
        return "no effect"
    return DASH
