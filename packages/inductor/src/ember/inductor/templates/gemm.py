"""GEMM templates in the scheduled program: an extern `mm`/`addmm`/`bmm` (or a convolution,
as an implicit GEMM: `templates/conv.py`) and the pointwise kernel that reads its result
become one `GemmKernel` (the matmul's tiles, then the epilogue
on the accumulator in registers), so bias, activation, residual add, scale and cast never
round-trip through memory.

`use_gemm_templates(program, scheduled)` runs after fusion (pass `gemm_templates`, under
`mode="max-autotune"`; for convolutions alone, `conv_templates` in the default mode). A
`GemmKernel` is a `Kernel`: its first member is the matmul written as a loop-IR reduction
(`sum_k A[m, k] * B[k, n]`, read by memory planning and the bounds check), the others are
the epilogue's members unchanged. The Triton backend generates it with
`templates/gemm_writer.py`; the extern call stays the fallback the runtime choice measures
against (`templates/gemm_choice.py`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sympy
import torch

from ember.inductor.ir import body
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import FloorDiv, ModularIndexing, index_var, product
from ember.inductor.ir.program import ExternNode, LoopNode, Program, TensorArg
from ember.inductor.ir.tensors import Layout
from ember.inductor.scheduler.fusion import Kernel, Member, ScheduledNode

if TYPE_CHECKING:
    from ember.inductor.templates.conv import Conv

GEMM_TARGETS = ("aten::mm.default", "aten::addmm.default", "aten::bmm.default")
GEMM_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32})


@dataclass(frozen=True)
class Operand:
    """A matrix operand as the template reads it: storage, element offset and the strides of
    its batch, row and column dimensions (0 where it is broadcast)."""

    storage: str
    offset: int
    batch_stride: int
    row_stride: int
    col_stride: int
    layout: Layout  # the TensorArg's layout, for the extern call


@dataclass(frozen=True)
class Gemm:
    """One matrix product `result[b, m, n] = beta * bias + alpha * sum_k a[b, m, k] * b[b, k, n]`."""

    target: str
    batch: int
    m: int
    n: int
    k: int
    a: Operand
    b: Operand
    bias: Operand | None  # addmm's input, broadcast to [m, n] (batch_stride 0)
    alpha: float
    beta: float
    dtype: torch.dtype
    result: str  # the extern result's storage (contiguous [batch, m, n])
    store_result: bool  # whether anything but the fused epilogue reads the result
    source: str = ""
    extern: ExternNode | None = None  # the call it replaces (the fallback the choice measures)
    conv: Conv | None = None  # a convolution as an implicit GEMM (`templates/conv.py`)


@dataclass
class GemmKernel(Kernel):
    """A matmul template with the pointwise kernel that reads its result fused after it."""

    gemm: Gemm | None = None
    epilogue: Kernel | None = None  # the kernel fused in (None: the product alone)


def use_gemm_templates(
    program: Program, scheduled: Sequence[ScheduledNode], matmuls: bool = True
) -> list[ScheduledNode]:
    """`scheduled` with every eligible extern matmul made a `GemmKernel`, fused with the
    pointwise kernel that reads its result when that is safe (see the module); with
    `matmuls=False` (`conv_templates` alone), convolutions only."""
    items = list(scheduled)
    # Templates are numbered from past the fused kernels' numbers (their positions), one
    # number each: a number from the item's position repeats once a fused epilogue leaves the
    # list, and two templates of one name (ResNet's conv + batch norm + ReLU, back to back)
    # became one kernel launched twice, the first convolution never computed.
    numbers = itertools.count(len(items))
    position = 0
    while position < len(items):
        item = items[position]
        gemm = _gemm_of(item, program) if isinstance(item, ExternNode) else None
        if gemm is None or (not matmuls and gemm.conv is None):
            position += 1
            continue
        assert isinstance(item, ExternNode)
        at = _epilogue_position(items, position, gemm, program)
        epilogue = items[at] if at is not None else None
        assert epilogue is None or isinstance(epilogue, Kernel)
        readers = _readers(items, gemm.result, skip={position, at if at is not None else -1})
        kept = {arg.storage for arg in program.outputs if isinstance(arg, TensorArg)}
        store = epilogue is None or bool(readers) or gemm.result in kept
        if store and gemm.conv is not None:  # a convolution only fused (see conv.py)
            position += 1
            continue
        gemm = dataclasses.replace(gemm, store_result=store, extern=item)
        if store:  # the template writes the result into a buffer of its own
            storage = program.storages[gemm.result]
            program.storages[gemm.result] = dataclasses.replace(storage, layout=storage.declared)
        kernel = _gemm_kernel(gemm, epilogue, next(numbers))
        if not store:
            kernel.local_buffers.add(gemm.result)
        if epilogue is not None and at is not None:
            items[at] = kernel
            del items[position]
        else:
            items[position] = kernel
            position += 1
    return items


def static(values: Sequence[object]) -> list[int] | None:
    result: list[int] = []
    for value in values:
        expr = sympy.sympify(value)
        if not expr.is_Integer:
            return None
        result.append(int(expr))
    return result


def _operand(arg: object, rows: int, cols: int, batched: bool) -> Operand | None:
    """`arg` as an operand of `rows x cols` (batched: a leading batch dimension)."""
    if not isinstance(arg, TensorArg):
        return None
    layout = arg.layout
    sizes, strides = static(layout.size), static(layout.stride)
    offset = static([layout.offset])
    if sizes is None or strides is None or offset is None:
        return None
    if batched:
        if len(sizes) != 3 or sizes[1:] != [rows, cols]:
            return None
        batch_stride = strides[0] if sizes[0] > 1 else 0
        row, col = strides[1], strides[2]
    else:
        if sizes != [rows, cols]:
            return None
        batch_stride, row, col = 0, strides[0], strides[1]
    return Operand(
        arg.storage,
        offset[0],
        batch_stride,
        row if rows > 1 else 0,
        col if cols > 1 else 0,
        layout,
    )


def _bias(arg: object, m: int, n: int) -> Operand | None:
    """addmm's input, broadcast to `[m, n]` from the right."""
    if not isinstance(arg, TensorArg):
        return None
    sizes, strides = static(arg.layout.size), static(arg.layout.stride)
    offset = static([arg.layout.offset])
    if sizes is None or strides is None or offset is None or len(sizes) > 2:
        return None
    padded = [1] * (2 - len(sizes)) + sizes
    padded_strides = [0] * (2 - len(strides)) + strides
    if any(s not in (1, t) for s, t in zip(padded, (m, n))):
        return None
    row = padded_strides[0] if padded[0] > 1 else 0
    col = padded_strides[1] if padded[1] > 1 else 0
    return Operand(arg.storage, offset[0], 0, row, col, arg.layout)


