"""`aot` and its runtime wrapper against eager: inference without a backward, what the
compilers receive, inputs and outputs that do not require grad, non-tensor outputs, writes to
inputs that require grad, parameters bound from the constants table, double backward, written
buffers copied back in one call."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ember.autodiff import AutodiffError, DoubleBackwardError, aot, aot_eager
from ember.prims import Graph, Interpreter, trace


class _Recorder:
    """A compiler that interprets the Graph and remembers what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[Graph, Sequence[Any]]] = []

    def __call__(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        self.calls.append((graph, list(example_inputs)))
        return Interpreter(graph)


def _mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w + b).sum(dim=1)


def _inputs(grad: bool = True) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [
        torch.randn(4, 3),
        torch.randn(3, 5, requires_grad=grad),
        torch.randn(5, requires_grad=grad),
    ]


def test_compilers_get_the_forward_and_backward_graphs() -> None:
    inputs = _inputs()
    forward, backward = _Recorder(), _Recorder()
    compiled = aot(trace(_mlp, *inputs), inputs, forward, backward)
    ((fw_graph, fw_examples),) = forward.calls
    ((bw_graph, bw_examples),) = backward.calls
    assert [t is x for t, x in zip(fw_examples, inputs)] == [True, True, True]
    saved = len(fw_graph.output_leaves) - 1
    assert len(bw_graph.input_leaves) == saved + 1  # saved values, then one tangent
    assert all(isinstance(t, torch.Tensor) and not t.any() for t in bw_examples)
    assert bw_graph.output_leaves[0] is None  # x does not require grad
    out = compiled(*inputs)
    out.sum().backward()
    w, b = (t.detach().requires_grad_() for t in inputs[1:])
    _mlp(inputs[0], w, b).sum().backward()
    torch.testing.assert_close(inputs[1].grad, w.grad)
    torch.testing.assert_close(inputs[2].grad, b.grad)


def test_no_grad_call_runs_the_pure_graph_without_a_backward() -> None:
    inputs = _inputs()
    forward, backward = _Recorder(), _Recorder()
    graph = trace(_mlp, *inputs)
    with torch.no_grad():
        compiled = aot(graph, inputs, forward, backward)
        out = compiled(*inputs)
    assert out.grad_fn is None and not out.requires_grad
    assert len(forward.calls) == 1 and not backward.calls  # no joint trace, no backward
    torch.testing.assert_close(out, _mlp(*inputs))


def test_a_new_pattern_of_inputs_requiring_grad_traces_again() -> None:
    inputs = _inputs(grad=False)
    compiled = aot_eager(trace(_mlp, *inputs), inputs)
    x = inputs[0].clone().requires_grad_()
    compiled(x, *inputs[1:]).sum().backward()
    x_eager = inputs[0].clone().requires_grad_()
    _mlp(x_eager, *inputs[1:]).sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad)


def test_non_tensor_and_integer_outputs() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
        y = x.sin()
        return y, 3, y.argmax(dim=0)

    x = torch.randn(4, 2, requires_grad=True)
    compiled = aot_eager(trace(fn, x), [x])
    y, three, index = compiled(x)
    assert three == 3
    assert index.dtype == torch.int64 and not index.requires_grad
    torch.testing.assert_close(index, x.sin().argmax(dim=0))
    y.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_write_to_an_input_that_requires_grad() -> None:
    def double_(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.sin()

    graph = trace(double_, torch.randn(3))  # traced without grad: the leaf may be written
    leaf = torch.randn(3, requires_grad=True)
    leaf_eager = leaf.detach().clone().requires_grad_()
    x, x_eager = leaf * 1, leaf_eager * 1  # non-leaves may be written in place
    compiled = aot_eager(graph, [x])
    out = compiled(x)
    expected = double_(x_eager)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x, x_eager)
    (out.sum() + x.sum()).backward()
    (expected.sum() + x_eager.sum()).backward()
    torch.testing.assert_close(leaf.grad, leaf_eager.grad)


def test_parameters_from_the_constants_table_get_gradients() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    reference = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    reference.load_state_dict(module.state_dict())
    x = torch.randn(5, 3)
    compiled = aot_eager(trace(module, x), [x])
    compiled(x).square().sum().backward()
    reference(x).square().sum().backward()
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    # state= overrides the constants table, as with ember.prims.run.
    zero = {"2.bias": torch.zeros(2)}
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, state=zero), reference(x) - reference[2].bias)


