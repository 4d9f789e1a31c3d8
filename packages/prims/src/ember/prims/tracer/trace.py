"""`trace(fn, *example_inputs)`: record the ATen ops a function or module performs as a Graph.

User inputs are placed by a pytree signature; a module's parameters and buffers become state
inputs named by their qualified names, with their tensors kept in the constants table so
that a saved Graph is self-contained. `dynamic=True` gives each input's leading size a symbol.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ember.prims.errors import TraceError
from ember.prims.graph import Graph, InputKind, Ref
from ember.prims.pytree import tree_flatten, tree_unflatten
from ember.prims.tracer.naming import sanitize
from ember.prims.tracer.recorder import Tracer


def trace(fn: Callable[..., Any], *example_inputs: Any, dynamic: bool = False) -> Graph:
    """Trace `fn(*example_inputs)` into a Graph of ATen ops.

    `fn` may be a function or an `nn.Module`. Inputs and outputs may be nested tuples, lists
    and dicts of tensors and Python scalars (scalars are specialized into the Graph). With
    `dynamic=True`, the leading size of every tensor input (of size 2 or more) is a symbol
    and every guard a size decision creates is recorded on the Graph.
    """
    started = time.perf_counter()
    shape_env = None
    if dynamic:
        from ember.prims.symbolic import ShapeEnv

        shape_env = ShapeEnv()
    tracer = Tracer(shape_env)
    leaves, in_spec = tree_flatten(example_inputs)
    names = _leaf_names(fn, example_inputs)
    traced_leaves: list[Any] = []
    signature_leaves: list[Any] = []
    for leaf, name in zip(leaves, names):
        if isinstance(leaf, torch.Tensor):
            dims = (0,) if dynamic and leaf.dim() > 0 else ()
            tensor = tracer.add_input(leaf, name, dynamic_dims=dims)
            traced_leaves.append(tensor)
            signature_leaves.append(Ref(tensor.value_name))
        else:
            traced_leaves.append(leaf)
            signature_leaves.append(leaf)
    tracer.set_inputs_signature(in_spec, signature_leaves)

    module = fn if isinstance(fn, nn.Module) else None
    replacements = _state_inputs(tracer, module) if module is not None else {}
    with tracer.active(), _module_state_swapped(module, replacements):
        outputs = fn(*tree_unflatten(traced_leaves, in_spec))
    graph = tracer.finish(outputs)
    graph.name = "forward" if module is not None else sanitize(getattr(fn, "__name__", "fn"))
    graph.meta = {"pass": "trace", "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
    return graph


def _state_inputs(tracer: Tracer, module: nn.Module) -> dict[str, torch.Tensor]:
    """A tracing tensor per parameter and buffer, under every name that shares it."""
    by_tensor: dict[int, torch.Tensor] = {}
    replacements: dict[str, torch.Tensor] = {}
    named: list[tuple[str, torch.Tensor, InputKind]] = [
        (name, p, InputKind.PARAMETER)
        for name, p in module.named_parameters(remove_duplicate=False)
    ]
    named += [
        (name, b, InputKind.BUFFER)
        for name, b in module.named_buffers(remove_duplicate=False)
        if b is not None
    ]
    for name, tensor, kind in named:
        if id(tensor) not in by_tensor:
            by_tensor[id(tensor)] = tracer.add_input(tensor, name, kind=kind, target=name)
        replacements[name] = by_tensor[id(tensor)]
    return replacements


@contextmanager
def _module_state_swapped(
    module: nn.Module | None, replacements: dict[str, torch.Tensor]
) -> Iterator[None]:
    if module is None:
        yield
        return
    originals: list[tuple[dict[str, Any], str, Any, torch.Tensor]] = []
    for qualname, tensor in replacements.items():
        owner_name, _, attr = qualname.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        table: dict[str, Any] = owner._parameters if attr in owner._parameters else owner._buffers
        originals.append((table, attr, table[attr], tensor))
        table[attr] = tensor
    try:
        yield
    finally:
        reassigned = [attr for table, attr, _, tensor in originals if table.get(attr) is not tensor]
        for table, attr, original, _ in originals:
            table[attr] = original
    if reassigned:
        raise TraceError(
            f"the module reassigned its state ({', '.join(sorted(set(reassigned)))}) while being "
            "traced; trace records ops only: update state in place (e.g. buf.copy_(new)) or use "
            "ember.compile, which replays attribute writes"
        )


def _leaf_names(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> list[str]:
    """A readable name for every input leaf: the parameter name plus the path into it."""
    target = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    names: list[str] = []
    for position, value in enumerate(inputs):
        base = f"arg{position}"
        if position < len(parameters):
            parameter = parameters[position]
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                base = f"{parameter.name}_{position - parameters.index(parameter)}"
            else:
                base = parameter.name
        elif parameters and parameters[-1].kind is inspect.Parameter.VAR_POSITIONAL:
            base = f"{parameters[-1].name}_{position - len(parameters) + 1}"
        names.extend(_paths(value, base))
    return names


def _paths(value: Any, prefix: str) -> list[str]:
    if type(value) in (tuple, list):
        return [name for i, item in enumerate(value) for name in _paths(item, f"{prefix}_{i}")]
    if type(value) is dict:
        return [name for key, item in value.items() for name in _paths(item, f"{prefix}_{key}")]
    return [prefix]
