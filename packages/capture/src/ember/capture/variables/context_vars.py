"""`contextvars.ContextVar`: `get`, `set` and `reset` inside the compiled function.

A ContextVar read through a source is modelled as torch.compile models it: `get()` reads the
current value for real, guarded (a changed value recompiles); `set(value)` and
`reset(token)` change the value only in the capture (later `get()`s see it) and the net
change is replayed after the graph: nothing when the function restores what it found (the
usual `token = var.set(v); try: ... finally: var.reset(token)`), else one `var.set(value)`.
A token kept past the graph (returned, or alive across a break) cannot be rebuilt: that
breaks, as before.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.objects import UserObjectVariable

if TYPE_CHECKING:
    from bytecode import Instr

    from ember.capture.bytecode.frame import Frame


class _Unset:
    """A ContextVar with no value (and no default)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()


@dataclass(frozen=True)
class ContextValueSource(Source):
    """`var.get(UNSET)`: the current value of the ContextVar at `base` (UNSET when none)."""

    base: Source

    def expr_on(self, base: str) -> str:
        return f"{base}.get(sys.modules[{__name__!r}].UNSET)"

    def name(self) -> str:
        return f"{self.base.name()}.get()"

    def emit(self, load_locals: list[Instr], globals_dict: dict[str, Any]) -> list[Instr]:
        from bytecode import Instr

        from ember.capture.guards.source import call_instructions, load_const

        return [
            Instr("PUSH_NULL"),
            load_const(contextvars.ContextVar.get),
            *self.base.emit(load_locals, globals_dict),
            load_const(UNSET),
            *call_instructions(2),
        ]


@dataclass
class ContextState:
    """One ContextVar's value in the capture: `current` is a Variable, or UNSET."""

    owner: ContextVarVariable
    original: Any  # the real value at capture time (UNSET when none)
    current: Variable | _Unset | None = None  # None: not set in the capture
    read: Variable | _Unset | None = None  # the value found, once read (and guarded)
    tokens: list[TokenVariable] = field(default_factory=list)


def _read(frame: Frame, state: ContextState) -> Variable | _Unset:
    """The value the variable had when the function started, read once and guarded."""
    from ember.capture.guards.kinds import GuardKind
    from ember.capture.variables.builder import wrap

    if state.read is None:
        assert state.owner.source is not None
        source = ContextValueSource(state.owner.source)
        if state.original is UNSET:
            frame.session.guard(GuardKind.ID, source, UNSET)
            state.read = UNSET
        else:
            state.read = wrap(frame, state.original, source)
    return state.read


class ContextVarVariable(UserObjectVariable):
    """A ContextVar reached through a source."""

    def getattr(self, frame: Frame, name: str) -> Variable:
        if name in ("get", "set", "reset"):
            return ContextVarMethodVariable(self, name)
        if name == "name":
            return ConstantVariable(self.value.name)
        return super().getattr(frame, name)

    def state(self, frame: Frame) -> ContextState:
        states: dict[int, ContextState] = frame.session.side_effects.context_vars
        found = states.get(id(self.value))
        if found is None:
            found = states[id(self.value)] = ContextState(self, self.value.get(UNSET))
        return found


class TokenVariable(Variable):
    """What `set()` returned: the value to restore (a Variable, or UNSET)."""

    def __init__(self, owner: ContextVarVariable, previous: Variable | _Unset) -> None:
        self.owner = owner
        self.previous = previous
        self.used = False

    def describe(self) -> str:
        return f"a token of the ContextVar {self.owner.value.name!r}"


class ContextVarMethodVariable(Variable):
    """`var.get`, `var.set` or `var.reset`."""

    def __init__(self, owner: ContextVarVariable, name: str) -> None:
        self.owner = owner
        self.name = name

    def describe(self) -> str:
        return f"ContextVar.{self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        state = self.owner.state(frame)
        if kwargs:
            raise Unsupported(f"calling {self.describe()} with keyword arguments (TypeError)")
        if self.name == "get":
            current = state.current if state.current is not None else _read(frame, state)
            if isinstance(current, _Unset):
                if args:
                    return args[0]
                default = self.owner.value.get(UNSET)  # the ContextVar's own default
                if default is UNSET:
                    raise Unsupported("ContextVar.get() of a variable with no value (LookupError)")
                return ConstantVariable(default)
            return current
        if self.name == "set":
            (value,) = args
            previous = state.current if state.current is not None else _read(frame, state)
            made = TokenVariable(self.owner, previous)
            state.current = value
            state.tokens.append(made)
            return made
        (given,) = args
        token = given if isinstance(given, TokenVariable) else None
        if token is None or token.owner.value is not self.owner.value:
            raise Unsupported("ContextVar.reset() with a token not made in the compiled function")
        if token.used:
            raise Unsupported("ContextVar.reset() with a token used already (RuntimeError)")
        token.used = True
        state.current = token.previous
        return ConstantVariable(None)


def is_context_var(value: Any) -> bool:
    return type(value) is contextvars.ContextVar


def replay_value(state: ContextState) -> Variable | None:
    """The value to `set()` after the graph; None when the capture left it as it found it."""
    current = state.current
    if current is None:
        return None
    if isinstance(current, _Unset):
        if state.original is UNSET:
            return None
        raise Unsupported("a ContextVar left without a value (reset to unset) by the function")
    if current is state.read:
        return None  # restored to the value found at the start
    return current
