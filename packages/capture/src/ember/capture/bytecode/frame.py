"""The symbolic frame: interprets one code object's bytecode over Variables.

A Frame holds the value stack, the locals and cells, and the instruction pointer; each
instruction is dispatched to its handler in the opcode table. Calls into user functions
create a child Frame (inlining); the root Frame is the compiled function itself.
"""

from __future__ import annotations

import inspect
import linecache
import types
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from bytecode import Bytecode, Instr, Label

from ember.capture.bytecode import fast_decode
from ember.capture.bytecode.registry import handler_for
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import NULL, Variable
from ember.capture.variables.containers import DictVariable, IteratorVariable, TupleVariable
from ember.capture.variables.functions import CellVariable, FunctionVariable
from ember.prims import SourceLocation

if TYPE_CHECKING:
    from ember.capture.session import CaptureSession

MAX_INLINE_DEPTH = 64
_GENERATOR_FLAGS = inspect.CO_GENERATOR
_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


class Step(NamedTuple):
    """One decoded instruction. Jump targets are instruction indexes."""

    name: str
    arg: Any  # its type depends on the opcode (a name, a count, an enum...): handlers know it
    lineno: int | None


def label_indexes(items: list[Any]) -> dict[Label, int]:
    """Each label of a `bytecode` instruction list, as the index of the instruction after it
    (counting real instructions only, as `decode` numbers them)."""
    labels: dict[Label, int] = {}
    count = 0
    for item in items:
        if isinstance(item, Label):
            labels[item] = count
        elif isinstance(item, Instr):
            count += 1
    return labels


@lru_cache(maxsize=512)
def decode(code: types.CodeType) -> list[Step]:
    """The instructions of `code`, pseudo-instructions dropped, labels resolved to indexes."""
    fast = fast_decode.steps(code)  # the same Steps, read directly on 3.11
    if fast is not None:
        return [Step(*step) for step in fast]
    items = list(Bytecode.from_code(code))
    labels = label_indexes(items)
    steps: list[Step] = []
    for item in items:
        if isinstance(item, Instr):
            arg = labels[item.arg] if isinstance(item.arg, Label) else item.arg
            steps.append(Step(item.name, arg, item.lineno))
    return steps


