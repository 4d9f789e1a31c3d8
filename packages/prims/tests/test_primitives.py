"""The prim set: every prim resolves by name to ember's definition (not torch.ops.prims), and
its meta rule agrees with its reference implementation on shape, dtype and (for views)
strides."""

from __future__ import annotations

import pytest
import torch

from ember.prims import resolve_op
from ember.prims.primitives import PRIMS, prims


def test_prims_resolve_to_ember_definitions() -> None:
    assert len(PRIMS) >= 90
    for qualname, prim in PRIMS.items():
        assert resolve_op(qualname) is prim
        assert prim.doc and prim.family


_CASES = [
    (prims.add, (torch.randn(3, 4), torch.randn(3, 4)), {}),
    (prims.lt, (torch.randn(3, 4), torch.randn(3, 4)), {}),
    (prims.exp, (torch.randn(5),), {}),
    (prims.convert_element_type, (torch.randn(5), torch.int32), {}),
    (prims.broadcast_in_dim, (torch.randn(4), [3, 4], [1]), {}),
    (prims.permute, (torch.randn(2, 3, 4), [2, 0, 1]), {}),
    (prims.slice, (torch.randn(6, 8), [1, 0], [5, 8], [2, 3]), {}),
    (prims.pad, (torch.randn(2, 3), 0.5, [1, -1], [0, 2], [1, 1]), {}),
    (prims.sum, (torch.randn(2, 3, 4), [0, 2]), {}),
    (prims.var, (torch.randn(2, 3, 4), [1], 1.0), {}),
    (prims.argmax, (torch.randn(2, 3), 1), {}),
    (prims.sort, (torch.randn(4, 5), 1, True), {}),
    (prims.gather, (torch.randn(3, 4), 1, torch.tensor([[0, 3], [1, 1], [2, 0]])), {}),
    (prims.matmul, (torch.randn(2, 3, 4), torch.randn(2, 4, 5)), {}),
    (
        prims.convolution,
        (torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3), [2, 2], [1, 1], [1, 1], 1),
        {},
    ),
    (prims.full, ([2, 3], 1.5), {"dtype": torch.float32, "device": torch.device("cpu")}),
    (prims.iota, (5, 2, 3), {"dtype": torch.int64, "device": torch.device("cpu")}),
    (prims.svd, (torch.randn(2, 5, 3), False), {}),
    (prims.qr, (torch.randn(5, 3), "complete"), {}),
    (prims.eigh, (torch.randn(4, 4), True), {}),
    (prims.eig, (torch.randn(3, 3),), {}),
    (prims.cholesky, (torch.eye(3) * 2,), {}),
    (prims.lu, (torch.randn(2, 4, 3),), {}),
    (prims.triangular_solve, (torch.randn(3, 3), torch.randn(3, 2), True, True, False), {}),
    (prims.fft_r2c, (torch.randn(4, 6), [0, 1]), {}),
    (prims.fft_c2r, (torch.randn(4, 4, dtype=torch.complex64), [1], 6), {}),
    (prims.complex, (torch.randn(3), torch.randn(3)), {}),
    (prims.real, (torch.randn(3, dtype=torch.complex64),), {}),
    (prims.bessel_i0, (torch.randn(5),), {}),
    (prims.zeta, (torch.rand(5) + 2, torch.rand(5) + 1), {}),
    (prims.polygamma, (torch.rand(5) + 1, 2), {}),
]


@pytest.mark.parametrize(("prim", "args", "kwargs"), _CASES, ids=[c[0].name for c in _CASES])
def test_meta_rule_matches_reference(prim, args, kwargs) -> None:
    results = prim(*args, **kwargs)
    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    metas = prim.meta(*meta_args, **kwargs)
    results = results if isinstance(results, tuple) else (results,)
    metas = metas if isinstance(metas, tuple) else (metas,)
    for result, meta in zip(results, metas):
        assert result.shape == meta.shape and result.dtype == meta.dtype
        assert result.stride() == meta.stride()


def test_elementwise_prims_reject_mixed_operands() -> None:
    with pytest.raises(ValueError):
        prims.add.meta(torch.empty(2, device="meta"), torch.empty(3, device="meta"))
    with pytest.raises(TypeError):
        prims.add.meta(
            torch.empty(2, device="meta"), torch.empty(2, dtype=torch.int64, device="meta")
        )
    with pytest.raises(TypeError):
        prims.exp.meta(torch.empty(2, dtype=torch.int64, device="meta"))


def test_pad_with_interior_and_negative_edges() -> None:
    a = torch.arange(6.0).reshape(2, 3)
    out = prims.pad(a, -1.0, [0, -1], [1, 0], [0, 1])
    assert out.tolist() == [[-1.0, 1.0, -1.0, 2.0], [-1.0, 4.0, -1.0, 5.0], [-1.0] * 4]


def test_random_prims_are_functions_of_seed_and_offset() -> None:
    seed = torch.tensor(7)
    kwargs = {"dtype": torch.float32, "device": torch.device("cpu")}
    first = prims.uniform([4], 0.0, 1.0, seed, 3, **kwargs)
    assert torch.equal(first, prims.uniform([4], 0.0, 1.0, seed, 3, **kwargs))
    assert not torch.equal(first, prims.uniform([4], 0.0, 1.0, seed, 4, **kwargs))


def test_copy_to_writes_into_a_view() -> None:
    base = torch.zeros(4)
    view = prims.slice(base, [1], [3])
    prims.copy_to(view, torch.ones(2))
    assert base.tolist() == [0.0, 1.0, 1.0, 0.0]


def test_argmax_and_argmin_of_a_bool_mask() -> None:
    """cumprod's backward finds the first zero with argmax of a mask; torch's argmax
    rejects bool."""
    mask = torch.tensor([[False, True, True], [False, False, False]])
    assert prims.argmax(mask, 1).tolist() == [1, 0]
    assert prims.argmin(mask, 1).tolist() == [0, 0]


def test_parts_of_a_complex32_tensor_are_float16() -> None:
    """chalf's gradient goes through view_as_real of a complex32 tensor."""
    a = torch.complex(torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])).to(torch.complex32)
    assert prims.real(a).dtype == torch.float16
    assert prims.imag(a).tolist() == [0.5, 3.0]
