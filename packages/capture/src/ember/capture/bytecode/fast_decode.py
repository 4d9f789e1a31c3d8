"""A direct decoder of CPython 3.11 code objects into `Step`s, 4-5x faster than `bytecode`'s.

`frame.decode` builds the instruction list of every code object capture interprets; with the
`bytecode` library (`Bytecode.from_code`: concrete instructions, then labels, try blocks and
argument objects) that was about 45% of a warm GPT-2 capture on the CPU. This reads
`co_code` once and gives each argument exactly as `bytecode` 0.19's `to_bytecode` would
(`bytecode`'s own opcode tables and argument types: `CellVar`, `FreeVar`, `Compare`,
`BinaryOp`, `(push_null, name)` pairs), jump targets as instruction indexes, line numbers
from `co_positions`. Only 3.11's layout (relative jumps from the next unit, no caches
counted) is read here; `steps` answers None elsewhere and the caller uses `bytecode`.
`tests/bytecode/test_fast_decode.py` checks equal results over thousands of code objects.
"""

from __future__ import annotations

import dis
import opcode
import sys
import types
from typing import Any

from bytecode import BinaryOp, CellVar, Compare, FreeVar
from bytecode import instr as bytecode_instr

SUPPORTED = sys.version_info[:2] == (3, 11)

_CACHES: list[int] = list(getattr(dis, "_inline_cache_entries", ()))
_EXTENDED_ARG = opcode.opmap["EXTENDED_ARG"]
_HAVE_ARGUMENT = opcode.HAVE_ARGUMENT
_RELATIVE = frozenset(opcode.hasjrel)
_ABSOLUTE = frozenset(opcode.hasjabs)
_BACKWARD = frozenset(op for op, name in enumerate(opcode.opname) if "JUMP_BACKWARD" in name)
_CONST = frozenset(opcode.hasconst)
_LOCAL = frozenset(opcode.haslocal)
_NAME = frozenset(opcode.hasname)
_FREE = frozenset(opcode.hasfree)
_COMPARE = frozenset(opcode.hascompare)
_FLAG = frozenset(bytecode_instr.BITFLAG_OPCODES)
_FLAG2 = frozenset(bytecode_instr.BITFLAG2_OPCODES)
_BINARY = frozenset(bytecode_instr.BINARY_OPS)
_UNSET = bytecode_instr.UNSET


def steps(code: types.CodeType) -> list[tuple[str, Any, int | None]] | None:
    """(name, argument, line) per real instruction of `code`, as `frame.decode` makes them
    from `bytecode`; None where this Python's layout is not 3.11's."""
    if not SUPPORTED or not _CACHES:
        return None
    raw = code.co_code
    lines = [position[0] for position in code.co_positions()]  # one per code unit
    found: list[tuple[int, int, int | None]] = []  # (byte offset, opcode, full argument)
    index_at: dict[int, int] = {}  # byte offset (of it or its EXTENDED_ARGs) -> index
    extended, start, caches = 0, -1, 0
    for offset in range(0, len(raw), 2):
        if caches:  # inline cache units of the instruction before
            caches -= 1
            continue
        op = raw[offset]
        caches = _CACHES[op]
        if op == _EXTENDED_ARG:
            extended = (raw[offset + 1] | extended) << 8
            start = offset if start < 0 else start
            continue
        index_at[offset] = index_at[start if start >= 0 else offset] = len(found)
        found.append((offset, op, raw[offset + 1] | extended if op >= _HAVE_ARGUMENT else None))
        extended, start = 0, -1
    varnames, names, consts, freevars = code.co_varnames, code.co_names, code.co_consts, code.co_freevars  # fmt: skip
    cells: list[Any] = [*varnames, *(CellVar(n) for n in code.co_cellvars if n not in varnames)]
    result: list[tuple[str, Any, int | None]] = []
    for offset, op, value in found:
        arg: Any
        if value is None:
            arg = _UNSET
        elif op in _RELATIVE:
            arg = index_at[offset + 2 + (-value if op in _BACKWARD else value) * 2]
        elif op in _ABSOLUTE:
            arg = index_at[value * 2]
        elif op in _CONST:
            arg = consts[value]
        elif op in _LOCAL:
            arg = varnames[value]
        elif op in _NAME:
            if op in _FLAG:
                arg = (bool(value & 1), names[value >> 1])
            elif op in _FLAG2:
                arg = (bool(value & 1), bool(value & 2), names[value >> 2])
            else:
                arg = names[value]
        elif op in _FREE:
            if value < len(cells):
                cell = cells[value]
                arg = cell if isinstance(cell, CellVar) else CellVar(cell)
            else:
                arg = FreeVar(freevars[value - len(cells)])
        elif op in _COMPARE:
            arg = Compare(value)
        elif op in _BINARY:
            arg = BinaryOp(value)
        else:
            arg = value
        result.append((opcode.opname[op], arg, lines[offset // 2]))
    return result
