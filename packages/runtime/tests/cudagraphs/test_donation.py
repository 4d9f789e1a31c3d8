"""Saved values donated to the backward's recording, on CPU with the fake recorder: which
storages are donated, that the recording gets the owning tensors, and the two rules that keep
replays right (no recording between a donor and its backward; a backward whose saved values
are kept runs as it is). The memory reuse itself is checked on a GPU (test_cuda.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from cudagraph_fakes import FakeRecorder

from ember.runtime.cudagraphs import FunctionMode, cudagraphify, tree_for

CUDA = torch.device("cuda", 0)


def forward_fn(args: list[Any]) -> Sequence[Any]:
    """(x, weight) -> (out, saved: x * weight, saved: weight viewed, not owned)."""
    x, weight = args
    args.clear()  # as the generated wrappers do
    scaled = x * weight
    return (scaled.sum(0), scaled, weight.t())


def backward_fn(args: list[Any]) -> Sequence[Any]:
    """(saved scaled, saved weight view, grad) -> (grad of x,)."""
    scaled, weight_t, grad = args
    args.clear()
    return ((scaled * 0 + grad) * weight_t.t(),)


def _pair(saved_outputs: int = 2, writes_donated: bool = False) -> tuple[Any, Any]:
    forward = cudagraphify(
        forward_fn, name="fw", device=CUDA, static_positions={1},
        mode=FunctionMode.FORWARD, saved_outputs=saved_outputs,
    )  # fmt: skip
    backward = cudagraphify(
        backward_fn, name="bw", device=CUDA, mode=FunctionMode.BACKWARD,
        saved_positions={0, 1}, writes_donated=writes_donated,
    )  # fmt: skip
    return forward, backward


def _step(forward: Any, backward: Any, weight: torch.Tensor, x: torch.Tensor,
          consumed: bool = True) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    out, scaled, weight_t = forward([x, weight])
    args = [scaled, weight_t, torch.ones_like(out)]
    del scaled, weight_t
    (grad,) = backward.consuming(args) if consumed else backward(args)
    return out, grad


def _train(forward: Any, backward: Any, steps: int) -> None:
    """`steps` training steps through the pair, each checked against eager's values."""
    weight = torch.randn(3, 3)
    for i in range(steps):
        x = torch.randn(3, 3) + i
        out, grad = _step(forward, backward, weight, x)
        torch.testing.assert_close(out, (x * weight).sum(0))
        torch.testing.assert_close(grad, weight.expand(3, 3))


def test_backward_recording_takes_the_memory_of_saved_values(fake: FakeRecorder) -> None:
    forward, backward = _pair()
    _train(forward, backward, steps=4)
    tree = tree_for(CUDA)
    (root,) = tree.roots[forward.function.id]
    (child,) = root.children[backward.function.id]
    assert root.donee is child and child.donors == [root]
    assert root.donatable == {}
    # the recording got the tensor that owned the saved value, and the forward no longer
    # owns that memory (the weight's view is the parameter's memory: read in place, never
    # donated or copied)
    recording = fake.recordings[-1]
    donated = recording.args[0]
    assert donated.untyped_storage().data_ptr() == root.recording.outputs[1].data_ptr()
    assert all(owner.untyped_storage().data_ptr() != donated.data_ptr() or owner.dtype ==
               torch.uint8 for owner in root.owners)  # fmt: skip
    assert 1 not in child.inputs.copied_positions and 1 in child.inputs.static_positions
    assert tree.replays >= 4


@pytest.mark.parametrize("writes_donated", [False, True])
def test_a_backward_that_writes_donated_values_gets_them_alone(
    fake: FakeRecorder, writes_donated: bool
) -> None:
    """A backward compiled to write over a donated value it holds alone (inductor's
    `wider_in_place` checks the storage's use count) gets a tensor of its own over that
    memory: a view would keep the donor's owning tensor alive, a second user of the storage,
    and the check would refuse the memory. Other backwards get the view, as before."""
    forward, backward = _pair(writes_donated=writes_donated)
    _train(forward, backward, steps=3)  # warm-up, recording, replay
    donated = fake.recordings[-1].args[0]
    assert donated._is_view() is not writes_donated
    assert (donated._base is None) is writes_donated


def test_a_saved_value_the_caller_also_gets_is_not_donated(fake: FakeRecorder) -> None:
    forward, backward = _pair(saved_outputs=1)  # only the weight view is saved: not owned
    weight = torch.randn(3, 3)
    for _ in range(3):
        _step(forward, backward, weight, torch.randn(3, 3))
    (root,) = tree_for(CUDA).roots[forward.function.id]
    assert root.donee is None
    assert len(root.donatable) == 0  # the scaled output reaches the caller


