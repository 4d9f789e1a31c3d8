"""1x1 convolutions as matrix multiplies (issue 16: the default mode's host time).

A 2-D convolution with a 1x1 kernel, stride 1, no padding and one group maps each pixel's
channels on its own: over channels-last maps (what `passes/channels_last.py` gives a
convolution-heavy Graph) it is the product of the input's `N*H*W x C_in` rows with the
weight's transpose, and the result's rows are the output map, channels-last. Its backward is
two products as well: the input gradient `grad_rows @ weight`, the weight gradient
`grad_rows.T @ input_rows`. Each runs as `torch.mm` (`addmm` with a bias) on views of the
same memory: a few us of host time where a cuDNN call costs 20-30 us (forward) and 50-70 us
(backward) on the H200's host, and ResNet-50 has 33 such convolutions of its 53.

Only 16-bit maps (bfloat16, float16), where cuDNN and cuBLAS both accumulate in float32:
a float32 convolution runs in TF32 by default (`torch.backends.cudnn.allow_tf32`) and a
float32 matmul does not, so the product would differ from eager's. Anything else (other
geometry, maps or results the Graph does not declare channels-last, a bias gradient) stays
the cuDNN call of `lowering/extern.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ember.inductor.ir.indexing import Expr, same
from ember.inductor.ir.program import TensorArg
from ember.inductor.ir.tensors import Layout, Lazy, StorageView
from ember.inductor.lowering.graph_lowering import LoweringContext
from ember.inductor.lowering.layout_geometry import spec_layout
from ember.inductor.lowering.table import lowers
from ember.prims import TensorSpec, Value

CONVOLUTION = "aten::convolution.default"
CONVOLUTION_BACKWARD = "aten::convolution_backward.default"
MM = "aten::mm.default"
ADDMM = "aten::addmm.default"
PRODUCT_DTYPES = frozenset({torch.bfloat16, torch.float16})


@lowers(CONVOLUTION)
def convolution(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
    if ctx.pointwise_convolutions and not kwargs and len(args) == 9:
        result = _forward(ctx, *args)
        if result is not None:
            return result
    return ctx.extern(CONVOLUTION, args, kwargs, is_fallback=False)


@lowers(CONVOLUTION_BACKWARD)
def convolution_backward(ctx: LoweringContext, *args: Any, **kwargs: Any) -> Any:
    if ctx.pointwise_convolutions and not kwargs and len(args) == 11:
        results = _backward(ctx, *args)
        if results is not None:
            return results
    return ctx.extern(CONVOLUTION_BACKWARD, args, kwargs, is_fallback=False)


def _forward(
    ctx: LoweringContext,
    input: Any,
    weight: Any,
    bias: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> StorageView | None:
    """The convolution as `mm`/`addmm` over the maps' rows, or None where it does not qualify."""
    geometry = (stride, padding, dilation, transposed, output_padding, groups)
    if not _pointwise(input, weight, *geometry):
        return None
    if bias is not None and not (_tensor(bias) and bias.dtype == input.dtype):
        return None
    output = _declared(ctx, 0)
    if output is None or not _channels_last(output):
        return None
    maps = ctx.operand(input, 0)
    if not _channels_last(maps.layout):
        return None
    kernel = ctx.operand(weight, 1)
    rows = _rows(maps)
    product = [rows, _transposed_matrix(kernel)]
    target = MM
    if bias is not None:
        target, product = ADDMM, [_arg(ctx.operand(bias, 2)), *product]
    size = (rows.layout.size[0], output.size[1])
    result = ctx.product(target, product, Layout.contiguous(maps.dtype, size))
    return StorageView(result.storage, output)


