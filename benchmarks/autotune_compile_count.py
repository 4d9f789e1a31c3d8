"""What `mode="max-autotune"` compiles, per model, counted on the CPU (issue 18).

For each model and mode of the suite (`--size gpu`: the shapes the H200 runs, bf16 autocast)
it captures the model with `ember.compile`, generates every Graph's Triton module as
`mode="max-autotune"` would for a CUDA device (forward and backward for training, channels-last
strides handed from a forward to its backward), and loads the modules the way the first call
does (`TritonBackend.load`). The Graphs' outputs are zeros of their specs, so nothing heavy
runs here. Then it counts, as one process would see them:

- `launch_sites`: the kernel launches in the graphs (a layer's kernels once a layer);
- `kernels`: the distinct Triton kernels among them (equal layers' kernels are one; a GEMM
  choice counts its template and the vendor path's epilogue kernel);
- `templates`: distinct GEMM template kernels and the distinct M x N x K they compute;
- `configs`: the distinct compile jobs (kernel, launch configuration) for sm_90: what the
  compile workers build and what autotuning times, by kind (pointwise, reduction, template,
  epilogue);
- seconds: capture and code generation, and with `--build` the compile of every job for
  sm_90 into a fresh cache (`compile_kernels`, `--workers` processes; wall seconds, and the
  sum of the jobs' own seconds, timed one by one with `--workers 1`).

    python -m benchmarks.autotune_compile_count [--models hf_bert,...] [--modes inference]
        [--size gpu] [--build] [--workers N] [--out FILE.jsonl]

No GPU is used or needed (the script hides any: on a GPU machine it counts and builds the
same way, for sm_90). Timing the configurations needs the GPU: that is the first call of
`benchmarks.kernel_compare --compile-mode max-autotune`.
"""

from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # count and build for sm_90; never load on a device

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
MODELS = "hf_gpt2,hf_bert,hf_vit,hf_resnet,hf_llama"
SM90 = ("cuda", 90, 32)


@dataclasses.dataclass
class Generated:
    """The Triton modules of one model and mode, as `mode="max-autotune"` generates them."""

    modules: list[str] = dataclasses.field(default_factory=list)
    graphs: list[str] = dataclasses.field(default_factory=list)
    launch_sites: int = 0  # kernel launches in the graphs' wrappers
    seconds: float = 0.0


