"""The runtime choice between a GEMM template and the vendor library, by measurement.

A `GemmChoice` is what the wrapper calls for a `GemmKernel` (`choice(numel, *storages)`, the
calling convention of a Triton kernel). On its first call on a GPU it times, on the real
tensors (written ones cloned), the template (whose own block configurations ember-runtime
autotunes first, timed the same way) and the vendor path: torch's `mm`/`addmm`/`bmm` (cuBLAS)
into the result, then the epilogue as its own kernel. Each is timed by CUDA-graph replay
after an L2 flush (`timing.py`, the method `benchmarks/gemm_templates.py` reports with),
three rounds interleaved; the template runs from then on only if it is at least 1% faster,
cuBLAS otherwise, so the vendor library is always the fallback. The choice is kept in
ember-runtime's on-disk artifact cache under the module's source digest, the kernel, its
sizes and the device name, so another process reuses it without timing, and logged under
`EMBER_LOGS=autotune`. TMA configurations (`tma.py`) are dropped on GPUs before sm90; a
template that may use them sets Triton's scratch allocator (its descriptors are built on the
device) and takes the vendor path for a call whose operands are not 16-byte aligned. Under
`TRITON_INTERPRET=1` (CPU tests) the template always runs.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from ember.inductor.templates.timing import replay_time_ms
from ember.prims.logs import topic_logger
from ember.runtime import ArtifactCache, LaunchConfig, TritonKernel
from ember.runtime.triton import AutotuneKey, Autotuner
from ember.runtime.triton.autotune import Bench

TEMPLATE = LaunchConfig((("TEMPLATE", 1),))
VENDOR = LaunchConfig((("VENDOR", 1),))
ROUNDS = 3  # interleaved timing rounds of each path
# The template must beat the vendor path by 1% to be chosen: within the noise, cuBLAS stays
# (on the H100, timing the two once and back to back picked the slower one on 2 of 11 shapes).
MARGIN = 0.99

logger = topic_logger("autotune")

_OPS: dict[str, Callable[..., Any]] = {
    "aten::mm.default": torch.mm,
    "aten::addmm.default": torch.addmm,
    "aten::bmm.default": torch.bmm,
}


class VendorGemm:
    """The vendor-library path: torch's matmul into the result, then the epilogue kernel."""

    def __init__(
        self,
        description: dict[str, Any],
        params: Sequence[str],
        epilogue: TritonKernel | None,
        epilogue_arguments: Sequence[str],
        epilogue_numel: int,
    ) -> None:
        positions = {name: i for i, name in enumerate(params)}
        self.conv: dict[str, Any] | None = description.get("conv")
        self.op = _OPS.get(description["target"], torch.ops.aten.convolution.default)
        self.alpha = float(description["alpha"])
        self.beta = float(description["beta"])
        batch, m, n, _ = description["shape"]
        batched = description["target"] == "aten::bmm.default"
        self.result_size: tuple[int, ...] = (batch, m, n) if batched else (m, n)
        self.dtype = getattr(torch, str(description["dtype"]).removeprefix("torch."))
        self.a = _operand_view(description["a"], positions)
        self.b = _operand_view(description["b"], positions)
        bias = description["bias"]
        self.bias = None if bias is None else _operand_view(bias, positions)
        result = f"p_{description['result']}"
        self.result = positions.get(result)  # None: the template keeps it in registers
        self.epilogue = epilogue
        self.epilogue_numel = epilogue_numel
        # each epilogue argument: a position in the template's arguments, or -1 for the result
        self.epilogue_positions = [
            -1 if f"p_{name}" == result else positions[f"p_{name}"] for name in epilogue_arguments
        ]

    def __call__(self, numel: int, *args: Any) -> None:
        a, b = _view(args, self.a), _view(args, self.b)
        bias = None if self.bias is None else _view(args, self.bias)
        if self.conv is not None:  # cuDNN; the epilogue reads the result in its declared strides
            conv = self.conv
            out = self.op(a, b, bias, conv["stride"], conv["padding"], conv["dilation"], False,
                          [0, 0], 1)  # fmt: skip
            stride = tuple(conv["result_stride"])
            if out.stride() != stride:
                out = torch.empty_strided(
                    out.shape, stride, dtype=out.dtype, device=out.device
                ).copy_(out)
            if self.epilogue is not None:
                call = [out if p < 0 else args[p] for p in self.epilogue_positions]
                self.epilogue(self.epilogue_numel, *call)
            return
        if self.result is not None:
            target = args[self.result]
            contiguous = _contiguous(self.result_size)
            out = torch.as_strided(target, self.result_size, contiguous, target.storage_offset())
        else:
            out = torch.empty(self.result_size, dtype=self.dtype, device=a.device)
        if bias is not None:
            self.op(bias, a, b, beta=self.beta, alpha=self.alpha, out=out)
        else:
            self.op(a, b, out=out)
        if self.epilogue is not None:
            call = [out if p < 0 else args[p] for p in self.epilogue_positions]
            self.epilogue(self.epilogue_numel, *call)


