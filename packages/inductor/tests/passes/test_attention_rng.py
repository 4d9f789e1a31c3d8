"""The attention-RNG pass: a dropout-free attention backward stops reading the philox seed and
offset the forward saved (CPU tensors on a GPU, which kept the backward off CUDA graphs), and
the compiled graph tells the CUDA graph tree which inputs it never reads, and a forward's
wrapper hands the RNG outputs back as the op made them. Graphs are traced on meta tensors:
torch has no CPU kernel for memory-efficient attention."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from ember.inductor.passes.attention_rng import (
    drop_unread_attention_rng,
    dropout_attention_at,
    unread_inputs,
)
from ember.inductor.pipeline import compile_graph
from ember.prims import TensorSpec, dumps, loads, trace, verify
from ember.runtime.cudagraphs import set_recorder_factory

META = torch.device("meta")


def _efficient_backward(dropout_p: float) -> Any:
    def backward(*args: torch.Tensor) -> Any:
        return torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            *args, dropout_p, [True, True, True, False], False, scale=0.25
        )

    return backward


def _arguments() -> list[torch.Tensor]:
    """grad, q, k, v, bias, out, logsumexp on the device; seed and offset on the CPU, as
    memory-efficient attention without dropout returns them on a GPU."""
    qkv = [torch.empty(2, 2, 8, 16, device=META) for _ in range(6)]
    grad, q, k, v, out = qkv[0], qkv[1], qkv[2], qkv[3], qkv[4]
    bias, logsumexp = torch.empty(2, 2, 8, 8, device=META), torch.empty(2, 2, 32, device=META)
    seed, offset = torch.empty((), dtype=torch.int64), torch.empty((), dtype=torch.int64)
    return [grad, q, k, v, bias, out, logsumexp, seed, offset]


def test_dropout_free_attention_backward_stops_reading_the_saved_rng_state() -> None:
    graph = trace(_efficient_backward(0.0), *_arguments())
    assert unread_inputs(graph) == set()
    rewritten = drop_unread_attention_rng(graph)
    assert unread_inputs(rewritten) == {7, 8}  # the seed and the offset
    (attention,) = [n for n in rewritten.nodes if "attention" in n.target]
    seed, offset = attention.args[7], attention.args[8]
    placeholder = rewritten.values()[seed.name].spec
    assert seed == offset and isinstance(placeholder, TensorSpec)
    assert (placeholder.device, placeholder.dtype, placeholder.shape) == (META, torch.int64, ())
    verify(rewritten)
    assert loads(dumps(rewritten)) == rewritten
    assert unread_inputs(graph) == set()  # the pass left its input as it was


def test_attention_with_dropout_keeps_its_rng_state() -> None:
    graph = trace(_efficient_backward(0.1), *_arguments())
    assert drop_unread_attention_rng(graph) is graph
    assert unread_inputs(graph) == set()


class _Recorder:
    """Enough of a Recorder for a tree that is made but never records."""

    def on_device(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type != "cpu"


@pytest.fixture
def no_gpu_tree() -> Iterator[None]:
    set_recorder_factory(lambda device: _Recorder())  # type: ignore[arg-type,return-value]
    yield
    set_recorder_factory(None)


def test_compiled_graph_hands_the_tree_the_inputs_it_never_reads(no_gpu_tree: None) -> None:
    def fn(x: torch.Tensor, unread: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    inputs = (torch.randn(3), torch.empty((), dtype=torch.int64), torch.randn(3))
    compiled = compile_graph(trace(fn, *inputs), inputs)
    function = compiled.use_cudagraphs(torch.device("cuda", 0), static_leaves={1, 2})
    assert function is not None
    assert function.unread_positions == {1}
    assert function.static_positions == {2}  # unread wins: no address check either


def test_backwards_of_two_layers_share_one_placeholder() -> None:
    def two_layers(*args: torch.Tensor) -> Any:
        first = _efficient_backward(0.0)(*args)
        return first[0], _efficient_backward(0.0)(first[0], *args[1:])[0]

    rewritten = drop_unread_attention_rng(trace(two_layers, *_arguments()))
    assert [n.target for n in rewritten.nodes].count("aten::zeros.default") == 1
    assert unread_inputs(rewritten) == {7, 8}


def test_an_input_read_only_for_its_size_is_read() -> None:
    """A CUDA graph replays only calls of the shapes it was recorded with: an input whose
    size is a symbol of the Graph stays in the tree's signature."""

    def fn(x: torch.Tensor, sized: torch.Tensor, unread: torch.Tensor) -> torch.Tensor:
        return x * 2 + sized.shape[0]

    graph = trace(fn, torch.randn(3, 4), torch.randn(5, 2), torch.ones(1), dynamic=True)
    assert unread_inputs(graph) == {2}


