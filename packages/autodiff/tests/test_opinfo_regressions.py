"""Ops the OpInfo sweep through inductor (scripts/opinfo_inductor_sweep.py --grads) found
functionalization or the joint trace getting wrong, each checked against eager through
`aot_eager`: values, gradients and writes to inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ember.autodiff import aot_eager
from ember.prims import trace

aten = torch.ops.aten


def _compiled(fn: Callable[..., Any], *inputs: torch.Tensor) -> Callable[..., Any]:
    return aot_eager(trace(fn, *inputs), list(inputs))


def _leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _check_values_and_gradients(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    compiled = _compiled(fn, *_leaves(*inputs))
    ours, theirs = _leaves(*inputs), _leaves(*inputs)
    actual, expected = compiled(*ours), fn(*theirs)
    torch.testing.assert_close(actual, expected)
    wanted = [t for t in ours if t.requires_grad]
    total = sum(t.sum() for t in (actual if isinstance(actual, (list, tuple)) else [actual]))
    grads = torch.autograd.grad(total, wanted)
    expected_total = sum(
        t.sum() for t in (expected if isinstance(expected, (list, tuple)) else [expected])
    )
    expected_grads = torch.autograd.grad(expected_total, [t for t in theirs if t.requires_grad])
    torch.testing.assert_close(grads, expected_grads)


def test_inplace_views_rename_the_tensor() -> None:
    """squeeze_ inside matmul and quantile, transpose_ inside stft: the tensor becomes its
    view; a view taken before still sees later writes."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        before = y[0]
        y.squeeze_(0)
        y.transpose_(0, 1)
        y.mul_(3)
        return y + 1, before * 1

    _check_values_and_gradients(fn, torch.randn(1, 3, 4, requires_grad=True))


def test_quantile_squeezes_in_place() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nanquantile(x, 0.3, dim=1)

    _check_values_and_gradients(fn, torch.randn(4, 5, requires_grad=True))


def test_linalg_error_checks_return_nothing() -> None:
    """linalg.inv records aten::_linalg_check_errors, an op without outputs."""
    a = torch.randn(3, 3) + 3 * torch.eye(3)
    _check_values_and_gradients(torch.linalg.inv, a.requires_grad_())


def test_copy_into_a_tensor_is_differentiable() -> None:
    """copy_ became aten::copy, for which autograd has no derivative (diff with prepend,
    pad's circular mode, matrix_power(x, 0))."""

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(2, 3)
        out[0].copy_(x)  # broadcast from a row, through a view
        out[1].copy_(y.double())  # another dtype
        return out * torch.arange(6.0).reshape(2, 3)

    _check_values_and_gradients(
        fn, torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    )
    _check_values_and_gradients(
        lambda x: torch.nn.functional.pad(x, (1, 2), mode="circular"),
        torch.randn(1, 2, 4, requires_grad=True),
    )


def test_batch_norm_with_update_writes_running_stats() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> Any:
        return aten._batch_norm_with_update(x, w, w * 0.5, mean, var, 0.1, 1e-5)[0]

    x, w = torch.randn(4, 3, 5, requires_grad=True), torch.randn(3, requires_grad=True)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    _check_values_and_gradients(fn, x, w, mean.clone(), var.clone())
    ours, theirs = (mean.clone(), var.clone()), (mean.clone(), var.clone())
    _compiled(fn, x, w, mean.clone(), var.clone())(x, w, *ours)
    fn(x, w, *theirs)
    torch.testing.assert_close(ours, theirs)


def test_rrelu_in_training_draws_slopes_and_differentiates_through_them() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.rrelu(x, 0.1, 0.3, training=True)

    x = torch.randn(64, requires_grad=True)
    out = _compiled(fn, x)(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    negative = x < 0
    slopes = (out / x).detach()
    assert bool(((slopes[negative] >= 0.1) & (slopes[negative] <= 0.3)).all())
    torch.testing.assert_close(out[~negative], x[~negative])
    torch.testing.assert_close(grad, torch.where(negative, slopes, torch.ones_like(slopes)))


def test_backward_formulas_that_write_in_place_are_made_pure() -> None:
    """irfft's backward doubles a narrowed slice of its result in place (fft_c2r_backward);
    the joint Graph dropped that write (as_strided_scatter, hfft2 and stft too)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, dtype=torch.complex64, generator=generator, requires_grad=True)
    _check_values_and_gradients(lambda x: torch.fft.irfft(x) * torch.arange(6.0), x)
    base = torch.randn(9, requires_grad=True)
    src = torch.randn(2, 2, requires_grad=True)
    _check_values_and_gradients(
        lambda base, src: torch.as_strided_scatter(base * 2, src, (2, 2), (1, 2), 1) ** 2,
        base,
        src,
    )


def test_in_place_ops_whose_pure_twin_has_another_overload_name() -> None:
    """pow_.Scalar's twin is pow.Tensor_Scalar (pow.Scalar takes a Scalar base); normalize's
    backward writes pow_ in place, which the joint Graph now makes pure."""

    def fn(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        y, z = x * 1, x * 1
        y.pow_(2)
        z.pow_(e)
        return y + z

    _check_values_and_gradients(
        fn, torch.rand(4, requires_grad=True) + 0.5, torch.rand(4, requires_grad=True)
    )
    _check_values_and_gradients(
        lambda x: torch.nn.functional.normalize(x, p=3, dim=1),
        torch.randn(3, 4, requires_grad=True),
    )


def test_index_fill_with_a_value_tensor_differentiates_the_value() -> None:
    """torch's formula for the value's gradient sums at _unique(index), a size that depends on
    the index values, which a trace cannot hold."""

    def fn(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return x.index_fill(1, torch.tensor([0, 2, 2, 4]), value) * torch.arange(20.0).view(4, 5)

    _check_values_and_gradients(
        fn, torch.randn(4, 5, requires_grad=True), torch.tensor(1.5, requires_grad=True)
    )


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_a_mask_differentiates_without_reading_the_mask(
    rows: int, accumulate: bool
) -> None:
    """torch's formulas read grad[mask] (nonzero: a data-dependent size, which a trace cannot
    hold); the rule puts each value row with sizes that do not depend on the mask."""
    mask = torch.tensor([True, False, True, True, False])

    def fn(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        return torch.index_put(x * 1, [mask], values, accumulate) * torch.arange(25.0).view(5, 5)

    values = torch.randn(rows, 5, requires_grad=True)
    _check_values_and_gradients(fn, torch.randn(5, 5, requires_grad=True), values)
