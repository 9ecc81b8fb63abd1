"""The real heading path of the section a chunk's content starts in (A3, A3-dN, G3; a user's ``path``)."""

from __future__ import annotations

import pandas as pd

from ..prefix_kinds import PrefixInputs, PrefixKind, cut_paths, render_prefix


class HeadingPath(PrefixKind):
    """The real heading path of the section the chunk's content starts in, cut to the condition's depth:
    ``"[Title › Section › Subsection]\\n\\n"``."""

    name = "path"
    order = 40
    text = "the real heading path of the chunk's section, [Title › Section › Subsection], cut to a depth"
    heading_path = True

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        paths = cut_paths(chunks, inputs)
        return [render_prefix(inputs.titles[d], p) for d, p in zip(chunks["doc_id"], paths)], None


KIND = HeadingPath()
