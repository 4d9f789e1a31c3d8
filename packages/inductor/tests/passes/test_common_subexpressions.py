"""Common subexpression elimination: merges repeated pure work, never merges writes, random
draws, or reads separated by a write, and the result matches eager PyTorch."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ember.inductor import eliminate_common_subexpressions, eliminate_dead_code
from ember.prims import run, trace


def _repeated(x: torch.Tensor) -> torch.Tensor:
    a = x.sin() + 1
    b = x.sin() + 1
    return a * b


def test_repeated_pure_work_is_merged_and_matches_eager() -> None:
    x = torch.randn(4, 4)
    graph = trace(_repeated, x)
    snapshot = copy.deepcopy(graph)
    result = eliminate_common_subexpressions(graph)

    assert graph.op_counts()["aten::sin.default"] == 2
    assert result.op_counts() == {
        "aten::sin.default": 1,
        "aten::add.Tensor": 1,
        "aten::mul.Tensor": 1,
    }
    assert graph == snapshot, "the pass must not touch its input"
    assert result.meta["pass"] == "eliminate_common_subexpressions"
    result.verify()
    torch.testing.assert_close(run(result, x), _repeated(x))


def test_a_module_applied_twice_to_the_same_input_runs_once() -> None:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = mlp

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mlp(x) * self.mlp(x)

    model = Twice()
    x = torch.randn(3, 8)
    graph = trace(model, x)
    result = eliminate_common_subexpressions(graph)
    assert result.op_counts()["aten::addmm.default"] == 2  # one per Linear, not four
    assert len(result.nodes) == (len(graph.nodes) - 1) // 2 + 1
    torch.testing.assert_close(run(result, x), model(x))


def _read_write_read(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = x * 2
    x.view(-1).add_(1)  # x keeps its name in the Graph, but not its value
    b = x * 2
    return a, b


def test_reads_separated_by_a_write_through_a_view_are_not_merged() -> None:
    x = torch.randn(3, 3)
    graph = trace(_read_write_read, x.clone())
    result = eliminate_common_subexpressions(graph)
    assert result.op_counts()["aten::mul.Tensor"] == 2
    mine, theirs = x.clone(), x.clone()
    for got, want in zip(run(result, mine), _read_write_read(theirs)):
        torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, theirs)


def _write_into_a_duplicate(x: torch.Tensor) -> torch.Tensor:
    a = x * 2
    b = x * 2
    b.add_(1)  # b is a buffer of its own; merging it with a would change a
    return a + b


def test_nodes_whose_results_are_written_later_are_not_merged() -> None:
    x = torch.randn(5)
    result = eliminate_common_subexpressions(trace(_write_into_a_duplicate, x))
    assert result.op_counts()["aten::mul.Tensor"] == 2
    torch.testing.assert_close(run(result, x), _write_into_a_duplicate(x))


def _repeated_writes(x: torch.Tensor) -> torch.Tensor:
    x.view(-1).add_(1)
    x.view(-1).add_(1)
    return x.sum()


def test_mutating_ops_are_never_merged() -> None:
    x = torch.randn(2, 3)
    result = eliminate_common_subexpressions(trace(_repeated_writes, x.clone()))
    assert result.op_counts()["aten::add_.Tensor"] == 2
    mine, theirs = x.clone(), x.clone()
    torch.testing.assert_close(run(result, mine), _repeated_writes(theirs))
    torch.testing.assert_close(mine, theirs)


def _two_draws(x: torch.Tensor) -> torch.Tensor:
    return (x + torch.rand(3)) * (x + torch.rand(3))


def test_random_draws_are_never_merged() -> None:
    x = torch.randn(3)
    result = eliminate_common_subexpressions(trace(_two_draws, x))
    assert result.op_counts()["aten::rand.default"] == 2
    torch.manual_seed(3)
    got = run(result, x)
    torch.manual_seed(3)
    torch.testing.assert_close(got, _two_draws(x))


def _two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x + 1, x + 1


def test_outputs_eager_returns_separately_stay_separate() -> None:
    x = torch.randn(3)
    result = eliminate_common_subexpressions(trace(_two_outputs, x))
    first, second = run(result, x)
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    torch.testing.assert_close(first, second)


def _signed_zeros(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x * 0.0, x * -0.0]).signbit()


def test_literals_that_compare_equal_but_differ_are_not_merged() -> None:
    x = torch.rand(4) + 0.5
    result = eliminate_common_subexpressions(trace(_signed_zeros, x))
    assert result.op_counts()["aten::mul.Tensor"] == 2
    torch.testing.assert_close(run(result, x), _signed_zeros(x))


def test_dead_code_then_cse_on_an_attention_block_matches_eager() -> None:
    torch.manual_seed(0)
    norm = nn.LayerNorm(16)
    block = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)

    def attend(x: torch.Tensor) -> torch.Tensor:
        # Three separate (multi-output) layer norms of the same input: one is enough.
        out, _ = block(norm(x), norm(x), norm(x), need_weights=False)
        return out

    graph = trace(attend, x)
    result = eliminate_dead_code(eliminate_common_subexpressions(graph))
    assert graph.op_counts()["aten::native_layer_norm.default"] == 3
    assert result.op_counts()["aten::native_layer_norm.default"] == 1
    result.verify()
    with torch.no_grad():
        torch.testing.assert_close(run(result, x), attend(x))