class GemmChoice:
    """Runs a GEMM template or the vendor path, whichever measured faster (see the module)."""

    def __init__(
        self,
        module: ModuleType,
        name: str,
        template: TritonKernel,
        vendor: VendorGemm,
        *,
        source_digest: str,
        autotuner: Autotuner,
        mutated: Sequence[str],
        bench: Bench | None = None,
        tma: Sequence[str] = (),
        split: dict[str, int] | None = None,
    ) -> None:
        self.module = module
        self.name = name
        self.template = template
        self.vendor = vendor
        self.source_digest = source_digest
        self.autotuner = autotuner
        self.bench: Bench = bench if bench is not None else replay_time_ms
        self.mutated = [template.params.index(param) for param in mutated]
        # the operands a TMA configuration reads through descriptors (none: no such config)
        self.tma = [template.params.index(param) for param in tma]
        # split-K configurations: the sizes of their partials and counters (created on the
        # first call, on the device of the call's tensors, then reused: zeroed by the kernel)
        self.split = split
        self._split_buffers: tuple[torch.Tensor, ...] = ()
        self.run_template: Callable[..., None] = (
            self._checked_template if self.tma or split else template
        )
        self.chosen: str | None = None
        self._lock = threading.Lock()
        self.launch: Callable[..., None] = self._first_call

    def __call__(self, numel: int, *args: Any) -> None:
        self.launch(numel, *args)

    def __repr__(self) -> str:
        return f"GemmChoice({self.name}, chosen={self.chosen})"

    def _first_call(self, numel: int, *args: Any) -> None:
        with self._lock:
            if self.launch == self._first_call:
                self.launch = self._choose(numel, args)
        self.launch(numel, *args)

    def _choose(self, numel: int, args: tuple[Any, ...]) -> Callable[..., None]:
        from ember.runtime.triton.kernel import interpreting

        if interpreting(self.template.function) or not torch.cuda.is_available():
            self.chosen = "template"
            return self.run_template
        if self.tma and not self._aligned(args):  # TMA needs aligned operands to time it
            self.chosen = "vendor"
            return self.vendor
        return self.measure(numel, args)

    def _aligned(self, args: Sequence[Any]) -> bool:
        pointers = 0
        for position in self.tma:
            pointers |= args[position].data_ptr()
        return not pointers & 15

    def _checked_template(self, numel: int, *args: Any) -> None:
        """The template of a kernel with TMA configurations (their descriptors need a scratch
        allocator, set per call: it is a context variable, and aligned operands) or split-K
        ones (their buffers follow the graph's storages)."""
        if self.tma:
            if not self._aligned(args):
                self.vendor(numel, *args)
                return
            _set_allocator(_scratch)
        self.template(numel, *self.template_arguments(args))

    def template_arguments(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """The template's arguments for the graph's storages `args`: them, then the split-K
        buffers when it has split-K configurations."""
        if self.split is None:
            return tuple(args)
        if not self._split_buffers:
            device = args[self.template.pointers[0]].device
            self._split_buffers = (
                torch.zeros(self.split["partials"], dtype=torch.float32, device=device),
                torch.zeros(self.split["counters"], dtype=torch.int32, device=device),
            )
        return (*args, *self._split_buffers)

    def measure(self, numel: int, args: tuple[Any, ...]) -> Callable[..., None]:
        """Time the template and the vendor path on `args` (written tensors cloned) and return
        the faster, or the choice cached for these sizes on this device."""
        scratch = list(args)
        for position in self.mutated:  # benchmarks must not accumulate into live tensors
            scratch[position] = args[position].clone()
        self.run_template(numel, *scratch)  # autotunes the template's configurations first
        device = args[self.template.pointers[0]].device
        on_gpu = device.type == "cuda"
        key = AutotuneKey(
            source=self.source_digest,
            kernel=f"{self.name}:vendor-or-template",
            sizes=(numel,),
            device=torch.cuda.get_device_name(device) if on_gpu else device.type,
        )
        chosen = self.autotuner.lookup(key, [TEMPLATE, VENDOR])
        if chosen is None:
            launches = (
                lambda: self.run_template(numel, *scratch),
                lambda: self.vendor(numel, *scratch),
            )
            samples: tuple[list[float], list[float]] = ([], [])
            with torch.cuda.device(device) if on_gpu else contextlib.nullcontext():
                for _ in range(ROUNDS):  # interleaved: clock drift hits both alike
                    for launch, times in zip(launches, samples):
                        times.append(self.bench(launch))
            timings = [statistics.median(times) for times in samples]
            chosen = TEMPLATE if timings[0] < MARGIN * timings[1] else VENDOR
            self.autotuner.store(key, chosen, timings)
            logger.info(
                "%s sizes=%s on %s: template %.4f ms, vendor %.4f ms -> %s",
                self.name,
                key.sizes,
                key.device,
                timings[0],
                timings[1],
                "template" if chosen == TEMPLATE else "vendor",
            )
        self.chosen = "template" if chosen == TEMPLATE else "vendor"
        return self.run_template if chosen == TEMPLATE else self.vendor


def _set_allocator(allocator: Any) -> None:
    import triton

    triton.set_allocator(allocator)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's global scratch (device-side TMA descriptors): from torch's allocator, so it
    lives in a CUDA graph's pool while one is captured."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _contiguous(size: Sequence[int]) -> tuple[int, ...]:
    strides: list[int] = []
    running = 1
    for extent in reversed(size):
        strides.append(running)
        running *= max(extent, 1)
    return tuple(reversed(strides))


OperandView = tuple[int, tuple[int, ...], tuple[int, ...], int]


def _operand_view(view: Sequence[Any], positions: dict[str, int]) -> OperandView:
    """(argument position, size, stride, offset) of an operand the template describes."""
    storage, size, stride, offset = view
    return positions[f"p_{storage}"], tuple(size), tuple(stride), int(offset)


def _view(args: Sequence[Any], view: OperandView) -> torch.Tensor:
    """A kernel argument seen as the extern call's operand (offsets count from its first
    element, as the template's pointer arithmetic does)."""
    position, size, stride, offset = view
    tensor: torch.Tensor = args[position]
    return torch.as_strided(tensor, size, stride, tensor.storage_offset() + offset)


def load_gemm(
    module: str,
    name: str,
    launch: dict[str, Any],
    file: str,
    cache: ArtifactCache,
    *,
    autotune: bool,
    autotuner: Autotuner | None = None,
) -> tuple[GemmChoice, list[TritonKernel]]:
    """The `GemmChoice` for kernel `name` of a graph's `module` (its launch data `launch`, its
    own file `file`) and the Triton kernels to compile ahead (the template, the epilogue)."""
    from ember.inductor.codegen.triton.kernel_files import kernel_files
    from ember.runtime import load_triton_module
    from ember.runtime.triton.module import source_digest

    template_module = load_triton_module(file, cache)
    configs = _configs(launch["configs"])
    if _before_sm90():
        configs = [config for config in configs if not dict(config.constants).get("TMA")]
    tma = tuple(launch.get("tma", ())) if any(dict(c.constants).get("TMA") for c in configs) else ()
    template = TritonKernel(
        template_module,
        name,
        signature=launch["signature"],
        configs=configs,
        grid_block="XBLOCK",
        mutated=tuple(launch["mutated"]),
        autotune=autotune,
        cache=cache,
        bench=replay_time_ms,
    )
    description = launch["gemm"]
    epilogue: TritonKernel | None = None
    arguments: list[str] = []
    numel = 0
    extra = description.get("epilogue_kernel")
    if extra is not None:
        files = kernel_files(module, [extra["name"]])
        epilogue = TritonKernel(
            load_triton_module(files[extra["name"]], cache),
            extra["name"],
            signature=extra["launch"]["signature"],
            configs=_configs(extra["launch"]["configs"]),
            grid_block="XBLOCK",
            mutated=tuple(extra["launch"]["mutated"]),
            autotune=autotune,
            cache=cache,
        )
        arguments = list(extra["arguments"])
        numel = int(extra["grid"][0])
    vendor = VendorGemm(description, template.params, epilogue, arguments, numel)
    choice = GemmChoice(
        template_module,
        name,
        template,
        vendor,
        source_digest=source_digest(template_module),
        autotuner=autotuner or Autotuner(cache),
        mutated=tuple(launch["mutated"]),
        tma=tma,
        split=launch.get("split"),
    )
    return choice, [template] + ([epilogue] if epilogue is not None else [])


def _before_sm90() -> bool:
    """Whether the GPU here predates TMA (no GPU: keep every configuration, to build them)."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0)


def _configs(configs: Sequence[dict[str, Any]]) -> list[LaunchConfig]:
    interpreted = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return [
        LaunchConfig(
            tuple(
                (name, int(interpreted) if name == "UPCAST" else value)
                for name, value in config["constants"].items()
            ),
            num_warps=config["num_warps"],
            num_stages=config["num_stages"],
        )
        for config in configs
    ]


__all__ = ["GemmChoice", "VendorGemm", "load_gemm"]
