"""Tracing real programs and running the Graphs: values, buffer updates and input mutations
must equal eager PyTorch."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ember.prims import (
    Graph,
    InputKind,
    TraceError,
    dumps,
    load,
    loads,
    run,
    save,
    trace,
    verify,
)
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose
from ember.prims.testing import MLP, AttentionBlock, SmallCNN


def inplace_and_views(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    flat = x.view(-1)
    flat[2:5].mul_(3)
    x.add_(y)
    row = x[1]
    row.zero_()
    return x.transpose(0, 1).contiguous() * 2


def pytree_io(
    pair: tuple[torch.Tensor, torch.Tensor], named: dict[str, torch.Tensor], scale: float
):
    a, b = pair
    return {"sum": a + named["w"] * scale, "both": (a * b, [b.sin(), 7])}


def _saved_and_loaded(graph: Graph) -> Graph:
    """The Graph as another process would see it: saved to a file and loaded back."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graph.ember"
        save(graph, path)
        loaded = load(path)
    assert loaded == graph
    verify(loaded)
    return loaded


def _assert_close(actual: object, expected: object) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_mlp_matches_eager() -> None:
    model = MLP()
    x = torch.randn(8, 16)
    graph = trace(model, x)
    verify(graph)
    _assert_close(run(_saved_and_loaded(graph), x), model(x))
    kinds = {gi.target: gi.kind for gi in graph.state_inputs()}
    assert kinds == {name: InputKind.PARAMETER for name, _ in model.named_parameters()}
    assert graph.op_counts()["aten::addmm.default"] == 2


def test_cnn_batchnorm_updates_buffers_like_eager() -> None:
    model = SmallCNN().train()
    twin = copy.deepcopy(model)
    x = torch.randn(4, 3, 8, 8)
    graph = trace(model, x)
    # Tracing ran no real computation: the module's buffers are untouched.
    assert int(model.bn.num_batches_tracked) == 0
    expected = model(x)
    state = dict(twin.named_parameters()) | dict(twin.named_buffers())
    _assert_close(run(_saved_and_loaded(graph), x, state=state), expected)
    for name, buffer in model.named_buffers():
        _assert_close(dict(twin.named_buffers())[name], buffer)
    assert int(twin.bn.num_batches_tracked) == 1
    assert {gi.target for gi in graph.state_inputs() if gi.kind is InputKind.BUFFER} == {
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    }


def test_cnn_eval_mode() -> None:
    model = SmallCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    _assert_close(run(_saved_and_loaded(trace(model, x)), x), model(x))


def test_attention_block_matches_eager() -> None:
    model = AttentionBlock()
    x = torch.randn(2, 6, 16)
    graph = trace(model, x)
    verify(graph)
    _assert_close(run(_saved_and_loaded(graph), x), model(x))


@pytest.mark.parametrize(
    ("model", "feature_shape"),
    [(MLP(), (16,)), (AttentionBlock(), (6, 16))],
    ids=["mlp", "attention"],
)
def test_dynamic_batch_runs_at_other_sizes_after_a_round_trip(
    model: nn.Module, feature_shape: tuple[int, ...]
) -> None:
    graph = trace(model, torch.randn(4, *feature_shape), dynamic=True)
    verify(graph)
    batch = graph.inputs[0].value.spec.shape[0]
    assert not isinstance(batch, int), "the batch size must stay a symbol"
    loaded = loads(dumps(graph))
    assert loaded == graph
    for size in (3, 9):
        x = torch.randn(size, *feature_shape)
        _assert_close(run(loaded, x), model(x))


def test_dynamic_views_reshapes_and_slices_match_eager() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = x.shape[0]
        a = x.view(rows, 2, -1).transpose(1, 2).reshape(rows, -1)
        b = x[1:, :3].expand(2, rows - 1, 3)
        c = x.permute(1, 0)[:, ::2]
        d, e = x.split(2, dim=1)[:2]
        f = x[:, None, None, :] + x.view(rows, 1, 6, 1)  # broadcasting reshapes in prims
        return a, b, c.contiguous(), d * e, F.layer_norm(x, (x.shape[1],)), f

    graph = trace(fn, torch.randn(6, 6), dynamic=True)
    for size in (6, 5, 11):
        x = torch.randn(size, 6)
        _assert_close(run(_saved_and_loaded(graph), x), fn(x))


def test_torch_multihead_attention() -> None:
    model = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    graph = trace(lambda q: model(q, q, q, need_weights=False)[0], x)
    _assert_close(run(_saved_and_loaded(graph), x), model(x, x, x, need_weights=False)[0])


def test_inplace_ops_and_views_mutate_inputs_like_eager() -> None:
    x = torch.randn(4, 3)
    y = torch.randn(4, 3)
    graph = trace(inplace_and_views, x.clone(), y)
    eager_x, graph_x = x.clone(), x.clone()
    expected = inplace_and_views(eager_x, y)
    _assert_close(run(_saved_and_loaded(graph), graph_x, y), expected)
    _assert_close(graph_x, eager_x)


def test_tuple_and_dict_inputs_and_outputs() -> None:
    a, b, w = torch.randn(3), torch.randn(3), torch.randn(3)
    graph = trace(pytree_io, (a, b), {"w": w}, 0.5)
    result = run(_saved_and_loaded(graph), (a, b), {"w": w}, 0.5)
    _assert_close(result, pytree_io((a, b), {"w": w}, 0.5))
    assert result["both"][1][1] == 7
    with pytest.raises(Exception, match="specialized"):
        run(graph, (a, b), {"w": w}, 2.0)


