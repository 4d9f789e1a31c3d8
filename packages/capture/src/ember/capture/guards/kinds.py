"""Guard kinds: one assumption a captured graph makes, how to check it, how to explain a miss.

Each guard turns into one Python expression over the frame's arguments `L` and globals `G`
(constants it needs go into a shared namespace), and can say in user terms why it failed:
"x.shape[0] changed from 8 to 16, seen at model.py:12".
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ember.capture.guards.source import GlobalSource, Source
from ember.capture.guards.symbolic import SizeCondition
from ember.prims import SourceLocation

# The device types whose autocast state a Graph depends on (its casts are recorded in it).
AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple[tuple[str, bool, str], ...]:
    """(device type, enabled, dtype) for each device type autocast can be on for."""
    return tuple(
        (device, torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)))
        for device in AUTOCAST_DEVICES
    )


def _autocast(state: tuple[tuple[str, bool, str], ...]) -> str:
    on = [f"{device} {dtype.removeprefix('torch.')}" for device, enabled, dtype in state if enabled]
    return f"on ({', '.join(on)})" if on else "off"


class GuardKind(str, enum.Enum):
    """What a guard checks."""

    TYPE = "type"  # type(v) is T
    ID = "id"  # v is the very object seen while capturing
    CONSTANT = "constant"  # type and value of a Python constant (int, str, dtype, ...)
    LENGTH = "length"  # len(v) of a list or tuple
    DICT_KEYS = "dict_keys"  # the keys of a dict, in order
    TENSOR = "tensor"  # type, dtype, device, shape, stride, requires_grad of a tensor
    GRAD_MODE = "grad_mode"  # torch.is_grad_enabled()
    AUTOCAST = "autocast"  # autocast_state(): torch.autocast's state per device type
    TRAINING = "training"  # an nn.Module's training flag
    SAME_OBJECT = "same_object"  # two sources name one tensor (a deduplicated graph input)
    STORAGE_OFFSET = "storage_offset"  # v.storage_offset(), where the Graph reads it (as_strided)
    SIZE_RANGE = "size_range"  # lower <= x.shape[d] <= upper, a dim the Graph keeps symbolic
    SIZE_EXPR = "size_expr"  # a condition over symbolic sizes the Graph assumed (SizeCondition)


@dataclass(frozen=True)
class TensorFacts:
    """What a tensor guard pins down."""

    type: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    # Dims the Graph keeps symbolic: their sizes are checked by SIZE_RANGE guards, and the
    # strides by contiguity (the Graph's strides are the contiguous ones over the symbols).
    dynamic: frozenset[int] = frozenset()

    @staticmethod
    def of(tensor: torch.Tensor, dynamic: frozenset[int] = frozenset()) -> TensorFacts:
        return TensorFacts(
            type(tensor),
            tensor.dtype,
            tensor.device,
            tuple(tensor.shape),
            tuple(tensor.stride()),
            tensor.requires_grad,
            dynamic,
        )

    def shape_expr(self, tensor: str) -> str:
        """The shape and stride part of the guard over the tensor expression `tensor`."""
        if not self.dynamic:
            return f"{tensor}.shape == {self.shape!r} and {tensor}.stride() == {self.stride!r}"
        static = [
            f" and {tensor}.shape[{d}] == {size}"
            for d, size in enumerate(self.shape)
            if d not in self.dynamic
        ]
        return f"{tensor}.dim() == {len(self.shape)}{''.join(static)} and {tensor}.is_contiguous()"


@dataclass(frozen=True)
class Guard:
    """One assumption. `expected` depends on the kind (see GuardKind)."""

    kind: GuardKind
    source: Source | None
    expected: Any
    seen_at: SourceLocation | None = None

    # ---- checking ------------------------------------------------------------------------

    def expr(self, namespace: dict[str, Any], read: Callable[[Source], str] | None = None) -> str:
        """A Python expression that is true when the guard holds; `read` gives the expression
        of a source (default: `source.expr()`, the whole path from `L` or `G`)."""
        read = read or (lambda source: source.expr())
        value = read(self.source) if self.source is not None else ""
        const = _constant(namespace, self.expected)
        if self.kind is GuardKind.TYPE:
            return f"type({value}) is {const}"
        if self.kind is GuardKind.ID:
            return f"{value} is {const}"
        if self.kind in (GuardKind.CONSTANT, GuardKind.TRAINING):
            if self.expected is None or type(self.expected) is bool:
                # the only value of its type with that value: `is` says both at once
                return f"{value} is {self.expected!r}"
            kind_const = _constant(namespace, type(self.expected))
            return f"(type(__v := {value}) is {kind_const} and __v == {const})"
        if self.kind is GuardKind.LENGTH:
            return f"len({value}) == {self.expected!r}"
        if self.kind is GuardKind.DICT_KEYS:
            return f"tuple({value}.keys()) == {const}"
        if self.kind is GuardKind.GRAD_MODE:
            grad = _constant(namespace, torch.is_grad_enabled)
            return f"{grad}() is {self.expected!r}"
        if self.kind is GuardKind.AUTOCAST:  # autocast_state() == expected, unrolled
            enabled = _constant(namespace, torch.is_autocast_enabled)
            dtype = _constant(namespace, torch.get_autocast_dtype)
            parts = [
                f"{enabled}({device!r}) is {on!r} and "
                f"{dtype}({device!r}) is {_constant(namespace, _dtype_named(name))}"
                for device, on, name in self.expected
            ]
            return f"({' and '.join(parts)})"
        if self.kind is GuardKind.SAME_OBJECT:
            assert isinstance(self.expected, Source)
            return f"{value} is {read(self.expected)}"
        if self.kind is GuardKind.STORAGE_OFFSET:
            return f"{value}.storage_offset() == {self.expected!r}"
        if self.kind is GuardKind.TENSOR:
            facts: TensorFacts = self.expected
            names = [_constant(namespace, item) for item in (facts.type, facts.dtype, facts.device)]
            return (
                f"(type(__t := {value}) is {names[0]} and __t.dtype is {names[1]} "
                f"and __t.device == {names[2]} and {facts.shape_expr('__t')} "
                f"and __t.requires_grad is {facts.requires_grad!r})"
            )
        if self.kind is GuardKind.SIZE_RANGE:
            lower, upper = self.expected
            if upper is None:
                return f"{value} >= {lower}"
            return f"{lower} <= {value} <= {upper}"
        if self.kind is GuardKind.SIZE_EXPR:
            condition: SizeCondition = self.expected
            printed = condition.python(read)
            if printed is not None:
                return f"({printed})"
            # an operator the printer does not know: sympy evaluates it (slower, still right)
            holds = _constant(namespace, condition.holds)
            values = ", ".join(f"{n!r}: {read(s)}" for n, s in condition.sizes)
            return f"{holds}({{{values}}})"
        raise AssertionError(self.kind)

    # ---- explaining ----------------------------------------------------------------------

    def failure(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> str | None:
        """Why the guard fails for these arguments, in user terms; None when it holds."""
        namespace: dict[str, Any] = {"sys": sys}
        check = eval(f"lambda L, G: {self.expr(namespace)}", namespace)  # noqa: S307
        try:
            if check(arguments, globals_dict):
                return None
        except Exception:  # noqa: BLE001 - a missing attribute or index is itself a change
            return f"{self._subject()} can no longer be read{self._where()}"
        return self._describe(arguments, globals_dict) + self._where()

    def _subject(self) -> str:
        if self.source is None:
            return "the program"
        prefix = "global " if _is_global(self.source) else ""
        return f"{prefix}{self.source.name()}"

    def _where(self) -> str:
        return f", seen at {self.seen_at.short()}" if self.seen_at is not None else ""

    def _describe(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> str:
        if self.kind is GuardKind.SIZE_EXPR:
            condition: SizeCondition = self.expected
            seen = dict.fromkeys(
                f"{source.name()} = {source.read(arguments, globals_dict)}"
                for _, source in condition.sizes
            )
            return f"{', '.join(seen)} breaks the size guard {condition.text()}"
        if self.kind is GuardKind.GRAD_MODE:
            return f"grad mode changed from {_on(self.expected)} to {_on(not self.expected)}"
        if self.kind is GuardKind.AUTOCAST:
            return (
                f"autocast changed from {_autocast(self.expected)} to {_autocast(autocast_state())}"
            )
        assert self.source is not None
        subject = self._subject()
        actual = self.source.read(arguments, globals_dict)
        if self.kind is GuardKind.TYPE:
            return (
                f"type of {subject} changed from {_tname(self.expected)} to {_tname(type(actual))}"
            )
        if self.kind is GuardKind.ID:
            return f"{subject} is a different object than when it was captured"
        if self.kind is GuardKind.SAME_OBJECT:
            return f"{subject} and {self.expected.name()} are no longer the same tensor"
        if self.kind in (GuardKind.CONSTANT, GuardKind.TRAINING):
            return f"{subject} changed from {self.expected!r} to {actual!r}"
        if self.kind is GuardKind.LENGTH:
            return f"len({subject}) changed from {self.expected} to {len(actual)}"
        if self.kind is GuardKind.STORAGE_OFFSET:
            return (
                f"{subject}.storage_offset() changed from {self.expected} to "
                f"{actual.storage_offset()} (the graph calls as_strided, which counts from the "
                "storage's start)"
            )
        if self.kind is GuardKind.DICT_KEYS:
            return f"the keys of {subject} changed from {list(self.expected)} to {list(actual)}"
        if self.kind is GuardKind.SIZE_RANGE:
            lower, upper = self.expected
            shown = "inf" if upper is None else upper
            why = " (sizes 0 and 1 compile a graph of their own)" if actual < 2 else ""
            return f"{subject} = {actual} is outside the compiled range {lower}..{shown}{why}"
        return _tensor_change(subject, self.expected, actual)


def _tensor_change(subject: str, facts: TensorFacts, actual: torch.Tensor) -> str:
    if type(actual) is not facts.type:
        return f"type of {subject} changed from {_tname(facts.type)} to {_tname(type(actual))}"
    if actual.dtype != facts.dtype:
        return f"{subject}.dtype changed from {facts.dtype} to {actual.dtype}"
    if actual.device != facts.device:
        return f"{subject}.device changed from {facts.device} to {actual.device}"
    shape = tuple(actual.shape)
    if len(shape) != len(facts.shape):
        return f"{subject}.ndim changed from {len(facts.shape)} to {len(shape)}"
    for dim, (old, new) in enumerate(zip(facts.shape, shape)):
        if old != new and dim not in facts.dynamic:
            return f"{subject}.shape[{dim}] changed from {old} to {new}"
    if facts.dynamic:
        if not actual.is_contiguous():
            return (
                f"{subject} is no longer contiguous (stride {tuple(actual.stride())}); the graph "
                "took it contiguous, with symbolic sizes"
            )
        return (
            f"{subject}.requires_grad changed from {facts.requires_grad} to {actual.requires_grad}"
        )
    if tuple(actual.stride()) != facts.stride:
        return f"{subject}.stride() changed from {facts.stride} to {tuple(actual.stride())}"
    return f"{subject}.requires_grad changed from {facts.requires_grad} to {actual.requires_grad}"


def _dtype_named(name: str) -> torch.dtype:
    """The dtype `str(dtype)` printed as `name` ('torch.bfloat16')."""
    dtype = getattr(torch, name.removeprefix("torch."))
    assert isinstance(dtype, torch.dtype) and str(dtype) == name, name
    return dtype


def _constant(namespace: dict[str, Any], value: Any) -> str:
    name = f"___c{len(namespace)}"
    namespace[name] = value
    return name


def _is_global(source: Source) -> bool:
    while True:
        if isinstance(source, GlobalSource):
            return True
        base = getattr(source, "base", None)
        if base is None:
            return False
        source = base


def _tname(kind: type) -> str:
    return kind.__qualname__


def _on(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"
