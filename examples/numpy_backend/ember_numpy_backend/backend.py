"""The `numpy_prims` backend: a captured Graph in, a callable that runs it with NumPy out.

Compiling decomposes the Graph to ember's prims (`ember.prims.decompose` with
`PRIM_DECOMPOSITIONS`), checks that every prim it contains has a NumPy kernel, and returns a
`NumpyProgram`. Calling it converts the torch inputs to arrays (zero-copy on CPU), runs one
kernel per node, casts each result to the dtype the Graph declares, and converts the outputs
back to torch tensors. No torch operator runs between those two boundaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ember.prims import (
    PRIM_DECOMPOSITIONS,
    Graph,
    PrimsError,
    Ref,
    TensorSpec,
    Value,
    decompose,
    tree_flatten,
    tree_unflatten,
)
from ember_numpy_backend.dtypes import TO_NUMPY, to_numpy_dtype
from ember_numpy_backend.kernels import KERNELS


class NumpyBackendError(PrimsError):
    """The Graph needs something this backend does not implement, or its inputs do not fit."""


def numpy_prims(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Compile `graph` for NumPy: decompose it to prims and bind a kernel to every node."""
    del example_inputs  # the Graph's specs say everything the kernels need
    prim_graph = decompose(graph, PRIM_DECOMPOSITIONS)
    missing = sorted({node.target for node in prim_graph.nodes if node.target not in KERNELS})
    if missing:
        where = next(n.source for n in prim_graph.nodes if n.target in missing)
        raise NumpyBackendError(
            f"numpy_prims has no NumPy kernel for {', '.join(missing)} (needed by "
            f"{where or 'the Graph'}); run this code with another backend, e.g. "
            "backend='eager'"
        )
    return NumpyProgram(prim_graph)


class NumpyProgram:
    """A prim Graph prepared for repeated execution with NumPy kernels."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._kernels = [KERNELS[node.target] for node in graph.nodes]
        self._user_inputs = {gi.value.name for gi in graph.user_inputs()}

    def __call__(self, *inputs: Any) -> Any:
        env: dict[str, Any] = {}
        self._bind_user_inputs(inputs, env)
        for graph_input in self.graph.state_inputs():
            target = graph_input.target or graph_input.value.name
            env[graph_input.value.name] = _to_array(self.graph.constants[target])
        for node, run_kernel in zip(self.graph.nodes, self._kernels):
            args = [_argument(a, env) for a in node.args]
            kwargs = {key: _argument(a, env) for key, a in node.kwargs.items()}
            try:
                result = run_kernel(*args, **kwargs)
            except Exception as error:
                where = f" at {node.source}" if node.source is not None else ""
                raise NumpyBackendError(f"{node.target}{where} failed: {error}") from error
            results = result if isinstance(result, tuple) else (result,)
            for output, produced in zip(node.outputs, results):
                if isinstance(output, Value):
                    env[output.name] = _declared(output, produced)
        leaves = [
            _to_tensor(env[leaf.name]) if isinstance(leaf, Ref) else leaf
            for leaf in self.graph.output_leaves
        ]
        return tree_unflatten(leaves, self.graph.out_spec)

    def _bind_user_inputs(self, inputs: tuple[Any, ...], env: dict[str, Any]) -> None:
        leaves, spec = tree_flatten(inputs)
        if spec != self.graph.in_spec:
            raise NumpyBackendError(
                f"the Graph takes inputs shaped {self.graph.in_spec}, got {spec}"
            )
        for expected, actual in zip(self.graph.input_leaves, leaves):
            if isinstance(expected, Ref) and expected.name in self._user_inputs:
                env[expected.name] = (
                    _to_array(actual) if isinstance(actual, torch.Tensor) else actual
                )


# ---- the boundary: the only place torch tensors are touched ------------------------------


def _to_array(tensor: torch.Tensor) -> Any:
    if tensor.dtype not in TO_NUMPY:
        raise NumpyBackendError(f"numpy_prims cannot take {tensor.dtype} tensors")
    return tensor.detach().cpu().numpy()


def _to_tensor(array: Any) -> torch.Tensor:
    array = np.asarray(array)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, copy=True, order="C")
    return torch.from_numpy(array)


# ---- arguments and results --------------------------------------------------------------


def _argument(arg: Any, env: dict[str, Any]) -> Any:
    if isinstance(arg, Ref):
        return env[arg.name]
    if isinstance(arg, list):
        return [_argument(item, env) for item in arg]
    if isinstance(arg, torch.dtype):
        return to_numpy_dtype(arg)
    return arg


def _declared(value: Value, produced: Any) -> Any:
    """produced as an array of the dtype the Graph declares (NumPy may widen or give scalars)."""
    array = np.asarray(produced)
    spec = value.spec
    if isinstance(spec, TensorSpec):
        dtype = to_numpy_dtype(spec.dtype)
        if array.dtype != dtype:
            array = array.astype(dtype)
    return array
