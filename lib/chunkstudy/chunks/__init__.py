"""The chunk stage (04_chunk_embed, paper 3.2 and appendix E): every condition's chunks, boundaries plus prefixes.

Offsets are half-open character indices ``[start, end)`` into ``documents.text`` and describe content only: a
prefix never shifts or enters them. Every chunk set tiles each document exactly.

Layout:

* :mod:`.chunking` — the boundaries' building blocks: the content-token counter (:func:`load_counter`), sentence
  bounds, structural chunks of an outline, size-matched fixed windows (the A0 rule), the tiling check;
* :mod:`.cuts` — the chunk sets of a run, one function per kind of boundaries (fixed, induced, gold, a user's
  chunker; :data:`cuts.FUNCTIONS`), and the chunks 02 writes situating contexts for;
* :mod:`.chunkers` — your own chunker (chonkie, semchunk, langchain-text-splitters, ``module:function``) and the
  exact placement of its chunks on the text;
* :mod:`.chunk_sets` — every condition's chunks (:func:`build_all`, the function 04 runs): paper and user
  conditions alike (:class:`chunkstudy.design.Condition`), each prefixed by its kind (one class per module of
  :mod:`chunkstudy.prefix`: none, title, context, path, placebo), text rows, size matching and the summary.

The package imports nothing itself: import the module you need (``from chunkstudy.chunks import chunking``).
Stages 02 and 03 cut chunks with :mod:`.chunking` and :mod:`.cuts` too, and a stage's code hash covers every
module its notebook can run (:func:`chunkstudy.codehash.module_closure`, package ``__init__`` included): an
``__init__`` that imported the chunk sets, the user's chunkers and the embedders would rerun 02 and 03 on edits
they never run. The stage's name in the paper is "condition" (:data:`chunkstudy.design.CONDITIONS` declares the
paper's; :func:`chunkstudy.design.user_conditions` a user's).
"""
