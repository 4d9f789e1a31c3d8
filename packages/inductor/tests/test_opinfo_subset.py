"""The OpInfo subset of ember-prims (packages/prims/tests/test_opinfo_subset.py), compiled by
the inductor pipeline: each op's first float32 samples run as one compiled graph (one C++
build per op) and must match eager. `EMBER_TEST_DEVICE=cuda` runs the same samples on the GPU
(Triton kernels), as the GPU machine does."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.prims as prims
from ember.inductor.pipeline import compile_graph
from ember.prims import tree_flatten, tree_unflatten
from ember.runtime import ArtifactCache

op_db = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations", reason="needs expecttest"
).op_db

_PRIMS_TEST = Path(__file__).parents[2] / "prims" / "tests" / "test_opinfo_subset.py"
_spec = importlib.util.spec_from_file_location("prims_opinfo_subset", _PRIMS_TEST)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
SUBSET: list[str] = _module.SUBSET

SAMPLES_PER_OP = 3
DEVICE = os.environ.get("EMBER_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactCache]:
    yield ArtifactCache(Path(tmp_path_factory.mktemp("opinfo-cache")))


def _opinfo(label: str) -> Any:
    for info in op_db:
        if info.name == label and not info.variant_test_name:
            return info
    name, _, variant = label.rpartition(".")
    for info in op_db:
        if info.name == name and info.variant_test_name == variant:
            return info
    pytest.skip(f"no OpInfo {label}")


def _traceable(info: Any, sample: Any) -> bool:
    """Samples whose non-input arguments hold tensors read their values (narrow's start)."""
    leaves, _ = tree_flatten((list(sample.args), dict(sample.kwargs)))
    return not any(isinstance(leaf, torch.Tensor) and leaf.dim() == 0 for leaf in leaves)


@pytest.mark.parametrize("label", SUBSET)
def test_opinfo_samples_match_eager(label: str, cache: ArtifactCache) -> None:
    info = _opinfo(label)
    samples = [s for s in info.sample_inputs(DEVICE, torch.float32) if _traceable(info, s)]
    samples = samples[:SAMPLES_PER_OP]
    structures = []
    tensors: list[torch.Tensor] = []
    for sample in samples:
        leaves, spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
        positions = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                positions.append(len(tensors))
                tensors.append(leaf)
            else:
                positions.append(None)
        structures.append((leaves, spec, positions))

    def run_all(*inputs: torch.Tensor) -> list[Any]:
        results = []
        for leaves, spec, positions in structures:
            bound = [leaf if p is None else inputs[p] for leaf, p in zip(leaves, positions)]
            first, args, kwargs = tree_unflatten(bound, spec)
            results.append(info.op(first, *args, **kwargs))
        return results

    expected = run_all(*[t.clone() for t in tensors])
    graph = prims.trace(run_all, *tensors)
    compiled = compile_graph(graph, tensors, cache=cache)
    results = compiled(*[t.clone() for t in tensors])
    for sample, ours, theirs in zip(samples, results, expected):
        if _random(label, sample):  # random draws differ: only shapes and dtypes compare
            ours_leaves, _ = tree_flatten(ours)
            theirs_leaves, _ = tree_flatten(theirs)
            assert [(t.shape, t.dtype) for t in ours_leaves] == [
                (t.shape, t.dtype) for t in theirs_leaves
            ]
            continue
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5, equal_nan=True)


def _random(label: str, sample: Any) -> bool:
    probability = sample.kwargs.get(
        "dropout_p", sample.kwargs.get("p", 0.5 if "dropout" in label else 0)
    )
    return ("dropout" in label and sample.kwargs.get("training", True) and probability > 0) or (
        sample.kwargs.get("dropout_p", 0) > 0
    )
