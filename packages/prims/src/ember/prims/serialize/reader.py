"""A path-carrying reader over a parsed JSON document, used by the Graph decoder.

A `Field` is one JSON value and where it sits (`graph.nodes[3].args[1]`). Every accessor
checks the JSON type it expects and raises GraphFormatError naming that path on a mismatch,
so the decoder never touches a value whose type it has not checked.
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from ember.prims.errors import GraphFormatError
from ember.prims.serialize.limits import MAX_INT_BITS, MAX_INT_DIGITS

_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")


def describe(value: Any) -> str:
    """The JSON type name of a parsed JSON value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def quote(text: Any, limit: int = 80) -> str:
    """`repr` of a string from the document, cut short: messages stay readable on any input."""
    if isinstance(text, str) and len(text) > limit:
        return repr(text[:limit]) + f"... ({len(text)} characters)"
    return repr(text)


class Field:
    """One JSON value of the document and its path from the root."""

    __slots__ = ("_parent", "_step", "lenient", "value")

    def __init__(
        self,
        value: Any,
        parent: Field | None = None,
        step: str | int | tuple[str] = "",
        *,
        lenient: bool = False,
    ) -> None:
        self.value = value
        self._parent = parent
        self._step = step  # ".key", an array index, or (name,) for an entry of a table
        # Documents of a newer minor version may carry fields this reader does not know.
        self.lenient: bool = lenient if parent is None else parent.lenient

    # ---- where -----------------------------------------------------------------------------

    @property
    def path(self) -> str:
        steps: list[str] = []
        field: Field | None = self
        while field is not None:
            step = field._step
            if isinstance(step, int):
                steps.append(f"[{step}]")
            elif isinstance(step, tuple):
                steps.append(f"[{quote(step[0])}]")
            else:
                steps.append(step)
            field = field._parent
        return "".join(reversed(steps)).lstrip(".") or "document"

    def fail(self, message: str) -> NoReturn:
        raise GraphFormatError(f"{self.path}: {message}")

    def child(self, value: Any, step: str) -> Field:
        return Field(value, self, step)

    # ---- containers ------------------------------------------------------------------------

    def is_object(self) -> bool:
        return isinstance(self.value, dict)

    def object(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Field]:
        """The members of a JSON object with exactly these keys (optional ones may be absent)."""
        if not isinstance(self.value, dict):
            self.fail(f"expected an object with keys {list(required)}, got {describe(self.value)}")
        members: dict[str, Field] = {}
        for key in required:
            if key not in self.value:
                self.fail(f"missing key {quote(key)}")
            members[key] = Field(self.value[key], self, "." + key)
        for key in optional:
            if key in self.value:
                members[key] = Field(self.value[key], self, "." + key)
        if not self.lenient and len(members) != len(self.value):
            for key in self.value:
                if key not in members:
                    self.fail(f"unknown key {quote(key)}")
        return members

    def map(self) -> list[tuple[str, Field]]:
        """The entries of a JSON object used as a name -> value table, in document order."""
        if not isinstance(self.value, dict):
            self.fail(f"expected an object (a table by name), got {describe(self.value)}")
        return [(key, Field(item, self, (key,))) for key, item in self.value.items()]

    def array(self, length: int | None = None) -> list[Field]:
        if not isinstance(self.value, list):
            self.fail(f"expected an array, got {describe(self.value)}")
        if length is not None and len(self.value) != length:
            self.fail(f"expected {length} items, got {len(self.value)}")
        return [Field(item, self, index) for index, item in enumerate(self.value)]

    # ---- scalars ---------------------------------------------------------------------------

    def string(self) -> str:
        if not isinstance(self.value, str):
            self.fail(f"expected a string, got {describe(self.value)}")
        return self.value

    def optional_string(self) -> str | None:
        return None if self.value is None else self.string()

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail(f"expected a boolean, got {describe(self.value)}")
        return self.value

    def integer(self, low: int | None = None, high: int | None = None) -> int:
        """A JSON integer or {"$int": "decimal"}, within [low, high] when given."""
        value = self.value
        if type(value) is int and (low is None or low <= value) and (high is None or value <= high):
            if value.bit_length() < MAX_INT_BITS:  # the common case, checked first
                return value
        if isinstance(value, dict) and len(value) == 1 and "$int" in value:
            value = _parse_decimal(self.child(value["$int"], ".$int"))
        elif isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"expected an integer, got {describe(value)}")
        if value.bit_length() >= MAX_INT_BITS:
            self.fail(f"integer {value} does not fit in {MAX_INT_BITS} bits")
        if low is not None and value < low:
            self.fail(f"integer {value} is below the least allowed value {low}")
        if high is not None and value > high:
            self.fail(f"integer {value} is above the greatest allowed value {high}")
        return value

    def optional_integer(self, low: int | None = None, high: int | None = None) -> int | None:
        return None if self.value is None else self.integer(low, high)

    def is_integer(self) -> bool:
        value = self.value
        if isinstance(value, dict):
            return len(value) == 1 and "$int" in value
        return isinstance(value, int) and not isinstance(value, bool)


def _parse_decimal(field: Field) -> int:
    text = field.string()
    if len(text) > MAX_INT_DIGITS or _DECIMAL.fullmatch(text) is None:
        field.fail(f"expected a decimal integer of at most {MAX_INT_DIGITS} digits")
    return int(text)