def _number(value: object, default: float) -> float | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def dense(layout: Layout) -> bool:
    """Whether `layout` covers its elements without gaps or overlaps, from offset 0, with its
    first dimension outermost (a contiguous or channels-last tensor)."""
    sizes, strides = static(layout.size), static(layout.stride)
    if sizes is None or strides is None or static([layout.offset]) != [0]:
        return False
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], -d))
    expected = 1
    for dim in order:
        if sizes[dim] != 1 and strides[dim] != expected:
            return False
        expected *= sizes[dim]
    return not sizes or sizes[0] == 1 or order[-1] == 0


def _gemm_of(node: ExternNode, program: Program) -> Gemm | None:
    """The matmul `node` computes, when a template can compute it: static sizes, one of the
    template's dtypes, a contiguous result."""
    if node.target == "aten::convolution.default":
        from ember.inductor.templates.conv import conv_of

        return conv_of(node, program)
    if node.target not in GEMM_TARGETS or node.writes_to or len(node.outputs) != 1:
        return None
    result = node.outputs[0]
    if result is None:
        return None
    declared = program.storages[result].declared
    if declared is None or not declared.is_contiguous():
        return None
    out_sizes = static(declared.size)
    if out_sizes is None or declared.dtype not in GEMM_DTYPES:
        return None
    args = list(node.args)
    batched = node.target == "aten::bmm.default"
    first, second = (args[1], args[2]) if node.target == "aten::addmm.default" else args[:2]
    if not isinstance(first, TensorArg) or not isinstance(second, TensorArg):
        return None
    if batched:
        if len(out_sizes) != 3:
            return None
        batch, m, n = out_sizes
    else:
        if len(out_sizes) != 2:
            return None
        batch, (m, n) = 1, out_sizes
    k_sizes = static([first.layout.size[-1]])
    if k_sizes is None or min(m, n, k_sizes[0], batch) < 1:
        return None
    k = k_sizes[0]
    a = _operand(first, m, k, batched)
    b = _operand(second, k, n, batched)
    if a is None or b is None or first.layout.dtype != declared.dtype:
        return None
    if second.layout.dtype != declared.dtype:
        return None
    bias, alpha, beta = None, 1.0, 0.0
    if node.target == "aten::addmm.default":
        bias = _bias(args[0], m, n)
        alpha_value = _number(node.kwargs.get("alpha", args[4] if len(args) > 4 else None), 1.0)
        beta_value = _number(node.kwargs.get("beta", args[3] if len(args) > 3 else None), 1.0)
        if bias is None or alpha_value is None or beta_value is None:
            return None
        if program.storages[bias.storage].dtype != declared.dtype:
            return None
        alpha, beta = alpha_value, beta_value
    return Gemm(
        node.target,
        batch,
        m,
        n,
        k,
        a,
        b,
        bias,
        alpha,
        beta,
        declared.dtype,
        result,
        store_result=True,
        source=node.source,
    )


