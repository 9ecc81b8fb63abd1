"""The paper's reported numbers — STUB until fidelity's ``paper.py`` lands (issue 14 §6: one home for the
paper's numbers). The lead reconciles this file with fidelity's at merge; nothing else in this branch holds a
copy of these effect sizes.

Only the accessor the power analysis needs (issue 18 §2) is here: :func:`effects_dz`.
"""

from __future__ import annotations

import math

#: Corpus kinds the paper ran, with the label it uses for them.
PAPER_CORPORA: dict[str, str] = {"wikipedia": "Wikipedia-FA", "qasper": "QASPER"}

# Cohen's dz of the four pre-registered contrasts on the primary cell, as far as the paper's text states them.
# The text does not print Table 1's dz per contrast; it says (§6 and the statistics appendix):
#   Wikipedia-FA: C4 dz = -0.17 ("roughly twice the others"); C1/C2/C3 "dz ≈ 0.08–0.10" -> the midpoint 0.09.
#   QASPER: "dz 0.06–0.11" over the non-null effects, C2 "the largest and most significant contrast" -> 0.11;
#   the others are not stated per contrast (NaN: the power analysis notes them as unavailable).
_EFFECTS_DZ: dict[str, dict[str, float]] = {
    "wikipedia": {"C1": 0.09, "C2": 0.09, "C3": 0.09, "C4": -0.17},
    "qasper": {"C1": math.nan, "C2": 0.11, "C3": math.nan, "C4": math.nan},
}


def effects_dz(corpus_kind: str) -> dict[str, float]:
    """The paper's Cohen's dz per pre-registered contrast (``{"C1": ..., "C4": ...}``, signed as ``A − B``) on
    the corpus of kind ``corpus_kind`` (``wikipedia`` = Wikipedia-FA, ``qasper`` = QASPER). NaN where the paper's
    text gives no per-contrast value. Stub until fidelity's paper.py lands."""
    if corpus_kind not in _EFFECTS_DZ:
        raise KeyError(f"paper.effects_dz: the paper reports no corpus of kind {corpus_kind!r}; "
                       f"kinds: {sorted(_EFFECTS_DZ)}")
    return dict(_EFFECTS_DZ[corpus_kind])
