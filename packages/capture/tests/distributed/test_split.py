"""split.py and buckets.py: a Graph cut into pieces runs like the whole, cut at DDP buckets."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.distributed import (
    SplitGraph,
    bucket_starts,
    bucketed_backend,
    split_graph,
    without_cross_mutation,
)
from ember.capture.testing import CompileCounter, TinyDecoder
from ember.prims import Graph, Interpreter


class Recorder:
    """A backend that keeps each Graph with its example inputs and runs it eagerly."""

    def __init__(self) -> None:
        self.calls: list[tuple[Graph, list[Any]]] = []

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Any:
        self.calls.append((graph, list(example_inputs)))
        return Interpreter(graph)


def _captured(model: nn.Module, *inputs: torch.Tensor) -> tuple[Graph, list[Any]]:
    recorder = Recorder()
    ember_compile(model, backend=recorder)(*inputs)
    (call,) = recorder.calls
    return call


def test_every_cut_runs_like_the_whole_graph() -> None:
    torch.manual_seed(0)
    model = TinyDecoder(vocab=17, width=16, heads=2, context=8, depth=2)
    graph, inputs = _captured(model, torch.randint(0, 17, (2, 8)))
    expected = Interpreter(graph)(*inputs)
    count = len(graph.nodes)
    for starts in ([1], [count // 2], [count - 1], list(range(3, count, 7))):
        pieces = split_graph(graph, starts)
        assert len(pieces) == len(starts) + 1
        for piece in pieces:
            piece.graph.verify()
        got = SplitGraph(graph, pieces, [Interpreter(p.graph) for p in pieces])(*inputs)
        torch.testing.assert_close(got, expected)


def test_pieces_pass_only_what_later_pieces_read() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    graph, _ = _captured(model, torch.randn(3, 4))
    first, second = split_graph(graph, [3])
    # the second piece reads the first's activation and its own layer's parameters
    assert len(first.outputs) == 1
    assert set(second.inputs) == {first.outputs[0], "self_2_weight", "self_2_bias"}


def _mlp(depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(16, 16), nn.Tanh()]
    return nn.Sequential(*layers)


def test_bucket_starts_cut_where_a_later_bucket_is_first_read() -> None:
    model = _mlp(4)
    graph, inputs = _captured(model, torch.randn(2, 16))
    # two layers (four parameters) a bucket, in registration order
    buckets = {id(p): index // 4 for index, p in enumerate(model.parameters())}
    starts = bucket_starts(graph, inputs, buckets)
    assert len(starts) == 1
    pieces = split_graph(graph, starts)
    read = [{name for name in piece.inputs if name.startswith("self_")} for piece in pieces]
    assert read == [
        {"self_0_weight", "self_0_bias", "self_2_weight", "self_2_bias"},
        {"self_4_weight", "self_4_bias", "self_6_weight", "self_6_bias"},
    ]


class FakeDDP(nn.Module):
    """What bucketed_backend reads of a DistributedDataParallel: its module and cap."""

    def __init__(self, module: nn.Module, bucket_bytes_cap: int) -> None:
        super().__init__()
        self.module = module
        self.bucket_bytes_cap = bucket_bytes_cap
        self.parameters_to_ignore: set[str] = set()


@pytest.mark.parametrize(("cap", "graphs"), [(1 << 20, 1), (2200, 3)])
def test_bucketed_backend_compiles_a_graph_per_bucket(cap: int, graphs: int) -> None:
    # a layer is 16*16*4 + 16*4 = 1088 bytes; filled from the last layer, 2200-byte buckets
    # close at 2240 bytes: {layer 7, 6, 5's bias}, {5's weight, 4, 3}, {2, 1, 0's bias},
    # {0's weight}. Layer 0's weight goes with layer 0's addmm (through its transpose), so
    # a piece starts at layer 3 and at layer 5: three pieces for four buckets
    model = _mlp(8)
    reference = _mlp(8)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=bucketed_backend(FakeDDP(model, cap), counter))
    x = torch.randn(5, 16)
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    assert counter.frame_count == graphs
    for graph in counter.graphs:  # no piece is only a transpose of a weight
        assert graph.op_counts().get("aten::addmm.default"), graph
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, expected.grad)


class Accumulates(nn.Module):
    """Four linears; the first's output is written in place (directly, or through a view)
    after the last has run, or replaced out of place."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.layers[0](x)
        c = self.layers[3](self.layers[2](self.layers[1](torch.relu(a))))
        if self.how == "in place":
            a += c
        elif self.how == "view":
            a[:, :8] += c[:, :8]
        else:
            a = a + c
        return a


