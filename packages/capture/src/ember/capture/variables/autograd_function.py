"""`MyFunction.apply(...)` of a `torch.autograd.Function`.

With grad mode off, or no tensor argument requiring grad, `apply` is just `forward`: it is
inlined (with a context object whose `save_for_backward` and friends record nothing), as
torch.compile does. Where autograd would record the Function, inlining would lose its custom
backward: the call is recorded as one opaque operator instead (autograd_function_op.py), whose
Autograd kernel is `apply` itself, so autodiff and the interpreters run the custom backward.
Keyword arguments and arguments other than tensors and constants still break the graph.
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
            return self._call_as_op(frame, args, kwargs)
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

    def _call_as_op(
        self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]
    ) -> Variable:
        """One opaque operator call whose Autograd kernel is `apply` (custom backward kept)."""
        from ember.capture.variables.autograd_function_op import REGISTRY
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.constant import ConstantVariable
        from ember.capture.variables.tensor import TensorVariable
        from ember.capture.variables.torch import call_traced

        if kwargs:
            raise Unsupported(
                f"calling {self.describe()} with keyword arguments on tensors that require grad",
                "pass the arguments positionally",
            )
        template: list[Any] = []
        positions: list[int] = []
        tensors: list[Any] = []
        for index, arg in enumerate(args):
            if isinstance(arg, TensorVariable):
                template.append(None)
                positions.append(index)
                tensors.append(arg.tensor)
            elif isinstance(arg, ConstantVariable):
                template.append(arg.value)
            else:
                raise Unsupported(
                    f"calling {self.describe()} on tensors that require grad with a "
                    f"{arg.describe()} argument (only tensors and constants can be bound)"
                )
        try:
            entry = REGISTRY.op_for(self.cls, tuple(template), tuple(positions))
        except TypeError as error:
            raise Unsupported(
                f"calling {self.describe()} on tensors that require grad with an unhashable "
                f"constant argument ({error})"
            ) from error

        def run() -> list[Any]:
            # Below autograd: the tracer records the op itself, its specs from the Meta kernel.
            with torch._C._AutoDispatchBelowAutograd():
                outputs: list[Any] = entry.op(tensors)
            for output in outputs:
                if output.is_floating_point() or output.is_complex():
                    output.requires_grad_(True)  # autograd, skipped here, would have said so
            return outputs

        outputs = call_traced(frame, run)
        if entry.single:
            return wrap_result(frame, outputs[0])
        return wrap_result(frame, tuple(outputs))


def is_function_apply(owner: Any, name: str) -> bool:
    return (
        name == "apply"
        and isinstance(owner, type)
        and issubclass(owner, torch.autograd.Function)
        and owner is not torch.autograd.Function
    )
