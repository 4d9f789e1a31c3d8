"""Where a graph can break: the instructions the generated entry function can run in plain
Python once the graph before them has run, with how many stack items each uses and leaves.

A branch on a tensor (`if x.sum() > 0:`) breaks at its jump: the entry function evaluates
the condition for real and calls one of two resume functions.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from bytecode import Bytecode, Instr, Label, TryBegin, TryEnd

from ember.capture.bytecode.frame import Step, label_indexes
from ember.capture.guards.source import call_instructions
from ember.capture.variables.base import NULL, Variable

PY312 = sys.version_info >= (3, 12)

# opcode -> (items used, items left) given its argument.
Effect = Callable[[Any], tuple[int, int]]

STACK_EFFECTS: dict[str, Effect] = {
    "CALL": lambda n: (n + 2, 1),
    "BINARY_OP": lambda _: (2, 1),
    "COMPARE_OP": lambda _: (2, 1),
    "CONTAINS_OP": lambda _: (2, 1),
    "IS_OP": lambda _: (2, 1),
    "BINARY_SUBSCR": lambda _: (2, 1),
    "BINARY_SLICE": lambda _: (3, 1),
    "STORE_SUBSCR": lambda _: (3, 0),
    "STORE_SLICE": lambda _: (4, 0),
    "DELETE_SUBSCR": lambda _: (2, 0),
    "STORE_ATTR": lambda _: (2, 0),
    "DELETE_ATTR": lambda _: (1, 0),
    "UNARY_NEGATIVE": lambda _: (1, 1),
    "UNARY_POSITIVE": lambda _: (1, 1),
    "UNARY_INVERT": lambda _: (1, 1),
    "UNARY_NOT": lambda _: (1, 1),
    "GET_ITER": lambda _: (1, 1),
    "UNPACK_SEQUENCE": lambda n: (1, n),
    "UNPACK_EX": lambda n: (1, (n & 0xFF) + (n >> 8) + 1),
    "FORMAT_VALUE": lambda flags: (2 if flags & 0x04 else 1, 1),
    "BUILD_STRING": lambda n: (n, 1),
    "BUILD_TUPLE": lambda n: (n, 1),
    "BUILD_LIST": lambda n: (n, 1),
    "BUILD_SET": lambda n: (n, 1),
    "BUILD_MAP": lambda n: (2 * n, 1),
    "BUILD_CONST_KEY_MAP": lambda n: (n + 1, 1),
    "IMPORT_NAME": lambda _: (2, 1),
    "IMPORT_FROM": lambda _: (1, 2),
    "STORE_GLOBAL": lambda _: (1, 0),
    "DELETE_GLOBAL": lambda _: (0, 0),
    "LOAD_ASSERTION_ERROR": lambda _: (0, 1),
    "RAISE_VARARGS": lambda n: (n, 0),
    "CALL_INTRINSIC_1": lambda _: (1, 1),
    "BEFORE_WITH": lambda _: (1, 2),
    "LIST_TO_TUPLE": lambda _: (1, 1),
}

# Jumps on a condition: the opcode the entry function uses to jump forward on the same test.
BRANCHES: dict[str, str] = {}
for _name in ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_IF_TRUE"):
    BRANCHES[_name] = "POP_JUMP_IF_TRUE" if PY312 else "POP_JUMP_FORWARD_IF_TRUE"
for _name in ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE"):
    BRANCHES[_name] = "POP_JUMP_IF_FALSE" if PY312 else "POP_JUMP_FORWARD_IF_FALSE"


def is_method_load(step: Step) -> bool:
    """LOAD_METHOD (3.11) or LOAD_ATTR's method form (3.12): they leave NULL, attribute; the
    entry function runs a plain LOAD_ATTR and the resume function pushes the NULL."""
    return step.name == "LOAD_METHOD" or (step.name == "LOAD_ATTR" and PY312 and step.arg[0])


def stack_effect(step: Step, stack: list[Variable]) -> tuple[int, int] | None:
    """(used, left) for an instruction a break can run in plain Python, else None."""
    if step.name in ("LOAD_ATTR", "LOAD_METHOD"):
        return (1, 1)
    if step.name == "CALL_FUNCTION_EX":
        used = 3 if step.arg & 0x01 else 2
        below = len(stack) - used - 1
        return (used + 1 if below >= 0 and stack[below] is NULL else used, 1)
    effect = STACK_EFFECTS.get(step.name)
    return None if effect is None else effect(step.arg)


def instructions(step: Step, kw_names: tuple[str, ...], line: int) -> list[Instr]:
    """The instruction as the entry function runs it (3.11 calls come with PRECALL)."""
    if step.name == "CALL":
        calls = call_instructions(step.arg)
        head = [Instr("KW_NAMES", kw_names)] if kw_names else []  # type: ignore[arg-type]
        return [*head, *calls]
    if step.name == "LOAD_ATTR" and PY312:
        return [Instr("LOAD_ATTR", (False, step.arg[1]), lineno=line)]
    if step.name == "LOAD_METHOD":
        return [Instr("LOAD_ATTR", step.arg, lineno=line)]
    return (
        [Instr(step.name, step.arg, lineno=line)]
        if step.arg is not None
        else [Instr(step.name, lineno=line)]
    )


def callable_index(step: Step, stack: list[Variable]) -> int | None:
    """The stack index of the callable a CALL calls (NULL-or-callable convention)."""
    if step.name == "CALL":
        below = len(stack) - step.arg - 2
        return below if stack[below] is not NULL else below + 1
    if step.name == "CALL_FUNCTION_EX":
        return len(stack) - (3 if step.arg & 0x01 else 2)
    return None


@dataclass(frozen=True)
class Handler:
    """A user's exception handler covering instructions `start`..`end` (indexes): where it
    starts, the stack depth it keeps, and whether it expects the raising offset too."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


@lru_cache(maxsize=256)
def _user_handlers(code: types.CodeType) -> list[Handler]:
    """Exception handlers (a try's, a `with` block's cleanup) by the range they cover, in
    the instruction indexes of `decode` (both read the code with `bytecode`)."""
    items = list(Bytecode.from_code(code, conserve_exception_block_stackdepth=True))
    labels = label_indexes(items)
    handlers: list[Handler] = []
    open_entries: dict[int, tuple[TryBegin, int]] = {}
    count = 0
    for item in items:
        if isinstance(item, TryBegin):
            open_entries[id(item)] = (item, count)
        elif isinstance(item, TryEnd):
            begin, first = open_entries.pop(id(item.entry), (item.entry, count))
            depth = begin.stack_depth
            if isinstance(begin.target, Label) and isinstance(depth, int) and count > first:
                target = labels[begin.target]
                handlers.append(Handler(first, count - 1, target, depth, begin.push_lasti))
        elif isinstance(item, Instr):
            count += 1
    return handlers


def user_handler(code: types.CodeType, index: int) -> Handler | None:
    """The handler (try/except/finally, or a `with` block's cleanup) that instruction
    `index` runs under, if any: what the instruction raises must reach it."""
    for handler in _user_handlers(code):
        if handler.start <= index <= handler.end:
            return handler
    return None
