"""Channels-last layout for convolution-heavy Graphs (issue 17): cuDNN runs NHWC convolutions
faster than NCHW ones, and an NCHW convolution of bf16 pays NCHW<->NHWC conversions around it
(ResNet-50 on the H100: 0.59 ms a step in inference, 1.92 ms in training).

`prefers_channels_last` decides per Graph, as torch.compile's layout optimization does: at
least `MIN_CONVOLUTIONS` 2-D convolutions (forward or backward) that carry at least half of the
Graph's matmul and convolution work. `channels_last` then gives every 4-D activation the
pass can place (convolution results and gradients, elementwise and reduction results: batch
norm, ReLU, pooling windows, their gradients) channels-last strides in its spec, which is
what lowering realizes buffers in (`LoweringContext.realize`, `reduction`, extern arguments),
so fused kernels read and write NHWC along the channels. Readers whose lowering takes
strides from a spec (`prims::view` of memory, `as_strided`, fallbacks) read a `prims::clone`
in the old strides instead: a lazy index function, free unless something realizes it.
A convolution's operand that stays NCHW (a graph input: the image, a float32 weight) is
cloned channels-last once. Graph outputs keep their declared strides (the pipeline's
contract), except a training forward's saved values, which the backward reads in the strides
the forward chose (`input_strides`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ember.inductor.passes.rebuild import rebuild
from ember.prims import Graph, GraphInput, Node, Ref, TensorSpec, Value, resolve_op
from ember.prims.ops import op_schema

CONVOLUTION = "aten::convolution.default"
COPY_TO = "prims::copy_to"
CONVOLUTION_BACKWARD = "aten::convolution_backward.default"
# A Graph with fewer convolutions keeps NCHW: one conversion (the image, a patch embedding)
# would cost what it saves.
MIN_CONVOLUTIONS = 2
# Positions of the tensors a convolution op reads whose layout picks cuDNN's kernels.
CONVOLUTION_OPERANDS = {CONVOLUTION: (0, 1), CONVOLUTION_BACKWARD: (0, 1, 2)}
# Products weighed against the convolutions (mm.dtype: `passes/float32_matmuls.py`).
MATMULS = ("aten::mm.default", "aten::mm.dtype", "aten::addmm.default", "aten::bmm.default")
# Readers that index their argument logically (any strides): they read restrided values.
LAYOUT_FREE_FAMILIES = ("elementwise", "reductions")
LAYOUT_FREE_VIEWS = frozenset(
    {
        "prims::broadcast_in_dim",
        "prims::permute",
        "prims::squeeze",
        "prims::unsqueeze",
        "prims::slice",
        "prims::reshape",
        "prims::flip",
        "prims::pad",
        "prims::clone",
    }
)
# The layout-free views whose result is its argument's memory seen otherwise (`pad`, `flip`
# and `clone` make values of their own, in their own specs' strides when realized).
MEMORY_VIEWS = LAYOUT_FREE_VIEWS - {"prims::pad", "prims::flip", "prims::clone"}
# Producers whose 4-D results take channels-last strides.
PLACED_FAMILIES = ("elementwise", "reductions")


def channels_last_strides(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """The strides of a dense NHWC tensor of NCHW `shape` (torch's `channels_last`)."""
    n, c, h, w = (int(s) for s in shape)
    del n
    return (h * w * c, 1, w * c, c)


def prefers_channels_last(
    graph: Graph,
    min_convolutions: int = MIN_CONVOLUTIONS,
    min_share: float = 0.5,
    depthwise: bool = False,
) -> bool:
    """Whether `graph` is convolution-heavy enough to run channels-last: at least
    `min_convolutions` 2-D convolutions (forward or backward, not transposed) doing at least
    `min_share` of the multiply-adds of its convolutions and matmuls, or, with `depthwise`
    (the backend's depthwise convolutions are slow NCHW), one of them a depthwise forward
    convolution in a Graph with no convolution gradients."""
    values = graph.values()
    convolutions = 0
    has_depthwise = gradients = False
    conv_work = matmul_work = 0
    for node in graph.nodes:
        if node.target in CONVOLUTION_OPERANDS:
            work = _convolution_work(node, values)
            if work is None:
                return False  # transposed, 1-D/3-D or symbolic: leave the Graph alone
            convolutions += 1
            conv_work += work
            gradients = gradients or node.target == CONVOLUTION_BACKWARD
            has_depthwise = has_depthwise or _depthwise(node, values)
        elif node.target in MATMULS:
            matmul_work += _matmul_work(node, values)
    total = conv_work + matmul_work
    if convolutions >= min_convolutions and depthwise and has_depthwise and not gradients:
        return True
    return convolutions >= min_convolutions and conv_work >= min_share * total


def _depthwise(node: Node, values: Mapping[str, Value]) -> bool:
    """Whether a 2-D convolution (or its backward) is depthwise: grouped, one input channel
    a group."""
    groups = node.args[8] if node.target == CONVOLUTION else node.args[9]
    weight = node.args[1] if node.target == CONVOLUTION else node.args[2]
    spec = values[weight.name].spec if isinstance(weight, Ref) else None
    if not isinstance(spec, TensorSpec) or not isinstance(groups, int) or groups <= 1:
        return False
    return int(spec.shape[1]) == 1


def channels_last(
    graph: Graph, input_strides: Mapping[int, tuple[int, ...]] | None = None
) -> Graph:
    """A new Graph whose 4-D activations have channels-last specs (see the module docstring).
    `input_strides` gives inputs, by position, the strides their tensors arrive with (a
    backward's saved activations, restrided by its forward)."""
    started = time.perf_counter()
    restrided: set[str] = set()
    inputs: list[GraphInput] = []
    for position, graph_input in enumerate(graph.inputs):
        spec = graph_input.value.spec
        strides = (input_strides or {}).get(position)
        if strides is not None and isinstance(spec, TensorSpec) and tuple(spec.strides) != strides:
            value = Value(graph_input.value.name, dataclasses.replace(spec, strides=strides))
            graph_input = dataclasses.replace(graph_input, value=value)
            restrided.add(value.name)
        inputs.append(graph_input)
    names = {graph_input.value.name for graph_input in graph.inputs}
    names |= {value.name for node in graph.nodes for value in node.output_values()}
    placed: dict[str, TensorSpec] = {}  # restrided values by name: their new specs
    original: dict[str, TensorSpec] = {}  # ...and their specs before
    for node in graph.nodes:
        if node.target == COPY_TO:
            # an in-place write (`x += residual`) returns its destination: it has the
            # destination's layout (a graph input's stays as it arrives)
            destination = node.args[0]
            if not (isinstance(destination, Ref) and destination.name in placed):
                continue
        elif not _places(node):
            continue
        # a convolution's 1x1 result or weight gradient: cuDNN returns it in channels-last
        # strides (which differ in size-1 dims only), so declaring them saves a copy
        points = node.target in CONVOLUTION_OPERANDS
        for value in node.output_values():
            spec = value.spec
            if isinstance(spec, TensorSpec) and _placeable(spec, points):
                placed[value.name] = _with_strides(spec, channels_last_strides(spec.shape))
                original[value.name] = spec
    pooled = _pooling_gradients(graph)
    values = graph.values()
    for name, spec in pooled.items():
        before = values[name].spec
        assert isinstance(before, TensorSpec)
        placed[name], original[name] = spec, before
    for graph_input in graph.inputs:
        if graph_input.value.name in restrided:
            assert isinstance(graph_input.value.spec, TensorSpec)
            original[graph_input.value.name] = graph_input.value.spec
    specs = {**{i.value.name: i.value.spec for i in inputs}, **placed}
    nodes: list[Node] = []
    clones: dict[str, str] = {}  # a restrided value -> its clone in the old strides
    nhwc: dict[str, str] = {}  # an NCHW convolution operand -> its channels-last clone

    def fresh(stem: str) -> str:
        name, count = stem, 0
        while name in names:
            count += 1
            name = f"{stem}_{count}"
        names.add(name)
        return name

    def old_strides(ref: Ref, source: Any) -> Ref:
        if ref.name not in clones:
            spec = original[ref.name]
            clone = Value(fresh(f"{ref.name}_nchw"), spec)
            nodes.append(Node("prims::clone", [ref], {}, [clone], source))
            clones[ref.name] = clone.name
        return Ref(clones[ref.name])

    def as_nhwc(ref: Ref, source: Any) -> Ref:
        spec = specs.get(ref.name)
        if not isinstance(spec, TensorSpec) or not _placeable(spec):
            return ref
        if ref.name in placed or ref.name in restrided:
            return ref
        if ref.name not in nhwc:
            clone = Value(
                fresh(f"{ref.name}_nhwc"), _with_strides(spec, channels_last_strides(spec.shape))
            )
            nodes.append(Node("prims::clone", [ref], {}, [clone], source))
            nhwc[ref.name] = clone.name
        return Ref(nhwc[ref.name])

    moved = set(placed) | restrided
    # values whose memory is in another order than their spec says (size-1 dimensions
    # aside), and the views taken of them
    viewed = {name for name in moved if _reordered(original[name], specs[name])}
    for node in graph.nodes:
        operands = CONVOLUTION_OPERANDS.get(node.target, ())
        free = _reads_any_layout(node)
        written = _written(node)
        if node.target == COPY_TO:  # the source is stored logically, the destination written
            free = True

        def redirect(
            arg: Any,
            key: int | str,
            source: Any = node.source,
            free: bool = free,
            written: set[int | str] = written,
        ) -> Any:
            if free or key in written:  # a write must reach the value itself
                return arg
            return _redirect(arg, moved, lambda ref: old_strides(ref, source))

        args = [
            as_nhwc(arg, node.source)
            if position in operands and isinstance(arg, Ref)
            else redirect(arg, position)
            for position, arg in enumerate(node.args)
        ]
        kwargs = {key: redirect(arg, key) for key, arg in node.kwargs.items()}
        outputs = [_respec(output, placed) for output in node.outputs]
        nodes.append(dataclasses.replace(node, args=args, kwargs=dict(kwargs), outputs=outputs))
        if node.target in MEMORY_VIEWS:
            # a view of a restrided value is memory in the value's new strides, which its
            # own spec does not say: a reader that takes strides from the spec (`prims::view`
            # into a matmul's batch) reads it through a clone too (MobileViT's attention
            # probabilities, (8, 4, 36, 36) channels-last, saved, broadcast then viewed
            # (32, 36, 36) by the backward: its bmm read them in the wrong order, gradients
            # off by 0.5-8% on the CPU)
            if any(read.name in viewed for read in _refs(node.args)):
                for value in node.output_values():
                    if isinstance(value.spec, TensorSpec):
                        viewed.add(value.name)
                        original[value.name] = value.spec
                        moved.add(value.name)
    result = rebuild(graph, nodes, pass_name="channels_last", started=started)
    result.inputs = inputs
    return result


def _pooling_gradients(graph: Graph) -> dict[str, TensorSpec]:
    """Max pooling's backward accumulates into `[N, C, H*W]` (`prims::scatter_add`) and
    reshapes that to `[N, C, H, W]`: the accumulator takes strides `(C*H*W, 1, C)`, its 4-D
    views channels-last, so the atomic adds and the gradient kernels reading it walk the
    channels (in NCHW they read across the channels-last maps around them)."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for arg in node.args:
            if isinstance(arg, Ref):
                readers.setdefault(arg.name, []).append(node)
    specs: dict[str, TensorSpec] = {}
    for node in graph.nodes:
        if node.target != "prims::scatter_add":
            continue
        result = next(iter(node.output_values()), None)
        spec = result.spec if result is not None else None
        if result is None or not isinstance(spec, TensorSpec) or spec.ndim != 3:
            continue
        if not spec.is_static() or spec.storage_offset != 0:
            continue
        n, c, length = (int(s) for s in spec.shape)
        if c <= 1 or length <= 1 or tuple(spec.strides) != (c * length, length, 1):
            continue
        views = readers.get(result.name, [])
        shaped = [next(iter(view.output_values()), None) for view in views]
        if not views or not all(
            view.target in ("prims::reshape", "prims::view")
            and value is not None
            and isinstance(value.spec, TensorSpec)
            and _placeable(value.spec)
            and tuple(int(s) for s in value.spec.shape[:2]) == (n, c)
            for view, value in zip(views, shaped)
        ):
            continue
        specs[result.name] = _with_strides(spec, (c * length, 1, c))
        for value in shaped:
            assert value is not None and isinstance(value.spec, TensorSpec)
            specs[value.name] = _with_strides(value.spec, channels_last_strides(value.spec.shape))
    return specs


def _places(node: Node) -> bool:
    if node.target in CONVOLUTION_OPERANDS:
        return True
    if node.target == "prims::clone":
        return True
    return _family(node.target) in PLACED_FAMILIES


def _reads_any_layout(node: Node) -> bool:
    if node.target in LAYOUT_FREE_VIEWS or node.target in CONVOLUTION_OPERANDS:
        return True
    return _family(node.target) in LAYOUT_FREE_FAMILIES


def _written(node: Node) -> set[int | str]:
    """Positions (and names) of the arguments `node` writes in place."""
    if node.target == COPY_TO:
        return {0}
    try:
        schema = op_schema(node.target)
    except Exception:  # an op this process cannot resolve: nothing known to be written
        return set()
    if schema is None:
        return set()
    return {
        key
        for position, argument in enumerate(schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
        for key in (position, argument.name)
    }


def _family(target: str) -> str | None:
    if not target.startswith("prims::"):
        return None
    try:
        return getattr(resolve_op(target), "family", None)
    except Exception:  # an op this process cannot resolve reads its arguments as traced
        return None


def _placeable(spec: TensorSpec, points: bool = False) -> bool:
    """A dense NCHW 4-D spec whose channels-last strides differ from its own (`points`:
    also in size-1 dims only, a 1x1 map)."""
    if spec.ndim != 4 or not spec.is_static():
        return False
    n, c, h, w = (int(s) for s in spec.shape)
    if n == 0 or c <= 1 or h * w < (1 if points else 2) or spec.storage_offset != 0:
        return False
    return tuple(spec.strides) == (c * h * w, h * w, w, 1)


def _with_strides(spec: TensorSpec, strides: tuple[int, ...]) -> TensorSpec:
    return dataclasses.replace(spec, strides=strides)


def _respec(output: Any, placed: Mapping[str, TensorSpec]) -> Any:
    if isinstance(output, Value) and output.name in placed:
        return Value(output.name, placed[output.name])
    if isinstance(output, list):
        return [_respec(item, placed) for item in output]
    return output


def _reordered(before: Any, after: Any) -> bool:
    """Whether `after`'s strides order memory otherwise than `before`'s (dimensions of size
    1 aside: their strides never move an element)."""
    if not isinstance(before, TensorSpec) or not isinstance(after, TensorSpec):
        return False
    return any(
        int(size) != 1 and int(old) != int(new)
        for size, old, new in zip(before.shape, before.strides, after.strides)
    )


def _refs(args: Iterable[Any]) -> Iterable[Ref]:
    """The Refs among `args` (one level of lists, as Graph arguments nest)."""
    for arg in args:
        if isinstance(arg, Ref):
            yield arg
        elif isinstance(arg, list):
            yield from (item for item in arg if isinstance(item, Ref))


def _redirect(arg: Any, moved: set[str], old: Any) -> Any:
    if isinstance(arg, Ref):
        return old(arg) if arg.name in moved else arg
    if isinstance(arg, list):
        return [_redirect(item, moved, old) for item in arg]
    return arg


def _convolution_work(node: Node, values: Mapping[str, Value]) -> int | None:
    """Multiply-adds of a 2-D convolution (forward: output x weight fan-in; backward: the
    same for each gradient it computes), None when it is not a plain 2-D one."""
    weight = node.args[1] if node.target == CONVOLUTION else node.args[2]
    output = node.args[0] if node.target == CONVOLUTION_BACKWARD else None
    weight_spec = values[weight.name].spec if isinstance(weight, Ref) else None
    if node.target == CONVOLUTION:
        transposed = node.args[6] if len(node.args) > 6 else False
        result = next(iter(node.output_values()), None)
        out_spec = result.spec if result is not None else None
    else:
        transposed = node.args[7] if len(node.args) > 7 else False
        out_spec = values[output.name].spec if isinstance(output, Ref) else None
    if (
        transposed
        or not isinstance(weight_spec, TensorSpec)
        or not isinstance(out_spec, TensorSpec)
    ):
        return None
    if weight_spec.ndim != 4 or out_spec.ndim != 4:
        return None
    if not (weight_spec.is_static() and out_spec.is_static()):
        return None
    fan_in = _product(weight_spec.shape[1:])
    work = _product(out_spec.shape) * fan_in
    return work if node.target == CONVOLUTION else 2 * work


def _matmul_work(node: Node, values: Mapping[str, Value]) -> int:
    """Multiply-adds of `mm`, `addmm` or `bmm`: the product's size times the inner dim."""
    result = next(iter(node.output_values()), None)
    first = node.args[1] if node.target == "aten::addmm.default" else node.args[0]
    operand = values[first.name].spec if isinstance(first, Ref) else None
    if result is None or not isinstance(result.spec, TensorSpec) or not result.spec.is_static():
        return 0
    if not isinstance(operand, TensorSpec) or not operand.is_static() or not operand.ndim:
        return 0
    return _product(result.spec.shape) * int(operand.shape[-1])


def _product(sizes: Iterable[Any]) -> int:
    total = 1
    for size in sizes:
        total *= int(size)
    return total


__all__ = ["channels_last", "channels_last_strides", "prefers_channels_last"]
