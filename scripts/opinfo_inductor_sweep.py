"""OpInfo sweep through `ember.compile(backend="inductor")` on the CPU, forward and gradients.

Each float32 OpInfo op runs its first N sample inputs in one compiled function (one capture,
one C++ build per op) and must match eager; with `--grads`, every op that supports float32
autograd also runs backward (sum of outputs times fixed cotangents) and its input gradients
must match eager's. Ops that draw from torch's random generator (random
ops) or that return uninitialized memory (`empty`) compare shapes and dtypes only; ops that
eager torch cannot run on the CPU (jiterator) are untestable. Every op runs in a worker
process, so a crash or hang costs one op, not the sweep. `--backend aot_eager` separates
autodiff and prims causes from inductor's.

Run: .nox/tests/bin/python scripts/opinfo_inductor_sweep.py [--grads] [--ops a,b] [--out F]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SAMPLES = 3
RTOL = ATOL = 1e-4
OP_TIMEOUT_S = 600.0
UNINITIALIZED = (
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
)  # fmt: skip


def _ops(grads: bool) -> list[Any]:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]
    if grads:
        ops = [
            op
            for op in ops
            if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu")
        ]
    return ops


def _label(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _leaves(value: Any) -> list[Any]:
    from ember.prims import tree_flatten

    return tree_flatten(value)[0]


def _samples(op: Any, grads: bool) -> list[Any]:
    import torch

    samples = []
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=grads):
        samples.append(sample)
        if len(samples) == SAMPLES:
            break
    return samples


def _clone(value: Any, grads: bool) -> Any:
    """Fresh copies of the sample's tensors (a sample may be mutated by in-place ops); leaves
    that require grad stay leaves."""
    import torch

    from ember.prims import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(value)
    copies = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf._base is not None:  # a view: the op may read its storage (as_strided)
                base = leaf._base.detach().clone().requires_grad_(grads and leaf.requires_grad)
                copy = base.as_strided(leaf.size(), leaf.stride(), leaf.storage_offset())
            else:
                copy = leaf.detach().clone().requires_grad_(grads and leaf.requires_grad)
            leaf = copy
        copies.append(leaf)
    return tree_unflatten(copies, spec)


def _run(op: Any, samples: list[Any]) -> Callable[..., list[Any]]:
    def run_samples(structures: list[Any]) -> list[Any]:
        return [op.op(first, *args, **kwargs) for first, args, kwargs in structures]

    return run_samples


def _structures(samples: list[Any], grads: bool) -> list[Any]:
    return [_clone((s.input, list(s.args), dict(s.kwargs)), grads) for s in samples]


def _gradients(structures: list[Any], result: Any) -> list[Any]:
    """Gradients of sum(output * cotangent) for the inputs that require grad; every floating
    output gets its cotangent, so outputs that do not require grad (a result that ember knows
    does not depend on the inputs) leave the others' cotangents unchanged."""
    inputs = [t for t in _leaves(structures) if isinstance(t, torch.Tensor) and t.requires_grad]
    outputs = [t for t in _leaves(result) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    generator = torch.Generator().manual_seed(1)
    cotangents = [torch.randn(o.shape, generator=generator, dtype=o.dtype) for o in outputs]
    terms = [(o * c).sum() for o, c in zip(outputs, cotangents) if o.requires_grad]
    if not inputs or not terms:
        return []
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    grads = torch.autograd.grad(total, inputs, allow_unused=True)
    return [g if g is not None else torch.zeros_like(t) for g, t in zip(grads, inputs)]


def _layout(value: Any) -> list[tuple[Any, ...]]:
    import torch

    return [(tuple(t.shape), t.dtype) for t in _leaves(value) if isinstance(t, torch.Tensor)]


class _SeededOps(TorchDispatchMode):
    """Notes whether any ATen op run inside draws random numbers."""

    found = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.found = self.found or torch.Tag.nondeterministic_seeded in func.tags
        return func(*args, **(kwargs or {}))


def check(
    op: Any, grads: bool, backend: str = "inductor", dynamic: bool | None = None
) -> tuple[str, str]:
    """One op: ("passed" | "mismatch" | "error" | "untestable", detail). `dynamic=True`
    compiles with every dim symbolic (issue 19: as many ops must pass as static)."""
    import torch

    from ember.capture import compile as ember_compile

    samples = _samples(op, grads)
    if not samples:
        return "untestable", "no float32 samples"
    run_samples = _run(op, samples)

    try:
        torch.manual_seed(0)
        structures = _structures(samples, grads)
        with _SeededOps() as seeded:
            expected = run_samples(structures)
        expected_grads = _gradients(structures, expected) if grads else []
    except Exception as error:
        return "untestable", f"eager: {_short(error)}"
    # Random ops (ATen's nondeterministic_seeded tag) draw from torch's generator: ember's own
    # random streams give other values, so only shapes and dtypes compare, as for `empty`.
    random = op.name.startswith(UNINITIALIZED) or seeded.found
    compiled = ember_compile(run_samples, backend=backend, dynamic=dynamic)
    try:
        torch.manual_seed(0)
        structures = _structures(samples, grads)
        actual = compiled(structures)
        actual_grads = _gradients(structures, actual) if grads else []
    except Exception as error:
        return "error", _short(error)
    try:
        if random:
            assert _layout(actual) == _layout(expected), "layouts differ"
            assert _layout(actual_grads) == _layout(expected_grads), "gradient layouts differ"
        else:
            torch.testing.assert_close(actual, expected, equal_nan=True, rtol=RTOL, atol=ATOL)
            torch.testing.assert_close(
                actual_grads, expected_grads, equal_nan=True, rtol=RTOL, atol=ATOL
            )
    except Exception as error:
        return "mismatch", _short(error)
    return "passed", ""


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ").replace("|", "\\|")
    if len(text) < 40:  # a bare assertion: say where
        frame = traceback.extract_tb(error.__traceback__)[-1]
        text += f" ({Path(frame.filename).name}:{frame.lineno})"
    return text[:300]


def worker(labels: list[str], grads: bool, backend: str, dynamic: bool | None = None) -> None:
    """Check `labels` in order, one JSON line per op (a "start" line before each)."""
    warnings.filterwarnings("ignore")
    by_label = {_label(op): op for op in _ops(grads)}
    for label in labels:
        print(json.dumps({"start": label}), flush=True)
        started = time.perf_counter()
        if label not in by_label:
            outcome, detail = "untestable", "no such OpInfo entry"
        else:
            outcome, detail = check(by_label[label], grads, backend, dynamic)
        seconds = time.perf_counter() - started
        record = {"op": label, "outcome": outcome, "detail": detail, "seconds": seconds}
        print(json.dumps(record), flush=True)


def _supervise(
    labels: list[str], grads: bool, backend: str, dynamic: bool | None
) -> Iterator[dict[str, Any]]:
    """Run the workers: one that crashes or hangs costs the op it was on, then a new worker
    continues after it."""
    remaining = list(labels)
    while remaining:
        command = [sys.executable, __file__, "--worker", "--ops", ",".join(remaining)]
        command += ["--backend", backend] + (["--grads"] if grads else [])
        command += ["--dynamic"] if dynamic else []
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        current = None
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                current = record["start"]
                continue
            remaining.remove(record["op"])
            current = None
            yield record
        process.wait()
        if current is not None:
            remaining.remove(current)
            yield {"op": current, "outcome": "crash", "detail": f"exit {process.returncode}"}


def render(
    records: list[dict[str, Any]], grads: bool, backend: str, seconds: float, dynamic: bool = False
) -> str:
    counts = collections.Counter(r["outcome"] for r in records)
    testable = len(records) - counts["untestable"]
    kind = ("forward and gradients" if grads else "forward") + (", dynamic=True" if dynamic else "")
    lines = [
        f"# OpInfo through ember.compile(backend={backend!r}) on the CPU: {kind}",
        "",
        "Generated by `scripts/opinfo_inductor_sweep.py`"
        + (" --grads" if grads else "")
        + (" --dynamic" if dynamic else "")
        + f"; first {SAMPLES} float32 samples per op in one compiled function,",
        f"compared with eager at rtol={RTOL}, atol={ATOL}.",
        "",
        f"- ops: {len(records)}; testable: {testable}; **passed {counts['passed']}/{testable}**",
        f"- sweep time: {seconds:.0f} s",
        "",
        "| outcome | ops |",
        "| --- | --- |",
    ]
    lines += [f"| {outcome} | {count} |" for outcome, count in sorted(counts.items())]
    lines += ["", "| op | outcome | detail |", "| --- | --- | --- |"]
    for record in sorted(records, key=lambda r: (r["outcome"], r["op"])):
        if record["outcome"] != "passed":
            lines.append(f"| `{record['op']}` | {record['outcome']} | {record['detail']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grads", action="store_true", help="check gradients too")
    parser.add_argument("--ops", default="", help="comma-separated op labels (default: all)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--jsonl", type=Path, help="append one JSON record per op here")
    parser.add_argument("--backend", default="inductor", help="aot_eager separates causes")
    parser.add_argument("--dynamic", action="store_true", help="compile with dynamic=True")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.ops.split(","), options.grads, options.backend, options.dynamic or None)
        return
    labels = options.ops.split(",") if options.ops else [_label(op) for op in _ops(options.grads)]
    started = time.perf_counter()
    records = []
    dynamic = options.dynamic or None
    for record in _supervise(labels, options.grads, options.backend, dynamic):
        records.append(record)
        if record["outcome"] != "passed":
            print(f"{record['op']}: {record['outcome']}: {record['detail']}", flush=True)
        if options.jsonl is not None:
            with options.jsonl.open("a") as stream:
                stream.write(json.dumps(record) + "\n")
    seconds = time.perf_counter() - started
    text = render(records, options.grads, options.backend, seconds, options.dynamic)
    if options.out is not None:
        options.out.write_text(text)
    print(text.split("| op |")[0])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
