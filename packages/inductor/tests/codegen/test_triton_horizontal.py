"""Horizontal launches (`horizontal_launches`, on by default): the pointwise kernels that read
only a graph's inputs (casts of weights and biases) run as parts of one Triton launch,
each part on programs of its own; values equal eager's under Triton's interpreter, inputs
mutated before a cast are cast after the mutation, groups close at their byte budget, and
the kernels build for sm_90 without a GPU."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import compile_graph, generate
from ember.prims.config import load
from ember.runtime import ArtifactCache

pytest.importorskip("triton")

BF16 = torch.bfloat16


def _config(horizontal: bool = True) -> InductorConfig:
    return dataclasses.replace(load(InductorConfig), horizontal_launches=horizontal, cache=False)


def _mlp(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor,
         b2: torch.Tensor) -> torch.Tensor:  # fmt: skip
    # autocast's pattern: every operand cast to bf16 right before its matmul
    h = torch.relu(x.to(BF16) @ w1.to(BF16) + b1.to(BF16))
    return h @ w2.to(BF16) + b2.to(BF16)


def _mlp_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    # w1 spans several 1024-point blocks with a ragged last one; the biases are tiny parts
    shapes = [(8, 50), (50, 70), (70,), (70, 24), (24,)]
    return tuple(torch.randn(*shape, generator=generator) for shape in shapes)


def _cast_after_update(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor) -> tuple[Any, ...]:
    y = x.to(BF16) @ w.to(BF16)
    c.add_(1.0)  # a copy-back into the input: a later cast of it must read the new value
    return y, c[:50].to(BF16), w.to(torch.float16)  # both read only inputs


def _update_inputs() -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*shape, generator=generator) for shape in [(4, 30), (30, 20), (77,)])


CASES: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mlp_casts": (_mlp, _mlp_inputs),
    "cast_after_update": (_cast_after_update, _update_inputs),
}


def _wrapper(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], horizontal: bool) -> str:
    graph = prims.trace(fn, *[t.clone() for t in inputs])
    artifact = generate(graph, TritonBackend(), _config(horizontal), torch.device("cuda"))
    wrapper: str = artifact["wrapper"]
    return wrapper


@pytest.mark.parametrize("name", sorted(CASES))
def test_horizontal_launches_equal_eager(name: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn, make_inputs = CASES[name]
    graph = prims.trace(fn, *make_inputs())
    given, expected_inputs = make_inputs(), make_inputs()
    compiled = compile_graph(
        graph, given, config=_config(), backend=TritonBackend(), cache=ArtifactCache(tmp_path)
    )
    outputs = compiled(*given)
    plain, plain_inputs = make_inputs(), make_inputs()
    alone = compile_graph(
        graph, plain, config=_config(False), backend=TritonBackend(), cache=ArtifactCache(tmp_path)
    )(*plain_inputs)
    outputs, alone, expected = (
        values if isinstance(values, tuple) else (values,)
        for values in (outputs, alone, fn(*expected_inputs))
    )
    assert len(outputs) == len(expected) == len(alone)
    for output, value, separate in zip(outputs, expected, alone):
        assert output.dtype == value.dtype
        # the same kernels' values, launched together: bit for bit those launched alone
        assert torch.equal(output, separate)
        # and eager's, within bf16 rounding: Triton's interpreter casts to bf16 by
        # truncation (half of a randn's values land one ulp below torch's), and the kernel
        # adds the bias in float32 where eager adds it in bf16
        error = (output.float() - value.float()).norm() / value.float().norm()
        assert error < 3e-2, error
    for got, want in zip(given, expected_inputs):  # the update, as eager made it
        torch.testing.assert_close(got, want)


def test_the_casts_of_a_layer_are_one_launch() -> None:
    inputs = _mlp_inputs()
    alone = _wrapper(_mlp, inputs, horizontal=False)
    together = _wrapper(_mlp, inputs, horizontal=True)
    # the casts of x, w1 and w2 (three sizes; the biases' casts join their additions):
    # three launches alone, one horizontal launch
    assert alone.count(".launch(") - together.count(".launch(") == 2
    (line,) = [line for line in together.splitlines() if "_horizontal_" in line]
    assert all(name in line for name in ("in0", "in1", "in3"))
    assert "_horizontal_" not in alone


def test_a_cast_of_an_updated_input_is_not_moved_above_the_update() -> None:
    lines = _wrapper(_cast_after_update, _update_inputs(), horizontal=True).splitlines()
    launches = [line for line in lines if ".launch(" in line]
    # x's and w's casts (w's two dtypes in one kernel) run as one launch; c's slice cast
    # reads only inputs too, but the copy-back into c (in2) comes first, so it stays after
    (together,) = [line for line in launches if "_horizontal_" in line]
    assert "in0" in together and "in1" in together and "in2" not in together
    readers = [i for i, line in enumerate(launches) if "in2" in line]
    assert len(readers) == 2 and launches.index(together) < readers[0]


def test_groups_close_at_their_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import ember.inductor.scheduler.horizontal as horizontal

    # bf16 casts: x 800 bytes, w1 7000, w2 3360; under 8000 bytes x and w1 fill a group
    monkeypatch.setattr(horizontal, "BUDGET_BYTES", 8000)
    lines = _wrapper(_mlp, _mlp_inputs(), horizontal=True).splitlines()
    (line,) = [line for line in lines if "_horizontal_" in line]
    assert "in0" in line and "in1" in line and "in3" not in line
    assert sum(".launch(" in line for line in lines) == 4


def test_horizontal_kernels_compile_to_ptx_without_a_gpu(build_for_sm90: Any) -> None:
    report = build_for_sm90(__file__, sorted(CASES), config="_config")
    for name, kernels in report.items():
        assert kernels, name
        for kernel in kernels:
            assert all(".target sm_90" in ptx for ptx in kernel["ptx"]), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(CASES))
def test_horizontal_launches_on_the_gpu_equal_separate_launches(name: str, tmp_path: Path) -> None:
    fn, make_inputs = CASES[name]
    on_gpu = lambda: tuple(t.cuda() for t in make_inputs())  # noqa: E731
    graph = prims.trace(fn, *on_gpu())
    results = []
    for horizontal in (False, True):
        inputs = on_gpu()
        compiled = compile_graph(
            graph, inputs, config=_config(horizontal), cache=ArtifactCache(tmp_path)
        )
        outputs = compiled(*inputs)
        results.append((outputs if isinstance(outputs, tuple) else (outputs,), inputs))
    (separate, separate_inputs), (together, together_inputs) = results
    assert all(torch.equal(a, b) for a, b in zip(separate, together))
    assert all(torch.equal(a, b) for a, b in zip(separate_inputs, together_inputs))
