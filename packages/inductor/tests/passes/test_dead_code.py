"""Dead code elimination: removes unused pure nodes, keeps writes and random draws, and the
result still computes what eager PyTorch computes (outputs, mutated inputs, generator state)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ember.inductor import eliminate_dead_code
from ember.prims import run, trace


def _unused_math(x: torch.Tensor) -> torch.Tensor:
    unused = x.sin() * 3
    del unused
    y = x.cos()
    return y + 1


def test_unused_pure_nodes_are_removed_and_the_result_matches_eager() -> None:
    x = torch.randn(4, 5)
    graph = trace(_unused_math, x)
    snapshot = copy.deepcopy(graph)
    result = eliminate_dead_code(graph)

    assert result.op_counts() == {"aten::cos.default": 1, "aten::add.Tensor": 1}
    assert graph == snapshot, "the pass must not touch its input"
    assert result.meta["pass"] == "eliminate_dead_code"
    result.verify()
    torch.testing.assert_close(run(result, x), _unused_math(x))
    other = torch.randn(4, 5)
    torch.testing.assert_close(run(result, other), _unused_math(other))


def test_the_pass_is_idempotent() -> None:
    graph = eliminate_dead_code(trace(_unused_math, torch.randn(3)))
    assert eliminate_dead_code(graph).nodes == graph.nodes


def _write_through_view(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.view(-1).mul_(2)  # its result is never read, but x changes
    return y * 3


def test_in_place_writes_are_kept_though_their_results_are_unused() -> None:
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    graph = trace(_write_through_view, x.clone(), y)
    result = eliminate_dead_code(graph)
    assert result.op_counts() == graph.op_counts()

    mine, theirs = x.clone(), x.clone()
    torch.testing.assert_close(run(result, mine, y), _write_through_view(theirs, y))
    torch.testing.assert_close(mine, theirs)


def test_batch_norm_keeps_its_running_stat_updates_and_drops_the_unused_buffer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    x = torch.randn(2, 3, 8, 8)
    graph = trace(model, x)
    result = eliminate_dead_code(graph)
    assert "aten::empty.memory_format" in graph.op_counts()  # cudnn's reserve, never read
    assert "aten::empty.memory_format" not in result.op_counts()
    assert result.op_counts()["aten::native_batch_norm.default"] == 1
    assert result.op_counts()["aten::add_.Tensor"] == 1  # num_batches_tracked += 1
    result.verify()

    eager_model = copy.deepcopy(model)
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    torch.testing.assert_close(run(result, x, state=state), eager_model(x))
    for name, tensor in eager_model.state_dict().items():
        torch.testing.assert_close(state[name], tensor, msg=f"state {name} differs")


def _draws_unused_noise(x: torch.Tensor) -> torch.Tensor:
    torch.rand(3)  # unused, but it advances the generator
    return x + 1


def test_random_draws_are_kept_so_generator_state_matches_eager() -> None:
    x = torch.randn(3)
    result = eliminate_dead_code(trace(_draws_unused_noise, x))
    assert result.op_counts().get("aten::rand.default") == 1

    torch.manual_seed(7)
    run(result, x)
    after_graph = torch.rand(4)
    torch.manual_seed(7)
    _draws_unused_noise(x)
    after_eager = torch.rand(4)
    torch.testing.assert_close(after_graph, after_eager)