def test_no_recording_between_a_donor_and_its_backward(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    forward, backward = _pair()
    between = cudagraphify(lambda a: (a[0] + 1,), name="between", device=CUDA)
    weight = torch.randn(3, 3)
    for _ in range(3):  # the backward is recorded, taking the forward's saved memory
        _step(forward, backward, weight, torch.randn(3, 3))
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        for _ in range(3):  # a new graph between forward and backward: never recorded
            x = torch.randn(3, 3)
            out, scaled, weight_t = forward([x, weight])
            (extra,) = between([x])
            torch.testing.assert_close(extra, x + 1)
            (grad,) = backward.consuming([scaled, weight_t, torch.ones_like(out)])
            torch.testing.assert_close(grad, weight.expand(3, 3))
    assert "[saved_values_live]" in caplog.text
    assert between.function.recordings == 0


def test_backward_with_kept_saved_values_runs_as_it_is(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    forward, backward = _pair()
    weight = torch.randn(3, 3)
    for _ in range(3):
        _step(forward, backward, weight, torch.randn(3, 3))
    replays = tree_for(CUDA).replays
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        x = torch.randn(3, 3)
        out, scaled, weight_t = forward([x, weight])
        for _ in range(2):  # retain_graph=True: the same saved values, twice
            (grad,) = backward([scaled, weight_t, torch.ones_like(out)])
            torch.testing.assert_close(grad, weight.expand(3, 3))
    assert "[retained_saved]" in caplog.text
    assert tree_for(CUDA).replays == replays + 1  # the forward only


def test_backward_recorded_with_kept_saved_values_donates_nothing(fake: FakeRecorder) -> None:
    forward, backward = _pair()
    weight = torch.randn(3, 3)
    for _ in range(3):
        _, grad = _step(forward, backward, weight, torch.randn(3, 3), consumed=False)
        torch.testing.assert_close(grad, weight.expand(3, 3))
    (root,) = tree_for(CUDA).roots[forward.function.id]
    assert root.donee is None and len(root.donatable) == 1
    assert backward.function.id in root.children


def test_two_forwards_then_two_backwards_each_donate_to_their_own(fake: FakeRecorder) -> None:
    """Graph breaks (or two micro-batches): forward 1, forward 2, backward 2, backward 1. Each
    backward takes its own forward's saved values; no recording on the path is refused."""
    first, first_backward = _pair()
    second, second_backward = _pair()
    weight = torch.randn(3, 3)
    for i in range(4):
        x = torch.randn(3, 3) + i
        out1, scaled1, view1 = first([x, weight])
        out2, scaled2, view2 = second([out1.expand(3, 3).contiguous(), weight])
        # each backward's arguments hold its saved values alone, as autograd hands them over
        args1 = [scaled1, view1, torch.ones_like(out1)]
        args2 = [scaled2, view2, torch.ones_like(out2)]
        del scaled1, scaled2, view1, view2
        (grad2,) = second_backward.consuming(args2)
        (grad1,) = first_backward.consuming(args1)
        del args1, args2
        torch.testing.assert_close(grad1, weight.expand(3, 3))
        torch.testing.assert_close(grad2, weight.expand(3, 3))
        torch.testing.assert_close(out2, (out1.expand(3, 3) * weight).sum(0))
    tree = tree_for(CUDA)
    (root,) = tree.roots[first.function.id]
    (node2,) = root.children[second.function.id]
    (back2,) = node2.children[second_backward.function.id]
    (back1,) = back2.children[first_backward.function.id]
    assert root.donee is back1 and node2.donee is back2
    assert all(f.function.recordings == 1 for f in (first, second, first_backward))
    assert tree.replays >= 8


def test_a_saved_value_someone_still_holds_is_not_donated(fake: FakeRecorder) -> None:
    """A saved-tensor hook (or the user) kept a saved value: its memory is not the backward's
    to reuse, as an eager backward would not free it either."""
    forward, backward = _pair()
    weight = torch.randn(3, 3)
    kept = []
    for i in range(4):
        x = torch.randn(3, 3) + i
        out, scaled, weight_t = forward([x, weight])
        kept.append(scaled)  # what a hook keeping its packed values does
        (grad,) = backward.consuming([scaled, weight_t, torch.ones_like(out)])
        del scaled, weight_t
        torch.testing.assert_close(grad, weight.expand(3, 3))
        torch.testing.assert_close(kept[-1], x * weight)  # still the forward's value
        kept.clear()
    (root,) = tree_for(CUDA).roots[forward.function.id]
    assert root.donee is None and len(root.donatable) == 1


def test_backward_outputs_held_over_a_step_are_poisoned(fake: FakeRecorder) -> None:
    """A backward's outputs are new tensors each call (so autograd can keep a gradient as it
    is); one still held when the next step begins is poisoned, as forward outputs are, and
    the outputs handed out after it are over memory nobody poisoned."""
    forward, backward = _pair()
    weight = torch.randn(3, 3)
    grads = []
    for i in range(4):
        _, grad = _step(forward, backward, weight, torch.randn(3, 3) + i)
        grads.append(grad)
    assert grads[-1] is not grads[-2]
    poisoned = [t.data_ptr() for t, message in fake.invalidated if "bw" in message]
    # the gradients of the recording and of the first replay were held when the next step
    # began (the warm-up's is not the graph's memory; the last one's step has not ended)
    assert grads[1].data_ptr() in poisoned and grads[2].data_ptr() in poisoned, poisoned
    torch.testing.assert_close(grads[-1], weight.expand(3, 3))