def _backward(
    ctx: LoweringContext,
    grad_output: Any,
    input: Any,
    weight: Any,
    bias_sizes: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> list[StorageView | None] | None:
    """The input and weight gradients as `mm`s over the maps' rows, or None where the
    convolution does not qualify or its bias gradient is asked for."""
    geometry = (stride, padding, dilation, transposed, output_padding, groups)
    if not _pointwise(input, weight, *geometry) or len(output_mask) != 3 or output_mask[2]:
        return None
    if not (_tensor(grad_output) and grad_output.dtype == input.dtype):
        return None
    wanted_input, wanted_weight = bool(output_mask[0]), bool(output_mask[1])
    input_grad = _declared(ctx, 0) if wanted_input else None
    weight_grad = _declared(ctx, 1) if wanted_weight else None
    if wanted_input and (input_grad is None or not _channels_last(input_grad)):
        return None
    if wanted_weight and (weight_grad is None or not _rows_of_matrix(weight_grad)):
        return None
    grads = ctx.operand(grad_output, 0)
    if not _channels_last(grads.layout):
        return None
    maps = ctx.operand(input, 1) if wanted_weight else None
    if maps is not None and not _channels_last(maps.layout):
        return None
    results: list[StorageView | None] = [None, None, None]
    out_channels = grads.layout.size[1]
    if input_grad is not None:
        kernel = ctx.operand(weight, 2)
        rows = _rows(grads)
        size = (rows.layout.size[0], input_grad.size[1])
        product = ctx.product(MM, [rows, _matrix(kernel)], Layout.contiguous(grads.dtype, size))
        results[0] = StorageView(product.storage, input_grad)
    if weight_grad is not None and maps is not None:
        columns = _transposed(_rows(grads))
        size = (out_channels, weight_grad.size[1])
        product = ctx.product(MM, [columns, _rows(maps)], Layout.contiguous(grads.dtype, size))
        results[1] = StorageView(product.storage, weight_grad)
    return results


def _pointwise(
    input: Any,
    weight: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> bool:
    """A 16-bit 2-D convolution of static sizes whose 1x1 kernel maps each pixel alone."""
    if not (_tensor(input) and _tensor(weight)) or transposed or groups != 1:
        return False
    if input.dtype not in PRODUCT_DTYPES or weight.dtype != input.dtype:
        return False
    if len(input.size) != 4 or len(weight.size) != 4:
        return False
    if not all(isinstance(n, (int, sympy.Integer)) for n in (*input.size, *weight.size)):
        return False
    if tuple(int(n) for n in weight.size[2:]) != (1, 1):
        return False
    return (
        list(stride) == [1, 1]
        and list(padding) == [0, 0]
        and list(dilation) == [1, 1]
        and all(p == 0 for p in output_padding)
    )


def _tensor(value: Any) -> bool:
    return isinstance(value, (Lazy, StorageView))


def _declared(ctx: LoweringContext, position: int) -> Layout | None:
    """The layout the Graph declares for the current node's output at `position`."""
    node = ctx.node
    assert node is not None
    outputs = node.outputs
    output = outputs[position] if position < len(outputs) else None
    if not isinstance(output, Value) or not isinstance(output.spec, TensorSpec):
        return None
    return spec_layout(output.spec, relative=True)


def _channels_last(layout: Layout) -> bool:
    """A 4-D layout whose pixels are rows of channels, one after another (NHWC, dense)."""
    if len(layout.size) != 4:
        return False
    _, channels, height, width = layout.size
    wanted = (height * width * channels, 1, width * channels, channels)
    return all(n == 1 or same(s, w) for n, s, w in zip(layout.size, layout.stride, wanted))


def _rows_of_matrix(layout: Layout) -> bool:
    """A weight-shaped (C_out, C_in, 1, 1) layout that is the row-major C_out x C_in matrix."""
    out_channels, in_channels = layout.size[:2]
    return (out_channels == 1 or same(layout.stride[0], in_channels)) and (
        in_channels == 1 or same(layout.stride[1], 1)
    )


def _rows(maps: StorageView) -> TensorArg:
    """Channels-last maps as their N*H*W x C matrix of pixel rows."""
    batch, channels, height, width = maps.layout.size
    size: tuple[Expr, ...] = (batch * height * width, channels)
    return TensorArg(maps.storage, Layout(maps.dtype, size, (channels, 1), maps.layout.offset))


def _matrix(kernel: StorageView) -> TensorArg:
    """A 1x1 kernel as its C_out x C_in matrix, in the kernel's own strides."""
    layout = kernel.layout
    return TensorArg(
        kernel.storage,
        Layout(layout.dtype, tuple(layout.size[:2]), tuple(layout.stride[:2]), layout.offset),
    )


def _transposed_matrix(kernel: StorageView) -> TensorArg:
    return _transposed(_matrix(kernel))


def _transposed(matrix: TensorArg) -> TensorArg:
    layout = matrix.layout
    size, stride = layout.size, layout.stride
    return TensorArg(
        matrix.storage,
        Layout(layout.dtype, (size[1], size[0]), (stride[1], stride[0]), layout.offset),
    )


def _arg(view: StorageView) -> TensorArg:
    return TensorArg(view.storage, view.layout)
