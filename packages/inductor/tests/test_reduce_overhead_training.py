"""mode="reduce-overhead" training through ember-inductor's backend on CPU, with a fake CUDA
graph recorder (the tree's bookkeeping is plain Python): module buffers are read in place,
not copied before each replay; the backward reads the parameters the forward saved in place;
the forward's saved values are donated to the backward's recording; losses and gradients stay
eager's. Capture and replay on a GPU are tested in ember-runtime's test_cuda.py."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

import ember
import ember.inductor.backend as backend
from ember.prims.testing.models import SmallCNN
from ember.runtime.cudagraphs import FunctionMode, set_recorder_factory, trees


class _Recording:
    def __init__(
        self, call: Callable[[list[Any]], Sequence[Any]], args: list[Any], scribble: bool
    ) -> None:
        self.call = call
        self.args = list(args)  # keeps donated memory allocated, as a CUDA pool would
        self.outputs: Sequence[Any] = tuple(call(args))
        self.scribble = scribble

    def replay(self) -> None:
        if self.scribble:
            _scribble_on_backward_outputs()
        for owned, new in zip(self.outputs, self.call(list(self.args))):
            if isinstance(owned, torch.Tensor):
                owned.copy_(new)


def _scribble_on_backward_outputs() -> None:
    """What a GPU replay may do: write over the memory of a backward's outputs (its capture
    may have taken memory that graphs recorded before it freed, and they write it again)."""
    for tree in trees():
        for storage in _backward_storages(tree):
            torch.empty(0, dtype=torch.uint8).set_(storage).fill_(0xFF)  # NaN in any float


def _backward_storages(tree: Any) -> list[torch.UntypedStorage]:
    """The output storages the tree's backward nodes own."""
    return [
        owner.untyped_storage()
        for node in tree.nodes()
        if node.function.mode is FunctionMode.BACKWARD
        for owner in node.owners
    ]


class _Recorder:
    """Every tensor counts as on the device; a replay recomputes into the recorded outputs
    (`scribble`: after writing NaN over every backward's outputs first)."""

    def __init__(self, scribble: bool = False) -> None:
        self.scribble = scribble

    def record(
        self, call: Callable[[list[Any]], Sequence[Any]], args: list[Any], reserve: int = 0
    ) -> _Recording:
        return _Recording(call, args, self.scribble)

    def warm_up(self, reserve: int = 0) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def storage_alias(self, owner: torch.Tensor) -> torch.UntypedStorage:
        storage = owner.untyped_storage()
        return torch._C._construct_storage_from_data_pointer(  # type: ignore[no-any-return]
            storage.data_ptr(), owner.device, storage.nbytes()
        )

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        """CPU storages cannot be poisoned; these tests never read an overwritten output."""

    def on_device(self, tensor: torch.Tensor) -> bool:
        return True


@pytest.fixture
def fake_gpu_tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(backend, "compute_device", lambda graph: torch.device("cuda", 0))
    set_recorder_factory(lambda device: _Recorder())  # type: ignore[arg-type,return-value]
    yield
    set_recorder_factory(None)


