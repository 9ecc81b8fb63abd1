"""Download upstream corpus files (``corpus.fetch_urls``) into a cache folder when no local mirror is set.

Never runs in tests except with a fake session. A file already present is not downloaded again; a download is
written to a temporary file and renamed into place, so an interrupted download never looks complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from ..artifacts import atomic_path


def download(urls: Iterable[str], dest: Path, session=None, chunk: int = 1 << 20) -> list[Path]:
    """Fetch each URL into ``dest/<basename>`` (skipping files already there); return the local paths.

    ``session`` is a ``requests.Session`` (created when None) or any object whose ``get(url, stream=True,
    timeout=...)`` returns a response with ``raise_for_status()`` and ``iter_content(chunk)``.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for url in urls:
        name = Path(urlparse(url).path).name
        if not name:
            raise ValueError(f"corpus.fetch_urls: cannot name a file for {url!r}")
        path = dest / name
        if not path.is_file():
            if session is None:
                import requests

                session = requests.Session()
            resp = session.get(url, stream=True, timeout=120)
            resp.raise_for_status()
            with atomic_path(path) as tmp, open(tmp, "wb") as fh:
                for block in resp.iter_content(chunk):
                    fh.write(block)
        out.append(path)
    return out
