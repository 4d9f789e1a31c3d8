"""Training through compiled graphs: `ember.compile(..., backend="aot_eager")` against eager.

Each program runs twice from the same state, eagerly and compiled; the forward outputs, the
gradients of the inputs and of every parameter, and every buffer and input the program
writes must match. Every test runs with and without EMBER_SERIALIZE_BOUNDARIES=1 (with
EMBER_VERIFY=1), so the joint, forward and backward Graphs also cross the autodiff boundary as
bytes and are verified after every pass.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember


@pytest.fixture(params=["in-memory", "serialized"], autouse=True)
def boundaries(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "serialized":
        monkeypatch.setenv("EMBER_SERIALIZE_BOUNDARIES", "1")
        monkeypatch.setenv("EMBER_VERIFY", "1")  # and verify the Graph after every pass
    else:
        monkeypatch.delenv("EMBER_SERIALIZE_BOUNDARIES", raising=False)
        monkeypatch.delenv("EMBER_VERIFY", raising=False)
    ember.capture.reset()
    return str(request.param)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return self.head(x.mean(dim=(2, 3)))


class Block(nn.Module):
    """A pre-norm transformer block: LayerNorm, causal attention, LayerNorm, GELU MLP."""

    def __init__(self, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        head = width // self.heads
        q, k, v = (t.view(batch, length, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head)
        mask = torch.ones(length, length, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def _compare(
    make: Callable[[], nn.Module], inputs: list[torch.Tensor], *, train: bool = True
) -> None:
    torch.manual_seed(0)
    eager_model = make().train(train)
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    eager_inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    compiled_inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    expected = eager_model(*eager_inputs)
    actual = compiled(*compiled_inputs)
    torch.testing.assert_close(actual, expected)
    assert actual.requires_grad
    weights = torch.randn_like(expected)
    (expected * weights).sum().backward()
    (actual * weights).sum().backward()
    for eager_x, compiled_x in zip(eager_inputs, compiled_inputs):
        if eager_x.requires_grad:
            torch.testing.assert_close(compiled_x.grad, eager_x.grad)
    _assert_same_state(compiled_model, eager_model)


def _assert_same_state(compiled_model: nn.Module, eager_model: nn.Module) -> None:
    eager_parameters = dict(eager_model.named_parameters())
    for name, parameter in compiled_model.named_parameters():
        assert parameter.grad is not None, name
        torch.testing.assert_close(parameter.grad, eager_parameters[name].grad, msg=name)
    eager_buffers = dict(eager_model.named_buffers())
    for name, buffer in compiled_model.named_buffers():
        torch.testing.assert_close(buffer, eager_buffers[name], msg=name)


def test_mlp_matches_eager() -> None:
    _compare(MLP, [torch.randn(5, 8, requires_grad=True)])


def test_cnn_with_batch_norm_in_training_updates_running_stats() -> None:
    _compare(ConvNet, [torch.randn(4, 3, 6, 6, requires_grad=True)])


def test_transformer_block_matches_eager() -> None:
    _compare(Block, [torch.randn(2, 5, 16, requires_grad=True)])


def test_function_mutating_its_input_in_place() -> None:
    def scale_(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        x[0].add_(w)
        return (x * w).sum(dim=0)

    w_eager = torch.randn(3, requires_grad=True)
    w_compiled = w_eager.detach().clone().requires_grad_()
    x_eager = torch.randn(4, 3)
    x_compiled = x_eager.clone()
    compiled = ember.compile(scale_, backend="aot_eager")
    expected = scale_(x_eager, w_eager)
    actual = compiled(x_compiled, w_compiled)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(x_compiled, x_eager)  # the input was written as in eager
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(w_compiled.grad, w_eager.grad)


def test_function_returning_a_view_of_its_input() -> None:
    def view_of(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.t()[1:], x * y

    x_eager = torch.randn(3, 4, requires_grad=True)
    y = torch.randn(3, 4)
    x_compiled = x_eager.detach().clone().requires_grad_()
    compiled = ember.compile(view_of, backend="aot_eager")
    expected = view_of(x_eager, y)
    actual = compiled(x_compiled, y)
    torch.testing.assert_close(actual, expected)
    # The view shares the input's memory, as in eager.
    assert actual[0].untyped_storage().data_ptr() == x_compiled.untyped_storage().data_ptr()
    assert actual[0].stride() == expected[0].stride()
    (expected[0].sum() * 3 + expected[1].sum()).backward()
    (actual[0].sum() * 3 + actual[1].sum()).backward()
    torch.testing.assert_close(x_compiled.grad, x_eager.grad)


def test_module_under_no_grad_for_inference() -> None:
    torch.manual_seed(0)
    eager_model = ConvNet().eval()
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        expected = eager_model(x)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert not actual.requires_grad and actual.grad_fn is None
    _assert_no_grads(compiled_model)


def test_training_module_called_under_no_grad_still_updates_buffers() -> None:
    torch.manual_seed(0)
    eager_model = ConvNet().train()
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        expected = eager_model(x)
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert actual.grad_fn is None
    eager_buffers = dict(eager_model.named_buffers())
    for name, buffer in compiled_model.named_buffers():
        torch.testing.assert_close(buffer, eager_buffers[name], msg=name)


def _assert_no_grads(model: nn.Module) -> None:
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("make", [MLP, ConvNet, Block], ids=["mlp", "cnn", "transformer"])
def test_three_optimizer_steps_match_eager(make: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    eager_model = make().train()
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    eager_optimizer = torch.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    compiled_optimizer = torch.optim.SGD(compiled_model.parameters(), lr=0.1, momentum=0.9)
    shapes = {MLP: (6, 8), ConvNet: (4, 3, 6, 6), Block: (2, 5, 16)}
    batches = [torch.randn(*shapes[make]) for _ in range(3)]  # type: ignore[index]
    for batch in batches:
        for optimizer, forward in (
            (eager_optimizer, eager_model),
            (compiled_optimizer, compiled),
        ):
            optimizer.zero_grad()
            loss = forward(batch).square().mean()
            loss.backward()
            optimizer.step()
    for (name, p), q in zip(compiled_model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, msg=name)
    for (name, b), c in zip(compiled_model.named_buffers(), eager_model.buffers()):
        torch.testing.assert_close(b, c, msg=name)


def test_double_backward_raises_a_clear_error() -> None:
    def cube(x: torch.Tensor) -> Any:
        return (x**3).sum()

    x = torch.randn(3, requires_grad=True)
    compiled = ember.compile(cube, backend="aot_eager")
    (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    torch.testing.assert_close(grad, 3 * x.detach() ** 2)
    with pytest.raises(ember.autodiff.DoubleBackwardError, match="double backward"):
        grad.sum().backward()


def test_dropout_draws_the_same_random_numbers_as_eager() -> None:
    def make() -> nn.Module:
        return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))

    torch.manual_seed(0)
    eager_model = make().train()
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    x = torch.randn(6, 4)
    torch.manual_seed(1)
    expected = eager_model(x)
    torch.manual_seed(1)
    actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    expected.square().sum().backward()
    actual.square().sum().backward()
    _assert_same_state(compiled_model, eager_model)


def test_captured_transformer_block_min_cut_saves_less_than_naive() -> None:
    captured: list[tuple[Any, list[torch.Tensor]]] = []

    def record(graph: Any, example_inputs: Any) -> Any:
        captured.append((graph, list(example_inputs)))
        return ember.autodiff.aot_eager(graph, example_inputs)

    torch.manual_seed(0)
    block = Block()
    x = torch.randn(2, 5, 16, requires_grad=True)
    ember.compile(block, backend=record)(x)
    ((graph, examples),) = captured
    flags = [t.requires_grad for t in examples]
    joint = ember.autodiff.trace_joint(graph, flags)
    joint.graph.verify()
    assert ember.prims.loads(ember.prims.dumps(joint.graph)) == joint.graph
    naive = ember.autodiff.partition(joint, "naive")
    min_cut = ember.autodiff.partition(joint, "min_cut")
    assert min_cut.saved_bytes < naive.saved_bytes
    tangent = torch.randn(2, 5, 16)
    grads = []
    for parts in (naive, min_cut):
        for half in (parts.forward, parts.backward):
            half.verify()
            assert ember.prims.loads(ember.prims.dumps(half)) == half
        primals = [t.detach() for t in examples]
        results = ember.prims.run(parts.forward, *primals)
        grads.append(ember.prims.run(parts.backward, *results[1:], tangent))
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_parameter_written_under_no_grad_keeps_its_gradient() -> None:
    class Decaying(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3))
            self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                self.weight.mul_(0.5)
                self.calls.add_(1)
            return (x * self.weight).sin().sum(dim=0)

    torch.manual_seed(0)
    _compare(Decaying, [torch.randn(4, 3, requires_grad=True)])


def test_language_model_loss_with_tied_embeddings() -> None:
    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(20, 16)
            self.block = Block()
            self.head = nn.Linear(16, 20, bias=False)
            self.head.weight = self.tokens.weight  # tied: one parameter, two uses

        def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            logits = self.head(self.block(self.tokens(ids)))
            return F.cross_entropy(logits.view(-1, 20), targets.view(-1))

    torch.manual_seed(0)
    eager_model = TinyLM().train()
    compiled_model = copy.deepcopy(eager_model)
    compiled = ember.compile(compiled_model, backend="aot_eager")
    ids, targets = torch.randint(0, 20, (2, 5)), torch.randint(0, 20, (2, 5))
    expected = eager_model(ids, targets)
    actual = compiled(ids, targets)
    torch.testing.assert_close(actual, expected)
    expected.backward()
    actual.backward()
    _assert_same_state(compiled_model, eager_model)


def test_aot_eager_comes_from_the_ember_autodiff_entry_point() -> None:
    assert "aot_eager" in ember.capture.list_backends()
    origin = ember.capture.default_registry.origin("aot_eager")
    assert "ember.autodiff.aot:aot_eager" in origin and "ember-autodiff" in origin
    assert ember.capture.lookup_backend("aot_eager") is ember.autodiff.aot_eager
