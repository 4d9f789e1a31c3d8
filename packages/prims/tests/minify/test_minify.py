"""The minifier and repro directories on planted decomposition bugs: an accuracy mismatch
(a wrong sigmoid), a compile error (a decomposition that raises) and a runtime error. Each is
minified to a few nodes and reproduces in a fresh process where every ember layer but
ember-prims is absent."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.prims.minify import (
    FailureKind,
    blocked_layers,
    clone_inputs,
    compare,
    load_repro,
    minify,
    probe,
    record_failure,
    run_isolated,
    run_repro,
    write_repro,
)

PLANTED = Path(__file__).resolve().parent.parent / "fixtures" / "planted"
sys.path.insert(0, str(PLANTED))
import planted_decomposition as planted  # noqa: E402


def model(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w + 1) * 2
    s = torch.sigmoid(h)
    t = torch.tanh(h) - s
    v = (t / (t.sum(-1, keepdim=True) + 3)).exp()
    return v.mean(), torch.cos(v).amax(0)


def _inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4, 8, generator=generator), torch.randn(8, 6, generator=generator)]


@pytest.mark.parametrize(
    ("backend", "kind", "op"),
    [
        ("backend", FailureKind.ACCURACY, "aten::sigmoid.default"),
        ("raising_backend", FailureKind.COMPILE, "aten::tanh.default"),
        ("runtime_backend", FailureKind.RUNTIME, "aten::cos.default"),
    ],
)
def test_planted_decomposition_bug_minifies_to_a_repro_needing_only_prims(
    tmp_path: Path, backend: str, kind: FailureKind, op: str
) -> None:
    inputs = _inputs()
    graph = prims.trace(model, *inputs)
    failure = probe(getattr(planted, backend), graph, inputs)
    assert failure is not None and failure.kind is kind
    directory = record_failure(
        tmp_path, getattr(planted, backend), graph, inputs, failure, minify=True
    )
    assert directory is not None
    manifest = json.loads((directory / "repro.json").read_text())
    assert manifest["needs"] == ["ember.prims"]
    assert manifest["original_nodes"] == len(graph.nodes) > 10
    small = prims.load(directory / "graph.ember")
    assert len(small.nodes) <= 10 and op in small.op_counts()
    result = run_isolated(
        directory / "repro.py",
        blocked_layers(manifest["needs"]),
        env={"PYTHONPATH": str(PLANTED)},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "reproduced the same failure" in result.stdout
    if kind is FailureKind.ACCURACY:  # the unminified Graph reproduces too (in-process)
        assert run_repro(directory / "full") == 1


def test_repro_of_a_correct_backend_says_not_reproduced(tmp_path: Path) -> None:
    inputs = _inputs()
    graph = prims.trace(model, *inputs)
    failure = probe(planted.backend, graph, inputs)
    assert failure is not None
    directory = write_repro(tmp_path / "case", planted.backend, graph, inputs, failure)
    assert run_repro(directory) == 1
    assert run_repro(directory, ["--backend", "ember.prims.minify:interpreter"]) == 0


def test_a_blocked_layer_cannot_be_imported(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import ember.capture\n")
    result = run_isolated(script, ["ember.capture"])
    assert result.returncode != 0 and "not installed here" in result.stderr


def test_minify_refuses_a_graph_the_backend_handles() -> None:
    inputs = _inputs()
    graph = prims.trace(model, *inputs)
    with pytest.raises(ValueError, match="nothing to minify"):
        minify(lambda g, _: prims.Interpreter(g), graph, inputs)


def test_compare_names_the_first_difference() -> None:
    expected: Any = (torch.ones(3), 2)
    assert compare(expected, (torch.ones(3), 2)) is None
    assert "output 0: 1 of 3 values differ" in (
        compare(expected, (torch.tensor([1.0, 2, 1]), 2)) or ""
    )
    assert "shape" in (compare(expected, (torch.ones(4), 2)) or "")
    assert "3 instead of 2" in (compare(expected, (torch.ones(3), 3)) or "")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_repro_loads_its_inputs_on_the_gpu_and_reproduces(tmp_path: Path) -> None:
    """Graph constants load on the CPU; a CUDA repro's inputs go back to the GPU, so its
    failure reproduces (it met a device mismatch instead: the H100 run of 2026-11-25)."""
    inputs = [tensor.cuda() for tensor in _inputs()]
    graph = prims.trace(model, *inputs)
    failure = probe(planted.backend, graph, inputs)
    assert failure is not None and failure.kind is FailureKind.ACCURACY
    directory = record_failure(tmp_path, planted.backend, graph, inputs, failure, minify=True)
    assert directory is not None
    _, loaded, _ = load_repro(directory)
    assert all(tensor.is_cuda for tensor in loaded)
    assert run_repro(directory) == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(6).expand(3, 6),  # a stride of 0
        lambda: torch.randn(10).as_strided((4, 4), (2, 1)),  # rows overlap
        lambda: torch.randn(5, 7)[:, 1:6].t(),  # no overlap: gaps, transposed
    ],
)
def test_clone_inputs_copies_any_layout_into_fresh_memory(make: Callable[[], Any]) -> None:
    value = make()
    (copy,) = clone_inputs([value])
    assert torch.equal(copy, value) and copy.stride() == value.stride()
    assert copy.untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
