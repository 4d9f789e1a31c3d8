"""The functionalizing replay: a Graph's nodes run again on tracing tensors, writes made pure.

Each value keeps a storage root and the chain of view steps that leads from the root to it.
A root holds its *current* value; a write (an in-place op, `out=`, or a hidden write like
batch norm's running stats) computes the new value with the op's pure twin and, when it goes
through a view, scatters it back into the root along the chain. A view read after its root
was written is rebuilt from the root's current value. The replay can run under autograd
(the joint trace) or without it (functionalization alone); the package README has the rules.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ember.autodiff.aliasing import aliased_position
from ember.autodiff.errors import FunctionalizationError
from ember.autodiff.functional_ops import FUNCTIONAL_RULES, call, functional_variant
from ember.autodiff.view_rules import ViewStep, apply_view_functionally, scatter_into_base
from ember.prims import (
    Graph,
    GraphInput,
    Node,
    Ref,
    SourceLocation,
    TensorSpec,
    Tracer,
    TracerTensor,
    Value,
    resolve_op,
)
from ember.prims.ops import op_schema
from ember.prims.symbolic import ShapeEnv

aten = torch.ops.aten

# Writing ops functionalization refuses: they change what memory a tensor is, not its values.
_UNSUPPORTED_WRITES = frozenset(
    {
        "aten::set_.source_Tensor",
        "aten::set_.source_Storage",
        "aten::set_.source_Storage_storage_offset",
        "aten::set_.default",
    }
)


# In-place view ops change which elements a tensor names (its sizes and strides), not any
# values: each replays as its out-of-place view, and the tensor's new name is that view.
_INPLACE_VIEWS = {
    "aten::squeeze_.default": "aten::squeeze.default",
    "aten::squeeze_.dim": "aten::squeeze.dim",
    "aten::squeeze_.dims": "aten::squeeze.dims",
    "aten::unsqueeze_.default": "aten::unsqueeze.default",
    "aten::transpose_.default": "aten::transpose.int",
    "aten::t_.default": "aten::t.default",
    "aten::as_strided_.default": "aten::as_strided.default",
    "aten::detach_.default": "aten::detach.default",
}


class _KeepGradient(torch.autograd.Function):
    """The values of `new` with the autograd history of `old` (gradients pass straight to it)."""

    @staticmethod
    def forward(ctx: Any, old: Any, new: Any) -> Any:
        return aten.alias.default(new)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        return grad, None


def tracer_for(graph: Graph) -> Tracer:
    """A Tracer to replay `graph` into: with a shape environment holding the Graph's size
    symbols (same names, hints and ranges) and guards when it has any."""
    if not graph.symbols:
        return Tracer()
    try:
        shape_env = ShapeEnv.rebuilt(graph.symbols, graph.guards)
    except ValueError as error:
        raise FunctionalizationError(
            f"ember-autodiff cannot rebuild the size symbols of {graph.name}: {error}"
        ) from error
    return Tracer(shape_env)


def placeholder(
    tracer: Tracer, graph_input: GraphInput, *, requires_grad: bool = False
) -> TracerTensor:
    """A tracing tensor for `graph_input`, added to the tracer's Graph under the same name."""
    value = graph_input.value
    spec = value.spec
    if not isinstance(spec, TensorSpec):
        raise FunctionalizationError(
            f"input {value.name} is not a tensor; only tensors can be inputs"
        )
    name = tracer._namer.fresh(value.name)  # TODO(issue 6 report): a public add_input from a spec
    meta = _meta(tracer, spec)
    grad = requires_grad and (spec.dtype.is_floating_point or spec.dtype.is_complex)
    new_spec = TensorSpec(
        spec.dtype, spec.shape, spec.strides, spec.device, grad, spec.storage_offset
    )
    tracer.graph.inputs.append(
        GraphInput(Value(name, new_spec), graph_input.kind, graph_input.target)
    )
    return TracerTensor(meta, device=spec.device, requires_grad=grad, value_name=name, owner=tracer)


def _meta(tracer: Tracer, spec: TensorSpec) -> torch.Tensor:
    """A meta tensor of `spec`'s sizes and strides (SymInts for symbolic ones)."""
    if spec.is_static():
        shape = [int(s) for s in spec.shape]
        strides = [int(s) for s in spec.strides]
        offset = int(spec.storage_offset)
        extent = 1 + offset + sum((s - 1) * st for s, st in zip(shape, strides))
        storage = torch.empty(max(extent, 0) if all(shape) else 0, dtype=spec.dtype, device="meta")
        return storage.as_strided(shape, strides, offset)
    if tracer.shape_env is None:
        raise FunctionalizationError("a symbolic input needs a tracer made by tracer_for(graph)")
    env = tracer.shape_env
    shape = [env.to_symint(s) for s in spec.shape]
    strides = [env.to_symint(s) for s in spec.strides]
    meta = torch.empty_strided(shape, strides, dtype=spec.dtype, device="meta")
    if spec.storage_offset != 0:
        meta = meta.as_strided(shape, strides, env.to_symint(spec.storage_offset))
    return meta


