"""The numpy_prims backend runs captured models with NumPy alone and matches eager PyTorch:
the test MLP, a CNN with BatchNorm (eval) and a transformer block (inference); and its
kernels agree with the prims' torch references on OpInfo samples."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember_numpy_backend import KERNELS, MISSING, NumpyBackendError, numpy_prims
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import ember.capture
from ember.prims import PRIM_DECOMPOSITIONS, PRIMS, decompose, is_prim, trace
from ember.prims.testing import MLP, SmallCNN
from ember.prims.testing import AttentionBlock as TransformerBlock


def _trained_batch_norm(model: nn.Module) -> nn.Module:
    """Give BatchNorm running statistics other than the defaults, so eval mode uses them."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    return model


_MODELS = [
    (MLP, (8, 16)),
    (SmallCNN, (2, 3, 8, 8)),
    (TransformerBlock, (2, 5, 16)),
]


class _Recorder(TorchDispatchMode):
    """Records every ATen operator that runs while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("cls", "shape"), _MODELS, ids=[m[0].__name__ for m in _MODELS])
def test_compiled_model_matches_eager(cls: type[nn.Module], shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = _trained_batch_norm(cls()).eval()
    compiled = ember.capture.compile(model, backend="numpy_prims", fullgraph=True)
    for _ in range(2):  # the second call reuses the compiled program
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("cls", "shape"), _MODELS, ids=[m[0].__name__ for m in _MODELS])
def test_only_prims_run_and_no_torch_operator_runs(
    cls: type[nn.Module], shape: tuple[int, ...]
) -> None:
    torch.manual_seed(0)
    model = _trained_batch_norm(cls()).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        graph = trace(model, x)
        program = numpy_prims(graph, [x])
        expected = model(x)
    assert all(is_prim(node.target) for node in program.graph.nodes)  # type: ignore[attr-defined]
    with torch.no_grad(), _Recorder() as recorder:
        actual = program(x)
    # only the boundary: detaching the inputs (zero-copy views handed to NumPy) and wrapping
    # the output arrays (torch.from_numpy)
    assert set(recorder.ops) <= {"aten.detach.default", "aten.lift_fresh.default"}, recorder.ops
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_every_prim_has_a_kernel_or_is_declared_missing() -> None:
    assert set(KERNELS) | {f"prims::{name}" for name in MISSING} == set(PRIMS)
    assert not set(KERNELS) & {f"prims::{name}" for name in MISSING}


def test_a_graph_needing_a_prim_without_kernel_is_refused_naming_the_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)

    graph = trace(f, torch.randn(3))
    monkeypatch.delitem(KERNELS, "prims::bessel_j0")  # as if this backend lacked it
    with pytest.raises(NumpyBackendError, match=r"prims::bessel_j0.*bessel_j0\(x\)"):
        numpy_prims(graph, [])


def test_inputs_shaped_unlike_the_graph_are_rejected() -> None:
    graph = trace(lambda x, y: x + y, torch.randn(2), torch.randn(2))
    with pytest.raises(NumpyBackendError, match="inputs shaped"):
        numpy_prims(graph, [])(torch.randn(2))


# ---- the kernels against the prims' torch references, on OpInfo samples -----------------

_OPINFO = [
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "div.trunc_rounding",
    "div.floor_rounding",
    "remainder",
    "fmod",
    "pow",
    "exp",
    "log1p",
    "rsqrt",
    "tanh",
    "erf",
    "erfinv",
    "lgamma",
    "digamma",
    "sigmoid",
    "abs",
    "floor",
    "round",
    "eq",
    "lt",
    "logical_and",
    "where",
    "clamp",
    "nan_to_num",
    "sum",
    "mean",
    "prod",
    "amax",
    "argmax",
    "argmin",
    "var",
    "logsumexp",
    "cumsum",
    "cumprod",
    "sort",
    "softmax",
    "view",
    "permute",
    "expand",
    "narrow",
    "select",
    "cat",
    "flip",
    "roll",
    "nn.functional.pad.constant",
    "nn.functional.pad.reflect",
    "diagonal",
    "as_strided",
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "scatter_reduce.prod",
    "scatter_reduce.amax",
    "take",
    "triu",
    "masked_fill",
    "arange",
    "linspace",
    "mm",
    "bmm",
    "matmul",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv_transpose2d",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
    "nn.functional.interpolate.bilinear",
    "nn.functional.layer_norm",
    "nn.functional.embedding",
    "fft.fft",
    "fft.rfft2",
    "fft.irfft",
    "fft.ifftn",
    "angle",
    "special.i0e",
    "special.ndtri",
    "special.erfcx",
    "special.chebyshev_polynomial_t",
    "special.hermite_polynomial_h",
    "special.legendre_polynomial_p",
    "median",
    "bucketize",
    "linalg.svdvals",
    "linalg.pinv",
    "linalg.det",
    "linalg.slogdet",
    "linalg.eigvalsh",
    "linalg.solve_triangular",
    "cholesky_solve",
    "linalg.inv_ex",
    "linalg.lu_solve",
    "linalg.matrix_rank",
    "linalg.qr",
    "linalg.eigvals",
    "special.i1",
    "special.i1e",
    "special.zeta",
    "polygamma.polygamma_n_1",
    "polygamma.polygamma_n_3",
    "igamma",
    "igammac",
    "special.bessel_j0",
    "special.bessel_j1",
    "special.bessel_y0",
    "special.bessel_y1",
    "special.modified_bessel_k0",
    "special.modified_bessel_k1",
    "special.scaled_modified_bessel_k0",
    "special.scaled_modified_bessel_k1",
    "special.airy_ai",
]


# torch's float32 polygamma is off by up to ~2e-5 relative near its poles (the kernel, in
# float64, agrees with torch's float64 polygamma to 1e-14): compare those more loosely
_RTOL = {"polygamma.polygamma_n_1": 1e-4, "polygamma.polygamma_n_3": 1e-4}


def _opinfo_ops() -> dict[str, Any]:
    module = pytest.importorskip(
        "torch.testing._internal.common_methods_invocations", reason="needs expecttest"
    )
    ops = {}
    for op in module.op_db:
        variant = getattr(op, "variant_test_name", "")
        ops[f"{op.name}.{variant}" if variant else op.name] = op
    return ops


@pytest.mark.filterwarnings("ignore::UserWarning")  # deprecation notes of the OpInfo ops
@pytest.mark.parametrize("name", _OPINFO)
def test_kernels_match_eager_on_opinfo_samples(name: str) -> None:
    op = _opinfo_ops()[name]
    checked = 0
    for sample in list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:3]:
        tensors = [sample.input, *sample.args, *sample.kwargs.values()]
        if not all(not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 for t in tensors):
            continue
        inputs = [t for t in tensors if isinstance(t, torch.Tensor)]

        def call(*values: torch.Tensor, sample: Any = sample) -> Any:
            filled = iter(values)
            first = next(filled) if isinstance(sample.input, torch.Tensor) else sample.input
            args = [next(filled) if isinstance(a, torch.Tensor) else a for a in sample.args]
            kwargs = {
                k: next(filled) if isinstance(v, torch.Tensor) else v
                for k, v in sample.kwargs.items()
            }
            return op.op(first, *args, **kwargs)

        try:
            graph = trace(call, *inputs)
        except Exception:  # samples that read tensor values while tracing (.item())
            continue
        program = numpy_prims(decompose(graph, PRIM_DECOMPOSITIONS), inputs)
        rtol = _RTOL.get(name)
        torch.testing.assert_close(
            program(*inputs),
            call(*inputs),
            equal_nan=True,
            rtol=rtol,
            atol=None if rtol is None else 1e-5,
        )
        checked += 1
    assert checked, f"no sample of {name} traced"
