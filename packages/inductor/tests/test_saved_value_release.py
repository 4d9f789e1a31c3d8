"""A compiled graph called with its inputs in a list it empties (`call_boxed`, what
ember-autodiff's runtime does for a training backward) drops each input after its last use;
training steps through it give eager's gradients, twice with retain_graph=True."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import ember
from ember.inductor import pipeline
from ember.inductor.codegen import wrapper
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph
from ember.prims import trace
from ember.prims.config import load


class _AliveAtMatmul(TorchDispatchMode):
    """Records, at each matrix multiply, whether the watched tensor still exists."""

    def __init__(self, watched: weakref.ref[torch.Tensor]) -> None:
        super().__init__()
        self.watched = watched
        self.seen: list[bool] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.mm.default:
            gc.collect()
            self.seen.append(self.watched() is not None)
        return func(*args, **(kwargs or {}))


def _fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2) @ w  # x's last read is the sine's kernel, before the matmul


def _inputs() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(8, 16), torch.randn(16, 4)]


def test_an_input_handed_over_is_freed_after_its_last_use() -> None:
    compiled = compile_graph(trace(_fn, *_inputs()), _inputs())
    args = _inputs()
    expected = _fn(*args)
    mode = _AliveAtMatmul(weakref.ref(args[0]))
    with mode:
        out = compiled.call_boxed(args)
    assert args == [] and mode.seen == [False]
    torch.testing.assert_close(out, expected)


def test_an_input_the_caller_keeps_is_not_touched() -> None:
    compiled = compile_graph(trace(_fn, *_inputs()), _inputs())
    x, w = _inputs()
    mode = _AliveAtMatmul(weakref.ref(x))
    with mode:
        out = compiled(x, w)
    assert mode.seen == [True]
    torch.testing.assert_close(out, _fn(x, w))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4)
    )


def test_training_gradients_match_eager_with_retain_graph_twice() -> None:
    model, twin = _model(), _model()
    compiled = ember.compile(twin, backend="inductor")
    x = torch.randn(8, 16)
    expected = model(x).square().mean()
    expected.backward(retain_graph=True)
    expected.backward()
    loss = compiled(x).square().mean()
    loss.backward(retain_graph=True)
    first = [p.grad.clone() for p in twin.parameters() if p.grad is not None]
    loss.backward()
    torch.testing.assert_close(loss, expected)
    for got, once, want in zip(twin.parameters(), first, model.parameters()):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(2 * once, want.grad)
        torch.testing.assert_close(got.grad, want.grad)


class _AliveCounts(TorchDispatchMode):
    """At each matrix multiply, how many of the watched tensors still exist."""

    def __init__(self, watched: list[weakref.ref[torch.Tensor]]) -> None:
        super().__init__()
        self.watched = watched
        self.counts: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            gc.collect()
            self.counts.append(sum(ref() is not None for ref in self.watched))
        return func(*args, **(kwargs or {}))


def test_a_training_backward_frees_saved_activations_as_it_goes() -> None:
    twin = _model()
    compiled = ember.compile(twin, backend="inductor")
    x = torch.randn(8, 16)
    compiled(x).square().mean().backward()  # compiled; the step below is the measured one
    params = {id(p) for p in twin.parameters()} | {id(x)}
    saved: list[weakref.ref[torch.Tensor]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in params:
            saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = compiled(x).square().mean()
    mode = _AliveCounts(saved)
    with mode:
        loss.backward()
    # held to the end, every count would be len(saved): each is dropped after its last read,
    # so by the first layer's weight gradient those of the later layers are gone
    assert len(saved) >= 2 and mode.counts == sorted(mode.counts, reverse=True)
    assert mode.counts[-1] < len(saved) - 1


class _MatmulOperand(TorchDispatchMode):
    """Records the address of each matrix multiply's first operand."""

    def __init__(self) -> None:
        super().__init__()
        self.addresses: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.mm.default:
            self.addresses.append(args[0].data_ptr())
        return func(*args, **(kwargs or {}))


def _as_backward(fn: Any, wider: bool = True) -> Any:
    """`fn` compiled as a training backward is: its inputs donated (saved values), written
    over only under `wider_in_place` (on by default)."""
    graph = trace(fn, *_inputs())
    graph.meta["saved_inputs"] = "1"
    config = dataclasses.replace(load(InductorConfig), wider_in_place=wider)
    return compile_graph(graph, _inputs(), config=config)


