"""`torch.autocast` blocks: while capturing, the real autocast context is entered, so the
tracer records the casts autocast inserts and the Graph runs them explicitly. Across a
graph break, the resume function's stack gets a `ResumedAutocast` in place of `__exit__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class AutocastClassVariable(Variable):
    """`torch.autocast` (or `torch.amp.autocast`) before it is called."""

    def identity(self) -> object:
        return torch.autocast

    def describe(self) -> str:
        return "torch.autocast"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        real_args = tuple(arg.constant() for arg in args)
        real_kwargs = {key: arg.constant() for key, arg in kwargs.items()}
        return AutocastVariable(real_args, real_kwargs)


class AutocastVariable(Variable):
    """An autocast context manager, made from constant arguments."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.real: Any = None

    def describe(self) -> str:
        return "a torch.autocast context"

    def enter(self, frame: Frame) -> Variable:
        try:
            self.real = torch.autocast(*self.args, **self.kwargs)
            self.real.__enter__()
        except Exception as error:  # noqa: BLE001 - autocast validates its arguments
            raise Unsupported(f"torch.autocast{self.args} ({error})") from error
        frame.session.open_contexts.append(self.real)
        return ConstantVariable(None)

    def exit(self, frame: Frame) -> None:
        if self.real is not None:
            self.real.__exit__(None, None, None)
            frame.session.open_contexts.remove(self.real)
            self.real = None


class AutocastExitVariable(Variable):
    """The bound `__exit__` that BEFORE_WITH leaves on the stack for an autocast block."""

    def __init__(self, manager: AutocastVariable) -> None:
        self.manager = manager

    def describe(self) -> str:
        return "the exit of a torch.autocast block"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        self.manager.exit(frame)
        return ConstantVariable(None)


class ResumedAutocast:
    """The `__exit__` a resume function gets for an autocast block the graph broke in.

    Made by the entry function, it enters a real autocast, so the instruction that broke
    runs under it. A capture of the resume function suspends it before its graph runs (the
    Graph holds autocast's casts explicitly); run eagerly, it is the block's real exit.
    """

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.args = args
        self.kwargs = kwargs
        self.manager = torch.autocast(*args, **kwargs)
        self.manager.__enter__()
        self.active = True

    def suspend(self) -> None:
        if self.active:
            self.active = False
            self.manager.__exit__(None, None, None)

    def __call__(self, *exception: Any) -> None:
        self.suspend()
