"""Python builtins (`len`, `range`, `zip`, `isinstance`, `getattr`, `min`, ...) and pure
functions of the `math` module, modelled over Variables.

Each modelled builtin is one small function in the `BUILTINS` table; anything else runs for
real when all its arguments are constants.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import operator
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable, concrete_value
from ember.capture.variables.containers import (
    DictVariable,
    DictViewVariable,
    IteratorVariable,
    ListVariable,
    SequenceVariable,
    SetVariable,
    TupleVariable,
)

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

Handler = Callable[["Frame", list[Variable], dict[str, Variable]], Variable]
BUILTINS: dict[Any, Handler | None] = {}

# Builtins that run for real on constant arguments (no handler of their own needed).
_PURE = (
    abs,
    all,
    any,
    bin,
    bool,
    chr,
    complex,
    divmod,
    float,
    format,
    hash,
    hex,
    int,
    oct,
    ord,
    pow,
    repr,
    round,
    slice,
    str,
    sorted,
    frozenset,
)
for _fn in _PURE:
    BUILTINS[_fn] = None


def _builtin(fn: Any) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        BUILTINS[fn] = handler
        return handler

    return register


class BuiltinVariable(Variable):
    """A builtin function or type used as a function (`len`, `list`, `math.sqrt`)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def python_type(self) -> type:
        return type(self.fn)

    def identity(self) -> object:
        return self.fn

    def realize(self) -> Any:
        return self.fn

    def is_constant(self) -> bool:
        return isinstance(self.fn, type)

    def constant(self) -> Any:
        return self.fn

    def describe(self) -> str:
        return f"the builtin {getattr(self.fn, '__name__', self.fn)}"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result

        if not isinstance(self.fn, type):
            return super().getattr(frame, name)
        try:
            return wrap_result(frame, getattr(self.fn, name))
        except AttributeError as error:
            raise Unsupported(f"reading a missing attribute ({error})") from error

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.builder import wrap_result
        from ember.capture.variables.tensor import TensorVariable
        from ember.capture.variables.torch import call_traced

        handler = BUILTINS.get(self.fn)
        if handler is not None:
            return handler(frame, args, kwargs)
        everything = [*args, *kwargs.values()]
        if all(_plain(arg) for arg in everything):
            real_args = [arg.realize() for arg in args]
            real_kwargs = {key: arg.realize() for key, arg in kwargs.items()}
            if _makes_text(self.fn):  # str(SymInt) would print the symbol's name
                real_args = [concrete_value(arg) for arg in real_args]
                real_kwargs = {key: concrete_value(arg) for key, arg in real_kwargs.items()}
            try:
                return wrap_result(frame, self.fn(*real_args, **real_kwargs))
            except Exception as error:  # noqa: BLE001
                raise Unsupported(f"a builtin call that raises {type(error).__name__}") from error
        if self.fn is bool and len(args) == 1:
            return ConstantVariable(args[0].truth(frame))
        if self.fn in (abs, pow, round) and any(isinstance(a, TensorVariable) for a in args):
            real = [arg.realize() for arg in args]
            return wrap_result(frame, call_traced(frame, lambda: self.fn(*real)))
        raise Unsupported(f"calling {self.describe()} on {', '.join(a.describe() for a in args)}")


def _makes_text(fn: Any) -> bool:
    """Whether `fn` turns its arguments into text or a hash (str, format, a str's method)."""
    return fn in (str, repr, format, ascii, hash) or isinstance(getattr(fn, "__self__", None), str)


def _plain(value: Variable) -> bool:
    """A constant, or a list/tuple/dict/set of them: safe to hand to a builtin for real."""
    if value.is_constant() or isinstance(value, SetVariable):
        return True
    if isinstance(value, SequenceVariable):
        return all(_plain(item) for item in value.values)
    if isinstance(value, DictVariable):
        return all(_plain(item) for item in value.entries.values())
    return False


def _sequence(frame: Frame, values: list[Variable]) -> ListVariable:
    return ListVariable(values)


