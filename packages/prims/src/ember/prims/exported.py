"""`ExportedProgram`: one whole-program Graph and its named state, saved as one folder.

`ember.export` (ember-capture) makes one; `save(path)` writes the folder and
`load_program(path)` reads it back with no model code and no capture. The folder holds

    manifest.json        format version, the files with their sha256, provenance
    graph.ember          the Graph (ember-prims' pickle-free format); parameters and buffers
                         are state inputs named by `target` (`l1.weight`)
    weights.safetensors  the state tensors by those names

`flat_graph()` is the same program as backends receive a captured Graph: every input a user
input of one flat tuple, the outputs a flat tuple; `flat_arguments` and `unflatten_outputs`
convert a call to and from it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sympy
import torch

from ember.prims.atomic_file import write_atomically
from ember.prims.errors import GraphFormatError, InterpreterError
from ember.prims.graph import Graph, GraphInput, Ref
from ember.prims.pytree import TreeSpec, tree_flatten, tree_unflatten
from ember.prims.serialize import dumps, loads
from ember.prims.serialize.safetensors import dumps_tensors, loads_tensors
from ember.prims.specs import TensorSpec

PROGRAM_FORMAT = 1
MANIFEST = "manifest.json"
GRAPH_FILE = "graph.ember"
WEIGHTS_FILE = "weights.safetensors"


@dataclass(eq=False)
class ExportedProgram:
    """A Graph whose user inputs are the call's `(args, kwargs)` leaves and whose state
    inputs are bound by target name: parameters and buffers from `state` (the weights
    file), other tensors the program read from the Graph's own constants table."""

    graph: Graph
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the program folder at `path` (each file atomically; the manifest last)."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        files = {
            GRAPH_FILE: dumps(self.graph),
            WEIGHTS_FILE: dumps_tensors(self.state, {"format": "pt"}),
        }
        for name, payload in files.items():
            write_atomically(folder / name, payload)
        manifest = {
            "format": "ember-exported-program",
            "version": PROGRAM_FORMAT,
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
            "meta": dict(self.meta),
        }
        write_atomically(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
        return folder

    # ---- the flat form backends compile ------------------------------------------------------

    def flat_graph(self) -> Graph:
        """The program as capture hands a Graph to a backend: every input (user and state, in
        `graph.inputs` order) a user input of one flat tuple, the tensor outputs a flat tuple
        (`unflatten_outputs` puts back the literals and the structure)."""
        graph = self.graph
        inputs = [GraphInput(gi.value) for gi in graph.inputs]
        refs = [leaf for leaf in graph.output_leaves if isinstance(leaf, Ref)]
        return replace(
            graph,
            inputs=inputs,
            in_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in inputs)),
            input_leaves=[Ref(gi.value.name) for gi in inputs],
            out_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in refs)),
            output_leaves=list(refs),
            constants={},
        )

    def flat_arguments(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> list[Any]:
        """The flat inputs of `flat_graph()` for a call with `args` and `kwargs`, state
        inputs from `state` (by target; the Graph's constants table for the others): checks
        the call against the exported signature (InterpreterError saying what differs)."""
        graph = self.graph
        leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
        if spec != graph.in_spec:
            raise InterpreterError(
                f"the exported program takes (args, kwargs) shaped {graph.in_spec}, got {spec}; "
                "call it with the arguments it was exported with"
            )
        by_name: dict[str, Any] = {}
        for expected, actual in zip(graph.input_leaves, leaves):
            if isinstance(expected, Ref):
                by_name[expected.name] = actual
            elif not _same_literal(expected, actual):
                raise InterpreterError(
                    f"the program was exported with the constant argument {expected!r} and "
                    f"specialized on it; got {actual!r}. Export again with this value."
                )
        flat: list[Any] = []
        bindings: dict[sympy.Symbol, int] = {}
        for graph_input in graph.inputs:
            if graph_input.is_state:
                target = graph_input.target or graph_input.value.name
                flat.append(state[target] if target in state else graph.constants[target])
            else:
                value = by_name[graph_input.value.name]
                _check_argument(graph_input.value.name, graph_input.value.spec, value, bindings)
                flat.append(value)
        if graph.symbols:
            self._check_sizes(bindings)
        return flat

    def _check_sizes(self, bindings: dict[sympy.Symbol, int]) -> None:
        """Each size symbol within its exported range, and every size guard holding."""
        names = {symbol.name: value for symbol, value in bindings.items()}
        for name, info in self.graph.symbols.items():
            value = names.get(name)
            if value is None:
                continue
            if value < info.lower or (info.upper is not None and value > info.upper):
                upper = "inf" if info.upper is None else info.upper
                raise InterpreterError(
                    f"size {name} = {value} lies outside the range {info.lower}..{upper} the "
                    "program was exported for; export again with a wider Dim(min=, max=)"
                )
        for guard in self.graph.guards:
            holds = guard.expr.xreplace(bindings)
            if holds is sympy.false or holds is False:
                where = f" (assumed at {guard.source.short()})" if guard.source else ""
                raise InterpreterError(
                    f"the arguments break the exported program's size condition {guard.expr}"
                    f"{where} with {names}; export again with inputs of these sizes"
                )

    def unflatten_outputs(self, outputs: Any) -> Any:
        """The call's result from the flat outputs of `flat_graph()`."""
        values = iter(outputs)
        leaves = [
            next(values) if isinstance(leaf, Ref) else leaf for leaf in self.graph.output_leaves
        ]
        return tree_unflatten(leaves, self.graph.out_spec)

    def check_state(self) -> None:
        """GraphFormatError unless `state` holds every state input with its declared spec."""
        for graph_input in self.graph.state_inputs():
            target = graph_input.target or graph_input.value.name
            if target in self.graph.constants:
                continue  # a constant of the Graph itself, checked when it loads
            tensor = self.state.get(target)
            if tensor is None:
                raise GraphFormatError(f"the weights hold no {graph_input.kind.value} {target!r}")
            spec = graph_input.value.spec
            if isinstance(spec, TensorSpec) and (
                tensor.dtype != spec.dtype or tuple(tensor.shape) != spec.shape
            ):
                raise GraphFormatError(
                    f"the weights' {target!r} is {tensor.dtype}{list(tensor.shape)}, the Graph "
                    f"declares {spec.short()}"
                )


def load_program(path: str | os.PathLike[str]) -> ExportedProgram:
    """The program saved at `path` (OSError if unreadable, GraphFormatError if malformed or
    if a file does not match the manifest's hash). Nothing is imported or executed."""
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except ValueError as error:
        raise GraphFormatError(f"{folder / MANIFEST} is not valid JSON: {error}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "ember-exported-program":
        raise GraphFormatError(f"{folder} is not an exported ember program (no manifest)")
    if manifest.get("version") != PROGRAM_FORMAT:
        raise GraphFormatError(
            f"{folder} is exported program format {manifest.get('version')!r}; this ember-prims "
            f"reads format {PROGRAM_FORMAT}: export it again with this release"
        )
    data: dict[str, bytes] = {}
    for name in (GRAPH_FILE, WEIGHTS_FILE):
        payload = (folder / name).read_bytes()
        expected = manifest.get("files", {}).get(name)
        if hashlib.sha256(payload).hexdigest() != expected:
            raise GraphFormatError(
                f"{folder / name} does not match the manifest's sha256 (damaged, or written by "
                "another export); export the program again"
            )
        data[name] = payload
    graph = loads(data[GRAPH_FILE])
    state, _ = loads_tensors(data[WEIGHTS_FILE])
    meta = manifest.get("meta", {})
    program = ExportedProgram(graph, state, {str(k): str(v) for k, v in meta.items()})
    program.check_state()
    return program


def _check_argument(name: str, spec: Any, value: Any, bindings: dict[sympy.Symbol, int]) -> None:
    """InterpreterError unless tensor argument `value` fits `spec` (dtype, device type,
    static sizes); binds the size symbols its symbolic dims stand for."""
    if not isinstance(spec, TensorSpec):
        return
    if not isinstance(value, torch.Tensor):
        raise InterpreterError(f"argument {name} must be a tensor, got {type(value).__name__}")
    if (
        value.dtype != spec.dtype
        or value.dim() != spec.ndim
        or value.device.type != spec.device.type
    ):
        raise InterpreterError(
            f"argument {name} must be a {spec.device.type} tensor {spec.short()}, got a "
            f"{value.device.type} tensor {value.dtype} of shape {list(value.shape)}"
        )
    for dim, (expected, size) in enumerate(zip(spec.shape, value.shape)):
        if isinstance(expected, int):
            if expected != size:
                raise InterpreterError(
                    f"argument {name} must have size {expected} in dim {dim}, got {size}; "
                    "export with dynamic_shapes={...: {dim: Dim(...)}} to allow other sizes"
                )
        elif isinstance(expected, sympy.Symbol):
            bound = bindings.setdefault(expected, int(size))
            if bound != size:
                raise InterpreterError(
                    f"argument {name} dim {dim} is {size}, but size {expected} is {bound} "
                    "in another argument"
                )


def _same_literal(expected: Any, actual: Any) -> bool:
    return type(expected) is type(actual) and (expected == actual or repr(expected) == repr(actual))
