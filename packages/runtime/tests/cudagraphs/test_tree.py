"""The CUDA graph tree's bookkeeping on CPU, with a fake recorder: warm-up, record, replay,
static and copied inputs, re-recording and skipping with logged reasons, steps, poisoning."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from cudagraph_fakes import FakeRecorder

from ember.runtime.cudagraphs import (
    CATALOGUE,
    FunctionMode,
    cudagraphify,
    mark_step_begin,
    tree_for,
)

CUDA = torch.device("cuda", 0)


def affine(args: list[Any]) -> Sequence[Any]:
    x, weight = args
    return (x * weight + 1,)


def test_warms_up_then_records_then_replays_with_new_inputs(fake: FakeRecorder) -> None:
    weight = torch.randn(4)
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    for _ in range(4):
        x = torch.randn(4)
        (out,) = call([x, weight])
        torch.testing.assert_close(out, x * weight + 1)
    tree = tree_for(CUDA)
    assert tree.eager_runs == 1  # the warm-up
    assert len(fake.recordings) == 1
    assert tree.replays == 2
    node = tree.roots[call.function.id][0]  # type: ignore[attr-defined]
    assert node.inputs.copied_positions == [0]  # x is copied, the weight is read in place


def test_static_input_updated_in_place_is_read_by_replay(fake: FakeRecorder) -> None:
    weight = torch.ones(4)
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    x = torch.randn(4)
    for _ in range(3):
        call([x, weight])
    weight.mul_(3)  # an optimizer step
    (out,) = call([x, weight])
    torch.testing.assert_close(out, x * 3 + 1)
    assert len(fake.recordings) == 1


def test_replaced_parameter_records_again_with_a_reason(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    x = torch.randn(4)
    weight = torch.ones(4)
    for _ in range(3):
        call([x, weight])
    moved = torch.full((4,), 2.0)
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        (out,) = call([x, moved])
    torch.testing.assert_close(out, x * 2 + 1)
    assert len(fake.recordings) == 2
    assert "[static_input_moved]" in caplog.text


def test_new_shapes_record_until_the_limit_then_run_as_they_are(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    tree = tree_for(CUDA)
    tree.max_recordings = 2
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions=())
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        for size in (2, 3, 4):
            for _ in range(3):
                x, w = torch.randn(size), torch.randn(size)
                (out,) = call([x, w])
                torch.testing.assert_close(out, x * w + 1)
    assert len(fake.recordings) == 2
    assert "[dynamic_shapes]" in caplog.text


def test_cpu_tensor_runs_without_graphs(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA)
    x, w = torch.randn(4), torch.randn(4)
    fake.host.add(id(x))
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        for _ in range(3):
            (out,) = call([x, w])
    torch.testing.assert_close(out, x * w + 1)
    assert fake.recordings == []
    assert "[cpu_tensor]" in caplog.text and "input 0" in caplog.text


def test_mutated_input_and_cpu_graph_are_not_wrapped(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        assert cudagraphify(affine, name="g", device=CUDA, mutated_positions={0}) is affine
        assert cudagraphify(affine, name="g", device=torch.device("cpu")) is affine
        # a parameter written in place (a buffer update) is fine: the graph writes it in place
        assert cudagraphify(affine, name="g", device=CUDA, static_positions={1},
                            mutated_positions={1}) is not affine  # fmt: skip
    assert "[mutated_input]" in caplog.text and "[cpu_graph]" in caplog.text


def test_uncapturable_graph_runs_without_graphs(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    calls = []

    def syncs(args: list[Any]) -> Sequence[Any]:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("operation not permitted when stream is capturing")
        return (args[0] + 1,)

    fake.fail_with = RuntimeError
    call = cudagraphify(syncs, name="syncs", device=CUDA)
    x = torch.zeros(2)
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        results = [call([x])[0] for _ in range(4)]
    assert all(torch.equal(r, x + 1) for r in results)
    assert "[uncapturable]" in caplog.text
    assert len(calls) == 5  # warm-up, the failed capture, that call run as it is, two more


def test_later_step_poisons_outputs_still_referenced(fake: FakeRecorder) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    weight = torch.ones(4)
    outs = [call([torch.full((4,), float(i)), weight])[0] for i in range(3)]
    # call 0 warmed up (not a graph output), call 1 recorded, call 2 replayed: a new step
    poisoned = [t for t, _ in fake.invalidated]
    assert any(t is outs[1] for t in poisoned)
    assert not any(t is outs[0] or t is outs[2] for t in poisoned)
    message = fake.invalidated[0][1]
    assert ".clone()" in message and "cudagraph_mark_step_begin" in message
    assert "affine" in message
    torch.testing.assert_close(outs[2], torch.full((4,), 3.0))


def test_dropped_outputs_are_not_poisoned(fake: FakeRecorder) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    weight = torch.ones(4)
    for i in range(4):
        call([torch.full((4,), float(i)), weight])
    assert fake.invalidated == []


def test_graph_after_graph_reads_the_first_graphs_output_in_place(fake: FakeRecorder) -> None:
    first = cudagraphify(lambda a: (a[0] * 2,), name="first", device=CUDA)
    second = cudagraphify(lambda a: (a[0] + 1, a[1]), name="second", device=CUDA)
    for i in range(4):
        x = torch.full((3,), float(i))
        (h,) = first([x])
        out, same = second([h, 7])
        torch.testing.assert_close(out, x * 2 + 1)
        assert same == 7
        del h
    tree = tree_for(CUDA)
    (root,) = tree.roots[first.function.id]  # type: ignore[attr-defined]
    (child,) = root.children[second.function.id]  # type: ignore[attr-defined]
    assert child.inputs.copied_positions == []  # h lives in the pool: not copied
    assert len(fake.recordings) == 2 and tree.replays == 4


def test_forward_again_before_backward_records_a_child(fake: FakeRecorder) -> None:
    forward = cudagraphify(lambda a: (a[0] * 2,), name="fw", device=CUDA)
    backward = cudagraphify(lambda a: (a[0] * 0 + 2,), name="bw", device=CUDA)
    forward.function.mode = FunctionMode.FORWARD  # type: ignore[attr-defined]
    backward.function.mode = FunctionMode.BACKWARD  # type: ignore[attr-defined]
    for _ in range(3):  # two forwards, then both backwards (gradient of two microbatches)
        a = forward([torch.ones(2)])[0]
        b = forward([torch.ones(2) * 3])[0]
        torch.testing.assert_close(a, torch.full((2,), 2.0))
        backward([b])
        backward([a])
    # no output a step still needed was poisoned; steps begin only after both backwards
    poisoned = [t for t, _ in fake.invalidated]
    assert not any(t is a or t is b for t in poisoned)
    tree = tree_for(CUDA)
    (root,) = tree.roots[forward.function.id]  # type: ignore[attr-defined]
    assert forward.function.id in root.children  # type: ignore[attr-defined]
    assert tree.step >= 1


def test_mark_step_begin_starts_a_step(fake: FakeRecorder) -> None:
    first = cudagraphify(lambda a: (a[0] * 2,), name="first", device=CUDA)
    second = cudagraphify(lambda a: (a[0] + 1,), name="second", device=CUDA)
    x = torch.ones(2)
    for _ in range(3):
        h = first([x])[0]
        second([x])
    tree = tree_for(CUDA)
    step = tree.step
    mark_step_begin()
    kept = first([x])[0]
    assert tree.step == step + 1
    assert any(t is h for t, _ in fake.invalidated)
    del kept


def test_output_that_views_an_input_is_rebuilt_on_the_new_input(fake: FakeRecorder) -> None:
    call = cudagraphify(lambda a: (a[0][1:], a[0] * 2), name="view", device=CUDA)
    for i in range(3):
        x = torch.arange(4.0) + i
        view, doubled = call([x])
        assert view.data_ptr() == x[1:].data_ptr()  # a view of the caller's tensor
        torch.testing.assert_close(doubled, x * 2)


def test_every_reason_has_an_id_message_and_hint() -> None:
    for reason_id, reason in CATALOGUE.items():
        assert reason.id == reason_id and reason.message and reason.hint


def test_graph_that_makes_a_cpu_tensor_is_not_wrapped(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        wrapped = cudagraphify(affine, name="g", device=CUDA, host_tensor_at="aten::scalar_tensor")
    assert wrapped is affine
    assert "[cpu_in_graph]" in caplog.text and "aten::scalar_tensor" in caplog.text


def test_cpu_parameter_is_caught_on_every_call(fake: FakeRecorder) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    weight = torch.ones(4)
    fake.host.add(id(weight))
    for _ in range(3):
        call([torch.ones(4), weight])
    assert fake.recordings == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (lambda x, host: (x + host.to(x.dtype).clone(),), None),  # host-only work is fine
        (lambda x, host: (x + torch.zeros_like(x).copy_(host),), "copies between host"),
        (lambda x, host: (x[x.nonzero()[:, 0]],), "reads device values"),
        (lambda x, host: (x * x.sum().item(),), "reads device values"),
    ],
)
def test_warm_up_finds_what_a_capture_cannot_take(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture, body: Any, expected: str | None
) -> None:
    host = torch.ones(3)  # made inside the graph in real life; here a tensor the fake calls host
    fake.host.add(id(host))

    def graph(args: list[Any]) -> Sequence[Any]:
        return body(args[0], host)

    call = cudagraphify(graph, name="g", device=CUDA)
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        for _ in range(3):
            x = torch.arange(3.0)
            torch.testing.assert_close(call([x])[0], body(x, host)[0])
    if expected is None:
        assert len(fake.recordings) == 1
    else:
        assert fake.recordings == [] and "[uncapturable]" in caplog.text
        assert expected in caplog.text


def test_dropped_outputs_are_handed_out_again_without_new_tensors(fake: FakeRecorder) -> None:
    call = cudagraphify(affine, name="affine", device=CUDA, static_positions={1})
    weight = torch.ones(4)
    handed: list[weakref.ref[torch.Tensor]] = []
    for i in range(5):
        (out,) = call([torch.full((4,), float(i)), weight])
        torch.testing.assert_close(out, torch.full((4,), i + 1.0))
        handed.append(weakref.ref(out))
        del out
    # replays re-hand the tensor nobody kept (it stays alive in the node)
    assert handed[2]() is not None and handed[2]() is handed[3]() is handed[4]()
    assert fake.invalidated == []


def test_held_output_is_poisoned_and_replaced_next_step(fake: FakeRecorder) -> None:
    two = cudagraphify(lambda a: (a[0] * 2, a[0] * 3), name="two", device=CUDA)
    for i in range(2):  # warm-up, record
        two([torch.full((2,), float(i))])
    doubled, tripled = two([torch.full((2,), 5.0)])
    del tripled  # dropped: handed out again; `doubled` is held: poisoned, then replaced
    new_doubled, new_tripled = two([torch.full((2,), 7.0)])
    assert [t for t, _ in fake.invalidated] == [doubled]
    assert new_doubled is not doubled
    torch.testing.assert_close(new_doubled, torch.full((2,), 14.0))
    torch.testing.assert_close(new_tripled, torch.full((2,), 21.0))
    assert new_doubled.data_ptr() == doubled.data_ptr()  # the same pool memory


def test_outputs_over_one_storage_are_replaced_together(fake: FakeRecorder) -> None:
    def halves(a: list[Any]) -> Sequence[Any]:
        both = a[0] * 2
        return (both[:2], both[2:])

    call = cudagraphify(halves, name="halves", device=CUDA)
    for i in range(2):
        call([torch.arange(4.0) + i])
    first, second = call([torch.arange(4.0)])
    del second
    new_first, new_second = call([torch.arange(4.0) + 10])
    assert [t for t, _ in fake.invalidated] == [first]
    assert new_second.untyped_storage().data_ptr() == new_first.untyped_storage().data_ptr()
    torch.testing.assert_close(torch.cat([new_first, new_second]), (torch.arange(4.0) + 10) * 2)


def test_training_forward_outputs_handed_out_again_lose_dropped_hooks(fake: FakeRecorder) -> None:
    forward = cudagraphify(lambda a: (a[0] * 2,), name="fw", device=CUDA)
    forward.function.mode = FunctionMode.FORWARD  # type: ignore[attr-defined]
    seen: list[torch.Tensor] = []
    for i in range(4):
        (out,) = forward([torch.full((2,), float(i))])
        assert out._backward_hooks is None  # a hook from the step before is gone
        out.requires_grad_(True)
        out.register_hook(seen.append)
        out.requires_grad_(False)
        out = out.detach()
        mark_step_begin()
    del out
    (again,) = forward([torch.ones(2)])
    assert again._backward_hooks is None


def test_cpu_tensor_the_graph_never_reads_is_neither_checked_nor_copied(
    fake: FakeRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    """A backward gets the RNG state of attention without dropout (empty CPU tensors) that
    it never reads: the graph records and replays, each call's new CPU tensor untouched; a
    CPU tensor the graph reads still keeps it from recording."""

    def backward(args: list[Any]) -> Sequence[Any]:
        grad, _seed, weight = args
        return (grad * weight,)

    call = cudagraphify(
        backward, name="bw", device=CUDA, static_positions={1, 2}, unread_positions={1}
    )
    weight = torch.full((3,), 2.0)
    seeds = [torch.empty((), dtype=torch.int64) for _ in range(5)]  # alive: ids stay theirs
    fake.host.update(id(seed) for seed in seeds)
    with caplog.at_level(logging.WARNING, logger="ember.inductor.perf_hints"):
        for step in range(4):
            grad = torch.full((3,), float(step))
            (out,) = call([grad, seeds[step], weight])
            torch.testing.assert_close(out, grad * 2.0)
        assert len(fake.recordings) == 1 and fake.replays == 2
        assert "[cpu_tensor]" not in caplog.text
        read = torch.ones(3)
        fake.host.add(id(read))
        (out,) = call([read, seeds[4], weight])
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert "[cpu_tensor]" in caplog.text and "input 0" in caplog.text


@pytest.mark.parametrize("setting", ["1", "0"])
def test_a_steps_first_recording_reserves_its_block_when_asked(
    fake: FakeRecorder, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv("EMBER_CUDAGRAPH_RESERVE_BLOCK", setting)
    forward = cudagraphify(lambda a: (a[0] * 2,), name="fw", device=CUDA, reserve_bytes=4096)
    backward = cudagraphify(lambda a: (a[0] + 1,), name="bw", device=CUDA, reserve_bytes=512)
    forward.function.mode = FunctionMode.FORWARD  # type: ignore[attr-defined]
    backward.function.mode = FunctionMode.BACKWARD  # type: ignore[attr-defined]
    for _ in range(3):
        (out,) = forward([torch.ones(2)])
        torch.testing.assert_close(backward([out])[0], torch.full((2,), 3.0))
    # forward recorded at the root, backward below it: only the root reserves; the warm-ups
    # go through the recorder (into the pool) only when asked
    assert fake.reserves == ([4096, 0] if setting == "1" else [0, 0])
    assert fake.warm_up_reserves == ([4096, 0] if setting == "1" else [])