def test_a_forward_hands_its_attention_rng_state_back_as_the_op_made_it() -> None:
    """On a GPU, memory-efficient attention returns its seed and offset on the CPU although
    the Graph says they live on the GPU (as every output of a GPU op). A training forward
    returns them for the backward: its wrapper must hand them back as they are, never copy
    them into device buffers (a host-to-device copy keeps the forward off CUDA graphs). The
    CUDA wrapper runs here on meta tensors, kernels skipped, the attention answering as on a
    GPU; the warm-up watcher of mode="reduce-overhead" looks for the copy."""
    import collections
    import types

    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.codegen.wrapper import wrapper_namespace
    from ember.inductor.config import InductorConfig
    from ember.inductor.pipeline import generate
    from ember.prims import resolve_op
    from ember.prims.config import load
    from ember.runtime.cudagraphs.warmup import run_watched

    attention = torch.ops.aten._scaled_dot_product_efficient_attention.default

    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        out, logsumexp, seed, offset = attention(q * 2, k, v, None, True, 0.0, True)
        return out + 1, logsumexp, seed, offset

    def as_on_a_gpu(*args: Any, **kwargs: Any) -> Any:
        out, logsumexp, _, _ = attention(*args, **kwargs)
        return (
            out,
            logsumexp,
            torch.empty((), dtype=torch.int64),
            torch.empty((), dtype=torch.int64),
        )

    inputs = [torch.empty(2, 2, 8, 16, device=META) for _ in range(3)]
    artifact = generate(trace(forward, *inputs), TritonBackend(), load(InductorConfig), META)
    ops = {target: resolve_op(target) for target in artifact["targets"]}
    ops["aten::_scaled_dot_product_efficient_attention.default"] = as_on_a_gpu
    skipped = types.SimpleNamespace(launch=lambda *args: None)  # the wrapper calls `.launch`
    kernels: dict[str, Any] = collections.defaultdict(lambda: skipped)
    namespace = wrapper_namespace(kernels, ops)
    exec(compile(artifact["wrapper"], "<wrapper>", "exec"), namespace)  # noqa: S102
    results, problem = run_watched(namespace["call"], inputs, lambda t: t.device == META)
    assert problem is None
    assert [r.device.type for r in results] == ["meta", "meta", "cpu", "cpu"]


def _efficient_forward(dropout_p: float) -> Any:
    def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        attention = torch.ops.aten._scaled_dot_product_efficient_attention.default
        return attention(q * 2, k, v, None, True, dropout_p, True)

    return forward


@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_attention_with_dropout_is_named_for_cuda_graphs(dropout_p: float) -> None:
    """Its philox seed and offset switch between CPU tensors (outside a capture) and device
    tensors (inside one): a float32 GPT-2 with attention dropout crashed in the backward under
    mode="reduce-overhead" on the H100. The forward and the backward are both named."""
    inputs = [torch.empty(2, 2, 8, 16, device=META) for _ in range(3)]
    forward = trace(_efficient_forward(dropout_p), *inputs)
    backward = trace(_efficient_backward(dropout_p), *_arguments())
    if dropout_p == 0:
        assert dropout_attention_at(forward) is None
        assert dropout_attention_at(backward) is None
        return
    for graph in (forward, backward):
        where = dropout_attention_at(graph)
        assert where is not None and "efficient_attention" in where and "dropout 0.1" in where


def test_a_cuda_graph_with_attention_dropout_runs_without_cuda_graphs(
    no_gpu_tree: None, caplog: pytest.LogCaptureFixture
) -> None:
    from ember.prims.logs import topic_logger

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    inputs = (torch.randn(3),)
    compiled = compile_graph(trace(fn, *inputs), inputs)
    compiled._graph = trace(_efficient_forward(0.1), *[torch.empty(2, 2, 8, 16, device=META)] * 3)
    hints = topic_logger("perf_hints")
    level = hints.level
    hints.setLevel("WARNING")
    try:
        with caplog.at_level("WARNING"):
            function = compiled.use_cudagraphs(torch.device("cuda", 0))
    finally:
        hints.setLevel(level)
    assert function is None  # not a tree member: it runs as compiled, every call
    assert any(
        "cpu_in_graph" in r.getMessage() and "dropout" in r.getMessage() for r in caplog.records
    )
