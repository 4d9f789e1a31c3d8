"""Resume functions: the rest of a function after a graph break, as a function of its own.

`resume_function` copies the original code object and puts a prologue in front that pushes
the stack the break left (its items arrive as arguments; NULLs are pushed back) and jumps
to the instruction after the break. Locals arrive as arguments under their own names, so
the rest of the code reads them unchanged; every copied instruction keeps the user's line
number, and the function is named `resume_in_<fn>_at_<line>`. It is compiled like any other.
"""

from __future__ import annotations

import types

from bytecode import Bytecode, CellVar, CompilerFlags, Instr, Label

STACK_PREFIX = "___stack"


def resume_function(
    fn: types.FunctionType,
    target: int,
    stack_nulls: list[bool],
    local_names: list[str],
    line: int,
) -> types.FunctionType:
    """`fn`'s code from instruction index `target` on, given the stack (True marks a NULL
    slot) and the locals, which become the parameters (locals first, then the stack)."""
    code = fn.__code__
    # The try regions keep the original's handler stack depths: the prologue jumps into the
    # middle of a region, past where bytecode would otherwise compute them.
    original = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    start = Label()
    items: list[object] = []
    count = 0
    for item in original:
        if isinstance(item, Instr):
            if count == target:
                items.append(start)
            count += 1
        items.append(item)
    stack_names = [f"{STACK_PREFIX}{i}" for i, null in enumerate(stack_nulls) if not null]
    prologue: list[Instr] = []
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars), lineno=line))
    prologue += [Instr("MAKE_CELL", CellVar(name), lineno=line) for name in code.co_cellvars]
    prologue.append(Instr("RESUME", 0, lineno=line))
    names = iter(stack_names)
    for null in stack_nulls:
        prologue.append(
            Instr("PUSH_NULL", lineno=line)
            if null
            else Instr("LOAD_FAST", next(names), lineno=line)
        )
    prologue.append(Instr("JUMP_FORWARD", start, lineno=line))
    kept = [
        item
        for item in items
        if not (isinstance(item, Instr) and item.name in ("MAKE_CELL", "COPY_FREE_VARS"))
    ]
    bytecode = Bytecode([*prologue, *kept])  # type: ignore[list-item]
    # Locals come first: zero-argument super() reads the first parameter (`self`).
    bytecode.argnames = [*local_names, *stack_names]
    bytecode.argcount = len(bytecode.argnames)
    bytecode.posonlyargcount = 0
    bytecode.kwonlyargcount = 0
    bytecode.cellvars = list(original.cellvars)
    bytecode.freevars = list(original.freevars)
    flags = CompilerFlags.OPTIMIZED | CompilerFlags.NEWLOCALS
    if code.co_freevars:
        flags |= CompilerFlags.NESTED
    bytecode.flags = flags
    name = f"resume_in_{code.co_name if code.co_name.isidentifier() else 'lambda'}_at_{line}"
    bytecode.name = name
    bytecode.qualname = name
    bytecode.filename = code.co_filename
    bytecode.first_lineno = code.co_firstlineno
    bytecode.docstring = None
    # The prologue pushes no more than the original held at the target; handlers reached
    # only through exceptions need the original's stack size too.
    resumed_code = bytecode.to_code(
        stacksize=code.co_stacksize + 1, compute_exception_stack_depths=False
    )
    resumed = types.FunctionType(resumed_code, fn.__globals__, name, None, fn.__closure__)
    resumed.__qualname__ = (
        f"{fn.__qualname__.rsplit('.', 1)[0]}.{name}" if "." in fn.__qualname__ else name
    )
    return resumed
