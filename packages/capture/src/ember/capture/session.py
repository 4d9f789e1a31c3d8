"""The state of one capture: the tracer recording the Graph, the guards emitted so far, the
graph's tensor inputs with their sources, and the user line being interpreted.

Every Frame of one capture (the compiled function and the calls it inlines) shares one
session; it is passed explicitly, never global.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ember.capture.dynamic import DynamicPolicy
from ember.capture.guards.kinds import Guard, GuardKind, TensorFacts
from ember.capture.guards.source import AttrSource, SizeSource, Source
from ember.capture.side_effects import SideEffects
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.tensor import TensorVariable
from ember.prims import SourceLocation, Tracer
from ember.prims.graph import ShapeGuard


@dataclass
class TensorInput:
    """One Graph input: the real tensor seen while capturing and where it is read from."""

    source: Source
    tensor: torch.Tensor
    variable: TensorVariable
    value_name: str  # the Graph input's name (the tracing tensor's name changes if mutated)
    dynamic_dims: tuple[int, ...] = ()  # the dims the Graph gives size symbols


@dataclass
class CaptureSession:
    """What one capture accumulates."""

    tracer: Tracer
    globals: dict[str, Any]
    function_name: str
    # What torch.compiler.is_compiling() answers (see CaptureOptions.compiling), and whether
    # the program asked while the answer was True (it may then have taken a path eager never
    # takes).
    compiling: bool = True
    answered_compiling: bool = False
    guards: list[Guard] = field(default_factory=list)
    inputs: list[TensorInput] = field(default_factory=list)
    location: SourceLocation | None = None
    initial_grad_mode: bool = field(default_factory=torch.is_grad_enabled)
    side_effects: SideEffects = field(default_factory=SideEffects)
    # Real context managers entered while capturing (autocast), exited if capture stops.
    open_contexts: list[Any] = field(default_factory=list)
    # Sources of resumed autocast blocks the entry function suspends before the graph runs.
    prologue: list[Source] = field(default_factory=list)
    # Mutable values read from a source, so every read of that source sees one Variable.
    by_source: dict[Source, Variable] = field(default_factory=dict)
    by_identity: dict[int, tuple[Source, Variable]] = field(default_factory=dict)
    # Which dims of tensor inputs become size symbols (dynamic=, marks, automatic dynamic),
    # and the input dim each symbol stands for.
    policy: DynamicPolicy = field(default_factory=DynamicPolicy)
    sizes: dict[str, SizeSource] = field(default_factory=dict)
    _guarded: set[tuple[GuardKind, Source | None]] = field(default_factory=set)
    _labelled_guards: int = 0
    _inputs_by_id: dict[int, TensorInput] = field(default_factory=dict)

    def answer_compiling(self) -> bool:
        """The answer to torch.compiler.is_compiling(), noting that the program asked."""
        self.answered_compiling = self.answered_compiling or self.compiling
        return self.compiling

    def guard(self, kind: GuardKind, source: Source | None, expected: Any) -> None:
        """Record one assumption (once per kind and source)."""
        key = (kind, source)
        if key in self._guarded:
            return
        self._guarded.add(key)
        self.guards.append(Guard(kind, source, expected, self.location))

    def label_size_guards(self) -> None:
        """Name the user's line on the size guards the last instruction made (the shape
        environment sees ember's frames, not the line capture is interpreting)."""
        shape_env = self.tracer.shape_env
        if shape_env is None or len(shape_env.guards) == self._labelled_guards:
            return
        guards = shape_env.guards
        for index in range(self._labelled_guards, len(guards)):
            guards[index] = ShapeGuard(guards[index].expr, self.location)
        self._labelled_guards = len(guards)

    def tensor_input(self, tensor: torch.Tensor, source: Source) -> TensorVariable:
        """The Variable for a real tensor read from `source`, made a Graph input once."""
        known = self._inputs_by_id.get(id(tensor))
        if known is not None:
            if known.source != source:
                dynamic = frozenset(known.dynamic_dims)
                self.guard(GuardKind.TENSOR, source, TensorFacts.of(tensor, dynamic))
                self.guard(GuardKind.SAME_OBJECT, source, known.source)
            return known.variable
        if tensor.layout != torch.strided:  # Graphs hold strided tensors: this runs eagerly
            raise Unsupported(f"a {tensor.layout} tensor", "sparse tensors run in plain Python")
        ranges = self.policy.dims_for(tensor, source) if self.tracer.shape_env else {}
        self.guard(GuardKind.TENSOR, source, TensorFacts.of(tensor, frozenset(ranges)))
        # add_input builds meta tensors, which the active recording mode must not see.
        # TODO(issue 4 report): let prims' Tracer.add_input work while the tracer is active.
        with _disable_current_modes():
            traced = self.tracer.add_input(
                tensor, _input_name(source), dynamic_dims=tuple(ranges), size_ranges=ranges
            )
        for dim in ranges:
            node = traced.meta.shape[dim].node  # type: ignore[attr-defined]  # a SymInt
            self.sizes[str(node.expr)] = SizeSource(source, dim)
        variable = TensorVariable(traced, source)
        variable._parameter = isinstance(tensor, torch.nn.Parameter)  # type: ignore[attr-defined]
        entry = TensorInput(source, tensor, variable, traced.value_name, tuple(ranges))
        self.inputs.append(entry)
        self._inputs_by_id[id(tensor)] = entry
        return variable


def _input_name(source: Source) -> str:
    text = source.name()
    if isinstance(source, AttrSource) and text.startswith("self."):
        text = text[len("self.") :]
    return text.replace(".", "_").replace("[", "_").replace("]", "").replace("'", "")
