"""The minifier on planted code generation bugs: a wrong `tanh` in the Triton generator (run
under `TRITON_INTERPRET=1`, an accuracy mismatch) and a C++ `cos` that does not compile. Each
is minified to a few nodes and its repro reproduces in a fresh process where ember-capture and
the umbrella package are absent (inductor needs prims, autodiff and runtime)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

import ember.prims as prims
from ember.prims.minify import FailureKind, blocked_layers, probe, record_failure, run_isolated

PLANTED = Path(__file__).resolve().parent / "fixtures" / "planted"
sys.path.insert(0, str(PLANTED))
import planted_codegen as planted  # noqa: E402


def model(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w + 1) * 2
    t = torch.tanh(h) - torch.sigmoid(h)
    v = (t / (t.sum(-1, keepdim=True) + 3)).exp()
    return v.mean(), torch.cos(v).amax(0)


@pytest.mark.parametrize(
    ("backend", "kind", "op"),
    [
        pytest.param("triton_backend", FailureKind.ACCURACY, "aten::tanh.default", id="triton"),
        pytest.param("cpp_backend", FailureKind.COMPILE, "aten::cos.default", id="cpp"),
    ],
)
def test_planted_codegen_bug_minifies_to_a_repro_without_capture(
    tmp_path: Path, backend: str, kind: FailureKind, op: str
) -> None:
    if backend == "triton_backend":
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("runs the Triton generator's kernels in the interpreter")
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(4, 8, generator=generator), torch.randn(8, 6, generator=generator)]
    graph = prims.trace(model, *inputs)
    failure = probe(getattr(planted, backend), graph, inputs)
    assert failure is not None and failure.kind is kind
    directory = record_failure(
        tmp_path, getattr(planted, backend), graph, inputs, failure, minify=True
    )
    assert directory is not None
    manifest = json.loads((directory / "repro.json").read_text())
    assert manifest["needs"] == ["ember.prims", "ember.runtime", "ember.autodiff", "ember.inductor"]
    small = prims.load(directory / "graph.ember")
    assert manifest["original_nodes"] == len(graph.nodes) > 10
    assert len(small.nodes) <= 10 and op in small.op_counts()
    result = run_isolated(
        directory / "repro.py",
        blocked_layers(manifest["needs"]),
        env={"PYTHONPATH": str(PLANTED), "TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "reproduced the same failure" in result.stdout
