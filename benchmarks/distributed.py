"""Distributed training under eager, torch.compile and ember: DDP and FSDP2 (issue 23).

One process per GPU (NCCL) or two CPU processes (gloo, `--device cpu`), a GPT-2-style
decoder and a Llama-style decoder (RMSNorm, rotary attention, SwiGLU), bf16 on GPU. For
each model, wrapper (ddp, fsdp2) and mode (eager, torch.compile, ember) it trains --steps
steps and records, on rank 0:

- `step_ms`: median step time (forward, backward, optimizer) after --warmup steps;
- `peak_mib`: peak GPU memory allocated over the measured steps (GPU only);
- `overlap`: from the profiler, the share of communication kernel time (NCCL) that runs
  while a compute kernel runs (GPU only; streams overlap only there);
- `early_allreduces` (DDP): of the buckets all-reduced in one backward, how many were
  launched before the backward reached the model's input: 0 means no overlap is possible;
- `graphs`: Graphs ember's backend was handed (ember only).

    python -m benchmarks.distributed --device cuda [--models gpt2,llama] [--wrappers ddp,fsdp2]
        [--modes eager,torch.compile,ember] [--steps 20] [--out results.jsonl]
    python -m benchmarks.distributed --device cpu --tiny       # the CPU/gloo path, tiny sizes

Results are JSON lines (one per case) in --out, and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("prims", "capture", "autodiff", "inductor", "runtime")
for source in ("src", *(f"packages/{p}/src" for p in LAYERS)):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

# ---- models --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    vocab: int
    width: int
    heads: int
    depth: int
    context: int
    batch: int


SIZES = {
    "gpu": Size(vocab=50304, width=768, heads=12, depth=12, context=1024, batch=8),
    "tiny": Size(vocab=64, width=32, heads=4, depth=2, context=16, batch=2),
}


class GPT2Block(nn.Module):
    def __init__(self, size: Size) -> None:
        super().__init__()
        self.heads = size.heads
        self.ln1 = nn.LayerNorm(size.width)
        self.qkv = nn.Linear(size.width, 3 * size.width)
        self.proj = nn.Linear(size.width, size.width)
        self.ln2 = nn.LayerNorm(size.width)
        self.up = nn.Linear(size.width, 4 * size.width)
        self.down = nn.Linear(4 * size.width, size.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(out.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 (124M at the GPU size): learned positions, pre-norm blocks, tied head."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        self.tokens = nn.Embedding(size.vocab, size.width)
        self.positions = nn.Embedding(size.context, size.width)
        self.blocks = nn.ModuleList(GPT2Block(size) for _ in range(size.depth))
        self.ln_f = nn.LayerNorm(size.width)
        self.head = nn.Linear(size.width, size.vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, size: Size) -> None:
        super().__init__()
        self.heads = size.heads
        hidden = 256 * math.ceil(8 * size.width / 3 / 256)
        self.attn_norm = RMSNorm(size.width)
        self.q = nn.Linear(size.width, size.width, bias=False)
        self.k = nn.Linear(size.width, size.width, bias=False)
        self.v = nn.Linear(size.width, size.width, bias=False)
        self.o = nn.Linear(size.width, size.width, bias=False)
        self.mlp_norm = RMSNorm(size.width)
        self.gate = nn.Linear(size.width, hidden, bias=False)
        self.up = nn.Linear(size.width, hidden, bias=False)
        self.down = nn.Linear(hidden, size.width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        h = self.attn_norm(x)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (proj(h).view(shape).transpose(1, 2) for proj in (self.q, self.k, self.v))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(out.transpose(1, 2).reshape(batch, length, width))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    """A Llama-style decoder: RMSNorm, rotary position embedding, SwiGLU, untied head."""

    def __init__(self, size: Size) -> None:
        super().__init__()
        self.tokens = nn.Embedding(size.vocab, size.width)
        self.blocks = nn.ModuleList(LlamaBlock(size) for _ in range(size.depth))
        self.norm = RMSNorm(size.width)
        self.head = nn.Linear(size.width, size.vocab, bias=False)
        dim = size.width // size.heads
        inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(size.context).float(), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        cos, sin = self.cos[:length].to(self.tokens.weight.dtype), self.sin[:length]
        sin = sin.to(cos.dtype)
        x = self.tokens(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


MODELS: dict[str, Callable[[Size], nn.Module]] = {"gpt2": GPT2, "llama": Llama}

# ---- one case ------------------------------------------------------------------------------


@dataclass
class Case:
    model: str
    wrapper: str
    mode: str
    device: str
    world: int
    dtype: str
    step_ms: float | None = None
    peak_mib: float | None = None
    overlap: float | None = None
    early_allreduces: str | None = None
    graphs: int | None = None
    compile_s: float | None = None
    loss: float | None = None
    error: str | None = None


class _Counting:
    """ember's backend behind a counter of the Graphs it is handed."""

    def __init__(self, name: str) -> None:
        self.inner = _backend(name)
        self.graphs = 0
        self.__name__ = name

    def __call__(self, graph: Any, example_inputs: Sequence[Any]) -> Any:
        self.graphs += 1
        return self.inner(graph, example_inputs)


