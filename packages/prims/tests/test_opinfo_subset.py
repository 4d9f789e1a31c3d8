"""A fixed subset of OpInfo ops must decompose fully to prims and match eager on float32
samples (the full sweep is scripts/opinfo_sweep.py). Chosen to cover every prim family and
each kind of decomposition; samples that read tensor values while tracing are skipped."""

from __future__ import annotations

import pytest
import torch

op_db = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations", reason="needs expecttest"
).op_db

from ember.prims.decompositions import PRIM_DECOMPOSITIONS  # noqa: E402
from ember.prims.decompositions.verification import Outcome, check_op, op_label  # noqa: E402

SUBSET = [
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "div.floor_rounding",
    "remainder",
    "pow",
    "exp",
    "log1p",
    "rsqrt",
    "tanh",
    "erf",
    "sigmoid",
    "abs",
    "neg",
    "floor",
    "round",
    "eq",
    "lt",
    "logical_and",
    "where",
    "clamp",
    "lerp",
    "addcmul",
    "nan_to_num",
    "sum",
    "mean",
    "prod",
    "amax",
    "argmax",
    "var",
    "std",
    "logsumexp",
    "cumsum",
    "sort",
    "topk",
    "softmax",
    "log_softmax",
    "linalg.vector_norm",
    "view",
    "reshape",
    "permute",
    "transpose",
    "expand",
    "squeeze",
    "unsqueeze",
    "flatten",
    "narrow",
    "select",
    "split",
    "chunk",
    "cat",
    "stack",
    "flip",
    "roll",
    "repeat",
    "nn.functional.pad.constant",
    "diagonal",
    "as_strided",
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "take",
    "triu",
    "tril",
    "nn.functional.embedding",
    "masked_fill",
    "zeros_like",
    "ones_like",
    "full_like",
    "arange",
    "linspace",
    "mm",
    "bmm",
    "addmm",
    "matmul",
    "nn.functional.linear",
    "nn.functional.conv2d",
    "nn.functional.conv_transpose2d",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.hardtanh",
    "nn.functional.leaky_relu",
    "nn.functional.elu",
    "nn.functional.softplus",
    "nn.functional.layer_norm",
    "nn.functional.batch_norm",
    "nn.functional.group_norm",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
    "nn.functional.scaled_dot_product_attention",
    "nn.functional.dropout",
    # families added with issue 7's coverage work: one op each
    "special.i0e",
    "polygamma.polygamma_n_1",
    "fft.rfft2",
    "fft.ifft",
    "polar",
    "linalg.det",
    "linalg.solve_triangular",
    "linalg.pinv",
    "nn.functional.cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.interpolate.bilinear",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.pad.reflect",
    "select_scatter",
    "median",
    "bucketize",
    "index_put",
]

_OPS = {op_label(op): op for op in op_db}


@pytest.mark.parametrize("name", SUBSET)
def test_opinfo_op_decomposes_to_prims(name: str) -> None:
    report = check_op(_OPS[name], PRIM_DECOMPOSITIONS, max_samples=2)
    assert report.outcome is Outcome.PASSED, f"{report.outcome.value}: {report.detail}"


class _Sample:
    def __init__(self, input: torch.Tensor, *args: object) -> None:
        self.input, self.args, self.kwargs = input, args, {}


class _NarrowOp:
    """An OpInfo-like entry for narrow whose samples give `start` as an int or a tensor."""

    name, variant_test_name = "narrow_probe", ""

    def __init__(self, starts: list[object]) -> None:
        self.starts = starts

    def op(self, a: torch.Tensor, dim: int, start: object, length: int) -> torch.Tensor:
        return torch.narrow(a, dim, start, length)  # type: ignore[arg-type]

    def sample_inputs(self, device: str, dtype: torch.dtype, requires_grad: bool) -> list[_Sample]:
        return [_Sample(torch.randn(4, 5), 1, start, 2) for start in self.starts]


def test_samples_that_read_tensor_values_are_skipped_not_passed() -> None:
    mixed = check_op(_NarrowOp([1, torch.tensor(2)]), PRIM_DECOMPOSITIONS)
    assert (mixed.outcome, mixed.samples, mixed.skipped) == (Outcome.PASSED, 1, 1)
    only_tensor = check_op(_NarrowOp([torch.tensor(2)]), PRIM_DECOMPOSITIONS)
    assert only_tensor.outcome is Outcome.UNTRACEABLE
    assert "_local_scalar_dense" in only_tensor.detail
