"""Python operators on Variables: arithmetic, comparisons, identity, containment, indexing.

Constants compute for real; anything involving a tensor runs on tracing tensors (so the
tracer records it); containers concatenate and repeat at the Variable level, keeping the
Variables they hold.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable, concrete_value
from ember.capture.variables.containers import (
    DictVariable,
    DictViewVariable,
    ListVariable,
    SequenceVariable,
    SetVariable,
)
from ember.capture.variables.dataclass_objects import DataclassVariable
from ember.capture.variables.modules import ModuleVariable
from ember.capture.variables.objects import UserObjectVariable
from ember.capture.variables.tensor import TensorVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

BinaryFn = Callable[[Any, Any], Any]

# The in-place operator of each binary operator (`+=` on a list extends it).
INPLACE: dict[BinaryFn, BinaryFn] = {
    operator.add: operator.iadd,
    operator.sub: operator.isub,
    operator.mul: operator.imul,
    operator.truediv: operator.itruediv,
    operator.floordiv: operator.ifloordiv,
    operator.mod: operator.imod,
    operator.pow: operator.ipow,
    operator.matmul: operator.imatmul,
    operator.and_: operator.iand,
    operator.or_: operator.ior,
    operator.xor: operator.ixor,
    operator.lshift: operator.ilshift,
    operator.rshift: operator.irshift,
}


_SET_OPERATORS = (operator.or_, operator.and_, operator.sub, operator.xor)


def _as_set(value: Variable) -> set[Any] | None:
    if isinstance(value, DictViewVariable):
        return value.keys()
    if isinstance(value, SetVariable):
        return set(value.members)
    return None


def binary(frame: Frame, op: BinaryFn, a: Variable, b: Variable, inplace: bool = False) -> Variable:
    """`a <op> b` (or `a <op>= b` when `inplace`)."""
    from ember.capture.variables.builder import wrap_result
    from ember.capture.variables.torch import call_traced

    real_op = INPLACE.get(op, op) if inplace else op
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        left, right = a.realize(), b.realize()
        return wrap_result(frame, call_traced(frame, lambda: real_op(left, right)))
    if a.is_constant() and b.is_constant():
        return wrap_result(frame, _constant_op(real_op, a.constant(), b.constant()))
    if isinstance(a, SequenceVariable):
        if op is operator.add and inplace and isinstance(a, ListVariable):
            a.check_mutable()
            a.values.extend(b.items(frame))
            return a
        if op is operator.add and isinstance(b, SequenceVariable) and type(a) is type(b):
            return type(a)(a.values + b.values)
        if op is operator.mul and b.is_constant():
            return type(a)(a.values * b.constant())
    if isinstance(b, SequenceVariable) and op is operator.mul and a.is_constant():
        return type(b)(b.values * a.constant())
    if op in _SET_OPERATORS and (
        isinstance(a, DictViewVariable) or isinstance(b, DictViewVariable)
    ):
        left, right = _as_set(a), _as_set(b)
        if left is not None and right is not None:
            return SetVariable([ConstantVariable(m) for m in _constant_op(op, left, right)])
    if isinstance(a, SetVariable) and isinstance(b, SetVariable) and op in _SET_OPERATORS:
        members = _constant_op(INPLACE[op] if inplace else op, set(a.members), b.members)
        if inplace:
            a.members = members
            return a
        return SetVariable([ConstantVariable(m) for m in members])
    if isinstance(a, DictVariable) and isinstance(b, DictVariable) and op is operator.or_:
        if inplace:
            a.check_mutable()
            a.entries.update(b.entries)
            return a
        return DictVariable({**a.entries, **b.entries})
    raise Unsupported(f"the operator {op.__name__} on {a.describe()} and {b.describe()}")


def unary(frame: Frame, op: Callable[[Any], Any], a: Variable) -> Variable:
    from ember.capture.variables.builder import wrap_result
    from ember.capture.variables.torch import call_traced

    if op is operator.not_:
        return ConstantVariable(not a.truth(frame))
    if isinstance(a, TensorVariable):
        return wrap_result(frame, call_traced(frame, lambda: op(a.realize())))
    if a.is_constant():
        return wrap_result(frame, _constant_op(op, a.constant()))
    raise Unsupported(f"the operator {op.__name__} on {a.describe()}")


def compare(frame: Frame, op: BinaryFn, a: Variable, b: Variable) -> Variable:
    """`a <op> b` for ==, !=, <, <=, >, >=."""
    from ember.capture.variables.builder import wrap_result
    from ember.capture.variables.torch import call_traced

    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        if (isinstance(a, TensorVariable) and isinstance(b, TensorVariable)) or _numeric(a, b):
            left, right = a.realize(), b.realize()
            return wrap_result(frame, call_traced(frame, lambda: op(left, right)))
    if a.is_constant() and b.is_constant():
        return ConstantVariable(_constant_op(op, a.constant(), b.constant()))
    if op in (operator.eq, operator.ne):
        same = _equal(frame, a, b)
        return ConstantVariable(same if op is operator.eq else not same)
    if isinstance(a, SequenceVariable) and isinstance(b, SequenceVariable):
        left, right = _constants(a), _constants(b)
        return ConstantVariable(op(left, right))
    if isinstance(a, SetVariable) and isinstance(b, SetVariable):
        return ConstantVariable(op(a.members, b.members))
    raise Unsupported(f"comparing {a.describe()} and {b.describe()}")


def identical(a: Variable, b: Variable) -> bool:
    """`a is b`."""
    return a is b or a.identity() is b.identity()


def contains(frame: Frame, container: Variable, item: Variable) -> bool:
    """`item in container`."""
    if isinstance(container, DictVariable):
        return item.constant() in container.entries
    if isinstance(container, SetVariable):
        return item.constant() in container.members
    if isinstance(container, DictViewVariable):
        if container.kind == "keys":
            return item.constant() in container.owner.entries
        return any(_equal(frame, value, item) for value in container.items(frame))
    if isinstance(container, ModuleVariable):
        return item.constant() in container.module._modules
    if isinstance(container, SequenceVariable):
        return any(_equal(frame, value, item) for value in container.values)
    if container.is_constant() and item.is_constant():
        return bool(item.constant() in container.constant())
    if isinstance(container, UserObjectVariable):
        method = container.python_method(frame, "__contains__")
        if method is not None:
            return method.call(frame, [item], {}).truth(frame)
    raise Unsupported(f"the `in` operator on {container.describe()}")


def getitem(frame: Frame, obj: Variable, index: Variable) -> Variable:
    """`obj[index]`."""
    from ember.capture.variables.builder import wrap_result
    from ember.capture.variables.torch import call_traced

    if isinstance(obj, TensorVariable):
        tensor, key = obj.realize(), index.realize()
        return wrap_result(frame, call_traced(frame, lambda: tensor[key]))
    if isinstance(obj, (SequenceVariable, DictVariable, ModuleVariable, DataclassVariable)):
        return obj.getitem(frame, index)
    if obj.is_constant():
        return wrap_result(frame, _constant_op(operator.getitem, obj.constant(), index.constant()))
    if isinstance(obj, UserObjectVariable):
        method = obj.python_method(frame, "__getitem__")
        if method is not None:
            return method.call(frame, [index], {})
    raise Unsupported(f"indexing {obj.describe()}")


def setitem(frame: Frame, obj: Variable, index: Variable, value: Variable) -> None:
    """`obj[index] = value`."""
    from ember.capture.variables.torch import call_traced

    if isinstance(obj, TensorVariable):
        tensor, key, new = obj.realize(), index.realize(), value.realize()
        call_traced(frame, lambda: tensor.__setitem__(key, new))
        return
    if isinstance(obj, (ListVariable, DictVariable)):
        obj.setitem(frame, index, value)
        return
    raise Unsupported(f"assigning an item of {obj.describe()}")


def delitem(frame: Frame, obj: Variable, index: Variable) -> None:
    if isinstance(obj, ListVariable):
        obj.check_mutable()
        del obj.values[index.constant()]
        return
    if isinstance(obj, DictVariable):
        obj.check_mutable()
        del obj.entries[index.constant()]
        return
    raise Unsupported(f"deleting an item of {obj.describe()}")


def _equal(frame: Frame, a: Variable, b: Variable) -> bool:
    if identical(a, b):
        return True
    if a.is_constant() and b.is_constant():
        return bool(a.constant() == b.constant())
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return False
    if isinstance(a, SequenceVariable) and isinstance(b, SequenceVariable):
        return len(a.values) == len(b.values) and all(
            _equal(frame, x, y) for x, y in zip(a.values, b.values)
        )
    if isinstance(a, SetVariable) and isinstance(b, SetVariable):
        return a.members == b.members
    return False


def _numeric(a: Variable, b: Variable) -> bool:
    other = b if isinstance(a, TensorVariable) else a
    return other.is_constant() and isinstance(other.constant(), (bool, int, float, complex))


def _constants(sequence: SequenceVariable) -> tuple[Any, ...]:
    return tuple(item.constant() for item in sequence.values)


def _constant_op(op: Callable[..., Any], *values: Any) -> Any:
    if any(isinstance(value, str) for value in values):  # "%s" % SymInt prints its name
        values = tuple(concrete_value(value) for value in values)
    try:
        return op(*values)
    except Exception as error:  # noqa: BLE001 - Python raised: capture cannot model raising yet
        raise Unsupported(f"an operation that raises {type(error).__name__}: {error}") from error
