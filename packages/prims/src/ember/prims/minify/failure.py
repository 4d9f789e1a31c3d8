"""What a backend failure is, and `probe`: compile and run a Graph with a backend and say how
it failed, if it did.

A failure is a compile error (the backend raised while compiling), a runtime error (the
compiled callable raised) or an accuracy mismatch (its outputs differ from ember-prims'
interpreter running the same Graph on the same inputs). Two failures are the same failure
when their kind and exception type agree: that is what the minifier keeps while it shrinks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember.prims.graph import Graph
from ember.prims.interpreter import Interpreter
from ember.prims.pytree import tree_flatten

# A backend as ember-capture calls one: `(graph, example_inputs) -> callable`.
Backend = Callable[[Graph, Sequence[Any]], Callable[..., Any]]


class FailureKind(str, enum.Enum):
    """Where the backend failed."""

    COMPILE = "compile"  # backend(graph, inputs) raised
    RUNTIME = "runtime"  # the compiled callable raised
    ACCURACY = "accuracy"  # its outputs differ from the interpreter's


@dataclass(frozen=True)
class Failure:
    """One observed failure: its kind, the exception type (or "mismatch") and the message."""

    kind: FailureKind
    error: str
    message: str

    def same_as(self, other: Failure | None) -> bool:
        return other is not None and (self.kind, self.error) == (other.kind, other.error)

    def summary(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.kind.value} failure: {self.error}: {first[:300]}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "error": self.error, "message": self.message}

    @staticmethod
    def from_json(data: dict[str, str]) -> Failure:
        return Failure(FailureKind(data["kind"]), data["error"], data["message"])


def interpreter(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """ember-prims' interpreter as a backend: the reference failures are measured against
    (`repro.py --backend ember.prims.minify:interpreter` checks a repro's Graph itself)."""
    del example_inputs
    return Interpreter(graph)


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing a compiled result of `dtype` with the interpreter's: fused
    kernels reassociate sums and compute half types in float32, so they are not bit-exact."""
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2, 2e-2
    if dtype in (torch.float32, torch.complex64):
        return 1e-3, 1e-4
    if dtype.is_floating_point or dtype.is_complex:
        return 1e-7, 1e-9
    return 0.0, 0.0


def compare(expected: Any, actual: Any) -> str | None:
    """None when `actual` matches `expected` (pytrees of tensors and scalars), else where and
    how they differ, in one line."""
    want, want_spec = tree_flatten(expected)
    got, got_spec = tree_flatten(actual)
    if want_spec != got_spec:
        return f"output structure {got_spec} differs from the interpreter's {want_spec}"
    for position, (a, b) in enumerate(zip(want, got)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            problem = _compare_tensors(a, b)
        elif isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            problem = f"a {type(b).__name__} where the interpreter returns {type(a).__name__}"
        else:
            problem = None if a == b or (a != a and b != b) else f"{b!r} instead of {a!r}"
        if problem is not None:
            return f"output {position}: {problem}"
    return None


def _compare_tensors(expected: torch.Tensor, actual: torch.Tensor) -> str | None:
    if expected.shape != actual.shape:
        return f"shape {tuple(actual.shape)} instead of {tuple(expected.shape)}"
    if expected.dtype != actual.dtype:
        return f"dtype {actual.dtype} instead of {expected.dtype}"
    want = expected.detach().cpu()
    got = actual.detach().cpu()
    rtol, atol = tolerances(want.dtype)
    if want.dtype == torch.bool or not (want.dtype.is_floating_point or want.dtype.is_complex):
        bad = want != got
    else:
        close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        bad = ~close
    count = int(bad.sum())
    if count == 0:
        return None
    index = tuple(int(i) for i in torch.nonzero(bad)[0]) if want.dim() else ()
    return (
        f"{count} of {want.numel()} values differ (rtol {rtol}, atol {atol}); "
        f"at {list(index)}: {got[index].item()!r} instead of {want[index].item()!r}"
    )


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Fresh copies of the tensors (same strides, same requires_grad), so a run that mutates
    its inputs leaves the originals alone."""
    return [_fresh_copy(value) if isinstance(value, torch.Tensor) else value for value in inputs]


def _fresh_copy(value: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if _self_overlapping(value):
            # an expanded input (a stride of 0): element-wise `copy_` into a tensor whose
            # elements share memory is refused, so copy the memory it spans and view it alike
            span = 1 + sum((size - 1) * stride for size, stride in zip(value.shape, value.stride()))
            memory = torch.empty(span, dtype=value.dtype, device=value.device)
            memory.copy_(value.detach().as_strided((span,), (1,)))
            copy = memory.as_strided(value.shape, value.stride())
        else:
            copy = torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device=value.device
            )
            copy.copy_(value.detach())
    copy.requires_grad_(value.requires_grad)
    return copy


def _self_overlapping(value: torch.Tensor) -> bool:
    """Whether two elements of `value` can share one memory location (its dims, smallest
    stride first, each step past everything the smaller ones span)."""
    if value.numel() <= 1 or value.layout != torch.strided:
        return False
    spanned = 0
    for stride, size in sorted((s, n) for n, s in zip(value.shape, value.stride()) if n > 1):
        if stride <= spanned:
            return True
        spanned += (size - 1) * stride
    return False


def probe(
    backend: Backend, graph: Graph, inputs: Sequence[Any], *, check_accuracy: bool = True
) -> Failure | None:
    """Compile `graph` with `backend`, run it on (copies of) `inputs` and compare with the
    interpreter. None when the backend agrees, or when the interpreter itself cannot run the
    Graph (then the Graph, not the backend, is at fault: the minifier rejects it)."""
    try:
        with torch.no_grad():
            expected = Interpreter(graph)(*clone_inputs(inputs))
    except Exception:  # noqa: BLE001 - any error of the reference disqualifies the Graph
        return None
    try:
        compiled = backend(graph, clone_inputs(inputs))
    except Exception as error:  # noqa: BLE001 - whatever the backend raises is the failure
        return Failure(FailureKind.COMPILE, type(error).__name__, str(error))
    try:
        actual = compiled(*clone_inputs(inputs))
    except Exception as error:  # noqa: BLE001
        return Failure(FailureKind.RUNTIME, type(error).__name__, str(error))
    if not check_accuracy:
        return None
    mismatch = compare(expected, actual)
    if mismatch is None:
        return None
    return Failure(FailureKind.ACCURACY, "mismatch", mismatch)
