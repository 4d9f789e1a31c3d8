"""Capture fidelity on a CPU subset: ember breaks no more often than torch.compile (Dynamo).

A decoder (GPT-2) and an encoder-decoder (T5), each from a tiny config with
random weights, inference and a training step (forward, transformers' loss, backward): the
graphs and breaks of `ember.capture.explain` and `torch._dynamo.explain`, and whether
`fullgraph=True` captures the inference call. The whole sweep is
`python -m benchmarks.capture_fidelity`.
"""

from __future__ import annotations

import pytest

from benchmarks import capture_fidelity

pytest.importorskip("transformers")

SUBSET = ("gpt2", "t5")


@pytest.mark.parametrize("name", SUBSET)
def test_ember_breaks_no_more_than_dynamo(name: str) -> None:
    case = next(c for c in capture_fidelity.CASES if c.name == name)
    inference, training = capture_fidelity.measure(case, ["inference", "training"], False)
    for row in (inference, training):
        assert row.ember.error is None, row.ember.error
        assert row.dynamo.error is None, row.dynamo.error
        assert row.ember.breaks <= row.dynamo.breaks, (row.mode, row.ember.reasons)
        assert row.ember.graphs <= row.dynamo.graphs, (row.mode, row.ember.reasons)
    assert (inference.ember.graphs, inference.ember.breaks) == (1, 0), inference.ember.reasons


def test_fullgraph_captures_gpt2_like_torch_compile() -> None:
    case = next(c for c in capture_fidelity.CASES if c.name == "gpt2")
    (row,) = capture_fidelity.measure(case, ["inference"], True)
    assert row.dynamo.fullgraph == "ok", row.dynamo.fullgraph
    assert row.ember.fullgraph == "ok", row.ember.fullgraph
