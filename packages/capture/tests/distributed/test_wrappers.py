"""wrappers.py: modules with hooks are called through their hooks with forward compiled, and
torch.nn modules read tensors set as plain attributes (FSDP's parameter views) each call."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ember.capture.cache import RecompileLimitWarning
from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x))).tanh()


def test_a_hooked_submodule_runs_its_hooks_around_its_compiled_forward() -> None:
    torch.manual_seed(0)
    outer = nn.Sequential(nn.Linear(4, 4), Two(), nn.Linear(4, 2))
    seen: list[str] = []
    outer[1].register_forward_pre_hook(lambda module, args: seen.append("pre"))
    outer[1].register_forward_hook(lambda module, args, output: output * 2)
    x = torch.randn(3, 4)
    expected = outer(x)
    seen.clear()
    counter = CompileCounter()
    got = ember_compile(outer, backend=counter)(x)
    torch.testing.assert_close(got, expected)
    assert seen == ["pre"]
    # the hooked module's forward is a Graph of its own (two linears, relu, tanh), between
    # the graphs before and after its call
    ops = [graph.op_counts() for graph in counter.graphs]
    assert any(counts.get("aten::tanh.default") for counts in ops), ops
    assert counter.frame_count == 3


def test_a_tensor_set_as_a_plain_attribute_is_a_graph_input() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(4, 3)
    weight = nn.Parameter(linear.weight.detach().clone())
    del linear.weight  # as FSDP1 with use_orig_params does during forward: a view, set
    counter = CompileCounter()
    compiled = ember_compile(linear, backend=counter)
    x = torch.randn(2, 4)
    for scale in (1.0, 2.0):  # a new non-leaf tensor each call: read again, not baked in
        linear.weight = weight * scale
        compiled(x).sum().backward()
        got = weight.grad.clone()
        weight.grad = None
        (x @ (weight * scale).t() + linear.bias).sum().backward()
        torch.testing.assert_close(got, weight.grad)
        weight.grad = None
    assert counter.frame_count == 1


def test_many_hooked_blocks_compile_each_without_hitting_the_cache_limit() -> None:
    # twelve blocks of one class, each with hooks (as FSDP2 shards them): capture guards on
    # the module object, so one shared compiled forward would recompile per block and run
    # the blocks past the cache-size limit (8) eagerly
    torch.manual_seed(0)
    blocks = nn.Sequential(*(Two() for _ in range(12)))
    calls: list[int] = []
    for index, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda module, args, index=index: calls.append(index))
    x = torch.randn(3, 4)
    expected = blocks(x)
    calls.clear()
    counter = CompileCounter()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        got = ember_compile(blocks, backend=counter)(x)
    torch.testing.assert_close(got, expected)
    assert calls == list(range(12))
    # every block ran its compiled forward; equal Graphs were compiled once: two, as the
    # first block's input needs no gradient and the others' do
    bodies = [g for g in counter.graphs if g.op_counts().get("aten::tanh.default")]
    assert [g.inputs[0].value.spec.requires_grad for g in bodies] == [False, True]
