"""Checking a decomposition table against eager PyTorch on OpInfo-style sample inputs.

`check_op(op, table)` traces an op on its samples, decomposes the Graph, requires that only
prims remain, runs it and compares with eager. The caller passes the OpInfo entries (tests
and scripts import `op_db`; this module never does): an entry needs `name`, `variant_test_name`,
`op` and `sample_inputs(device, dtype)`. A sample whose trace needs tensor values (a tensor
passed where the op takes a number, read with `.item()`) cannot be traced by design: it is
skipped, and the op passes only if its remaining samples (at least one) all pass.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.prims.decompositions.decompose import decompose
from ember.prims.interpreter import run
from ember.prims.primitives import is_prim
from ember.prims.pytree import tree_flatten, tree_unflatten
from ember.prims.tracer import trace


class Outcome(str, enum.Enum):
    PASSED = "passed"  # every sample decomposed fully to prims and matched eager
    UNTRACEABLE = "untraceable"  # a sample did not trace (no meta kernel, unsupported output)
    NO_SAMPLES = "no_samples"  # no float32 sample inputs
    NOT_DECOMPOSED = "not_decomposed"  # ATen ops were left after decomposition
    FAILED = "failed"  # decomposition or execution raised
    MISMATCH = "mismatch"  # values differ from eager


@dataclass
class OpReport:
    """What checking one OpInfo entry found."""

    name: str
    outcome: Outcome
    samples: int = 0
    skipped: int = 0  # samples that read tensor values while tracing (data-dependent)
    detail: str = ""
    leftover: list[str] = field(default_factory=list)


# ATen ops that read tensor values: a trace that meets one depends on data, not on specs.
DATA_DEPENDENT_OPS = (
    "aten::_local_scalar_dense.default",
    "aten::nonzero.default",
    "aten::masked_select.default",
    "aten::unique_consecutive.default",
    "aten::_unique2.default",
    "aten::repeat_interleave.Tensor",
)


# ATen ops whose results are uninitialized memory: only their shapes and dtypes are defined.
UNINITIALIZED_OPS = frozenset(
    {
        "aten::empty.memory_format",
        "aten::empty_like.default",
        "aten::empty_strided.default",
        "aten::empty_permuted.default",
        "aten::new_empty.default",
        "aten::new_empty_strided.default",
    }
)


class _DataDependent(Exception):
    """A sample's trace read tensor values."""


def op_label(op: Any) -> str:
    variant = getattr(op, "variant_test_name", "")
    return f"{op.name}.{variant}" if variant else op.name


def check_op(
    op: Any,
    table: Mapping[str, Callable[..., Any]],
    *,
    max_samples: int = 4,
    dtype: torch.dtype = torch.float32,
) -> OpReport:
    """Check `op` on up to `max_samples` traceable sample inputs; see `Outcome`."""
    label = op_label(op)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as error:
        return OpReport(label, Outcome.NO_SAMPLES, detail=f"sample_inputs: {error}")
    if not samples:
        return OpReport(label, Outcome.NO_SAMPLES)
    checked = skipped = 0
    detail = ""
    for sample in samples:
        if checked == max_samples:
            break
        try:
            report = _check_sample(label, op, sample, table)
        except _DataDependent as error:
            skipped, detail = skipped + 1, str(error)
            continue
        if report is not None:
            report.samples, report.skipped = checked, skipped
            return report
        checked += 1
    if not checked:
        detail = f"every sample reads tensor values while tracing: {detail}"
        return OpReport(label, Outcome.UNTRACEABLE, skipped=skipped, detail=detail)
    return OpReport(label, Outcome.PASSED, samples=checked, skipped=skipped)


def _check_sample(
    label: str, op: Any, sample: Any, table: Mapping[str, Callable[..., Any]]
) -> OpReport | None:
    structure = (sample.input, tuple(sample.args), dict(sample.kwargs))
    leaves, spec = tree_flatten(structure)
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def call(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for position, tensor in zip(positions, tensors):
            filled[position] = tensor
        first, args, kwargs = tree_unflatten(filled, spec)
        return op.op(first, *args, **kwargs)

    tensors = [leaves[i] for i in positions]
    try:
        graph = trace(call, *tensors)
    except Exception as error:
        if any(f"cannot trace {target}:" in str(error) for target in DATA_DEPENDENT_OPS):
            raise _DataDependent(_short(error)) from error
        return OpReport(label, Outcome.UNTRACEABLE, detail=_short(error))
    try:
        decomposed = decompose(graph, table)
    except Exception as error:
        return OpReport(label, Outcome.FAILED, detail=_short(error))
    leftover = sorted({n.target for n in decomposed.nodes if not is_prim(n.target)})
    if leftover:
        return OpReport(
            label, Outcome.NOT_DECOMPOSED, detail=", ".join(leftover), leftover=leftover
        )
    # the samples' own tensors, not copies: some samples (as_strided) depend on their storage
    try:
        torch.manual_seed(0)
        expected = call(*tensors)
        random = any(n.target.startswith("prims::random_seed") for n in decomposed.nodes)
        uninitialized = any(n.target in UNINITIALIZED_OPS for n in graph.nodes)
    except Exception as error:
        return OpReport(label, Outcome.UNTRACEABLE, detail=f"eager: {_short(error)}")
    try:
        actual = run(decomposed, *tensors)
    except Exception as error:
        return OpReport(label, Outcome.FAILED, detail=_short(error))
    try:
        if random or uninitialized:  # only shapes and dtypes are comparable
            _same_layout(actual, expected)
        else:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_stride=False)
    except Exception as error:
        return OpReport(label, Outcome.MISMATCH, detail=_short(error))
    return None


def _same_layout(actual: Any, expected: Any) -> None:
    left, _ = tree_flatten(actual if isinstance(actual, (tuple, list)) else (actual,))
    right, _ = tree_flatten(expected if isinstance(expected, (tuple, list)) else (expected,))
    if len(left) != len(right):
        raise AssertionError("different number of outputs")
    for a, b in zip(left, right):
        if isinstance(b, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
            raise AssertionError(f"{a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}")


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text[:300]
