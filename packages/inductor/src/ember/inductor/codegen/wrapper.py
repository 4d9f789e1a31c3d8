"""The Python wrapper: the function that runs a compiled graph.

It binds inputs and size symbols, allocates buffers (`empty_strided`, or a view of dead
memory: `scheduler/memory_planning.py`), calls each kernel with its storages' pointers (through
its `launch` fast path), calls extern ops with strided views (a result of Tensors bound as it comes
and its strides checked inline), frees each buffer after its last use, and returns the outputs
as views of the storages they live in (so an output that aliases an input aliases it here
too). Its source is plain text: it is cached, and printed under
`EMBER_LOGS=output_code`. It takes its inputs as a list that it empties (`args.clear()`), and
drops each input after its last use too.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sympy
import torch

from ember.inductor.codegen.backend import CodegenBackend, KernelSource
from ember.inductor.codegen.cpp.printer import python_index
from ember.inductor.ir.indexing import same
from ember.inductor.ir.program import ExternNode, Program, Storage, TensorArg
from ember.inductor.ir.tensors import Layout
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode
from ember.inductor.scheduler.memory_planning import Allocation, MemoryPlan, plan_memory
from ember.prims.ops import op_schema
from ember.prims.symbolic import ValueRange, bound


def generate_wrapper(
    program: Program,
    scheduled: Sequence[ScheduledNode],
    sources: dict[str, KernelSource],
    backend: CodegenBackend,
    device: torch.device | None = None,
    host_inputs: Sequence[int] = (),
    *,
    plan: MemoryPlan | None = None,
    detached_outputs: int = 0,
) -> str:
    """The wrapper's source. Buffers are allocated on `device`; the inputs at positions
    `host_inputs` are CPU tensors of a graph computing on another device (scalars and
    index tensors eager lets mix with GPU tensors): they are copied there first. Buffers
    follow `plan` (by default `plan_memory`'s: dead memory reused, released after last use).
    The last `detached_outputs` outputs (a training forward's saved values), where they are
    views of the graph's own buffers, are returned detached: a view keeps its base tensor,
    a second user of the storage that the backward's in-place check (a donated saved value
    written over when the call holds it alone) would count against it."""
    device = device or torch.device("cpu")
    lines = [f"DEVICE = torch.device({str(device)!r})", "", "", "def call(args):"]
    emit = lines.append
    inputs = program.input_storages
    if inputs:
        # the caller's list is emptied: each input lives only as long as its name here, which
        # the plan drops after its last use (a training backward's saved values, as in
        # torch.compile's boxed calls; a caller that keeps its own references frees nothing)
        emit(f"    {', '.join(inputs)}, = args")
        emit("    args.clear()")
    for position in host_inputs:
        emit(f"    {inputs[position]} = {inputs[position]}.to(DEVICE, non_blocking=True)")
    for symbol, (position, dim) in program.size_symbols.items():
        emit(f"    {symbol} = {inputs[position]}.shape[{dim}]")
    names = _SizeNames()
    hoisted_at = len(lines)  # the sizes computed from the symbols go here
    plan = plan or plan_memory(program, scheduled, sources)
    if plan.unread_inputs:
        emit(f"    del {', '.join(plan.unread_inputs)}")
    program = _allocated_as_viewed(program, scheduled, plan)
    for position, item in enumerate(scheduled):
        for allocation in plan.allocations.get(position, ()):
            allocation = dataclasses.replace(
                allocation, layout=program.storages[allocation.name].layout or allocation.layout
            )
            emit(f"    {_allocate(allocation, program, names)}")
            if allocation.reuses is not None and not allocation.in_place:
                emit(f"    del {allocation.reuses}")
        if isinstance(item, Kernel):
            source = sources[item.name]
            call_args = [names.expression(n) for n in source.grid] + [
                backend.pointer(a.name) if a.kind == "pointer" else a.name for a in source.arguments
            ]
            # `.launch`: a Triton kernel's bound fast path (one Python frame, not two)
            emit(f"    kernels[{source.name!r}].launch({', '.join(call_args)})")
        else:
            _extern(emit, item, program, names)
        dead = plan.releases.get(position)
        if dead:
            emit(f"    del {', '.join(dead)}")
    results = [_literal(arg, program, names) for arg in program.outputs]
    inputs_set = set(inputs)
    for position in range(max(len(results) - detached_outputs, 0), len(results)):
        arg = program.outputs[position]
        if (
            isinstance(arg, TensorArg)
            and arg.storage not in inputs_set
            and results[position].startswith("as_strided(")
        ):
            results[position] += ".detach()"
    for position, layout in program.output_restrides.items():
        size, stride = names.shape(layout.size), names.shape(layout.stride)
        results[position] = f"restride({results[position]}, {size}, {stride})"
    emit(f"    return ({''.join(r + ', ' for r in results)})")
    lines[hoisted_at:hoisted_at] = [f"    {name} = {text}" for text, name in names.names.items()]
    return "\n".join(lines) + "\n"


def _allocated_as_viewed(
    program: Program, scheduled: Sequence[ScheduledNode], plan: MemoryPlan
) -> Program:
    """`program` with each buffer the wrapper allocates in the one layout every extern call and
    output views it in, where that layout spans the same elements: kernels take only its
    pointer, so the view (an `as_strided` a call, ~1-2 us on the GPU's host: a (b, s, k)
    kernel result read by `addmm` as (b*s, k), 74 of GPT-2's 129 views a step) is the buffer
    itself."""
    allocated = {a.name for allocations in plan.allocations.values() for a in allocations}
    seen: dict[str, set[tuple[Any, ...]]] = {}
    for item in scheduled:
        if isinstance(item, ExternNode):
            for arg in _tensor_args([item.args, list(item.kwargs.values())]):
                seen.setdefault(arg.storage, set()).add(_key(arg.layout))
    for arg in _tensor_args(program.outputs):
        seen.setdefault(arg.storage, set()).add(_key(arg.layout))
    storages = dict(program.storages)
    for name, layouts in seen.items():
        own = storages[name].layout
        if name not in allocated or own is None or len(layouts) != 1:
            continue
        ((dtype, size, stride, offset),) = layouts
        if (
            offset == 0
            and dtype == own.dtype
            and (size, stride) != (own.size, own.stride)
            and _same_span((size, stride), (own.size, own.stride))
        ):
            storages[name] = dataclasses.replace(storages[name], layout=Layout(dtype, size, stride))
    if storages == program.storages:
        return program
    return dataclasses.replace(program, storages=storages)


def _tensor_args(values: Any) -> Iterator[TensorArg]:
    for value in values:
        if isinstance(value, TensorArg):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensor_args(value)


def _key(layout: Layout) -> tuple[Any, ...]:
    return (layout.dtype, tuple(layout.size), tuple(layout.stride), layout.offset)


def _span(size: Sequence[Any], stride: Sequence[Any]) -> int | None:
    """Elements from the first to one past the last that a layout reaches (None: symbolic, or
    empty)."""
    if not all(isinstance(n, (int, sympy.Integer)) for n in (*size, *stride)):
        return None
    if any(int(n) == 0 for n in size):
        return None
    return 1 + sum((int(n) - 1) * int(st) for n, st in zip(size, stride))


def _same_span(
    a: tuple[Sequence[Any], Sequence[Any]], b: tuple[Sequence[Any], Sequence[Any]]
) -> bool:
    """Whether two layouts (sizes, strides) reach the same elements from the same start. Over
    size symbols the spans are compared as polynomials: a symbolic Graph's (s0, 4, s1, 32)
    buffer read by `bmm` as (4*s0, s1, 32) was one `as_strided` a call (TinyDecoder at batch
    4 x 4 tokens: 40 views a call against the static Graph's 19)."""
    static = _span(*a), _span(*b)
    if static != (None, None):
        return static[0] == static[1] is not None
    if any(same(n, sympy.S.Zero) for n in (*a[0], *b[0])):
        return False

    def extent(size: Sequence[Any], stride: Sequence[Any]) -> sympy.Expr:
        return sympy.expand(
            1 + sum((sympy.sympify(n) - 1) * sympy.sympify(st) for n, st in zip(size, stride))
        )

    return sympy.expand(extent(*a) - extent(*b)) == 0


class _SizeNames:
    """The sizes and strides over size symbols that the wrapper uses, each computed once a
    call into a local right after the symbols are bound (`(s0**2, s0, 1, )` was built at each
    of its uses: ~140 tuples and products a call in a 12-layer GPT-2, where a static wrapper
    loads constants)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # Python text -> its local's name

    def shape(self, sizes: Sequence[Any]) -> str:
        """A tuple of sizes or strides: its literal when static, else its local."""
        text = "(" + "".join(f"{python_index(s)}, " for s in sizes) + ")"
        return text if _static(sizes) else self._name(text)

    def index(self, expr: Any) -> str:
        """One size expression: a literal or a symbol as it is, else its local."""
        return self.expression(python_index(expr))

    def expression(self, text: str) -> str:
        """Python text of a size (a kernel's grid): an int literal or a name as it is."""
        if text.isidentifier() or text.lstrip("-").isdigit():
            return text
        return self._name(text)

    def _name(self, text: str) -> str:
        name = self.names.get(text)
        if name is None:
            name = self.names[text] = f"size{len(self.names)}"
        return name


def _static(sizes: Sequence[Any]) -> bool:
    return all(isinstance(n, (int, sympy.Integer)) for n in sizes)


def _allocate(allocation: Allocation, program: Program, names: _SizeNames) -> str:
    """The line that creates a buffer: fresh, or a view of the dead storage it reuses."""
    layout = allocation.layout
    size, stride = names.shape(layout.size), names.shape(layout.stride)
    name, donor = allocation.name, allocation.reuses
    if donor is None:
        return f"{name} = empty_strided({size}, {stride}, dtype={layout.dtype}, device=DEVICE)"
    kind = "in place" if allocation.in_place else "reuse"
    if allocation.checked:  # a donated input: its memory only if this call holds it alone
        fresh = f"empty_strided({size}, {stride}, dtype={layout.dtype}, device=DEVICE)"
        view = (
            donor
            if _same_tensor(program.storages[donor], layout, program.size_ranges)
            else f"as_strided({donor}, {size}, {stride}, {donor}.storage_offset())"
        )
        sole = (
            f"getrefcount({donor}) == SOLE_REFERENCES and "
            f"storage_use_count({donor}.untyped_storage()._cdata) == SOLE_STORAGE_USES"
        )
        return f"{name} = {view} if {sole} else {fresh}  # in place {donor} if held alone"
    if _same_tensor(program.storages[donor], layout, program.size_ranges):
        return f"{name} = {donor}  # {kind} {donor}, same layout"
    offset = "0" if program.storages[donor].layout is not None else f"{donor}.storage_offset()"
    return f"{name} = as_strided({donor}, {size}, {stride}, {offset})  # {kind} {donor}"


def _same_tensor(
    donor: Storage, layout: Layout, ranges: Mapping[str, tuple[int, int | None]]
) -> bool:
    """Whether the view `_allocate` would make of `donor` is `donor` as it stands: a buffer
    allocated in `layout`, or an extern result declared in it (restrided to it when it has
    more than one element). The buffer is then the donor's tensor, not an `as_strided` of it
    (~2 us a call on the CPU; 12 in a 2-layer GPT-2 training step; over size symbols, 18 of
    a 12-layer GPT-2's 112 views a call)."""
    if donor.dtype != layout.dtype:
        return False
    own = donor.layout
    if own is not None:
        return own.offset == 0 and _key(own) == _key(layout)
    declared = donor.declared
    if declared is None or _key(declared)[:3] != _key(layout)[:3]:
        return False
    # restride leaves a 0/1-element result as is
    return _fewest_elements(declared.size, ranges) > 1


def _fewest_elements(size: Sequence[Any], ranges: Mapping[str, tuple[int, int | None]]) -> int:
    """A lower bound of the elements a layout of `size` holds, each size symbol at the low
    end of its range (`Program.size_ranges`; 0 for one without a range)."""
    count = 1
    for n in size:
        if isinstance(n, (int, sympy.Integer)):
            count *= int(n)
            continue
        symbols = sympy.sympify(n).free_symbols
        if any(str(s) not in ranges for s in symbols):
            return 0
        lower = bound(n, {s: ValueRange.of(*ranges[str(s)]) for s in symbols}).lower
        count *= int(lower) if lower.is_finite and lower > 0 else 0
    return count


def _view(arg: TensorArg, program: Program, names: _SizeNames) -> str:
    layout = arg.layout
    own: Layout | None = program.storages[arg.storage].layout
    if (
        own is not None
        and own.size == layout.size
        and own.stride == layout.stride
        and layout.offset == 0
    ):
        return arg.storage
    declared = program.storages[arg.storage].declared
    if (  # an input or extern result viewed whole: the tensor itself
        declared is not None
        and layout.offset == 0
        and declared.size == layout.size
        and declared.stride == layout.stride
    ):
        return arg.storage
    offset = names.index(layout.offset)
    if own is None:  # inputs and extern results: our offsets count from their first element
        offset = f"{arg.storage}.storage_offset() + {offset}"
    size, stride = names.shape(layout.size), names.shape(layout.stride)
    return f"as_strided({arg.storage}, {size}, {stride}, {offset})"


def _literal(value: Any, program: Program, names: _SizeNames) -> str:
    if isinstance(value, TensorArg):
        return _view(value, program, names)
    if isinstance(value, (list, tuple)):
        inner = "".join(_literal(v, program, names) + ", " for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return f"float({str(value)!r})"
        return repr(value)
    if isinstance(value, complex):  # polar's backward multiplies by 1j
        real, imag = _literal(value.real, program, names), _literal(value.imag, program, names)
        return f"complex({real}, {imag})"
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, sympy.Basic):
        return names.index(value)
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    raise TypeError(f"cannot pass {value!r} to an extern op")


def _extern(emit: Any, node: ExternNode, program: Program, names: _SizeNames) -> None:
    args = [_literal(a, program, names) for a in node.args]
    args += [f"{k}={_literal(v, program, names)}" for k, v in node.kwargs.items()]
    note = f"  # {node.source}" if node.source else ""
    call = f"ops[{node.target!r}]({', '.join(args)})"
    if not any(o is not None for o in node.outputs):
        emit(f"    {call}{note}")
        return
    if _flat_returns(node.target) == len(node.outputs):
        # a Tensor or a flat tuple (of Tensors, and numbers: cuDNN attention's two ints):
        # bound directly, each restrided only when its strides differ (no call per extern to
        # flatten the result or to compare strides)
        bound = [storage or "_" for storage in node.outputs]
        target = bound[0] if len(bound) == 1 else ", ".join(bound)
        emit(f"    {target} = {call}{note}")
        for storage in node.outputs:
            declared = program.storages[storage].declared if storage is not None else None
            if storage is None or declared is None:
                continue
            size, stride = names.shape(declared.size), names.shape(declared.stride)
            present = "" if len(bound) == 1 else f"{storage} is not None and "  # an unasked grad
            emit(f"    if {present}{storage}.stride() != {stride}:")
            emit(f"        {storage} = restride({storage}, {size}, {stride})")
        if "_" in bound:
            emit("    del _")
        return
    emit(f"    result = flatten_result({call}){note}")
    for position, storage in enumerate(node.outputs):
        if storage is None:
            continue
        declared = program.storages[storage].declared
        if declared is None:
            emit(f"    {storage} = result[{position}]")
            continue
        size, stride = names.shape(declared.size), names.shape(declared.stride)
        emit(f"    {storage} = restride(result[{position}], {size}, {stride})")
    emit("    del result")  # each output's lifetime is its own name's


# Return types a result is bound from as it is: each is one value of the flat result.
_FLAT_RETURNS = (torch.TensorType, torch.IntType, torch.FloatType, torch.BoolType)


def _flat_returns(target: str) -> int | None:
    """How many values the op returns when its schema returns a Tensor or a flat tuple of
    Tensors and numbers (`_scaled_dot_product_cudnn_attention`: seven Tensors and two ints,
    12 calls a GPT-2 forward); None for anything else (lists, optionals, unknown ops)."""
    try:
        schema = op_schema(target)
    except (KeyError, ValueError):
        return None
    if schema is None or not schema.returns:
        return None
    if all(type(returned.type) in _FLAT_RETURNS for returned in schema.returns):
        return len(schema.returns)
    return None


def flatten_result(result: Any) -> list[Any]:
    """An op's result as a flat list of tensors (and Nones), aligned with the node's outputs."""
    if isinstance(result, torch.Tensor) or result is None:
        return [result]
    flat: list[Any] = []
    for item in result:
        flat.extend(flatten_result(item) if isinstance(item, (list, tuple)) else [item])
    return flat


def restride(tensor: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """`tensor` if it has the strides the kernels were generated for; a view with them if its
    strides differ only in dimensions of size 1 (the same memory: cuDNN's weight gradient of
    a 1x1 convolution in channels-last, (C, 1, C, C) for (C, 1, 1, 1)); else a copy that has
    them (None, an output the op did not produce, stays None)."""
    if tensor is None or tensor.numel() <= 1:
        return tensor
    actual = tensor.stride()
    if actual == stride:
        return tensor
    if all(n == 1 or a == s for n, a, s in zip(size, actual, stride)):
        return tensor.as_strided(size, stride, tensor.storage_offset())
    copy = torch.empty_strided(size, stride, dtype=tensor.dtype, device=tensor.device)
    return copy.copy_(tensor)


class _Launch:
    """A kernel without a `launch` fast path (C++), called as `kernels[name].launch(...)`."""

    def __init__(self, kernel: Any) -> None:
        self.launch = kernel


def direct_op(op: Any) -> Any:
    """An ATen overload as the cheapest callable that runs exactly it: torch's own Python
    binding (`torch.addmm`) for a default overload that no call valid for it can mistake for
    another (`public_binding`), else the dispatcher entry its `__call__` forwards every call
    to (one Python frame less: 1.9 -> 1.5 us a `mm` on the CPU); any other callable, and an
    overload whose call does more (a Python dispatcher of its own), as it is."""
    if type(op) is not torch._ops.OpOverload:  # subclasses override __call__
        return op
    if getattr(op, "_pyobj_dispatcher", None) is not None:  # torch >= 2.14: may divert
        return op
    return public_binding(op) or getattr(op, "_op", op)


# The extern ops called through torch's binding: matrix multiplies, convolution and the
# attention forwards, whose bindings parse no other signature that their default overload's
# arguments could match (checked again by `public_binding` against the registered overloads).
PUBLIC_BINDINGS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    }
)


def public_binding(op: torch._ops.OpOverload) -> Any:
    """`torch.<name>` for `aten::<name>.default` where a call with the default overload's
    arguments can only run that overload, else None. torch's generated bindings parse their
    arguments in C++ and skip the boxed call of the overload's pybind entry: 1.3-1.7 us less
    a call on this CPU (`mm` 4.1 -> 2.7, `addmm` 6.4 -> 4.7, `bmm` 3.6 -> 2.3), 2.4 us on the
    H100's host (session 4's `externs`: GPT-2's addmm 23.3 -> 20.9). Safe where every other
    overload needs more positional arguments than the default one takes, or a keyword-only
    argument without a default (`out`): `mm.dtype` takes `out_dtype` as a third. Operators
    of other namespaces, bindings living elsewhere (`torch._C._nn`) and overloads any call
    could confuse keep the dispatcher entry. Only the extern ops of `PUBLIC_BINDINGS`: a
    binding also parses signatures the op's registered overloads do not show (a `Dimname`
    dim, which None matches; deprecated Scalar-first forms)."""
    if op.namespace != "aten" or op._overloadname != "default":
        return None
    name = op._schema.name.partition("::")[2]
    if name not in PUBLIC_BINDINGS:
        return None
    binding = getattr(torch._C._VariableFunctions, name, None)
    if binding is None:
        return None
    packet = getattr(torch.ops.aten, name)
    taken = sum(1 for argument in op._schema.arguments if not argument.kwarg_only)
    for overload in packet.overloads():
        if overload == "default":
            continue
        arguments = getattr(packet, overload)._schema.arguments
        needed = sum(1 for a in arguments if not a.kwarg_only and not a.has_default_value())
        keyword = any(a.kwarg_only and not a.has_default_value() for a in arguments)
        if needed <= taken and not keyword:
            return None
    return binding


def _sole_holder_counts() -> tuple[int, int]:
    """What `getrefcount(name)` and its storage's use count read in a function's frame for a
    tensor that one local name alone holds: the baseline of the wrapper's check that it holds
    a donated input alone (any other holder, Python or C++, of the tensor or of a tensor over
    its storage, raises one of them; the reference count differs between Python versions)."""
    tensor = torch.empty(1)
    return sys.getrefcount(tensor), torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


SOLE_REFERENCES, SOLE_STORAGE_USES = _sole_holder_counts()


def wrapper_namespace(kernels: dict[str, Any], ops: dict[str, Any]) -> dict[str, Any]:
    """The globals the wrapper source runs with. The wrapper calls `kernels[name].launch`,
    which a Triton kernel rebinds to its generated launch after its first call, and
    `ops[target]`, an ATen overload's dispatcher entry (`direct_op`)."""
    if not all(hasattr(kernel, "launch") for kernel in kernels.values()):
        kernels = {
            name: kernel if hasattr(kernel, "launch") else _Launch(kernel)
            for name, kernel in kernels.items()
        }
    return {
        "torch": torch,
        "getrefcount": sys.getrefcount,
        "storage_use_count": torch._C._storage_Use_Count,
        "SOLE_REFERENCES": SOLE_REFERENCES,
        "SOLE_STORAGE_USES": SOLE_STORAGE_USES,
        "empty_strided": torch.empty_strided,
        "as_strided": torch.as_strided,
        "flatten_result": flatten_result,
        "restride": restride,
        "kernels": kernels,
        "ops": {target: direct_op(op) for target, op in ops.items()},
    }
