"""An opaque operator standing for one `torch.autograd.Function` applied with grad recorded.

Where `cls.apply(...)` would be recorded by autograd, inlining `forward` would lose the
Function's custom backward. Capture records instead ONE call of an operator defined here
(namespace `ember_autograd_fn`, schema `(Tensor[] tensors) -> Tensor[]`), one per Function
class and non-tensor argument values, which are bound in the kernels:

- `Autograd`: calls `cls.apply` itself, so real autograd records the Function node with its
  custom backward. This is what runs when ember-autodiff's joint trace, the eager interpreter
  or inductor's fallback run the op; the forward's and the backward's ATen ops are then what a
  tracer sees, and the opaque op is gone from the traced forward/backward Graphs.
- `Meta` and `CompositeExplicitAutograd` (calls below autograd): `cls.forward` with a context
  that records nothing, under no_grad. Capture's tracer learns output specs through `Meta`.
"""

from __future__ import annotations

import inspect
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.capture.variables.autograd_function import InferenceContext

NAMESPACE = "ember_autograd_fn"


@dataclass
class FunctionOp:
    """The operator for one Function class with its non-tensor arguments bound."""

    cls: type[torch.autograd.Function]
    # The Function's positional arguments, with None where a tensor goes.
    template: tuple[Any, ...]
    tensor_positions: tuple[int, ...]
    op: Any = None
    # Whether forward returned one tensor (True) or a tuple of tensors (False); set when the
    # Meta kernel first runs.
    single: bool | None = None

    def arguments(self, tensors: list[torch.Tensor]) -> list[Any]:
        if len(tensors) != len(self.tensor_positions):
            raise RuntimeError(
                f"{self.cls.__name__}: expected {len(self.tensor_positions)} tensors, "
                f"got {len(tensors)}"
            )
        arguments = list(self.template)
        for position, tensor in zip(self.tensor_positions, tensors):
            arguments[position] = tensor
        return arguments

    def as_list(self, result: Any) -> list[torch.Tensor]:
        if isinstance(result, torch.Tensor):
            single = True
            outputs = [result]
        elif type(result) is tuple and all(isinstance(r, torch.Tensor) for r in result):
            single = False
            outputs = list(result)
        else:
            raise RuntimeError(
                f"{self.cls.__name__}.forward returned a {type(result).__name__}; only a tensor "
                "or a tuple of tensors can be captured as one operator"
            )
        if self.single is None:
            self.single = single
        return outputs

    def autograd_kernel(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        apply: Any = self.cls.apply
        return self.as_list(apply(*self.arguments(tensors)))

    def forward_kernel(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        arguments = self.arguments(tensors)
        forward: Any = self.cls.forward
        takes_ctx = inspect.getattr_static(self.cls, "setup_context") is (
            inspect.getattr_static(torch.autograd.Function, "setup_context")
        )
        with torch.no_grad():
            result = forward(InferenceContext(), *arguments) if takes_ctx else forward(*arguments)
        outputs = self.as_list(result)
        # A functional op's outputs may not alias its inputs.
        inputs = {id(t) for t in tensors}
        return [o.clone() if id(o) in inputs else o for o in outputs]


@dataclass
class FunctionOpRegistry:
    """The operators defined so far, keyed by (Function class, non-tensor arguments)."""

    library: Any = None
    ops: dict[tuple[Any, ...], FunctionOp] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # threads capture at once

    def op_for(
        self,
        cls: type[torch.autograd.Function],
        template: tuple[Any, ...],
        positions: tuple[int, ...],
    ) -> FunctionOp:
        """The FunctionOp for `cls` applied to `template` (raises TypeError if unhashable)."""
        key = (cls, positions, tuple((type(v), v) for v in template))
        hash(key)
        with self.lock:
            return self._op_for(key, cls, template, positions)

    def _op_for(
        self,
        key: tuple[Any, ...],
        cls: type[torch.autograd.Function],
        template: tuple[Any, ...],
        positions: tuple[int, ...],
    ) -> FunctionOp:
        entry = self.ops.get(key)
        if entry is not None:
            return entry
        if self.library is None:
            self.library = torch.library.Library(NAMESPACE, "FRAGMENT")
        entry = FunctionOp(cls, template, positions)
        stem = re.sub(r"\W", "_", cls.__name__)
        name = f"{stem}_{len(self.ops)}"
        self.library.define(f"{name}(Tensor[] tensors) -> Tensor[]")
        self.library.impl(name, entry.autograd_kernel, "Autograd")
        self.library.impl(name, entry.forward_kernel, "Meta")
        self.library.impl(name, entry.forward_kernel, "CompositeExplicitAutograd")
        entry.op = getattr(getattr(torch.ops, NAMESPACE), name).default
        self.ops[key] = entry
        return entry


REGISTRY = FunctionOpRegistry()
