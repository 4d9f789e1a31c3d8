"""Handlers for stack shuffling and names: locals, constants, globals, cells, attributes."""

from __future__ import annotations

from typing import Any

from bytecode import CellVar, FreeVar

from ember.capture.bytecode.frame import Frame, Step
from ember.capture.bytecode.registry import handler
from ember.capture.variables.base import NULL, NullVariable, Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.containers import TupleVariable

PY311 = ((3, 11),)
PY312 = ((3, 12),)


class _Cleared(NullVariable):
    """What LOAD_FAST_AND_CLEAR pushes for a local that was unbound (3.12 comprehensions):
    CPython pushes NULL there, so a resume function gets a NULL in that slot."""


CLEARED = _Cleared()


@handler("NOP", "RESUME", "PRECALL", "EXTENDED_ARG", "CACHE")
def nop(frame: Frame, instr: Step) -> None:
    pass


@handler("POP_TOP")
def pop_top(frame: Frame, instr: Step) -> None:
    frame.pop()


@handler("END_FOR", versions=PY312)
def end_for(frame: Frame, instr: Step) -> None:
    frame.popn(2)


@handler("PUSH_NULL")
def push_null(frame: Frame, instr: Step) -> None:
    frame.push(NULL)


@handler("COPY")
def copy(frame: Frame, instr: Step) -> None:
    frame.push(frame.stack[-instr.arg])


@handler("SWAP")
def swap(frame: Frame, instr: Step) -> None:
    stack = frame.stack
    stack[-1], stack[-instr.arg] = stack[-instr.arg], stack[-1]


def constant_variable(value: Any) -> Variable:
    if type(value) is tuple:
        return TupleVariable([constant_variable(item) for item in value])
    return ConstantVariable(value)


@handler("LOAD_CONST")
def load_const(frame: Frame, instr: Step) -> None:
    frame.push(constant_variable(instr.arg))


@handler("LOAD_FAST", "LOAD_FAST_CHECK")
def load_fast(frame: Frame, instr: Step) -> None:
    if isinstance(instr.arg, (CellVar, FreeVar)):  # 3.12 loads closure cells with LOAD_FAST
        frame.push(frame.cells[instr.arg.name])
        return
    frame.push(frame.load_local(instr.arg))


@handler("LOAD_FAST_AND_CLEAR", versions=PY312)
def load_fast_and_clear(frame: Frame, instr: Step) -> None:
    value = frame.locals.pop(instr.arg, None)
    frame.push(value if value is not None else CLEARED)


@handler("STORE_FAST")
def store_fast(frame: Frame, instr: Step) -> None:
    value = frame.pop()
    if value is CLEARED:
        frame.locals.pop(instr.arg, None)
    else:
        frame.store_local(instr.arg, value)


@handler("DELETE_FAST")
def delete_fast(frame: Frame, instr: Step) -> None:
    frame.locals.pop(instr.arg, None)


@handler("LOAD_GLOBAL")
def load_global(frame: Frame, instr: Step) -> None:
    push_null_first, name = instr.arg
    if push_null_first:
        frame.push(NULL)
    frame.push(frame.load_global(name))


@handler("MAKE_CELL")
def make_cell(frame: Frame, instr: Step) -> None:
    name = instr.arg.name
    cell = frame.cells[name]
    if name in frame.locals or name in frame.pending_arguments:
        cell.contents = frame.load_local(name)
        frame.locals.pop(name, None)


@handler("COPY_FREE_VARS")
def copy_free_vars(frame: Frame, instr: Step) -> None:
    pass  # the closure's cells were installed when the frame was made


@handler("LOAD_CLOSURE")
def load_closure(frame: Frame, instr: Step) -> None:
    frame.push(frame.cells[instr.arg.name])


@handler("LOAD_DEREF")
def load_deref(frame: Frame, instr: Step) -> None:
    name = instr.arg.name
    frame.push(frame.cells[name].load(frame, name))


@handler("STORE_DEREF")
def store_deref(frame: Frame, instr: Step) -> None:
    frame.cells[instr.arg.name].store(frame.pop())


@handler("LOAD_ATTR", versions=PY311)
def load_attr_311(frame: Frame, instr: Step) -> None:
    owner = frame.pop()
    frame.push(owner.getattr(frame, instr.arg))


@handler("LOAD_METHOD", versions=PY311)
def load_method(frame: Frame, instr: Step) -> None:
    owner = frame.pop()
    frame.push(NULL)
    frame.push(owner.getattr(frame, instr.arg))


@handler("LOAD_ATTR", versions=PY312)
def load_attr_312(frame: Frame, instr: Step) -> None:
    is_method, name = instr.arg
    owner = frame.pop()
    if is_method:
        frame.push(NULL)
    frame.push(owner.getattr(frame, name))


@handler("LOAD_SUPER_ATTR", versions=PY312)
def load_super_attr(frame: Frame, instr: Step) -> None:
    """`super().name` (3.12): the stack holds the global `super`, the class and `self`."""
    from ember.capture.variables.superclass import SuperVariable

    is_method, _, name = instr.arg
    receiver = frame.pop()
    cls = frame.pop().constant()
    frame.pop()  # the builtin super itself
    if is_method:
        frame.push(NULL)
    frame.push(SuperVariable(cls, receiver).getattr(frame, name))


@handler("IMPORT_NAME")
def import_name(frame: Frame, instr: Step) -> None:
    """`import a.b` of a module already imported (no import side effects to model)."""
    import sys

    from ember.capture.unsupported import Unsupported
    from ember.capture.variables.torch import PythonModuleVariable

    fromlist = frame.pop().constant()
    level = frame.pop().constant()
    name = instr.arg
    if level != 0 or name not in sys.modules:
        raise Unsupported.of("import", construct=f"importing {name}")
    target = name if fromlist else name.split(".")[0]
    frame.push(PythonModuleVariable(sys.modules[target], None))


@handler("IMPORT_FROM")
def import_from(frame: Frame, instr: Step) -> None:
    frame.push(frame.top().getattr(frame, instr.arg))


@handler("STORE_GLOBAL")
def store_global(frame: Frame, instr: Step) -> None:
    frame.session.side_effects.store_global(frame.globals, instr.arg, frame.pop())


@handler("STORE_ATTR")
def store_attr(frame: Frame, instr: Step) -> None:
    owner = frame.pop()
    value = frame.pop()
    owner.setattr(frame, instr.arg, value)


@handler("DELETE_ATTR")
def delete_attr(frame: Frame, instr: Step) -> None:
    """`del obj.name` on an object made or copied while capturing; others break."""
    from ember.capture.unsupported import Unsupported

    owner = frame.pop()
    remove = getattr(owner, "delattr", None)
    if remove is None:
        raise Unsupported(f"deleting the attribute {instr.arg!r} of {owner.describe()}")
    remove(instr.arg)