@_builtin(len)
def _len(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    from ember.capture.variables.modules import ModuleVariable
    from ember.capture.variables.tensor import TensorVariable

    (value,) = args
    if isinstance(value, SequenceVariable):
        return ConstantVariable(len(value.values))
    if isinstance(value, DictVariable):
        return ConstantVariable(len(value.entries))
    if isinstance(value, SetVariable):
        return ConstantVariable(len(value.members))
    if isinstance(value, DictViewVariable):
        return ConstantVariable(value.length())
    if isinstance(value, ModuleVariable):
        return ConstantVariable(value.length())
    if isinstance(value, TensorVariable):
        return ConstantVariable(len(value.tensor))
    if value.is_constant():
        return ConstantVariable(len(value.constant()))
    length = getattr(value, "length", None)  # a new object's __len__, inlined
    if length is not None:
        return length(frame)
    raise Unsupported(f"len() of {value.describe()}")


@_builtin(range)
def _range(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ConstantVariable(range(*[arg.constant() for arg in args]))


@_builtin(enumerate)
def _enumerate(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    start = (args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))).constant()
    values = args[0].items(frame)
    return IteratorVariable(
        [TupleVariable([ConstantVariable(start + i), v]) for i, v in enumerate(values)]
    )


@_builtin(zip)
def _zip(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    columns = [arg.items(frame) for arg in args]
    if kwargs.get("strict") is not None and kwargs["strict"].constant():
        if len({len(column) for column in columns}) > 1:
            raise Unsupported("zip(strict=True) of iterables of different lengths (ValueError)")
    return IteratorVariable([TupleVariable(list(row)) for row in zip(*columns)])


@_builtin(reversed)
def _reversed(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return IteratorVariable(list(reversed(args[0].items(frame))))


@_builtin(iter)
def _iter(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if isinstance(args[0], IteratorVariable):
        return args[0]
    return IteratorVariable(args[0].items(frame))


@_builtin(next)
def _next(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    iterator = args[0]
    if not isinstance(iterator, IteratorVariable):
        raise Unsupported(f"next() of {iterator.describe()}")
    value = iterator.next()
    if value is None:
        if len(args) > 1:
            return args[1]
        raise Unsupported("next() of an exhausted iterator (StopIteration)")
    return value


@_builtin(list)
def _list(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ListVariable(args[0].items(frame) if args else [])


@_builtin(tuple)
def _tuple(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return TupleVariable(args[0].items(frame) if args else [])


@_builtin(set)
def _set(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return SetVariable(args[0].items(frame) if args else [])


@_builtin(dict)
def _dict(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    entries: dict[Any, Variable] = {}
    if args:
        source = args[0]
        if isinstance(source, DictVariable):
            entries.update(source.entries)
        else:
            for pair in source.items(frame):
                key, value = pair.items(frame)
                entries[key.constant()] = value
    entries.update(kwargs)
    return DictVariable(entries)


@_builtin(isinstance)
def _isinstance(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    value, classes = args
    return ConstantVariable(issubclass(value.python_type(), classes.constant()))


@_builtin(issubclass)
def _issubclass(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ConstantVariable(issubclass(args[0].constant(), args[1].constant()))


@_builtin(type)
def _type(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if len(args) != 1:
        raise Unsupported("creating a class with type(name, bases, namespace)")
    return ConstantVariable(args[0].python_type())


@_builtin(callable)
def _callable(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    from ember.capture.variables.tensor import TensorVariable

    value = args[0]
    if isinstance(value, (TensorVariable, SequenceVariable, DictVariable, SetVariable)):
        return ConstantVariable(False)
    if value.is_constant():
        return ConstantVariable(callable(value.constant()))
    return ConstantVariable(True)


@_builtin(getattr)
def _getattr(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    name = args[1].constant()
    if len(args) > 2 and not _has(args[0], name):
        return args[2]
    return args[0].getattr(frame, name)


@_builtin(hasattr)
def _hasattr(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ConstantVariable(_has(args[0], args[1].constant()))


def _has(value: Variable, name: str) -> bool:
    from ember.capture.variables.tensor import TensorVariable

    if isinstance(value, TensorVariable):
        return hasattr(value.tensor, name)
    has_attribute = getattr(value, "has_attribute", None)  # an object made while capturing
    if has_attribute is not None:
        return bool(has_attribute(name))
    target = value.identity()
    if target is value:
        raise Unsupported(f"hasattr() on {value.describe()}")
    return hasattr(target, name)


def _extreme(pick: Callable[..., Any]) -> Handler:
    def handler(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        values = args[0].items(frame) if len(args) == 1 else args
        if kwargs or not all(value.is_constant() for value in values):
            raise Unsupported(f"{pick.__name__}() over non-constant values", "use torch.maximum")
        return ConstantVariable(pick(value.constant() for value in values))

    return handler


BUILTINS[min] = _extreme(min)
BUILTINS[max] = _extreme(max)


@_builtin(sum)
def _sum(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    from ember.capture.variables.operators import binary

    total = args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))
    for value in args[0].items(frame):
        total = binary(frame, operator.add, total, value)
    return total


@_builtin(map)
def _map(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    fn, *iterables = args
    columns = [iterable.items(frame) for iterable in iterables]
    return IteratorVariable([fn.call(frame, list(row), {}) for row in zip(*columns)])


@_builtin(filter)
def _filter(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    fn, iterable = args
    kept = []
    for value in iterable.items(frame):
        test = value if fn.is_constant() and fn.constant() is None else fn.call(frame, [value], {})
        if test.truth(frame):
            kept.append(value)
    return IteratorVariable(kept)


@_builtin(print)
def _print(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    raise Unsupported.of("print")


def _refuse(name: str) -> Handler:
    def handler(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        raise Unsupported(f"calling {name}() inside a compiled function")

    return handler


for _name in (
    "id",
    "vars",
    "globals",
    "locals",
    "open",
    "input",
    "exec",
    "eval",
    "__import__",
    "object",
):
    BUILTINS[getattr(builtins, _name)] = _refuse(_name)


@_builtin(any)
def _any(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ConstantVariable(any(value.truth(frame) for value in args[0].items(frame)))


@_builtin(all)
def _all(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return ConstantVariable(all(value.truth(frame) for value in args[0].items(frame)))


@_builtin(sorted)
def _sorted(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if set(kwargs) - {"reverse"}:
        raise Unsupported("sorted() with a key function")
    reverse = bool(kwargs["reverse"].constant()) if "reverse" in kwargs else False
    values = sorted((value.constant() for value in args[0].items(frame)), reverse=reverse)
    return ListVariable([ConstantVariable(value) for value in values])


@_builtin(inspect.signature)
def _signature(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    """inspect.signature() of a function, method, module or class known while capturing:
    computed for real (a Signature is immutable; the callable is guarded where it was read)."""
    from ember.capture.variables.functions import BoundMethodVariable, FunctionVariable
    from ember.capture.variables.modules import ModuleVariable

    target = args[0]
    options = {key: value.constant() for key, value in kwargs.items()}
    real: Any = None
    if isinstance(target, FunctionVariable) and target.fn is not None:
        real = target.fn
    elif isinstance(target, BoundMethodVariable) and isinstance(target.function, FunctionVariable):
        if target.function.fn is not None:
            real = types.MethodType(target.function.fn, object())  # drops the receiver
    elif isinstance(target, ModuleVariable):
        real = target.module
    elif isinstance(target, BuiltinVariable):
        real = target.fn
    elif target.is_constant():
        real = target.constant()
    if real is None:
        raise Unsupported(f"inspect.signature() of {target.describe()}")
    try:
        return ConstantVariable(inspect.signature(real, **options))
    except (TypeError, ValueError) as error:
        raise Unsupported(f"inspect.signature() that raises {type(error).__name__}") from error


@_builtin(copy.deepcopy)
def _deepcopy(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    from ember.capture.variables.copies import deepcopy_variable

    if len(args) != 1 or kwargs:
        raise Unsupported("copy.deepcopy() with a memo")
    return deepcopy_variable(frame, args[0])


@_builtin(setattr)
def _setattr(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    """setattr(obj, name, value): as `obj.name = value` (a side effect where it must be)."""
    target, name, value = args
    target.setattr(frame, name.constant(), value)
    return ConstantVariable(None)


@_builtin(delattr)
def _delattr(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    """delattr() of an object made or copied while capturing (no one else sees it)."""
    target, name = args
    remove = getattr(target, "delattr", None)
    if remove is None:
        raise Unsupported(f"delattr() of {target.describe()}")
    remove(name.constant())
    return ConstantVariable(None)
