"""ember's closed set of primitive operators, one small definition each, grouped by family.

Importing this package defines every prim and makes `prims::<name>` resolve to it. `PRIMS`
maps each qualified name to its `Prim`; docs/prims.md states each one's exact semantics.
"""

from ember.prims.primitives import (  # noqa: F401  (each module defines its prims on import)
    complex_numbers,
    creation,
    elementwise,
    factorizations,
    fft,
    indexing,
    linalg,
    random,
    reductions,
    special,
    views,
)
from ember.prims.primitives.prim import PRIMS, Prim, PrimNamespace, is_prim, prims

__all__ = ["PRIMS", "Prim", "PrimNamespace", "is_prim", "prims"]
