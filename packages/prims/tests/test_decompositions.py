"""Decompositions: the test models' forward and backward graphs decompose fully to prims, keep
their source lines, and match eager values, gradients and buffer updates."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ember.prims import run, trace, verify
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose
from ember.prims.primitives import is_prim
from ember.prims.testing import MLP, AttentionBlock, SmallCNN


class ResidualNet(nn.Module):
    """ResNet-style: conv-BN-ReLU twice around a skip connection, adaptive pooling, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(y)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TinyGPT(nn.Module):
    """GPT-style: token and position embeddings, one causal block, a tied LM head."""

    def __init__(self, vocab: int = 11, dim: int = 16, context: int = 8) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        self.block = AttentionBlock(dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        places = torch.arange(ids.shape[1])
        x = self.block(self.tokens(ids) + self.positions(places))
        logits = self.norm(x) @ self.tokens.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _close(actual: object, expected: object) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def _only_prims(graph) -> None:
    left = sorted({node.target for node in graph.nodes if not is_prim(node.target)})
    assert not left, f"not decomposed: {left}"


_MODELS = [
    (MLP, (8, 16)),
    (SmallCNN, (2, 3, 8, 8)),
    (AttentionBlock, (2, 5, 16)),
    (ResidualNet, (2, 3, 8, 8)),
]


@pytest.mark.parametrize(("cls", "shape"), _MODELS, ids=[m[0].__name__ for m in _MODELS])
def test_forward_decomposes_to_prims_and_matches(cls, shape) -> None:
    torch.manual_seed(0)
    model = cls().eval()
    x = torch.randn(shape)
    graph = decompose(trace(model, x), PRIM_DECOMPOSITIONS)
    verify(graph)
    _only_prims(graph)
    _close(run(graph, x), model(x))


@pytest.mark.parametrize(("cls", "shape"), _MODELS, ids=[m[0].__name__ for m in _MODELS])
def test_backward_decomposes_to_prims_and_matches_gradients(cls, shape) -> None:
    torch.manual_seed(0)
    model = cls().train()
    reference = copy.deepcopy(model)
    x = torch.randn(shape, requires_grad=True)

    def step(m):
        return lambda x: torch.autograd.grad(m(x).sum(), [x, *m.parameters()])

    graph = decompose(trace(step(model), x), PRIM_DECOMPOSITIONS)
    _only_prims(graph)
    _close(run(graph, x), step(reference)(x))


def test_language_model_loss_backward_decomposes_to_prims_and_matches_gradients() -> None:
    torch.manual_seed(0)
    model = TinyGPT().train()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 11, (2, 6))
    targets = torch.randint(0, 11, (2, 6))

    def step(m):
        def loss_and_grads(ids, targets):
            loss = m(ids, targets)
            return loss, torch.autograd.grad(loss, list(m.parameters()))

        return loss_and_grads

    graph = decompose(trace(step(model), ids, targets), PRIM_DECOMPOSITIONS)
    _only_prims(graph)
    _close(run(graph, ids, targets), step(reference)(ids, targets))


def test_batch_norm_running_stats_are_updated_in_place() -> None:
    torch.manual_seed(0)
    model = SmallCNN().train()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 8, 8)
    graph = decompose(trace(model, x), PRIM_DECOMPOSITIONS)
    state = {name: t.clone() for name, t in model.named_buffers()}
    _close(run(graph, x, state=state), reference(x))
    _close(state["bn.running_mean"], reference.bn.running_mean)
    _close(state["bn.running_var"], reference.bn.running_var)


def test_decomposed_nodes_keep_the_user_line() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x).softmax(-1)

    graph = decompose(trace(f, torch.randn(3, 4)), PRIM_DECOMPOSITIONS)
    assert graph.meta["pass"] == "decompose"
    assert all(node.source is not None and "gelu" in node.source.code for node in graph.nodes)


