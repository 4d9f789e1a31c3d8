"""`LoadedProgram`: an exported program (built here from a traced Graph, with no capture) run
by the interpreter or a backend callable, its arguments checked; `CubinKernel` refuses
signatures it cannot launch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.prims import (
    ExportedProgram,
    Graph,
    GraphInput,
    InputKind,
    Interpreter,
    InterpreterError,
    TreeSpec,
    trace,
)
from ember.runtime.cubin import CubinKernel, CubinVariant
from ember.runtime.errors import KernelSignatureError
from ember.runtime.exported import LoadedProgram, load_exported, resolve_backend


def _program() -> tuple[ExportedProgram, torch.Tensor]:
    """`x @ weight.T + bias` with weight and bias as parameters named like a module's."""
    weight, bias = torch.randn(3, 4), torch.randn(3)
    traced = trace(lambda x, w, b: torch.addmm(b, x, w.t()), torch.randn(2, 4), weight, bias)
    x_input, w_input, b_input = traced.inputs
    graph = dataclasses.replace(
        traced,
        inputs=[
            x_input,
            GraphInput(w_input.value, InputKind.PARAMETER, "fc.weight"),
            GraphInput(b_input.value, InputKind.PARAMETER, "fc.bias"),
        ],
        in_spec=TreeSpec("tuple", (TreeSpec("tuple", (TreeSpec("leaf"),)), TreeSpec("dict"))),
        input_leaves=[traced.input_leaves[0]],
    )
    return ExportedProgram(graph, {"fc.weight": weight, "fc.bias": bias}), weight


def test_interpreted_and_compiled_runs_match_eager(tmp_path: Path) -> None:
    program, weight = _program()
    program.save(tmp_path / "p")
    x = torch.randn(2, 4)
    expected = torch.addmm(program.state["fc.bias"], x, weight.t())
    interpreted = load_exported(tmp_path / "p")
    torch.testing.assert_close(interpreted(x), expected)
    seen: list[Graph] = []

    def backend(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        seen.append(graph)
        return Interpreter(graph)

    compiled = load_exported(tmp_path / "p", backend=backend)
    torch.testing.assert_close(compiled(x), expected)
    compiled(x)
    assert len(seen) == 1  # compiled once, on the first call
    assert all(not gi.is_state for gi in seen[0].inputs)  # the flat form capture hands over
    assert [name for name, _ in compiled.named_parameters()] == ["fc.bias", "fc.weight"]


def test_arguments_are_checked_against_the_exported_signature() -> None:
    program, _ = _program()
    loaded = LoadedProgram(program)
    with pytest.raises(InterpreterError, match="size 2 in dim 0"):
        loaded(torch.randn(5, 4))
    with pytest.raises(InterpreterError, match="shaped"):
        loaded(torch.randn(2, 4), torch.randn(2, 4))


def test_unknown_backend_names_say_what_is_installed() -> None:
    with pytest.raises(LookupError, match="no ember backend 'no-such-backend'"):
        resolve_backend("no-such-backend")


def test_cubin_kernels_refuse_parameters_they_cannot_pass() -> None:
    variant = CubinVariant(cubin=b"", function="k", num_warps=1, shared=0)
    with pytest.raises(KernelSignatureError, match="tensordesc"):
        CubinKernel("k", [("p", "*fp32"), ("d", "tensordesc<fp32[16]>")], 16, variant)
