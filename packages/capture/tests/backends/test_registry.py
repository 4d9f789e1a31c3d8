"""The backend registry: direct registration, built-ins, lookup misses, and entry points.

The entry-point tests use real installed metadata (the `ember-test-backend` fixture
distribution, and ember-capture's own `eager` entry point); they skip when not installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.capture import (
    BackendLoadError,
    BackendNotFound,
    BackendRegistrationError,
    BackendRegistry,
    CaptureError,
    default_registry,
    eager,
    list_backends,
    lookup_backend,
    register_backend,
)
from ember.prims import Graph, run, trace


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _no_entry_points() -> list[importlib.metadata.EntryPoint]:
    return []


def _mlp_graph() -> tuple[Graph, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    return trace(model, x), model, x


@pytest.fixture
def registry() -> BackendRegistry:
    return BackendRegistry(discover=_no_entry_points)


@pytest.fixture
def clean_default_registry() -> Iterator[None]:
    default_registry.reset()
    yield
    default_registry.reset()


def _echo(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return lambda *inputs: run(graph, *inputs)


# ---- direct registration --------------------------------------------------------------------


def test_decorator_registers_and_returns_the_function(registry: BackendRegistry) -> None:
    @registry.register("mine")
    def mine(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return _echo(graph, example_inputs)

    assert registry.lookup("mine") is mine
    assert "mine" in registry.names()
    assert registry.origin("mine") == "registered directly"


def test_direct_call_form(registry: BackendRegistry) -> None:
    assert registry.register("echo", _echo) is _echo
    assert registry.lookup("echo") is _echo
    registry.register("echo", _echo)  # the same callable again is fine


def test_registering_another_callable_under_a_taken_name_fails(registry: BackendRegistry) -> None:
    registry.register("echo", _echo)
    with pytest.raises(BackendRegistrationError, match="already registered as 'echo'"):
        registry.register("echo", eager)


def test_bad_names_and_non_callables_are_rejected(registry: BackendRegistry) -> None:
    with pytest.raises(BackendRegistrationError, match="identifiers"):
        registry.register("has space", _echo)
    with pytest.raises(BackendRegistrationError, match="must be a callable"):
        registry.register("number", 3)  # type: ignore[call-overload]


def test_direct_registration_overrides_a_built_in(registry: BackendRegistry) -> None:
    registry.register("eager", _echo)
    assert registry.lookup("eager") is _echo
    registry.reset()
    assert registry.lookup("eager") is eager


def test_reset_forgets_registrations(registry: BackendRegistry) -> None:
    registry.register("echo", _echo)
    registry.reset()
    assert "echo" not in registry.names()
    with pytest.raises(BackendNotFound):
        registry.lookup("echo")


def test_module_functions_use_the_default_registry(clean_default_registry: None) -> None:
    @register_backend("decorated_default")
    def decorated(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        return _echo(graph, example_inputs)

    register_backend("direct_default", _echo)
    assert {"decorated_default", "direct_default", "eager"} <= set(list_backends())
    assert lookup_backend("decorated_default") is decorated
    assert lookup_backend("direct_default") is _echo
    default_registry.reset()
    assert "direct_default" not in list_backends()


# ---- the built-in eager backend -------------------------------------------------------------


def test_eager_is_available_without_entry_point_metadata(registry: BackendRegistry) -> None:
    assert registry.names() == ["eager"]
    assert registry.lookup("eager") is eager
    assert registry.origin("eager") == "built in"


def test_eager_backend_matches_eager_pytorch(registry: BackendRegistry) -> None:
    graph, model, x = _mlp_graph()
    compiled = registry.lookup("eager")(graph, [x])
    torch.testing.assert_close(compiled(x), model(x))
    other = torch.randn(5, 8)
    torch.testing.assert_close(compiled(other), model(other))


# ---- lookup misses --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "distribution"), [("inductor", "ember-inductor"), ("aot_eager", "ember-autodiff")]
)
def test_missing_ember_backend_names_its_package(
    registry: BackendRegistry, name: str, distribution: str
) -> None:
    with pytest.raises(BackendNotFound) as caught:
        registry.lookup(name)
    message = str(caught.value)
    assert f"pip install {distribution}" in message
    assert "Installed backends: eager" in message
    assert caught.value.distribution == distribution
    assert caught.value.available == ["eager"]
    assert isinstance(caught.value, CaptureError)


def test_unknown_backend_suggests_a_close_name(registry: BackendRegistry) -> None:
    with pytest.raises(BackendNotFound, match="Did you mean 'inductor'") as caught:
        registry.lookup("inductr")
    assert "register_backend('inductr')" in str(caught.value)
    assert caught.value.distribution is None


def test_a_broken_entry_point_raises_a_load_error() -> None:
    broken = importlib.metadata.EntryPoint(
        "broken", "ember_no_such_module_xyz:backend", "ember.backends"
    )
    registry = BackendRegistry(discover=lambda: [broken])
    assert "broken" in registry.names()
    with pytest.raises(BackendLoadError, match=r"'broken'.*failed to import"):
        registry.lookup("broken")


def test_conflicting_entry_points_keep_the_first(caplog: pytest.LogCaptureFixture) -> None:
    first = importlib.metadata.EntryPoint(
        "dup", "ember.capture.backends.eager:eager", "ember.backends"
    )
    second = importlib.metadata.EntryPoint("dup", "ember_other:backend", "ember.backends")
    registry = BackendRegistry(discover=lambda: [first, second])
    with caplog.at_level("WARNING", logger="ember.capture"):
        assert registry.lookup("dup") is eager
    assert "two installed packages declare the ember backend 'dup'" in caplog.text


# ---- installed entry points -----------------------------------------------------------------


@pytest.mark.skipif(
    not _installed("ember-test-backend"),
    reason="the ember-test-backend fixture distribution is not installed; install it with "
    "`pip install -e packages/capture/tests/fixtures/ember_test_backend --no-deps` "
    "(the nox test sessions do)",
)
def test_backend_found_through_an_installed_entry_point(clean_default_registry: None) -> None:
    assert "test_echo" in list_backends()
    assert "ember-test-backend" in default_registry.origin("test_echo")
    backend = lookup_backend("test_echo")

    import ember_test_backend  # the entry point imported it; only now read its counters

    ember_test_backend.counts.reset()
    graph, model, x = _mlp_graph()
    compiled = backend(graph, [x])
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert ember_test_backend.counts.compilations == 1
    assert ember_test_backend.counts.calls == 2


def test_eager_is_declared_in_the_capture_pyproject() -> None:
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("the tests run outside the source tree; no pyproject.toml to read")
    project = tomllib.loads(pyproject.read_text())["project"]
    declared = project["entry-points"]["ember.backends"]
    assert declared["eager"] == "ember.capture.backends.eager:eager"
    module, _, attribute = declared["eager"].partition(":")
    assert getattr(importlib.import_module(module), attribute) is eager


@pytest.mark.skipif(
    not _installed("ember-capture"),
    reason="ember-capture is not installed (source tree on sys.path): its own entry-point "
    "metadata is absent; install it to test the declared `eager` entry point",
)
def test_eager_is_declared_as_an_entry_point_of_ember_capture() -> None:
    declared = {
        ep.name: ep.value
        for ep in importlib.metadata.distribution("ember-capture").entry_points
        if ep.group == "ember.backends"
    }
    assert declared["eager"] == "ember.capture.backends.eager:eager"
    assert BackendRegistry().lookup("eager") is eager
