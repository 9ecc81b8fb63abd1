"""The project's errors share one base, :class:`ChunkstudyError`: ``except ChunkstudyError`` catches every error
chunkstudy raises on purpose — about its inputs, its parameters, its models or its runs — and nothing else.

Each module declares its own errors beside the code that raises them (``ConfigError`` in :mod:`chunkstudy.config`,
``ChunkingError`` in :mod:`chunkstudy.chunks.chunking`, ...). Each also keeps the built-in class it always had
(``ValueError`` for bad input, ``RuntimeError`` for a failed run or model), so a caller catching that still
catches it. A test scans the library for an error class outside this tree. This module imports nothing of the
project. It also holds :func:`lookup`, the one way a declared name is looked up: the error it raises lists what
is declared.
"""

from __future__ import annotations

from typing import Any, Mapping


class ChunkstudyError(Exception):
    """Base of every error chunkstudy raises on purpose (a bad input, parameter, model or run; the message names
    the file, key or document). A bug raises whatever Python raises."""


def lookup(declared: Mapping[str, Any], name: str, what: str, error: type[Exception] = ValueError) -> Any:
    """``declared[name]``; an unknown name raises ``error`` listing the declared ones (``what`` names them)."""
    try:
        return declared[name]
    except KeyError:
        raise error(f"unknown {what} {name!r}; {what}s: {list(declared)}") from None
