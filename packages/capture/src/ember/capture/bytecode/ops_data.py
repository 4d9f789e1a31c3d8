"""Handlers for operators, subscripts, building and unpacking containers, and strings."""

from __future__ import annotations

import operator
from typing import Any

from bytecode import BinaryOp, Compare, Intrinsic1Op

from ember.capture.bytecode.frame import Frame, Step
from ember.capture.bytecode.registry import handler
from ember.capture.unsupported import Unsupported
from ember.capture.variables import operators
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable, concrete_value
from ember.capture.variables.containers import (
    DictVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
)

PY311 = ((3, 11),)
PY312 = ((3, 12),)

_BINARY: dict[str, Any] = {
    "ADD": operator.add,
    "AND": operator.and_,
    "FLOOR_DIVIDE": operator.floordiv,
    "LSHIFT": operator.lshift,
    "MATRIX_MULTIPLY": operator.matmul,
    "MULTIPLY": operator.mul,
    "REMAINDER": operator.mod,
    "OR": operator.or_,
    "POWER": operator.pow,
    "RSHIFT": operator.rshift,
    "SUBTRACT": operator.sub,
    "TRUE_DIVIDE": operator.truediv,
    "XOR": operator.xor,
}
_COMPARE: dict[Compare, Any] = {
    Compare.LT: operator.lt,
    Compare.LE: operator.le,
    Compare.EQ: operator.eq,
    Compare.NE: operator.ne,
    Compare.GT: operator.gt,
    Compare.GE: operator.ge,
}


@handler("BINARY_OP")
def binary_op(frame: Frame, instr: Step) -> None:
    kind: BinaryOp = instr.arg
    inplace = kind.name.startswith("INPLACE_")
    op = _BINARY[kind.name.removeprefix("INPLACE_")]
    right = frame.pop()
    left = frame.pop()
    frame.push(operators.binary(frame, op, left, right, inplace))


@handler("UNARY_NEGATIVE")
def unary_negative(frame: Frame, instr: Step) -> None:
    frame.push(operators.unary(frame, operator.neg, frame.pop()))


@handler("UNARY_POSITIVE", versions=PY311)
def unary_positive(frame: Frame, instr: Step) -> None:
    frame.push(operators.unary(frame, operator.pos, frame.pop()))


@handler("UNARY_INVERT")
def unary_invert(frame: Frame, instr: Step) -> None:
    frame.push(operators.unary(frame, operator.invert, frame.pop()))


@handler("UNARY_NOT")
def unary_not(frame: Frame, instr: Step) -> None:
    frame.push(operators.unary(frame, operator.not_, frame.pop()))


@handler("COMPARE_OP")
def compare_op(frame: Frame, instr: Step) -> None:
    right = frame.pop()
    left = frame.pop()
    frame.push(operators.compare(frame, _COMPARE[instr.arg], left, right))


@handler("IS_OP")
def is_op(frame: Frame, instr: Step) -> None:
    right = frame.pop()
    left = frame.pop()
    frame.push(ConstantVariable(operators.identical(left, right) != bool(instr.arg)))


@handler("CONTAINS_OP")
def contains_op(frame: Frame, instr: Step) -> None:
    container = frame.pop()
    item = frame.pop()
    frame.push(ConstantVariable(operators.contains(frame, container, item) != bool(instr.arg)))


@handler("BINARY_SUBSCR")
def binary_subscr(frame: Frame, instr: Step) -> None:
    index = frame.pop()
    obj = frame.pop()
    frame.push(operators.getitem(frame, obj, index))


@handler("STORE_SUBSCR")
def store_subscr(frame: Frame, instr: Step) -> None:
    index = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    operators.setitem(frame, obj, index, value)


@handler("DELETE_SUBSCR")
def delete_subscr(frame: Frame, instr: Step) -> None:
    index = frame.pop()
    obj = frame.pop()
    operators.delitem(frame, obj, index)


def _slice(frame: Frame, parts: list[Variable]) -> Variable:
    if all(part.is_constant() for part in parts):
        return ConstantVariable(slice(*[part.constant() for part in parts]))
    raise Unsupported("a slice with non-constant bounds")


@handler("BINARY_SLICE", versions=PY312)
def binary_slice(frame: Frame, instr: Step) -> None:
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    frame.push(operators.getitem(frame, obj, _slice(frame, [start, stop])))


@handler("STORE_SLICE", versions=PY312)
def store_slice(frame: Frame, instr: Step) -> None:
    stop = frame.pop()
    start = frame.pop()
    obj = frame.pop()
    value = frame.pop()
    operators.setitem(frame, obj, _slice(frame, [start, stop]), value)


@handler("BUILD_SLICE")
def build_slice(frame: Frame, instr: Step) -> None:
    frame.push(_slice(frame, frame.popn(instr.arg)))


