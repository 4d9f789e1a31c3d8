"""`cross_boundary`: a Graph handed to the next layer is the same Graph, or with
EMBER_SERIALIZE_BOUNDARIES on, an equal copy rebuilt from bytes."""

from __future__ import annotations

import logging

import pytest
import torch

from ember.prims import cross_boundary, run, trace


def _graph():
    return trace(lambda x: (x * 2).sin(), torch.randn(3))


def test_off_by_default_hands_over_the_same_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_SERIALIZE_BOUNDARIES", raising=False)
    graph = _graph()
    assert cross_boundary(graph, "test") is graph


def test_on_hands_over_an_equal_copy_that_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EMBER_SERIALIZE_BOUNDARIES", "1")
    graph = _graph()
    with caplog.at_level(logging.DEBUG, logger="ember.prims"):
        copy = cross_boundary(graph, "test -> next")
    assert any("boundary test -> next" in record.getMessage() for record in caplog.records)
    assert copy is not graph and copy == graph
    x = torch.randn(3)
    torch.testing.assert_close(run(copy, x), (x * 2).sin())
