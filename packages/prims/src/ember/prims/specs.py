"""What a value is, without its data: tensor specs, scalar specs and symbols.

A size or stride is an `int` or a sympy expression over named symbols (`SymSize`). Each
symbol is declared once on the Graph with a value range and a hint (an example value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import sympy
import torch

# A size, stride or storage offset: a plain int, or a sympy integer expression over symbols.
SymSize: TypeAlias = int | sympy.Expr

# Stable names for every dtype the format can carry; names are the torch attribute names.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "complex128",
        "complex64",
        "complex32",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "qint8",
        "quint8",
        "qint32",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

LAYOUTS: dict[str, torch.layout] = {
    "strided": torch.strided,
    "sparse_coo": torch.sparse_coo,
    "sparse_csr": torch.sparse_csr,
    "sparse_csc": torch.sparse_csc,
    "sparse_bsr": torch.sparse_bsr,
    "sparse_bsc": torch.sparse_bsc,
    "jagged": torch.jagged,
}
LAYOUT_NAMES: dict[torch.layout, str] = {layout: name for name, layout in LAYOUTS.items()}

MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
    "preserve_format": torch.preserve_format,
}
MEMORY_FORMAT_NAMES: dict[torch.memory_format, str] = {
    fmt: name for name, fmt in MEMORY_FORMATS.items()
}

# Short dtype spellings used when printing graphs (`f32[8, 16]`).
DTYPE_ABBREVIATIONS: dict[torch.dtype, str] = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


@dataclass(frozen=True)
class SymbolInfo:
    """A named size symbol: its inclusive value range (upper None = unbounded) and a hint."""

    name: str
    lower: int = 0
    upper: int | None = None
    hint: int | None = None

    def sympy(self) -> sympy.Symbol:
        return symbol(self.name)


def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol ember uses for a size named `name` (integer, non-negative)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


@dataclass(frozen=True)
class TensorSpec:
    """dtype, shape, strides, storage offset, device and requires_grad of a tensor value."""

    dtype: torch.dtype
    shape: tuple[SymSize, ...]
    strides: tuple[SymSize, ...]
    device: torch.device
    requires_grad: bool = False
    storage_offset: SymSize = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_static(self) -> bool:
        sizes = (*self.shape, *self.strides, self.storage_offset)
        return all(isinstance(size, int) for size in sizes)

    def free_symbols(self) -> set[str]:
        names: set[str] = set()
        for size in (*self.shape, *self.strides, self.storage_offset):
            if isinstance(size, sympy.Expr):
                names.update(str(s) for s in size.free_symbols)
        return names

    def short(self) -> str:
        """`f32[8, s0]` style, used when printing graphs."""
        name = DTYPE_ABBREVIATIONS.get(self.dtype, DTYPE_NAMES.get(self.dtype, str(self.dtype)))
        return f"{name}[{', '.join(str(size) for size in self.shape)}]"

    @staticmethod
    def of(tensor: torch.Tensor) -> TensorSpec:
        """The static spec of a real tensor."""
        return TensorSpec(
            dtype=tensor.dtype,
            shape=tuple(int(s) for s in tensor.shape),
            strides=tuple(int(s) for s in tensor.stride()),
            device=tensor.device,
            requires_grad=tensor.requires_grad,
            storage_offset=int(tensor.storage_offset()),
        )


@dataclass(frozen=True)
class ScalarSpec:
    """A Python scalar value produced by a node: its type and, if symbolic, its expression."""

    type: str  # "int", "float", "bool", "complex"
    expr: sympy.Expr | None = None

    def short(self) -> str:
        return self.type if self.expr is None else f"{self.type}({self.expr})"


Spec: TypeAlias = TensorSpec | ScalarSpec
