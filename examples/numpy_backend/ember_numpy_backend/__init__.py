"""ember-numpy-backend: the `numpy_prims` backend, a vendor example that runs captured Graphs
with NumPy alone, one kernel per ember prim (registered through the `ember.backends` entry
point; see README.md for the walk-through).
"""

from ember_numpy_backend import (  # noqa: F401  (each module registers its kernels on import)
    elementwise,
    factorizations,
    linalg,
    random,
    reductions,
    special,
    views,
)
from ember_numpy_backend.backend import NumpyBackendError, NumpyProgram, numpy_prims
from ember_numpy_backend.kernels import KERNELS
from ember_numpy_backend.special import MISSING

__all__ = ["KERNELS", "MISSING", "NumpyBackendError", "NumpyProgram", "numpy_prims"]
