"""TMA operands of a GEMM template: when the Hopper tensor memory accelerator can read an
operand, and the Triton text of its descriptor and of its block loads.

A descriptor (`tl.make_tensor_descriptor`, built on the device: Triton needs a scratch
allocator, `gemm_choice.py` sets one) describes a 2-D matrix whose inner stride is 1, whose
outer stride and base are multiples of 16 bytes and whose rows do not overlap. An operand
stored the other way round (a transposed weight: `[N, K]` read as `[K, N]`) gets the
descriptor of its storage order and its block is transposed after the load (`.T`, which the
tensor cores take as it is). Loads past the matrix's edge read zeros, so edge tiles and the
K tail need no masks. Only unbatched 16-bit products (no convolution) use it; the runtime
still checks the operands' base pointers (16-byte alignment) on every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ember.inductor.templates.gemm import Gemm, Operand

TMA_DTYPES = frozenset({torch.float16, torch.bfloat16})
ALIGNMENT = 16  # bytes: the descriptor's base and outer stride


@dataclass(frozen=True)
class TmaOperand:
    """How one operand is read through a descriptor: its storage-order shape and strides,
    its block shape (constexpr names) and whether the loaded block is transposed."""

    name: str  # the descriptor's variable
    storage: str
    offset: int
    shape: tuple[int, int]
    strides: tuple[int, int]
    block: tuple[str, str]
    transposed: bool

    def load(self, row: str, column: str) -> str:
        """The block at (row, column) of the operand as the product reads it."""
        if self.transposed:
            return f"{self.name}.load([{column}, {row}]).T"
        return f"{self.name}.load([{row}, {column}])"


def tma_operands(gemm: Gemm) -> tuple[TmaOperand, TmaOperand] | None:
    """The two operands of `gemm` as descriptors, or None where TMA cannot read them."""
    if gemm.batch != 1 or gemm.conv is not None or gemm.dtype not in TMA_DTYPES:
        return None
    itemsize = torch.empty((), dtype=gemm.dtype).element_size()
    a = _operand("a_desc", gemm.a, (gemm.m, gemm.k), ("BLOCK_M", "BLOCK_K"), itemsize)
    b = _operand("b_desc", gemm.b, (gemm.k, gemm.n), ("BLOCK_K", "BLOCK_N"), itemsize)
    if a is None or b is None:
        return None
    return a, b


def _operand(
    name: str, operand: Operand, extents: tuple[int, int], block: tuple[str, str], itemsize: int
) -> TmaOperand | None:
    rows, columns = extents
    if (operand.offset * itemsize) % ALIGNMENT:
        return None
    if operand.col_stride == 1 and _outer_ok(operand.row_stride, columns, rows, itemsize):
        return TmaOperand(name, operand.storage, operand.offset, (rows, columns),
                          (max(operand.row_stride, columns), 1), block, False)  # fmt: skip
    if operand.row_stride == 1 and _outer_ok(operand.col_stride, rows, columns, itemsize):
        return TmaOperand(name, operand.storage, operand.offset, (columns, rows),
                          (max(operand.col_stride, rows), 1), (block[1], block[0]), True)  # fmt: skip
    return None


def _outer_ok(stride: int, inner: int, outer: int, itemsize: int) -> bool:
    """An outer stride TMA takes: 16-byte multiple, rows apart (one row: any)."""
    if outer == 1:
        return (max(stride, inner) * itemsize) % ALIGNMENT == 0
    return stride >= inner and (stride * itemsize) % ALIGNMENT == 0


def descriptor_line(operand: TmaOperand, pointer: str) -> str:
    """`<name> = tl.make_tensor_descriptor(...)` for `operand` at `pointer` (its storage)."""
    base = f"{pointer} + {operand.offset}" if operand.offset else pointer
    shape = f"[{operand.shape[0]}, {operand.shape[1]}]"
    strides = f"[{operand.strides[0]}, {operand.strides[1]}]"
    block = f"[{operand.block[0]}, {operand.block[1]}]"
    return (
        f"{operand.name} = tl.make_tensor_descriptor({base}, shape={shape}, strides={strides}, "
        f"block_shape={block})"
    )


__all__ = ["TmaOperand", "descriptor_line", "tma_operands"]
