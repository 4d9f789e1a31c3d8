"""Lowering: what becomes lazy, what is realized, writes after reads, and fallbacks."""

from __future__ import annotations

import logging

import pytest
import torch

import ember.prims as prims
from ember.inductor.ir.program import ExternNode, LoopNode
from ember.inductor.lowering.graph_lowering import lower_graph
from ember.inductor.pipeline import DECOMPOSITIONS
from ember.prims.decompositions import decompose


def _program(fn, *inputs):  # type: ignore[no-untyped-def]
    return lower_graph(decompose(prims.trace(fn, *inputs), DECOMPOSITIONS))


def test_pointwise_chain_is_one_loop_node() -> None:
    program = _program(lambda x: ((x * 2).exp() + 1).relu(), torch.randn(4, 4))
    assert [type(n) for n in program.nodes] == [LoopNode]


def test_a_read_before_a_write_is_computed_before_it() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        before = x * 2  # lazy, reads x
        x.add_(1)
        return before + x

    program = _program(fn, torch.randn(3))
    stores = [n for n in program.nodes if isinstance(n, LoopNode)]
    # `before` is realized, then x is written, then the output reads both
    assert [n.storage == program.input_storages[0] for n in stores] == [False, True, False]


def test_ops_without_lowering_fall_back_with_a_perf_hint(caplog: pytest.LogCaptureFixture) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0) * 2

    with caplog.at_level(logging.INFO, logger="ember.inductor.perf_hints"):
        program = _program(fn, torch.randn(5))
    fallbacks = [n for n in program.nodes if isinstance(n, ExternNode) and n.is_fallback]
    assert [n.target for n in fallbacks] == ["prims::cumsum"]
    assert "test_graph_lowering.py" in caplog.text  # the user's line
