"""Named tensors in the safetensors format, read and written without the safetensors package.

The format is 8 bytes of little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the raw little-endian data. Like Graph loading, reading
never imports or evaluates anything: it checks every dtype, shape and byte range against the
data before it copies a byte, and rejects malformed input with GraphFormatError. Files
written here read back with `safetensors.torch.load_file` and the other way round.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping

import torch

from ember.prims.errors import GraphFormatError
from ember.prims.serialize.constants import tensor_bytes
from ember.prims.serialize.limits import MAX_NDIM, MAX_SIZE

# safetensors' dtype names and torch's dtypes
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
_LENGTH = struct.Struct("<Q")
MAX_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit


def dumps_tensors(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None
) -> bytes:
    """The safetensors bytes of `tensors` (names sorted), with string `metadata`."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in NAMES:
            raise GraphFormatError(
                f"cannot save {name!r}: safetensors has no {tensor.dtype} (convert it first)"
            )
        data = tensor_bytes(tensor)
        header[name] = {
            "dtype": NAMES[tensor.dtype],
            "shape": [int(size) for size in tensor.shape],
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    return _LENGTH.pack(len(text)) + text + b"".join(chunks)


def loads_tensors(
    data: bytes | bytearray | memoryview,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata in safetensors bytes; GraphFormatError if malformed."""
    view = memoryview(data).cast("B")
    if len(view) < _LENGTH.size:
        raise GraphFormatError(
            f"not a safetensors file: {len(view)} bytes, the header length alone takes 8"
        )
    (length,) = _LENGTH.unpack_from(view, 0)
    if length > MAX_HEADER or length > len(view) - _LENGTH.size:
        raise GraphFormatError(
            f"not a safetensors file, or truncated: the header claims {length} bytes, "
            f"{len(view) - _LENGTH.size} follow"
        )
    try:
        header = json.loads(bytes(view[_LENGTH.size : _LENGTH.size + length]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise GraphFormatError(f"the safetensors header is not valid JSON: {error}") from None
    if not isinstance(header, dict):
        raise GraphFormatError("the safetensors header is not a JSON object")
    body = view[_LENGTH.size + length :]
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise GraphFormatError("the safetensors __metadata__ must map strings to strings")
    tensors: dict[str, torch.Tensor] = {}
    covered = 0
    for name, entry in header.items():
        tensors[name] = _tensor(name, entry, body)
        covered += tensors[name].numel() * tensors[name].element_size()
    if covered > len(body):
        raise GraphFormatError("the safetensors tensors claim more bytes than the file holds")
    return tensors, dict(metadata)


def _tensor(name: str, entry: object, body: memoryview) -> torch.Tensor:
    where = f"safetensors entry {name!r}"
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise GraphFormatError(f"{where}: expected dtype, shape and data_offsets")
    dtype = DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
    if dtype is None:
        raise GraphFormatError(f"{where}: unknown dtype {entry['dtype']!r}")
    shape, offsets = entry["shape"], entry["data_offsets"]
    if not (
        isinstance(shape, list)
        and len(shape) <= MAX_NDIM
        and all(type(s) is int and 0 <= s <= MAX_SIZE for s in shape)
    ):
        raise GraphFormatError(f"{where}: bad shape {shape!r}")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int for o in offsets)
        and 0 <= offsets[0] <= offsets[1] <= len(body)
    ):
        raise GraphFormatError(
            f"{where}: byte range {offsets!r} lies outside the {len(body)} data bytes"
        )
    begin, end = offsets
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise GraphFormatError(
            f"{where}: {end - begin} bytes, but {dtype} of shape {shape} takes {expected}"
        )
    if expected == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.uint8)
    if dtype == torch.bool and int(raw.max()) > 1:
        raise GraphFormatError(f"{where}: a bool tensor holds bytes other than 0 and 1")
    return raw.view(dtype).reshape(shape)