@handler("BUILD_TUPLE")
def build_tuple(frame: Frame, instr: Step) -> None:
    frame.push(TupleVariable(frame.popn(instr.arg)))


@handler("BUILD_LIST")
def build_list(frame: Frame, instr: Step) -> None:
    frame.push(ListVariable(frame.popn(instr.arg)))


@handler("BUILD_SET")
def build_set(frame: Frame, instr: Step) -> None:
    frame.push(SetVariable(frame.popn(instr.arg)))


@handler("BUILD_MAP")
def build_map(frame: Frame, instr: Step) -> None:
    flat = frame.popn(2 * instr.arg)
    frame.push(DictVariable({k.constant(): v for k, v in zip(flat[::2], flat[1::2])}))


@handler("BUILD_CONST_KEY_MAP")
def build_const_key_map(frame: Frame, instr: Step) -> None:
    keys = frame.pop().constant()
    values = frame.popn(instr.arg)
    frame.push(DictVariable(dict(zip(keys, values))))


@handler("LIST_APPEND")
def list_append(frame: Frame, instr: Step) -> None:
    value = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, ListVariable)
    # A comprehension's list arrives from outside when a 3.12 (inlined) comprehension
    # resumes after a graph break: the append must be replayed onto it.
    target.check_mutable()
    target.values.append(value)


@handler("SET_ADD")
def set_add(frame: Frame, instr: Step) -> None:
    value = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, SetVariable)
    target.members.add(value.constant())


@handler("MAP_ADD")
def map_add(frame: Frame, instr: Step) -> None:
    value = frame.pop()
    key = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, DictVariable)
    target.check_mutable()
    target.entries[key.constant()] = value


@handler("LIST_EXTEND")
def list_extend(frame: Frame, instr: Step) -> None:
    values = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, ListVariable)
    target.check_mutable()
    target.values.extend(values.items(frame))


@handler("SET_UPDATE")
def set_update(frame: Frame, instr: Step) -> None:
    values = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, SetVariable)
    target.members.update(value.constant() for value in values.items(frame))


@handler("DICT_UPDATE", "DICT_MERGE")
def dict_update(frame: Frame, instr: Step) -> None:
    values = frame.pop()
    target = frame.stack[-instr.arg]
    assert isinstance(target, DictVariable)
    if not isinstance(values, DictVariable):
        raise Unsupported(f"unpacking {values.describe()} with **")
    target.entries.update(values.entries)


@handler("LIST_TO_TUPLE", versions=PY311)
def list_to_tuple(frame: Frame, instr: Step) -> None:
    frame.push(TupleVariable(frame.pop().items(frame)))


@handler("CALL_INTRINSIC_1", versions=PY312)
def call_intrinsic_1(frame: Frame, instr: Step) -> None:
    kind: Intrinsic1Op = instr.arg
    if kind is Intrinsic1Op.INTRINSIC_LIST_TO_TUPLE:
        frame.push(TupleVariable(frame.pop().items(frame)))
    elif kind is Intrinsic1Op.INTRINSIC_UNARY_POSITIVE:
        frame.push(operators.unary(frame, operator.pos, frame.pop()))
    else:
        raise Unsupported(f"the intrinsic {kind.name}")


@handler("UNPACK_SEQUENCE")
def unpack_sequence(frame: Frame, instr: Step) -> None:
    values = frame.pop().items(frame)
    if len(values) != instr.arg:
        raise Unsupported(f"unpacking {len(values)} values into {instr.arg} names (ValueError)")
    for value in reversed(values):
        frame.push(value)


@handler("UNPACK_EX")
def unpack_ex(frame: Frame, instr: Step) -> None:
    before, after = instr.arg & 0xFF, instr.arg >> 8
    values = frame.pop().items(frame)
    if len(values) < before + after:
        raise Unsupported("unpacking too few values (ValueError)")
    middle = ListVariable(values[before : len(values) - after])
    for value in reversed(values[len(values) - after :]):
        frame.push(value)
    frame.push(middle)
    for value in reversed(values[:before]):
        frame.push(value)


_CONVERSIONS = {0: None, 1: str, 2: repr, 3: ascii}


@handler("FORMAT_VALUE")
def format_value(frame: Frame, instr: Step) -> None:
    spec = concrete_value(frame.pop().constant()) if instr.arg & 0x04 else ""
    value = concrete_value(frame.pop().constant())  # text shows a symbolic size's value
    convert = _CONVERSIONS[instr.arg & 0x03]
    if convert is not None:
        value = convert(value)
    frame.push(ConstantVariable(format(value, spec)))


@handler("BUILD_STRING")
def build_string(frame: Frame, instr: Step) -> None:
    frame.push(ConstantVariable("".join(part.constant() for part in frame.popn(instr.arg))))
