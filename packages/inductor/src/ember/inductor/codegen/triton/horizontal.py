"""A `HorizontalKernel` (scheduler/horizontal.py) as one `@triton.jit` function.

Each part is written by `TritonKernelWriter` as it would be alone, inside a branch on the
program id: part `i` runs on programs `[start_i, start_i + cdiv(n_i, XBLOCK))`, its block
offset counted from `start_i`. The branch is uniform (one part a program), so a program
runs one part's code. Each part's variables get a suffix of their own, so no name crosses
from one branch into another. One launch configuration (`XBLOCK` 1024, 4 warps: the parts
are weight casts, memory-bound); the grid covers the parts' blocks.
"""

from __future__ import annotations

import re

from ember.inductor.codegen.backend import KernelArgument, KernelSource
from ember.inductor.codegen.triton.heuristics import Config
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.codegen.triton.ops import POINTER_TYPES
from ember.inductor.codegen.triton.transposed_tiles import transposed_tiles
from ember.inductor.ir.indexing import product
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel
from ember.inductor.scheduler.horizontal import HorizontalKernel

CONFIG = Config(xblock=1024, num_warps=4)
# the names a part's code binds that another part's would too (loop variables and masks)
_PART_NAMES = re.compile(r"\b(xnumel|xoffset|xindex|xmask|x\d+)\b")
# a part's fresh names (tmp3, stored4, kept5, ind6) count from a base of its own
_NAMES_PER_PART = 100_000


def can_be_part(kernel: Kernel, program: Program) -> bool:
    """Whether the Triton writer can run `kernel` as a horizontal part: its plain writer
    (no transposed tiles), int32 indices, no sizes as arguments."""
    if transposed_tiles(kernel) is not None:
        return False
    writer = TritonKernelWriter(kernel, program)
    return not writer.wide and not writer.reduces


def generate_horizontal(kernel: HorizontalKernel, program: Program) -> KernelSource:
    """The source of `kernel`: its parts, each behind its range of programs."""
    storages: dict[str, None] = {}
    written: dict[str, None] = {}
    body = ["    pid = tl.program_id(0)"]
    start = "0"
    blocks_total = 0
    for position, part in enumerate(kernel.parts):
        numel = int(product(part.outer))
        end = f"start{position + 1}"
        body.append(f"    {end} = {start} + ({numel} + XBLOCK - 1) // XBLOCK")
        writer = TritonKernelWriter(part, program, first_block=start)
        writer.counter = (position + 1) * _NAMES_PER_PART
        lines = writer._body()
        assert not writer.sizes and not writer.wide, kernel.name
        condition = f"pid < {end}" if position == 0 else f"(pid >= {start}) & (pid < {end})"
        body.append(f"    if {condition}:")
        body += ["    " + _PART_NAMES.sub(rf"\1_{position}", line) for line in lines]
        storages.update(writer.storages)
        written.update(writer.written)
        start = end
        blocks_total += -(-numel // CONFIG.xblock)
    arguments = [KernelArgument(name, "pointer") for name in storages]
    params = [f"p_{a.name}" for a in arguments] + ["XBLOCK: tl.constexpr"]
    sources = dict.fromkeys(line for m in kernel.members for line in m.node.sources)
    header = [f"# {line}" for line in sources]
    header += ["@triton.jit", f"def {kernel.name}({', '.join(params)}):"]
    launch = {
        "signature": {
            f"p_{a.name}": POINTER_TYPES[program.storages[a.name].dtype] for a in arguments
        },
        "configs": [CONFIG.as_json()],
        "mutated": [f"p_{name}" for name in written if name in storages],
        "persistent": False,
    }
    return KernelSource(
        kernel.name,
        "\n".join([*header, *body]),
        arguments,
        launch=launch,
        grid=[str(blocks_total * CONFIG.xblock)],
    )
