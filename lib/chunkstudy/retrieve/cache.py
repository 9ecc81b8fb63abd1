"""Stage 05's content-keyed store of exact dense searches (``data/<corpus>/cache/retrieval/``), so that a rerun of
05 for another reason (a BM25 or fusion parameter, a reranker) never searches the same vectors again.

A search is keyed by what decides its result, never by a name: sha256 of the kind of search and its version, k (and
for two-stage search the sections kept), the candidate backend, the float32 bytes and shape of the query and chunk
vectors, the chunk ids, and the route labels of a routed search. An entry holds the result's arrays and the seconds
the search took when it ran (:func:`chunkstudy.progress.timed`: the cost table's latency is the one measured then,
not a cache read). Entries are written atomically (:func:`chunkstudy.artifacts.atomic_path`); an entry that cannot
be read (a torn or foreign file) is searched again and replaced. The results are bit for bit the search's
(``tests/test_lexical.py``), so the runs of a dense cell do not depend on whether it came from here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import artifacts, progress

#: Bumped when a search's result for the same inputs changes (its tie rule, its kernel's arithmetic).
VERSION = "dense-search-1"


class SearchCache:
    """Results of exact dense searches, one ``.npz`` per key in ``folder``. ``hits`` and ``misses`` count this
    process's lookups (the stage's log and the tests read them)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(kind: str, arrays: Sequence[np.ndarray], strings: Sequence[Sequence[str]], **params: Any) -> str:
        """sha256 of ``kind``, :data:`VERSION`, ``params`` (JSON), each array's dtype, shape and bytes (C order) and
        each list of strings (NUL-separated)."""
        h = hashlib.sha256(json.dumps([VERSION, kind, params], sort_keys=True).encode())
        for a in arrays:
            a = np.ascontiguousarray(a)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
        for s in strings:
            h.update(b"\x1e" + "\x00".join(map(str, s)).encode("utf-8"))
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.npz"

    def get(self, key: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The stored arrays and seconds of ``key``, or None (absent, or unreadable)."""
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files if k != "_seconds"}
                seconds = json.loads(str(z["_seconds"]))
        except Exception:  # a torn or foreign file: search again, and the put replaces it
            return None
        return arrays, seconds

    def put(self, key: str, arrays: Mapping[str, np.ndarray], seconds: Mapping[str, Any]) -> None:
        with artifacts.atomic_path(self._path(key)) as tmp:
            with open(tmp, "wb") as f:
                payload: dict[str, Any] = {"_seconds": np.array(json.dumps(dict(seconds))), **dict(arrays)}
                np.savez(f, **payload)

    def timed(self, key: str, search: Callable[[], dict[str, np.ndarray]], repeats: int) -> tuple[dict, dict]:
        """``search()``'s arrays and its seconds (:func:`chunkstudy.progress.timed`, ``repeats`` timed repeats),
        from the store when ``key`` is there, else searched, timed and stored."""
        found = self.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        arrays, seconds = progress.timed(search, repeats)
        self.put(key, arrays, seconds)
        return arrays, seconds


def timed(cache: SearchCache | None, key: Callable[[], str], search: Callable[[], dict[str, np.ndarray]],
          repeats: int) -> tuple[dict, dict]:
    """:meth:`SearchCache.timed` through ``cache``, or the search timed as it is when there is none (``key`` is
    computed only with a cache: it hashes the vectors)."""
    if cache is None:
        return progress.timed(search, repeats)
    return cache.timed(key(), search, repeats)
