"""Extern calls receive their tensor arguments in the strides the Graph declares (eager's).

Issue 14: hf_swin's training forward on the H100 failed with "attn_bias is not correctly
aligned (strideB). attn_bias.stride(0) = 7203". Eager's attention pads a [B, 3, 49, 49] bias to
a last dim of 56 and slices it back, so memory-efficient attention receives strides (8232,
2744, 56, 1); a shared padded value left lazy (an overlapping-window rule, 274cf34) was computed
row-major for the op instead. The CUDA wrapper is generated here without a GPU and run on meta
tensors: what the op receives is checked, not the generated text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.wrapper import wrapper_namespace
from ember.inductor.config import InductorConfig
from ember.inductor.ir.program import ExternNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS, backend_for, compile_graph, generate
from ember.prims import Graph, Ref, Value
from ember.prims.config import load
from ember.prims.decompositions import decompose

CUDA = torch.device("cuda", 0)
EFFICIENT = "aten::_scaled_dot_product_efficient_attention.default"
WINDOWS, HEADS, AREA, DIM = 8, 3, 49, 32  # Swin's 7x7 windows, 3 heads (batch 2 x 4 windows)


def _swin_forward(shifted: bool, saves: str) -> Any:
    """A Swin window attention's training forward as ember-autodiff hands it over: the
    relative position bias (a gather of a parameter table), for shifted windows plus the
    shift mask, padded and sliced as eager's attention does on CUDA; the bias (or its padded
    buffer) is saved for the backward."""

    def forward(q: Any, k: Any, v: Any, table: Any, index: Any, mask: Any) -> Any:
        bias = table[index].view(AREA, AREA, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        if shifted:
            windows = mask.unsqueeze(1).unsqueeze(0).expand(2, -1, -1, -1, -1)
            bias = bias + windows.reshape(-1, 1, AREA, AREA)
        padded = torch.nn.functional.pad(bias.to(torch.bfloat16), (0, 7))
        sliced = padded[..., :AREA].expand(WINDOWS, -1, -1, -1)
        attention = torch.ops.aten._scaled_dot_product_efficient_attention
        out, lse, seed, offset = attention(q, k, v, sliced, True)
        saved = padded if saves == "padded" else sliced
        return out, q, k, v, saved, out, lse, seed, offset

    return forward


def _inputs(device: str = "cpu") -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(WINDOWS, HEADS, AREA, DIM, generator=generator).to(torch.bfloat16)
        for _ in range(3)
    )
    table = torch.randn(169, HEADS, generator=generator)
    index = torch.randint(0, 169, (AREA * AREA,), generator=generator)
    mask = torch.randn(4, AREA, AREA, generator=generator)
    return tuple(t.to(device) for t in (q, k, v, table, index, mask))


def _on_cuda(graph: Graph) -> Graph:
    """The traced CPU Graph as the CUDA one (only its specs' device differs)."""

    def move(value: Any) -> Any:
        if isinstance(value, Value) and hasattr(value.spec, "device"):
            return Value(value.name, dataclasses.replace(value.spec, device=CUDA))
        return value

    for node in graph.nodes:
        node.outputs = [move(output) for output in node.outputs]
    inputs = [dataclasses.replace(i, value=move(i.value)) for i in graph.inputs]
    moved = dataclasses.replace(graph, inputs=inputs)
    moved.meta["saved_outputs"] = "8"
    return moved


class _Launches(dict[str, Any]):
    """Every kernel of the wrapper, as a launch that does nothing (meta memory)."""

    def __missing__(self, name: str) -> Any:
        return type("Kernel", (), {"launch": staticmethod(lambda *args: None)})


def _meta_empty(size: Any, stride: Any, dtype: torch.dtype, device: Any) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


def _received_bias(graph: Graph, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Run the CUDA wrapper of `graph` on meta tensors: the bias memory-efficient attention
    receives."""
    config = load(InductorConfig)
    wrapper = generate(graph, backend_for(CUDA, config), config, CUDA)["wrapper"]
    received: list[torch.Tensor] = []

    def attention(*args: Any) -> Any:
        received.append(args[3])
        return torch.ops.aten._scaled_dot_product_efficient_attention.default(*args)

    namespace = wrapper_namespace({}, {})
    namespace.update(kernels=_Launches(), ops={EFFICIENT: attention}, empty_strided=_meta_empty)
    exec(compile(wrapper, "<wrapper>", "exec"), namespace)  # noqa: S102
    namespace["call"]([t.to("meta") for t in inputs])
    (bias,) = received
    return bias


def _declared_bias(graph: Graph) -> tuple[int, ...]:
    (node,) = [n for n in graph.nodes if n.target == EFFICIENT]
    return tuple(graph.values()[node.args[3].name].spec.strides)


@pytest.mark.parametrize(
    ("shifted", "saves"),
    [(True, "padded"), (True, "sliced"), (False, "sliced")],
    ids=["shifted-saves-padded", "shifted-saves-bias", "expanded-bias"],
)
def test_an_attention_bias_reaches_the_op_in_eager_strides(shifted: bool, saves: str) -> None:
    graph = _on_cuda(prims.trace(_swin_forward(shifted, saves), *_inputs()))
    bias = _received_bias(graph, _inputs())
    assert bias.shape == (WINDOWS, HEADS, AREA, AREA)
    assert bias.stride() == _declared_bias(graph)
    assert all(stride % 8 == 0 for stride in bias.stride()[:-1])  # the kernel's alignment


def test_the_padded_bias_is_computed_once() -> None:
    """The bias the op reads is a view of the padded buffer the forward saves (one kernel
    writes it; it was computed twice, row-major for the op and padded for the backward)."""
    graph = _on_cuda(prims.trace(_swin_forward(True, "padded"), *_inputs()))
    backend = backend_for(CUDA, load(InductorConfig))
    program = lower_graph(decompose(graph, DECOMPOSITIONS), backend.dtypes)
    (call,) = [n for n in program.nodes if isinstance(n, ExternNode) and n.target == EFFICIENT]
    saved = program.outputs[4]
    assert call.args[3].storage == saved.storage
    assert tuple(int(s) for s in call.args[3].layout.stride) == (8232, 2744, 56, 1)


def _padded_mask_attention(q: Any, table: Any, mask: Any) -> Any:
    """CPU attention with a bias padded and sliced as eager pads one on CUDA."""
    bias = (table.unsqueeze(0) + mask) * 0.5
    sliced = torch.nn.functional.pad(bias, (0, 7))[..., :AREA]
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return attention(q, q, q, attn_mask=sliced)[0] + 1


def test_a_cpu_extern_receives_its_bias_in_eager_strides() -> None:
    """The rule is the backends': the C++ wrapper passes the CPU attention its mask as a view
    of the padded buffer too, with the values eager computes."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(4, HEADS, AREA, DIM, generator=generator)
    table = torch.randn(HEADS, AREA, AREA, generator=generator)
    mask = torch.randn(4, 1, AREA, AREA, generator=generator)
    compiled = compile_graph(prims.trace(_padded_mask_attention, q, table, mask), (q, table, mask))
    namespace = compiled.call.__globals__
    target = "aten::_scaled_dot_product_flash_attention_for_cpu.default"
    op = namespace["ops"][target]
    received: list[torch.Tensor] = []

    def attention(*args: Any, **kwargs: Any) -> Any:
        received.append(kwargs["attn_mask"])
        return op(*args, **kwargs)

    namespace["ops"] = {**namespace["ops"], target: attention}
    try:
        out = compiled(q, table, mask)
    finally:
        namespace["ops"] = {**namespace["ops"], target: op}
    eager_bias = torch.nn.functional.pad((table.unsqueeze(0) + mask) * 0.5, (0, 7))[..., :AREA]
    assert received[0].stride() == eager_bias.stride()
    torch.testing.assert_close(out, _padded_mask_attention(q, table, mask))


def _reduced_bias(q: Any, k: Any, v: Any, scores: Any) -> Any:
    """A bf16 bias that a reduction computes (into a row-major buffer of its own), expanded
    over the windows when it has one."""
    bias = scores.sum(-1).expand(WINDOWS, -1, -1, -1)
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True)


def _declared(graph: Graph, target: str, strides: tuple[int, ...]) -> Graph:
    """`graph` with its last `target` node's result declared in `strides` (as eager's padding
    declares a bias)."""
    node = [n for n in graph.nodes if n.target == target][-1]
    (value,) = node.outputs
    assert isinstance(value, Value)
    node.outputs = [Value(value.name, dataclasses.replace(value.spec, strides=strides))]
    return graph


@pytest.mark.parametrize("windows", [WINDOWS, 1])
def test_a_bias_realized_in_other_strides_is_copied_into_the_declared_ones(windows: int) -> None:
    """An argument the op checks (`EXACT_STRIDES`) that is memory in other strides (a
    reduction's row-major result, here declared padded) reaches the op in the declared ones;
    a repeated (expanded) one is copied once and viewed with stride 0."""
    q, k, v = _inputs()[:3]
    scores = torch.randn(windows, HEADS, AREA, AREA, 2).to(torch.bfloat16)
    strides = (0 if windows == 1 else 8232, 2744, 56, 1)
    graph = decompose(_on_cuda(prims.trace(_reduced_bias, q, k, v, scores)), DECOMPOSITIONS)
    (call,) = [n for n in graph.nodes if n.target == EFFICIENT]
    producer = [n for n in graph.nodes if call.args[3] in [Ref(o.name) for o in n.output_values()]]
    graph = _declared(graph, producer[0].target, strides)
    program = lower_graph(graph, backend_for(CUDA, load(InductorConfig)).dtypes)
    (extern,) = [n for n in program.nodes if isinstance(n, ExternNode) and n.target == EFFICIENT]
    bias = extern.args[3]
    assert tuple(int(s) for s in bias.layout.stride) == strides
    storage = program.storages[bias.storage].layout  # spans the bias: a window once if expanded
    assert storage is not None and storage.size == (1 + sum((n - 1) * s for n, s in zip(
        (windows, HEADS, AREA, AREA), strides)),)  # fmt: skip


def _sliced_matmul(a: Any, w: Any) -> Any:
    return torch.mm((a * 2)[:, 3:13], w)


def test_an_unchecked_slice_is_computed_alone_and_equal_to_eager() -> None:
    """A matmul does not check its operands' strides: a slice of a lazy value is computed on
    its own elements, row-major, not as a view of its whole base (afff0aa's first form wrote
    the 64x1000 base for a 64x10 operand)."""
    generator = torch.Generator().manual_seed(0)
    a, w = torch.randn(64, 1000, generator=generator), torch.randn(10, 7, generator=generator)
    graph = prims.trace(_sliced_matmul, a, w)
    program = lower_graph(
        decompose(graph, DECOMPOSITIONS),
        backend_for(torch.device("cpu"), load(InductorConfig)).dtypes,
    )
    written = [
        tuple(int(n) for n in storage.layout.size)
        for storage in program.storages.values()
        if not storage.is_input and storage.layout is not None
    ]
    assert written == [(64, 10)]
    torch.testing.assert_close(compile_graph(graph, [a, w])(a, w), _sliced_matmul(a, w))
