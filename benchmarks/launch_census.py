"""What a default-mode step launches, without a GPU: the Triton wrappers' census per model.

    python -m benchmarks.launch_census [--models hf_gpt2,hf_bert] [--modes inference,training]
                                       [--size gpu] [--out FILE.md]

Issue 16's default mode is host-bound where a step launches many small kernels: each Triton
launch, extern call and allocation costs the host microseconds whether its kernel is big or
tiny. This census counts them from the code ember generates for the GPU, on any machine:
each model is captured on the CPU with bf16 autocast, and ember-inductor compiles its
Graphs (inference, or a training forward and its backward) with the Triton code generator
as it would for CUDA; nothing is run (the compiled graphs are recorded, and the first call
stops there). Per Graph: Triton launches, the launches of kernels that read only the
Graph's inputs (parameters, and casts of them: kernels that could all run at the start, in
one horizontal launch), extern calls by op, fresh allocations (`empty_strided`) and views
(`as_strided`). Autocast on the CPU casts the same matmul and convolution operands as on
CUDA; attention lowers to the CPU's flash kernel instead of cuDNN's (one extern either
way). Not part of CI (GPU sizes take a minute a model).
"""

from __future__ import annotations

import argparse
import collections
import copy
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

LAUNCH = re.compile(r"kernels\['(?P<name>[^']+)'\]\.launch\((?P<args>[^)]*)\)")
EXTERN = re.compile(r"ops\['(?:aten::)?(?P<op>[^'.]+)")
KERNEL = re.compile(r"^def (?P<name>\w+)\((?P<params>[^)]*)\):", re.M)
LOADED = re.compile(r"tl\.load\((?P<param>\w+)")


class _Stop(Exception):
    """Raised by the first call of a compiled graph: the census needs the code, not a run."""


@dataclass
class GraphCensus:
    """The counts of one compiled Graph's wrapper."""

    name: str
    launches: int = 0
    input_only: int = 0  # launches of kernels whose every load reads a Graph input
    externs: collections.Counter[str] = field(default_factory=collections.Counter)
    allocations: int = 0
    views: int = 0


def _loaded_params(module: str) -> dict[str, tuple[list[str], set[str]]]:
    """Each kernel of a Triton module: its parameters in order, and those it loads from."""
    kernels: dict[str, tuple[list[str], set[str]]] = {}
    matches = list(KERNEL.finditer(module))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(module)
        body = module[match.end() : end]
        params = [p.split(":")[0].strip() for p in match["params"].split(",") if p.strip()]
        kernels[match["name"]] = (params, set(LOADED.findall(body)))
    return kernels


def census(name: str, wrapper: str, module: str) -> GraphCensus:
    """Count what `wrapper` (a generated Triton wrapper) launches, calls and allocates."""
    kernels = _loaded_params(module)
    result = GraphCensus(name)
    for line in wrapper.splitlines():
        for launch in LAUNCH.finditer(line):
            result.launches += 1
            params, loaded = kernels.get(launch["name"], ([], set()))
            arguments = [a.strip() for a in launch["args"].split(",")][1:]  # after the numel
            sources = [a for p, a in zip(params, arguments) if p in loaded]
            if sources and all(re.fullmatch(r"in\d+", a) for a in sources):
                result.input_only += 1
        for extern in EXTERN.finditer(line):
            result.externs[extern["op"]] += 1
        result.allocations += line.count("empty_strided(")
        result.views += line.count("as_strided(")
    return result


def _compiled_graphs(model: str, mode: str, size: str) -> Iterator[tuple[str, str, str]]:
    """(graph name, wrapper, Triton module) of each Graph ember compiles for one step."""
    import ember
    import ember.inductor.backend as inductor_backend
    import ember.inductor.pipeline as pipeline
    from benchmarks.models import build_workload, spec
    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.compiled import CompiledGraph

    recorded: list[tuple[str, str, str]] = []
    real_compile = inductor_backend.compile_graph
    real_backend_for = pipeline.backend_for
    real_call = CompiledGraph.__call__

    def compile_graph(graph: Any, *args: Any, **kwargs: Any) -> Any:
        compiled = real_compile(graph, *args, **kwargs)
        recorded.append((graph.name, compiled.source, compiled.module))
        return compiled

    def stop(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Stop

    inductor_backend.compile_graph = compile_graph  # type: ignore[assignment]
    pipeline.backend_for = lambda device, config: TritonBackend()  # type: ignore[assignment]
    CompiledGraph.__call__ = stop  # type: ignore[method-assign]
    interpret = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # loading the kernels needs no GPU then
    try:
        workload = build_workload(spec(model), size, mode)
        module = copy.deepcopy(workload.module)
        if mode == "inference":
            module.eval()
        run = ember.compile(module)
        grad = torch.enable_grad() if mode == "training" else torch.no_grad()
        try:
            with grad, torch.autocast("cpu", dtype=torch.bfloat16):
                run(*workload.inputs)
        except _Stop:
            pass
    finally:
        if interpret is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = interpret
        inductor_backend.compile_graph = real_compile  # type: ignore[assignment]
        pipeline.backend_for = real_backend_for  # type: ignore[assignment]
        CompiledGraph.__call__ = real_call  # type: ignore[method-assign]
    yield from recorded


def table(rows: list[tuple[str, str, GraphCensus]]) -> list[str]:
    lines = [
        "| model | mode | graph | Triton launches | of kernels reading inputs only | extern "
        "calls | allocations | views | externs by op |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, mode, row in rows:
        ops = ", ".join(f"{op} {n}" for op, n in row.externs.most_common())
        lines.append(
            f"| {model} | {mode} | {row.name} | {row.launches} | {row.input_only} | "
            f"{sum(row.externs.values())} | {row.allocations} | {row.views} | {ops} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="hf_gpt2,hf_bert,hf_vit,hf_resnet,hf_llama")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--size", default="gpu", help="the workloads' size (gpu: the suite's)")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    parser.add_argument("--dump", type=Path, help="write each Graph's wrapper and kernels here")
    args = parser.parse_args(argv)
    rows = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            for name, wrapper, module in _compiled_graphs(model, mode, args.size):
                rows.append((model, mode, census(name, wrapper, module)))
                if args.dump is not None:
                    args.dump.mkdir(parents=True, exist_ok=True)
                    stem = args.dump / f"{model}-{mode}-{name}"
                    stem.with_suffix(".wrapper.py").write_text(wrapper)
                    stem.with_suffix(".kernels.py").write_text(module)
                print(" ".join(table(rows[-1:])[2:]), flush=True)
    text = "\n".join(table(rows)) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