@pytest.mark.parametrize(("how", "cuts"), [("in place", 0), ("view", 0), ("out of place", 3)])
def test_no_cut_between_a_value_and_a_later_write_to_it(how: str, cuts: int) -> None:
    torch.manual_seed(0)
    model = Accumulates(how)
    graph, inputs = _captured(model, torch.randn(2, 16))
    buckets = {id(p): index // 2 for index, p in enumerate(model.parameters())}
    starts = bucket_starts(graph, inputs, buckets)
    assert len(starts) == 3  # a piece per layer
    assert len(without_cross_mutation(graph, starts)) == cuts


def test_symbolic_sizes_split_and_serve_every_length() -> None:
    # dynamic=True: every piece gets an input carrying each size it uses, and a cut sits
    # where the piece's outputs carry its sizes (its backward binds them from their
    # gradients), so one capture serves every length
    torch.manual_seed(0)
    model = TinyDecoder(vocab=17, width=16, heads=2, context=32, depth=3)
    reference = TinyDecoder(vocab=17, width=16, heads=2, context=32, depth=3)
    reference.load_state_dict(model.state_dict())
    counter = CompileCounter()
    backend = bucketed_backend(FakeDDP(model, 4000), counter)
    compiled = ember_compile(model, backend=backend, dynamic=True)
    for length in (8, 12, 20):
        ids = torch.randint(0, 17, (2, length))
        torch.testing.assert_close(compiled(ids), reference(ids))
        if length == 8:
            pieces = counter.frame_count
    assert pieces > 2
    assert counter.frame_count == pieces  # lengths 12 and 20 captured nothing new
    assert all(graph.symbols for graph in counter.graphs)


class Branches(nn.Module):
    """Eight layers with a branch on a tensor value in the middle: two captured Graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:4]:
            x = torch.tanh(layer(x))
        if x.sum() > 0:  # a graph break: the rest is a Graph of its own
            x = -x
        for layer in self.layers[4:]:
            x = torch.tanh(layer(x))
        return x


def test_each_graph_of_a_broken_forward_splits_at_its_own_buckets() -> None:
    torch.manual_seed(0)
    model = Branches()
    reference = Branches()
    reference.load_state_dict(model.state_dict())
    counter = CompileCounter()
    # 2200 bytes: about two layers a bucket, so two pieces on each side of the break
    compiled = ember_compile(model, backend=bucketed_backend(FakeDDP(model, 2200), counter))
    x = torch.randn(3, 16)
    compiled(x).sum().backward()
    reference(x).sum().backward()
    assert counter.frame_count == 4
    for got, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, expected.grad)


def test_a_value_is_released_after_the_last_piece_that_reads_it() -> None:
    model = _mlp(3)
    with torch.no_grad():
        graph, inputs = _captured(model, torch.randn(2, 16))
        layers = [i for i, node in enumerate(graph.nodes) if node.target == "aten::t.default"]
        first, second, third = split_graph(graph, layers[1:])
        handed: list[weakref.ref[torch.Tensor]] = []

        def run_first(*args: torch.Tensor) -> Any:
            out = Interpreter(first.graph)(*args)
            handed.extend(weakref.ref(t) for t in out)
            return out

        def run_third(*args: torch.Tensor) -> Any:
            # the first piece's activation was read by the second piece only
            assert handed and all(ref() is None for ref in handed)
            return Interpreter(third.graph)(*args)

        runner = SplitGraph(
            graph, [first, second, third], [run_first, Interpreter(second.graph), run_third]
        )
        torch.testing.assert_close(runner(*inputs), Interpreter(graph)(*inputs))
