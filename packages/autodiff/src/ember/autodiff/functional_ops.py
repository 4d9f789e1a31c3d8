"""The pure operator that stands in for each in-place or `out=` operator.

`functional_variant(target)` names the pure twin of a writing op: `add_.Tensor` -> `add.Tensor`,
`add.out` -> the overload of `add` that takes the same arguments minus `out`, and the entries of
`FUNCTIONAL_VARIANTS` where the names do not line up. `FUNCTIONAL_RULES` holds the ops that
need more than a twin (the batch-norm family, whose running-stat writes the schema hides).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from ember.prims import parse_op_name, resolve_op
from ember.prims.ops import op_schema

aten = torch.ops.aten

# Writing ops whose pure twin is not found by name: qualified name -> qualified name.
FUNCTIONAL_VARIANTS: dict[str, str] = {
    "aten::bernoulli_.float": "aten::bernoulli.p",
    "aten::normal_.default": "aten::normal_functional.default",
    # backward formulas write these in place (normalize's norm backward: pow_.Scalar)
    "aten::pow_.Scalar": "aten::pow.Tensor_Scalar",
    "aten::pow_.Tensor": "aten::pow.Tensor_Tensor",
    "aten::float_power_.Scalar": "aten::float_power.Tensor_Scalar",
    "aten::float_power_.Tensor": "aten::float_power.Tensor_Tensor",
    "aten::floor_divide_.Tensor": "aten::floor_divide.default",
    "aten::ldexp_.default": "aten::ldexp.Tensor",
}


@cache
def functional_variant(target: str) -> str | None:
    """The qualified name of the pure op computing what `target` writes, or None."""
    known = FUNCTIONAL_VARIANTS.get(target)
    if known is not None:
        return known
    parsed = parse_op_name(target)
    schema = op_schema(target)
    if schema is None:
        return None
    if parsed.name.endswith("_") and not parsed.name.endswith("__"):
        candidate = f"{parsed.namespace}::{parsed.name[:-1]}.{parsed.overload}"
        if _signature(candidate) == _signature(target):
            return candidate
        return None
    # An out= op: the overload of the same name whose arguments are ours minus the outs.
    inputs = tuple(
        (a.name, str(a.type))
        for a in schema.arguments
        if a.alias_info is None or not a.alias_info.is_write
    )
    packet = getattr(getattr(torch.ops, parsed.namespace), parsed.name, None)
    if packet is None:
        return None
    for overload in packet.overloads():
        candidate = f"{parsed.namespace}::{parsed.name}.{overload}"
        if candidate != target and _signature(candidate) == inputs:
            return candidate
    return None


def _signature(target: str) -> tuple[tuple[str, str], ...] | None:
    try:
        schema = op_schema(target)
    except (KeyError, ValueError):
        return None
    if schema is None:
        return None
    return tuple((a.name, str(a.type)) for a in schema.arguments)


# ---- rules: (bound args, bound kwargs) -> (results aligned with the node's outputs,
#      {position of a written argument: its new value})

FunctionalRule = Callable[[list[Any], dict[str, Any]], tuple[tuple[Any, ...], dict[int, Any]]]


def _batch_norm_args(args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    names = (
        "input",
        "weight",
        "bias",
        "running_mean",
        "running_var",
        "training",
        "momentum",
        "eps",
    )
    bound = list(args) + [kwargs[name] for name in names[len(args) :]]
    return bound


def _batch_norm(target: str, outputs: int) -> FunctionalRule:
    """native_batch_norm and friends in training mode update running_mean/running_var: compute
    the new statistics with `_native_batch_norm_legit_functional` instead."""

    def rule(args: list[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[int, Any]]:
        input, weight, bias, mean, var, training, momentum, eps = _batch_norm_args(args, kwargs)
        if mean is None or var is None or not training:
            return tuple(call(target, args, kwargs)), {}  # nothing written: run it as it is
        out, save_mean, save_rstd, new_mean, new_var = (
            aten._native_batch_norm_legit_functional.default(
                input, weight, bias, mean, var, training, momentum, eps
            )
        )
        results: tuple[Any, ...] = (out, save_mean, save_rstd)
        if outputs == 4:  # cudnn's reserve space, which only its own backward reads
            results += (aten.empty.memory_format([0], dtype=torch.uint8, device=input.device),)
        return results, {3: new_mean, 4: new_var}

    return rule


def _batch_norm_with_update(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[int, Any]]:
    """`_batch_norm_with_update` writes running_mean and running_var (arguments 3 and 4)."""
    *results, new_mean, new_var = aten._batch_norm_with_update_functional.default(*args, **kwargs)
    return tuple(results), {3: new_mean, 4: new_var}


def _rrelu_with_noise(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[int, Any]]:
    """`rrelu_with_noise` writes the slopes it drew into `noise` (argument 1). In training,
    out = self * noise: autograd's formula for `rrelu_with_noise_functional` differentiates
    with the noise it was given, not the slopes it drew (torch 2.13), so only the slopes come
    from it."""
    training = args[4] if len(args) > 4 else kwargs.get("training", False)
    if not training:
        out, noise = aten.rrelu_with_noise_functional.default(*args, **kwargs)
        return (out,), {1: noise}
    with torch.no_grad():
        _, noise = aten.rrelu_with_noise_functional.default(*args, **kwargs)
    return (aten.mul.Tensor(args[0], noise),), {1: noise}


def _copy(args: list[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[int, Any]]:
    """`dst.copy_(src)`: dst's new value is src in dst's dtype and device, broadcast to its
    shape. Built from differentiable ops: autograd has no derivative for `aten::copy`."""
    dst, src = args[0], args[1]
    new = aten._to_copy.default(src, dtype=dst.dtype, device=dst.device)
    if tuple(new.shape) != tuple(dst.shape):
        new = aten.clone.default(aten.expand.default(new, list(dst.shape)))
    return (new,), {0: new}


def _index_fill_value(
    args: list[Any], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[int, Any]]:
    """`index_fill(self, dim, index, value)` with a value tensor that needs a gradient: torch's
    formula sums the gradient at `_unique(index)`, whose size depends on the index values;
    `where(mask, value, self)` over a mask of the filled positions has the same gradients."""
    self, dim, index, value = args
    if not (torch.is_grad_enabled() and value.requires_grad):
        return (aten.index_fill.int_Tensor(*args, **kwargs),), {}
    dim = dim % max(self.dim(), 1)
    size = self.shape[dim] if self.dim() else 1
    positions = aten.zeros.default([size], dtype=torch.bool, device=self.device)
    positions = aten.index_fill.int_Scalar(positions, 0, index, True)
    shape = [size if d == dim else 1 for d in range(self.dim())]
    mask = aten.reshape.default(positions, shape)
    filled = aten.where.self(mask, aten._to_copy.default(value, dtype=self.dtype), self)
    return (filled,), {}


def _index_put(writes: bool) -> FunctionalRule:
    """`index_put(self, [mask], values)` with one bool mask over leading dims, when a
    gradient is wanted: torch's formulas read `grad[mask]`, whose size depends on the mask's
    values. The same result from ops of fixed sizes: each selected position takes the row of
    `values` that the running count of selected positions names (or the one broadcast row)."""

    def rule(args: list[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[int, Any]]:
        self, indices, values = args[:3]
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        mask = indices[0] if len(indices) == 1 else None
        wanted = torch.is_grad_enabled() and (self.requires_grad or values.requires_grad)
        masks = (
            mask is not None
            and mask.dtype in (torch.bool, torch.uint8)
            and mask.dim() > 0
            and tuple(mask.shape) == tuple(self.shape[: mask.dim()])
        )
        if not (wanted and masks):
            out = aten.index_put.default(self, indices, values, accumulate)
        else:
            assert mask is not None
            out = _masked_put(self, mask.bool(), values, accumulate)
        return (out,), ({0: out} if writes else {})

    return rule


def _masked_put(self: Any, mask: Any, values: Any, accumulate: bool) -> Any:
    k = mask.dim()
    rest = list(self.shape[k:])
    values = aten._to_copy.default(values, dtype=self.dtype)
    if values.dim() <= len(rest) or values.shape[0] == 1:  # one row for every position
        row = values if values.dim() <= len(rest) else aten.select.int(values, 0, 0)
        placed = aten.expand.default(row, list(self.shape))
    else:  # row i of values goes to the i-th selected position
        flat = aten.reshape.default(mask, [-1])
        count = aten.sub.Tensor(aten.cumsum.default(flat, 0), 1)
        rows = aten.clamp_min.default(count, 0)
        gathered = aten.index_select.default(values, 0, rows)
        placed = aten.reshape.default(gathered, list(self.shape))
    selected = aten.reshape.default(mask, [*mask.shape, *([1] * len(rest))])
    if accumulate:
        return aten.add.Tensor(self, aten.where.ScalarOther(selected, placed, 0))
    return aten.where.self(selected, placed, self)


FUNCTIONAL_RULES: dict[str, FunctionalRule] = {
    "aten::index_put.default": _index_put(writes=False),
    "aten::index_put_.default": _index_put(writes=True),
    "aten::_index_put_impl_.default": _index_put(writes=True),
    "aten::index_fill.int_Tensor": _index_fill_value,
    "aten::copy_.default": _copy,
    "aten::_batch_norm_with_update.default": _batch_norm_with_update,
    "aten::rrelu_with_noise.default": _rrelu_with_noise,
    "aten::native_batch_norm.default": _batch_norm("aten::native_batch_norm.default", 3),
    "aten::_native_batch_norm_legit.default": _batch_norm(
        "aten::_native_batch_norm_legit.default", 3
    ),
    "aten::cudnn_batch_norm.default": _batch_norm("aten::cudnn_batch_norm.default", 4),
    "aten::miopen_batch_norm.default": _batch_norm("aten::miopen_batch_norm.default", 3),
}


def call(target: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run the op named `target`."""
    return resolve_op(target)(*args, **kwargs)
