"""Tensors: a TensorVariable wraps the tracing tensor that stands for one Graph value.

Attribute reads and method calls run on the tracing tensor, so the tracer records them as
ATen nodes; reads of metadata (`shape`, `dtype`, `device`, `ndim`, `requires_grad`) give
constants, which the tensor's guard makes safe to specialize on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ember.capture.guards.source import Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.torch import TorchFunctionVariable
from ember.prims import TracerTensor

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

# Methods that read tensor data into Python or reach outside the graph.
_DATA_DEPENDENT = {
    "item": "reading a tensor value into Python (.item())",
    "tolist": "converting a tensor to a Python list (.tolist())",
    "numpy": "converting a tensor to numpy (.numpy())",
    "backward": "calling .backward() inside a compiled function",
    "data_ptr": "reading a tensor's data pointer",
    "register_hook": "registering a tensor hook",
    "__bool__": "using a tensor as a Python bool",
}
_UNSUPPORTED_ATTRIBUTES = {"grad", "grad_fn", "data", "_base", "untyped_storage"}


class TensorVariable(Variable):
    """A tensor value of the graph under construction."""

    def __init__(self, tensor: TracerTensor, source: Source | None = None) -> None:
        self.tensor = tensor
        self.source = source

    def python_type(self) -> type:
        return torch.nn.Parameter if self.is_parameter() else torch.Tensor

    def is_parameter(self) -> bool:
        return getattr(self, "_parameter", False)

    def realize(self) -> Any:
        return self.tensor

    def identity(self) -> object:
        return self.tensor

    def describe(self) -> str:
        name = f" {self.source.name()}" if self.source is not None else ""
        return f"the tensor{name}"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.torch import call_traced

        if name in _DATA_DEPENDENT:
            return DataMethodVariable(self, name)
        if name in _UNSUPPORTED_ATTRIBUTES:
            raise Unsupported(f"reading tensor.{name}")
        attribute = call_traced(frame, lambda: getattr(self.tensor, name))
        if callable(attribute) and not isinstance(attribute, torch.Tensor):
            return TensorMethodVariable(self, name, attribute)
        return wrap_result(frame, attribute)

    def setattr(self, frame: Frame, name: str, value: Variable) -> None:
        raise Unsupported(f"assigning tensor.{name}")

    def items(self, frame: Frame) -> list[Variable]:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.torch import call_traced

        if self.tensor.dim() == 0:
            raise Unsupported("iterating over a 0-d tensor")
        return [wrap_result(frame, t) for t in call_traced(frame, lambda: self.tensor.unbind(0))]

    def truth(self, frame: Frame) -> bool:
        raise Unsupported.of("tensor-branch")


class TensorMethodVariable(TorchFunctionVariable):
    """A tensor's method read as a value (`e.to`): calls are traced on the tracing tensor; kept
    across a graph break it is rebuilt as the method of the tensor the graph computed (the
    tracing tensor's own bound method would hand that tensor, which has no memory, to the
    resumed code)."""

    def __init__(self, owner: TensorVariable, attribute: str, method: Any) -> None:
        super().__init__(method, name=f"Tensor.{attribute}")
        self.owner = owner
        self.attribute = attribute


class DataMethodVariable(Variable):
    """A tensor method that reads data into Python (`x.item`); calling it breaks the graph,
    and the call runs for real on the tensor the graph computed."""

    def __init__(self, owner: TensorVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"the method Tensor.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported.of("tensor-to-python", what=_DATA_DEPENDENT[self.name])
