"""GEMM templates under Triton's interpreter (`TRITON_INTERPRET=1`, set by the conftest):
mm/addmm/bmm with fused epilogues (bias, GELU, residual, scale, cast) on odd sizes, strided
and transposed operands, float32/bfloat16/float16, against eager; the epilogue really fuses
(one kernel, no extern call); the vendor path (torch's matmul, then the epilogue kernel)
computes the same values; the choice between them follows the timings and is cached; and
the templates compile to PTX for sm_90 without a GPU."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.inductor.templates.configs import gemm_configs
from ember.inductor.templates.gemm_choice import GemmChoice
from ember.prims.config import load
from ember.runtime import ArtifactCache
from ember.runtime.triton import Autotuner

pytest.importorskip("triton")

CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("gemm-cache")))


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _config(**changes: Any) -> InductorConfig:
    settings: dict[str, Any] = {"gemm_templates": True, "cache": False, **changes}
    return dataclasses.replace(load(InductorConfig), **settings)


def _randn(*size: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*size, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _linear_gelu_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                          r: torch.Tensor) -> torch.Tensor:  # fmt: skip
    return F.gelu(F.linear(x, w, b)) + r


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mm_alone_odd_sizes": (
        lambda a, b: a @ b,
        lambda: (_randn(37, 19), _randn(19, 45, seed=1)),
    ),
    "linear_bias_gelu_residual": (
        _linear_gelu_residual,
        lambda: (
            _randn(37, 50),
            _randn(29, 50, seed=1),
            _randn(29, seed=2),
            _randn(37, 29, seed=3),
        ),
    ),
    "bfloat16_linear_bias_gelu": (
        lambda x, w, b: F.gelu(F.linear(x, w, b)),
        lambda: tuple(
            _randn(*size, dtype=torch.bfloat16, seed=i)
            for i, size in enumerate([(33, 64), (48, 64), (48,)])
        ),
    ),
    "float16_scale_and_cast": (
        lambda a, b: (a @ b * 0.5).float(),
        lambda: (_randn(20, 70, dtype=torch.float16), _randn(70, 24, dtype=torch.float16, seed=1)),
    ),
    "transposed_operands": (
        lambda a, b: torch.relu(a.t() @ b.t()),
        lambda: (_randn(40, 18), _randn(26, 40, seed=1)),
    ),
    "strided_operand_slice": (
        lambda a, b: a[:, 3:30:2] @ b + 1,
        lambda: (_randn(17, 40), _randn(14, 23, seed=1)),
    ),
    "bmm_with_residual": (
        lambda a, b, r: torch.bmm(a, b) * 2 + r,
        lambda: (_randn(3, 17, 21), _randn(3, 21, 10, seed=1), _randn(3, 17, 10, seed=2)),
    ),
    "bfloat16_bmm_broadcast_batch": (  # the second operand's batch is expanded (stride 0)
        lambda a, b: torch.bmm(a, b.expand(4, 24, 40)),
        lambda: (_randn(4, 33, 24, dtype=torch.bfloat16), _randn(1, 24, 40, dtype=torch.bfloat16)),
    ),
    "row_and_column_vectors": (  # epilogue loops split at the tile's rows and columns
        lambda a, b, c, s: (a @ b) * c + s[:, None],
        lambda: (_randn(21, 30), _randn(30, 35, seed=1), _randn(35, seed=2), _randn(21, seed=3)),
    ),
    "bmm_batch_bias": (  # a bias per batch entry: rows are batch and M
        lambda a, b, c: torch.sigmoid(torch.bmm(a, b) + c),
        lambda: (_randn(3, 18, 20), _randn(3, 20, 22, seed=1), _randn(3, 1, 22, seed=2)),
    ),
    "addmm_scaled_row_bias": (
        lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
        lambda: (_randn(19, 1), _randn(19, 33, seed=1), _randn(33, 12, seed=2)),
    ),
    "two_products_back_to_back": (  # each its own template (they once shared a kernel name)
        lambda a, b, c: torch.relu(torch.relu(a @ b) @ c),
        lambda: (_randn(9, 16), _randn(16, 24, seed=1), _randn(24, 12, seed=2)),
    ),
    "product_read_twice": (  # the result is an output too: the template stores it
        lambda a, b: (a @ b, torch.tanh(a @ b)),
        lambda: (_randn(9, 16), _randn(16, 40, seed=1)),
    ),
}

TOLERANCES = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
}


def _close(actual: Any, expected: Any) -> None:
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, **TOLERANCES[want.dtype])


@pytest.mark.parametrize("name", sorted(CASES))
def test_templates_match_eager(name: str, cache: ArtifactCache, interpreter: None) -> None:
    fn, make_inputs = CASES[name]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    _close(compiled(*inputs), fn(*inputs))


def _artifact(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...],
              config: InductorConfig) -> dict[str, Any]:  # fmt: skip
    graph = prims.trace(fn, *inputs)
    return generate(graph, TritonBackend(), config, CUDA)


def test_bias_gelu_residual_fuse_into_one_kernel() -> None:
    """With templates, a linear layer's bias, GELU and residual add run inside the matmul's
    kernel: one kernel and no extern call; without them (the default mode) the product is a
    cuBLAS call and the epilogue a kernel of its own."""
    inputs = CASES["linear_bias_gelu_residual"][1]()
    fused = _artifact(_linear_gelu_residual, inputs, _config())
    assert fused["kernels"] == 1 and fused["targets"] == []
    default = _artifact(_linear_gelu_residual, inputs, _config(gemm_templates=False))
    assert default["kernels"] == 1 and default["targets"] == ["aten::addmm.default"]


def test_a_transposed_read_of_the_product_is_not_fused() -> None:
    """An epilogue that reads the product at another point than it computes (a transpose)
    cannot run on the tile: the template stores the product and the kernel reads it."""

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ b).t().contiguous() + 1

    artifact = _artifact(fn, (_randn(16, 8), _randn(8, 16, seed=1)), _config())
    assert artifact["kernels"] == 2 and artifact["targets"] == []


def test_vendor_path_computes_the_same_values(cache: ArtifactCache, interpreter: None) -> None:
    """The fallback the choice measures (torch's addmm into the result, then the epilogue
    kernel alone) computes what the fused template computes."""
    fn, make_inputs = CASES["linear_bias_gelu_residual"]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    choices = [
        k for k in compiled.call.__globals__["kernels"].values() if isinstance(k, GemmChoice)
    ]
    assert len(choices) == 1
    choice = choices[0]
    choice.launch = choice.vendor  # as if cuBLAS had measured faster
    _close(compiled(*inputs), fn(*inputs))


@pytest.mark.parametrize(
    ("template_ms", "chosen"),
    [(1.0, "template"), (3.0, "vendor"), (1.995, "vendor")],  # within 1%: cuBLAS stays
)
def test_choice_follows_the_timings_and_is_cached(
    template_ms: float, chosen: str, tmp_path: Path, interpreter: None
) -> None:
    """The template runs only if it times at least 1% faster than the vendor path (timed in
    interleaved rounds: template, vendor, template, ...); a second process's choice comes
    from the cache without timing."""
    cache = ArtifactCache(tmp_path)
    calls: list[str] = []

    def bench(launch: Callable[[], None]) -> float:
        launch()
        calls.append("timed")
        return template_ms if len(calls) % 2 == 1 else 2.0

    fn, make_inputs = CASES["bfloat16_linear_bias_gelu"]
    inputs = make_inputs()
    graph = prims.trace(fn, *inputs)
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    namespace = compiled.call.__globals__
    (name,) = [n for n, k in namespace["kernels"].items() if isinstance(k, GemmChoice)]
    original: GemmChoice = namespace["kernels"][name]
    for _ in range(2):  # the second choice comes from the cache, without timing
        choice = GemmChoice(
            original.module,
            name,
            original.template,
            original.vendor,
            source_digest="digest",
            autotuner=Autotuner(cache),
            mutated=[original.template.params[i] for i in original.mutated],
            bench=bench,
        )
        seen: list[tuple[int, tuple[Any, ...]]] = []
        choice.launch = functools.partial(_record, seen)
        namespace["kernels"][name] = choice
        compiled(*inputs)
        (numel, args), = seen  # fmt: skip
        launch = choice.measure(numel, args)
        assert choice.chosen == chosen
        assert launch is (choice.template if chosen == "template" else choice.vendor)
        assert len(calls) == 6  # three rounds of both, on the first attempt only
    namespace["kernels"][name] = original


def _record(seen: list[tuple[int, tuple[Any, ...]]], numel: int, *args: Any) -> None:
    seen.append((numel, args))


def test_configs_fit_the_problem() -> None:
    configs = gemm_configs(20, 4096, 70, torch.bfloat16)
    assert configs and len(configs) <= 8
    assert len(set(configs)) == len(configs)
    for config in configs:
        assert config.block_m <= 32 and config.block_k <= 128
        assert 256 % config.block_m == 0 and 256 % config.block_n == 0
    large = gemm_configs(4096, 4096, 4096, torch.bfloat16)
    assert large[0].block_m * large[0].block_n >= 128 * 128


PTX_CASES = ("bfloat16_linear_bias_gelu", "bfloat16_bmm_broadcast_batch")


def test_templates_compile_to_ptx_without_a_gpu(build_for_sm90: Any) -> None:
    """The default configuration of each template builds for an H100 (sm_90) here, with
    tensor-core instructions in it."""
    report = build_for_sm90(__file__, PTX_CASES, config="_config")
    for name in PTX_CASES:
        built = [ptx for kernel in report[name] if kernel["template"] for ptx in kernel["ptx"]]
        assert built, name
        assert all(".target sm_90" in ptx and "mma" in ptx for ptx in built), name


def test_an_operand_written_before_the_epilogue_keeps_the_product_in_place(
    cache: ArtifactCache, interpreter: None
) -> None:
    """The product moves to its epilogue's place only if nothing between writes its operands:
    here the input `a` is updated in place after the product and before the kernel that
    reads it, so the template stays where the matmul was (values as eager's)."""

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        product = a @ b
        a.mul_(2)
        c.add_(a.sum())
        return torch.relu(product) + c[0]

    inputs = (_randn(12, 20), _randn(20, 9, seed=1), _randn(3, seed=2))
    eager_inputs = tuple(t.clone() for t in inputs)
    graph = prims.trace(fn, *[t.clone() for t in inputs])
    compiled = compile_graph(graph, inputs, config=_config(), backend=TritonBackend(), cache=cache)
    _close(compiled(*inputs), fn(*eager_inputs))
    _close(inputs, eager_inputs)