def _readers(items: Sequence[ScheduledNode], storage: str, skip: set[int]) -> list[int]:
    found = []
    for position, item in enumerate(items):
        if position in skip:
            continue
        if isinstance(item, ExternNode):
            if storage in item.reads():
                found.append(position)
        elif any(storage in m.node.reads() for m in item.members):
            found.append(position)
    return found


def _epilogue_position(
    items: Sequence[ScheduledNode], position: int, gemm: Gemm, program: Program
) -> int | None:
    """Where the pointwise kernel that can take `gemm` as its prologue is: the first item after
    it that reads the result, when it is a pointwise kernel over the result's points reading
    it only at the point it computes, and nothing between writes the matmul's operands."""
    operands = {gemm.a.storage, gemm.b.storage}
    if gemm.bias is not None:
        operands.add(gemm.bias.storage)
    for at in range(position + 1, len(items)):
        item = items[at]
        if isinstance(item, ExternNode):
            if gemm.result in item.reads() or item.writes_to or item.writes() & operands:
                return None
            continue
        reads = {s for m in item.members for s in m.node.reads()}
        writes = {m.node.storage for m in item.members}
        if gemm.result not in reads:
            # the product moves past this kernel: it may write only buffers of its own (an
            # input or an extern result may share memory with an operand under another name)
            if writes & operands or any(_may_alias(program, name) for name in writes):
                return None
            continue
        if isinstance(item, GemmKernel) or writes & operands:
            return None
        return at if _fits_epilogue(item, gemm) else None
    return None


def _may_alias(program: Program, storage: str) -> bool:
    """Whether `storage` may share memory with another storage: a graph input, or an extern
    result (a fallback may return a view of its argument)."""
    info = program.storages[storage]
    return info.is_input or info.layout is None


def _fits_epilogue(kernel: Kernel, gemm: Gemm) -> bool:
    """Whether `kernel` is pointwise over the result's points and reads the result only at the
    point it computes (the flat index of its loops)."""
    if kernel.inner or not kernel.outer:
        return False
    sizes = static(kernel.outer)
    if sizes is None or product(sizes) != gemm.batch * gemm.m * gemm.n:
        return False
    flat = _flat(len(sizes), sizes)
    for member in kernel.members:
        if member.level != "outer" or member.store_mode is not None or member.store_indirect:
            return False
        if member.node.reduction_type is not None:
            return False
        for load in member.loads():
            if str(load.args[0]) != gemm.result:
                continue
            index = load.args[1]
            if load.args[2] or not isinstance(index, sympy.Expr):
                return False
            if index.atoms(sympy.Function) or sympy.expand(index - flat) != 0:
                return False
    return True