class Frame:
    """One code object being interpreted."""

    def __init__(
        self,
        session: CaptureSession,
        code: types.CodeType,
        globals_dict: dict[str, Any],
        local_values: dict[str, Variable],
        closure: list[CellVariable],
        parent: Frame | None = None,
        root_arguments: dict[str, Any] | None = None,
    ) -> None:
        self.session = session
        self.code = code
        self.globals = globals_dict
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.instructions = decode(code)
        self.stack: list[Variable] = []
        self.locals: dict[str, Variable] = dict(local_values)
        # The root frame wraps its arguments lazily, on first read, so guards say where.
        self.pending_arguments: dict[str, Any] = dict(root_arguments or {})
        self.cells: dict[str, CellVariable] = {name: CellVariable() for name in code.co_cellvars}
        self.cells.update(zip(code.co_freevars, closure))
        self.kw_names: tuple[str, ...] = ()
        self.pc = 0
        self.lineno = code.co_firstlineno
        self._location: SourceLocation | None = None
        self.returned: Variable | None = None
        self.yielded: list[Variable] | None = [] if code.co_flags & _GENERATOR_FLAGS else None
        # The root frame stops before this instruction, on its `break_visit`-th execution
        # (loops run one instruction many times): a graph break goes there.
        self.break_pc: int | None = None
        self.break_visit = 0
        self.visits: dict[int, int] = {}
        self.stopped = False

    # ---- running -------------------------------------------------------------------------

    def run(self) -> Variable:
        """Interpret until RETURN_VALUE; a generator returns an iterator of what it yielded."""
        if self.code.co_flags & _ASYNC_FLAGS:
            raise Unsupported("async functions and coroutines", location=self.location())
        instructions = self.instructions
        while self.returned is None:
            instr = instructions[self.pc]
            if instr.lineno is not None and instr.lineno != self.lineno:
                self.lineno = instr.lineno
            self.session.location = self.location()
            if self.parent is None:
                visit = self.visits[self.pc] = self.visits.get(self.pc, 0) + 1
                if self.pc == self.break_pc and visit == self.break_visit:
                    self.stopped = True
                    return NULL
            self.pc += 1
            try:
                handler_for(instr.name)(self, instr)
                self.session.label_size_guards()
            except Unsupported as error:
                if self.parent is None and error.root_pc is None:
                    error.root_pc = self.pc - 1
                    error.root_visit = self.visits[self.pc - 1]
                raise error.at(self.location()) from None
        if self.yielded is not None:
            return IteratorVariable(self.yielded)
        return self.returned

    def location(self) -> SourceLocation:
        """Where the frame is (the source line's text read once per line: `run` asks on
        every instruction)."""
        if self._location is None or self._location.line != self.lineno:
            code = self.code
            text = linecache.getline(code.co_filename, self.lineno).strip()
            self._location = SourceLocation(code.co_filename, self.lineno, code.co_name, text)
        return self._location

    def jump(self, target: int) -> None:
        self.pc = target

    # ---- stack ---------------------------------------------------------------------------

    def push(self, value: Variable) -> None:
        self.stack.append(value)

    def pop(self) -> Variable:
        return self.stack.pop()

    def popn(self, count: int) -> list[Variable]:
        if count == 0:
            return []
        values = self.stack[-count:]
        del self.stack[-count:]
        return values

    def top(self) -> Variable:
        return self.stack[-1]

    # ---- names ---------------------------------------------------------------------------

    def load_local(self, name: str) -> Variable:
        value = self.locals.get(name)
        if value is None and name in self.pending_arguments:
            from ember.capture.guards.source import LocalSource
            from ember.capture.variables.builder import wrap

            value = wrap(self, self.pending_arguments.pop(name), LocalSource(name))
            self.locals[name] = value
        if value is None:
            raise Unsupported(f"reading the unbound local variable {name!r} (UnboundLocalError)")
        return value

    def store_local(self, name: str, value: Variable) -> None:
        self.pending_arguments.pop(name, None)
        self.locals[name] = value

    def load_global(self, name: str) -> Variable:
        from ember.capture.guards.source import GlobalSource
        from ember.capture.variables.builder import wrap, wrap_result

        written = self.session.side_effects.load_global(self.globals, name)
        if written is not None:
            return written
        if name in self.globals:
            module = "" if self.globals is self.session.globals else self.globals.get("__name__")
            if module is None:
                return wrap_result(self, self.globals[name])
            return wrap(self, self.globals[name], GlobalSource(name, module))
        builtins_table = self.globals.get("__builtins__", __builtins__)
        if isinstance(builtins_table, types.ModuleType):
            builtins_table = vars(builtins_table)
        if name not in builtins_table:
            raise Unsupported(f"reading the undefined name {name!r} (NameError)")
        return wrap_result(self, builtins_table[name])

    # ---- calls ---------------------------------------------------------------------------

    def call(self, fn: Variable, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        return fn.call(self, args, kwargs)

    def inline(
        self, fn: FunctionVariable, args: list[Variable], kwargs: dict[str, Variable]
    ) -> Variable:
        """Call a user function by interpreting its bytecode in a child frame."""
        if self.depth >= MAX_INLINE_DEPTH:
            raise Unsupported("recursion deeper than ember.capture inlines (64 calls)")
        local_values = bind_arguments(fn, args, kwargs)
        child = Frame(self.session, fn.code, fn.globals, local_values, fn.closure, parent=self)
        result = child.run()
        self.session.location = self.location()
        return result


def bind_arguments(
    fn: FunctionVariable, args: list[Variable], kwargs: dict[str, Variable]
) -> dict[str, Variable]:
    """Match a call's arguments to the function's parameters, as CPython does."""
    code = fn.code
    names = code.co_varnames
    positional = names[: code.co_argcount]
    kwonly = names[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    index = code.co_argcount + code.co_kwonlyargcount
    star = names[index] if code.co_flags & inspect.CO_VARARGS else None
    index += 1 if star else 0
    starstar = names[index] if code.co_flags & inspect.CO_VARKEYWORDS else None
    bound: dict[str, Variable] = {}
    for name, value in zip(positional, args):
        bound[name] = value
    extra = args[len(positional) :]
    if extra and star is None:
        raise Unsupported(f"calling {fn.name} with too many positional arguments (TypeError)")
    if star is not None:
        bound[star] = TupleVariable(list(extra))
    rest: dict[str, Variable] = {}
    posonly = set(positional[: code.co_posonlyargcount])
    for key, value in kwargs.items():
        if key in bound and key not in posonly:
            raise Unsupported(f"calling {fn.name} with {key!r} twice (TypeError)")
        if (key in positional and key not in posonly) or key in kwonly:
            bound[key] = value
        elif starstar is not None:
            rest[key] = value
        else:
            raise Unsupported(f"calling {fn.name} with the unknown keyword {key!r} (TypeError)")
    defaults = fn.defaults
    first_default = len(positional) - len(defaults)
    for position, name in enumerate(positional):
        if name not in bound:
            if position < first_default:
                raise Unsupported(f"calling {fn.name} without argument {name!r} (TypeError)")
            bound[name] = defaults[position - first_default]
    for name in kwonly:
        if name not in bound:
            if name not in fn.kwdefaults:
                raise Unsupported(f"calling {fn.name} without argument {name!r} (TypeError)")
            bound[name] = fn.kwdefaults[name]
    if starstar is not None:
        bound[starstar] = DictVariable(rest)
    return bound
