"""Containers: lists, tuples, dicts, sets and iterators whose items are Variables.

Containers built while capturing are mutable Variables (so aliasing behaves as in Python);
containers that came from the frame's arguments are guarded by type and length or keys,
and mutating them marks them for replay after the graph runs (side_effects.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.capture.guards.source import Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class SequenceVariable(Variable):
    """Shared behaviour of lists and tuples."""

    kind: type = tuple

    def __init__(self, items: list[Variable], source: Source | None = None) -> None:
        self.values = list(items)
        self.source = source

    def python_type(self) -> type:
        return self.kind

    def is_constant(self) -> bool:
        return self.kind is tuple and all(item.is_constant() for item in self.values)

    def constant(self) -> Any:
        if not self.is_constant():
            return super().constant()
        return tuple(item.constant() for item in self.values)

    def realize(self) -> Any:
        return self.kind(item.realize() for item in self.values)

    def items(self, frame: Frame) -> list[Variable]:
        return list(self.values)

    def truth(self, frame: Frame) -> bool:
        return bool(self.values)

    def getitem(self, frame: Frame, index: Variable) -> Variable:
        key = index.constant()
        if isinstance(key, slice):
            return type(self)(self.values[key])
        try:
            return self.values[key]
        except (IndexError, TypeError) as error:
            raise Unsupported(f"an indexing error ({error})") from error

    def getattr(self, frame: Frame, name: str) -> Variable:
        method = _METHODS.get((self.kind, name)) or _METHODS.get((SequenceVariable, name))
        if method is None:
            raise Unsupported(f"the method {self.kind.__name__}.{name}")
        return ContainerMethodVariable(self, name, method)


class TupleVariable(SequenceVariable):
    """A tuple; `tuple_type` keeps named tuples and torch's return types readable."""

    kind = tuple

    def __init__(
        self, items: list[Variable], source: Source | None = None, tuple_type: type = tuple
    ) -> None:
        super().__init__(items, source)
        self.tuple_type = tuple_type

    def python_type(self) -> type:
        return self.tuple_type

    def realize(self) -> Any:
        values = [item.realize() for item in self.values]
        if self.tuple_type is tuple:
            return tuple(values)
        if hasattr(self.tuple_type, "_fields"):
            return self.tuple_type(*values)
        return self.tuple_type(values)

    def getattr(self, frame: Frame, name: str) -> Variable:
        fields = getattr(self.tuple_type, "_fields", None)
        if fields is not None and name in fields:
            return self.values[fields.index(name)]
        if self.tuple_type is not tuple and hasattr(self.tuple_type, "n_fields"):
            from ember.capture.variables.builder import wrap_result

            return wrap_result(frame, getattr(self.realize(), name))
        return super().getattr(frame, name)


class ListVariable(SequenceVariable):
    """A list."""

    kind = list

    mutated = False

    def check_mutable(self) -> None:
        """Note a mutation: a list that came from outside is rewritten after the graph."""
        self.mutated = True

    def setitem(self, frame: Frame, index: Variable, value: Variable) -> None:
        self.check_mutable()
        key = index.constant()
        if isinstance(key, slice):
            self.values[key] = value.items(frame)
        else:
            self.values[key] = value


class DictVariable(Variable):
    """A dict with constant keys."""

    def __init__(self, entries: dict[Any, Variable], source: Source | None = None) -> None:
        self.entries = dict(entries)
        self.source = source

    def python_type(self) -> type:
        return dict

    def realize(self) -> Any:
        return {key: value.realize() for key, value in self.entries.items()}

    def items(self, frame: Frame) -> list[Variable]:
        return [ConstantVariable(key) for key in self.entries]

    def truth(self, frame: Frame) -> bool:
        return bool(self.entries)

    def getitem(self, frame: Frame, index: Variable) -> Variable:
        key = index.constant()
        if key not in self.entries:
            raise Unsupported(f"a missing dict key {key!r} (KeyError)")
        return self.entries[key]

    def setitem(self, frame: Frame, index: Variable, value: Variable) -> None:
        self.check_mutable()
        self.entries[index.constant()] = value

    mutated = False

    def check_mutable(self) -> None:
        """Note a mutation: a dict that came from outside is rewritten after the graph."""
        self.mutated = True

    def getattr(self, frame: Frame, name: str) -> Variable:
        method = _METHODS.get((dict, name))
        if method is None:
            raise Unsupported(f"the method dict.{name}")
        return ContainerMethodVariable(self, name, method)


