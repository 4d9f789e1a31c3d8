"""Random numbers as loops: `random(seed, offset, kind)` drawn by Philox in the kernels.
Values follow ember's stream, not eager torch's, so the tests check distributions, the
dependence on torch's seed, and that dropout's mask is the same in the forward and the
backward."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import ember.prims as prims
from ember.inductor.backend import inductor
from ember.inductor.codegen.cpp.ops import PRELUDE, RANDOM
from ember.inductor.ir import body
from ember.inductor.ir.program import ExternNode, LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, compile_graph
from ember.prims.decompositions import decompose
from ember.runtime import ArtifactCache

N = 100_000


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("random-cache")))


def samples(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.rand_like(x), torch.randn(N), torch.rand(N), torch.empty(N).uniform_(-2.0, 3.0)


@pytest.fixture(scope="module")
def compiled_samples(cache: ArtifactCache) -> Any:
    x = torch.zeros(N)
    return compile_graph(prims.trace(samples, x), (x,), cache=cache), x


def test_sampling_is_a_loop_that_calls_philox(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.zeros(N)
    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        program = lower_graph(decompose(prims.trace(samples, x), DECOMPOSITIONS))
    assert "falls back" not in caplog.text
    externs = [n.target for n in program.nodes if isinstance(n, ExternNode)]
    assert externs == ["prims::random_seed"] * 4  # one fresh seed per draw, no fallback
    kinds = sorted(
        str(value.args[2])
        for node in program.nodes
        if isinstance(node, LoopNode)
        for value in body.walk(node.body)
        if value.op == "random"
    )
    assert kinds == ["normal", "uniform", "uniform", "uniform"]


def test_uniform_and_normal_have_their_distributions(compiled_samples: Any) -> None:
    compiled, x = compiled_samples
    kernels = compiled.module.replace(PRELUDE.strip(), "")
    assert all(f"{fn}(" in kernels for fn in RANDOM.values())
    torch.manual_seed(0)
    uniform, normal, rand, shifted = compiled(x)
    for u in (uniform, rand):
        assert u.dtype == torch.float32 and u.shape == (N,)
        assert u.min().item() >= 0.0 and u.max().item() < 1.0
        # mean 1/2 and variance 1/12, within 6 standard errors
        assert abs(u.mean().item() - 0.5) < 6 * (1 / 12) ** 0.5 / N**0.5
        assert abs(u.var().item() - 1 / 12) < 6 * (1 / 180) ** 0.5 / N**0.5
        assert len(torch.unique(u)) > 0.99 * N
    assert abs(normal.mean().item()) < 6 / N**0.5
    assert abs(normal.std().item() - 1.0) < 6 * 0.5**0.5 / N**0.5
    assert abs(((normal > 1.0).float().mean().item()) - 0.158655) < 0.01  # the shape too
    assert shifted.min().item() >= -2.0 and shifted.max().item() < 3.0
    assert abs(shifted.mean().item() - 0.5) < 6 * (25 / 12) ** 0.5 / N**0.5
    # two draws in one graph are never merged into one
    assert not torch.equal(uniform, rand)


def test_torch_seed_decides_the_numbers(compiled_samples: Any) -> None:
    compiled, x = compiled_samples
    torch.manual_seed(123)
    first = compiled(x)
    torch.manual_seed(123)
    again = compiled(x)
    torch.manual_seed(124)
    other = compiled(x)
    for a, b, c in zip(first, again, other):
        assert torch.equal(a, b)
        assert not torch.equal(a, c)
    assert not torch.equal(compiled(x)[0], again[0])  # no reseed: the generator moved on


def reread(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r = torch.rand(64, 50)
    return r.sum(1), r.t() * 1.0, r


def test_a_sample_recomputed_in_several_kernels_is_the_same_number(
    cache: ArtifactCache,
) -> None:
    x = torch.zeros(1)
    compiled = compile_graph(prims.trace(reread, x), (x,), cache=cache)
    assert compiled.kernel_count > 1  # the row sums, the transpose and r itself
    sums, transposed, r = compiled(x)
    torch.testing.assert_close(sums, r.sum(1))
    assert torch.equal(transposed, r.t())


def test_float64_samples_fall_back_and_stay_correct(cache: ArtifactCache) -> None:
    def draw() -> torch.Tensor:
        return torch.rand(1000, dtype=torch.float64)

    result = compile_graph(prims.trace(draw), (), cache=cache)()
    assert result.dtype == torch.float64 and result.min() >= 0.0 and result.max() < 1.0


def dropout_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.dropout(x * w, 0.3, training=True)


def test_dropout_mask_is_the_same_in_forward_and_backward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    x = (torch.randn(200, 100).abs() + 0.5).requires_grad_()  # a zero output was dropped
    w = torch.full((100,), 2.0, requires_grad=True)
    compiled = inductor(prims.trace(dropout_step, x, w), (x, w))
    torch.manual_seed(0)
    out = compiled(x, w)
    upstream = torch.randn(200, 100)
    out.backward(upstream)
    dropped = out == 0
    assert abs(dropped.float().mean().item() - 0.3) < 6 * (0.3 * 0.7 / out.numel()) ** 0.5
    values = x.detach()
    torch.testing.assert_close(out[~dropped], (values * 2.0)[~dropped] / 0.7)
    # the backward saw the forward's mask: gradients vanish exactly where the output did
    assert x.grad is not None and w.grad is not None
    assert torch.equal(x.grad == 0, dropped)
    torch.testing.assert_close(x.grad, torch.where(dropped, 0.0, upstream * 2.0 / 0.7))
    expected = torch.where(dropped, 0.0, upstream * values / 0.7).sum(0)
    torch.testing.assert_close(w.grad, expected)


def test_a_host_sample_in_a_device_graph_draws_its_seed_where_the_kernels_run() -> None:
    """OPT's and BART's LayerDrop draw `torch.rand([])` on the CPU inside a CUDA graph: the
    sample is computed by the graph's (Triton) kernels, so its seed must live on their device
    (a CPU seed reached the kernel: KernelDeviceError). Traced on meta tensors here, the
    device a CPU-only machine has besides the CPU."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = torch.rand([]) < 0.5
        return x * 2, keep

    graph = decompose(prims.trace(fn, torch.randn(3, device="meta")), DECOMPOSITIONS)
    program = lower_graph(graph)
    seeds = [n for n in program.nodes if isinstance(n, ExternNode)]
    assert [n.target for n in seeds] == ["prims::random_seed"]
    assert seeds[0].kwargs["device"] == torch.device("meta")


def test_a_device_graphs_seed_is_drawn_on_the_device_with_no_host_copy() -> None:
    """Every dropout mask's seed comes from `prims::random_seed`. For a GPU graph it is drawn
    on the GPU: a seed drawn on the host and copied over on every call is a host-to-device
    copy, which a CUDA graph cannot capture (the warm-up watcher of mode="reduce-overhead"
    skips the graph), and a recorded copy would replay one seed, so one mask, forever. Meta
    stands in for the GPU here."""
    from ember.runtime.cudagraphs.warmup import run_watched

    meta = torch.device("meta")
    random_seed = prims.resolve_op("prims::random_seed")
    (seed,), problem = run_watched(
        lambda args: (random_seed(device=meta),), [], lambda t: t.device == meta
    )
    assert problem is None
    assert seed.device == meta and seed.dtype == torch.int64 and seed.dim() == 0
