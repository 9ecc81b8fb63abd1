"""The verdicts beside Holm's, one module each (docs/extending.md, "Another verdict"): a module here declares
``VERDICT``, one object that meets :class:`chunkstudy.stats.verdict_protocols.RegisteredVerdict` (its statistic,
how the report prints it, and its ``order``), and that file is its whole registration: the registry,
:mod:`chunkstudy.stats.verdicts`, finds every module of this package by its file (:func:`chunkstudy.plugins.discover`)
and lists them by ``order``, which is the order of their columns in 07's and 08's tables.

* :mod:`.calibrated` — the small-sample-calibrated test beside the percentile bootstrap and which of the two
  decides (order 10: every run);
* :mod:`.tost` — the equivalence test at a declared smallest effect of interest (order 20: a bound declared).

A verdict module imports what computes it (:mod:`chunkstudy.significance`, :mod:`chunkstudy.stats.decision`,
:mod:`chunkstudy.stats.equivalence`, ...) and never the registry or 07's contrast code, which import the registry:
they are still being imported while it discovers this package. This ``__init__`` imports nothing.
"""
