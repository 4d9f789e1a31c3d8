"""log_softmax decomposed in the joint Graph: the training forward saves the bf16 logits and
two values per row, not the float32 log-probabilities; gradients through ember-inductor equal
eager's (half_to_float included)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

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
