"""Constant tensors in the blob: raw little-endian bytes of the contiguous data.

The writer appends each tensor at a 64-byte aligned offset. The reader checks dtype, shape,
byte count and bounds before it copies anything, and the byte counts of all constants
together may not exceed the blob, so a document cannot make it allocate more than it holds.
"""

from __future__ import annotations

import ctypes
import math
import sys
from typing import Any

import torch

from ember.prims.errors import GraphFormatError
from ember.prims.serialize.limits import MAX_NDIM, MAX_SIZE
from ember.prims.serialize.literals import decode_dtype, encode_dtype
from ember.prims.serialize.reader import Field
from ember.prims.serialize.scalars import encode_int

ALIGNMENT = 64
# Quantized dtypes carry scales and zero points that raw bytes do not hold.
_UNSUPPORTED = {torch.qint8, torch.quint8, torch.qint32}


def _swap_unit(dtype: torch.dtype) -> int:
    """The byte width whose order is swapped between little- and big-endian hosts."""
    return dtype.itemsize // 2 if dtype.is_complex else dtype.itemsize


def _byteswapped(flat: torch.Tensor, unit: int) -> torch.Tensor:
    if unit <= 1 or flat.numel() == 0:
        return flat
    return flat.reshape(-1, unit).flip(-1).reshape(-1).contiguous()


class BlobWriter:
    """Collects constant bytes; `entry` returns a constant's JSON record."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def entry(self, tensor: torch.Tensor, path: str) -> dict[str, Any]:
        if not isinstance(tensor, torch.Tensor):
            raise GraphFormatError(
                f"cannot serialize {path}: a {type(tensor).__name__} is not a tensor"
            )
        if tensor.layout is not torch.strided or tensor.device.type == "meta":
            raise GraphFormatError(
                f"cannot serialize {path}: only strided tensors with data can be constants "
                f"(got layout {tensor.layout} on {tensor.device})"
            )
        if (
            tensor.dtype in _UNSUPPORTED
            or tensor.ndim > MAX_NDIM
            or any(size > MAX_SIZE for size in tensor.shape)
        ):
            raise GraphFormatError(
                f"cannot serialize {path}: {tensor.dtype} tensors of {tensor.ndim} dims are not "
                f"supported as constants (no quantized dtypes, at most {MAX_NDIM} dims of at most "
                f"{MAX_SIZE})"
            )
        data = tensor_bytes(tensor)
        offset = (self.size + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        if offset > self.size:
            self.chunks.append(bytes(offset - self.size))
        self.chunks.append(data)
        self.size = offset + len(data)
        return {
            "dtype": encode_dtype(tensor.dtype, path),
            "shape": [encode_int(int(size), path) for size in tensor.shape],
            "requires_grad": bool(tensor.requires_grad),
            "offset": offset,
            "nbytes": len(data),
        }

    def getvalue(self) -> bytes:
        return b"".join(self.chunks)


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's elements in row-major order as little-endian bytes."""
    flat = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    raw = flat.view(torch.uint8)
    if sys.byteorder == "big":
        raw = _byteswapped(raw, _swap_unit(tensor.dtype))
    return ctypes.string_at(raw.data_ptr(), raw.numel())


class BlobReader:
    """Hands out constants from the blob while the total stays within its size."""

    def __init__(self, blob: memoryview) -> None:
        self.blob = blob
        self.remaining = len(blob)

    def constant(self, field: Field) -> torch.Tensor:
        members = field.object(("dtype", "shape", "requires_grad", "offset", "nbytes"))
        dtype = decode_dtype(members["dtype"])
        if dtype in _UNSUPPORTED:
            members["dtype"].fail(f"{dtype} constants are not supported")
        dims = members["shape"].array()
        if len(dims) > MAX_NDIM:
            members["shape"].fail(f"{len(dims)} dimensions; at most {MAX_NDIM} are allowed")
        shape = [dim.integer(0, MAX_SIZE) for dim in dims]
        requires_grad = members["requires_grad"].boolean()
        if requires_grad and not (dtype.is_floating_point or dtype.is_complex):
            members["requires_grad"].fail(f"a {dtype} tensor cannot require gradients")
        offset = members["offset"].integer(0, MAX_SIZE)
        nbytes = members["nbytes"].integer(0, MAX_SIZE)
        expected = math.prod(shape) * dtype.itemsize
        if nbytes != expected:
            members["nbytes"].fail(
                f"{nbytes} bytes, but {dtype} of shape {shape} takes {expected} bytes"
            )
        if offset + nbytes > len(self.blob):
            field.fail(
                f"data at bytes {offset}..{offset + nbytes} lies beyond the blob "
                f"of {len(self.blob)} bytes"
            )
        if nbytes > self.remaining:
            field.fail("the constants together claim more bytes than the blob holds")
        self.remaining -= nbytes
        if nbytes == 0:
            try:
                tensor = torch.empty(shape, dtype=dtype)
            except RuntimeError as error:  # sizes whose product overflows int64
                members["shape"].fail(f"torch cannot make an empty tensor of this shape: {error}")
        else:
            raw = torch.frombuffer(
                bytearray(self.blob[offset : offset + nbytes]), dtype=torch.uint8
            )
            if dtype == torch.bool and int(raw.max()) > 1:
                field.fail("a bool constant holds bytes other than 0 and 1")
            if sys.byteorder == "big":
                raw = _byteswapped(raw, _swap_unit(dtype))
            tensor = raw.view(dtype).reshape(shape)
        return tensor.requires_grad_(requires_grad)
