"""Memory planning: buffers take the memory of dead ones (or of what their pointwise kernel
reads for the last time), results stay eager's, fewer allocations and a lower planned peak."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.inductor.scheduler import memory_planning
from ember.inductor.scheduler.memory_planning import returns_fresh
from ember.prims.config import load
from ember.runtime import ArtifactCache


def matmul_chain(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor) -> Any:
    a = torch.relu(x @ w1) * 2 + 1  # the mm result is dead after this pointwise kernel
    b = torch.sigmoid(a @ w2) - 0.5
    c = torch.tanh(b @ w3) + a
    d = torch.exp(-(c @ w1)) * 3
    return d.sum(1)


def widen_then_narrow(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> Any:
    # the wide mm result and its activation are the peak unless one takes the other's memory
    return torch.nn.functional.gelu(x @ w1) @ w2


def pointwise_then_reductions(x: torch.Tensor) -> Any:
    # buffers of equal size whose lifetimes do not overlap: later ones take earlier memory
    y = torch.softmax(x, -1)
    z = torch.softmax(y * 3, 0)
    w = torch.softmax(z + y, -1)
    return torch.softmax(w * 2, 0).sum(0)


def _inputs(fn: Callable[..., Any]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    if fn is matmul_chain:
        return [torch.randn(32, 48, generator=generator)] + [
            torch.randn(48, 48, generator=generator) for _ in range(3)
        ]
    if fn is widen_then_narrow:
        sizes = [(32, 8), (8, 512), (512, 4)]
        return [torch.randn(*size, generator=generator) for size in sizes]
    return [torch.randn(40, 56, generator=generator)]


def _artifact(fn: Callable[..., Any], reuse: bool) -> dict[str, Any]:
    graph = prims.trace(fn, *_inputs(fn))
    config = dataclasses.replace(load(InductorConfig), reuse_buffers=reuse)
    return generate(graph, CppBackend(), config)


@pytest.mark.parametrize("fn", [matmul_chain, widen_then_narrow, pointwise_then_reductions])
@pytest.mark.parametrize("reuse", [True, False])
def test_values_match_eager(fn: Callable[..., Any], reuse: bool, tmp_path: Path) -> None:
    inputs = _inputs(fn)
    before = [t.clone() for t in inputs]
    config = dataclasses.replace(load(InductorConfig), reuse_buffers=reuse, cache=False)
    compiled = compile_graph(
        prims.trace(fn, *inputs), inputs, config=config, cache=ArtifactCache(tmp_path)
    )
    for _ in range(2):  # a second call runs over memory the first one reused
        torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-5, atol=1e-5)
    for given, original in zip(inputs, before):  # inputs are never written in place
        assert torch.equal(given, original)


def test_matmul_chain_writes_pointwise_results_in_place() -> None:
    planned, fresh = _artifact(matmul_chain, True), _artifact(matmul_chain, False)
    assert planned["memory"]["in_place"] >= 3  # relu, sigmoid, exp over their mm results
    assert planned["memory"]["fresh_allocations"] < fresh["memory"]["fresh_allocations"]
    assert planned["memory"]["planned_peak_bytes"] <= fresh["memory"]["planned_peak_bytes"]
    # the property in the generated source: fewer empty_strided calls
    count = planned["wrapper"].count("empty_strided(")
    assert count < fresh["wrapper"].count("empty_strided(")
    assert "# in place" in planned["wrapper"] and "# in place" not in fresh["wrapper"]


def test_in_place_activation_halves_the_planned_peak() -> None:
    planned, fresh = _artifact(widen_then_narrow, True), _artifact(widen_then_narrow, False)
    wide = 32 * 512 * 4  # bytes of the mm result; gelu's output takes its memory
    assert fresh["memory"]["planned_peak_bytes"] >= 2 * wide
    assert planned["memory"]["planned_peak_bytes"] < 2 * wide


def test_dead_buffers_are_reused_by_later_ones() -> None:
    planned, fresh = (
        _artifact(pointwise_then_reductions, True),
        _artifact(pointwise_then_reductions, False),
    )
    assert planned["memory"]["reused"] >= 1
    assert planned["memory"]["fresh_allocations"] < fresh["memory"]["fresh_allocations"]
    assert planned["memory"]["planned_peak_bytes"] <= fresh["memory"]["planned_peak_bytes"]


def test_graph_inputs_are_never_taken() -> None:
    # x is read for the last time by the first kernel, at the stored index: still not reused
    wrapper = _artifact(lambda x: torch.relu(x * 2 + 1).sum(0), True)["wrapper"]
    assert "empty_strided(" in wrapper
    assert "as_strided(in0" not in wrapper and "in place in0" not in wrapper


def test_only_fresh_aten_results_count_as_new_memory() -> None:
    assert returns_fresh("aten::mm.default")
    assert returns_fresh("aten::convolution.default")
    assert not returns_fresh("aten::view.default")  # returns Tensor(a)
    assert not returns_fresh("aten::add_.Tensor")  # mutates its argument
    assert not returns_fresh("prims::view")  # prims may return views without saying so
    assert not returns_fresh("prims::convert_element_type")


def views_of_fallback_results(x: torch.Tensor, w: torch.Tensor) -> Any:
    # bfloat16 has no C++ kernels: casts, views and matmuls are fallback and extern calls whose
    # results alias (a view keeps a dead buffer's memory alive; it must not be reused)
    h = (x.to(torch.bfloat16) @ w.to(torch.bfloat16)).view(4, 8, 16).transpose(1, 2)
    g = (h.float() * 2).to(torch.bfloat16).reshape(32, 16) @ w.to(torch.bfloat16)[:16, :16]
    return h.float().sum(), g.float() + 1


def test_aliasing_fallback_views_keep_their_memory(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(1)
    x, w = torch.randn(32, 16, generator=generator), torch.randn(16, 16, generator=generator)
    config = dataclasses.replace(load(InductorConfig), cache=False)
    compiled = compile_graph(
        prims.trace(views_of_fallback_results, x, w),
        (x, w),
        config=config,
        cache=ArtifactCache(tmp_path),
    )
    for ours, theirs in zip(compiled(x, w), views_of_fallback_results(x, w)):
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)


def test_a_buffer_in_its_donors_layout_is_the_donor_itself() -> None:
    """A buffer placed in a dead one of the same dtype, sizes and strides (an mm result, or an
    allocated buffer) binds the donor's tensor instead of viewing it with `as_strided` (~2 us
    a call on the CPU); other layouts still view it. Values: `test_values_match_eager`."""
    for fn in (matmul_chain, pointwise_then_reductions):
        wrapper = _artifact(fn, True)["wrapper"]
        reuses = [
            line for line in wrapper.splitlines() if "# in place" in line or "# reuse" in line
        ]
        assert reuses
        for line in reuses:
            _, _, rest = line.strip().partition(" = ")
            if rest.startswith("as_strided("):
                continue
            assert rest.split("  #")[0].startswith("buf") and "same layout" in rest, line
        assert any("same layout" in line for line in reuses), fn.__name__
    in_place = [line for line in _artifact(matmul_chain, True)["wrapper"].splitlines()
                if "# in place" in line]  # fmt: skip
    assert in_place and all("as_strided(" not in line for line in in_place)


def alternating_weights(x: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> Any:
    # each layer's scaled weights, [4, 8] then [8, 4], are dead after their mm: a layer's
    # [4, 8] buffer can take the last layer's [4, 8] or (the later freed) [8, 4] memory
    h = x
    for scale in (2.0, 3.0, 4.0):
        h = torch.relu(h @ (up * scale))
        h = torch.relu(h @ (down * scale))
    return h


def test_a_dead_buffer_in_the_same_layout_is_taken_first() -> None:
    """Of dead buffers of equal size, one in the new buffer's own layout is taken before the
    most recently freed (GPT-2's cast weights alternate between [768, 3072] and [3072, 768]:
    each reuse in the other layout was an `as_strided` view a call, 38 of a batch-2 forward's
    67); values as eager's, the plan's peak unchanged."""
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(6, 4, generator=generator), torch.randn(4, 8, generator=generator),
              torch.randn(8, 4, generator=generator)]  # fmt: skip
    graph = prims.trace(alternating_weights, *inputs)
    config = dataclasses.replace(load(InductorConfig), cache=False)
    artifact = generate(graph, CppBackend(), config)
    reuses = [line for line in artifact["wrapper"].splitlines() if "# reuse" in line]
    assert len(reuses) >= 2  # the second and third layers' weights
    assert all("as_strided(" not in line for line in reuses), reuses
    compiled = compile_graph(graph, inputs, config=config)
    for _ in range(2):  # the second call runs over memory the first one reused
        torch.testing.assert_close(compiled(*inputs), alternating_weights(*inputs))


def test_the_block_peak_counts_the_buffers_below_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    planned = _artifact(widen_then_narrow, True)["memory"]
    # every buffer is small: the block a recording reserves is the whole planned peak
    assert planned["planned_block_bytes"] == planned["planned_peak_bytes"]
    wide = 32 * 512 * 4  # the mm result's bytes (gelu writes over it)
    monkeypatch.setattr(memory_planning, "BLOCK_BUFFER_LIMIT", wide)
    without_wide = _artifact(widen_then_narrow, True)["memory"]
    assert without_wide["planned_peak_bytes"] == planned["planned_peak_bytes"]
    assert without_wide["planned_block_bytes"] == planned["planned_peak_bytes"] - wide
