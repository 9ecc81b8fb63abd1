"""The prefix kinds, one module each: every module here that declares ``KIND`` (an instance of a
:class:`chunkstudy.prefix_kinds.PrefixKind` subclass) is a kind, found by its file
(:func:`chunkstudy.prefix_kinds.discover`). The paper's five are ``none``, ``title``, ``context`` (A1), ``path``
(A3, A3-dN, G3) and ``placebo`` (P); a new file here is a new kind (docs/extending.md, "A prefix kind").

The kinds import :mod:`chunkstudy.prefix_kinds` while it discovers this package, so this ``__init__`` imports
nothing.
"""
