"""Decompositions: ATen overloads rewritten with ember prims (and with core ATen), and the
`decompose` pass that applies a table to a Graph.

Importing this package fills `PRIM_DECOMPOSITIONS` and `CORE_ATEN_DECOMPOSITIONS`.
"""

from ember.prims.decompositions import (  # noqa: F401  (each module registers on import)
    activation_backward,
    activations,
    attention,
    creation,
    distances,
    elementwise,
    factorizations,
    fold,
    fourier,
    indexing,
    linalg,
    loss_backward,
    losses,
    normalization,
    normalization_backward,
    pooling,
    pooling_backward,
    random,
    rearrangement,
    reductions,
    resampling,
    search,
    selection,
    special,
    view_scatter,
    views,
)
from ember.prims.decompositions.decompose import DecompositionError, decompose
from ember.prims.decompositions.table import (
    CORE_ATEN_DECOMPOSITIONS,
    PRIM_DECOMPOSITIONS,
    to_core_aten,
    to_prims,
)

__all__ = [
    "CORE_ATEN_DECOMPOSITIONS",
    "PRIM_DECOMPOSITIONS",
    "DecompositionError",
    "decompose",
    "to_core_aten",
    "to_prims",
]
