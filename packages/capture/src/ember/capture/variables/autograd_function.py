"""`MyFunction.apply(...)` of a `torch.autograd.Function` where no gradient is recorded.

With grad mode off, or no tensor argument requiring grad, `apply` is just `forward`: it is
inlined (with a context object whose `save_for_backward` and friends record nothing), as
torch.compile does. Where autograd would record the Function, its custom backward would be
lost from the captured Graph, so that still breaks the graph.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class InferenceContext:
    """The `ctx` a Function's forward gets when no backward will run."""

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


class FunctionApplyVariable(Variable):
    """`cls.apply` of an autograd.Function subclass."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def describe(self) -> str:
        return f"{self.cls.__name__}.apply"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.functions import FunctionVariable
        from ember.capture.variables.new_objects import construct
        from ember.capture.variables.tensor import TensorVariable

        tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, TensorVariable)]
        if torch.is_grad_enabled() and any(t.tensor.requires_grad for t in tensors):
            raise Unsupported(
                f"calling {self.describe()} on tensors that require grad (its custom backward "
                "is not captured)"
            )
        forward = inspect.getattr_static(self.cls, "forward", None)
        function = forward.__func__ if isinstance(forward, staticmethod) else None
        if not inspect.isfunction(function):
            raise Unsupported(f"calling {self.describe()}, whose forward is not a Python function")
        inlined = FunctionVariable.of(frame, function, None)
        if inspect.getattr_static(self.cls, "setup_context") is not (
            inspect.getattr_static(torch.autograd.Function, "setup_context")
        ):
            return inlined.call(frame, args, kwargs)  # forward takes no ctx
        ctx = construct(frame, InferenceContext, [], {})
        return inlined.call(frame, [ctx, *args], kwargs)


def is_function_apply(owner: Any, name: str) -> bool:
    return (
        name == "apply"
        and isinstance(owner, type)
        and issubclass(owner, torch.autograd.Function)
        and owner is not torch.autograd.Function
    )
