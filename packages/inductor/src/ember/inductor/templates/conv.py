"""Convolution as an implicit GEMM: an extern `aten::convolution` (2-D, one group, not
transposed, static sizes) seen as the product of `[N·OH·OW, C·KH·KW]` input patches and the
`[C·KH·KW, Cout]` weight, so the GEMM template's tiles, configurations, choice and epilogue
fusion serve it (`GemmWriter._convolution_loop` writes its main loop).

A convolution becomes a template only where it fuses a pointwise epilogue that reads its
whole result (bias and activation, a residual, batch norm in inference) and nothing else reads
the result: the template's gain is the epilogue's memory round trip, and cuDNN writes its
result where the vendor path needs it only in that case.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import FloorDiv, ModularIndexing
from ember.inductor.ir.program import ExternNode, Program, TensorArg
from ember.inductor.templates.gemm import GEMM_DTYPES, Gemm, Operand, dense, static

CONV_TARGET = "aten::convolution.default"


@dataclass(frozen=True)
class Conv:
    """A 2-D convolution's geometry (sizes and element strides)."""

    batch: int
    channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    out_h: int
    out_w: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    input_strides: tuple[int, int, int, int]  # N, C, H, W
    weight_strides: tuple[int, int, int, int]  # Cout, C, KH, KW
    result_strides: tuple[int, int, int, int]  # N, Cout, OH, OW


def _pair(value: object) -> tuple[int, int] | None:
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) in (1, 2):
        items = [v for v in value if isinstance(v, int)]
        if len(items) != len(value):
            return None
        return (items[0], items[-1])
    return None


def conv_of(node: ExternNode, program: Program) -> Gemm | None:
    """The implicit GEMM `node` computes, when the template can compute it."""
    if node.target != CONV_TARGET or node.writes_to or len(node.outputs) != 1:
        return None
    result = node.outputs[0]
    if result is None or len(node.args) < 9:
        return None
    declared = program.storages[result].declared
    data, weight, bias_arg = node.args[0], node.args[1], node.args[2]
    stride, padding, dilation = (_pair(node.args[i]) for i in (3, 4, 5))
    transposed, groups = node.args[6], node.args[8]
    if declared is None or declared.dtype not in GEMM_DTYPES or transposed or groups != 1:
        return None
    if stride is None or padding is None or dilation is None:
        return None
    if not isinstance(data, TensorArg) or not isinstance(weight, TensorArg):
        return None
    sizes = [static(t.layout.size) for t in (data, weight)] + [static(declared.size)]
    strides = [static(t.layout.stride) for t in (data, weight)] + [static(declared.stride)]
    offsets = static([data.layout.offset, weight.layout.offset])
    if any(s is None or len(s) != 4 for s in sizes + strides) or offsets is None:
        return None
    (n, c, h, w), (cout, c_w, kh, kw), (n_out, c_out, oh, ow) = sizes  # type: ignore[misc]
    if c_w != c or n_out != n or c_out != cout or not dense(declared):
        return None
    if data.layout.dtype != declared.dtype or weight.layout.dtype != declared.dtype:
        return None
    bias = None
    if bias_arg is not None:
        if not isinstance(bias_arg, TensorArg) or bias_arg.layout.dtype != declared.dtype:
            return None
        bias_sizes, bias_strides = static(bias_arg.layout.size), static(bias_arg.layout.stride)
        bias_offset = static([bias_arg.layout.offset])
        if bias_sizes != [cout] or bias_strides is None or bias_offset is None:
            return None
        bias = Operand(bias_arg.storage, bias_offset[0], 0, 0, bias_strides[0], bias_arg.layout)
    geometry = Conv(
        n, c, h, w, cout, kh, kw, oh, ow, stride, padding, dilation,
        tuple(strides[0]), tuple(strides[1]), tuple(strides[2]),  # type: ignore[arg-type]
    )  # fmt: skip
    return Gemm(
        CONV_TARGET,
        1,
        n * oh * ow,
        cout,
        c * kh * kw,
        Operand(data.storage, offsets[0], 0, 0, 0, data.layout),
        Operand(weight.storage, offsets[1], 0, 0, 0, weight.layout),
        bias,
        1.0,
        1.0 if bias is not None else 0.0,
        declared.dtype,
        result,
        store_result=False,
        source=node.source,
        conv=geometry,
    )


def conv_reads(gemm: Gemm, flat: sympy.Expr, k: sympy.Symbol) -> BodyValue:
    """What the convolution reads at point `flat` of its result (by the result's dense
    layout) and reduction index `k`, for memory planning and the bounds check: the input's
    first pixel of the point's image and channel, the weight and the bias (the window itself
    is the template's, masked at the borders)."""
    conv = gemm.conv
    assert conv is not None
    image = FloorDiv(flat, conv.result_strides[0])
    out_channel = ModularIndexing(flat, conv.result_strides[1], conv.out_channels)
    channel = FloorDiv(k, conv.kernel_h * conv.kernel_w)
    row = ModularIndexing(k, conv.kernel_w, conv.kernel_h)
    column = ModularIndexing(k, 1, conv.kernel_w)
    sn, sc, _, _ = conv.input_strides
    wo, wc, wh, ww = conv.weight_strides
    data = body.load(
        gemm.a.storage, sympy.expand(gemm.a.offset + image * sn + channel * sc), gemm.dtype
    )
    weight_index = gemm.b.offset + out_channel * wo + channel * wc + row * wh + column * ww
    value = body.binary(
        "mul", data, body.load(gemm.b.storage, sympy.expand(weight_index), gemm.dtype)
    )
    if gemm.bias is not None:
        bias_index = gemm.bias.offset + out_channel * gemm.bias.col_stride
        bias = body.load(gemm.bias.storage, sympy.expand(bias_index), gemm.dtype)
        value = body.binary("add", value, bias)
    return value


__all__ = ["CONV_TARGET", "Conv", "conv_of", "conv_reads"]
