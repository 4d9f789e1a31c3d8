"""View steps: how a view is rebuilt from its base, and how a write through it reaches the base.

A `ViewStep` is one view op recorded with its arguments. Replaying a chain of steps on the
current value of a base rebuilds the view; `VIEW_INVERSES` (keyed by qualified op name) holds,
for each view op, the pure op that writes an updated view back into its base (`select` ->
`select_scatter`, `t` -> `t`, `view` -> `reshape`, ...). Functionalization uses both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ember.prims import Ref, resolve_op
from ember.prims.ops import op_schema

aten = torch.ops.aten


@dataclass(frozen=True)
class ViewStep:
    """One view op: `target(*args, **kwargs)` with the base at `base` (a position or a name).

    `output_index` picks one element of an op that returns a list of views (`split`, `unbind`).
    """

    target: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    base: int | str
    output_index: int | None = None

    def bound(self, base: Any, read: Callable[[Any], Any]) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments with `base` in place, every other reference (and symbolic
        size) passed through `read`."""
        args = [a if i == self.base else _resolve(a, read) for i, a in enumerate(self.args)]
        kwargs = {key: a if key == self.base else _resolve(a, read) for key, a in self.kwargs}
        if isinstance(self.base, int):
            args[self.base] = base
        else:
            kwargs[self.base] = base
        return args, kwargs

    def named_arguments(self) -> dict[str, Any]:
        """Every argument by schema name, defaults filled in (the base included, as a Ref)."""
        schema = op_schema(self.target)
        assert schema is not None
        named: dict[str, Any] = {}
        kwargs = dict(self.kwargs)
        for position, argument in enumerate(schema.arguments):
            if position < len(self.args):
                named[argument.name] = self.args[position]
            elif argument.name in kwargs:
                named[argument.name] = kwargs[argument.name]
            elif argument.has_default_value():
                named[argument.name] = argument.default_value
        return named

    def is_literal(self) -> bool:
        """Whether every argument but the base is a plain literal (replayable on real tensors)."""
        others = [a for i, a in enumerate(self.args) if i != self.base]
        others += [a for key, a in self.kwargs if key != self.base]
        return not any(_has_reference(a) for a in others)


def apply_view(step: ViewStep, base: Any, read: Callable[[Any], Any] = lambda arg: arg) -> Any:
    """Rebuild the view `step` makes of `base`."""
    args, kwargs = step.bound(base, read)
    result = resolve_op(step.target)(*args, **kwargs)
    return result if step.output_index is None else result[step.output_index]


def apply_view_functionally(step: ViewStep, base: Any, read: Callable[[Any], Any]) -> Any:
    """Like `apply_view`, but layout-free: `view` replays as `reshape`.

    A functional base need not keep the strides the original tensor had, and `view` requires
    compatible strides; `reshape` computes the same elements whatever the layout.
    """
    if step.target in _RESHAPES:
        return aten.reshape.default(base, [_resolve(s, read) for s in _target_shape(step)])
    return apply_view(step, base, read)


# ---- the inverse of each view op: (base, updated view, named arguments, output index) -> base


Inverse = Callable[[Any, Any, Mapping[str, Any], "int | None"], Any]


def _reshape_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.reshape.default(updated, list(base.shape))


def _same(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return updated


def _transpose_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.transpose.int(updated, named["dim0"], named["dim1"])


def _t_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.t.default(updated)


def _permute_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    dims = [d % base.dim() for d in named["dims"]]
    inverse = [dims.index(d) for d in range(len(dims))]
    return aten.permute.default(updated, inverse)


def _select_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.select_scatter.default(base, updated, named["dim"], named["index"])


def _slice_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.slice_scatter.default(
        base, updated, named["dim"], named["start"], named["end"], named["step"]
    )


def _diagonal_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.diagonal_scatter.default(
        base, updated, named["offset"], named["dim1"], named["dim2"]
    )


def _as_strided_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    return aten.as_strided_scatter.default(
        base, updated, named["size"], named["stride"], named["storage_offset"]
    )


def _split_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    assert index is not None
    dim = named["dim"] % base.dim()
    size = named["split_size"]
    start = index * size
    return aten.slice_scatter.default(base, updated, dim, start, start + updated.shape[dim], 1)


def _split_sizes_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    assert index is not None
    dim = named["dim"] % base.dim()
    start = sum(named["split_sizes"][:index])
    return aten.slice_scatter.default(base, updated, dim, start, start + updated.shape[dim], 1)


def _unbind_back(base: Any, updated: Any, named: Mapping[str, Any], index: int | None) -> Any:
    assert index is not None
    return aten.select_scatter.default(base, updated, named["dim"], index)


VIEW_INVERSES: dict[str, Inverse] = {
    "aten::view.default": _reshape_back,
    "aten::_unsafe_view.default": _reshape_back,
    "aten::_reshape_alias.default": _reshape_back,
    "aten::reshape.default": _reshape_back,
    "aten::unsqueeze.default": _reshape_back,
    "aten::squeeze.default": _reshape_back,
    "aten::squeeze.dim": _reshape_back,
    "aten::squeeze.dims": _reshape_back,
    "aten::alias.default": _same,
    "aten::detach.default": _same,
    "aten::t.default": _t_back,
    "aten::transpose.int": _transpose_back,
    "aten::permute.default": _permute_back,
    "aten::select.int": _select_back,
    "aten::slice.Tensor": _slice_back,
    "aten::diagonal.default": _diagonal_back,
    "aten::as_strided.default": _as_strided_back,
    "aten::split.Tensor": _split_back,
    "aten::split_with_sizes.default": _split_sizes_back,
    "aten::unbind.int": _unbind_back,
}

# View ops that only reinterpret the shape: replayed functionally as `reshape`.
_RESHAPES = frozenset(
    {"aten::view.default", "aten::_unsafe_view.default", "aten::_reshape_alias.default"}
)


def scatter_into_base(
    step: ViewStep, base: Any, updated: Any, read: Callable[[Any], Any] = lambda arg: arg
) -> Any:
    """The base after writing `updated` into the view `step` makes of it (a pure op); `read`
    turns references and symbolic sizes among the view's arguments into values.

    Raises KeyError for a view op with no inverse (`expand`, `unfold`, dtype views).
    """
    inverse = VIEW_INVERSES[step.target]
    named = {
        key: value
        if key == step.base or step.base == _position(step, key)
        else _resolve(value, read)
        for key, value in step.named_arguments().items()
    }
    return inverse(base, updated, named, step.output_index)


def _position(step: ViewStep, name: str) -> int | None:
    schema = op_schema(step.target)
    assert schema is not None
    for position, argument in enumerate(schema.arguments):
        if argument.name == name:
            return position
    return None


def _target_shape(step: ViewStep) -> list[Any]:
    named = step.named_arguments()
    shape = named.get("size", named.get("shape"))
    assert shape is not None, step.target
    return list(shape)


def _resolve(arg: Any, read: Callable[[Any], Any]) -> Any:
    if isinstance(arg, (Ref, sympy.Basic)):
        return read(arg)
    if isinstance(arg, list):
        return [_resolve(item, read) for item in arg]
    return arg


def _has_reference(arg: Any) -> bool:
    if isinstance(arg, (Ref, sympy.Basic)):
        return True
    if isinstance(arg, (list, tuple)):
        return any(_has_reference(item) for item in arg)
    return False