class SetVariable(Variable):
    """A set of constants."""

    def __init__(self, members: list[Variable]) -> None:
        self.members = {member.constant() for member in members}

    def python_type(self) -> type:
        return set

    def realize(self) -> Any:
        return set(self.members)

    def items(self, frame: Frame) -> list[Variable]:
        return [ConstantVariable(member) for member in self.members]

    def truth(self, frame: Frame) -> bool:
        return bool(self.members)

    def getattr(self, frame: Frame, name: str) -> Variable:
        method = _METHODS.get((set, name))
        if method is None:
            raise Unsupported(f"the method set.{name}")
        return ContainerMethodVariable(self, name, method)


class ResumeIterator:
    """The real iterator a graph break hands to a resume function: the items a loop has
    not reached yet, readable (`values[position:]`) so capture can model it again."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.position = 0

    def __iter__(self) -> ResumeIterator:
        return self

    def __next__(self) -> Any:
        if self.position >= len(self.values):
            raise StopIteration
        self.position += 1
        return self.values[self.position - 1]


class IteratorVariable(Variable):
    """An iterator over a fixed list of Variables (what GET_ITER makes of anything iterable)."""

    def __init__(self, values: list[Variable]) -> None:
        self.values = values
        self.position = 0

    def next(self) -> Variable | None:
        if self.position >= len(self.values):
            return None
        self.position += 1
        return self.values[self.position - 1]

    def items(self, frame: Frame) -> list[Variable]:
        rest = self.values[self.position :]
        self.position = len(self.values)
        return rest


Method = Callable[["Frame", Any, list[Variable], dict[str, Variable]], Variable]


class ContainerMethodVariable(Variable):
    """A bound method of a container, such as `xs.append`."""

    def __init__(self, owner: Variable, name: str, method: Method) -> None:
        self.owner = owner
        self.name = name
        self.method = method

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        return self.method(frame, self.owner, args, kwargs)


_METHODS: dict[tuple[type, str], Method] = {}


def _method(kind: type, name: str) -> Callable[[Method], Method]:
    def register(fn: Method) -> Method:
        _METHODS[(kind, name)] = fn
        return fn

    return register


NONE = ConstantVariable(None)


@_method(list, "append")
def _append(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    xs.check_mutable()
    xs.values.append(args[0])
    return NONE


@_method(list, "extend")
def _extend(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    xs.check_mutable()
    xs.values.extend(args[0].items(frame))
    return NONE


@_method(list, "insert")
def _insert(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    xs.check_mutable()
    xs.values.insert(args[0].constant(), args[1])
    return NONE


@_method(list, "pop")
def _pop(frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]) -> Variable:
    xs.check_mutable()
    return xs.values.pop(args[0].constant() if args else -1)


@_method(list, "reverse")
def _reverse(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    xs.check_mutable()
    xs.values.reverse()
    return NONE


@_method(list, "clear")
def _clear(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    xs.check_mutable()
    xs.values.clear()
    return NONE


@_method(list, "copy")
def _copy(
    frame: Frame, xs: ListVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    return ListVariable(xs.values)


@_method(SequenceVariable, "index")
def _index(
    frame: Frame, xs: SequenceVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    target = args[0].identity()
    for position, item in enumerate(xs.values):
        if item.identity() is target or (item.is_constant() and item.constant() == target):
            return ConstantVariable(position)
    raise Unsupported("list.index of a missing value (ValueError)")


@_method(SequenceVariable, "count")
def _count(
    frame: Frame, xs: SequenceVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    target = args[0].constant()
    return ConstantVariable(
        sum(1 for item in xs.values if item.is_constant() and item.constant() == target)
    )


class DictViewVariable(Variable):
    """`d.keys()`, `d.values()` or `d.items()`: a live view of a dict's entries."""

    def __init__(self, owner: DictVariable, kind: str) -> None:
        self.owner = owner
        self.kind = kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def describe(self) -> str:
        return f"a dict_{self.kind} view"

    def items(self, frame: Frame) -> list[Variable]:
        entries = self.owner.entries
        return mapping_view(self.kind, list(entries), lambda: list(entries.values()))

    def truth(self, frame: Frame) -> bool:
        return bool(self.owner.entries)

    def length(self) -> int:
        return len(self.owner.entries)

    def keys(self) -> set[Any]:
        """The keys, for `in` and the set operators of a keys view."""
        if self.kind != "keys":
            raise Unsupported(f"set operations on {self.describe()}")
        return set(self.owner.entries)

    def getattr(self, frame: Frame, name: str) -> Variable:
        if name == "mapping":
            return self.owner
        raise Unsupported(f"the method dict_{self.kind}.{name}")


