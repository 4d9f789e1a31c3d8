"""Index expressions printed as Triton take the values sympy gives them: a Graph's Mod, floor
and ceiling over symbolic sizes, negative operands included, evaluated by a kernel under
Triton's interpreter (`TRITON_INTERPRET=1`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import sympy
import torch

from ember.inductor.codegen.triton.ops import PRELUDE
from ember.inductor.codegen.triton.printer import triton_index
from ember.prims.specs import symbol

pytest.importorskip("triton")

S0 = symbol("s0")  # a Graph's size symbol: integer, non-negative
EXPRESSIONS = (
    sympy.Mod(-1, S0),  # x[-1] over a dim of size s0 (hf_funnel's relative_pos)
    sympy.Mod(S0 - 7, S0 + 3),
    sympy.floor((S0 - 7) / 3),
    sympy.floor((S0 + 1) / 2),
    sympy.ceiling(S0 / 3),  # printed -(-s0 // 3): truncated in Triton, ceiling(5/3) read 1
    sympy.ceiling((S0 - 7) / 2),
)
SIZES = (1, 2, 5, 6, 9, 16)


def _kernel(tmp_path: Path, expressions: tuple[sympy.Expr, ...]) -> Any:
    stores = "\n".join(
        f"    tl.store(out + {i}, ({triton_index(e)}).to(tl.int64))"
        for i, e in enumerate(expressions)
    )
    source = f"{PRELUDE.strip()}\n\n\n@triton.jit\ndef evaluate(out, s0):\n{stores}\n"
    path = tmp_path / "index_kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("index_kernel", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.evaluate


def test_size_expressions_round_as_sympy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    evaluate = _kernel(tmp_path, EXPRESSIONS)
    for size in SIZES:
        out = torch.full((len(EXPRESSIONS),), -999, dtype=torch.int64)
        evaluate[(1,)](out, size)
        expected = [int(e.subs(S0, size)) for e in EXPRESSIONS]
        assert out.tolist() == expected, f"s0 = {size}"