def test_factory_ops_and_literal_tensors_are_recorded() -> None:
    table = torch.tensor([1.0, 2.0, 3.0])

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * table + torch.ones(3) + torch.arange(3, dtype=torch.float32)

    x = torch.randn(3)
    graph = trace(fn, x)
    assert any(gi.kind is InputKind.CONSTANT for gi in graph.inputs)
    _assert_close(run(graph, x), fn(x))


def test_nodes_carry_the_user_source_line() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        return y.cos()

    graph = trace(fn, torch.randn(2))
    lines = [node.source.code for node in graph.nodes if node.source is not None]
    assert lines == ["y = x.sin()", "return y.cos()"]
    assert all(node.source and node.source.file == __file__ for node in graph.nodes)


def test_data_dependent_op_names_the_user_line() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(TraceError, match=r"test_trace.py:\d+.*if x.sum\(\) > 0"):
        trace(fn, torch.randn(3))


def test_interpreter_rejects_wrong_shapes_with_a_hint() -> None:
    graph = trace(MLP(), torch.randn(8, 16))
    with pytest.raises(Exception, match="dynamic=True"):
        run(graph, torch.randn(9, 16))


def test_returns_input_and_python_values() -> None:
    def fn(x: torch.Tensor):
        return x, x.shape[0], None

    x = torch.randn(5)
    out = run(trace(fn, x), x)
    assert out[0] is x and out[1] == 5 and out[2] is None


def test_graph_is_plain_data() -> None:
    graph = trace(MLP(), torch.randn(2, 16))
    assert isinstance(graph, Graph)
    for node in graph.nodes:
        assert isinstance(node.target, str)
        assert not any(callable(a) and not isinstance(a, type) for a in node.args)


def test_ops_without_results_and_named_result_tuples() -> None:
    def fn(a: torch.Tensor) -> tuple[object, ...]:
        inverse = torch.linalg.inv(a)  # records aten::_linalg_check_errors, which returns nothing
        values, indices = torch.sort(a[0])
        return inverse, torch.topk(a[1], 2), values, indices, a.shape

    a = torch.randn(3, 3) + 3 * torch.eye(3)
    graph = _saved_and_loaded(trace(fn, a))
    assert graph.op_counts()["aten::_linalg_check_errors.default"] == 1
    inverse, (top, where), values, indices, shape = run(graph, a)
    expected = fn(a)
    _assert_close(
        (inverse, top, where, values, indices), (expected[0], *expected[1], *expected[2:4])
    )
    assert shape == (3, 3)


def test_backward_ops_without_a_torch_meta_kernel_trace() -> None:
    """multi_margin_loss_backward and friends have no meta kernel in torch; ember's rules
    give their specs (their gradients through ember.compile failed to trace)."""
    aten = torch.ops.aten
    x, grad = torch.randn(3, 5), torch.randn(())
    target = torch.tensor([1, 0, 4])
    labels = torch.tensor([[1, 3, -1, 0, 0], [0, -1, 0, 0, 0], [4, 2, 1, -1, 0]])
    pool_input = torch.randn(1, 2, 4, 4, 4)
    pooled, indices = aten.fractional_max_pool3d(
        pool_input, [2, 2, 2], [2, 2, 2], torch.rand(1, 2, 3)
    )

    def fn(x: torch.Tensor, pool_grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            aten.multi_margin_loss_backward(grad, x, target, 1, 1.0, None, 1),
            aten.multilabel_margin_loss_backward(grad, x, labels, 1, (labels >= 0).float()),
            aten.fractional_max_pool3d_backward(
                pool_grad, pool_input, [2, 2, 2], [2, 2, 2], indices
            ),
        )

    inputs = (x, torch.randn_like(pooled))
    graph = trace(fn, *inputs)
    torch.testing.assert_close(run(graph, *inputs), fn(*inputs))


def test_a_view_input_keeps_its_storage_offset() -> None:
    """as_strided's storage_offset counts from the storage's start: the decomposition needs
    the input's own offset (OpInfo's as_strided.partial_views read the wrong elements)."""
    base = torch.arange(20.0)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, (2, 2), (1, 2), 2) * 1

    view = base[5:15]
    graph = trace(fn, view)
    assert graph.inputs[0].value.spec.storage_offset == 5
    decomposed = decompose(graph, PRIM_DECOMPOSITIONS)
    torch.testing.assert_close(run(decomposed, view), fn(view))


def test_a_symbolic_slice_of_a_longer_tensor_keeps_one_graph_up_to_its_end() -> None:
    # x[:n] on a 16-row tensor guards n <= 16 (its size stays n, not min(16, n)), and asking
    # whether that slice is contiguous (torch's guard_or_true) adds no guard: one Graph
    # serves every n in 2..16, 16 included
    table = torch.arange(16 * 16, dtype=torch.float32).view(16, 16)

    def fn(x):
        n = x.shape[0]
        return x + table[:n, :n].sum(1)

    graph = trace(fn, torch.randn(6), dynamic=True)
    assert [str(guard.expr) for guard in graph.guards] == ["s0 <= 16"]
    for n in (2, 9, 16):
        x = torch.randn(n)
        torch.testing.assert_close(run(graph, x), fn(x))
    with pytest.raises(Exception, match="s0 <= 16"):
        run(graph, torch.randn(17))
