"""`export()`: one whole-program Graph of a model call, with its weights as named state.

Capture runs once with `fullgraph=True` (a graph break is an ExportError naming the user's
line) and a backend that only records the Graph. Each Graph input is then sorted by what it
was: a tensor of the call's arguments (a user input), a parameter or buffer of the module
(state named by its qualified name), or any other tensor the program read (a constant,
frozen into the state). The call's result becomes a plain output structure (tuples, lists,
dicts; a `ModelOutput` or dataclass becomes a dict). The result is a prims `ExportedProgram`,
which runs with no model code and no capture (`ember.load_exported`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ember.capture.errors import CaptureError
from ember.capture.unsupported import Unsupported
from ember.prims import (
    ExportedProgram,
    Graph,
    GraphInput,
    InputKind,
    Interpreter,
    Ref,
    TensorSpec,
    TreeSpec,
    Value,
    tree_flatten,
)

_LITERALS = (type(None), bool, int, float, str)


class ExportError(CaptureError):
    """The program cannot be exported as one Graph; the message names the line and why."""


@dataclass(frozen=True)
class Dim:
    """A symbolic size for `dynamic_shapes`: `Dim("seq", min=2, max=512)`."""

    name: str
    min: int | None = None
    max: int | None = None


# dynamic_shapes: per argument (a tuple/list in order, or a dict by parameter name) either
# None or {dim index: Dim | (min, max) | True}.
DynamicShapes = Sequence[Any] | Mapping[str, Any] | None


def export(
    model: nn.Module | Callable[..., Any],
    args: Sequence[Any] | Any = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: DynamicShapes = None,
) -> ExportedProgram:
    """Capture `model(*args, **kwargs)` into one Graph with the module's parameters and
    buffers as named state. Sizes are static except the dims `dynamic_shapes` names
    (`{"input_ids": {1: Dim("seq", max=512)}}`), which become size symbols checked on every
    call of the loaded program. Raises ExportError for what one Graph cannot hold (a branch
    on a tensor's value, a call capture cannot model), naming the user's line."""
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    target = model.forward if isinstance(model, nn.Module) else model
    name = getattr(target, "__qualname__", type(model).__name__)
    args, kwargs = _mark_dynamic(target, args, kwargs, dynamic_shapes)
    recorder = _Recorder()
    from ember.capture.compile import compile as compile_program

    compiled = compile_program(model, backend=recorder, fullgraph=True, dynamic=False)
    try:
        result = compiled(*args, **kwargs)
    except Unsupported as error:
        raise ExportError(
            f"cannot export {name} as one graph: {error}. Export takes a program whose "
            "every step is a tensor operation; move the rest out of the exported call"
        ) from error
    if recorder.graph is None:
        raise ExportError(
            f"cannot export {name}: the call records no tensor operation, so there is no "
            "graph to export"
        )
    state = _state_names(model)
    return _program(recorder, args, kwargs, result, state, name, model)


def _mark_dynamic(
    target: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: DynamicShapes,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Aliases of the tensors `dynamic_shapes` names, marked dynamic (the user's tensors
    keep no marks)."""
    if dynamic_shapes is None:
        return args, kwargs
    from ember.capture.dynamic import mark_dynamic

    bound = inspect.signature(target).bind(*args, **kwargs)
    if isinstance(dynamic_shapes, Mapping):
        by_name = dict(dynamic_shapes)
    else:
        names = list(bound.arguments)
        by_name = {names[i]: spec for i, spec in enumerate(dynamic_shapes) if i < len(names)}
    for argument, dims in by_name.items():
        if dims is None:
            continue
        if argument not in bound.arguments:
            raise ExportError(
                f"dynamic_shapes names {argument!r}, which the call does not pass; the "
                f"arguments are {list(bound.arguments)}"
            )
        tensor = bound.arguments[argument]
        if not isinstance(tensor, torch.Tensor):
            raise ExportError(f"dynamic_shapes names {argument!r}, which is not a tensor")
        alias = tensor.detach().requires_grad_(tensor.requires_grad)
        for dim, size in dict(dims).items():
            if size is None or size is False:
                continue
            low, high = _range(size)
            try:
                mark_dynamic(alias, dim, min=low, max=high)
            except ValueError as error:
                raise ExportError(f"dynamic_shapes[{argument!r}][{dim}]: {error}") from None
        bound.arguments[argument] = alias
    return tuple(bound.args), dict(bound.kwargs)


def _range(size: Any) -> tuple[int | None, int | None]:
    if isinstance(size, Dim):
        return size.min, size.max
    if size is True:
        return None, None
    if isinstance(size, tuple) and len(size) == 2:
        return size[0], size[1]
    raise ExportError(f"a dynamic dim is Dim(name, min=, max=), (min, max) or True; got {size!r}")


class _Recorder:
    """The backend export captures with: keeps the Graph, runs it with the interpreter and
    keeps the outputs of that run (the call's result is matched against them)."""

    __name__ = "export"

    def __init__(self) -> None:
        self.graph: Graph | None = None
        self.inputs: list[Any] = []
        self.outputs: tuple[Any, ...] = ()

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if self.graph is not None:
            raise ExportError(f"export captured a second graph ({graph.name}); please report this")
        self.graph = graph
        self.inputs = list(example_inputs)
        interpreter = Interpreter(graph)

        def run(*inputs: Any) -> Any:
            outputs = interpreter(*inputs)
            self.outputs = tuple(outputs)
            return outputs

        return run


def _state_names(model: Any) -> dict[int, tuple[InputKind, str]]:
    """Each parameter's and buffer's id and its kind and first qualified name."""
    names: dict[int, tuple[InputKind, str]] = {}
    if isinstance(model, nn.Module):
        for name, parameter in model.named_parameters():
            names.setdefault(id(parameter), (InputKind.PARAMETER, name))
        for name, buffer in model.named_buffers():
            names.setdefault(id(buffer), (InputKind.BUFFER, name))
    return names


def _program(
    recorder: _Recorder,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    result: Any,
    state_names: dict[int, tuple[InputKind, str]],
    name: str,
    model: Any,
) -> ExportedProgram:
    graph = recorder.graph
    assert graph is not None
    call_leaves, call_spec = tree_flatten((args, kwargs))
    user_ids = {id(leaf) for leaf in call_leaves if isinstance(leaf, torch.Tensor)}
    inputs: list[GraphInput] = []
    by_id: dict[int, str] = {}
    state: dict[str, torch.Tensor] = {}  # parameters and buffers: the weights file
    constants: dict[str, torch.Tensor] = {}  # other tensors the program reads: in the Graph
    read = iter(recorder.inputs)  # the real tensors of the Graph's user inputs, in order
    for graph_input in graph.inputs:
        value = graph_input.value
        if graph_input.is_state:  # a tensor literal the tracer lifted into its constants
            target = graph_input.target or value.name
            inputs.append(graph_input)
            constants[target] = graph.constants[target].detach().contiguous().clone()
            continue
        tensor = next(read)
        by_id[id(tensor)] = value.name
        if id(tensor) in user_ids:
            inputs.append(GraphInput(value))
            continue
        kind, target = state_names.get(id(tensor), (InputKind.CONSTANT, f"constant.{value.name}"))
        inputs.append(GraphInput(value, kind, target))
        frozen = tensor.detach().contiguous().clone()
        (constants if kind is InputKind.CONSTANT else state)[target] = frozen
    input_leaves: list[Any] = []
    for index, leaf in enumerate(call_leaves):
        if isinstance(leaf, torch.Tensor):
            if id(leaf) not in by_id:  # an argument the program never reads: still taken
                unread = Value(_fresh(f"unread_{index}", by_id), _spec(leaf))
                by_id[id(leaf)] = unread.name
                inputs.append(GraphInput(unread))
            input_leaves.append(Ref(by_id[id(leaf)]))
        elif isinstance(leaf, _LITERALS):
            input_leaves.append(leaf)
        else:
            raise ExportError(
                f"cannot export {name}: an argument is a {type(leaf).__name__}; exported "
                "programs take tensors, numbers, strings and None in tuples, lists and dicts"
            )
    # a result tensor is a Graph output (by identity with the recorded run) or an input
    output_names = dict(by_id)
    for tensor, leaf in zip(recorder.outputs, graph.output_leaves):
        if isinstance(leaf, Ref) and isinstance(tensor, torch.Tensor):
            output_names[id(tensor)] = leaf.name
    out_spec, output_leaves = _output_structure(result, output_names, name)
    exported = dataclasses.replace(
        graph,
        inputs=inputs,
        in_spec=call_spec,
        input_leaves=input_leaves,
        out_spec=out_spec,
        output_leaves=output_leaves,
        constants={**constants, **state},  # the verifier checks state against the specs
        meta={"pass": "export", "model": _describe(model)},
    )
    exported.verify()
    exported.constants = constants
    return ExportedProgram(exported, state, {"model": _describe(model), "torch": torch.__version__})


def _fresh(name: str, taken: dict[int, str]) -> str:
    used = set(taken.values())
    while name in used:
        name += "_"
    return name


def _spec(tensor: torch.Tensor) -> TensorSpec:
    return TensorSpec(
        tensor.dtype,
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.device,
        tensor.requires_grad,
        tensor.storage_offset(),
    )


def _output_structure(result: Any, names: dict[int, str], name: str) -> tuple[TreeSpec, list[Any]]:
    leaves: list[Any] = []

    def walk(value: Any, path: str) -> TreeSpec:
        if isinstance(value, torch.Tensor):
            known = names.get(id(value))
            if known is None:
                raise ExportError(
                    f"cannot export {name}: the result's {path or 'value'} is a tensor the "
                    "graph does not compute (made outside the captured program)"
                )
            leaves.append(Ref(known))
            return TreeSpec("leaf")
        if isinstance(value, _LITERALS):
            leaves.append(value)
            return TreeSpec("leaf")
        if isinstance(value, torch.Size):
            return walk(tuple(int(size) for size in value), path)
        if isinstance(value, (tuple, list)):
            kind = "list" if isinstance(value, list) else "tuple"
            return TreeSpec(kind, tuple(walk(item, f"{path}[{i}]") for i, item in enumerate(value)))
        if isinstance(value, Mapping) or dataclasses.is_dataclass(value):
            items = (
                dict(value.items())
                if isinstance(value, Mapping)
                else {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            )
            if not all(isinstance(key, (str, int)) for key in items):
                raise ExportError(
                    f"cannot export {name}: the result's {path} has keys that are not strings"
                )
            keys = tuple(items)
            return TreeSpec("dict", tuple(walk(items[k], f"{path}[{k!r}]") for k in keys), keys)
        raise ExportError(
            f"cannot export {name}: the result's {path or 'value'} is a {type(value).__name__}; "
            "an exported program returns tensors, numbers, strings and None in tuples, lists "
            "and dicts (return those from the exported call)"
        )

    spec = walk(result, "")
    return spec, leaves


def _describe(model: Any) -> str:
    cls = type(model) if isinstance(model, nn.Module) else model
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', '?')}"
