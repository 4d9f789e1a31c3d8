"""ember's safetensors reader and writer: round trips, interop with the safetensors package,
and malformed files rejected with GraphFormatError before anything is allocated."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from ember.prims import GraphFormatError
from ember.prims.serialize.safetensors import dumps_tensors, loads_tensors


def _tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "w": torch.randn(3, 4),
        "half": torch.randn(5).half(),
        "bf": torch.randn(2, 2).bfloat16(),
        "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.empty(0, 3),
        "strided": torch.randn(4, 6)[:, ::2],  # written contiguous
    }


def test_round_trip_every_dtype() -> None:
    tensors = _tensors()
    loaded, metadata = loads_tensors(dumps_tensors(tensors, {"format": "pt"}))
    assert metadata == {"format": "pt"}
    assert loaded.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype
        assert torch.equal(loaded[name], tensor), name


def test_files_interoperate_with_the_safetensors_package() -> None:
    library = pytest.importorskip("safetensors.torch")
    tensors = _tensors()
    theirs = library.load(dumps_tensors(tensors))
    for name, tensor in tensors.items():
        assert torch.equal(theirs[name], tensor), name
    ours, _ = loads_tensors(library.save({k: v.contiguous() for k, v in tensors.items()}))
    for name, tensor in tensors.items():
        assert torch.equal(ours[name], tensor), name


def _file(header: dict[str, object], body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x01\x00", "header length"),
        (struct.pack("<Q", 1 << 40) + b"{}", "truncated"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
        (_file({"x": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)), "dtype"),
        (_file({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)), "takes 8"),
        (_file({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}, bytes(4)), "outside"),
        (_file({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4)), "shape"),
        (_file({"x": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}}, b"\x07"), "bool"),
        (_file({"x": {"dtype": "F32", "shape": [1]}}, bytes(4)), "data_offsets"),
    ],
)
def test_malformed_files_are_format_errors(data: bytes, words: str) -> None:
    with pytest.raises(GraphFormatError, match=words):
        loads_tensors(data)
