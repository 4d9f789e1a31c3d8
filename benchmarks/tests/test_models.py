"""Suite models build and run a step in both modes at the small (CPU) size.

Every hand-written and speed-suite model, and a CPU subset of the broad zoo (one of each
family the GPU suite found bugs in, CI's budget allows no more): encoders with relative and
2-D positions, a decoder with GQA, rotary and sliding windows, an encoder-decoder, an
image model with squeeze-excite and one with shifted windows. `timm` models need timm, which
does not import beside CI's torch; they are skipped there. The whole zoo builds in
`python -m benchmarks.run --list`-time checks on the GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.models import SUITE, ModelSpec, build_workload, missing, spec

ZOO_SUBSET = ("hf_deberta_v2", "hf_layoutlm", "hf_mistral", "hf_bart", "hf_efficientnet", "hf_swin")
SPEED_SUITE = ("hf_resnet", "hf_vit", "hf_convnext", "hf_gpt2", "hf_bert", "hf_llama", "hf_t5")
CHECKED = [s for s in SUITE if s.suite == "handwritten" or s.name.startswith("timm_")] + [
    spec(name) for name in (*SPEED_SUITE, *ZOO_SUBSET)
]


@pytest.mark.parametrize("entry", CHECKED, ids=[s.name for s in CHECKED])
def test_small_model_runs(entry: ModelSpec) -> None:
    if reason := missing(entry):
        pytest.skip(reason)
    inference = build_workload(entry, "small", "inference")
    with torch.no_grad():
        output = inference.module(*inference.inputs)
    assert output.shape[0] == inference.inputs[0].shape[0]
    assert output.std() > 0  # not degenerate: a wrong compiler could not pass by accident
    training = build_workload(entry, "small", "training", dropout=entry.dropout)
    loss = training.module(*training.inputs)
    assert loss.dim() == 0
    loss.backward()


def test_dropout_builds_share_weights() -> None:
    entry = spec("hf_bert")
    plain = build_workload(entry, "small", "training")
    regularized = build_workload(entry, "small", "training", dropout=True)
    for a, b in zip(plain.module.parameters(), regularized.module.parameters(), strict=True):
        assert torch.equal(a, b)
    torch.manual_seed(0)
    first, second = (regularized.module(*regularized.inputs) for _ in range(2))
    assert not torch.equal(first, second)  # dropout is on
    assert torch.equal(plain.module(*plain.inputs), plain.module(*plain.inputs))


def test_builds_are_seeded() -> None:
    entry = SUITE[0]
    first, second = (build_workload(entry, "small", "inference") for _ in range(2))
    assert torch.equal(first.inputs[0], second.inputs[0])
    for a, b in zip(first.module.parameters(), second.module.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_suite_is_broad() -> None:
    assert len(SUITE) >= 60
    names = {s.name for s in SUITE}
    for required in ("hf_layoutlm", "hf_deberta_v2", "hf_opt", "hf_bart", "hf_albert"):
        assert required in names
    assert {"hf_efficientnet", "timm_swin_tiny"} <= names
