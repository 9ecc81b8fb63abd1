"""A situating context of the chunk in its document (A1: Anthropic's contextual retrieval recipe, or the
extractive baseline), written by 02 for every chunk of the condition's chunk set."""

from __future__ import annotations

import pandas as pd

from ..prefix_kinds import PrefixError, PrefixInputs, PrefixKind


def situating(chunks: pd.DataFrame, inputs: PrefixInputs) -> list[str]:
    """The context 02 wrote for each chunk, followed by ``"\\n\\n"`` (an empty context gives no prefix), looked up
    by ``(doc_id, start, end)`` among the contexts of the condition's chunk set (``inputs.contexts``); a missing or
    duplicated window is an error naming the chunk set and an example."""
    c = inputs.condition
    if inputs.contexts is None:
        raise PrefixError(f"condition {c.name}: its {c.prefix} prefix needs contexts_a1 (written by 02_induce) and "
                          "none was given")
    ctx = inputs.contexts[["doc_id", "start", "end", "context"]]
    dup = ctx.duplicated(["doc_id", "start", "end"])
    if dup.any():
        r = ctx[dup].iloc[0]
        raise PrefixError(f"contexts_a1: {int(dup.sum())} duplicate window(s) of chunk set {c.chunk_set}, e.g. doc "
                          f"{r.doc_id!r} [{r.start},{r.end}); written by 02_induce")
    look = {(d, int(s), int(e)): x for d, s, e, x in ctx.itertuples(index=False)}
    out, missing = [], []
    for d, s, e in zip(chunks["doc_id"], chunks["start"], chunks["end"]):
        x = look.get((d, int(s), int(e)))
        if x is None:
            missing.append((d, s, e))
            x = ""
        x = str(x).strip()
        out.append(x + "\n\n" if x else "")
    if missing:
        d, s, e = missing[0]
        raise PrefixError(f"contexts_a1: no context for {len(missing)} of {len(chunks)} {c.chunk_set} chunks, e.g. "
                          f"doc {d!r} [{s},{e}); 02_induce writes one per chunk of every chunk set a context "
                          "condition names, with the same chunking parameters as 04")
    return out


class Context(PrefixKind):
    """The situating context 02 wrote for each chunk of the condition's chunk set, followed by ``"\\n\\n"``
    (:func:`situating`)."""

    name = "context"
    order = 30
    text = "a situating context of the chunk in its document (A1; LLM or the extractive baseline)"
    contexts = True

    def render(self, chunks: pd.DataFrame, inputs: PrefixInputs) -> tuple[list[str], pd.DataFrame | None]:
        return situating(chunks, inputs), None


KIND = Context()
