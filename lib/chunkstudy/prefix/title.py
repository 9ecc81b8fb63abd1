"""The document title alone, ``"[Title]\\n\\n"``: a heading path of depth 0."""

from __future__ import annotations

import pandas as pd

from ..prefix_kinds import PrefixInputs, PrefixKind, render_prefix


class Title(PrefixKind):
    """The document title alone, ``"[Title]\\n\\n"`` (a heading path of depth 0)."""

    name = "title"
    order = 20
    text = "the document title alone: [Title]"

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        return [render_prefix(inputs.titles[d], []) for d in chunks["doc_id"]], None


KIND = Title()