def symbolic_literal(tracer: Tracer, arg: Any) -> Any:
    """A node argument as an op takes it: sympy size expressions become SymInts/SymBools."""
    if not isinstance(arg, sympy.Basic):
        return arg
    env = tracer.shape_env
    if env is None:
        raise FunctionalizationError(f"the size expression {arg} needs a shape environment")
    if not isinstance(arg, sympy.Expr):  # a relation or a logic combination of them
        return env.to_symbool(arg)
    if arg.is_integer:
        return env.to_symint(arg)
    return env.to_symfloat(arg)


class FunctionalReplay:
    """Replays the nodes of `graph` into `tracer`, functionalized.

    Bind every input with `bind`, then `run()`. With `differentiable=True` the ops run under
    autograd, except nodes the source Graph recorded without grad.
    """

    def __init__(self, graph: Graph, tracer: Tracer, *, differentiable: bool) -> None:
        self.graph = graph
        self.tracer = tracer
        self.differentiable = differentiable
        self.root: dict[str, str] = {}
        self.steps: dict[str, tuple[ViewStep, ...]] = {}
        self.current: dict[str, Any] = {}  # root -> its current value
        self.version: dict[str, int] = {}  # root -> number of writes so far
        self.cache: dict[str, tuple[int, Any]] = {}  # view -> (root version, rebuilt view)
        self.scalars: dict[str, Any] = {}
        self.constants: set[str] = set()
        self._specs = graph.values()
        # Autograd node -> the user line whose op made it, to label the backward's nodes.
        self.grad_sources: dict[Any, SourceLocation | None] = {}
        self._source: SourceLocation | None = None

    # ---- values ------------------------------------------------------------------------

    def bind(self, name: str, tensor: Any, *, constant: bool = False) -> None:
        self._note(tensor)
        self.root[name] = name
        self.steps[name] = ()
        self.current[name] = tensor
        self.version[name] = 0
        if constant:
            self.constants.add(name)

    def read(self, ref: Ref) -> Any:
        """The current value of `ref` (a view is rebuilt if its root was written since)."""
        name = ref.name
        if name in self.scalars:
            return self.scalars[name]
        root = self.root[name]
        steps = self.steps[name]
        if not steps:
            return self.current[root]
        version = self.version[root]
        cached = self.cache.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        value = self.current[root]
        for step in steps:
            value = apply_view_functionally(step, value, self._bind)
        self.cache[name] = (version, value)
        return value

    def mutated_inputs(self) -> list[str]:
        """The inputs some node wrote, in input order."""
        return [gi.value.name for gi in self.graph.inputs if self.version.get(gi.value.name, 0) > 0]

    # ---- nodes -------------------------------------------------------------------------

    def run(self) -> None:
        for node in self.graph.nodes:
            start = len(self.tracer.graph.nodes)
            grad = self.differentiable and not self._ran_without_grad(node)
            self._source = node.source
            with torch.set_grad_enabled(grad):
                self._node(node)
            for recorded in self.tracer.graph.nodes[start:]:
                recorded.source = node.source

    def _node(self, node: Node) -> None:
        rule = FUNCTIONAL_RULES.get(node.target)
        args = [self._bind(a) for a in node.args]
        kwargs = {key: self._bind(a) for key, a in node.kwargs.items()}
        schema = op_schema(node.target)
        if rule is not None:
            results, writes = rule(args, kwargs)
            written_values = {
                p: self._write(node, _argument(node, p), new) for p, new in writes.items()
            }
            returns = list(schema.returns) if schema is not None else []
            for index, (output, produced) in enumerate(zip(node.outputs, results)):
                position = (
                    aliased_position(schema, returns[index]) if index < len(returns) else None
                )
                if position in written_values and isinstance(output, Value):  # copy_: dst
                    ref = _argument(node, position)
                    self._alias(output.name, ref.name, written_values[position])
                else:
                    self._fresh_outputs_of(node, output, produced)
            return
        written = _written_positions(schema) if schema is not None else []
        if not written:
            result = call(node.target, args, kwargs)
            self._pure_outputs(node, schema, result)
            return
        self._writing_node(node, schema, written, args, kwargs)

    def _writing_node(
        self,
        node: Node,
        schema: Any,
        written: list[int],
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> None:
        view = _INPLACE_VIEWS.get(node.target)
        base = node.args[0] if node.args else None
        # on an input, the caller's tensor would change shape: that is refused below
        if view is not None and not (isinstance(base, Ref) and self._is_input(base.name)):
            self._inplace_view(node, view, args, kwargs)
            return
        op = _tags(node.target)
        if torch.Tag.inplace_view in op or node.target in _UNSUPPORTED_WRITES:
            raise FunctionalizationError(
                f"{_where(node)}{node.target} changes the shape or memory of a tensor in place, "
                "which ember-autodiff cannot functionalize yet; use the out-of-place op "
                "(e.g. x = x.t() instead of x.t_())"
            )
        variant = functional_variant(node.target)
        if variant is None:
            raise FunctionalizationError(
                f"{_where(node)}{node.target} writes its arguments and has no pure counterpart "
                "ember-autodiff knows; add it to ember.autodiff.FUNCTIONAL_VARIANTS"
            )
        names = {schema.arguments[p].name for p in written}
        is_out = not node.target.split("::")[1].split(".")[0].endswith("_")
        call_args = _with_defaults(schema, args, kwargs)  # the twin may lack our defaults
        call_kwargs = dict(kwargs)
        if is_out:
            call_args = [a for p, a in enumerate(call_args) if p not in written]
            call_kwargs = {k: v for k, v in kwargs.items() if k not in names}
        result = call(variant, call_args, call_kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        returns = list(schema.returns)
        for index, output in enumerate(node.outputs):
            position = aliased_position(schema, returns[index]) if index < len(returns) else None
            if position is None or not isinstance(output, Value):
                raise FunctionalizationError(
                    f"{_where(node)}{node.target}: cannot match its results to the tensors it "
                    "writes; ember-autodiff does not support this op yet"
                )
            ref = _argument(node, position)
            new = self._write(node, ref, results[index])
            self._alias(output.name, ref.name, new)

    def _inplace_view(self, node: Node, view: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        """`x.squeeze_()` and friends: the result (x's new name) is the view of x's value."""
        (output,) = node.outputs
        base = node.args[0]
        if not isinstance(output, Value) or not isinstance(base, Ref):
            raise FunctionalizationError(f"{_where(node)}{node.target} on a non-tensor")
        produced = call(view, args, kwargs)
        step = ViewStep(view, tuple(node.args), tuple(node.kwargs.items()), 0, None)
        root = self.root[base.name]
        self.root[output.name] = root
        self.steps[output.name] = (*self.steps[base.name], step)
        self.cache[output.name] = (self.version[root], produced)
        self._note(produced)

    def _write(self, node: Node, ref: Any, new: Any) -> Any:
        if not isinstance(ref, Ref):
            raise FunctionalizationError(
                f"{_where(node)}{node.target} writes a non-tensor argument"
            )
        name = ref.name
        root = self.root[name]
        steps = self.steps[name]
        if root in self.constants:
            raise FunctionalizationError(
                f"{_where(node)}{node.target} writes the tensor literal {root}; copy it first "
                "(x = torch.tensor(...).clone())"
            )
        old = self.read(ref)
        previous = self.current[root]
        if new.dtype != old.dtype:
            new = aten._to_copy.default(new, dtype=old.dtype)
        if tuple(new.shape) != tuple(old.shape) and (steps or self._is_input(root)):
            raise FunctionalizationError(
                f"{_where(node)}{node.target} resizes {name} in place; ember-autodiff cannot "
                "functionalize a resize of an input or a view; write into a new tensor instead"
            )
        if not steps:
            self.current[root] = new
        else:
            bases = [self.current[root]]
            for step in steps[:-1]:
                bases.append(apply_view_functionally(step, bases[-1], self._bind))
            updated = new
            for step, base in zip(reversed(steps), reversed(bases)):
                try:
                    updated = scatter_into_base(step, base, updated, self._bind)
                except KeyError:
                    raise FunctionalizationError(
                        f"{_where(node)}{node.target} writes through a {step.target} view, "
                        "which ember-autodiff cannot write back into its base; write into a "
                        "copy (.clone()) instead"
                    ) from None
            self.current[root] = updated
        kept = self.differentiable and not torch.is_grad_enabled() and previous.requires_grad
        if kept:
            # A write under no_grad changes the values of a tensor that requires grad but not
            # its autograd history: later uses still differentiate into the old history.
            with torch.enable_grad():
                self.current[root] = _KeepGradient.apply(previous, self.current[root])
        self._note(self.current[root])
        self.version[root] += 1
        if steps and not kept:
            self.cache[name] = (self.version[root], new)
        return new

    def _alias(self, name: str, of: str, value: Any) -> None:
        """`name` is another name for the memory `of` names (an in-place op's result)."""
        self.root[name] = self.root[of]
        self.steps[name] = self.steps[of]
        if self.steps[name]:
            self.cache[name] = (self.version[self.root[name]], value)

    def _pure_outputs(self, node: Node, schema: Any, result: Any) -> None:
        if not node.outputs:  # a check (aten::_linalg_check_errors): recorded, returns None
            return
        results = (result,) if len(node.outputs) == 1 else tuple(result)
        returns = list(schema.returns) if schema is not None else []
        for index, (output, produced) in enumerate(zip(node.outputs, results)):
            position = aliased_position(schema, returns[index]) if index < len(returns) else None
            base = _argument(node, position) if position is not None else None
            if isinstance(output, Value):
                self._output(node, output, produced, base, position, None)
            elif isinstance(output, list):
                for item_index, (value, item) in enumerate(zip(output, produced)):
                    self._output(node, value, item, base, position, item_index)

    def _output(
        self,
        node: Node,
        value: Value,
        produced: Any,
        base: Any,
        position: int | None,
        item_index: int | None,
    ) -> None:
        if not isinstance(value.spec, TensorSpec):
            self.scalars[value.name] = produced
            return
        if isinstance(base, Ref) and position is not None:
            where: int | str = position if position < len(node.args) else _arg_name(node, position)
            step = ViewStep(
                node.target, tuple(node.args), tuple(node.kwargs.items()), where, item_index
            )
            root = self.root[base.name]
            self.root[value.name] = root
            self.steps[value.name] = (*self.steps[base.name], step)
            self.cache[value.name] = (self.version[root], produced)
            self._note(produced)
            return
        self.bind(value.name, produced)

    def _fresh_outputs_of(self, node: Node, output: Any, produced: Any) -> None:
        if isinstance(output, Value):
            self._output(node, output, produced, None, None, None)
        elif isinstance(output, list):
            for value, item in zip(output, produced):
                self._output(node, value, item, None, None, None)

    # ---- helpers -------------------------------------------------------------------------

    def _note(self, tensor: Any) -> None:
        grad_fn = getattr(tensor, "grad_fn", None)
        if grad_fn is not None and grad_fn not in self.grad_sources:
            self.grad_sources[grad_fn] = self._source

    def _bind(self, arg: Any) -> Any:
        if isinstance(arg, Ref):
            return self.read(arg)
        if isinstance(arg, list):
            return [self._bind(item) for item in arg]
        return symbolic_literal(self.tracer, arg)

    def _is_input(self, name: str) -> bool:
        return any(gi.value.name == name for gi in self.graph.inputs)

    def _ran_without_grad(self, node: Node) -> bool:
        """Whether the source Graph recorded `node` with grad off: its inputs required grad
        but none of its floating-point outputs does."""
        if not any(
            isinstance(ref, Ref) and _requires_grad(self._specs.get(ref.name))
            for ref in _refs(node.args, node.kwargs)
        ):
            return False
        floats = [
            v
            for v in node.output_values()
            if isinstance(v.spec, TensorSpec)
            and (v.spec.dtype.is_floating_point or v.spec.dtype.is_complex)
        ]
        return bool(floats) and not any(v.spec.requires_grad for v in floats)  # type: ignore[union-attr]


def _requires_grad(value: Value | None) -> bool:
    return value is not None and isinstance(value.spec, TensorSpec) and value.spec.requires_grad


def _refs(args: list[Any], kwargs: dict[str, Any]) -> list[Ref]:
    found: list[Ref] = []
    for arg in (*args, *kwargs.values()):
        items = arg if isinstance(arg, list) else [arg]
        found.extend(item for item in items if isinstance(item, Ref))
    return found


def _with_defaults(schema: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """`args` extended with the schema defaults of the positional arguments not given."""
    filled = list(args)
    for argument in schema.arguments[len(args) :]:
        if argument.kwarg_only or argument.name in kwargs or not argument.has_default_value():
            break
        filled.append(argument.default_value)
    return filled


def writes(node: Node) -> bool:
    """Whether `node` writes one of its arguments (an in-place or `out=` op)."""
    schema = op_schema(node.target)
    return schema is not None and bool(_written_positions(schema))


def _written_positions(schema: Any) -> list[int]:
    return [
        position
        for position, argument in enumerate(schema.arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]


def _arg_name(node: Node, position: int) -> str:
    schema = op_schema(node.target)
    assert schema is not None
    return str(schema.arguments[position].name)


def _argument(node: Node, position: int) -> Any:
    if position < len(node.args):
        return node.args[position]
    return node.kwargs.get(_arg_name(node, position))


def _tags(target: str) -> tuple[Any, ...]:
    return tuple(getattr(resolve_op(target), "tags", ()))


def _where(node: Node) -> str:
    return f"{node.source}: " if node.source is not None else ""