def mapping_view(
    kind: str, keys: list[Any], values: Callable[[], list[Variable]]
) -> list[Variable]:
    """The members of a mapping's `keys()`, `values()` or `items()` (`kind`), its keys
    constant; `values` is called only when they are needed (reading them may guard)."""
    if kind == "keys":
        return [ConstantVariable(key) for key in keys]
    read = values()
    if kind == "values":
        return read
    return [TupleVariable([ConstantVariable(k), v]) for k, v in zip(keys, read, strict=True)]


def _view(kind: str) -> Method:
    def method(
        frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]
    ) -> Variable:
        return DictViewVariable(d, kind)

    return method


for _kind in ("keys", "values", "items"):
    _METHODS[(dict, _kind)] = _view(_kind)


@_method(dict, "get")
def _get(frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]) -> Variable:
    default = args[1] if len(args) > 1 else NONE
    return d.entries.get(args[0].constant(), default)


@_method(dict, "pop")
def _dict_pop(
    frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    d.check_mutable()
    key = args[0].constant()
    if key not in d.entries and len(args) > 1:
        return args[1]
    if key not in d.entries:
        raise Unsupported(f"a missing dict key {key!r} (KeyError)")
    return d.entries.pop(key)


@_method(dict, "setdefault")
def _setdefault(
    frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    key = args[0].constant()
    if key not in d.entries:
        d.check_mutable()
        d.entries[key] = args[1] if len(args) > 1 else NONE
    return d.entries[key]


@_method(dict, "update")
def _update(
    frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    d.check_mutable()
    if args:
        other = args[0]
        if isinstance(other, DictVariable):
            d.entries.update(other.entries)
        else:
            for pair in other.items(frame):
                key, value = pair.items(frame)
                d.entries[key.constant()] = value
    for name, item in kw.items():
        d.entries[name] = item
    return NONE


@_method(dict, "copy")
def _dict_copy(
    frame: Frame, d: DictVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    return DictVariable(d.entries)


@_method(set, "add")
def _set_add(
    frame: Frame, s: SetVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    s.members.add(args[0].constant())
    return NONE


@_method(set, "update")
def _set_update(
    frame: Frame, s: SetVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    s.members.update(item.constant() for item in args[0].items(frame))
    return NONE


def _set_operation(name: str) -> Method:
    def method(
        frame: Frame, s: SetVariable, args: list[Variable], kw: dict[str, Variable]
    ) -> Variable:
        others = [set(item.constant() for item in arg.items(frame)) for arg in args]
        result = getattr(s.members, name)(*others)
        if isinstance(result, (set, frozenset)):
            return SetVariable([ConstantVariable(m) for m in result])
        return ConstantVariable(result)

    return method


for _name in (
    "union",
    "intersection",
    "difference",
    "symmetric_difference",
    "issubset",
    "issuperset",
    "isdisjoint",
    "copy",
):
    _METHODS[(set, _name)] = _set_operation(_name)


@_method(set, "remove")
def _set_remove(
    frame: Frame, s: SetVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    member = args[0].constant()
    if member not in s.members:
        raise Unsupported(f"set.remove of a missing member {member!r} (KeyError)")
    s.members.discard(member)
    return NONE


@_method(set, "discard")
def _set_discard(
    frame: Frame, s: SetVariable, args: list[Variable], kw: dict[str, Variable]
) -> Variable:
    s.members.discard(args[0].constant())
    return NONE
