"""What a vector must be before it is stored, and what a server's reply must be as a whole (docs/models.md, "The
embedding store"; docs/servers.md, "What is checked"): one place for the checks every embedding path passes through
(:mod:`chunkstudy.embed`, :mod:`chunkstudy.embed_served`, :mod:`chunkstudy.embed_store`, late pooling).

* :func:`check_vectors` — finite, non-zero, unit-normalised, of the model's dimension; :class:`BadVector` names the
  embedder, its server or model and the text otherwise.
* :func:`normalise` — unit rows whatever their scale (1e-30 and 1e25 alike).
* :func:`identical_batch` — a reply that gives two distinct texts or more one vector.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from .errors import ChunkstudyError


class EmbedError(ChunkstudyError, RuntimeError):
    """An embedder cannot be built or called (the message names the parameter key and the backend)."""


def normalise(v: Any) -> np.ndarray:
    """Rows of ``v`` scaled to unit L2 norm, float32, whatever their scale: each row is divided by its largest
    absolute entry before its norm is taken, in float64, so a row of 1e-30s (whose float32 squares underflow to a
    norm of 0) and a row of 1e25s (whose squares overflow to infinity) come out as the unit vectors they point
    along. A zero row stays zero and a NaN or infinite one becomes NaN: :func:`check_vectors` refuses both."""
    return unit_rows(v).astype(np.float32)


def unit_rows(v: Any) -> np.ndarray:
    """:func:`normalise` in float64 (the cosines of :func:`identical_batch` are taken on these)."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 2 or not v.size:
        return v
    with np.errstate(invalid="ignore"):
        scale = np.abs(v).max(axis=1, keepdims=True)
        u = v / np.where((scale > 0) & np.isfinite(scale), scale, 1.0)
        u = np.where(np.isfinite(scale), u, np.nan)
        n = np.linalg.norm(u, axis=1, keepdims=True)
        return u / np.where(n > 0, n, 1.0)


#: what every stored vector's L2 norm must be: vectors are unit-normalised (inner product = cosine), so a norm off 1
#: by more than this is a vector the normalisation missed, refused before it is stored (:func:`check_vectors`)
NORM_TOLERANCE = 1e-3


class BadVector(EmbedError):
    """A vector that must not be stored: not finite, all zero, not unit-normalised, or not of the model's dimension
    (:func:`check_vectors`)."""


def bad_rows(vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a ``(n, d)`` matrix that hold a NaN or an infinity, and rows whose norm is 0 (boolean masks; the norm
    is taken in float64, so no finite float32 row overflows to a false infinity)."""
    v = np.asarray(vecs)
    finite = np.isfinite(v).all(axis=1)
    zero = finite & (np.linalg.norm(np.where(np.isfinite(v), v, 0).astype(np.float64), axis=1) == 0)
    return ~finite, zero


def check_vectors(vecs: Any, keys: Sequence[str], where: str, dim: int | None = None) -> np.ndarray:
    """``vecs`` as float32 ``(len(keys), d)`` when every row may be stored: finite, of norm > 0, unit-normalised
    (norm 1 within :data:`NORM_TOLERANCE`) and of dimension ``dim`` (when given: the model's); else
    :class:`BadVector` naming ``where`` (the embedder and its server or model), the content key (``keys[i]``: the
    text's sha256, :func:`text_key`) of the first bad row, the condition and how many rows of the batch have it.
    Every vector is checked here before it is stored (:mod:`chunkstudy.embed_store`), whatever computed it: a zero
    vector would rank as no text does, a NaN poisons every score."""
    v = np.asarray(vecs, dtype=np.float32)
    n = len(keys)
    if v.ndim != 2 or v.shape[0] != n:
        raise BadVector(f"{where}: {n} keys but vectors of shape {v.shape}; nothing of this batch is stored")
    if dim is not None and n and v.shape[1] != dim:
        raise BadVector(f"{where}: the vector of text {keys[0]} has dimension {v.shape[1]}, the model's is {dim}; "
                        "nothing of this batch is stored")
    nonfinite, zero = bad_rows(v)
    for mask, what in ((nonfinite, "holds NaN or infinity"), (zero, "is all zero (norm 0)")):
        if mask.any():
            i = int(np.argmax(mask))
            raise BadVector(f"{where}: the vector of text {keys[i]} {what} ({int(mask.sum())} of the batch's {n} "
                            "vectors); nothing of this batch is stored")
    norms = np.linalg.norm(v.astype(np.float64), axis=1)
    off = np.abs(norms - 1.0) > NORM_TOLERANCE
    if off.any():
        i = int(np.argmax(off))
        raise BadVector(f"{where}: the vector of text {keys[i]} has norm {norms[i]:.6g}, not 1 (within "
                        f"{NORM_TOLERANCE:g}): it was not normalised ({int(off.sum())} of the batch's {n} vectors); "
                        "nothing of this batch is stored")
    return v


class BadReply(EmbedError):
    """A server's reply that cannot be taken as a whole: its ``index`` fields not a permutation of the texts sent,
    vectors of different lengths, or one vector for texts that differ
    (:meth:`chunkstudy.embed_served.ServedEmbeddings.parse`)."""


#: a reply whose vectors for two distinct texts or more all have at least this cosine to its first vector is
#: refused (:func:`identical_batch`): a server that gives every text one vector (a broken pooling, a model that
#: ignores its input) would make every score equal. Distinct texts of a real model stay far below it: texts that
#: differ in a word have cosines around 0.9-0.99
IDENTICAL_MIN_COSINE = 1 - 1e-6


def distinct_texts(texts: Sequence[str]) -> set[str]:
    """The texts that differ once case and white space are folded (what an uncased tokenizer reads alike is one)."""
    return {" ".join(t.casefold().split()) for t in texts}


def identical_batch(vecs: np.ndarray, texts: Sequence[str]) -> float | None:
    """The least cosine (float64) between the first vector of a batch and the others when the batch holds two
    :func:`distinct_texts` or more and every vector has cosine >= :data:`IDENTICAL_MIN_COSINE` to the first (the
    batch is refused); None otherwise (also for a batch with a NaN or zero vector: :func:`check_vectors` names
    those)."""
    if len(distinct_texts(texts)) < 2:
        return None
    u = unit_rows(vecs)
    if not np.isfinite(u).all() or (np.linalg.norm(u, axis=1) == 0).any():
        return None
    least = float((u @ u[0]).min())
    return least if least >= IDENTICAL_MIN_COSINE else None


def text_key(text: str) -> str:
    """The store key of an exact text: sha256 of its UTF-8 bytes (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