def _flat(count: int, sizes: Sequence[int]) -> sympy.Expr:
    """The row-major flat index of loops `x0..x{count-1}` of `sizes`."""
    flat: sympy.Expr = sympy.S.Zero
    for position in range(count):
        flat += index_var("x", position) * int(product(sizes[position + 1 :]))
    return sympy.expand(flat)


def _product_reads(gemm: Gemm, flat: sympy.Expr, k: sympy.Symbol) -> BodyValue:
    """The product at point `flat` of its result and reduction index `k` in the loop IR:
    `a[b, m, k] * b[b, k, n] (+ bias[m, n])`."""
    batch = FloorDiv(flat, gemm.m * gemm.n) if gemm.batch > 1 else sympy.S.Zero
    row = ModularIndexing(flat, gemm.n, gemm.m)
    col = ModularIndexing(flat, 1, gemm.n)
    a, b = gemm.a, gemm.b
    a_index = a.offset + batch * a.batch_stride + row * a.row_stride + k * a.col_stride
    b_index = b.offset + batch * b.batch_stride + k * b.row_stride + col * b.col_stride
    value = body.binary(
        "mul",
        body.load(a.storage, sympy.expand(a_index), gemm.dtype),
        body.load(b.storage, sympy.expand(b_index), gemm.dtype),
    )
    if gemm.bias is not None:  # the bias is read at the result's point (memory planning)
        bias = gemm.bias
        bias_index = bias.offset + row * bias.row_stride + col * bias.col_stride
        bias_value = body.load(bias.storage, sympy.expand(bias_index), gemm.dtype)
        value = body.binary("add", value, bias_value)
    return value


def _gemm_kernel(gemm: Gemm, epilogue: Kernel | None, number: int) -> GemmKernel:
    """The kernel: the matmul as a reduction member over the epilogue's loops, then the
    epilogue's members."""
    outer = (
        epilogue.outer if epilogue is not None else (sympy.Integer(gemm.batch * gemm.m * gemm.n),)
    )
    sizes = static(outer)
    assert sizes is not None
    flat = _flat(len(sizes), sizes)
    k = index_var("r", 0)
    if gemm.conv is not None:
        from ember.inductor.templates.conv import conv_reads

        product_value = conv_reads(gemm, flat, k)
    else:
        product_value = _product_reads(gemm, flat, k)
    node = LoopNode(
        name=f"gemm_{gemm.result}",
        storage=gemm.result,
        store_index=flat,
        ranges=tuple(sympy.Integer(s) for s in sizes),
        variables=tuple(index_var("x", p) for p in range(len(sizes))),
        body=product_value,
        dtype=gemm.dtype,
        origins=("conv" if gemm.conv is not None else "mm" if gemm.batch == 1 else "bmm",),
        reduction_ranges=(sympy.Integer(gemm.k),),
        reduction_variables=(k,),
        reduction_type="sum",
        sources=(gemm.source,) if gemm.source else (),
    )
    member = Member(node, "reduction", node.body, flat)
    members = [member, *(epilogue.members if epilogue is not None else [])]
    kernel = GemmKernel(
        name=str(number),
        outer=tuple(sympy.Integer(s) for s in sizes),
        inner=(sympy.Integer(gemm.k),),
        members=members,
        gemm=gemm,
        epilogue=epilogue,
    )
    origins = "_".join(kernel.origins()[:6])
    kernel.name = f"triton_gemm_{origins}_{number}"
    if epilogue is not None:
        kernel.local_buffers |= epilogue.local_buffers
    return kernel


__all__ = [
    "GEMM_DTYPES",
    "GEMM_TARGETS",
    "Gemm",
    "GemmKernel",
    "Operand",
    "dense",
    "static",
    "use_gemm_templates",
]