def test_embedding_dropout_and_inplace_ops() -> None:
    torch.manual_seed(0)
    table = torch.randn(10, 4)

    def f(i: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.embedding(i, w)
        y.mul_(2).clamp_(-1, 1)
        return y, torch.nn.functional.dropout(y, 0.5).count_nonzero() <= y.numel()

    i = torch.tensor([[1, 2], [9, 0]])
    graph = decompose(trace(f, i, table), PRIM_DECOMPOSITIONS)
    _only_prims(graph)
    value, bounded = run(graph, i, table)
    _close(value, f(i, table)[0])
    assert bool(bounded)


def test_advanced_indexing_and_index_put() -> None:
    a = torch.randn(4, 5, 6)
    rows, cols = torch.tensor([0, -1, 2]), torch.tensor([[1], [3]])

    def f(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b[rows, :, 2] = 7.0
        return a[rows, :, cols], a[:, rows], b

    graph = decompose(trace(f, a), PRIM_DECOMPOSITIONS)
    _only_prims(graph)
    _close(run(graph, a), f(a))


def test_batch_norm_with_update_functional_returns_the_new_running_stats() -> None:
    """The pure twin has six results (ember-autodiff's functionalization emits it); the
    decomposition returned the in-place op's four."""

    def fn(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> object:
        return torch.ops.aten._batch_norm_with_update_functional(x, w, w, mean, var, 0.1, 1e-5)

    inputs = [torch.randn(4, 3, 5), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5]
    graph = decompose(trace(fn, *inputs), PRIM_DECOMPOSITIONS)
    assert all(is_prim(node.target) for node in graph.nodes)
    actual, expected = run(graph, *inputs), fn(*inputs)
    for index in (0, 1, 2, 4, 5):  # 3 is the reserve buffer: empty
        _close(actual[index], expected[index])


def test_log_sigmoid_forward_buffer_feeds_aten_backward() -> None:
    """ATen's CPU log_sigmoid_backward reads the buffer (exp(-|x|)); a zero buffer made the
    gradient of positive inputs zero through inductor."""

    def fn(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, buffer = torch.ops.aten.log_sigmoid_forward(x)
        return out, torch.ops.aten.log_sigmoid_backward(grad, x, buffer)

    inputs = [torch.randn(20), torch.randn(20)]
    graph = decompose(trace(fn, *inputs), PRIM_DECOMPOSITIONS)
    _close(run(graph, *inputs), fn(*inputs))


@pytest.mark.parametrize("unpack_data, unpack_pivots", [(True, False), (False, True)])
def test_lu_unpack_returns_empty_parts_not_asked_for(
    unpack_data: bool, unpack_pivots: bool
) -> None:
    """lu_solve's backward unpacks only the pivots; the decomposition unpacked everything."""

    def fn(lu: torch.Tensor, pivots: torch.Tensor) -> object:
        return torch.lu_unpack(lu, pivots, unpack_data, unpack_pivots)

    lu, pivots = torch.linalg.lu_factor(torch.randn(2, 3, 3))
    graph = decompose(trace(fn, lu, pivots), PRIM_DECOMPOSITIONS)
    _close(run(graph, lu, pivots), fn(lu, pivots))


@pytest.mark.parametrize("op", [torch.ops.aten._linalg_det, torch.ops.aten._linalg_slogdet])
def test_det_returns_the_lu_factors_aten_does(op: object) -> None:
    """ATen's det and slogdet return the LU of a^T, which their backward solves with; the LU
    of a made linalg.det's gradient the transpose of eager's."""
    a = torch.randn(2, 4, 4)
    graph = decompose(trace(op, a), PRIM_DECOMPOSITIONS)
    _close(run(graph, a), op(a))


@pytest.mark.parametrize("size", [[25, 5], [3, 4], [130]])
def test_resize_keeps_the_elements_in_memory_order(size: list[int]) -> None:
    """resize_ had no decomposition: the tracer's tensor kept its old shape."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.clone().resize_(size) * 2

    x = torch.randn(5, 5, 5)
    graph = decompose(trace(fn, x), PRIM_DECOMPOSITIONS)
    assert all(is_prim(node.target) for node in graph.nodes)
    actual, expected = run(graph, x), fn(x)
    kept = min(actual.numel(), x.numel())  # ATen leaves the elements past the old end unset
    assert actual.shape == expected.shape
    _close(actual.flatten()[:kept], expected.flatten()[:kept])


def test_broadcast_shapes_of_equal_symbolic_shapes_adds_no_guard() -> None:
    # asking `s1 - 1 != 1` of equal shapes added the guard s1 != 2 when decomposing
    # x[:, 1:] * x[:, :-1] over symbols; shapes of other ranks still broadcast (a shorter
    # first shape was returned as the result: quantile's mul failed in broadcast_in_dim)
    from ember.prims.decompositions.operands import broadcast_shapes
    from ember.prims.symbolic import ShapeEnv

    assert broadcast_shapes([3], [2, 3]) == [2, 3]
    assert broadcast_shapes([2, 1], [2, 3]) == [2, 3]
    env = ShapeEnv()
    n = env.create_symint(6) - 1
    assert broadcast_shapes([4, n], [4, n]) == [4, n]
    assert not env.guards


def test_a_symbolic_pooling_decomposes_though_its_sizes_are_spelled_otherwise() -> None:
    # max_pool2d's meta rule gives floor(s/2) and its decomposition ceiling(s/2 - 3/2) + 1:
    # equal for every integer s, but the spec check compared the expressions and raised
    # DecompositionError (inductor then ran the Graph's ATen ops)
    from ember.prims import Ref, Tracer, tree_flatten
    from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose
    from ember.prims.symbolic import ShapeEnv

    x = torch.randn(1, 3, 9, 10)
    tracer = Tracer(ShapeEnv())
    traced = tracer.add_input(x, "x", dynamic_dims=(2, 3))
    tracer.set_inputs_signature(tree_flatten((x,))[1], [Ref(traced.value_name)])
    with tracer.active():
        out = torch.nn.functional.max_pool2d(traced, 2)
    graph = tracer.finish(out)
    assert graph.symbols
    decomposed = decompose(graph, PRIM_DECOMPOSITIONS)
    assert not any(node.target.startswith("aten::") for node in decomposed.nodes)


def test_views_over_symbolic_sizes_stay_views() -> None:
    # a view of a strided tensor over symbols became prims.reshape, a copy (c10's stride
    # check ran on meta tensors, which refuse symbolic sizes): GPT-2's attention at batch 1
    # copied q and k for bmm in every layer of its symbolic Graph
    from ember.prims import Ref, Tracer, tree_flatten
    from ember.prims.symbolic import ShapeEnv

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        heads = x[..., :12].view(1, x.shape[1], 3, 4).transpose(1, 2)  # (1, 3, n, 4), strided
        merged = heads.expand(1, 3, x.shape[1], 4).view(3, x.shape[1], 4)  # batch 1: a view
        return merged * 2, heads.view(1, 3, x.shape[1] * 4 // 4, 4) + 1

    x = torch.randn(1, 5, 36)
    tracer = Tracer(ShapeEnv())
    traced = tracer.add_input(x, "x", dynamic_dims=(1,))
    tracer.set_inputs_signature(tree_flatten((x,))[1], [Ref(traced.value_name)])
    with tracer.active():
        out = fn(traced)
    graph = tracer.finish(out)
    decomposed = decompose(graph, PRIM_DECOMPOSITIONS)
    targets = [node.target for node in decomposed.nodes]
    assert "prims::reshape" not in targets and targets.count("prims::view") == 3
    assert [g.expr for g in decomposed.guards] == [g.expr for g in graph.guards]
    for n in (5, 2, 9):
        other = torch.randn(1, n, 36)
        _close(run(decomposed, other), fn(other))


def test_a_view_that_exists_at_some_symbolic_sizes_is_no_view() -> None:
    # c10's computeStride over symbols: each comparison decided for every size or the answer
    # is "no view" (the decomposition copies), never a new guard
    from ember.prims.symbolic import ShapeEnv
    from ember.prims.symbolic.layout import view_strides

    env = ShapeEnv()
    n = env.to_sympy(env.create_symint(5))
    decide = env.static_value
    heads = ([1, 3, n, 4], [12 * n, 4, 12, 1])  # (1, n, 12) split into 3 heads, transposed
    assert view_strides(*heads, [3, n, 4], decide) == [4, 12, 1]
    assert view_strides(*heads, [3, n, 2, 2], decide) == [4, 12, 2, 1]
    assert view_strides(*heads, [3 * n, 4], decide) is None  # heads and rows do not merge
    # (2, n) with rows 8 apart is one run of 2n values only when n == 8
    assert view_strides([2, n], [8, 1], [2 * n], decide) is None
    assert view_strides([2, n], [n, 1], [2 * n], decide) == [1]
    assert not env.guards


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_max_pooling_searches_windows_element_by_element_on_the_cpu_only(device: str) -> None:
    # the select chain is for the C++ loops (each output a SIMD lane); inductor's Triton
    # kernels recomputed the pooled map in each window element of the chain (ResNet-50's stem
    # pool: 1.32 ms on the H100), so other devices keep the window reduction and the scatter
    def fn(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        _values, indices = torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
        return torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices
        )

    x = torch.randn(2, 4, 9, 9, device=device)
    graph = decompose(trace(fn, x, torch.randn(2, 4, 5, 5, device=device)), PRIM_DECOMPOSITIONS)
    targets = {node.target for node in graph.nodes}
    reduced = {"prims::argmax", "prims::scatter_add"} <= targets
    assert reduced == (device != "cpu"), sorted(targets)
