"""Lowering: an ember Graph of prims (and the extern ATen ops kept whole) becomes a loop-level
`Program`. `graph_lowering.py` walks the Graph; the tables of per-op lowerings live in
`pointwise.py`, `reductions.py`, `views.py`, `indexing.py`, `extern.py` and
`pointwise_convolutions.py` (1x1 convolutions as matrix multiplies).
"""
