"""Node arguments and signature leaves as JSON: references and every literal ATen takes.

null, booleans, strings, finite floats and integers up to ±2**53 are plain JSON; arrays are
lists; everything else is a one-key tagged object ({"$ref": "x"}, {"$dtype": "float32"},
{"$tuple": [...]}, {"$sym": tree}, ...). Decoding checks each reference against its scope.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import sympy
import torch

from ember.prims.errors import GraphFormatError
from ember.prims.graph import Ref, SubgraphRef
from ember.prims.serialize.limits import MAX_ARG_DEPTH, MAX_DEVICE_INDEX
from ember.prims.serialize.reader import Field, quote
from ember.prims.serialize.scalars import decode_float, encode_float, encode_int, is_float
from ember.prims.serialize.symexpr import decode_expr, encode_expr
from ember.prims.specs import (
    DTYPE_NAMES,
    DTYPES,
    LAYOUT_NAMES,
    LAYOUTS,
    MEMORY_FORMAT_NAMES,
    MEMORY_FORMATS,
)

# Device types the format names; torch accepts these in torch.device(type, index).
DEVICE_TYPES = (
    "cpu", "cuda", "meta", "mps", "xpu", "hip", "xla", "hpu", "mtia", "privateuseone",
    "lazy", "ipu", "maia", "ve", "vulkan", "fpga",
)  # fmt: skip
_DEVICE = re.compile(r"([a-z][a-z0-9_]{0,31})(?::(0|[1-9][0-9]{0,2}))?")


class Scope(Protocol):
    """What a decoded argument may refer to."""

    def check_value(self, name: str, field: Field) -> None: ...

    def check_subgraph(self, name: str, field: Field) -> None: ...

    @property
    def symbols(self) -> dict[str, Any]: ...


# ---- encoding --------------------------------------------------------------------------------


def encode_arg(value: Any, path: str, depth: int = 0) -> Any:
    """The JSON form of one argument; GraphFormatError for anything a Graph cannot hold."""
    if depth > MAX_ARG_DEPTH:
        raise GraphFormatError(f"cannot serialize {path}: nested deeper than {MAX_ARG_DEPTH}")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return encode_int(value, path)
    if kind is float:
        return encode_float(value)
    if kind is complex:
        return {"$complex": [encode_float(value.real), encode_float(value.imag)]}
    if kind is list:
        return [encode_arg(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if kind is tuple:
        return {
            "$tuple": [encode_arg(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
        }
    if kind is Ref:
        return {"$ref": value.name}
    if kind is SubgraphRef:
        return {"$subgraph": value.name}
    if isinstance(value, torch.dtype):
        return {"$dtype": encode_dtype(value, path)}
    if isinstance(value, torch.device):
        return {"$device": encode_device(value, path)}
    if isinstance(value, torch.layout) and value in LAYOUT_NAMES:
        return {"$layout": LAYOUT_NAMES[value]}
    if isinstance(value, torch.memory_format) and value in MEMORY_FORMAT_NAMES:
        return {"$memory_format": MEMORY_FORMAT_NAMES[value]}
    if isinstance(value, sympy.Basic):
        return {"$sym": encode_expr(value, path)}
    raise GraphFormatError(
        f"cannot serialize {path}: a {kind.__name__} ({value!r}) is not a Graph literal"
    )


def encode_dtype(dtype: torch.dtype, path: str) -> str:
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise GraphFormatError(f"cannot serialize {path}: dtype {dtype} has no name in the format")
    return name


def encode_device(device: torch.device, path: str) -> str:
    if device.type not in DEVICE_TYPES or (
        device.index is not None and not 0 <= device.index <= MAX_DEVICE_INDEX
    ):
        raise GraphFormatError(f"cannot serialize {path}: device {device} is not in the format")
    return str(device)


# ---- decoding --------------------------------------------------------------------------------


def decode_arg(field: Field, scope: Scope, depth: int = 0) -> Any:
    """The argument a JSON value stands for; references must resolve in `scope`."""
    if depth > MAX_ARG_DEPTH:
        field.fail(f"argument nested deeper than {MAX_ARG_DEPTH}")
    value = field.value
    if value is None or isinstance(value, (bool, str)):
        return value
    if field.is_integer():
        return field.integer()
    if is_float(field):
        return decode_float(field)
    if isinstance(value, list):
        return [decode_arg(item, scope, depth + 1) for item in field.array()]
    if not isinstance(value, dict) or len(value) != 1:
        keys = sorted(value)[:8] if isinstance(value, dict) else []
        field.fail(f"expected a one-key tagged object like {{'$ref': name}}, got keys {keys}")
    tag, payload = next(iter(value.items()))
    inner = field.child(payload, f".{tag}")
    if tag == "$ref":
        name = inner.string()
        scope.check_value(name, inner)
        return Ref(name)
    if tag == "$subgraph":
        name = inner.string()
        scope.check_subgraph(name, inner)
        return SubgraphRef(name)
    if tag == "$tuple":
        return tuple(decode_arg(item, scope, depth + 1) for item in inner.array())
    if tag == "$complex":
        real, imag = inner.array(length=2)
        return complex(decode_float(real), decode_float(imag))
    if tag == "$dtype":
        return decode_dtype(inner)
    if tag == "$device":
        return decode_device(inner)
    if tag == "$layout":
        return _lookup(inner, LAYOUTS, "layout")
    if tag == "$memory_format":
        return _lookup(inner, MEMORY_FORMATS, "memory format")
    if tag == "$sym":
        return decode_expr(inner, scope.symbols)
    field.fail(f"unknown literal tag {quote(tag)}")


def decode_dtype(field: Field) -> torch.dtype:
    return _lookup(field, DTYPES, "dtype")


def decode_device(field: Field) -> torch.device:
    text = field.string()
    match = _DEVICE.fullmatch(text)
    if match is None or match.group(1) not in DEVICE_TYPES:
        field.fail(
            f"unknown device {quote(text)}; expected a type of {list(DEVICE_TYPES)} "
            f"with an optional index 0..{MAX_DEVICE_INDEX}, like 'cuda:0'"
        )
    index = match.group(2)
    if index is None:
        return torch.device(match.group(1))
    if int(index) > MAX_DEVICE_INDEX:
        field.fail(f"device index {index} is above {MAX_DEVICE_INDEX}")
    return torch.device(match.group(1), int(index))


def _lookup(field: Field, table: dict[str, Any], what: str) -> Any:
    name = field.string()
    if name not in table:
        field.fail(f"unknown {what} {quote(name)}")
    return table[name]
