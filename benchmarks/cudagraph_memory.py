"""Where a training step's memory peaks, step by step: warm-up, recording, replays.

    python -m benchmarks.cudagraph_memory --model hf_llama [--size gpu] [--steps 5]

One process per compiler variant (eager, ember default, ember and torch.compile with
`mode="reduce-overhead"`), bf16 autocast, SGD, the suite's models. For each step it prints the
allocated and reserved peaks of that step alone (`reset_peak_memory_stats` before it) and what
stays allocated and reserved after it, in MB above the model and its inputs: the suite's
reduce-overhead table gives one peak over all steps, this says which step makes it (an eager
warm-up outside the graph pool, the recordings, or the replays). `--snapshot` also prints,
after the last step, what each memory pool holds (the caching allocator's and each graph
pool's reserved, allocated and largest free block) and the largest blocks still allocated with
the line that allocated them: which tensors a reduce-overhead tree keeps between steps, and
where a pool's memory sits unused. `--check-refcount` prints whether a tensor held by C++
alone (a `.grad`) counts in its Python reference count on this torch. Needs CUDA; not part of
CI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import torch

VARIANTS = ("eager", "ember", "ember reduce-overhead", "torch.compile reduce-overhead")


def _compiled(module: torch.nn.Module, variant: str) -> Any:
    if variant == "eager":
        return module
    if variant.startswith("torch.compile"):
        return torch.compile(module, mode="reduce-overhead")
    import ember
    from ember.inductor.backend import inductor

    mode = "reduce-overhead" if variant.endswith("reduce-overhead") else None
    return ember.compile(module, backend=inductor, mode=mode)


def measure(
    model: str, size: str, variant: str, steps: int, snapshot: bool = False, trace: str = ""
) -> list[dict[str, float]]:
    from benchmarks.models import huggingface

    builders = {spec.name: spec.build for spec in huggingface.SPECS}
    torch.manual_seed(0)
    workload = builders[model](size, "training")
    module = workload.module.cuda()
    inputs = tuple(t.cuda() for t in workload.inputs)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base_allocated = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    boundaries: list[int] = []
    if snapshot or trace:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    run = _compiled(module, variant)
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    rows = []
    mb = 2.0**20
    for _ in range(steps):
        torch.cuda.reset_peak_memory_stats()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(*inputs)
        loss.backward()
        opt.step()
        del loss
        torch.cuda.synchronize()
        if snapshot or trace:  # where this step's events end in the trace
            boundaries.append(len(torch.cuda.memory._snapshot()["device_traces"][0]))
        rows.append(
            {
                "peak_allocated": (torch.cuda.max_memory_allocated() - base_allocated) / mb,
                "peak_reserved": (torch.cuda.max_memory_reserved() - base_reserved) / mb,
                "allocated_after": (torch.cuda.memory_allocated() - base_allocated) / mb,
                "reserved_after": (torch.cuda.memory_reserved() - base_reserved) / mb,
            }
        )
    if trace:
        write_trace(trace, torch.cuda.memory._snapshot()["device_traces"][0], boundaries)
    if snapshot:
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        print(
            f"snapshot {variant}: {len(grads)} grads, "
            f"{sum(g.numel() * g.element_size() for g in grads) / mb:.0f} MB",
            file=sys.stderr,
        )
        state = torch.cuda.memory._snapshot()
        for line in pool_summary(state):
            print(f"snapshot {variant}: {line}", file=sys.stderr)
        for line in segment_growth(state["device_traces"][0], boundaries):
            print(f"snapshot {variant}: {line}", file=sys.stderr)
    return rows


def pool_summary(snapshot: dict[str, Any], top: int = 12) -> list[str]:
    """Per memory pool (0: the caching allocator's own): reserved, allocated, largest free
    block; then the `top` largest allocated blocks with the innermost frame of ours."""
    mb = 2.0**20
    pools: dict[Any, list[float]] = {}
    blocks: list[tuple[int, Any, str]] = []
    for segment in snapshot["segments"]:
        pool = tuple(segment.get("segment_pool_id", (0, 0)))
        totals = pools.setdefault(pool, [0.0, 0.0, 0.0, 0.0])
        totals[0] += segment["total_size"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                totals[1] += block["size"]
                blocks.append((block["size"], pool, _origin(block.get("frames", []))))
            else:
                totals[2] = max(totals[2], block["size"])
                totals[3] += block["size"]
    lines = [
        f"pool {pool}: reserved {t[0] / mb:.0f} MB, allocated {t[1] / mb:.0f}, free {t[3] / mb:.0f}"
        f" (largest {t[2] / mb:.0f})"
        for pool, t in sorted(pools.items())
    ]
    by_origin: dict[tuple[Any, str], list[int]] = {}
    for size, pool, origin in blocks:
        by_origin.setdefault((pool, origin), []).append(size)
    ranked = sorted(by_origin.items(), key=lambda item: -sum(item[1]))[:top]
    lines += [
        f"  {sum(sizes) / mb:.0f} MB in {len(sizes)} blocks, pool {pool}: {origin}"
        for (pool, origin), sizes in ranked
    ]
    return lines


def _origin(frames: list[dict[str, Any]]) -> str:
    """The innermost Python frame outside torch: the wrapper line or ember's runtime that
    allocated (C++ frames come first in a snapshot's stacks)."""
    for frame in frames:
        name = frame.get("filename", "")
        if (name.endswith(".py") and "/torch/" not in name) or name.startswith("<"):
            return f"{name.rsplit('/', 2)[-1]}:{frame.get('line')} ({frame.get('name')})"
    return "unknown"


def segment_growth(trace: list[dict[str, Any]], boundaries: list[int], top: int = 15) -> list[str]:
    """Each time the allocator reserved a new segment (no cached block fit), from the trace
    of allocator events: the step, the segment's size, what was reserved, allocated and free
    in the cache just before, and the line whose allocation asked for it. Free memory that
    could not serve the request is fragmentation."""
    mb = 2.0**20
    reserved = allocated = 0
    grown: list[tuple[int, int, float, float, str]] = []
    per_step: dict[int, list[int]] = {}
    for index, event in enumerate(trace):
        action, size = event["action"], event["size"]
        step = sum(1 for boundary in boundaries if index >= boundary)
        if action == "segment_alloc":
            origin = _origin(event.get("frames", []))
            grown.append((step, size, reserved / mb, (reserved - allocated) / mb, origin))
            per_step.setdefault(step, []).append(size)
            reserved += size
        elif action == "segment_free":
            reserved -= size
        elif action == "alloc":
            allocated += size
        elif action == "free_completed":
            allocated -= size
    lines = [
        f"step {step}: {len(sizes)} segments, {sum(sizes) / mb:.0f} MB"
        for step, sizes in sorted(per_step.items())
    ]
    lines += [
        f"  step {step}: +{size / mb:.0f} MB at reserved {before:.0f} with {free:.0f} free: "
        f"{origin}"
        for step, size, before, free, origin in sorted(grown, key=lambda g: -g[1])[:top]
    ]
    return lines


def write_trace(path: str, trace: list[dict[str, Any]], boundaries: list[int]) -> None:
    """The allocator's events as gzipped JSON lines, for replaying them offline through a
    model of the caching allocator: action, address, size, stream, step, the line of ours."""
    import gzip

    with gzip.open(path, "wt") as out:
        for index, event in enumerate(trace):
            step = sum(1 for boundary in boundaries if index >= boundary)
            row = [event["action"], event["addr"], event["size"], event.get("stream", 0), step,
                   _origin(event.get("frames", []))]  # fmt: skip
            out.write(json.dumps(row) + "\n")


def check_refcount() -> None:
    """Whether C++ holders of a TensorImpl (a `.grad`) show in its Python reference count: the
    tree's hand-out relies on it to see that nobody holds an output."""
    parameter = torch.nn.Parameter(torch.ones(4, device="cuda"))
    grad = torch.ones(4, device="cuda")
    before = sys.getrefcount(grad)
    parameter.grad = grad
    print(
        f"refcount {before} -> {sys.getrefcount(grad)} after .grad = it (torch {torch.__version__})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="hf_llama")
    parser.add_argument("--size", default="gpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--variant", help="measure one variant in this process (worker)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--snapshot", action="store_true", help="what the pools hold at the end")
    parser.add_argument("--check-refcount", action="store_true")
    parser.add_argument("--trace", default="", help="with --variant: write its allocator events")
    arguments = parser.parse_args()
    if arguments.check_refcount:
        check_refcount()
        return
    if arguments.variant:
        rows = measure(
            arguments.model,
            arguments.size,
            arguments.variant,
            arguments.steps,
            arguments.snapshot,
            arguments.trace,
        )
        print(json.dumps(rows))
        return
    print(f"{arguments.model} ({arguments.size}) training, MB above the model and inputs")
    print("variant | step | peak allocated | peak reserved | allocated after | reserved after")
    for variant in arguments.variants.split(","):
        command = [sys.executable, "-m", "benchmarks.cudagraph_memory", "--model",
                   arguments.model, "--size", arguments.size, "--steps", str(arguments.steps),
                   "--variant", variant]  # fmt: skip
        if arguments.snapshot:
            command.append("--snapshot")
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        for line in done.stderr.splitlines():
            if line.startswith("snapshot "):
                print(line.removeprefix("snapshot "))
        if done.returncode != 0:
            print(f"{variant} | failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        for step, row in enumerate(json.loads(done.stdout.strip().splitlines()[-1])):
            print(
                f"{variant} | {step} | {row['peak_allocated']:.0f} | {row['peak_reserved']:.0f}"
                f" | {row['allocated_after']:.0f} | {row['reserved_after']:.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
