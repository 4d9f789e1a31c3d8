"""Bytes saved for the backward per training step: eager, torch.compile and ember side by side.

Every tensor that autograd packs during one forward (`torch.autograd.graph.saved_tensors_hooks`
around the forward) is counted once per storage: the sum of the distinct storages' sizes is
what the step keeps alive for the backward. Storages of parameters, buffers and the inputs are
reported apart ("resident"): they live anyway; the rest ("activations") is what the partition
decides. ember's own count comes from its partition (`Partition.saved_bytes`, collected from
the `aot` calls the compile made).

    python -m benchmarks.saved_activations --models hf_gpt2,hf_llama --out OUT
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

DEFAULT_MODELS = "hf_resnet,hf_vit,hf_gpt2,hf_bert,hf_llama"
BACKENDS = ("eager", "torch.compile", "ember")


@dataclass
class SavedTensors:
    """What one forward packed for the backward, deduplicated by storage."""

    tensors: int = 0  # pack calls
    storages: dict[int, int] = field(default_factory=dict)  # storage address -> bytes
    resident: set[int] = field(default_factory=set)  # addresses of parameters/buffers/inputs

    @property
    def total_bytes(self) -> int:
        return sum(self.storages.values())

    @property
    def activation_bytes(self) -> int:
        return sum(size for key, size in self.storages.items() if key not in self.resident)


def _storage_key(tensor: torch.Tensor) -> tuple[int, int] | None:
    """(address, bytes) of the tensor's storage; None for tensors without real memory (meta,
    sparse, or a compiler's tracing tensors should a compile run under the hooks)."""
    if tensor.layout is not torch.strided or tensor.device.type == "meta":
        return None
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


@contextmanager
def counting_saved(resident: Sequence[torch.Tensor] = ()) -> Iterator[SavedTensors]:
    """Counts every tensor packed for the backward inside the block, once per storage."""
    saved = SavedTensors()
    for tensor in resident:
        key = _storage_key(tensor)
        if key is not None:
            saved.resident.add(key[0])

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.tensors += 1
        key = _storage_key(tensor)
        if key is not None and key[1] > 0:
            saved.storages[key[0]] = max(saved.storages.get(key[0], 0), key[1])
        return tensor

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        yield saved


def autocast(dtype: str | None) -> AbstractContextManager[Any]:
    """bf16/fp16 autocast on the CPU (as the GPU suite runs), or nothing for float32."""
    if dtype is None or dtype == "float32":
        return nullcontext()
    return torch.autocast("cpu", dtype=getattr(torch, dtype))


def measure_step(
    step: Callable[..., torch.Tensor],
    module: nn.Module,
    inputs: Sequence[torch.Tensor],
    dtype: str | None = None,
) -> tuple[SavedTensors, torch.Tensor]:
    """One forward under the hooks, then its backward: the saved tensors and the loss."""
    resident = [*module.parameters(), *module.buffers(), *inputs]
    with counting_saved(resident) as saved, autocast(dtype):
        loss = step(*inputs)
    loss.backward()
    return saved, loss


@dataclass
class Row:
    model: str
    backend: str
    dtype: str = "float32"  # autocast dtype of the forward
    total_bytes: int | None = None
    activation_bytes: int | None = None
    tensors: int | None = None
    partition_bytes: int | None = None  # ember: the sum of Partition.saved_bytes
    partition_values: int | None = None
    step_ms: float | None = None  # median wall time of a training step (forward + backward)
    error: str | None = None


class _PartitionLog(logging.Handler):
    """Collects ember-autodiff's "the forward saves N values (B bytes)" records."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.partitions: list[tuple[int, int]] = []  # (values, bytes) per partition

    def emit(self, record: logging.LogRecord) -> None:
        if "the forward saves" in str(record.msg) and isinstance(record.args, tuple):
            values, size = record.args[1], record.args[2]
            if isinstance(values, int) and isinstance(size, int):
                self.partitions.append((values, size))


@contextmanager
def ember_partitions() -> Iterator[list[tuple[int, int]]]:
    """(values, bytes) of every partition ember's `aot` makes inside the block, from its log."""
    from ember.prims.logs import configure_logging

    configure_logging()  # EMBER_LOGS applied now, so that the level set below stays
    logger = logging.getLogger("ember.autodiff")
    handler = _PartitionLog()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.partitions
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _compile(
    backend: str, module: nn.Module, ember_backend: str, torch_backend: str
) -> Callable[..., Any]:
    if backend == "eager":
        return module
    if backend == "torch.compile":
        return torch.compile(module, backend=torch_backend)
    from benchmarks.backends import ember_backend as named_backend

    return named_backend(ember_backend).compile(module)


