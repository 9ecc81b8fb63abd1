"""The chunk stage (04_chunk_embed, paper 3.2 and appendix E): every condition's chunks, boundaries plus prefixes.

Offsets are half-open character indices ``[start, end)`` into ``documents.text`` and describe content only: a
prefix never shifts or enters them. Every chunk set tiles each document exactly.

Layout:

* :mod:`.chunking` — the boundaries: the content-token counter (:func:`load_counter`), sentence bounds, structural
  chunks of an outline, size-matched fixed windows (A0), the tiling check;
* :mod:`.chunk_sets` — the paper's chunk sets (:func:`build_all`, the function 04 runs): each condition's
  boundaries and prefix (heading paths, A1 contexts, the placebo), size matching and the summary;
* :mod:`.chunkers` — your own chunker (chonkie, semchunk, langchain-text-splitters, ``module:function``) and the
  exact placement of its chunks on the text;
* :mod:`.extra_conditions` — the conditions a user adds (``conditions.extra``): a chunker, a prefix kind and an
  optional size-matched twin.

The package imports nothing itself: import the module you need (``from chunkstudy.chunks import chunking``).
Stages 02 and 03 cut structural chunks with :mod:`.chunking` too, and a stage's code hash covers every module its
notebook can run (:func:`chunkstudy.codehash.module_closure`, package ``__init__`` included): an ``__init__`` that
imported the chunk sets, the user's chunkers and the embedders would rerun 02 and 03 on edits they never run.
The stage's name in the paper is "condition" (:data:`chunkstudy.design.CONDITIONS` declares them); the module
that builds them is :mod:`.chunk_sets`.
"""