def generate_modules(model: str, mode: str, size: str) -> Generated:
    """Capture `model` (bf16 autocast) and generate each Graph's module for CUDA."""
    import ember.capture
    from benchmarks.models import build_workload, spec
    from ember.autodiff import aot
    from ember.inductor.backend import MODES
    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.config import InductorConfig
    from ember.inductor.passes.attention_rng import drop_unread_attention_rng
    from ember.inductor.passes.joint_decompositions import JOINT_DECOMPOSITIONS
    from ember.inductor.pipeline import generate
    from ember.prims import Graph
    from ember.prims.config import load

    config = dataclasses.replace(load(InductorConfig), **MODES["max-autotune"])
    backend = TritonBackend(max_autotune=config.max_autotune)
    generated = Generated()
    saved: dict[int, tuple[int, ...]] = {}

    def compile_graph(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        strides = None
        if "saved_inputs" in graph.meta:  # a backward: its forward's saved layouts
            graph = drop_unread_attention_rng(graph)
            strides = dict(saved)
            saved.clear()
        artifact = generate(graph, backend, config, torch.device("cuda"), strides or None)
        if "saved_outputs" in graph.meta:
            saved.clear()
            saved.update({int(k): tuple(v) for k, v in artifact["saved_strides"].items()})
        generated.modules.append(artifact["module"])
        generated.graphs.append(graph.name)
        generated.launch_sites += int(artifact["kernels"])
        return _zeros(graph)

    def counting_backend(graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        needs_grad = any(getattr(t, "requires_grad", False) for t in example_inputs)
        if torch.is_grad_enabled() and needs_grad:
            return aot(
                graph,
                example_inputs,
                fw_compiler=compile_graph,
                bw_compiler=compile_graph,
                decompositions=JOINT_DECOMPOSITIONS,
            )
        return compile_graph(graph, example_inputs)

    ember.capture.reset()
    workload = build_workload(spec(model), size, mode)
    run = ember.capture.compile(workload.module, backend=counting_backend)
    started = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if mode == "inference":
            with torch.no_grad():
                run(*workload.inputs)
        else:
            run(*workload.inputs).backward()
    generated.seconds = time.perf_counter() - started
    return generated


def _zeros(graph: Any) -> Callable[..., Any]:
    """A stand-in for the compiled Graph: zeros of its outputs' specs."""
    from ember.prims import Ref, TensorSpec, tree_unflatten

    values = graph.values()

    def run(*args: Any, **kwargs: Any) -> Any:
        leaves: list[Any] = []
        for leaf in graph.output_leaves:
            spec = values[leaf.name].spec if isinstance(leaf, Ref) else None
            if isinstance(spec, TensorSpec):
                size = [int(s) for s in spec.shape]
                stride = [int(s) for s in spec.strides]
                leaves.append(torch.zeros_like(torch.empty_strided(size, stride, dtype=spec.dtype)))
            else:
                leaves.append(leaf)
        return tree_unflatten(leaves, graph.out_spec)

    return run


def kernel_kind(kernel: Any) -> str:
    return (
        "reduction" if any("RBLOCK" in dict(c.constants) for c in kernel.configs) else "pointwise"
    )


def count(generated: Generated, cache_dir: Path, build: bool, workers: int) -> dict[str, Any]:
    """Load the modules as the first call does and count (and with `build`, compile) the
    compile jobs for sm_90."""
    from triton.backends.compiler import GPUTarget

    from ember.inductor.codegen.triton import TritonBackend
    from ember.runtime import ArtifactCache

    target = GPUTarget(*SM90)
    cache = ArtifactCache(cache_dir)
    backend = TritonBackend(max_autotune=True)
    kernels: dict[tuple[str, str], tuple[str, Any]] = {}  # (file, name) -> (kind, kernel)
    problems: set[tuple[object, ...]] = set()
    for module in generated.modules:
        for loaded in backend.load(module, cache).values():
            template = getattr(loaded, "template", None)
            parts = [("template", template)] if template is not None else []
            if template is not None:
                epilogue = loaded.vendor.epilogue
                parts += [("epilogue", epilogue)] if epilogue is not None else []
                problems.add(_problem(loaded))
            else:
                parts = [(kernel_kind(loaded), loaded)]
            for kind, kernel in parts:
                kernels.setdefault((str(kernel.module.__file__), kernel.name), (kind, kernel))
    jobs: dict[Any, str] = {}
    for kind, kernel in kernels.values():
        for config in kernel.planned_configs():
            jobs.setdefault(kernel.variant(config, aligned=True, target=target), kind)
    record: dict[str, Any] = {
        "graphs": len(generated.modules),
        "launch_sites": generated.launch_sites,
        "kernels": len(kernels),
        "kernels_by_kind": dict(Counter(kind for kind, _ in kernels.values())),
        "templates": sum(kind == "template" for kind, _ in kernels.values()),
        "template_problems": len(problems),
        "configs": len(jobs),
        "configs_by_kind": dict(Counter(jobs.values())),
        "generate_s": round(generated.seconds, 2),
    }
    if build:
        record.update(_build(list(kernels.values()), target, workers))
    return record


def _problem(choice: Any) -> tuple[object, ...]:
    """What a GEMM choice computes: its operands' sizes and strides, and the dtype."""
    vendor = choice.vendor
    return (vendor.a[1:], vendor.b[1:], str(vendor.dtype), vendor.conv is not None)


def _build(kernels: list[tuple[str, Any]], target: Any, workers: int) -> dict[str, Any]:
    """Compile every (kind, kernel)'s planned configurations for `target`, as the first
    call does (`compile_kernels`), or one by one in this process (`workers` 1)."""
    from ember.runtime import compile_kernels

    started = time.perf_counter()
    if workers > 1:
        compile_kernels([k for _, k in kernels], target, workers, progress_threshold=1e9)
        return {"build_s": round(time.perf_counter() - started, 1), "build_workers": workers}
    seconds: Counter[str] = Counter()
    for kind, kernel in kernels:
        for config in kernel.planned_configs():
            one = time.perf_counter()
            kernel.compile(config, aligned=True, target=target)
            seconds[kind] += time.perf_counter() - one
    return {
        "build_s": round(time.perf_counter() - started, 1),
        "build_workers": 1,
        "build_s_by_kind": {k: round(v, 1) for k, v in seconds.items()},
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--size", default="gpu", choices=("small", "medium", "gpu"))
    parser.add_argument("--build", action="store_true", help="compile every job for sm_90")
    parser.add_argument("--workers", type=int, default=1, help="compile processes (--build)")
    parser.add_argument("--out", type=Path, help="append one JSON line per case")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks.backends import ensure_ember_importable

    ensure_ember_importable()
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            generated = generate_modules(model, mode, args.size)
            with tempfile.TemporaryDirectory() as folder:
                record = {"model": model, "mode": mode, "size": args.size}
                record.update(count(generated, Path(folder), args.build, args.workers))
            print(json.dumps(record), flush=True)
            if args.out is not None:
                with args.out.open("a") as stream:
                    stream.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
