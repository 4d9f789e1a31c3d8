"""Which tensor dims a capture makes symbolic: `mark_dynamic`, `mark_static` and the policy.

torch.compile's policy: `dynamic=None` captures every size static first and, when a later
call changes a dim's size, captures once more with that dim symbolic ("automatic dynamic");
`dynamic=True` makes every dim of every input symbolic from the start; `dynamic=False` never
does. Dims marked with `mark_dynamic` are symbolic under every policy, dims marked with
`mark_static` never are. Sizes 0 and 1 always specialize; parameters and module buffers
keep static sizes, and so do inputs that are not contiguous or start past their storage's
first element (their strides and offset stay concrete in the Graph).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from ember.capture.guards.source import ModuleEntrySource, Source

# Attributes mark_dynamic / mark_static set on a tensor (torch keeps its marks the same way).
DYNAMIC_ATTRIBUTE = "_ember_dynamic_dims"
STATIC_ATTRIBUTE = "_ember_static_dims"

SizeRange = tuple[int, int | None]  # inclusive; None: no upper bound


def mark_dynamic(
    tensor: torch.Tensor,
    dim: int | Iterable[int],
    *,
    min: int | None = None,  # noqa: A002 - the keywords PyTorch users already pass to mark a dim
    max: int | None = None,  # noqa: A002
) -> None:
    """Compile `tensor`'s `dim` (or dims) with a symbolic size in `min..max` (inclusive).

    The first capture that sees `tensor` makes the dim symbolic, under any `dynamic=`; a
    later call whose size lies outside the range recompiles, and the recompile log says so.
    Sizes 0 and 1 specialize, so `min` is at least 2.
    """
    dims = [dim] if isinstance(dim, int) else list(dim)
    lower = 2 if min is None else min
    if lower < 2:
        raise ValueError(
            f"mark_dynamic: min={min} is below 2; sizes 0 and 1 always compile their own "
            "graph (as torch.compile does), so give min >= 2"
        )
    if max is not None and max < lower:
        raise ValueError(f"mark_dynamic: max={max} is below min={lower}")
    marks: dict[int, SizeRange] = dict(getattr(tensor, DYNAMIC_ATTRIBUTE, {}))
    for d in dims:
        d = _normalize(tensor, d)
        size = tensor.shape[d]
        if size < lower or (max is not None and size > max):
            raise ValueError(
                f"mark_dynamic: tensor.shape[{d}] = {size} lies outside {lower}..{_upper(max)}"
            )
        marks[d] = (lower, max)
    setattr(tensor, DYNAMIC_ATTRIBUTE, marks)


def mark_static(tensor: torch.Tensor, dim: int | Iterable[int]) -> None:
    """Never compile `tensor`'s `dim` (or dims) with a symbolic size: a new size recompiles."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    marks: set[int] = set(getattr(tensor, STATIC_ATTRIBUTE, set()))
    marks.update(_normalize(tensor, d) for d in dims)
    setattr(tensor, STATIC_ATTRIBUTE, marks)


def _normalize(tensor: torch.Tensor, dim: int) -> int:
    if not -tensor.dim() <= dim < tensor.dim():
        raise IndexError(f"dim {dim} is out of range for a tensor of {tensor.dim()} dims")
    return dim % tensor.dim()


def _upper(upper: int | None) -> str:
    return "inf" if upper is None else str(upper)


@dataclass
class DynamicPolicy:
    """The dynamic= choice of one compile() and the dims automatic dynamic has learnt.

    `automatic` holds (source, dim) pairs whose size changed between calls; capture makes
    them symbolic from then on (under `dynamic=None` only).
    """

    dynamic: bool | None = None
    automatic: set[tuple[Source, int]] = field(default_factory=set)

    def dims_for(self, tensor: torch.Tensor, source: Source) -> dict[int, SizeRange]:
        """The dims of `tensor`, read from `source`, to make symbolic, with their ranges."""
        marked: dict[int, SizeRange] = getattr(tensor, DYNAMIC_ATTRIBUTE, {})
        static: set[int] = getattr(tensor, STATIC_ATTRIBUTE, set())
        if not marked and self.dynamic is False:
            return {}
        if not _can_be_symbolic(tensor):
            return {}
        chosen: dict[int, SizeRange] = {}
        held_static = isinstance(tensor, torch.nn.Parameter) or _in_module(source)
        for d, size in enumerate(tensor.shape):
            if d in static or size < 2:
                continue
            if d in marked:
                chosen[d] = marked[d]
            elif held_static:
                continue
            elif self.dynamic is True or (source, d) in self.automatic:
                chosen[d] = (2, None)
        return chosen

    def learn(self, source: Source, old: tuple[int, ...], new: tuple[int, ...]) -> list[int]:
        """Under dynamic=None, the dims of `source` whose size changed from `old` to `new`
        become symbolic in later captures; returns the dims newly learnt."""
        if self.dynamic is not None or len(old) != len(new):
            return []
        learnt = [
            d
            for d, (a, b) in enumerate(zip(old, new))
            if a != b and (source, d) not in self.automatic
        ]
        self.automatic.update((source, d) for d in learnt)
        return learnt


def _can_be_symbolic(tensor: torch.Tensor) -> bool:
    return tensor.is_contiguous() and tensor.storage_offset() == 0


def _in_module(source: Source) -> bool:
    """Whether `source` reads a module's parameter or buffer (whose sizes stay static)."""
    while True:
        if isinstance(source, ModuleEntrySource):
            return True
        base = getattr(source, "base", None)
        if base is None:
            return False
        source = base
