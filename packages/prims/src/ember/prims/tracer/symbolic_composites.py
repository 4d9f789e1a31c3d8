"""ember's own forms of composite torch functions whose C++ decomposition reads concrete sizes.

A composite op (CompositeImplicitAutograd) is decomposed by torch's C++ before the tracer sees
anything, so a meta rule cannot help it. Some of these read `sizes()` in some torch releases:
torch 2.11's `matmul` of a 3-d or larger operand turns each symbolic size into its hint (the
guard `s0 == 16`), or fails outright, where 2.13's keeps it symbolic. For such a function with
symbolic operands the tracing tensor runs the form here instead, built from ops the tracer
records symbolically, so a Graph's symbolic sizes do not depend on the torch release.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

Size = Any  # int | torch.SymInt
CompositeRule = Callable[..., Any]  # returns NotImplemented where torch's own form is kept


def matmul(left: Any, right: Any, *, out: Any = None) -> Any:
    """`torch.matmul` for operands of which one has 3 or more dims: a batched operand times a
    matrix or vector folds its batch into rows (one `mm`/`mv`), else the batch dims broadcast
    and one `bmm` multiplies them. Products of matrices and vectors keep torch's own form."""
    if out is not None or not isinstance(left, torch.Tensor) or not isinstance(right, torch.Tensor):
        return NotImplemented
    left_dims, right_dims = left.dim(), right.dim()
    if left_dims == 0 or right_dims == 0 or max(left_dims, right_dims) < 3:
        return NotImplemented  # torch's error, or a plain mm/mv/dot it traces symbolically
    if right_dims <= 2:
        return _folded(left, right)
    return _batched(left, right)


def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    """`F.linear` of a 3-d or larger input (torch's C++ multiplies some with its `matmul`): the
    leading dims become rows of one `mm`, or of one `addmm` with the bias (autocast casts it
    as it casts torch's own linear)."""
    if not isinstance(input, torch.Tensor) or input.dim() < 3 or weight.dim() != 2:
        return NotImplemented
    weight, bias = _autocast_operands(input, weight, bias)
    leading = list(input.shape[:-1])
    rows = input.reshape(math.prod(leading), input.shape[-1])
    product = rows.mm(weight.t()) if bias is None else torch.addmm(bias, rows, weight.t())
    return product.view([*leading, weight.shape[0]])


def _autocast_operands(input: torch.Tensor, weight: Any, bias: Any) -> tuple[Any, Any]:
    """The weight and bias cast as autocast casts torch's own linear's, before the weight is
    transposed, as eager's Graph has them: `t(w).to(bf16)` is a transposed copy (a kernel
    reading across rows, and a matmul operand the code generator lays out row-major), where
    `t(w.to(bf16))` is a plain cast and a transposed view, which the matmul takes as it is.
    The input is left to autocast at the product (after its reshape, as before)."""
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return weight, bias
    dtype = torch.get_autocast_dtype(device)

    def cast(t: Any) -> Any:
        eligible = isinstance(t, torch.Tensor) and t.is_floating_point()
        return t.to(dtype) if eligible and t.dtype not in (dtype, torch.float64) else t

    return cast(weight), cast(bias)


def _folded(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """(..., n, k) @ (k, p) or (k,): the leading dims of `left` become rows of one matrix."""
    leading = list(left.shape[:-1])
    rows = left.reshape(math.prod(leading), left.shape[-1])
    if right.dim() == 1:
        return rows.mv(right).view(leading)
    return rows.mm(right).view([*leading, right.shape[-1]])


def _batched(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Broadcast the batch dims, flatten them into one, `bmm`, and restore them."""
    matrix_left = left.unsqueeze(0) if left.dim() == 1 else left
    matrix_right = right.unsqueeze(-1) if right.dim() == 1 else right
    rows, inner = matrix_left.shape[-2], matrix_left.shape[-1]
    columns = matrix_right.shape[-1]
    batch = _broadcast(list(matrix_left.shape[:-2]), list(matrix_right.shape[:-2]))
    count = math.prod(batch)
    flat_left = matrix_left.expand([*batch, rows, inner]).reshape(count, rows, inner)
    flat_right = matrix_right.expand([*batch, inner, columns]).reshape(count, inner, columns)
    product = flat_left.bmm(flat_right).view([*batch, rows, columns])
    if left.dim() == 1:
        product = product.squeeze(-2)
    if right.dim() == 1:
        product = product.squeeze(-1)
    return product


def _broadcast(left: Sequence[Size], right: Sequence[Size]) -> list[Size]:
    """The broadcast of two batch shapes; a size 1 stretches (symbols are 2 and up, so their
    comparisons with 1 are decided by their ranges, not guarded)."""
    rank = max(len(left), len(right))
    padded_left = [1] * (rank - len(left)) + list(left)
    padded_right = [1] * (rank - len(right)) + list(right)
    shape: list[Size] = []
    for a, b in zip(padded_left, padded_right):
        if a == 1:
            shape.append(b)
        elif b == 1 or a == b:
            shape.append(a)
        else:
            raise RuntimeError(
                f"matmul: batch shapes {list(left)} and {list(right)} do not broadcast"
            )
    return shape


# Keyed by the torch function a tracing tensor's `__torch_function__` receives.
SYMBOLIC_COMPOSITES: dict[Any, CompositeRule] = {
    torch.matmul: matmul,
    torch.Tensor.matmul: matmul,
    torch.Tensor.__matmul__: matmul,
    torch.Tensor.__rmatmul__: lambda self, other: matmul(other, self),
    torch.nn.functional.linear: linear,
}
