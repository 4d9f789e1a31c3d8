"""The module walk in C (module_walk.py): the same hits and misses as the Python check when a
submodule is swapped, removed or flips `training`, when the root object changes, when a
parameter is replaced; the same recompile reasons; compiled results equal eager."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.guards.check import GuardCheck, build_check
from ember.capture.guards.native import NATIVE
from ember.capture.testing import CompileCounter
from ember.capture.translate import FUNCTION_KEY


@pytest.fixture(scope="module")
def native_module() -> ModuleType:
    module = NATIVE.wait(timeout=900)  # the first run on a machine builds it (about a minute)
    if module is None:
        pytest.skip(f"the C guard module cannot be built here: {NATIVE.reason}")
    return module


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(self.linear(x)))


class Deep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _swap(deep: Deep) -> None:
    deep.blocks[1].linear = nn.Linear(4, 4)


def _remove(deep: Deep) -> None:
    del deep.blocks[0].mlp._modules["2"]


def _replace_parameter(deep: Deep) -> None:
    deep.head.weight = nn.Parameter(torch.randn(2, 4))


def _training_not_a_bool(deep: Deep) -> None:
    deep.blocks[0].norm.training = 0  # type: ignore[assignment]


def _other_block_order(deep: Deep) -> None:
    deep.blocks = nn.ModuleList([deep.blocks[1], deep.blocks[0]])


# (name, change, whether the entry still holds)
CHANGES: list[tuple[str, Callable[[Deep], Any], bool]] = [
    ("unchanged", lambda deep: None, True),
    ("a submodule swapped", _swap, False),
    ("a submodule removed", _remove, False),
    ("blocks reordered", _other_block_order, False),
    ("one module in training mode", lambda deep: deep.blocks[1].mlp[2].train(), False),
    ("training = 0, not False", _training_not_a_bool, False),
    ("a parameter replaced by an equal one", _replace_parameter, True),
    ("a parameter of another shape", lambda deep: setattr(deep.head, "bias", nn.Parameter(torch.zeros(3))), False),
]  # fmt: skip


def _checks(module: ModuleType, compiled: Any) -> tuple[GuardCheck, GuardCheck, Any, Any]:
    state = type(compiled).forward._ember_compiled
    entry = state.table.entries[0]
    python = build_check(entry.check.guards, entry.check.inputs, native=None)
    native = build_check(entry.check.guards, entry.check.inputs, native=None)
    native.use_native(module)
    assert "__w = " in str(native), "no module walk in the C check"
    return python, native, state.fn, state.globals


def _captured(
    module: ModuleType, net: nn.Module
) -> tuple[Any, torch.Tensor, tuple[GuardCheck, GuardCheck, Any, Any]]:
    """`net` compiled and called once on a (3, 4) input, and its entry's two checks."""
    compiled = ember_compile(net, backend=CompileCounter())
    x = torch.randn(3, 4)
    with torch.no_grad():
        compiled(x)
    return compiled, x, _checks(module, compiled)


@pytest.mark.parametrize(
    ("change", "holds"), [(c[1], c[2]) for c in CHANGES], ids=[c[0] for c in CHANGES]
)
def test_the_walk_agrees_with_the_python_check(
    native_module: ModuleType, change: Callable[[Deep], Any], holds: bool
) -> None:
    deep = Deep().eval()
    compiled = ember_compile(deep, backend=CompileCounter())
    x = torch.randn(3, 4)
    with torch.no_grad():
        compiled(x)
        python, native, fn, globals_dict = _checks(native_module, compiled)
        change(deep)
        arguments = {"self": compiled, "x": x, FUNCTION_KEY: fn}
        expected = python.check_inputs(arguments, globals_dict)
        actual = native.check_inputs(arguments, globals_dict)
        assert (expected is not None) is holds
        assert (actual is not None) is holds
        if expected is not None and actual is not None:
            assert all(a is b for a, b in zip(expected, actual))  # the same inputs, read once
        assert python.check(arguments, globals_dict) is native.check(arguments, globals_dict)


