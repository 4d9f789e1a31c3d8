"""Checks that compile real kernels (PTX for sm_90, no GPU needed), run as a script in a process
with `TRITON_INTERPRET=0`: the test process interprets Triton (conftest.py), and triton decides
that when it is imported.

    python compile_checks.py DIRECTORY CHECK...    prints {"CHECK": "ok" | "error text", ...}
"""

from __future__ import annotations

import io
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernels import COPY, COPY_SIGNATURE, POINTWISE, POINTWISE_SIGNATURE
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler.errors import CompilationError

from ember.runtime import (
    ArtifactCache,
    LaunchConfig,
    TritonKernel,
    compile_kernels,
    load_triton_module,
)

SM90 = GPUTarget("cuda", 90, 32)


def aligned_variants(root: Path) -> None:
    """The aligned variant vectorizes an unmasked copy, the unaligned one cannot; sizes stay
    unspecialized; Triton's cache lives under the ember cache root."""
    cache = ArtifactCache(root)
    config = LaunchConfig((("XBLOCK", 1024),), num_warps=4)
    kernel = TritonKernel(
        load_triton_module(COPY, cache),
        "copy_kernel",
        signature=COPY_SIGNATURE,
        configs=[config],
        grid_block="XBLOCK",
        cache=cache,
    )
    [aligned] = kernel.precompile(SM90)
    unaligned = kernel.compile(config, aligned=False, target=SM90)
    for compiled in (aligned, unaligned):
        assert ".target sm_90" in compiled.asm["ptx"]
        assert compiled.metadata.num_warps == 4
        # xnumel is a runtime i64: never specialized (not even 1 or a multiple of 16)
        assert ".param .u64 copy_kernel_param_2" in compiled.asm["ptx"]
    assert "tt.divisibility = 16" in aligned.asm["ttir"]
    assert "tt.divisibility" not in unaligned.asm["ttir"]
    assert "ld.global.v4" in aligned.asm["ptx"]  # 16-byte vector loads need aligned pointers
    assert "ld.global.v4" not in unaligned.asm["ptx"]
    assert any((root / "triton" / "cache").iterdir())
    assert kernel.precompile(SM90)[0] is aligned  # kept per variant


def cpu_tensor_is_explained(root: Path) -> None:
    """Outside the interpreter a kernel runs on the GPU: a CPU tensor names its parameter."""
    import torch

    from ember.runtime import KernelDeviceError

    cache = ArtifactCache(root)
    kernel = TritonKernel(
        load_triton_module(COPY, cache),
        "copy_kernel",
        signature=COPY_SIGNATURE,
        configs=[LaunchConfig((("XBLOCK", 64),))],
        grid_block="XBLOCK",
        cache=cache,
    )
    try:
        kernel(8, torch.zeros(8), torch.zeros(8), 8)
    except KernelDeviceError as error:
        assert "parameter 'in_ptr0'" in str(error) and "move the tensor to the GPU" in str(error)
    else:
        raise AssertionError("a CPU tensor must be refused")


def _kernels(cache: ArtifactCache, tag: str) -> list[TritonKernel]:
    # `tag` changes the kernels' source, so each check starts from a cold Triton cache.
    pointwise = load_triton_module(POINTWISE.replace("a * 2 + b", f"a * 2 + b + {tag}"), cache)
    copy = load_triton_module(
        COPY.replace("tl.load(in_ptr0 + xindex))", f"tl.load(in_ptr0 + xindex) + {tag})"), cache
    )
    return [
        TritonKernel(
            pointwise,
            "add_kernel",
            signature=POINTWISE_SIGNATURE,
            configs=[
                LaunchConfig((("XBLOCK", 128),)),
                LaunchConfig((("XBLOCK", 256),), num_warps=8),
            ],
            grid_block="XBLOCK",
            autotune=True,  # both configs are compiled
            cache=cache,
        ),
        TritonKernel(
            copy,
            "copy_kernel",
            signature=COPY_SIGNATURE,
            configs=[LaunchConfig((("XBLOCK", 512),))],
            grid_block="XBLOCK",
            cache=cache,
        ),
    ]


def _compiles(body: Callable[[], object]) -> list[bool]:
    """The cache_hit flag of every Triton compile in this process while `body` runs."""
    seen: list[bool] = []

    def listener(*, cache_hit: bool, **_: Any) -> None:
        seen.append(cache_hit)

    with knobs.compilation.scope():
        knobs.compilation.listener = listener
        body()
    return seen


def workers_warm_the_cache(root: Path) -> None:
    kernels = _kernels(ArtifactCache(root), "1.0")
    stderr = io.StringIO()
    seen = _compiles(
        lambda: compile_kernels(kernels, SM90, workers=2, stream=stderr, progress_threshold=1e9)
    )
    assert seen == [True, True, True], seen  # workers compiled; this process only hit the cache
    assert stderr.getvalue() == ""  # faster than the threshold: no progress bar
    assert _compiles(lambda: [k.precompile(SM90) for k in kernels]) == []  # kept per kernel


def one_worker_compiles_in_process(root: Path) -> None:
    kernels = _kernels(ArtifactCache(root), "2.0")[1:]
    assert _compiles(lambda: compile_kernels(kernels, SM90, workers=1)) == [False]


def warm_process_starts_no_worker(root: Path) -> None:
    """Variants compiled once (by workers, here) are compiled in-process from Triton's cache
    by kernels made afresh, as a new process makes them: no worker starts."""
    import ember.runtime.triton.compile_pool as pool

    compile_kernels(_kernels(ArtifactCache(root), "4.0"), SM90, workers=2)
    fresh = _kernels(ArtifactCache(root), "4.0")  # the same sources: the same variants
    warm = pool._warm

    def no_workers(*args: object) -> None:
        raise AssertionError("a warm compile started workers")

    pool._warm = no_workers  # type: ignore[assignment]
    try:
        seen = _compiles(lambda: compile_kernels(fresh, SM90, workers=2))
    finally:
        pool._warm = warm
    assert seen == [True, True, True], seen


def broken_kernel_raises_here(root: Path) -> None:
    cache = ArtifactCache(root)
    broken = load_triton_module(POINTWISE.replace("a * 2 + b", "a * 2 + undefined_name"), cache)
    broken_kernel = TritonKernel(
        broken,
        "add_kernel",
        signature=POINTWISE_SIGNATURE,
        configs=[LaunchConfig((("XBLOCK", 128),))],
        grid_block="XBLOCK",
        cache=cache,
    )
    kernels = [*_kernels(cache, "3.0")[1:], broken_kernel]
    try:
        compile_kernels(kernels, SM90, workers=2)
    except CompilationError as error:
        assert "_scaled(a, b)" in str(error)
    else:
        raise AssertionError("a kernel that does not compile must raise")


CHECKS = {
    check.__name__: check
    for check in (
        aligned_variants,
        cpu_tensor_is_explained,
        workers_warm_the_cache,
        one_worker_compiles_in_process,
        warm_process_starts_no_worker,
        broken_kernel_raises_here,
    )
}


def main(argv: list[str]) -> None:
    root = Path(argv[1])
    results = {}
    for name in argv[2:]:
        try:
            CHECKS[name](root / name)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv)
