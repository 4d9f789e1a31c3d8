"""log_softmax decomposed in the joint Graph: the training forward saves the bf16 logits and
two values per row, not the float32 log-probabilities; gradients through ember-inductor equal
eager's (half_to_float included). native_batch_norm_backward decomposed there too: a
training step saves no copies of the running stats."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import ember
from ember.autodiff import aot
from ember.inductor.backend import inductor
from ember.inductor.passes.joint_decompositions import JOINT_DECOMPOSITIONS
from ember.prims import Graph, Interpreter, TensorSpec, trace

ROWS, VOCAB = 16, 100


def lm_head_loss(h: torch.Tensor, w: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    logits = h.bfloat16() @ w.bfloat16().t()
    return F.cross_entropy(logits.float(), target)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(ROWS, 32, generator=generator, requires_grad=True)
    w = torch.randn(VOCAB, 32, generator=generator, requires_grad=True)
    target = torch.randint(0, VOCAB, (ROWS,), generator=generator)
    target[3] = -100  # ignored
    return h, w, target


def _saved_specs(decompositions: dict[str, Callable[..., Any]] | None) -> list[TensorSpec]:
    """The specs of what the training forward saves for the backward."""
    inputs = _inputs()
    forwards: list[Graph] = []

    def record(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        forwards.append(graph)
        return Interpreter(graph)

    graph = trace(lm_head_loss, *inputs)
    aot(
        graph,
        inputs,
        fw_compiler=record,
        bw_compiler=lambda g, _: Interpreter(g),
        decompositions=decompositions,
    )
    forward = forwards[0]
    values = forward.values()
    leaves = forward.output_leaves[1:]  # the loss, then what the backward reads
    specs = [values[leaf.name].spec for leaf in leaves if hasattr(leaf, "name")]
    return [spec for spec in specs if isinstance(spec, TensorSpec)]


def test_the_forward_saves_logits_not_float32_log_probabilities() -> None:
    def wide(specs: list[TensorSpec]) -> list[torch.dtype]:
        return [s.dtype for s in specs if tuple(s.shape) == (ROWS, VOCAB)]

    assert wide(_saved_specs(None)) == [torch.float32]  # log_softmax opaque: its output
    assert wide(_saved_specs(JOINT_DECOMPOSITIONS)) == [torch.bfloat16]  # the product


def test_gradients_through_inductor_equal_eager() -> None:
    h, w, target = _inputs()
    loss = lm_head_loss(h, w, target)
    expected = torch.autograd.grad(loss, (h, w))
    compiled = ember.compile(lm_head_loss, backend=inductor)
    h2, w2 = (t.detach().requires_grad_() for t in (h, w))
    ours = compiled(h2, w2, target)
    ours.backward()
    torch.testing.assert_close(ours, loss)
    torch.testing.assert_close(h2.grad, expected[0])
    torch.testing.assert_close(w2.grad, expected[1])


def test_half_to_float_computes_in_float32() -> None:
    """CUDA's `_log_softmax(x, dim, half_to_float=True)` of a 16-bit x is float32 (the CPU
    kernel refuses the flag): the decomposition computes on x upcast."""
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    out = JOINT_DECOMPOSITIONS["aten::_log_softmax.default"](x, 1, True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.log_softmax(x.float(), 1))


class _ConvNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x)).relu().sum()


class _CountCopies(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.clones = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.clone.default:
            self.clones += 1
        return func(*args, **(kwargs or {}))


def test_batch_norm_training_saves_no_copy_of_its_running_stats() -> None:
    """The forward updates the running stats, which the opaque backward op takes (unread in
    training): it saved each as a copy, one device copy per buffer a step. Decomposed, none."""
    torch.manual_seed(0)
    model = _ConvNorm().train()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 6, 6)
    compiled = ember.compile(model, backend=inductor)
    compiled(x).backward()  # compile
    reference(x).backward()
    counter = _CountCopies()
    with counter:
        ours = compiled(x)
        ours.backward()
    expected = reference(x)
    expected.backward()
    assert counter.clones == 0
    torch.testing.assert_close(ours, expected)
    for ours_p, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours_p.grad, theirs.grad, rtol=1e-4, atol=1e-4)  # sum order
    for ours_b, theirs in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(ours_b, theirs)


class _ConvNormReluConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.norm(self.first(x)).relu()).sum()


def _saved_maps(decompositions: dict[str, Callable[..., Any]]) -> list[str]:
    """The ops that produced the feature maps a training forward saves."""
    torch.manual_seed(0)
    model = _ConvNormReluConv().train()
    x = torch.randn(2, 3, 8, 8)
    forwards: list[Graph] = []

    def record(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        forwards.append(graph)
        return Interpreter(graph)

    graph = ember.prims.trace(model, x)
    aot(graph, (x,), fw_compiler=record, bw_compiler=lambda g, _: Interpreter(g),
        decompositions=decompositions)  # fmt: skip
    forward = forwards[0]
    producers = {v.name: n.target for n in forward.nodes for v in n.output_values()}
    saved = forward.output_leaves[-int(forward.meta["saved_outputs"]) :]
    values = forward.values()
    return sorted(
        producers[leaf.name]
        for leaf in saved
        if hasattr(leaf, "name")
        and leaf.name in producers
        and isinstance(values[leaf.name].spec, TensorSpec)
        and tuple(values[leaf.name].spec.shape) == (2, 8, 8, 8)
    )


def test_batch_norm_forward_saves_the_convolution_and_the_relu_the_next_convolution_reads() -> None:
    """Opaque, batch norm's output could not be recomputed, so the forward saved the ReLU
    after it besides the convolution's output. Decomposed, norm and ReLU are recomputable,
    but the ReLU output is the next convolution's input, which its weight gradient (a
    library kernel) reads in the backward: recomputing it would be a kernel of its own, so
    ember-autodiff's lone-recompute rule saves it (as torch.compile's partitioner does;
    ResNet-50 training on the H100: 25 recompute kernels, 0.5 ms a step, gone). The norm's
    own output is saved by neither (test_lone_recomputes covers the rule switched off)."""
    opaque = {k: v for k, v in JOINT_DECOMPOSITIONS.items() if "batch_norm_legit" not in k}
    assert _saved_maps(opaque) == ["aten::convolution.default", "aten::relu.default"]
    assert _saved_maps(JOINT_DECOMPOSITIONS) == [
        "aten::convolution.default",
        "aten::relu.default",
    ]


class _ConvPoolConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.pool(self.first(x).relu())).square().sum()


def _saved_integer_dtypes(decompositions: dict[str, Callable[..., Any]]) -> list[torch.dtype]:
    torch.manual_seed(0)
    model = _ConvPoolConv().train()
    x = torch.randn(2, 3, 8, 8)
    forwards: list[Graph] = []

    def record(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        forwards.append(graph)
        return Interpreter(graph)

    graph = ember.prims.trace(model, x)
    aot(graph, (x,), fw_compiler=record, bw_compiler=lambda g, _: Interpreter(g),
        decompositions=decompositions)  # fmt: skip
    forward = forwards[0]
    values = forward.values()
    saved = forward.output_leaves[-int(forward.meta["saved_outputs"]) :]
    specs = [values[leaf.name].spec for leaf in saved if hasattr(leaf, "name")]
    return [s.dtype for s in specs if isinstance(s, TensorSpec) and not s.dtype.is_floating_point]


def test_max_pooling_saves_no_int64_indices() -> None:
    """Opaque, max pooling's int64 flat indices were saved for the backward (ResNet-50 at
    batch 32: 51 MB). Decomposed, the cut saves at most the int8 offset in each window (as
    torch.compile does); here the backward finds the window's maximum again from the
    convolution output it saves anyway, and computes the flat index from it."""
    opaque = {k: v for k, v in JOINT_DECOMPOSITIONS.items() if "max_pool" not in k}
    assert _saved_integer_dtypes(opaque) == [torch.int64]
    assert set(_saved_integer_dtypes(JOINT_DECOMPOSITIONS)) <= {torch.int8}
    torch.manual_seed(0)
    model = _ConvPoolConv().train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    ours = ember.compile(model, backend=inductor)(x)
    ours.backward()
    expected = reference(x)
    expected.backward()
    torch.testing.assert_close(ours, expected)
    for ours_p, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours_p.grad, theirs.grad, rtol=1e-4, atol=1e-4)
