"""Code generation with `bytecode`: the functions that stand in for the user's function.

`dispatcher_function` has the user's signature and hands its arguments, as a dict, to the
guarded-cache dispatch. `entry_function` is built per cache entry: it takes the arguments and
the Graph's inputs (read by the guard check on its way, see guards/check.py), calls the
compiled Graph (held as a code constant, never written into the user's globals) and rebuilds
the output structure.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bytecode import BinaryOp, Bytecode, CompilerFlags, Instr, Label, TryBegin, TryEnd

from ember.capture.guards.source import Source, call_instructions, load_const

OUTPUTS = "__ember_outputs"
INPUTS = "__ember_inputs"


@dataclass(frozen=True)
class OutputPlan:
    """How to rebuild one value: `kind` is graph/source/constant/tuple/list/dict/namedtuple/
    structseq/construct/call/null/store/temp; `value` is the graph output index, source,
    constant, keys/class, callable or temporary name."""

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


@dataclass
class SideEffectPlan:
    """One replayed write: `attr` (target.name = value), `global` (table[name] = value) or
    `call` (value is a call plan whose result is dropped)."""

    kind: str
    value: OutputPlan
    target: Any = None
    name: str = ""


@dataclass
class Continuation:
    """What the entry function does after the graph when capture broke the graph: rebuild the
    stack and locals, run the instruction capture could not model, and call the resume
    function (or one of two, for a branch on a tensor) with the stack and locals."""

    grad_mode: bool
    stack: list[OutputPlan]  # the whole stack at the break, bottom first
    consumed: int  # how many of the top items the instruction uses
    instructions: list[Instr]  # the instruction, as the user's code has it
    produced: int  # how many items it leaves on the stack
    locals: list[OutputPlan]
    resume: Callable[..., Any] | None = None
    # A branch: (the jump's opcode name, resume at its target, resume after it).
    branch: tuple[str, Callable[..., Any], Callable[..., Any]] | None = None
    # Under a user's try: (resume at the handler, the stack depth it keeps); the entry
    # function runs the instruction under a try of its own that hands the exception on.
    # `lasti`: the handler also expects an instruction offset (a `with` block's cleanup);
    # it gets 0, which only affects the line a re-raised traceback shows.
    catch: tuple[Callable[..., Any], int, bool] | None = None


def entry_function(
    compiled: Callable[..., Any] | None,
    inputs: list[Source],
    output: OutputPlan | None,
    globals_dict: dict[str, Any],
    name: str,
    effects: list[SideEffectPlan] | None = None,
    continuation: Continuation | None = None,
    prologue: list[SideEffectPlan] | None = None,
    read_inputs: bool = False,
) -> types.FunctionType:
    """`def entry(L, I): outs = compiled(*I); <effects>; return <output rebuilt>`, or, after
    a break, `...; <instruction>; return resume(*<stack>, *<locals>)`. `I` holds the values
    of `inputs`, which the guard check has read; with `read_inputs` the entry reads them
    itself (after its prologue) and ignores `I`."""
    load_locals = [Instr("LOAD_FAST", "L")]
    stored: set[str] = set()  # shared temporaries built so far, in emission order
    body: list[Instr | Label | TryBegin | TryEnd] = [Instr("RESUME", 0)]
    for step in prologue or ():
        body += _emit_effect(step, load_locals, globals_dict, stored)
    if compiled is not None:
        body += [Instr("PUSH_NULL"), load_const(compiled)]
        if read_inputs:
            body += _emit_inputs(inputs, load_locals, globals_dict)
            body += call_instructions(len(inputs))
        else:
            body += [Instr("LOAD_FAST", INPUTS), Instr("CALL_FUNCTION_EX", 0)]
        body.append(Instr("STORE_FAST", OUTPUTS))

    # Values are rebuilt before the side effects replay: a source read afterwards could see
    # a list the replay has just rewritten.
    # Emitted in the order the instructions run, so a shared value is built at its first use.
    def replay() -> list[Instr]:
        code: list[Instr] = []
        for effect in effects or ():
            code += _emit_effect(effect, load_locals, globals_dict, stored)
        return code

    if continuation is not None:
        body += _emit_continuation(continuation, load_locals, globals_dict, replay, stored)
    else:
        assert output is not None
        body += _emit_output(output, load_locals, globals_dict, stored)
        body += [Instr("STORE_FAST", RESULT), *replay(), Instr("LOAD_FAST", RESULT)]
        body.append(Instr("RETURN_VALUE"))
    bytecode = Bytecode(body)
    bytecode.argnames = ["L", INPUTS]
    bytecode.argcount = 2
    bytecode.flags = CompilerFlags.OPTIMIZED | CompilerFlags.NEWLOCALS
    bytecode.name = name
    bytecode.filename = "<ember generated>"
    # A break runs user instructions (LOAD_GLOBAL, IMPORT_NAME...) that need its globals.
    namespace = globals_dict if continuation is not None else {}
    return types.FunctionType(bytecode.to_code(), namespace, name)


@dataclass(frozen=True)
class _StoredSource(Source):
    """A value the entry function has read once and keeps in a local."""

    local: str

    def name(self) -> str:
        return self.local

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        return [Instr("LOAD_FAST", self.local)]


def _emit_inputs(
    inputs: list[Source], load_locals: list[Instr], globals_dict: dict[str, Any]
) -> list[Instr]:
    """Push the Graph's inputs, reading a prefix that several share once: a model's 169
    parameters walk `self.transformer.h[0].attn` once, as the guard check does, not once per
    parameter from the root (~0.6 us a parameter on GPT-2 small). Every input is read, in
    order, so a prefix stored at its first use is there for the later ones."""
    uses: Counter[Source] = Counter()
    for source in inputs:
        for prefix in _chain(source):
            try:
                uses[prefix] += 1
            except TypeError:  # an unhashable index: never shared
                continue
    stored: dict[Source, Source] = {}

    def rebased(source: Source) -> Source:
        """`source` reading its longest stored prefix from its local."""
        try:
            known = stored.get(source)
        except TypeError:
            known = None
        if known is not None:
            return known
        base: Source | None = getattr(source, "base", None)
        if base is None:
            return source
        new_base = rebased(base)
        if new_base is base:
            return source
        return dataclasses.replace(source, base=new_base)  # type: ignore[type-var]

    code: list[Instr] = []
    for source in inputs:
        for prefix in reversed(_chain(source)):  # the root first
            try:
                shared = uses[prefix] > 1 and prefix not in stored
            except TypeError:
                break
            if shared:
                name = f"__ember_src{len(stored)}"
                code += [
                    *rebased(prefix).emit(load_locals, globals_dict),
                    Instr("STORE_FAST", name),
                ]
                stored[prefix] = _StoredSource(name)
        code += rebased(source).emit(load_locals, globals_dict)
    return code


def _chain(source: Source) -> list[Source]:
    """`source` and its bases, `source` first."""
    chain = [source]
    base: Source | None = getattr(source, "base", None)
    while base is not None:
        chain.append(base)
        base = getattr(base, "base", None)
    return chain


def _emit_effect(
    effect: SideEffectPlan,
    load_locals: list[Instr],
    globals_dict: dict[str, Any],
    stored: set[str],
) -> list[Instr]:
    value = _emit_output(effect.value, load_locals, globals_dict, stored)
    if effect.kind == "attr":
        target = _emit_output(effect.target, load_locals, globals_dict, stored)
        return [*value, *target, Instr("STORE_ATTR", effect.name)]
    if effect.kind == "global":
        return [
            *value,
            load_const(effect.target),
            Instr("LOAD_CONST", effect.name),
            Instr("STORE_SUBSCR"),
        ]
    return [*value, Instr("POP_TOP")]


def _emit_continuation(
    plan: Continuation,
    load_locals: list[Instr],
    globals_dict: dict[str, Any],
    replay: Callable[[], list[Instr]],
    stored: set[str],
) -> list[Instr | Label | TryBegin | TryEnd]:
    import torch

    out: list[Instr | Label | TryBegin | TryEnd] = [
        Instr("PUSH_NULL"),
        load_const(torch.set_grad_enabled),
        load_const(plan.grad_mode),
        *call_instructions(1),
        Instr("POP_TOP"),
    ]
    split = len(plan.stack) - plan.consumed
    kept: list[str] = []
    kept_positions: list[int] = []
    for index, item in enumerate(plan.stack[:split]):
        if item.kind == "null":
            continue
        out += _emit_output(item, load_locals, globals_dict, stored)
        kept.append(f"__ember_stack{index}")
        kept_positions.append(index)
        out.append(Instr("STORE_FAST", kept[-1]))
    local_names = []
    for index, item in enumerate(plan.locals):
        out += _emit_output(item, load_locals, globals_dict, stored)
        local_names.append(f"__ember_local{index}")
        out.append(Instr("STORE_FAST", local_names[-1]))
    out += replay()  # the side effects happen before the instruction
    try_begin = TryBegin(Label(), False) if plan.catch is not None else None
    if try_begin is not None:
        out.append(try_begin)
    for item in plan.stack[split:]:
        out += _emit_output(item, load_locals, globals_dict, stored)

    def resume_call(resume: Callable[..., Any], produced: bool) -> list[Instr]:
        code = [Instr("PUSH_NULL"), load_const(resume)]
        code += [Instr("LOAD_FAST", n) for n in local_names]
        code += [Instr("BUILD_TUPLE", len(local_names))]
        code += [Instr("LOAD_FAST", n) for n in kept]
        code += [Instr("BUILD_TUPLE", len(kept)), Instr("BINARY_OP", BinaryOp.ADD)]
        if produced:
            code += [Instr("LOAD_FAST", PRODUCED), Instr("BINARY_OP", BinaryOp.ADD)]
        return [*code, Instr("CALL_FUNCTION_EX", 0), Instr("RETURN_VALUE")]

    if plan.branch is not None:
        jump_name, at_target, at_next = plan.branch
        target = Label()
        out += [Instr(jump_name, target), *resume_call(at_next, False), target]
        out += resume_call(at_target, False)
        return out
    out += plan.instructions
    if try_begin is not None:
        out.append(TryEnd(try_begin))
    if plan.resume is None:  # the instruction raised or returned
        out += [load_const(None), Instr("RETURN_VALUE")]
    else:
        out += [Instr("BUILD_TUPLE", plan.produced), Instr("STORE_FAST", PRODUCED)]
        out += resume_call(plan.resume, True)
    if plan.catch is not None and try_begin is not None:
        at_handler, depth, lasti = plan.catch
        below = [name for name, index in zip(kept, kept_positions) if index < depth]
        offset = [load_const(0)] if lasti else []
        assert isinstance(try_begin.target, Label)
        out += [
            try_begin.target,
            Instr("STORE_FAST", CAUGHT),
            Instr("PUSH_NULL"),
            load_const(at_handler),
            *[Instr("LOAD_FAST", n) for n in local_names],
            Instr("BUILD_TUPLE", len(local_names)),
            *[Instr("LOAD_FAST", n) for n in below],
            *offset,
            Instr("LOAD_FAST", CAUGHT),
            Instr("BUILD_TUPLE", len(below) + len(offset) + 1),
            Instr("BINARY_OP", BinaryOp.ADD),
            Instr("CALL_FUNCTION_EX", 0),
            Instr("RETURN_VALUE"),
        ]
    return out


PRODUCED = "__ember_produced"
RESULT = "__ember_result"
CAUGHT = "__ember_caught"


def _emit_output(
    plan: OutputPlan, load_locals: list[Instr], globals_dict: dict[str, Any], stored: set[str]
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
    if plan.kind == "null":
        return [Instr("PUSH_NULL")]
    if plan.kind in ("temp", "store"):
        # A shared value is built where the generated code first needs it, which need not be
        # where it was first planned (side effects are planned before the return value but
        # replayed after it); later uses load the temporary.
        if plan.value in stored or not plan.children:
            return [Instr("LOAD_FAST", plan.value)]
        stored.add(plan.value)
        inner = _emit_output(plan.children[0], load_locals, globals_dict, stored)
        return [*inner, Instr("COPY", 1), Instr("STORE_FAST", plan.value)]
    children = [
        i for child in plan.children for i in _emit_output(child, load_locals, globals_dict, stored)
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
    if plan.kind == "call":  # value(*children)
        return [
            Instr("PUSH_NULL"),
            load_const(plan.value),
            *children,
            *call_instructions(len(plan.children)),
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
