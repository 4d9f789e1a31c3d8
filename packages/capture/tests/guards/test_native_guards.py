"""The C tensor guards: the same hits and misses as the Python check on every change a tensor
guard notices, the same recompile reasons, a hand-over to Python inside torch-function modes,
and a quiet fallback to the Python check where the module cannot be built."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ember.capture.compile import compile as ember_compile
from ember.capture.dynamic import mark_dynamic
from ember.capture.guards.check import GuardCheck, build_check
from ember.capture.guards.native import NATIVE, NativeGuards, build_library, extension_name
from ember.capture.testing import CompileCounter
from ember.capture.translate import FUNCTION_KEY


@pytest.fixture(scope="module")
def native_module() -> ModuleType:
    module = NATIVE.wait(timeout=900)  # the first run on a machine builds it (about a minute)
    if module is None:
        pytest.skip(f"the C tensor guards cannot be built here: {NATIVE.reason}")
    return module


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


class Marked(torch.Tensor):
    """A tensor subclass that changes nothing but its type."""


def _both_checks(
    module: ModuleType, compiled: Any
) -> tuple[GuardCheck, GuardCheck, Any, dict[str, Any]]:
    """The captured entry's guards compiled twice: Python only, and with C tensor guards."""
    state = compiled._ember_compiled if hasattr(compiled, "_ember_compiled") else None
    if state is None:
        state = type(compiled).forward._ember_compiled
    entry = state.table.entries[0]
    python = build_check(entry.check.guards, entry.check.inputs, native=None)
    native = build_check(entry.check.guards, entry.check.inputs, native=None)
    native.use_native(module)
    assert not python.native and native.native
    assert "__r = " in str(native), "no tensor guard went to C"
    return python, native, state.fn, state.globals


def _agree(
    python: GuardCheck, native: GuardCheck, arguments: dict[str, Any], globals_dict: Any
) -> bool:
    """Both checks give the same answer (and the same inputs on a hit); returns whether hit."""
    expected = python.check_inputs(arguments, globals_dict)
    actual = native.check_inputs(arguments, globals_dict)
    assert (expected is None) == (actual is None), (expected is None, actual is None)
    if expected is not None and actual is not None:
        assert len(expected) == len(actual)
        assert all(a is b for a, b in zip(expected, actual))
    assert python.check(arguments, globals_dict) is native.check(arguments, globals_dict)
    return expected is not None


def _data(parameter: torch.Tensor, value: torch.Tensor) -> None:
    parameter.data = value


# (name, change of the module and input, whether the entry still holds)
MUTATIONS: list[tuple[str, Callable[[Net, torch.Tensor], torch.Tensor], bool]] = [
    ("unchanged", lambda net, x: x, True),
    ("p.data of the same layout", lambda net, x: (_data(net.linear.weight, torch.randn(4, 4)), x)[1], True),
    ("p.data of another dtype", lambda net, x: (_data(net.linear.weight, net.linear.weight.double()), x)[1], False),
    ("p.data transposed", lambda net, x: (_data(net.linear.weight, torch.randn(4, 4).t()), x)[1], False),
    ("module.to('meta')", lambda net, x: (net.to("meta"), x)[1], False),
    ("a meta Parameter in its place", lambda net, x: (setattr(net.linear, "bias", nn.Parameter(torch.empty(4, device="meta"))), x)[1], False),
    ("p.data of another shape", lambda net, x: (_data(net.linear.bias, torch.randn(5)), x)[1], False),
    ("requires_grad_(False)", lambda net, x: (net.linear.bias.requires_grad_(False), x)[1], False),
    ("module.half()", lambda net, x: (net.half(), x)[1], False),
    ("module.to(float64)", lambda net, x: (net.to(torch.float64), x)[1], False),
    ("a buffer of another dtype", lambda net, x: (setattr(net.norm, "running_mean", net.norm.running_mean.half()), x)[1], False),
    ("a Parameter replaced by a Tensor", lambda net, x: (net.linear._parameters.__setitem__("bias", net.linear.bias.detach()), x)[1], False),
    ("input .to(float64)", lambda net, x: x.to(torch.float64), False),
    ("input transposed view", lambda net, x: torch.randn(4, 2).t(), False),
    ("input on the meta device", lambda net, x: torch.empty(2, 4, device="meta"), False),
    ("input subclass", lambda net, x: x.as_subclass(Marked), False),
    ("input as a Parameter", lambda net, x: nn.Parameter(x), False),
    ("input requires grad", lambda net, x: x.detach().requires_grad_(), False),
    ("input of another batch", lambda net, x: torch.randn(3, 4), False),
    ("input of another rank", lambda net, x: torch.randn(2, 4, 1), False),
    ("input sparse (no strides)", lambda net, x: x.to_sparse(), False),
    ("input not a tensor", lambda net, x: x.tolist(), False),
    ("input a slice at an offset", lambda net, x: torch.randn(3, 4)[1:], True),
    ("input made in inference mode", lambda net, x: _inference_tensor(), True),
]  # fmt: skip