def test_another_root_object_misses(native_module: ModuleType) -> None:
    deep = Deep().eval()
    _, x, (python, native, fn, globals_dict) = _captured(native_module, deep)
    other = ember_compile(Deep().eval(), backend=CompileCounter())
    for root in (other, object(), None):
        arguments = {"self": root, "x": x, FUNCTION_KEY: fn}
        assert python.check_inputs(arguments, globals_dict) is None
        assert native.check_inputs(arguments, globals_dict) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_swap, "self.blocks[1].linear is a different object"),
        (lambda deep: deep.blocks[0].norm.train(), "self.blocks[0].norm.training changed from False to True"),
    ],
)  # fmt: skip
def test_a_changed_module_recompiles_with_its_reason_and_matches_eager(
    native_module: ModuleType, change: Callable[[Deep], Any], reason: str
) -> None:
    torch.manual_seed(0)
    deep = Deep().eval()
    compiled = ember_compile(deep, backend=CompileCounter())
    state = type(compiled).forward._ember_compiled
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), deep(x))
        assert "__w = " in str(state.table.entries[0].check)
        change(deep)
        torch.testing.assert_close(compiled(x), deep(x))
        torch.testing.assert_close(compiled(x), deep(x))
    assert state.captures == 2
    assert state.recompile_reasons[0].startswith(reason), state.recompile_reasons


class Last(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks[-1](x) + self.blocks[:1][0](x)


@pytest.mark.parametrize("model", [Deep, Last])
def test_a_module_list_appended_to_recompiles_and_matches_eager(model: type[nn.Module]) -> None:
    """Iterating, slicing or indexing from the end depends on the container's names: a
    guard on them (the walk's identity guards alone hold after an append)."""
    torch.manual_seed(0)
    net = model().eval()
    compiled = ember_compile(net, backend=CompileCounter())
    state = type(compiled).forward._ember_compiled
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        net.blocks.append(Block().eval())
        torch.testing.assert_close(compiled(x), net(x))
    assert state.captures == 2
    assert "the keys of self.blocks._modules changed" in state.recompile_reasons[0]


class AlwaysTraining(nn.Linear):
    """`training` as a class property: the instance dict's entry is not what `.training` is."""

    @property  # type: ignore[override]
    def training(self) -> bool:
        return bool(self.__dict__.get("mode", False))

    @training.setter
    def training(self, value: bool) -> None:
        self.__dict__["mode"] = value


class WithProperty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = AlwaysTraining(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_training_property_is_read_as_python_reads_it(native_module: ModuleType) -> None:
    net = WithProperty().eval()
    compiled, x, (python, native, fn, globals_dict) = _captured(native_module, net)
    arguments = {"self": compiled, "x": x, FUNCTION_KEY: fn}
    for mode, holds in ((False, True), (True, False)):
        net.inner.__dict__["mode"] = mode
        net.inner.__dict__["training"] = not mode  # what a dict read would wrongly find
        with torch.no_grad():
            assert (python.check_inputs(arguments, globals_dict) is not None) is holds
            assert (native.check_inputs(arguments, globals_dict) is not None) is holds


def test_a_class_changed_after_the_capture_is_read_as_python_reads_it(
    native_module: ModuleType,
) -> None:
    """A property added to the class later shadows the instance's `training` entry: the walk
    notices the class changed (its version tag) and reads as Python does."""

    class Local(nn.Linear):
        pass

    net = nn.Sequential(Local(4, 4)).eval()
    compiled, x, (python, native, fn, globals_dict) = _captured(native_module, net)
    arguments = {"self": compiled, "input": x, FUNCTION_KEY: fn}  # Sequential.forward's
    with torch.no_grad():
        assert native.check_inputs(arguments, globals_dict) is not None  # the fast path, warmed
        Local.training = property(lambda self: True)  # type: ignore[assignment]
        assert python.check_inputs(arguments, globals_dict) is None
        assert native.check_inputs(arguments, globals_dict) is None
        del Local.training
        assert native.check_inputs(arguments, globals_dict) is not None
