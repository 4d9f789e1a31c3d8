"""The inductor pipeline: one function of named passes from a Graph to a `CompiledGraph`.

    bind_symbols → decompose → pad_matmuls → float32_matmuls
    → eliminate_common_subexpressions → eliminate_dead_code → lower → schedule
    → mixed_order_reductions → gemm_templates (max-autotune; convolutions: conv_templates)
    → horizontal_launches (off by default) → check_bounds → generate
    → plan_memory → load

The pass names are the names used in logs. A compiled graph (wrapper and module source) is
cached under a key of the serialized Graph, the config and the versions; its shared library
is cached under a key of its source, so a second process, or a second graph that generates
the same code, reuses it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ember.inductor.codegen.backend import (
    CHANNELS_LAST_CONVOLUTIONS,
    CHANNELS_LAST_DEPTHWISE,
    HORIZONTAL_LAUNCHES,
    MIXED_ORDER_REDUCTIONS,
    ONE_REDUCTION_DIRECTION,
    CodegenBackend,
    KernelSource,
)
from ember.inductor.codegen.bounds import check_bounds
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.kernel_names import distinct, name_by_content
from ember.inductor.codegen.native_wrapper import NativeCall, translate
from ember.inductor.codegen.wrapper import generate_wrapper, wrapper_namespace
from ember.inductor.compiled import CompiledGraph
from ember.inductor.config import InductorConfig
from ember.inductor.errors import InductorError
from ember.inductor.ir.program import ExternNode, Program
from ember.inductor.lowering import (  # noqa: F401
    extern,
    indexing,
    pointwise,
    pointwise_convolutions,
    random,
    reductions,
    scatter,
    views,
)
from ember.inductor.lowering.extern import EXTERN_OPS
from ember.inductor.lowering.graph_lowering import compute_device, lower_graph
from ember.inductor.passes.bind_symbols import bind_symbols
from ember.inductor.passes.channels_last import channels_last, prefers_channels_last
from ember.inductor.passes.common_subexpressions import eliminate_common_subexpressions
from ember.inductor.passes.dead_code import eliminate_dead_code
from ember.inductor.passes.float32_matmuls import float32_matmuls
from ember.inductor.passes.pad_matmuls import pad_matmuls
from ember.inductor.scheduler.fusion import Kernel, ScheduledNode, schedule
from ember.inductor.scheduler.horizontal import launch_horizontally
from ember.inductor.scheduler.memory_planning import plan_memory
from ember.inductor.scheduler.mixed_order_reductions import combine_mixed_order_reductions
from ember.inductor.templates.gemm import use_gemm_templates
from ember.prims import Graph, Ref, TensorSpec, resolve_op
from ember.prims.config import cache_key, load
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, DecompositionError, decompose
from ember.prims.logs import topic_logger
from ember.prims.serialize import dumps
from ember.prims.symbolic import ShapeEnv
from ember.runtime import ArtifactCache
from ember.runtime import native_interpreter_if_ready as interpreter_if_ready

logger = logging.getLogger("ember.inductor")
output_code = topic_logger("output_code")
perf_hints = topic_logger("perf_hints")
graphs_log = topic_logger("graphs")

# What the C++ pipeline decomposes: everything the prims tables cover but the extern ops.
DECOMPOSITIONS = {k: v for k, v in PRIM_DECOMPOSITIONS.items() if k not in EXTERN_OPS}


def compile_graph(
    graph: Graph,
    example_inputs: Sequence[Any] = (),
    *,
    config: InductorConfig | None = None,
    backend: CodegenBackend | None = None,
    cache: ArtifactCache | None = None,
    input_strides: Mapping[int, tuple[int, ...]] | None = None,
) -> CompiledGraph:
    """Compile `graph` for the device its tensors live on (C++ on CPU, Triton on CUDA): the
    callable runs it as `ember.prims.run(graph, ...)` would. `input_strides` gives inputs,
    by position, the strides their tensors arrive with where they differ from the spec (a
    backward's saved activations in the layout its forward chose, `saved_layouts`)."""
    config = config or load(InductorConfig)
    device = compute_device(graph)
    backend = backend or backend_for(device, config)
    cache = cache or ArtifactCache()
    key = _graph_key(graph, config, backend, input_strides) if config.cache else None
    artifact = _cached(cache, key)
    if artifact is not None and graphs_log.isEnabledFor(logging.INFO):
        graphs_log.info(
            "inductor %s: code from the artifact cache", graph.name, extra={"ember_cache_hit": True}
        )
    if artifact is None:
        artifact = generate(graph, backend, config, device, input_strides)
        if key is not None:
            cache.put(key, json.dumps(artifact).encode())
    native = config.native_wrapper == "always" or (
        config.native_wrapper == "gpu" and device.type == "cuda"
    )
    return _load(graph, artifact, backend, cache, native=native)


def saved_layouts(compiled: CompiledGraph) -> dict[int, tuple[int, ...]]:
    """A training forward's saved values (by position among them) that it returns in other
    strides than its Graph declares (channels-last activations): the backward compiles
    against these (`compile_graph(..., input_strides=)`)."""
    return dict(compiled.saved_strides)


def backend_for(device: torch.device, config: InductorConfig) -> CodegenBackend:
    """The code generator for `device`."""
    if device.type == "cuda":
        from ember.inductor.codegen.triton import TritonBackend

        return TritonBackend(
            max_autotune=config.max_autotune,
            autotune_reductions=config.autotune_reductions,
            cached_cubins=config.cached_cubins,
        )
    if device.type != "cpu":
        raise InductorError(
            f"ember-inductor generates code for CPU and CUDA tensors, not {device.type}; "
            "compile with backend='aot_eager' or a vendor backend for this device"
        )
    return CppBackend()


def _host_inputs(graph: Graph, device: torch.device) -> list[int]:
    """CPU tensor inputs of a graph computing on another device (index tensors and scalars
    that eager lets mix with GPU tensors): the wrapper copies them over first."""
    if device.type == "cpu":
        return []
    return [
        position
        for position, graph_input in enumerate(graph.inputs)
        if isinstance(graph_input.value.spec, TensorSpec)
        and graph_input.value.spec.device.type == "cpu"
    ]


def generate(
    graph: Graph,
    backend: CodegenBackend,
    config: InductorConfig,
    device: torch.device | None = None,
    input_strides: Mapping[int, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    """Run the passes up to generated source: {wrapper, module, extern targets, kernels,
    memory, saved_strides}."""
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        timings[name] = (time.perf_counter() - started) * 1e3
        return result

    donated = _donated_positions(graph)  # before the passes, which keep no meta
    if graph.symbols:
        graph = timed("bind_symbols", bind_symbols, graph)
    output_specs = _output_specs(graph)
    saved_outputs = int(graph.meta.get("saved_outputs", "0") or 0)  # a training forward's
    saved_strides: dict[int, tuple[int, ...]] = {}
    if graph.symbols and input_strides:
        raise InductorError(
            f"graph {graph.name} has symbolic sizes but inputs in other strides than its spec; "
            "compile it with EMBER_INDUCTOR_LAYOUT_OPTIMIZATION=off"
        )
    decomposed = True
    if graph.symbols:
        kept = graph
        graph = timed("decompose", _decompose_symbolic, graph)
        decomposed = graph is not kept  # ATen views left: pad_matmuls follows prims views
    else:
        graph = timed("decompose", decompose, graph, DECOMPOSITIONS)
    if config.pad_matmuls and decomposed:  # a symbolic M stays; N and K are padded
        before = graph
        graph = timed("pad_matmuls", pad_matmuls, graph)
        if config.padded_outputs and "saved_inputs" not in graph.meta:
            output_specs = _padded_outputs(before, graph, output_specs, saved_outputs)
    graph = timed("float32_matmuls", float32_matmuls, graph)
    if not graph.symbols:
        if input_strides or _wants_channels_last(graph, config, backend, saved_outputs > 0):
            before = graph
            graph = timed("channels_last", channels_last, graph, input_strides)
            output_specs, saved_strides = _saved_outputs(before, graph, output_specs, saved_outputs)
    graph = timed("eliminate_common_subexpressions", eliminate_common_subexpressions, graph)
    graph = timed("eliminate_dead_code", eliminate_dead_code, graph)
    atomic_dtypes = getattr(backend, "atomic_dtypes", backend.dtypes)
    program: Program = timed(
        "lower",
        lower_graph,
        graph,
        backend.dtypes,
        atomic_dtypes,
        output_specs,
        getattr(backend, "split_reductions", False),
        getattr(backend, "welford_reductions", False),
        config.pointwise_convolutions_as_matmuls,
    )
    program.size_ranges = _size_ranges(graph)
    scheduled: list[ScheduledNode] = timed("schedule", _schedule, program, config, backend)
    if config.fusion and config.mixed_order_reductions:
        if MIXED_ORDER_REDUCTIONS in backend.capabilities:
            scheduled = timed(
                "mixed_order_reductions", combine_mixed_order_reductions, program, scheduled
            )
    if (
        config.gemm_templates or config.conv_templates
    ) and "gemm_templates" in backend.capabilities:
        scheduled = timed(
            "gemm_templates", use_gemm_templates, program, scheduled, config.gemm_templates
        )
    part = getattr(backend, "horizontal_part", None)  # HORIZONTAL_LAUNCHES's question
    if config.fusion and config.horizontal_launches and part is not None:
        if HORIZONTAL_LAUNCHES in backend.capabilities:
            scheduled = timed(
                "horizontal_launches",
                launch_horizontally,
                program,
                scheduled,
                lambda kernel: part(kernel, program),
            )
    if config.check_bounds:
        timed("check_bounds", check_bounds, scheduled, program)
    sources: dict[str, KernelSource] = timed("generate", _generate, scheduled, program, backend)
    definitions = distinct(sources.values())
    module = backend.module(definitions)
    device = device or compute_device(graph)
    plan = timed(
        "plan_memory",
        plan_memory,
        program,
        scheduled,
        sources,
        config.reuse_buffers,
        frozenset(program.input_storages[position] for position in donated)
        if config.wider_in_place
        else frozenset(),
        config.wider_in_place,
    )
    wrapper = generate_wrapper(
        program,
        scheduled,
        sources,
        backend,
        device,
        _host_inputs(graph, device),
        plan=plan,
        detached_outputs=saved_outputs if config.wider_in_place else 0,
    )
    logger.debug("inductor passes (ms): %s", {k: round(v, 1) for k, v in timings.items()})
    targets = sorted({item.target for item in scheduled if isinstance(item, ExternNode)})
    memory = {
        "fresh_allocations": plan.fresh_allocations,
        "reused": plan.reused,
        "in_place": plan.in_place,
        "planned_peak_bytes": plan.planned_peak_bytes,
        "planned_block_bytes": plan.planned_block_bytes,
        "writes_donated": any(a.checked for group in plan.allocations.values() for a in group),
    }
    if graphs_log.isEnabledFor(logging.INFO):  # the stage the compile report shows
        graphs_log.info(
            "inductor %s after its graph passes:\n%s\nscheduled:\n%s",
            graph.name,
            graph,
            "\n".join(_describe(item) for item in scheduled),
            extra={"ember_pass_ms": dict(timings), "ember_memory": memory},
        )
    return {
        "wrapper": wrapper,
        "module": module,
        "targets": targets,
        "kernels": len(sources),
        "memory": memory,
        "saved_strides": {str(k): list(v) for k, v in saved_strides.items()},
    }


def _decompose_symbolic(graph: Graph) -> Graph:
    """A Graph with size symbols decomposed over the same symbols, so its kernels take the
    sizes as arguments. A decomposition that decides something about a size the Graph's
    guards do not (a new guard: capture cannot check it before the call) leaves the Graph's
    ATen ops as they are (extern calls), which are right at every size."""
    try:
        decomposed = decompose(graph, DECOMPOSITIONS)
    except DecompositionError as error:
        perf_hints.info("graph %s keeps its ATen ops: %s", graph.name, error)
        return graph
    known = {guard.expr for guard in graph.guards}
    added = ", ".join(str(g.expr) for g in decomposed.guards if g.expr not in known)
    if added:
        perf_hints.info(
            "graph %s keeps its ATen ops: decomposing it assumes %s about its sizes",
            graph.name,
            added,
        )
        return graph
    return decomposed


def _describe(item: ScheduledNode) -> str:
    """One scheduled item for the `graphs` log: a kernel and what it fuses, or an extern call."""
    if isinstance(item, Kernel):
        return (
            f"kernel {item.name}: {len(item.members)} loop node(s) from {', '.join(item.origins())}"
        )
    fallback = " (fallback)" if item.is_fallback else ""
    return f"extern {item.target}{fallback} from {', '.join(item.origins)}"


def _size_ranges(graph: Graph) -> dict[str, tuple[int, int | None]]:
    """Each size symbol's range under its declared one and the Graph's guards (`s0 <= 256`
    from slicing a 256-row mask by the length)."""
    if not graph.symbols:
        return {}
    try:
        shape_env = ShapeEnv.rebuilt(graph.symbols, graph.guards)
    except ValueError:  # symbols without hints or not named s0, s1, ...: ranges unknown
        return {}
    ranges: dict[str, tuple[int, int | None]] = {}
    for name, info in graph.symbols.items():
        value_range = shape_env.value_range(info.sympy())
        lower, upper = value_range.lower, value_range.upper
        ranges[name] = (
            int(lower) if lower.is_finite else info.lower,
            int(upper) if upper.is_finite else None,
        )
    return ranges


def _donated_positions(graph: Graph) -> list[int]:
    """The inputs whose memory the wrapper may write over when the call holds them alone: a
    training backward's (its saved values and tangents, which ember-autodiff's boxed call
    hands over), never parameters or buffers."""
    if "saved_inputs" not in graph.meta:
        return []
    return [position for position, put in enumerate(graph.inputs) if not put.is_state]


def _wants_channels_last(
    graph: Graph, config: InductorConfig, backend: CodegenBackend, training: bool = False
) -> bool:
    """Whether `channels_last` runs: forced by the config, or chosen for a convolution-heavy
    graph when the backend states that its convolutions prefer channels-last
    (`CHANNELS_LAST_CONVOLUTIONS` in its capabilities)."""
    if config.layout_optimization == "off":
        return False
    if config.layout_optimization == "channels_last":
        return prefers_channels_last(graph, min_convolutions=1, min_share=0.0)
    # not for training: NHWC, the gradients of ConvNeXt's convolutions ran slower than NCHW
    # (hf_convnext's training step 19.1 -> 22.7 ms, one thread)
    depthwise = CHANNELS_LAST_DEPTHWISE in backend.capabilities and not training
    return CHANNELS_LAST_CONVOLUTIONS in backend.capabilities and prefers_channels_last(
        graph, depthwise=depthwise
    )


def _padded_outputs(
    before: Graph, after: Graph, output_specs: list[TensorSpec | None], saved: int
) -> list[TensorSpec | None]:
    """User-visible outputs that `pad_matmuls` made views of a padded product keep the
    padded row stride (`padded_outputs`): copying them into row-major strides cost GPT-2's
    logits a second buffer (+313 MiB peak) and 0.28 ms on the H100; torch.compile returns
    the view. A training forward's saved values (the last `saved`) and a backward's
    gradients keep their declared strides."""
    old, new = before.values(), after.values()
    specs = list(output_specs)
    for position, leaf in enumerate(after.output_leaves):
        if position >= len(after.output_leaves) - saved:
            break
        if not isinstance(leaf, Ref) or position >= len(specs):
            continue
        was, now = old.get(leaf.name), new.get(leaf.name)
        if was is None or now is None or was.spec == now.spec:
            continue
        declared = specs[position]
        if isinstance(declared, TensorSpec) and isinstance(now.spec, TensorSpec):
            if declared.shape == now.spec.shape and declared.dtype == now.spec.dtype:
                specs[position] = now.spec
    return specs


def _saved_outputs(
    before: Graph, after: Graph, output_specs: list[TensorSpec | None], saved: int
) -> tuple[list[TensorSpec | None], dict[int, tuple[int, ...]]]:
    """A training forward's saved values (its last `saved_outputs` outputs, ember-autodiff's
    partition says how many) that `channels_last` restrided are returned in their new
    strides (only the backward reads them); the rest keep the declared ones. Returns the
    output specs and the new strides by position among the saved values."""
    leaves = after.output_leaves
    first = len(leaves) - saved
    old, new = before.values(), after.values()
    specs = list(output_specs)
    strides: dict[int, tuple[int, ...]] = {}
    for position in range(max(first, 0), len(leaves)):
        leaf = leaves[position]
        if not isinstance(leaf, Ref) or leaf.name not in old or position >= len(specs):
            continue
        was, now = old[leaf.name].spec, new[leaf.name].spec
        if not isinstance(now, TensorSpec) or was == now or not now.is_static():
            continue
        if leaves.index(leaf) != position:  # also an earlier (user-visible) output
            continue
        specs[position] = now
        strides[position - first] = tuple(int(s) for s in now.strides)
    return specs, strides


def _output_specs(graph: Graph) -> list[TensorSpec | None]:
    """Each output's spec in the Graph as given: the strides its caller (and a backward Graph
    compiled against them) expects, whatever strides its decomposition computes."""
    values = graph.values()
    specs: list[TensorSpec | None] = []
    for leaf in graph.output_leaves:
        value = values.get(leaf.name) if isinstance(leaf, Ref) else None
        spec = value.spec if value is not None else None
        specs.append(spec if isinstance(spec, TensorSpec) else None)
    return specs


def _schedule(
    program: Program, config: InductorConfig, backend: CodegenBackend
) -> list[ScheduledNode]:
    prefix = backend.kernel_prefix
    one_direction = ONE_REDUCTION_DIRECTION in backend.capabilities
    if config.fusion:
        return schedule(program, prefix, one_reduction_direction=one_direction)
    # one kernel per loop node: schedule each node as a program of its own
    scheduled: list[ScheduledNode] = []
    for node in program.nodes:
        single = Program(program.storages, program.input_storages, [node], program.outputs)
        for item in schedule(single, prefix, one_reduction_direction=one_direction):
            if isinstance(item, Kernel):
                item.name = f"{item.name}_{len(scheduled)}"
                item.local_buffers.clear()
            scheduled.append(item)
    return scheduled


def _generate(
    scheduled: Sequence[ScheduledNode], program: Program, backend: CodegenBackend
) -> dict[str, KernelSource]:
    """Each kernel's source, named by its content: equal kernels share one definition. Two
    kernels of one name and different sources are a bug of ember's naming, raised here: kept
    as a dict, the second would replace the first and the wrapper would launch it twice
    (ResNet-50's adjacent convolution templates did, ed5bbdc)."""
    sources: dict[str, KernelSource] = {}
    for item in scheduled:
        if not isinstance(item, Kernel):
            continue
        source = name_by_content(backend.generate(item, program), sorted(item.local_buffers))
        known = sources.setdefault(item.name, source)
        if known.source != source.source:
            raise InductorError(
                f"two different kernels are both named {item.name!r}; this is a bug in "
                "ember-inductor's kernel naming: please report it with the graph "
                "(EMBER_LOGS=output_code shows the kernels)"
            )
    return sources


def _load(
    graph: Graph,
    artifact: dict[str, Any],
    backend: CodegenBackend,
    cache: ArtifactCache,
    *,
    native: bool = False,
) -> CompiledGraph:
    module, wrapper = artifact["module"], artifact["wrapper"]
    if output_code.isEnabledFor(logging.INFO):
        output_code.info("graph %s: kernels\n%s\nwrapper\n%s", graph.name, module, wrapper)
    kernels = backend.load(module, cache) if artifact["kernels"] else {}
    ops = {target: resolve_op(target) for target in artifact["targets"]}
    namespace = wrapper_namespace(kernels, ops)
    exec(compile(wrapper, f"<ember wrapper {graph.name}>", "exec"), namespace)  # noqa: S102
    call = namespace["call"]
    if native:
        call = _native_call(graph.name, call, wrapper, namespace, ops)
    compiled = CompiledGraph(graph, call, wrapper, module, artifact["kernels"])
    saved = artifact.get("saved_strides") or {}
    compiled.saved_strides = {int(k): tuple(v) for k, v in saved.items()}
    memory = artifact.get("memory") or {}
    compiled.planned_block_bytes = memory.get("planned_block_bytes") or 0
    compiled.writes_donated = bool(memory.get("writes_donated"))
    return compiled


def _native_call(
    name: str,
    call: Any,
    wrapper: str,
    namespace: dict[str, Any],
    ops: Mapping[str, Any],
) -> Any:
    """`call` run by the native wrapper from its second call on, where it translates."""
    translation = translate(wrapper, namespace, ops)
    if isinstance(translation, str):
        logger.info("graph %s keeps its Python wrapper: %s", name, translation)
        return call
    # the interpreter lives under the default cache root whatever the artifact cache is (one
    # build per torch and Python), built in the background: no call waits for the compiler
    return NativeCall(name, call, translation, namespace["kernels"], ops, interpreter_if_ready)


def _graph_key(
    graph: Graph,
    config: InductorConfig,
    backend: CodegenBackend,
    input_strides: Mapping[int, tuple[int, ...]] | None = None,
) -> str | None:
    try:
        # Provenance (the pass that made the Graph and its time) never decides the code: a
        # key with it missed on every compile of a captured Graph. How many outputs are
        # saved for a backward does (their strides are free), and whether it is a backward
        # (its inputs are donated).
        payload = dumps(dataclasses.replace(graph, meta={}))
    except Exception:  # a Graph the format cannot carry is compiled, just not cached
        return None
    versions = {name: _version(name) for name in ("ember-inductor", "ember-prims", "torch")}
    versions["sources"] = _source_fingerprint()
    settings = dict(cache_key(config))
    settings["backend"] = type(backend).__name__
    settings["saved_outputs"] = graph.meta.get("saved_outputs", "0")
    settings["donated"] = _donated_positions(graph)
    settings["input_strides"] = sorted((k, list(v)) for k, v in (input_strides or {}).items())
    return ArtifactCache.key(payload, config=settings, versions=versions)


def _cached(cache: ArtifactCache, key: str | None) -> dict[str, Any] | None:
    if key is None:
        return None
    payload = cache.get(key)
    if payload is None:
        return None
    try:
        artifact = json.loads(payload)
    except ValueError:
        return None
    return artifact if isinstance(artifact, dict) else None


@functools.cache
def _source_fingerprint() -> str:
    """A hash of ember-inductor's and ember-prims' own source (lowerings, decompositions and
    code generation decide what a graph compiles to; an edit must miss the cache even when
    the version number stays)."""
    import ember.prims

    digest = hashlib.sha256()
    for package in (Path(__file__).parent, Path(ember.prims.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "0+source"
