"""After a compiled call fails, `CompiledGraph` names the input on the wrong device: a
tensor on another device than the Graph declares, never a 0-d CPU tensor (torch takes one
beside tensors of any device; memory-efficient attention's philox seed and offset are such
tensors on a GPU, and blaming them hid the real error of a failing backward)."""

from __future__ import annotations

import dataclasses
import types

import torch

from ember.inductor.compiled import CompiledGraph
from ember.prims import GraphInput, Value, trace


def _graph_for(devices: list[str]) -> object:
    traced = trace(lambda x, seed: x * 2 + seed, torch.randn(4, 3), torch.tensor(3))
    inputs = [
        GraphInput(Value(i.value.name, dataclasses.replace(i.value.spec, device=torch.device(d))))
        for i, d in zip(traced.inputs, devices, strict=True)
    ]
    return dataclasses.replace(traced, inputs=inputs)


def _mismatch(devices: list[str], args: list[torch.Tensor]) -> Exception | None:
    holder = types.SimpleNamespace(_graph=_graph_for(devices))
    return CompiledGraph._device_mismatch(holder, args)  # type: ignore[arg-type]


def test_a_cpu_scalar_tensor_is_not_blamed() -> None:
    assert _mismatch(["cpu", "cuda"], [torch.randn(4, 3), torch.tensor(3)]) is None


def test_a_tensor_on_another_device_is_named() -> None:
    error = _mismatch(["cuda", "cuda"], [torch.randn(4, 3), torch.tensor(3)])
    assert error is not None
    text = str(error)
    assert "is a cpu tensor, but this graph was compiled for cuda tensors" in text
    assert "Move it with `.to('cuda')`" in text
