"""Where a training step's memory peaks, step by step: warm-up, recording, replays.

    python -m benchmarks.cudagraph_memory --model hf_llama [--size gpu] [--steps 5]

One process per compiler variant (eager, ember default, ember and torch.compile with
`mode="reduce-overhead"`), bf16 autocast, SGD, the suite's models. For each step it prints the
allocated and reserved peaks of that step alone (`reset_peak_memory_stats` before it) and what
stays allocated and reserved after it, in MB above the model and its inputs: the suite's
reduce-overhead table gives one peak over all steps, this says which step makes it (an eager
warm-up outside the graph pool, the recordings, or the replays). Needs CUDA; not part of CI.
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


def measure(model: str, size: str, variant: str, steps: int) -> list[dict[str, float]]:
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
        rows.append(
            {
                "peak_allocated": (torch.cuda.max_memory_allocated() - base_allocated) / mb,
                "peak_reserved": (torch.cuda.max_memory_reserved() - base_reserved) / mb,
                "allocated_after": (torch.cuda.memory_allocated() - base_allocated) / mb,
                "reserved_after": (torch.cuda.memory_reserved() - base_reserved) / mb,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="hf_llama")
    parser.add_argument("--size", default="gpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--variant", help="measure one variant in this process (worker)")
    arguments = parser.parse_args()
    if arguments.variant:
        rows = measure(arguments.model, arguments.size, arguments.variant, arguments.steps)
        print(json.dumps(rows))
        return
    print(f"{arguments.model} ({arguments.size}) training, MB above the model and inputs")
    print("variant | step | peak allocated | peak reserved | allocated after | reserved after")
    for variant in VARIANTS:
        command = [sys.executable, "-m", "benchmarks.cudagraph_memory", "--model",
                   arguments.model, "--size", arguments.size, "--steps", str(arguments.steps),
                   "--variant", variant]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
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
