"""`libdevice` for generated kernels: CUDA's libdevice, or a stand-in under the interpreter.

Triton's interpreter (`TRITON_INTERPRET=1`, how CI runs kernels on CPU) has no libdevice:
its functions are stubs there. A generated module that is imported while the interpreter is
on binds `libdevice` to `InterpreterLibdevice`, which computes each function with torch on the
interpreter's NumPy blocks, so a kernel's source is the same on both paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# libdevice name -> (torch function, result dtype or None for the argument's).
_FUNCTIONS: dict[str, tuple[Callable[..., torch.Tensor], torch.dtype | None]] = {
    "expm1": (torch.expm1, None),
    "log10": (torch.log10, None),
    "log1p": (torch.log1p, None),
    "sqrt": (torch.sqrt, None),
    "rsqrt": (torch.rsqrt, None),
    "tan": (torch.tan, None),
    "asin": (torch.asin, None),
    "acos": (torch.acos, None),
    "atan": (torch.atan, None),
    "sinh": (torch.sinh, None),
    "cosh": (torch.cosh, None),
    "tanh": (torch.tanh, None),
    "asinh": (torch.asinh, None),
    "acosh": (torch.acosh, None),
    "atanh": (torch.atanh, None),
    "erf": (torch.erf, None),
    "erfc": (torch.erfc, None),
    "lgamma": (torch.lgamma, None),
    "ceil": (torch.ceil, None),
    "floor": (torch.floor, None),
    "nearbyint": (torch.round, None),
    "trunc": (torch.trunc, None),
    "signbit": (torch.signbit, torch.int32),
    "fmod": (torch.fmod, None),
    "pow": (torch.pow, None),
    "atan2": (torch.atan2, None),
    "hypot": (torch.hypot, None),
    "copysign": (torch.copysign, None),
    "nextafter": (torch.nextafter, None),
}


class InterpreterLibdevice:
    """libdevice's functions on Triton interpreter tensors (NumPy blocks), through torch."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        entry = _FUNCTIONS.get(name)
        if entry is None:
            raise AttributeError(f"libdevice.{name} has no interpreter stand-in")
        function, result_dtype = entry

        def call(*args: Any) -> Any:
            return _apply(function, result_dtype, args)

        return call


def _apply(function: Callable[..., torch.Tensor], result_dtype: torch.dtype | None,
           args: tuple[Any, ...]) -> Any:  # fmt: skip
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    first = next(a for a in args if isinstance(a, tl.core.tensor))
    operands = [
        torch.as_tensor(a.handle.data) if isinstance(a, tl.core.tensor) else a for a in args
    ]
    result = function(*operands)
    if result_dtype is not None:
        result = result.to(result_dtype)
    data = result.numpy()
    scalar = tl.int32 if result_dtype is not None else first.handle.dtype.scalar
    shape = list(data.shape)
    kind = tl.block_type(scalar, shape) if shape else scalar
    return tl.core.tensor(TensorHandle(data, scalar), kind)
