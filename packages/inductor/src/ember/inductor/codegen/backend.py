"""The codegen backend interface: what a kernel generator implements to plug into inductor.

A backend turns each scheduled kernel into source, joins a graph's kernels into one module,
builds and loads that module (through ember-runtime's artifact cache), and says how the
wrapper passes a tensor to its kernels. Generic code asks a backend for its capabilities,
never for its name. The C++ generator is one implementation; Triton (issue 9) and vendors'
generators are others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel
from ember.runtime import ArtifactCache


@dataclass
class KernelArgument:
    """One kernel parameter: a storage it reads or writes, or a size symbol."""

    name: str  # storage name or size symbol name
    kind: str  # "pointer" or "size"


@dataclass
class KernelSource:
    """The source of one kernel and the arguments the wrapper passes, in order."""

    name: str
    source: str
    arguments: list[KernelArgument] = field(default_factory=list)
    # What the backend's loader needs besides the source (JSON-able; e.g. Triton's signature
    # and launch configs), and Python size expressions the wrapper passes before the
    # arguments (e.g. the number of points a Triton grid covers).
    launch: dict[str, object] = field(default_factory=dict)
    grid: list[str] = field(default_factory=list)


# A capability: the convolutions the backend's graphs call (extern kernels through torch) run
# faster on channels-last activations than on NCHW ones (cuDNN's and oneDNN's NHWC kernels),
# so inductor's `layout_optimization="auto"` restrides convolution-heavy graphs for it.
CHANNELS_LAST_CONVOLUTIONS = "channels_last_convolutions"
# A capability: its depthwise convolutions run NCHW many times slower than channels-last
# (oneDNN on the CPU: a 7x7 one over 4x256x2x2 1052 against 61 us), so a graph with one runs
# channels-last in inference however small the convolutions' share of its work (ConvNeXt:
# its matmuls).
CHANNELS_LAST_DEPTHWISE = "channels_last_depthwise"
# A capability: a kernel's loops are vectorized in one direction, so a reduction reading its
# input along the kernel's outer loop (a column sum: a layer norm's weight gradient) does not
# join a kernel whose reductions read along their rows, or the other way round. Fused by
# coincidence of sizes (BERT's 128 tokens x 128 features), the column sums ran as strided
# scalar loops inside the row kernel; alone, the C++ generator's column blocks read rows.
ONE_REDUCTION_DIRECTION = "one_reduction_direction"
# The backend generates `MixedOrderKernel`s: a row reduction whose programs loop over blocks
# of rows and also sum their columns (scheduler/mixed_order_reductions.py).
MIXED_ORDER_REDUCTIONS = "mixed_order_reductions"
# The backend runs `HorizontalKernel`s (scheduler/horizontal.py): pointwise kernels that
# read only the Graph's inputs, each a part of one launch; it says which kernels can be parts
# with `horizontal_part(kernel, program)`.
HORIZONTAL_LAUNCHES = "horizontal_launches"


class CodegenBackend(Protocol):
    """What inductor needs from a kernel generator."""

    # Devices it generates for ("cpu", "cuda") and optional features ("gemm_templates",
    # CHANNELS_LAST_CONVOLUTIONS).
    capabilities: frozenset[str]
    # The dtypes its kernels load, compute and store; ops touching others fall back.
    dtypes: frozenset[torch.dtype]
    # The prefix of its kernels' names ("cpp" -> cpp_fused_add_mul_0).
    kernel_prefix: str

    def generate(self, kernel: Kernel, program: Program) -> KernelSource:
        """The source of one fused kernel."""
        ...

    def module(self, kernels: Sequence[KernelSource]) -> str:
        """One compilation unit holding every kernel of a graph."""
        ...

    def load(self, module: str, cache: ArtifactCache) -> dict[str, Callable[..., None]]:
        """Build `module` (or fetch the build from `cache`) and return its kernels by name."""
        ...

    def pointer(self, tensor: str) -> str:
        """The Python expression the wrapper passes for tensor variable `tensor`."""
        ...
