"""torch dtype <-> NumPy dtype, for the backend's boundary and for prims that take a dtype.

This module names torch dtypes only as dictionary keys: no torch op runs through it.
"""

from __future__ import annotations

import numpy as np
import torch

TO_NUMPY: dict[torch.dtype, np.dtype[np.generic]] = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}


def to_numpy_dtype(dtype: torch.dtype) -> np.dtype[np.generic]:
    try:
        return TO_NUMPY[dtype]
    except KeyError:
        raise TypeError(f"numpy_prims has no NumPy dtype for {dtype}") from None
