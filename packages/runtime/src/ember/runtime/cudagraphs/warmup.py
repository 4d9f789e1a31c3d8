"""The warm-up run, watched for operations a CUDA graph capture cannot take.

A graph's first call runs as it is, under a dispatch mode that notes the first operation that
would break a capture: a copy between host and device memory (a capture cannot take a copy
from pageable host memory, scalars included), reading a device value on the host (`.item()`, a
synchronization), or an operation whose output size depends on device values. Such a graph
is never captured, so a failed capture never leaves the pool or the RNG state unusable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ember.prims import tree_flatten

# operations whose output sizes depend on device values: the host waits for the device
DATA_DEPENDENT = frozenset(
    {
        "aten::nonzero",
        "aten::masked_select",
        "aten::unique_consecutive",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::_local_scalar_dense",
    }
)


class WatchedRun(TorchDispatchMode):
    """Runs ops as they are and keeps the first one a capture could not take (`problem`)."""

    def __init__(self, on_device: Callable[[torch.Tensor], bool]) -> None:
        super().__init__()
        self.on_device = on_device
        self.problem: str | None = None

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if self.problem is None:
            self.problem = self._check(func, args, kwargs, result)
        return result

    def _check(self, func: Any, args: Sequence[Any], kwargs: Any, result: Any) -> str | None:
        name = getattr(getattr(func, "_schema", None), "name", str(func))
        inputs = [t for t in tree_flatten((tuple(args), kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
        on_device = self.on_device
        if name in DATA_DEPENDENT and any(on_device(t) for t in inputs):
            return f"{name} reads device values on the host"
        if "copy" in name or name == "aten::to":
            tensors = inputs + outputs
            if any(on_device(t) for t in tensors) and any(not on_device(t) for t in tensors):
                described = ", ".join(_describe(t) for t in tensors)
                return (
                    f"{name} copies between host and device memory ({described}), "
                    f"called at {_caller()}"
                )
        return None


def _describe(tensor: torch.Tensor) -> str:
    """`cuda:0 float32[2, 8]`: where an offending copy's tensors live, for the log."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"{tensor.device} {dtype}{list(tensor.shape)}"


def _caller() -> str:
    """The innermost frame outside torch and this module: the wrapper line or the extern op
    that made the call."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != __file__ and f"{os.sep}torch{os.sep}" not in filename:
            return f"{filename}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return "an unknown place"


def run_watched(
    call: Callable[[list[Any]], Sequence[Any]],
    args: list[Any],
    on_device: Callable[[torch.Tensor], bool],
) -> tuple[Sequence[Any], str | None]:
    """`call(args)`, and the first operation in it that a capture could not take (or None)."""
    with WatchedRun(on_device) as watched:
        results = call(args)
    return results, watched.problem