# ember's backends by module, for a source tree without installed entry points (the GPU box)
_BACKEND_MODULES = {
    "inductor": ("ember.inductor.backend", "inductor"),
    "aot_eager": ("ember.autodiff.aot", "aot_eager"),
    "eager": ("ember.capture.backends.eager", "eager"),
}


def _backend(name: str) -> Any:
    from ember.capture import BackendNotFound, lookup_backend

    try:
        return lookup_backend(name)
    except BackendNotFound:
        if name not in _BACKEND_MODULES:
            raise
        import importlib

        module, attribute = _BACKEND_MODULES[name]
        return getattr(importlib.import_module(module), attribute)


def _wrap(
    model: nn.Module, wrapper: str, device: torch.device, bf16: bool, cap_mb: float | None
) -> nn.Module:
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        model = model.to(torch.bfloat16) if bf16 else model
        return DDP(model, device_ids=ids, bucket_cap_mb=cap_mb)  # type: ignore[arg-type]
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None)
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def _compile(model: nn.Module, mode: str, backend: str) -> tuple[nn.Module, _Counting | None]:
    if mode == "eager":
        return model, None
    if mode == "torch.compile":
        return torch.compile(model), None  # type: ignore[return-value]
    import ember

    counting = _Counting(backend)
    return ember.compile(model, backend=counting), counting


