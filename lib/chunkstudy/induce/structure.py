"""The one entry point of stage 02's structure induction: check the documents, fit the shared lexicon, run the
configured inducer (:mod:`.outline` for the LLM arm, :mod:`.texttiling` for the baseline) and return the
sections and the log."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from ..corpus import model as docmodel
from ..params import InduceParams
from .common import LOG_COLUMNS, InductionError, _docs, _fit_lexicon
from .outline import _llm
from .texttiling import _texttiling


def induce_structure(documents: pd.DataFrame, paragraphs: pd.DataFrame, induce_params: InduceParams,
                     client=None, embed: Callable[[list[str]], np.ndarray] | None = None
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Induce an outline for every document; return ``(sections_induced, induction_log)``.

    ``sections_induced`` follows the section schema of :mod:`chunkstudy.corpus.model` (offsets are half-open
    character indices into ``documents.text``, from the paragraph table) and verifies for every document.
    ``induction_log`` has one row per document: ``doc_id, status ("ok" | "repaired" | "failed"), method,
    rounds (model calls per window, max over windows), n_windows, n_sections, fixed_by, n_violations and
    violations (of the first reply, JSON list, first 20), error, model``.

    ``induce_params`` is the ``induce`` record, ``cfg.params("induce")``. ``method: llm`` needs ``client`` (:func:`llm.make_client`);
    ``method: texttiling`` ignores it and uses ``embed(texts) -> vectors`` for gap scores when given (else
    tf-idf). Inputs are not modified.
    """
    p = induce_params
    docs = _docs(documents, paragraphs)
    lex = _fit_lexicon(docs)
    if p.method == "texttiling":
        sections, log = _texttiling(docs, p, lex, embed)
    elif p.method == "llm":
        if client is None:
            raise InductionError("induce.method is 'llm' but no LLM client was given (llm.make_client)")
        sections, log = _llm(docs, p, lex, client)
    else:
        raise InductionError(f"induce.method {p.method!r} is not one of ['llm', 'texttiling']")
    secs = pd.concat(sections, ignore_index=True) if sections else pd.DataFrame(columns=docmodel.SECTION_COLUMNS)
    return secs, pd.DataFrame(log, columns=LOG_COLUMNS)
