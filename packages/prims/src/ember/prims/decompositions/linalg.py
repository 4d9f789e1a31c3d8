"""ATen matrix products and convolution written with the `matmul` and `convolution` prims:
mm, bmm, addmm, baddbmm, addmv, mv, dot, outer-style products, convolution (bias, transposed
by interior padding and flipped kernels) and convolution_backward (groups of 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.operands import broadcast, scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _scaled(x: torch.Tensor, factor: Any) -> torch.Tensor:
    return x if factor == 1 else prims.mul(x, scalar_like(factor, x))


@to_prims("aten::mm.default", "aten::bmm.default")
def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return prims.matmul(a, b)


@to_prims("aten::addmm.default", "aten::baddbmm.default")
def _addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> torch.Tensor:
    product = _scaled(prims.matmul(a, b), alpha)
    if beta == 0:
        return product
    addend, product = broadcast(_scaled(bias, beta), product)
    return prims.add(addend, product)


@to_prims("aten::mv.default")
def _mv(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    column = prims.unsqueeze(v, 1)
    return prims.squeeze(prims.matmul(a, column), [1])


@to_prims("aten::addmv.default")
def _addmv(
    bias: torch.Tensor, a: torch.Tensor, v: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> torch.Tensor:
    product = _scaled(_mv(a, v), alpha)
    if beta == 0:
        return product
    addend, product = broadcast(_scaled(bias, beta), product)
    return prims.add(addend, product)


@to_prims("aten::dot.default", "aten::vdot.default", "aten::inner.default")
def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 1:
        raise NotImplementedError("inner of tensors with more than one dim")
    return prims.sum(prims.mul(a, b), [0])


@to_prims("aten::addr.default")
def _addr(
    bias: torch.Tensor, v1: torch.Tensor, v2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> torch.Tensor:
    shape = [v1.shape[0], v2.shape[0]]
    outer = prims.mul(
        prims.broadcast_in_dim(v1, shape, [0]), prims.broadcast_in_dim(v2, shape, [1])
    )
    outer = _scaled(outer, alpha)
    if beta == 0:
        return outer
    if bias.dtype == torch.bool:
        return prims.bitwise_or(broadcast(bias, outer)[0], outer)
    return prims.add(broadcast(_scaled(bias, beta), outer)[0], outer)


def _spatial(values: Sequence[int], count: int) -> list[int]:
    return list(values) * count if len(values) == 1 else list(values)


def convolution(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> torch.Tensor:
    n = x.dim() - 2
    stride, padding = _spatial(stride, n), _spatial(padding, n)
    dilation, output_padding = _spatial(dilation, n), _spatial(output_padding, n)
    if transposed:
        out = _transposed(x, w, stride, padding, dilation, output_padding, groups)
    else:
        out = prims.convolution(x, w, stride, padding, dilation, groups)
    if bias is not None:
        out = prims.add(out, prims.broadcast_in_dim(bias, list(out.shape), [1]))
    return out


def _transposed(
    x: torch.Tensor,
    w: torch.Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    output_padding: list[int],
    groups: int,
) -> torch.Tensor:
    n = x.dim() - 2
    # weight [Cin, Cout/g, *k] -> [Cout, Cin/g, *k], flipped in space
    cin, cout_g = w.shape[0], w.shape[1]
    kernel = list(w.shape[2:])
    grouped = prims.reshape(w, [groups, cin // groups, cout_g, *kernel])
    swapped = prims.permute(grouped, [0, 2, 1, *range(3, 3 + n)])
    weight = prims.reshape(swapped, [groups * cout_g, cin // groups, *kernel])
    weight = prims.flip(weight, list(range(2, 2 + n)))
    low = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    high = [lo + op for lo, op in zip(low, output_padding)]
    stretched = prims.pad(x, 0, [0, 0, *low], [0, 0, *high], [0, 0, *[s - 1 for s in stride]])
    return prims.convolution(stretched, weight, [1] * n, [0] * n, dilation, groups)


to_prims("aten::convolution.default")(convolution)


@to_prims("aten::_convolution.default")
def _convolution_full(
    x: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    *flags: Any,
) -> torch.Tensor:
    return convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)


@to_prims("aten::convolution_backward.default")
def _convolution_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    bias_sizes: Sequence[int] | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    if transposed or groups != 1:
        raise NotImplementedError("convolution_backward: only groups=1, not transposed")
    n = x.dim() - 2
    stride, padding, dilation = _spatial(stride, n), _spatial(padding, n), _spatial(dilation, n)
    grad_input = grad_weight = grad_bias = None
    kernel = list(w.shape[2:])
    if output_mask[0]:
        # the transposed convolution of grad with w, sized back to x
        extra = [
            x.shape[2 + i]
            - (
                (grad.shape[2 + i] - 1) * stride[i]
                - 2 * padding[i]
                + dilation[i] * (kernel[i] - 1)
                + 1
            )
            for i in range(n)
        ]
        grad_input = _transposed(grad, w, stride, padding, dilation, extra, 1)
    if output_mask[1]:
        # correlate input channels with grad channels: batch becomes the reduced dim
        xt = prims.permute(x, [1, 0, *range(2, 2 + n)])
        gt = prims.permute(grad, [1, 0, *range(2, 2 + n)])
        full = prims.convolution(xt, gt, dilation, padding, stride, 1)
        limits = [full.shape[0], full.shape[1], *kernel]
        grad_weight = prims.permute(
            prims.slice(full, [0] * (n + 2), limits), [1, 0, *range(2, 2 + n)]
        )
        grad_weight = prims.clone(grad_weight)
    if output_mask[2]:
        grad_bias = prims.sum(grad, [0, *range(2, 2 + n)])
    return grad_input, grad_weight, grad_bias


@to_prims("aten::_trilinear.default")
def _trilinear(
    i1: torch.Tensor,
    i2: torch.Tensor,
    i3: torch.Tensor,
    expand1: Sequence[int],
    expand2: Sequence[int],
    expand3: Sequence[int],
    sumdim: Sequence[int],
    unroll_dim: int = 1,
) -> torch.Tensor:
    """The product of three operands, each unsqueezed at its expand dims, summed over sumdim."""
    aten = torch.ops.aten
    operands = []
    for operand, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for dim in sorted(expand):
            operand = aten.unsqueeze.default(operand, dim)
        operands.append(operand)
    product = aten.mul.Tensor(aten.mul.Tensor(operands[0], operands[1]), operands[2])
    return aten.sum.dim_IntList(product, list(sumdim)) if sumdim else product