def _inference_tensor() -> torch.Tensor:
    with torch.inference_mode():
        return torch.randn(2, 4)


@pytest.mark.parametrize(
    ("change", "holds"), [(m[1], m[2]) for m in MUTATIONS], ids=[m[0] for m in MUTATIONS]
)
def test_the_c_check_agrees_with_the_python_check(
    native_module: ModuleType, change: Callable[[Net, torch.Tensor], Any], holds: bool
) -> None:  # fmt: skip
    net = Net().eval()
    compiled = ember_compile(net, backend=CompileCounter())
    x = torch.randn(2, 4)
    with torch.no_grad():
        compiled(x)
        python, native, fn, globals_dict = _both_checks(native_module, compiled)
        new_x = change(net, x)
        arguments = {"self": compiled, "x": new_x, FUNCTION_KEY: fn}
        assert _agree(python, native, arguments, globals_dict) is holds


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@pytest.mark.parametrize(
    ("value", "holds"),
    [
        (torch.randn(5, 3), True),
        (torch.randn(9, 3), True),
        (torch.randn(3, 5).t(), False),  # not contiguous
        (torch.randn(5, 4), False),  # the static dim
        (torch.randn(5, 3, 1), False),
        (torch.randn(5, 3, dtype=torch.float64), False),
        (torch.randn(1, 3), False),  # outside the compiled range
    ],
)
def test_symbolic_sizes_agree_and_size_reads_wait_for_the_tensor_check(
    native_module: ModuleType, value: torch.Tensor, holds: bool
) -> None:
    compiled = ember_compile(double, backend=CompileCounter(), dynamic=False)
    example = torch.randn(4, 3)
    mark_dynamic(example, 0, min=2)
    compiled(example)
    python, native, fn, globals_dict = _both_checks(native_module, compiled)
    text = str(native)
    # the size guard reads x.shape[0] only after the C call has checked x
    assert text.index("__r = ") < text.index(".shape[0]"), text
    assert _agree(python, native, {"x": value, FUNCTION_KEY: fn}, globals_dict) is holds


