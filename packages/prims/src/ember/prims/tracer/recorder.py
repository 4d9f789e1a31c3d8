"""The recorder: turns each ATen call made on tracing tensors into a Graph node.

A `Tracer` owns the Graph under construction. While it is active (a `TorchDispatchMode`),
every ATen call is run on meta tensors to learn its output specs, recorded as a Node with the
user's source line, and answered with new tracing tensors. Layers drive it directly
(capture records the torch calls it meets); `ember.prims.trace` is the simple front end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sympy
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ember.prims.errors import TraceError
from ember.prims.graph import Graph, GraphInput, InputKind, Node, Ref, Value
from ember.prims.ops import op_name
from ember.prims.pytree import TreeSpec, tree_flatten
from ember.prims.source import SourceLocation, user_location
from ember.prims.specs import ScalarSpec, SymSize, TensorSpec
from ember.prims.tracer.missing_meta import MISSING_META
from ember.prims.tracer.naming import Namer
from ember.prims.tracer.symbolic_meta import (
    SYMBOLIC_META,
    contiguous_strides,
    has_symbolic_sizes,
)
from ember.prims.tracer.tensor import TracerTensor

_META = torch.device("meta")
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class Tracer:
    """Builds one Graph from the ATen calls made while it is active."""

    def __init__(self, shape_env: Any = None) -> None:
        self.graph = Graph()
        self.shape_env = shape_env
        self._namer = Namer()
        self._constant_ids: dict[int, Ref] = {}
        self._mode = _RecordingMode(self)

    # ---- inputs ----------------------------------------------------------------------------

    def add_input(
        self,
        tensor: torch.Tensor,
        name: str,
        *,
        kind: InputKind = InputKind.USER,
        target: str | None = None,
        dynamic_dims: tuple[int, ...] = (),
        size_ranges: Mapping[int, tuple[int, int | None]] | None = None,
    ) -> TracerTensor:
        """A tracing tensor for a new Graph input; `dynamic_dims` get size symbols, whose
        inclusive range is `size_ranges[dim]` where given (else 2 and up)."""
        value_name = self._namer.fresh(name)
        meta = self._meta_like(tensor, name, dynamic_dims, size_ranges or {})
        spec = self._spec_of(meta, tensor.device, tensor.requires_grad)
        self.graph.inputs.append(GraphInput(Value(value_name, spec), kind, target))
        if kind is not InputKind.USER and target is not None:
            self.graph.constants[target] = tensor
        return TracerTensor(
            meta,
            device=tensor.device,
            requires_grad=tensor.requires_grad,
            value_name=value_name,
            owner=self,
        )

    def _meta_like(
        self,
        tensor: torch.Tensor,
        name: str,
        dynamic_dims: tuple[int, ...],
        size_ranges: Mapping[int, tuple[int, int | None]],
    ) -> torch.Tensor:
        sizes: list[Any] = list(tensor.shape)
        strides: list[Any] = list(tensor.stride())
        dynamic = [d for d in dynamic_dims if tensor.shape[d] >= 2]
        if dynamic and self.shape_env is not None:
            contiguous = tensor.is_contiguous()
            for dim in dynamic:
                lower, upper = size_ranges.get(dim, (2, None))
                sizes[dim] = self.shape_env.create_symint(
                    int(tensor.shape[dim]),
                    description=f"{name}.size({dim})",
                    lower=lower,
                    upper=upper,
                )
            if contiguous:
                strides = contiguous_strides(sizes)
            return torch.empty_strided(sizes, strides, dtype=tensor.dtype, device=_META)
        # A view keeps its storage offset: as_strided with an explicit storage_offset counts
        # from the storage's start, and its decomposition subtracts the input's offset.
        meta = torch.empty_strided(sizes, strides, dtype=tensor.dtype, device=_META)
        if tensor.storage_offset() == 0:
            return meta
        extent = tensor.storage_offset() + tensor.untyped_storage().nbytes() // tensor.itemsize
        storage = torch.empty(extent, dtype=tensor.dtype, device=_META)
        return storage.as_strided(sizes, strides, tensor.storage_offset())

    def constant(self, tensor: torch.Tensor) -> Ref:
        """Lift a real tensor met while tracing into the constants table."""
        known = self._constant_ids.get(id(tensor))
        if known is not None:
            return known
        target = f"_tensor_constant{len(self._constant_ids)}"
        value_name = self._namer.fresh(target)
        spec = TensorSpec.of(tensor)
        self.graph.inputs.append(GraphInput(Value(value_name, spec), InputKind.CONSTANT, target))
        self.graph.constants[target] = tensor.detach()
        ref = Ref(value_name)
        self._constant_ids[id(tensor)] = ref
        self._constant_tensors.append(tensor)  # keep ids stable while tracing
        return ref

    _constant_tensors: list[torch.Tensor]

    # ---- activation ------------------------------------------------------------------------

    @contextmanager
    def active(self) -> Iterator[Tracer]:
        """Record every ATen call made inside this block."""
        self._constant_tensors = []
        with self._mode:
            yield self

    # ---- outputs ---------------------------------------------------------------------------

    def set_inputs_signature(self, spec: TreeSpec, leaves: list[Any]) -> None:
        self.graph.in_spec = spec
        self.graph.input_leaves = leaves

    def finish(self, outputs: Any) -> Graph:
        """Record `outputs` (a pytree of tracing tensors and literals) and return the Graph."""
        leaves, spec = tree_flatten(_plain_tuples(outputs))
        self.graph.out_spec = spec
        self.graph.output_leaves = [self._output_leaf(leaf) for leaf in leaves]
        if self.shape_env is not None:
            self.graph.symbols = dict(self.shape_env.symbols)
            self.graph.guards = list(self.shape_env.guards)
        return self.graph

    def _output_leaf(self, leaf: Any) -> Any:
        if isinstance(leaf, TracerTensor):
            self._check_owner(leaf)
            return Ref(leaf.value_name)
        if isinstance(leaf, torch.Tensor):
            return self.constant(leaf)
        if isinstance(leaf, _SYMBOLIC):
            return self._literal(leaf)
        if leaf is None or isinstance(leaf, (bool, int, float, complex, str)):
            return leaf
        if isinstance(leaf, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return leaf
        raise TraceError(
            f"the traced function returned a {type(leaf).__name__}, which a Graph cannot hold; "
            "return tensors, Python scalars, or tuples/lists/dicts of them"
        )

    # ---- recording -------------------------------------------------------------------------

    def record(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        target = op_name(func)
        if target in PROBED_OPS:
            return _probe(func, args, kwargs)
        query = METADATA_QUERIES.get(target)
        if query is not None:
            return query(*args, **kwargs)
        source = user_location()
        node_args = [self._argument(a) for a in args]
        node_kwargs = {key: self._argument(a) for key, a in kwargs.items()}
        meta_args = [self._meta_argument(a) for a in args]
        meta_kwargs = {key: self._meta_argument(a) for key, a in kwargs.items()}
        try:
            meta_result = self._meta_call(func, target, meta_args, meta_kwargs)
        except TraceError:
            raise
        except Exception as error:
            raise TraceError(
                f"{_where(source)}cannot trace {target}: {type(error).__name__}: {error}. "
                "If this op depends on tensor values (e.g. .item(), nonzero, data-dependent "
                "control flow), move it out of the traced function."
            ) from error
        device = self._output_device(args, kwargs)
        grad = torch.is_grad_enabled() and any(
            isinstance(a, TracerTensor) and a.requires_grad for a in _flat(args, kwargs)
        )
        node = Node(target, node_args, node_kwargs, [], source)
        schema = func._schema
        results = meta_result if len(schema.returns) != 1 else (meta_result,)
        if not isinstance(results, tuple):
            results = (results,)
        wrapped: list[Any] = []
        for index, (ret, result) in enumerate(zip(schema.returns, results)):
            output, python_value = self._wrap_output(
                target, ret, result, index, args, kwargs, schema, device, grad, source
            )
            node.outputs.append(output)
            wrapped.append(python_value)
        self.graph.nodes.append(node)
        if not schema.returns:
            return None  # ops that only check (e.g. _linalg_check_errors) return nothing
        return wrapped[0] if len(schema.returns) == 1 else tuple(wrapped)

    def _meta_call(self, func: Any, target: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The op run on meta tensors; ember's own rule where torch's rejects symbolic sizes."""
        symbolic = has_symbolic_sizes(args, kwargs)
        rule = SYMBOLIC_META.get(target)
        if rule is not None and symbolic:
            return rule(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except NotImplementedError:
            missing = MISSING_META.get(target)  # torch has no meta kernel for it
            if missing is None:
                raise
            return missing(*args, **kwargs)
        except RuntimeError:
            # Many C++ meta kernels take concrete sizes only; ember's decomposition of the op
            # into prims (whose meta rules are ember's own) gives the symbolic result, else
            # ember's own shape rule for an op torch has no meta kernel for (its C++ kernel
            # refuses symbolic sizes before it can say so).
            if not symbolic:
                raise
            result = self._meta_by_decomposition(target, args, kwargs)
            if result is not None:
                return result
            missing = MISSING_META.get(target)
            if missing is None:
                raise
            return missing(*args, **kwargs)

    def _meta_by_decomposition(self, target: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The op's meta result computed by tracing its prims decomposition, or None."""
        # Imported here: the decompositions are themselves built on this tracer.
        from ember.prims.decompositions import PRIM_DECOMPOSITIONS
        from ember.prims.primitives.recording import recording_into

        decomposition = PRIM_DECOMPOSITIONS.get(target)
        if decomposition is None:
            return None
        scratch = Tracer(self.shape_env)

        def wrap(arg: Any) -> Any:
            if isinstance(arg, torch.Tensor):
                name = scratch._namer.fresh("meta")
                return TracerTensor(
                    arg, device=_META, requires_grad=False, value_name=name, owner=scratch
                )
            if isinstance(arg, list | tuple):
                return type(arg)(wrap(item) for item in arg)
            return arg

        def unwrap(result: Any) -> Any:
            if isinstance(result, TracerTensor):
                return result.meta
            if isinstance(result, list | tuple):
                return type(result)(unwrap(item) for item in result)
            return result

        scratch._constant_tensors = []
        with torch.no_grad(), recording_into(scratch):
            result = decomposition(
                *[wrap(a) for a in args], **{k: wrap(a) for k, a in kwargs.items()}
            )
        return unwrap(result)

    def _wrap_output(
        self,
        target: str,
        ret: Any,
        result: Any,
        index: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        schema: Any,
        device: torch.device,
        grad: bool,
        source: SourceLocation | None,
    ) -> tuple[Any, Any]:
        hint = target.split("::")[1].split(".")[0]
        if result is None:
            return None, None
        if isinstance(result, torch.Tensor):
            value = Value(self._namer.fresh(hint), self._spec_of(result, device, grad))
            written = _written_argument(ret, schema, args, kwargs)
            if written is not None:
                # In-place or out= op: the caller keeps the same tensor, now holding the new value.
                written.meta = result
                written.value_name = value.name
                return value, written
            # Outputs carry no autograd metadata here: autograd, above this mode, adds it.
            tensor = TracerTensor(
                result, device=device, requires_grad=False, value_name=value.name, owner=self
            )
            return value, tensor
        if isinstance(result, (list, tuple)) and all(isinstance(r, torch.Tensor) for r in result):
            values: list[Value] = []
            tensors: list[TracerTensor] = []
            for item in result:
                value = Value(self._namer.fresh(hint), self._spec_of(item, device, grad))
                values.append(value)
                tensors.append(
                    TracerTensor(
                        item,
                        device=device,
                        requires_grad=False,
                        value_name=value.name,
                        owner=self,
                    )
                )
            return values, tensors
        if isinstance(result, (bool, int, float, *_SYMBOLIC)) and not isinstance(
            result, torch.Tensor
        ):
            expr = self._literal(result)
            if not isinstance(expr, sympy.Basic) and target in METADATA_NUMBER_OPS:
                expr = sympy.sympify(result)  # computed from sizes alone: a constant
            if not isinstance(expr, sympy.Basic):
                raise TraceError(
                    f"{_where(source)}{target} produces a Python number that depends on tensor "
                    "values, which a Graph cannot capture; compute it outside the traced function"
                )
            spec = ScalarSpec(type(result).__name__.lower().replace("sym", ""), expr)
            return Value(self._namer.fresh(hint), spec), result
        raise TraceError(f"{_where(source)}cannot record the output of {target}: {result!r}")

    # ---- argument conversion ---------------------------------------------------------------

    def _argument(self, arg: Any) -> Any:
        """The Graph literal or reference for one op argument."""
        if isinstance(arg, TracerTensor):
            self._check_owner(arg)
            return Ref(arg.value_name)
        if isinstance(arg, torch.Tensor):
            return self.constant(arg)
        if isinstance(arg, (list, tuple)):
            return [self._argument(item) for item in arg]
        if isinstance(arg, _SYMBOLIC):
            return self._literal(arg)
        return arg

    def _meta_argument(self, arg: Any) -> Any:
        """The argument as the meta computation takes it."""
        if isinstance(arg, TracerTensor):
            return arg.meta
        if isinstance(arg, torch.Tensor):
            return torch.empty_strided(arg.shape, arg.stride(), dtype=arg.dtype, device=_META)
        if isinstance(arg, torch.device):
            return _META
        if isinstance(arg, list):
            return [self._meta_argument(item) for item in arg]
        if isinstance(arg, tuple):
            return tuple(self._meta_argument(item) for item in arg)
        return arg

    def _literal(self, value: Any) -> Any:
        if isinstance(value, _SYMBOLIC):
            if self.shape_env is None:
                raise TraceError("a symbolic size appeared in a trace without a shape environment")
            expr = self.shape_env.to_sympy(value)
            return expr
        return value

    def _check_owner(self, tensor: TracerTensor) -> None:
        if tensor.owner is not self:
            raise TraceError(
                f"tensor {tensor.value_name} belongs to another trace; pass it in as an input"
            )

    def _output_device(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
        device = kwargs.get("device")
        if isinstance(device, torch.device):
            return device
        if isinstance(device, str):
            return torch.device(device)
        for arg in _flat(args, kwargs):
            if isinstance(arg, torch.Tensor):
                return arg.device
        return torch.device("cpu")

    def _spec_of(self, meta: torch.Tensor, device: torch.device, requires_grad: bool) -> TensorSpec:
        grad = requires_grad and (meta.is_floating_point() or meta.is_complex())
        return TensorSpec(
            dtype=meta.dtype,
            shape=tuple(self._size(s) for s in meta.shape),
            strides=tuple(self._size(s) for s in meta.stride()),
            device=device,
            requires_grad=grad,
            storage_offset=self._size(meta.storage_offset()),
        )

    def _size(self, size: Any) -> SymSize:
        if isinstance(size, int):
            return size
        expr = self._literal(size)
        if isinstance(expr, sympy.Integer):
            return int(expr)
        return expr


# Ops that return a Python number computed from tensor metadata (sizes, dtypes, devices),
# never from values: the traced number is a constant of the Graph.
METADATA_NUMBER_OPS = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention.default",
        "aten::_scaled_dot_product_cudnn_attention.default",
        "aten::_scaled_dot_product_efficient_attention.default",
        "aten::_flash_attention_forward.default",
        "aten::_efficient_attention_forward.default",
    }
)

# Ops that choose a kernel from the real device's capabilities (scaled_dot_product_attention
# picks flash, cuDNN, memory-efficient or math attention): a meta tensor cannot answer, so
# the op runs, unrecorded, on empty tensors of the same sizes on the real device, and the
# trace follows the same choice eager makes.
PROBED_OPS = frozenset({"aten::_fused_sdp_choice.default"})


# Ops that read a tensor's metadata and compute nothing: answered from the tracing tensor
# itself (its sizes are the Graph's, symbolic where they are), never recorded. Autograd asks
# `size` through the dispatcher in some backward formulas (sgn's zero gradient of a real
# input), where torch's own kernel refuses a meta tensor of symbolic sizes.
METADATA_QUERIES: dict[str, Any] = {
    "aten::size.default": lambda tensor: list(tensor.shape),
}


def _probe(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    def real(value: Any) -> Any:
        if isinstance(value, TracerTensor):
            return torch.empty_strided(
                tuple(int(s) for s in value.shape),
                tuple(int(s) for s in value.stride()),
                dtype=value.dtype,
                device=value.device,
            )
        return value

    with torch.utils._python_dispatch._disable_current_modes():
        return func(*[real(a) for a in args], **{k: real(v) for k, v in kwargs.items()})


class _RecordingMode(TorchDispatchMode):
    def __init__(self, tracer: Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.tracer.record(func, tuple(args), dict(kwargs or {}))


def _plain_tuples(tree: Any) -> Any:
    """`tree` with torch's named result tuples (`torch.return_types.sort`, ...) and sizes as
    plain tuples: the Graph's output signature holds builtin containers only."""
    if isinstance(tree, torch.Size) or (
        isinstance(tree, tuple) and type(tree).__module__ == "torch.return_types"
    ):
        return tuple(_plain_tuples(item) for item in tree)
    if type(tree) in (tuple, list):
        return type(tree)(_plain_tuples(item) for item in tree)
    if type(tree) is dict:
        return {key: _plain_tuples(item) for key, item in tree.items()}
    return tree


def _flat(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, (list, tuple)):
            yield from arg
        else:
            yield arg


def _written_argument(
    ret: Any, schema: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TracerTensor | None:
    """The tracing tensor an in-place/out= return aliases, if any."""
    alias = ret.alias_info
    if alias is None or not alias.is_write:
        return None
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write or info.before_set != alias.before_set:
            continue
        candidate = args[position] if position < len(args) else kwargs.get(argument.name)
        if isinstance(candidate, TracerTensor):
            return candidate
    return None


def _where(source: SourceLocation | None) -> str:
    return f"{source}: " if source is not None else ""
