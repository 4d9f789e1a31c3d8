"""The tracing tensor: a wrapper subclass that stands for one Graph value while tracing.

It carries a meta tensor with the same (possibly symbolic) sizes and strides, which is what
ops actually run on, and the name of the Graph value it currently holds. It has no data.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.prims.errors import TraceError
from ember.prims.tracer.symbolic_composites import SYMBOLIC_COMPOSITES
from ember.prims.tracer.symbolic_meta import has_symbolic_sizes


class TracerTensor(torch.Tensor):
    """A tensor that records what is done to it instead of computing."""

    meta: torch.Tensor
    value_name: str
    owner: object  # the Tracer that made it; ops on tensors of another tracer are rejected

    @staticmethod
    def __new__(
        cls,
        meta: torch.Tensor,
        *,
        device: torch.device,
        requires_grad: bool,
        value_name: str,
        owner: object,
    ) -> TracerTensor:
        tensor = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            layout=meta.layout,
            device=device,
            requires_grad=requires_grad,
        )
        tensor.meta = meta
        tensor.value_name = value_name
        tensor.owner = owner
        return tensor

    # The tracer records ATen calls, not torch functions: every torch function goes on to
    # __torch_dispatch__, except a composite whose C++ decomposition would specialize symbolic
    # sizes (symbolic_composites.py), which runs in ember's own form.
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            rule = SYMBOLIC_COMPOSITES.get(func)
            if rule is not None and has_symbolic_sizes(args, kwargs):
                result = rule(*args, **kwargs)
                if result is not NotImplemented:
                    return result
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        raise TraceError(
            f"a tracing tensor reached {func} outside of its trace; tracing tensors must not "
            "escape the traced function (keep tensors you need as outputs)"
        )

    def __repr__(self) -> str:  # type: ignore[override]
        return f"TracerTensor({self.value_name}: {self.dtype}, shape={list(self.shape)})"
