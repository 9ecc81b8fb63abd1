"""The kind that puts nothing before a chunk: a condition's prefix unless it names another (A0, A2, G2)."""

from __future__ import annotations

import pandas as pd

from ..prefix_kinds import PrefixInputs, PrefixKind


class NoPrefix(PrefixKind):
    """No prefix: the chunk's content is embedded alone."""

    name = "none"
    order = 10
    text = "nothing"

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        return [""] * len(chunks), None


KIND = NoPrefix()
