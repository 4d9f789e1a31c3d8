"""`LoadedProgram`: an exported program made callable, compiled by a backend on first call.

It holds the state tensors (parameters, buffers) and, on the first call, hands the program's
flat Graph (`ExportedProgram.flat_graph`, the form capture hands backends) and the call's
flat inputs to the backend; later calls check the arguments against the exported signature
(dtype, device, static sizes, size ranges and guards) and run the compiled callable.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ember.prims import ExportedProgram, load_program
from ember.runtime.exported.backends import Backend, interpreter, resolve_backend


class LoadedProgram:
    """`program(*args, **kwargs)` runs the exported program; `state_dict()` and
    `named_parameters()` read its weights, `graph` is the exported Graph."""

    def __init__(
        self,
        program: ExportedProgram,
        backend: str | Backend | None = None,
        compiled: Callable[..., Any] | None = None,
    ) -> None:
        self.program = program
        self.graph = program.graph
        self.backend = resolve_backend(backend)
        # what runs it: the backend's name, or "aot" for a package's precompiled callable
        self.backend_name = (
            "aot" if compiled is not None else getattr(self.backend, "__name__", repr(backend))
        )
        self.state = _on_devices(program)
        self._compiled = compiled
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self.program.flat_arguments(args, kwargs, self.state)
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                if self._compiled is None:
                    self._compiled = self.backend(self.program.flat_graph(), flat)
                compiled = self._compiled
        return self.program.unflatten_outputs(compiled(*flat))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: self.state[name] for name in self.program.state}

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        parameters = {gi.target for gi in self.graph.state_inputs() if gi.kind.value == "parameter"}
        for name, tensor in self.state.items():
            if name in parameters:
                yield name, tensor

    @property
    def interpreted(self) -> bool:
        return self.backend is interpreter

    def __repr__(self) -> str:
        model = self.program.meta.get("model", "?")
        return f"LoadedProgram({model}, {len(self.graph.nodes)} nodes, backend={self.backend_name})"


def _on_devices(program: ExportedProgram) -> dict[str, torch.Tensor]:
    """The state tensors, and the Graph's own constants, on the devices the Graph declares
    for them (both load on the CPU; a program exported on a GPU runs there)."""
    state = dict(program.state)
    for graph_input in program.graph.state_inputs():
        target = graph_input.target or graph_input.value.name
        tensor = state.get(target, program.graph.constants.get(target))
        device = getattr(graph_input.value.spec, "device", None)
        if tensor is not None and device is not None and tensor.device != device:
            state[target] = tensor.to(device)
    return state


def load_exported(
    path: str | os.PathLike[str], backend: str | Backend | None = None
) -> LoadedProgram:
    """The program saved at `path` (by `ExportedProgram.save`), run by `backend`: None or
    "eager" interprets it, "inductor" compiles it on the first call, or any backend callable."""
    return LoadedProgram(load_program(path), backend)