def run_case(
    options: argparse.Namespace, rank: int, world: int, model_name: str, wrapper: str, mode: str
) -> Case:
    device = torch.device(f"cuda:{rank}" if options.device == "cuda" else "cpu")
    bf16 = options.device == "cuda" and not options.float32
    case = Case(model_name, wrapper, mode, options.device, world, "bf16" if bf16 else "float32")
    size = SIZES["tiny" if options.tiny else "gpu"]
    torch.manual_seed(0)
    model = MODELS[model_name](size).to(device)
    cap_mb = options.bucket_cap_mb if options.bucket_cap_mb else (0.01 if options.tiny else None)
    wrapped = _wrap(model, wrapper, device, bf16, cap_mb)
    compiled, counting = _compile(wrapped, mode, options.backend)
    # fused AdamW on GPU for DDP's plain tensors; FSDP2's DTensor shards take foreach
    fused = device.type == "cuda" and wrapper == "ddp"
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-4, fused=fused, foreach=not fused)
    generator = torch.Generator(device=device).manual_seed(rank)
    ids = torch.randint(
        0, size.vocab, (size.batch, size.context), device=device, generator=generator
    )

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        logits = compiled(ids[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        return loss

    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    step()
    synchronize()
    case.compile_s = round(time.perf_counter() - start, 2)
    for _ in range(options.warmup - 1):
        step()
    synchronize()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times: list[float] = []
    for _ in range(options.steps):
        start = time.perf_counter()
        loss = step()
        synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    case.step_ms = round(statistics.median(times), 3)
    case.loss = round(float(loss.detach()), 4)
    if device.type == "cuda":
        case.peak_mib = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
        trace = ""
        if options.trace and rank == 0:
            Path(options.trace).mkdir(parents=True, exist_ok=True)
            trace = str(Path(options.trace) / f"{model_name}-{wrapper}-{mode}.json")
        case.overlap = _profiled_overlap(step, trace)
    if wrapper == "ddp":
        case.early_allreduces = _early_allreduces(wrapped, compiled, ids, optimizer)
    if counting is not None:
        case.graphs = counting.graphs
    return case


def _profiled_overlap(step: Callable[[], Any], trace: str = "") -> float | None:
    """The share of NCCL kernel time that overlaps a compute kernel, over two steps; the
    Chrome trace of those steps goes to `trace` if given."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    if trace:
        prof.export_chrome_trace(trace)
    comm: list[tuple[float, float]] = []
    compute: list[tuple[float, float]] = []
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        span = (event.time_range.start, event.time_range.end)
        (comm if "nccl" in event.name.lower() else compute).append(span)
    return interval_overlap(comm, compute)


def interval_overlap(
    comm: list[tuple[float, float]], compute: list[tuple[float, float]]
) -> float | None:
    """The share of the total length of `comm` spans covered by the union of `compute`."""
    total = sum(end - start for start, end in comm)
    if total <= 0:
        return None
    merged: list[list[float]] = []
    for start, end in sorted(compute):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    covered = 0.0
    for start, end in comm:
        for low, high in merged:
            covered += max(0.0, min(end, high) - max(start, low))
    return round(covered / total, 3)


def _early_allreduces(
    ddp: nn.Module, compiled: nn.Module, ids: torch.Tensor, optimizer: torch.optim.Optimizer
) -> str:
    """ "k/n": of n bucket all-reduces in one backward, k launched before the backward
    reached the token embedding (the model's first operation)."""
    order: list[str] = []
    ddp.register_comm_hook(order, _recording_allreduce)  # type: ignore[operator]
    # the token embedding is read first: its gradient is the end of the backward (a hook on
    # the parameter, not on the module, so no capture changes its graphs)
    weight = ddp.module.tokens.weight  # type: ignore[union-attr]
    handle = weight.register_post_accumulate_grad_hook(lambda p: order.append("input"))
    optimizer.zero_grad(set_to_none=True)
    logits = compiled(ids[:, :-1])
    F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten()).backward()
    handle.remove()
    buckets = [entry for entry in order if entry != "input"]
    early = order.index("input") if "input" in order else len(buckets)
    return f"{early}/{len(buckets)}"


def _recording_allreduce(order, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations
    order.append(f"bucket{bucket.index()}")
    tensor = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])


# ---- processes -----------------------------------------------------------------------------


def worker(rank: int, world: int, port: int, options: argparse.Namespace, out: str) -> None:
    if options.device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, options.threads))
    backend = "nccl" if options.device == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    rows: list[dict[str, Any]] = []
    try:
        for model_name in options.models.split(","):
            for wrapper in options.wrappers.split(","):
                for mode in options.modes.split(","):
                    try:
                        case = run_case(options, rank, world, model_name, wrapper, mode)
                    except Exception:  # noqa: BLE001 - a failed case is a row, not a dead run
                        case = Case(model_name, wrapper, mode, options.device, world, "")
                        case.error = traceback.format_exc(limit=6)[-2000:]
                    dist.barrier()
                    rows.append(asdict(case))
                    if rank == 0:
                        print(_line(rows[-1]), flush=True)
                    if options.device == "cuda":
                        torch.cuda.empty_cache()
    finally:
        if rank == 0:
            Path(out).write_text("".join(json.dumps(row) + "\n" for row in rows))
        dist.destroy_process_group()


def _line(row: dict[str, Any]) -> str:
    if row["error"]:
        last = row["error"].strip().splitlines()[-1]
        return f"{row['model']:6} {row['wrapper']:6} {row['mode']:14} ERROR {last}"
    fields = ("step_ms", "peak_mib", "overlap", "early_allreduces", "graphs", "compile_s", "loss")
    text = "  ".join(f"{f}={row[f]}" for f in fields if row[f] is not None)
    return f"{row['model']:6} {row['wrapper']:6} {row['mode']:14} {text}"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--nproc", type=int, default=0, help="processes (default: GPUs, or 2)")
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--wrappers", default="ddp,fsdp2")
    parser.add_argument("--modes", default="eager,torch.compile,ember")
    parser.add_argument("--backend", default="inductor", help="ember backend")
    parser.add_argument(
        "--bucket-cap-mb", type=float, default=0.0, help="DDP's cap (default: DDP's; 0.01 tiny)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU/gloo check)")
    parser.add_argument("--float32", action="store_true", help="float32 on GPU (default bf16)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--out", default="", help="JSON lines file (default: print only)")
    parser.add_argument("--trace", default="", help="folder for rank 0's profiler traces (GPU)")
    options = parser.parse_args(argv)
    world = options.nproc or (torch.cuda.device_count() if options.device == "cuda" else 2)
    if world < 2:
        parser.error(f"needs at least 2 processes ({options.device} has {world})")
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "rows.jsonl")
        mp.spawn(worker, args=(world, port, options, out), nprocs=world)
        text = Path(out).read_text()
    if options.out:
        Path(options.out).write_text(text)
    return [json.loads(line) for line in text.splitlines()]


if __name__ == "__main__":
    main()
