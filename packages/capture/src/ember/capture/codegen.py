"""Code generation with `bytecode`: the functions that stand in for the user's function.

`dispatcher_function` has the user's signature and hands its arguments, as a dict, to the
guarded-cache dispatch. `entry_function` is built per cache entry: it reads the Graph's
inputs from their sources, calls the compiled Graph (held as a code constant, never written
into the user's globals) and rebuilds the output structure.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bytecode import Bytecode, CompilerFlags, Instr

from ember.capture.guards.source import Source, call_instructions, load_const

OUTPUTS = "__ember_outputs"


@dataclass(frozen=True)
class OutputPlan:
    """How to rebuild one piece of the output: `kind` is graph/source/constant/tuple/list/
    dict/namedtuple; `value` is the graph output index, source, constant, or keys/class."""

    kind: str
    value: Any = None
    children: tuple[OutputPlan, ...] = ()


def dispatcher_function(
    fn: types.FunctionType, dispatch: Callable[[dict[str, Any]], Any]
) -> types.FunctionType:
    """A function with `fn`'s signature whose body is `return dispatch({arg: value, ...})`."""
    code = fn.__code__
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    names = list(code.co_varnames[:count])
    body: list[Instr] = [Instr("RESUME", 0), Instr("PUSH_NULL"), load_const(dispatch)]
    for name in names:
        body += [Instr("LOAD_CONST", name), Instr("LOAD_FAST", name)]
    body += [Instr("BUILD_MAP", len(names)), *call_instructions(1), Instr("RETURN_VALUE")]
    bytecode = Bytecode(body)
    bytecode.argnames = names
    bytecode.argcount = code.co_argcount
    bytecode.posonlyargcount = code.co_posonlyargcount
    bytecode.kwonlyargcount = code.co_kwonlyargcount
    flags = CompilerFlags.OPTIMIZED | CompilerFlags.NEWLOCALS
    if code.co_flags & inspect.CO_VARARGS:
        flags |= CompilerFlags.VARARGS
    if code.co_flags & inspect.CO_VARKEYWORDS:
        flags |= CompilerFlags.VARKEYWORDS
    bytecode.flags = flags
    bytecode.name = code.co_name
    bytecode.qualname = code.co_qualname
    bytecode.filename = code.co_filename
    bytecode.first_lineno = code.co_firstlineno
    result = types.FunctionType(bytecode.to_code(), {}, code.co_name, fn.__defaults__)
    result.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    return result


def entry_function(
    compiled: Callable[..., Any] | None,
    inputs: list[Source],
    output: OutputPlan,
    globals_dict: dict[str, Any],
    name: str,
) -> types.FunctionType:
    """`def entry(L): outs = compiled(*<inputs>); return <output rebuilt>`."""
    load_locals = [Instr("LOAD_FAST", "L")]
    body: list[Instr] = [Instr("RESUME", 0)]
    if compiled is not None:
        body += [Instr("PUSH_NULL"), load_const(compiled)]
        for source in inputs:
            body += source.emit(load_locals, globals_dict)
        body += [*call_instructions(len(inputs)), Instr("STORE_FAST", OUTPUTS)]
    body += _emit_output(output, load_locals, globals_dict)
    body.append(Instr("RETURN_VALUE"))
    bytecode = Bytecode(body)
    bytecode.argnames = ["L"]
    bytecode.argcount = 1
    bytecode.flags = CompilerFlags.OPTIMIZED | CompilerFlags.NEWLOCALS
    bytecode.name = name
    bytecode.filename = "<ember generated>"
    return types.FunctionType(bytecode.to_code(), {}, name)


def _emit_output(
    plan: OutputPlan, load_locals: list[Instr], globals_dict: dict[str, Any]
) -> list[Instr]:
    if plan.kind == "graph":
        return [
            Instr("LOAD_FAST", OUTPUTS),
            load_const(plan.value),
            Instr("BINARY_SUBSCR"),
        ]
    if plan.kind == "source":
        return plan.value.emit(load_locals, globals_dict)
    if plan.kind == "constant":
        return [load_const(plan.value)]
    children = [
        i for child in plan.children for i in _emit_output(child, load_locals, globals_dict)
    ]
    if plan.kind == "tuple":
        return [*children, Instr("BUILD_TUPLE", len(plan.children))]
    if plan.kind == "list":
        return [*children, Instr("BUILD_LIST", len(plan.children))]
    if plan.kind == "dict":
        return [
            *children,
            Instr("LOAD_CONST", tuple(plan.value)),
            Instr("BUILD_CONST_KEY_MAP", len(plan.children)),
        ]
    if plan.kind == "namedtuple":
        count = len(plan.children)
        return [
            Instr("PUSH_NULL"),
            load_const(plan.value),
            *children,
            *call_instructions(count),
        ]
    if plan.kind == "structseq":
        return [
            Instr("PUSH_NULL"),
            load_const(plan.value),
            *children,
            Instr("BUILD_TUPLE", len(plan.children)),
            *call_instructions(1),
        ]
    if plan.kind == "construct":  # cls(**{field: value, ...})
        cls, names = plan.value
        return [
            Instr("PUSH_NULL"),
            load_const(cls),
            load_const(()),
            *children,
            Instr("LOAD_CONST", tuple(names)),
            Instr("BUILD_CONST_KEY_MAP", len(names)),
            Instr("CALL_FUNCTION_EX", 1),
        ]
    raise AssertionError(plan.kind)