def test_double_backward_raises() -> None:
    def cube(x: torch.Tensor) -> torch.Tensor:
        return (x**3).sum()

    x = torch.randn(3, requires_grad=True)
    compiled = aot_eager(trace(cube, x), [x])
    (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)
    with pytest.raises(DoubleBackwardError, match="double backward"):
        grad.sum().backward()


def test_min_cut_and_naive_give_the_same_gradients() -> None:
    results = []
    for partitioner in ("min_cut", "naive"):
        inputs = _inputs()
        compiled = aot(
            trace(_mlp, *inputs), inputs, _Recorder(), _Recorder(), partitioner=partitioner
        )
        compiled(*inputs).square().sum().backward()
        results.append([inputs[1].grad, inputs[2].grad])
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)


class _CountCopies(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, set[torch.dtype]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if "copy" in str(func):
            tensors = [
                t for group in args[:2] for t in (group if isinstance(group, list) else [group])
            ]
            self.calls.append((str(func), {t.dtype for t in tensors}))
        return func(*args, **(kwargs or {}))


def test_written_buffers_are_copied_back_with_one_foreach_copy_per_dtype() -> None:
    """Batch norm's running stats (three buffers a layer, 159 in ResNet-50) are written back
    with one foreach copy per dtype, not one copy (one device launch) each: the foreach
    kernel takes one dtype (a mixed call copies each tensor alone, 159 memcpys a step on the
    H100); values as in eager."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.BatchNorm1d(4)).train()
    reference = copy.deepcopy(module)
    x = torch.randn(5, 3)
    compiled = aot_eager(trace(module, x), [x])
    counter = _CountCopies()
    with counter:
        out = compiled(x)
    expected = reference(x)
    assert sorted(counter.calls, key=str) == [
        ("aten._foreach_copy_.default", {torch.float32}),
        ("aten._foreach_copy_.default", {torch.int64}),
    ]
    torch.testing.assert_close(out, expected)
    for (name, ours), theirs in zip(module.named_buffers(), reference.buffers()):
        torch.testing.assert_close(ours, theirs, msg=name)
    out.sum().backward()
    expected.sum().backward()
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


class _CountZeros(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.fills = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (torch.ops.aten.zeros.default, torch.ops.aten.zeros_like.default):
            self.fills += 1
        return func(*args, **(kwargs or {}))


def test_no_zero_gradients_are_made_for_outputs_nobody_differentiates() -> None:
    """The written buffers' new values are outputs of the forward: autograd filled a zero
    gradient for each (159 a ResNet-50 training step) that the backward then dropped."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.BatchNorm1d(4)).train()
    reference = copy.deepcopy(module)
    x = torch.randn(5, 3)
    compiled = aot_eager(trace(module, x), [x])
    out = compiled(x)
    counter = _CountZeros()
    with counter:
        out.square().sum().backward()
    assert counter.fills == 0
    reference(x).square().sum().backward()
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_an_output_left_out_of_the_loss_gets_a_zero_gradient() -> None:
    def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sin(), x.cos() * 2

    x = torch.randn(4, requires_grad=True)
    compiled = aot_eager(trace(two, x.detach()), [x])
    first, _ = compiled(x)
    first.sum().backward()  # the second output's gradient is missing: zeros stand for it
    torch.testing.assert_close(x.grad, x.detach().cos())


def _functions_called(call: Callable[[], Any]) -> tuple[Any, set[str]]:
    """`call()`'s result and the Python functions it ran, as "caller>callee" names."""
    import sys

    names: set[str] = set()

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_back is not None:
            names.add(f"{frame.f_back.f_code.co_name}>{frame.f_code.co_name}")

    sys.setprofile(watch)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, names


def test_flat_inputs_in_the_graphs_order_are_taken_without_a_tree_walk() -> None:
    """Capture passes a module's parameters as inputs, in the Graph's order (ResNet-50: 316):
    they are the flat inputs as they come (the walk and its spec compare cost ~250 us a
    call on the CPU); anything else still goes through the walk and its checks."""
    inputs = _inputs()
    compiled = aot_eager(trace(_mlp, *inputs), inputs)
    out, called = _functions_called(lambda: compiled(*inputs))
    assert "flat_inputs>tree_flatten" not in called
    torch.testing.assert_close(out, _mlp(*inputs))
    with pytest.raises(AutodiffError, match="takes inputs shaped"):
        compiled(inputs[0], (inputs[1],), inputs[2])


def _update_stats(x: torch.Tensor, mean: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    mean.mul_(0.9).add_(x.mean(dim=0) * 0.1)
    count.add_(1)
    return x * 2


def test_the_copy_back_groups_are_found_once() -> None:
    """The copy-back's foreach groups (by dtype and device) are found on the first call and
    kept: grouping ResNet-50's 156 written buffers cost ~240 us a call on the CPU."""
    x = torch.randn(4, 3)
    mean, count = torch.zeros(3), torch.zeros((), dtype=torch.int64)
    compiled = aot_eager(trace(_update_stats, x, mean.clone(), count.clone()), [x, mean, count])
    expected_mean, expected_count = mean.clone(), count.clone()
    for call in range(3):
        counter = _CountCopies()
        with counter:
            out, called = _functions_called(lambda: compiled(x, mean, count))
        assert ("_copy_back>_foreach_groups" in called) == (call == 0)
        assert sorted(counter.calls, key=str) == [
            ("aten._foreach_copy_.default", {torch.float32}),
            ("aten._foreach_copy_.default", {torch.int64}),
        ]
        torch.testing.assert_close(out, _update_stats(x, expected_mean, expected_count))
        torch.testing.assert_close(mean, expected_mean)
        torch.testing.assert_close(count, expected_count)


def test_outputs_without_a_gradient_keep_their_places() -> None:
    """Which outputs have tangents is found once per TrainingStep: an integer output before
    the float ones and an output left out of the loss keep their places and gradients."""

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x @ w
        return y.argmax(dim=1), y.sin(), y.cos()

    torch.manual_seed(0)
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    compiled = aot_eager(trace(fn, x, w.detach()), [x, w])
    index, first, second = compiled(x, w)
    assert not index.requires_grad and index.dtype == torch.int64
    assert first.requires_grad and second.requires_grad
    first.sum().backward()  # the third output's gradient is missing: zeros stand for it
    w_eager = w.detach().clone().requires_grad_()
    index_eager, first_eager, _ = fn(x, w_eager)
    first_eager.sum().backward()
    torch.testing.assert_close(index, index_eager)
    torch.testing.assert_close(first, first_eager)
    torch.testing.assert_close(w.grad, w_eager.grad)


def test_a_training_call_under_a_functorch_transform_goes_through_function_apply() -> None:
    """Under torch.func transforms the call takes `Function.apply`'s own path, which refuses
    a Function without `setup_context` as before."""
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    compiled = aot_eager(trace(_mlp, x, w.detach(), torch.zeros(5)), [x, w, torch.zeros(5)])
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda v: compiled(x, v, torch.zeros(5)).sum())(w.detach())


def _two_heads(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> Any:
    shared = torch.tanh(x @ w1)
    return shared.sum(), (shared @ w2).sum()  # the second head reads w2 alone


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("used", [(True, False), (True, True), (False, True)])
def test_a_parameter_only_an_unused_output_reaches_gets_no_gradient(
    backend: str, used: tuple[bool, bool]
) -> None:
    import ember

    torch.manual_seed(0)
    x = torch.randn(4, 3)
    weights = [torch.randn(3, 5), torch.randn(5, 2)]
    ours = [w.clone().requires_grad_() for w in weights]
    theirs = [w.clone().requires_grad_() for w in weights]
    compiled = ember.compile(_two_heads, backend=backend)
    for outputs in (compiled(x, *ours), _two_heads(x, *theirs)):
        loss = sum(out for out, keep in zip(outputs, used) if keep)
        loss.backward()  # type: ignore[union-attr]
    for mine, eager in zip(ours, theirs):
        # None where eager leaves None (no path from the loss), the same values elsewhere
        assert (mine.grad is None) == (eager.grad is None)
        if eager.grad is not None:
            torch.testing.assert_close(mine.grad, eager.grad)
