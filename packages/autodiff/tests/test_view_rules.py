"""Every view inverse against eager: writing a value into a view of a base must give the base
that `view.copy_(value)` gives in eager torch."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ember.autodiff import VIEW_INVERSES, ViewStep
from ember.autodiff.view_rules import apply_view, apply_view_functionally, scatter_into_base
from ember.prims import Ref

BASE = Ref("base")

# (target, arguments after the base, output index for list-returning views, base shape)
CASES: list[tuple[str, tuple[Any, ...], int | None, tuple[int, ...]]] = [
    ("aten::view.default", ([4, 3],), None, (3, 4)),
    ("aten::_unsafe_view.default", ([12],), None, (3, 4)),
    ("aten::_reshape_alias.default", ([2, 6], [6, 1]), None, (3, 4)),
    ("aten::reshape.default", ([6, 2],), None, (3, 4)),
    ("aten::unsqueeze.default", (1,), None, (3, 4)),
    ("aten::squeeze.default", (), None, (3, 1, 4)),
    ("aten::squeeze.dim", (1,), None, (3, 1, 4)),
    ("aten::squeeze.dims", ([1],), None, (3, 1, 4)),
    ("aten::alias.default", (), None, (3, 4)),
    ("aten::detach.default", (), None, (3, 4)),
    ("aten::t.default", (), None, (3, 4)),
    ("aten::transpose.int", (0, 2), None, (2, 3, 4)),
    ("aten::permute.default", ([2, 0, 1],), None, (2, 3, 4)),
    ("aten::select.int", (1, 2), None, (3, 4)),
    ("aten::slice.Tensor", (1, 1, 3), None, (3, 4)),
    ("aten::diagonal.default", (1,), None, (4, 4)),
    ("aten::as_strided.default", ([2, 2], [4, 1], 1), None, (3, 4)),
    ("aten::split.Tensor", (2, 1), 1, (3, 5)),
    ("aten::split_with_sizes.default", ([1, 2], 0), 1, (3, 4)),
    ("aten::unbind.int", (1,), 2, (3, 4)),
]


def test_every_inverse_has_a_case() -> None:
    assert {case[0] for case in CASES} == set(VIEW_INVERSES)


@pytest.mark.parametrize("target, args, index, shape", CASES, ids=[c[0] for c in CASES])
def test_scatter_matches_an_eager_write_into_the_view(
    target: str, args: tuple[Any, ...], index: int | None, shape: tuple[int, ...]
) -> None:
    step = ViewStep(target, (BASE, *args), (), 0, index)
    base = torch.randn(shape)
    expected = base.clone()
    view = apply_view(step, expected)
    updated = torch.randn(view.shape)
    view.copy_(updated)
    actual = scatter_into_base(step, base, updated)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    torch.testing.assert_close(
        apply_view_functionally(step, actual, lambda ref: None), updated, rtol=0, atol=0
    )
