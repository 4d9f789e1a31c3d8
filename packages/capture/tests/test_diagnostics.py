"""Diagnostics around a compiled graph: repro directories for compile and runtime errors,
the accuracy check (EMBER_ACCURACY_CHECK) with an automatically minified repro, and the
performance warning after warm-up. The planted backends are ember-prims' test fixtures."""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.capture import AccuracyError, PerformanceWarning
from ember.capture.compile import compile as ember_compile
from ember.capture.perf_warning import slower_message

ROOT = Path(__file__).resolve().parents[3]
PLANTED = ROOT / "packages" / "prims" / "tests" / "fixtures" / "planted"
sys.path.insert(0, str(PLANTED))
import planted_decomposition as planted  # noqa: E402


def model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w + 1) * 2
    s = torch.sigmoid(h)  # the planted bug's line
    t = torch.tanh(h) - s
    return (t / (t.sum(-1, keepdim=True) + 3)).exp().mean()


SIGMOID_LINE = f"test_diagnostics.py:{model.__code__.co_firstlineno + 2}"


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=generator), torch.randn(8, 6, generator=generator)


def test_accuracy_check_raises_naming_the_line_and_writes_a_minified_repro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_ACCURACY_CHECK", "1")
    monkeypatch.setenv("EMBER_REPRO", "minify")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))
    compiled = ember_compile(model, backend=planted.backend)
    with pytest.raises(AccuracyError, match=SIGMOID_LINE) as caught:
        compiled(*_inputs())
    assert caught.value.repro is not None
    directory = Path(caught.value.repro)
    manifest = json.loads((directory / "repro.json").read_text())
    assert manifest["backend"] == "planted_decomposition:backend"
    assert manifest["nodes"] <= 10 < manifest["original_nodes"]
    assert "aten::sigmoid.default" in prims.load(directory / "graph.ember").op_counts()


def test_accuracy_check_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_ACCURACY_CHECK", raising=False)
    compiled = ember_compile(model, backend=planted.backend)
    x, w = _inputs()
    assert not torch.allclose(compiled(x, w), model(x, w))  # wrong, and nobody checked


def test_runtime_error_keeps_its_type_and_notes_the_repro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_REPRO", "write")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cos(x) + 1

    with pytest.raises(IndexError) as caught:
        ember_compile(fn, backend=planted.runtime_backend)(torch.randn(3))
    note = "\n".join(caught.value.__notes__)
    assert "while running graph" in note and "test_diagnostics.py" in note
    repro = tmp_path / "fn-1" / "full"
    assert prims.minify.run_repro(repro) == 1


def test_compile_error_says_how_to_get_a_repro(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_REPRO", raising=False)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    with pytest.raises(prims.DecompositionError, match="planted to fail") as caught:
        ember_compile(fn, backend=planted.raising_backend)(torch.randn(3))
    assert "EMBER_REPRO=minify" in "\n".join(caught.value.__notes__)


class _Slow:
    def __init__(self, graph: prims.Graph) -> None:
        self.interpreter = prims.Interpreter(graph)

    def __call__(self, *inputs: Any) -> Any:
        time.sleep(0.002)
        return self.interpreter(*inputs)


def slow_backend(graph: prims.Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return _Slow(graph)


def test_a_slower_graph_warns_once_after_warm_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_PERF_WARNINGS", raising=False)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    compiled = ember_compile(fn, backend=slow_backend)
    x = torch.randn(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            compiled(x)
    found = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert len(found) == 1, [str(w.message) for w in caught]
    message = str(found[0].message)
    assert "slower compiled than eager" in message and "small kernels" in message
    assert found[0].filename == __file__  # attributed to the user's line


def test_the_checks_time_and_compare_a_graph_whose_input_is_expanded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # hf_esm on the H100: the performance check copied an expanded input (stride 0) with an
    # element-wise copy_, which torch refuses for a tensor whose elements share memory
    monkeypatch.delenv("EMBER_PERF_WARNINGS", raising=False)
    monkeypatch.setenv("EMBER_ACCURACY_CHECK", "1")

    def fn(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + bias

    compiled = ember_compile(fn, backend=slow_backend)
    x, bias = torch.randn(4, 8), torch.randn(8).expand(4, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [compiled(x, bias) for _ in range(6)]
    assert all(torch.equal(result, fn(x, bias)) for result in results)
    assert any(issubclass(w.category, PerformanceWarning) for w in caught)


def test_slower_message_needs_a_measurable_difference() -> None:
    graph = prims.trace(lambda x: x.sin(), torch.randn(3))
    assert slower_message(graph, "f", 1.1e-3, 1.0e-3, 0) is None  # under 1.25x
    assert slower_message(graph, "f", 30e-6, 10e-6, 0) is None  # under 20 µs
    assert "2 graph break(s)" in (slower_message(graph, "f", 2e-3, 1e-3, 2) or "")


def slow_cuda_graph_backend(
    graph: prims.Graph, example_inputs: Sequence[Any], mode: str | None = None
) -> Callable[..., Any]:
    return _Slow(graph)


def test_graphs_replayed_as_cuda_graphs_are_not_timed() -> None:
    """Extra replays would overwrite the outputs the user holds (static CUDA graph memory)."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    compiled = ember_compile(fn, backend=slow_cuda_graph_backend, mode="reduce-overhead")
    x = torch.randn(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            compiled(x)
    assert not [w for w in caught if issubclass(w.category, PerformanceWarning)]
