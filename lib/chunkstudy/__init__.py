"""chunkstudy: where chunk boundaries fall, what is prepended at embedding time, and whether retrieval routes to a
section first — the library behind the notebooks in ``notebooks/`` (see README.md and DESIGN.md).

Imports flow one way: ``config``/``artifacts`` → domain modules (``corpus``, ``llm``, ``induce``, ``contexts``,
``queries``, ``chunking``, ``conditions``, ``embed``, ``retrieve``, ``rerank``, ``metrics``, ``stats``) →
``tables``/``figures``/``report``. ``paper`` holds the paper's own numbers (imports nothing of the project; any
module may read it). Only ``artifacts`` touches paths.
"""

__version__ = "0.1.0"
