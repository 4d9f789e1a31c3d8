"""Handlers for control flow and calls: jumps, loops, returns, calls, function creation,
`with` blocks and generators (run to completion, collecting what they yield).
"""

from __future__ import annotations

import torch

from ember.capture.bytecode.frame import Frame, Step
from ember.capture.bytecode.registry import handler
from ember.capture.unsupported import Unsupported
from ember.capture.variables.autocast import AutocastExitVariable, AutocastVariable
from ember.capture.variables.base import NULL, Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.containers import DictVariable, IteratorVariable
from ember.capture.variables.functions import CellVariable, FunctionVariable
from ember.capture.variables.objects import UserObjectVariable
from ember.capture.variables.torch import (
    GradModeExitVariable,
    GradModeVariable,
    TorchFunctionVariable,
)

PY311 = ((3, 11),)
PY312 = ((3, 12),)


@handler("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def jump(frame: Frame, instr: Step) -> None:
    frame.jump(instr.arg)


def _jump_if(frame: Frame, instr: Step, when: bool) -> None:
    if frame.pop().truth(frame) is when:
        frame.jump(instr.arg)


@handler("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", versions=PY311)
@handler("POP_JUMP_IF_TRUE", versions=PY312)
def pop_jump_if_true(frame: Frame, instr: Step) -> None:
    _jump_if(frame, instr, True)


@handler("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", versions=PY311)
@handler("POP_JUMP_IF_FALSE", versions=PY312)
def pop_jump_if_false(frame: Frame, instr: Step) -> None:
    _jump_if(frame, instr, False)


def _is_none(value: Variable) -> bool:
    return value.is_constant() and value.constant() is None


@handler("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE", versions=PY311)
@handler("POP_JUMP_IF_NONE", versions=PY312)
def pop_jump_if_none(frame: Frame, instr: Step) -> None:
    if _is_none(frame.pop()):
        frame.jump(instr.arg)


@handler("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", versions=PY311)
@handler("POP_JUMP_IF_NOT_NONE", versions=PY312)
def pop_jump_if_not_none(frame: Frame, instr: Step) -> None:
    if not _is_none(frame.pop()):
        frame.jump(instr.arg)


@handler("JUMP_IF_TRUE_OR_POP", versions=PY311)
def jump_if_true_or_pop(frame: Frame, instr: Step) -> None:
    if frame.top().truth(frame):
        frame.jump(instr.arg)
    else:
        frame.pop()


@handler("JUMP_IF_FALSE_OR_POP", versions=PY311)
def jump_if_false_or_pop(frame: Frame, instr: Step) -> None:
    if not frame.top().truth(frame):
        frame.jump(instr.arg)
    else:
        frame.pop()


@handler("GET_ITER")
def get_iter(frame: Frame, instr: Step) -> None:
    value = frame.pop()
    frame.push(
        value if isinstance(value, IteratorVariable) else IteratorVariable(value.items(frame))
    )


@handler("FOR_ITER")
def for_iter(frame: Frame, instr: Step) -> None:
    iterator = frame.top()
    if not isinstance(iterator, IteratorVariable):
        raise Unsupported(f"iterating over {iterator.describe()}")
    value = iterator.next()
    if value is not None:
        frame.push(value)
        return
    frame.pop()
    frame.jump(instr.arg)
    # 3.12 jumps past the END_FOR that ends the loop (it pops for the other exit path).
    if frame.pc < len(frame.instructions) and frame.instructions[frame.pc].name == "END_FOR":
        frame.pc += 1


@handler("RETURN_VALUE")
def return_value(frame: Frame, instr: Step) -> None:
    frame.returned = frame.pop()


@handler("RETURN_CONST", versions=PY312)
def return_const(frame: Frame, instr: Step) -> None:
    from ember.capture.bytecode.ops_names import constant_variable

    frame.returned = constant_variable(instr.arg)


@handler("RETURN_GENERATOR")
def return_generator(frame: Frame, instr: Step) -> None:
    if frame.yielded is None:
        raise Unsupported("a generator outside a generator function")
    frame.push(ConstantVariable(None))


@handler("YIELD_VALUE")
def yield_value(frame: Frame, instr: Step) -> None:
    if frame.yielded is None:
        raise Unsupported("yield outside a generator")
    frame.yielded.append(frame.pop())
    frame.push(ConstantVariable(None))  # what send() would deliver: generators run eagerly


@handler("KW_NAMES")
def kw_names(frame: Frame, instr: Step) -> None:
    frame.kw_names = tuple(instr.arg)


@handler("CALL")
def call(frame: Frame, instr: Step) -> None:
    args = frame.popn(instr.arg)
    names, frame.kw_names = frame.kw_names, ()
    below, callable_or_self = frame.popn(2)
    if below is NULL:
        fn = callable_or_self
    else:
        fn, args = below, [callable_or_self, *args]
    split = len(args) - len(names)
    kwargs = dict(zip(names, args[split:]))
    frame.push(frame.call(fn, args[:split], kwargs))


@handler("CALL_FUNCTION_EX")
def call_function_ex(frame: Frame, instr: Step) -> None:
    kwargs_variable = frame.pop() if instr.arg & 0x01 else DictVariable({})
    args = frame.pop().items(frame)
    fn = frame.pop()
    if frame.stack and frame.top() is NULL:
        frame.pop()
    if not isinstance(kwargs_variable, DictVariable):
        raise Unsupported(f"unpacking {kwargs_variable.describe()} with **")
    kwargs = {str(key): value for key, value in kwargs_variable.entries.items()}
    frame.push(frame.call(fn, args, kwargs))


@handler("MAKE_FUNCTION")
def make_function(frame: Frame, instr: Step) -> None:
    code = frame.pop().constant()
    closure = frame.pop().items(frame) if instr.arg & 0x08 else []
    if instr.arg & 0x04:
        frame.pop()  # annotations
    kwdefaults = frame.pop() if instr.arg & 0x02 else DictVariable({})
    defaults = frame.pop().items(frame) if instr.arg & 0x01 else []
    assert isinstance(kwdefaults, DictVariable)
    cells = [cell for cell in closure if isinstance(cell, CellVariable)]
    frame.push(
        FunctionVariable(
            code,
            frame.globals,
            name=code.co_qualname,
            defaults=defaults,
            kwdefaults={str(key): value for key, value in kwdefaults.entries.items()},
            closure=cells,
        )
    )


# Grad-mode context objects whose entry only sets grad mode (set_grad_enabled(mode) objects
# set it when made, so they are not among them).
GRAD_MODE_OBJECTS = (torch.no_grad, torch.enable_grad)


@handler("BEFORE_WITH")
def before_with(frame: Frame, instr: Step) -> None:
    manager = frame.pop()
    if isinstance(manager, AutocastVariable):
        frame.push(AutocastExitVariable(manager))
        frame.push(manager.enter(frame))
        return
    if isinstance(manager, UserObjectVariable):
        # A context manager written in Python: its __enter__ and __exit__ are inlined.
        enter = manager.python_method(frame, "__enter__")
        exit_method = manager.python_method(frame, "__exit__")
        if enter is not None and exit_method is not None:
            frame.push(exit_method)
            frame.push(enter.call(frame, [], {}))
            return
    if isinstance(manager, TorchFunctionVariable) and type(manager.fn) in GRAD_MODE_OBJECTS:
        # A grad-mode object made elsewhere, e.g. by `@torch.no_grad()`'s wrapper
        # (`with ctx_factory():`): entering it is the same as `with torch.no_grad():`.
        manager = GradModeVariable(type(manager.fn) is torch.enable_grad, None)
    if not isinstance(manager, GradModeVariable):
        raise Unsupported(
            f"a `with` block over {manager.describe()}",
            "ember.compile models `with torch.no_grad()` / `enable_grad()` / "
            "`set_grad_enabled()` / `torch.autocast()`; others run in plain Python",
        )
    frame.push(GradModeExitVariable(manager))
    frame.push(manager.enter(frame))