@pytest.fixture
def scribbling_tree(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`fake_gpu_tree` whose every replay first writes NaN over the backwards' outputs."""
    monkeypatch.setattr(backend, "compute_device", lambda graph: torch.device("cuda", 0))
    set_recorder_factory(lambda device: _Recorder(scribble=True))  # type: ignore[arg-type,return-value]
    yield
    set_recorder_factory(None)


class _ConvNet(SmallCNN):
    """ember's small CNN (convolution, BatchNorm, ReLU, pooling, head) with a scalar loss."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).square().mean()


def test_training_reads_state_in_place_and_donates_saved_values(scribbling_tree: None) -> None:
    torch.manual_seed(0)
    model, reference = _ConvNet(), _ConvNet()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    for step in range(4):  # warm-up, record, replays
        x = torch.randn(2, 3, 6, 6) + step
        losses = []
        for run, module in ((compiled, model), (reference, reference)):
            module.zero_grad(set_to_none=True)
            loss = run(x)
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), reference.parameters()):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    for a, b in zip(model.buffers(), reference.buffers()):
        torch.testing.assert_close(a, b)  # the running statistics, updated every step
    (tree,) = trees()
    (forward,) = [node for nodes in tree.roots.values() for node in nodes]
    (backward,) = [node for nodes in forward.children.values() for node in nodes]
    assert forward.function.mode is FunctionMode.FORWARD
    assert tree.replays >= 4
    # the forward copies the image only: the parameters and the norm's three buffers are
    # read in place; the backward copies the image (saved for the convolution's weight
    # gradient: the caller's tensor) and its incoming gradient, none of the saved parameters
    # (views of the parameters, read in place)
    assert [tuple(p.shape) for p in forward.inputs.placeholders] == [(2, 3, 6, 6)]
    assert sorted(tuple(p.shape) for p in backward.inputs.placeholders) == [(), (2, 3, 6, 6)]
    # the saved values' memory went to the backward's recording
    assert forward.donee is backward and backward.donors == [forward]


def _backward_memory(tree: Any) -> list[tuple[int, int]]:
    """(start, end) of every output storage the tree's backward nodes own."""
    return [(s.data_ptr(), s.data_ptr() + s.nbytes()) for s in _backward_storages(tree)]


def test_gradients_are_the_backward_memory_not_copies(fake_gpu_tree: None) -> None:
    """autograd keeps a replay's gradient as it is (no copy of every gradient a step, no
    second copy of them all in memory): `.grad` is the backward graph's output memory."""
    torch.manual_seed(0)
    model = _ConvNet()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    for step in range(4):
        model.zero_grad(set_to_none=True)
        compiled(torch.randn(2, 3, 6, 6) + step).backward()
    (tree,) = trees()
    spans = _backward_memory(tree)
    assert spans
    for p in model.parameters():
        assert p.grad is not None
        address = p.grad.untyped_storage().data_ptr()
        assert any(start <= address < end for start, end in spans), "gradient was copied"


@pytest.mark.parametrize("zero_in_place", [False, True])
def test_gradients_held_over_steps_stay_right(scribbling_tree: None, zero_in_place: bool) -> None:
    """Gradients a replay installed in `.grad`, then accumulated over steps (no zero_grad)
    or zeroed in place, are the backward's memory, which the next step's replays overwrite
    (on a GPU the forward's too, whose freed memory the backward's outputs may take: every
    replay here writes NaN there first): when the step begins they are moved to memory of
    their own, before any replay, so they match eager's, and every step still replays."""
    torch.manual_seed(0)
    model, reference = _ConvNet(), _ConvNet()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    for step in range(7):
        x = torch.randn(2, 3, 6, 6) + step
        for run, module in ((compiled, model), (reference, reference)):
            if step < 3 or zero_in_place:  # warm-up, record, replay: new gradients
                module.zero_grad(set_to_none=step < 3)
            loss = run(x)
            if module is model and step >= 3:  # the step began: nothing left in the graph's
                spans = _backward_memory(trees()[0])
                for p in model.parameters():
                    address = p.grad.untyped_storage().data_ptr()
                    assert not any(start <= address < end for start, end in spans)
            loss.backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    (tree,) = trees()
    assert tree.eager_runs == 2  # the warm-ups: every later step replays
    assert tree.replays >= 2 * 5
    # moved once, when the first step holding them began; later steps add into that memory
    assert tree.moved == len(list(model.parameters()))


def test_backward_example_inputs_are_not_allocated(
    fake_gpu_tree: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Putting the backward on the tree reads none of its example inputs: ember-autodiff
    makes them on first access, one tensor per saved value (the whole activation memory)."""
    import importlib

    aot = importlib.import_module("ember.autodiff.aot")
    made: list[int] = []
    real = aot._zeros_for
    monkeypatch.setattr(aot, "_zeros_for", lambda graph: made.append(1) or real(graph))
    model = _ConvNet()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    for step in range(3):
        model.zero_grad(set_to_none=True)
        compiled(torch.randn(2, 3, 6, 6) + step).backward()
    assert trees()[0].replays >= 2
    assert made == []