def test_a_donated_input_is_not_written_by_default() -> None:
    compiled = _as_backward(_fn, wider=False)
    args = _inputs()
    address = args[0].data_ptr()
    mode = _MatmulOperand()
    with mode:
        out = compiled.call_boxed(args)
    assert mode.addresses != [address] and "held alone" not in compiled.source
    torch.testing.assert_close(out, _fn(*_inputs()))


def test_a_donated_input_held_alone_is_written_in_place() -> None:
    compiled = _as_backward(_fn)
    args = _inputs()
    expected = _fn(*_inputs())
    address = args[0].data_ptr()
    mode = _MatmulOperand()
    with mode:
        out = compiled.call_boxed(args)
    # the sine's result went over x (x's last read), not into a buffer of its own
    assert mode.addresses == [address]
    torch.testing.assert_close(out, expected)


def test_a_donated_input_someone_else_holds_is_left_alone() -> None:
    compiled = _as_backward(_fn)
    for holder in ("tensor", "view"):
        args = _inputs()
        kept = args[0] if holder == "tensor" else args[0][2:]
        before = kept.clone()
        address = args[0].data_ptr()
        mode = _MatmulOperand()
        with mode:
            out = compiled.call_boxed(args)
        assert mode.addresses != [address], holder
        torch.testing.assert_close(kept, before)  # the caller's tensor kept its values
        torch.testing.assert_close(out, _fn(*_inputs()))


def test_a_donated_input_is_left_alone_in_an_unboxed_call() -> None:
    compiled = _as_backward(_fn)
    x, w = _inputs()
    before = x.clone()
    out = compiled(x, w)
    torch.testing.assert_close(x, before)
    torch.testing.assert_close(out, _fn(x, w))


def _count_in_place_checks(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Turn `wider_in_place` on and record each run-time check of a donated input: whether
    the call held it alone (its reference count, then its storage's use count)."""
    monkeypatch.setenv("EMBER_INDUCTOR_WIDER_IN_PLACE", "1")
    taken: list[bool] = []
    namespace = pipeline.wrapper_namespace

    def counting(*args: Any) -> dict[str, Any]:
        names = namespace(*args)
        count, uses = names["getrefcount"], names["storage_use_count"]

        def getrefcount(tensor: Any) -> int:
            refs = count(tensor) - 1  # this frame's argument
            if refs != wrapper.SOLE_REFERENCES:
                taken.append(False)
            return refs

        def storage_use_count(storage: int) -> int:
            found = uses(storage)
            taken.append(found == wrapper.SOLE_STORAGE_USES)
            return found

        names["getrefcount"] = getrefcount
        names["storage_use_count"] = storage_use_count
        return names

    monkeypatch.setattr(pipeline, "wrapper_namespace", counting)
    return taken


def test_training_writes_the_backward_over_saved_values_and_matches_eager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = _count_in_place_checks(monkeypatch)

    def mlp() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(),
                             nn.Linear(32, 4))  # fmt: skip

    model, twin = mlp(), mlp()
    compiled = ember.compile(twin, backend="inductor")
    for _ in range(2):
        x, target = torch.randn(8, 16), torch.randint(0, 4, (8,))
        nn.functional.cross_entropy(model(x), target).backward()
        nn.functional.cross_entropy(compiled(x), target).backward()
    assert taken and all(taken)  # the backward's GELU gradients went over the saved values
    for ours, theirs in zip(twin.parameters(), model.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad)


def test_a_saved_view_of_a_forward_buffer_is_written_over_by_the_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A language-model head under bf16 autocast: the forward saves its logits as a view
    (batch, tokens, vocab) of the matmul's (rows, vocab) result. Returned as a view, the
    saved value would keep that result's tensor alive beside it, a second user of the
    storage, and the backward would write the logits' gradient beside the saved logits
    (500 MB each on the Llama-style model) instead of over them."""
    taken = _count_in_place_checks(monkeypatch)

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.embed = nn.Linear(16, 16)
            self.head = nn.Linear(16, 64, bias=False)

        def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            logits = self.head(torch.relu(self.embed(x)))
            return nn.functional.cross_entropy(logits.float().view(-1, 64), target.view(-1))

    model, twin = Head(), Head()
    compiled = ember.compile(twin, backend="inductor")
    for _ in range(2):
        x, target = torch.randn(2, 8, 16), torch.randint(0, 64, (2, 8))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x, target).backward()
            compiled(x, target).backward()
    assert taken and all(taken), taken  # every donated saved value was held alone
    for ours, theirs in zip(twin.parameters(), model.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=2e-2, atol=2e-3)