def _reset(backend: str) -> None:
    if backend == "torch.compile":
        torch._dynamo.reset()
    elif backend == "ember":
        import ember.capture

        reset = getattr(ember.capture, "reset", None)
        if reset is not None:
            reset()
    gc.collect()


def measure(
    model: str,
    backend: str,
    size: str = "small",
    steps: int = 0,
    ember_backend: str = "inductor",
    dtype: str | None = None,
    torch_backend: str = "inductor",
) -> Row:
    """The saved bytes of one training step of `model` under `backend` (and its step time)."""
    from benchmarks.models import build_workload, spec

    row = Row(model, backend, dtype=dtype or "float32")
    workload = build_workload(spec(model), size, "training")
    module, inputs = workload.module, workload.inputs
    try:
        step = _compile(backend, module, ember_backend, torch_backend)
        # The first call compiles, outside the hooks (a compiler's tracing tensors would be
        # packed too); the second is measured. The partitions counted are the measured call's,
        # or the first call's when the second reused them (a model may recompile once: HF
        # models set `config.problem_type` on their first call).
        with ember_partitions() if backend == "ember" else nullcontext() as first:
            with autocast(dtype):
                loss = step(*inputs)
            loss.backward()
        module.zero_grad(set_to_none=True)
        with ember_partitions() if backend == "ember" else nullcontext() as second:
            saved, _ = measure_step(step, module, inputs, dtype)
        row.total_bytes = saved.total_bytes
        row.activation_bytes = saved.activation_bytes
        row.tensors = saved.tensors
        partitions = second or first
        if partitions is not None:
            row.partition_values = sum(values for values, _ in partitions)
            row.partition_bytes = sum(size for _, size in partitions)
        if steps:
            times = []
            for _ in range(steps):
                module.zero_grad(set_to_none=True)
                started = time.perf_counter()
                with autocast(dtype):
                    loss = step(*inputs)
                loss.backward()
                times.append((time.perf_counter() - started) * 1e3)
            row.step_ms = statistics.median(times)
    except Exception as error:  # a failing backend is reported, not fatal
        row.error = f"{type(error).__name__}: {str(error)[:300]}"
    finally:
        _reset(backend)
    return row


def table(rows: Sequence[Row]) -> str:
    """A markdown table: activation (and total) bytes per model and backend."""

    def kib(value: int | None) -> str:
        return "-" if value is None else f"{value / 1024:,.1f}"

    lines = [
        "| model | dtype | backend | activations KiB | total KiB | tensors packed | partition KiB "
        "| step ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        step = "-" if row.step_ms is None else f"{row.step_ms:.1f}"
        cells = [row.model, row.dtype, row.backend, kib(row.activation_bytes), kib(row.total_bytes)]
        cells += [str(row.tensors if row.tensors is not None else "-"), kib(row.partition_bytes)]
        cells += [step if row.error is None else f"error: {row.error}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (0: no timing)")
    parser.add_argument("--ember-backend", default="inductor")
    parser.add_argument(
        "--torch-backend",
        default="inductor",
        help="torch.compile's backend; aot_eager_decomp_partition makes the same partition "
        "(min-cut, inductor's decompositions) without compiling kernels",
    )
    parser.add_argument("--autocast", default=None, help="bfloat16: forward under CPU autocast")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.jsonl")
    args = parser.parse_args(argv)
    from benchmarks.backends import ensure_ember_importable

    ensure_ember_importable()
    rows: list[Row] = []
    for model in args.models.split(","):
        for backend in args.backends.split(","):
            row = measure(model, backend, args.size, args.steps, args.ember_backend, args.autocast)
            rows.append(row)
            print(json.dumps(asdict(row)), flush=True)
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                with (args.out / "results.jsonl").open("a") as stream:
                    stream.write(json.dumps(asdict(row)) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