class LyingDtype(TorchFunctionMode):
    """Answers every `tensor.dtype` with float64: what the Python check then reads."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__self__", None) is torch.Tensor.dtype:
            return torch.float64
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [LyingDtype, lambda: torch.device("cpu")], ids=["lying", "device"])
def test_in_a_torch_function_mode_the_python_check_decides(
    native_module: ModuleType, mode: Callable[[], Any]
) -> None:
    compiled = ember_compile(double, backend=CompileCounter())
    x = torch.randn(4)
    compiled(x)
    python, native, fn, globals_dict = _both_checks(native_module, compiled)
    arguments = {"x": x, FUNCTION_KEY: fn}
    with mode():
        holds = _agree(python, native, arguments, globals_dict)
    assert holds is (mode is not LyingDtype)


def _recompile_reason(first: Callable[[], tuple[Any, ...]], second: Callable[[], tuple[Any, ...]], fn: Any = double) -> tuple[str, bool]:  # fmt: skip
    compiled = ember_compile(fn, backend=CompileCounter())
    state = compiled._ember_compiled
    compiled(*first())
    native = state.table.entries[0].check.native
    compiled(*first())
    compiled(*second())
    assert state.captures == 2
    return state.recompile_reasons[0], native


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        (lambda: torch.ones(8), lambda: torch.ones(16), "x.shape[0] changed from 8 to 16"),
        (lambda: torch.ones(8), lambda: torch.ones(8, 1), "x.ndim changed from 1 to 2"),
        (
            lambda: torch.ones(4),
            lambda: torch.ones(4, dtype=torch.float64),
            "x.dtype changed from torch.float32 to torch.float64",
        ),
        (lambda: torch.ones(3, 3), lambda: torch.ones(3, 3).t(), "x.stride() changed from (3, 1) to (1, 3)"),
        (lambda: torch.ones(4), lambda: torch.ones(4, device="meta"), "x.device changed from cpu to meta"),
        (
            lambda: torch.ones(4),
            lambda: torch.ones(4, requires_grad=True),
            "x.requires_grad changed from False to True",
        ),
        (lambda: torch.ones(4), lambda: nn.Parameter(torch.ones(4)), "type of x changed from Tensor to Parameter"),
        (lambda: torch.ones(4), lambda: torch.ones(4).as_subclass(Marked), "type of x changed from Tensor to Marked"),
    ],
)  # fmt: skip
def test_the_recompile_reasons_are_the_python_checks(
    native_module: ModuleType, first: Any, second: Any, reason: str
) -> None:
    said, native = _recompile_reason(lambda: (first(),), lambda: (second(),))
    assert native, "the entry's check did not use the C tensor guards"
    assert said.startswith(reason), said


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda net: _data(net.linear.weight, torch.randn(4, 4).t()), "self.linear.weight.stride() changed from (4, 1) to (1, 4)"),
        (lambda net: net.linear.bias.requires_grad_(False), "self.linear.bias.requires_grad changed from True to False"),
        (lambda net: net.linear._parameters.__setitem__("bias", net.linear.bias.detach()), "type of self.linear.bias changed from Parameter to Tensor"),
    ],
)  # fmt: skip
def test_a_changed_parameter_recompiles_with_its_reason(
    native_module: ModuleType, change: Callable[[Net], Any], reason: str
) -> None:
    net = Net().eval()
    compiled = ember_compile(net, backend=CompileCounter())
    state = type(compiled).forward._ember_compiled
    with torch.no_grad():
        compiled(torch.randn(2, 4))
        assert state.table.entries[0].check.native
        change(net)
        compiled(torch.randn(2, 4, dtype=net.linear.weight.dtype))
    assert state.captures == 2
    assert state.recompile_reasons[0].startswith(reason), state.recompile_reasons[0]


def _guards_of(fn: Callable[..., Any], *args: Any) -> tuple[Any, Any, Any]:
    compiled = ember_compile(fn, backend=CompileCounter())
    compiled(*args)
    state = compiled._ember_compiled
    entry = state.table.entries[0]
    return entry.check, state.fn, state.globals


def test_without_a_compiler_the_python_check_stays_and_the_log_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    guards = NativeGuards(tmp_path)
    with caplog.at_level(logging.INFO, logger="ember.capture.guards"):
        assert guards.wait(timeout=60) is None
    assert guards.reason is not None and "no C++ compiler" in guards.reason
    assert any("the Python check is used" in r.getMessage() for r in caplog.records)
    captured, fn, globals_dict = _guards_of(double, torch.ones(3))
    check = build_check(captured.guards, captured.inputs, native=guards)
    assert not check.native
    assert check.check_inputs({"x": torch.ones(3), FUNCTION_KEY: fn}, globals_dict) is not None
    assert check.check_inputs({"x": torch.ones(4), FUNCTION_KEY: fn}, globals_dict) is None


def test_a_failing_build_leaves_the_python_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", "false")  # found, and fails every compile
    guards = NativeGuards(tmp_path)
    assert guards.wait(timeout=300) is None
    assert guards.reason is not None and guards.reason.startswith("the build failed"), guards.reason
    assert not list(tmp_path.glob("*.build-*")), "the scratch directory was left behind"
    assert not list(tmp_path.glob("*.lock")), "the build lock was left behind"


def test_switched_off_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "0")
    guards = NativeGuards(build=lambda name, library: pytest.fail("built while off"))
    assert guards.wait(timeout=10) is None
    assert guards.reason is not None and "EMBER_NATIVE_GUARDS=0" in guards.reason


def test_a_check_built_before_the_module_switches_to_it_when_built(
    native_module: ModuleType, tmp_path: Path
) -> None:
    gate = threading.Event()

    def slow_build(name: str, library: Path) -> ModuleType:
        gate.wait(timeout=60)
        return native_module

    guards = NativeGuards(tmp_path, build=slow_build)
    captured, fn, globals_dict = _guards_of(double, torch.ones(3))
    check = build_check(captured.guards, captured.inputs, native=guards)
    assert not check.native, "the check waited for the build"
    assert check.check_inputs({"x": torch.ones(3), FUNCTION_KEY: fn}, globals_dict) is not None
    gate.set()
    assert guards.wait(timeout=60) is native_module
    assert check.native
    assert check.check_inputs({"x": torch.ones(3), FUNCTION_KEY: fn}, globals_dict) is not None
    assert check.check_inputs({"x": torch.ones(3, 1), FUNCTION_KEY: fn}, globals_dict) is None


def test_a_built_library_is_loaded_from_disk_without_building(native_module: ModuleType) -> None:
    builds: list[str] = []
    guards = NativeGuards(NATIVE.directory, build=lambda name, library: builds.append(name))  # type: ignore[func-returns-value]
    module = guards.module()  # synchronous: the library is on disk
    assert module is not None and builds == []
    check = module.tensor_guards(
        [(torch.Tensor, torch.float32, torch.device("cpu"), (2,), (1,), False)]
    )
    assert check((torch.ones(2),)) is True
    assert check((torch.ones(3),)) is False


def test_the_library_lands_under_its_name_and_only_one_process_builds(
    native_module: ModuleType, tmp_path: Path
) -> None:
    """build_library waits for a living holder of the lock and loads what it left."""
    name = extension_name()
    library = tmp_path / f"{name}.so"
    lock = tmp_path / f"{name}.lock"
    lock.write_text(str(os.getppid()))  # a living process holds it
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(build_library(name, library)))
    waiter.start()
    waiter.join(timeout=1.5)
    assert waiter.is_alive(), "built while another process held the lock"
    source = Path(str(native_module.__file__))
    # what the holder would leave, in one rename as build_library moves it (a plain write
    # let the waiter import a half-written file on a busy 2-core machine)
    partial = tmp_path / f"{name}.partial"
    partial.write_bytes(source.read_bytes())
    os.replace(partial, library)
    waiter.join(timeout=30)
    assert result and result[0].tensor_guards is not None
