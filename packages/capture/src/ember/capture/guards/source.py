"""Sources: where a value of the captured frame comes from (`x`, `self.linear.weight`, `xs[0]`).

A source can be read three ways: as a Python expression over the frame's arguments `L` and
globals `G` (guard checks), as `bytecode` instructions (the generated entry function), and
as the name the user wrote (messages).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, cast

from bytecode import Instr


class Source:
    """Base class: a path from the frame's arguments or globals to a value."""

    def expr(self) -> str:
        """A Python expression over `L` (arguments) and `G` (globals)."""
        base: Source | None = getattr(self, "base", None)
        return self.expr_on(base.expr() if base is not None else "")

    def expr_on(self, base: str) -> str:
        """The expression, given one that reads its base source (ignored by roots): guard
        checks read a shared prefix (`self.layer1`) once for all the guards below it."""
        raise NotImplementedError

    def name(self) -> str:
        """The value as the user's code spells it."""
        raise NotImplementedError

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        """Instructions that push the value, given instructions that push `L`."""
        raise NotImplementedError

    def read(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> Any:
        namespace = {"L": arguments, "G": globals_dict, "sys": sys}
        return eval(self.expr(), namespace)  # noqa: S307

    def __str__(self) -> str:
        return self.name()


@dataclass(frozen=True)
class LocalSource(Source):
    """An argument of the compiled function."""

    local: str

    def expr_on(self, base: str) -> str:
        return f"L[{self.local!r}]"

    def name(self) -> str:
        return self.local

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        return [*load_locals, Instr("LOAD_CONST", self.local), Instr("BINARY_SUBSCR")]


@dataclass(frozen=True)
class GlobalSource(Source):
    """A global: of the compiled function's module (`module` empty) or of another module."""

    global_name: str
    module: str = ""

    def expr_on(self, base: str) -> str:
        if not self.module:
            return f"G[{self.global_name!r}]"
        return f"sys.modules[{self.module!r}].__dict__[{self.global_name!r}]"

    def name(self) -> str:
        return self.global_name if not self.module else f"{self.module}.{self.global_name}"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        table = globals_dict if not self.module else vars(sys.modules[self.module])
        return [
            load_const(table),
            Instr("LOAD_CONST", self.global_name),
            Instr("BINARY_SUBSCR"),
        ]


@dataclass(frozen=True)
class AttrSource(Source):
    """An attribute of another source's value."""

    base: Source
    attr: str

    def expr_on(self, base: str) -> str:
        if self.attr.isidentifier():
            return f"{base}.{self.attr}"
        return f"getattr({base}, {self.attr!r})"

    def name(self) -> str:
        if self.attr.isidentifier():
            return f"{self.base.name()}.{self.attr}"
        return f"{self.base.name()}[{self.attr}]"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        base = self.base.emit(load_locals, globals_dict)
        if not self.attr.isidentifier():
            return [
                Instr("PUSH_NULL"),
                load_const(getattr),
                *base,
                Instr("LOAD_CONST", self.attr),
                *call_instructions(2),
            ]
        arg: Any = (False, self.attr) if sys.version_info >= (3, 12) else self.attr
        return [*base, Instr("LOAD_ATTR", arg)]


@dataclass(frozen=True)
class ModuleEntrySource(Source):
    """A submodule, parameter or buffer of an `nn.Module`, read from the table that holds it
    (`base._parameters['weight']`): what `base.weight` finds, without the failed attribute
    lookup and the Python `nn.Module.__getattr__` call that `base.weight` costs."""

    base: Source
    table: str  # "_modules", "_parameters" or "_buffers"
    key: str

    def expr_on(self, base: str) -> str:
        return f"{base}.{self.table}[{self.key!r}]"

    def name(self) -> str:
        return AttrSource(self.base, self.key).name()  # as the user's code spells it

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        arg: Any = (False, self.table) if sys.version_info >= (3, 12) else self.table
        return [
            *self.base.emit(load_locals, globals_dict),
            Instr("LOAD_ATTR", arg),
            Instr("LOAD_CONST", self.key),
            Instr("BINARY_SUBSCR"),
        ]


@dataclass(frozen=True)
class ItemSource(Source):
    """An item (`[index]`) of another source's value."""

    base: Source
    index: Any

    def expr_on(self, base: str) -> str:
        return f"{base}[{self.index!r}]"

    def name(self) -> str:
        return f"{self.base.name()}[{self.index!r}]"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        return [
            *self.base.emit(load_locals, globals_dict),
            Instr("LOAD_CONST", self.index),
            Instr("BINARY_SUBSCR"),
        ]


def load_const(value: object) -> Instr:
    """LOAD_CONST of any object (bytecode's type hints list only literal constants)."""
    return Instr("LOAD_CONST", cast(Any, value))


def call_instructions(count: int) -> list[Instr]:
    """The instructions that call a callable with `count` positional arguments."""
    if sys.version_info >= (3, 12):
        return [Instr("CALL", count)]
    return [Instr("PRECALL", count), Instr("CALL", count)]


@dataclass(frozen=True)
class DictEntrySource(Source):
    """`dict.get(base, key, MISSING)`: an entry of a dict subclass read as a plain dict
    (`super().get(key)` in a subclass that overrides `get`), MISSING when absent."""

    base: Source
    key: Any

    def expr_on(self, base: str) -> str:
        return f"dict.get({base}, {self.key!r}, sys.modules[{__name__!r}].MISSING)"

    def name(self) -> str:
        return f"dict.get({self.base.name()}, {self.key!r})"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        return [
            Instr("PUSH_NULL"),
            load_const(dict.get),
            *self.base.emit(load_locals, globals_dict),
            Instr("LOAD_CONST", self.key),
            load_const(MISSING),
            *call_instructions(3),
        ]


class _Missing:
    """The value of a DictEntrySource whose key is absent."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


@dataclass(frozen=True)
class SizeSource(Source):
    """One dim's size of a tensor source (`x.shape[1]`): what a size symbol stands for."""

    base: Source
    dim: int

    def expr_on(self, base: str) -> str:
        return f"{base}.shape[{self.dim}]"

    def name(self) -> str:
        return f"{self.base.name()}.shape[{self.dim}]"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        arg: Any = (False, "shape") if sys.version_info >= (3, 12) else "shape"
        return [
            *self.base.emit(load_locals, globals_dict),
            Instr("LOAD_ATTR", arg),
            Instr("LOAD_CONST", self.dim),
            Instr("BINARY_SUBSCR"),
        ]
