"""Padding of misaligned matmul dims: `mm(a, b)` whose operands or result have a leading
dimension that is not a multiple of 16 bytes runs on cuBLAS's alignment-1 kernels (GPT-2's LM
head, vocabulary 50257: a 3.3 ms sm75 CUTLASS kernel on the H100 where the padded product
takes 0.45 ms on an sm90 kernel).

For a large enough `aten::mm` or `aten::addmm` (its bias padded like the result) of 16-bit
floats on a GPU, the pass pads (with zeros) each
dimension that is some matrix's leading dimension and misaligned:

- K, when `a` is row-major or `b` column-major (both operands are padded along K: the extra
  products are zero);
- M, when `a` is column-major (a transposed view), and N always when misaligned (the result's
  rows), or when `b` is row-major: the result is computed padded and sliced back, a view
  whose rows keep the padded stride.

A Graph with size symbols is padded too where M alone is symbolic (a decoder's batch times
its prompt length): N and K are static and padded as above, M's rows never are, and whether
the product is large enough is decided at the symbols' largest values (unbounded: large; at
the hints, a decoder first made dynamic at batch 4 x length 4 left its LM head unpadded for
every later length: 7.4 ms at 16x256 beside static 4.1). Under automatic dynamic shapes
GPT-2's LM head otherwise ran on the alignment-1 kernel at every length (3.3 ms at 16x256 on
the H100 beside the static graph's 0.45 ms).

The padded operands keep their operand's stride order (a transposed weight stays a
row-major buffer passed transposed), and their pads are lazy in lowering: a pad over a cast
weight or a kernel's result is written by that kernel into the padded buffer, so padding
costs no extra pass over memory unless the operand is a graph input.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from typing import Any

import sympy
import torch

from ember.inductor.passes.rebuild import rebuild, renamed_node
from ember.prims import Graph, Node, Ref, TensorSpec, Value

logger = logging.getLogger("ember.inductor")

ALIGNMENT_BYTES = 16
PADDED_DTYPES = (torch.bfloat16, torch.float16)
# M·N·K below which a misaligned product stays as it is (padding costs a launch or a copy).
MIN_FLOPS = 1 << 30


def pad_matmuls(
    graph: Graph,
    *,
    devices: Iterable[str] = ("cuda",),
    dtypes: Iterable[torch.dtype] = PADDED_DTYPES,
    min_flops: int = MIN_FLOPS,
) -> Graph:
    """A new Graph whose large misaligned `aten::mm` nodes compute on padded operands."""
    started = time.perf_counter()
    devices, dtypes = set(devices), set(dtypes)
    uppers = {name: info.upper for name, info in graph.symbols.items()}
    values = graph.values()
    names = set(values) | {i.value.name for i in graph.inputs}
    nodes: list[Node] = []
    padded = 0
    respec: dict[str, TensorSpec] = {}  # views of a padded result: their strides follow it
    producers = {v.name: n for n in graph.nodes for v in n.output_values()}
    for position, node in enumerate(graph.nodes):
        replacement = _pad(node, values, producers, names, devices, dtypes, min_flops, uppers)
        if replacement is not None:
            sliced = replacement[-1].outputs[0]
            assert isinstance(sliced, Value)
            followed = _follow_views(graph.nodes[position + 1 :], sliced)
            if followed is None:  # a view whose strides cannot follow the padding
                replacement = None
            else:
                respec.update(followed)
        if replacement is None:
            nodes.append(_respecced(renamed_node(node, {}), respec))
            continue
        nodes.extend(replacement)
        padded += 1
    if padded:
        logger.debug("pad_matmuls padded %d matmuls", padded)
    return rebuild(graph, nodes, pass_name="pad_matmuls", started=started)


def _pad(
    node: Node,
    values: dict[str, Value],
    producers: dict[str, Node],
    names: set[str],
    devices: set[str],
    dtypes: set[torch.dtype],
    min_flops: int,
    uppers: dict[str, int | None],
) -> list[Node] | None:
    bias_ref: Ref | None = None
    if node.target == "aten::mm.default" and len(node.args) == 2 and not node.kwargs:
        a_ref, b_ref = node.args
    elif node.target == "aten::addmm.default" and len(node.args) == 3 and not node.kwargs:
        bias_ref, a_ref, b_ref = node.args  # beta and alpha at their defaults (1)
        if not isinstance(bias_ref, Ref):
            return None
    else:
        return None
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if not isinstance(a_ref, Ref) or not isinstance(b_ref, Ref) or not isinstance(out, Value):
        return None
    a, b, c = values[a_ref.name].spec, values[b_ref.name].spec, out.spec
    if not all(isinstance(s, TensorSpec) for s in (a, b, c)):
        return None
    assert isinstance(a, TensorSpec) and isinstance(b, TensorSpec) and isinstance(c, TensorSpec)
    if c.device.type not in devices or c.dtype not in dtypes or not a.dtype == b.dtype == c.dtype:
        return None
    # M may be a symbolic size (a decoder's batch times its prompt length): its rows are never
    # padded; its largest value decides whether the product is large enough (no upper bound:
    # it is; the sizes seen at capture say nothing of the later calls)
    (m, k), (_, n) = a.shape, b.shape
    if not b.is_static() or not (_static_size(a.shape[1]) and _static_size(c.shape[1])):
        return None
    k, n = int(k), int(n)
    rows = int(m) if _static_size(m) else _largest(m, uppers)
    if rows is not None and rows * n * k < min_flops:
        return None
    align = ALIGNMENT_BYTES // c.dtype.itemsize
    a_columns, b_columns = _column_major(a), _column_major(b)
    pad_k = k % align != 0 and (not a_columns or b_columns)
    pad_m = _static_size(m) and int(m) % align != 0 and a_columns
    pad_n = n % align != 0
    if not (pad_k or pad_m or pad_n):
        return None
    if pad_k and not _static_size(m):
        return None  # `a` would be padded over its symbolic rows
    if _static_size(m):
        m = int(m)
    mp, kp, np_ = (_up(m, align) if pad_m else m), (_up(k, align) if pad_k else k), n
    np_ = _up(n, align) if pad_n else n
    new: list[Node] = []

    def fresh(stem: str) -> str:
        name, count = stem, 0
        while name in names:
            count += 1
            name = f"{stem}_{count}"
        names.add(name)
        return name

    def padded_operand(ref: Ref, spec: TensorSpec, rows: int, cols: int, columns: bool) -> Ref:
        if (rows, cols) == tuple(spec.shape):
            return ref
        assert isinstance(spec.shape[0], int) and isinstance(spec.shape[1], int)
        base = _transposed(ref, values, producers) if columns else None
        if base is not None:
            # pad the row-major value the operand transposes and transpose the padded one: the
            # matmul that reads the value itself pads it alike, the two pads are one node
            # after common subexpressions, and one buffer serves both (GPT-2's and BERT's
            # vocabulary-wide loss gradient, read by the LM head's input and weight gradients)
            base_spec = values[base.name].spec
            assert isinstance(base_spec, TensorSpec)
            padded_base = Value(
                fresh(f"{base.name}_padded"), _spec(base_spec, (cols, rows), (rows, 1))
            )
            high = [cols - spec.shape[1], rows - spec.shape[0]]
            pad_args = [base, 0.0, [0, 0], high, [0, 0]]
            new.append(Node("prims::pad", pad_args, {}, [padded_base], node.source))
            transposed = Value(fresh(f"{ref.name}_padded"), _spec(spec, (rows, cols), (1, rows)))
            permute_args = [Ref(padded_base.name), [1, 0]]
            new.append(Node("prims::permute", permute_args, {}, [transposed], node.source))
            return Ref(transposed.name)
        strides = (1, rows) if columns else (cols, 1)
        value = Value(fresh(f"{ref.name}_padded"), _spec(spec, (rows, cols), strides))
        high = [rows - spec.shape[0], cols - spec.shape[1]]
        new.append(Node("prims::pad", [ref, 0.0, [0, 0], high, [0, 0]], {}, [value], node.source))
        return Ref(value.name)

    operands: list[Ref] = []
    if bias_ref is not None:  # broadcast along the result's rows and columns, padded alike
        bias = values[bias_ref.name].spec
        if not isinstance(bias, TensorSpec) or bias.dtype != c.dtype or bias.ndim not in (1, 2):
            return None
        if bias.ndim == 1:
            if bias.shape[0] != n:
                return None
            if np_ == n:
                operands.append(bias_ref)
            else:
                padded_bias = Value(fresh(f"{bias_ref.name}_padded"), _spec(bias, (np_,), (1,)))
                pad_args = [bias_ref, 0.0, [0], [np_ - n], [0]]
                new.append(Node("prims::pad", pad_args, {}, [padded_bias], node.source))
                operands.append(Ref(padded_bias.name))
        else:
            rows, cols = bias.shape
            target = (mp if rows == m else rows, np_ if cols == n else cols)
            operands.append(padded_operand(bias_ref, bias, *target, _column_major(bias)))
    operands.append(padded_operand(a_ref, a, mp, kp, a_columns))
    operands.append(padded_operand(b_ref, b, kp, np_, b_columns))
    if (mp, np_) == (m, n):
        new.append(Node(node.target, operands, {}, [out], node.source))
        return new
    product = Value(fresh(f"{out.name}_padded"), _spec(c, (mp, np_), (np_, 1)))
    new.append(Node(node.target, operands, {}, [product], node.source))
    view = Value(out.name, _spec(c, (m, n), (np_, 1)))
    new.append(
        Node("prims::slice", [Ref(product.name), [0, 0], [m, n], None], {}, [view], node.source)
    )
    return new


# Views whose lowering takes strides from their traced spec (`prims::view` of memory that is
# not dense) or whose strides this pass cannot recompute: their specs must follow the padding.
_VIEW_OF_SPEC = "prims::view"
_LAYOUT_VIEWS = ("prims::squeeze", "prims::unsqueeze", "prims::slice", "prims::broadcast_in_dim")


def _follow_views(later: list[Node], sliced: Value) -> dict[str, TensorSpec] | None:
    """New specs for the views of the padded result `sliced` (its rows keep the padded
    stride), or None when one of them reads strides this pass cannot recompute."""
    assert isinstance(sliced.spec, TensorSpec)
    changed: dict[str, TensorSpec] = {sliced.name: sliced.spec}
    unknown: set[str] = set()
    for node in later:
        source = node.args[0] if node.args else None
        if not isinstance(source, Ref) or not (source.name in changed or source.name in unknown):
            continue
        output = node.outputs[0] if node.outputs else None
        if not isinstance(output, Value) or not isinstance(output.spec, TensorSpec):
            continue
        if node.target == "prims::as_strided" or (
            node.target == _VIEW_OF_SPEC and source.name in unknown
        ):
            return None
        if node.target == _VIEW_OF_SPEC:
            before = changed[source.name]
            strides = _view_strides(before.shape, before.strides, output.spec.shape)
            if strides is None:
                return None
            changed[output.name] = _spec(output.spec, tuple(output.spec.shape), strides)
        elif node.target == "prims::permute":
            if source.name not in changed:
                unknown.add(output.name)
                continue
            before = changed[source.name]
            dims = node.args[1]
            assert isinstance(dims, list)
            shape = tuple(output.spec.shape)
            changed[output.name] = _spec(output.spec, shape, tuple(before.strides[d] for d in dims))
        elif node.target in _LAYOUT_VIEWS:
            unknown.add(output.name)
    del changed[sliced.name]
    return changed


def _view_strides(
    old_shape: tuple[object, ...], old_strides: tuple[object, ...], shape: tuple[object, ...]
) -> tuple[object, ...] | None:
    """The strides of a view of `shape` over a tensor of `old_shape` and `old_strides` (torch's
    computeStride), or None when no such view exists."""
    if not all(isinstance(v, int) for v in (*old_shape, *old_strides, *shape)):
        return _symbolic_view_strides(old_shape, old_strides, shape)
    olds = [int(v) for v in old_shape]  # type: ignore[call-overload]
    old_st = [int(v) for v in old_strides]  # type: ignore[call-overload]
    new = [int(v) for v in shape]  # type: ignore[call-overload]
    if not olds:
        return tuple(1 for _ in new)
    strides = [0] * len(new)
    view_d = len(new) - 1
    chunk_base = old_st[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(olds) - 1, -1, -1):
        tensor_numel *= olds[tensor_d]
        if tensor_d == 0 or (
            olds[tensor_d - 1] != 1 and old_st[tensor_d - 1] != tensor_numel * chunk_base
        ):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                strides[view_d] = view_numel * chunk_base
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = old_st[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(strides) if view_d == -1 else None


def _symbolic_view_strides(
    old_shape: tuple[object, ...], old_strides: tuple[object, ...], shape: tuple[object, ...]
) -> tuple[object, ...] | None:
    """`_view_strides` where sizes are symbolic, for views that split or keep each dim of the
    padded product (its dims never merge: a gap lies between its rows): from the last dim,
    the new dims whose sizes multiply to one old dim's size take strides within it. None
    where the sizes do not group so (as far as `sympy` proves them equal)."""
    strides: list[object] = [0] * len(shape)
    view_d = len(shape) - 1
    for old_d in range(len(old_shape) - 1, -1, -1):
        size, step = sympy.sympify(old_shape[old_d]), sympy.sympify(old_strides[old_d])
        covered: sympy.Expr = sympy.S.One
        while view_d >= 0 and sympy.expand(covered - size) != 0:
            new = sympy.sympify(shape[view_d])
            strides[view_d] = _plain(sympy.expand(step * covered))
            covered = covered * new
            view_d -= 1
            if sympy.cancel(size / covered).is_integer is not True:
                return None
        while view_d >= 0 and old_d == 0 and shape[view_d] == 1:
            strides[view_d] = _plain(sympy.expand(step * covered))
            view_d -= 1
    return tuple(strides) if view_d == -1 else None


def _plain(value: sympy.Expr) -> object:
    """A size as specs hold it: an int when it is one."""
    return int(value) if value.is_Integer else value


def _static_size(value: object) -> bool:
    return isinstance(value, int) or (isinstance(value, sympy.Basic) and value.is_Integer)


def _largest(size: object, uppers: dict[str, int | None]) -> int | None:
    """A symbolic size at its symbols' upper bounds (sizes only grow with their symbols);
    None when one is unbounded."""
    expr = sympy.sympify(size)
    values = {symbol: uppers.get(str(symbol)) for symbol in expr.free_symbols}
    if any(v is None for v in values.values()):
        return None
    return int(expr.xreplace({symbol: sympy.Integer(v) for symbol, v in values.items()}))


def _respecced(node: Node, respec: dict[str, TensorSpec]) -> Node:
    if not respec or not any(isinstance(o, Value) and o.name in respec for o in node.outputs):
        return node
    outputs = [
        Value(o.name, respec[o.name]) if isinstance(o, Value) and o.name in respec else o
        for o in node.outputs
    ]
    return dataclasses.replace(node, outputs=outputs)


def _transposed(ref: Ref, values: dict[str, Value], producers: dict[str, Node]) -> Ref | None:
    """The row-major 2-D value `ref` is the transpose of (`prims::permute(x, [1, 0])`)."""
    node = producers.get(ref.name)
    if node is None or node.target != "prims::permute" or list(node.args[1]) != [1, 0]:
        return None
    base = node.args[0]
    if not isinstance(base, Ref) or base.name not in values:
        return None
    spec = values[base.name].spec
    if not isinstance(spec, TensorSpec) or spec.ndim != 2 or spec.strides[1] != 1:
        return None
    return base


def _column_major(spec: TensorSpec) -> bool:
    """A 2-D operand whose first dim is the contiguous one (a transposed view)."""
    return spec.strides[0] == 1 and spec.strides[1] != 1 and spec.shape[1] != 1


def _up(size: int, align: int) -> int:
    return (size + align - 1) // align * align


def _spec(like: TensorSpec, shape: tuple[Any, ...], strides: tuple[Any, ...]) -> TensorSpec:
    return TensorSpec(like.dtype, shape, strides, like.device, like.requires_grad)


__all__ = ["pad_matmuls"]
