"""Per-call cost of launching a tiny Triton kernel: Triton's own `fn[grid](...)`, ember's
`TritonKernel.__call__`, and an empty torch op for reference, in microseconds per call.

    python -m benchmarks.launch_overhead [--repeats 20] [--launches 1000] [--json PATH]

A pointwise kernel with six parameters (four pointers, a size, a constexpr block) on 1024
floats: each row is warmed up, then timed as `repeats` runs of `launches` calls with a
synchronize after each run; the median run gives microseconds per call. The "no-op" rows run
`TritonKernel.__call__` and `kernel.launch` (the generated fast path `__call__` calls) with
Triton's C launch function replaced by a Python no-op: the Python ember adds per call; and,
for reference, Triton's own Python launcher wrapper on the same no-op. Without CUDA only the
no-op rows are measured (the GPU rows are reported as skipped), so the script never fails on a
CPU machine; it is not part of CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in ("packages/prims/src", "packages/runtime/src"):
    if str(ROOT / source) not in sys.path:
        sys.path.insert(0, str(ROOT / source))

import torch  # noqa: E402

SOURCE = """
import triton
import triton.language as tl


@triton.jit
def fma_kernel(in_ptr0, in_ptr1, in_ptr2, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    a = tl.load(in_ptr0 + xindex, xmask)
    b = tl.load(in_ptr1 + xindex, xmask)
    c = tl.load(in_ptr2 + xindex, xmask)
    tl.store(out_ptr0 + xindex, a * b + c, xmask)
"""
SIGNATURE = {
    "in_ptr0": "*fp32",
    "in_ptr1": "*fp32",
    "in_ptr2": "*fp32",
    "out_ptr0": "*fp32",
    "xnumel": "i64",
}
NUMEL = 1024
BLOCK = 1024


def _noop(*args: Any) -> None:
    """Stands for Triton's launcher in the CPU-side rows."""


def per_call_us(
    call: Callable[[], Any], repeats: int, launches: int, sync: Callable[[], None]
) -> float:
    """Median over `repeats` runs of `launches` calls (synchronized per run), in µs per call."""
    for _ in range(max(100, launches // 10)):
        call()
    sync()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(launches):
            call()
        sync()
        runs.append((time.perf_counter() - start) / launches * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    options = parser.parse_args()
    try:
        import triton  # noqa: F401
    except ImportError:
        print(json.dumps({"skipped": "triton is not installed"}))
        return

    from ember.runtime import ArtifactCache, LaunchConfig, TritonKernel, load_triton_module
    from ember.runtime.triton.launch import compiled_launch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with tempfile.TemporaryDirectory() as root:
        cache = ArtifactCache(root)
        module = load_triton_module(SOURCE, cache)
        kernel = TritonKernel(
            module,
            "fma_kernel",
            signature=SIGNATURE,
            configs=[LaunchConfig((("XBLOCK", BLOCK),))],
            grid_block="XBLOCK",
            cache=cache,
        )
        a, b, c, out = (torch.randn(NUMEL, device=device) for _ in range(4))
        args = (a, b, c, out, NUMEL)
        results: dict[str, Any] = {
            "device": torch.cuda.get_device_name() if cuda else "cpu (GPU rows skipped)",
            "triton": triton.__version__,
            "torch": torch.__version__,
            "repeats": options.repeats,
            "launches": options.launches,
            "us_per_call": {},
        }
        timings: dict[str, float | None] = results["us_per_call"]
        if cuda:
            grid = (triton.cdiv(NUMEL, BLOCK),)
            module.fma_kernel[grid](*args, XBLOCK=BLOCK)
            kernel(NUMEL, *args)
            torch.testing.assert_close(out, a * b + c)
            timings["triton fn[grid](...)"] = per_call_us(
                lambda: module.fma_kernel[grid](*args, XBLOCK=BLOCK),
                options.repeats,
                options.launches,
                sync,
            )
            timings["ember TritonKernel(...)"] = per_call_us(
                lambda: kernel(NUMEL, *args), options.repeats, options.launches, sync
            )
            timings["ember kernel.launch(...)"] = per_call_us(
                lambda: kernel.launch(NUMEL, *args), options.repeats, options.launches, sync
            )
            timings["torch.empty(0, device='cuda')"] = per_call_us(
                lambda: torch.empty(0, device="cuda"), options.repeats, options.launches, sync
            )
        else:
            for name in (
                "triton fn[grid](...)",
                "ember TritonKernel(...)",
                "torch.empty(0, device='cuda')",
            ):
                timings[name] = None

        # The Python ember adds per call: the same fast path with Triton's launcher a no-op.
        # Triton's CUDA launcher object with a no-op in place of its compiled C function.
        from triton.backends.nvidia.driver import CudaLauncher

        launcher = object.__new__(CudaLauncher)
        launcher.launch = _noop
        launcher.num_ctas = 1
        launcher.global_scratch_size = launcher.profile_scratch_size = 0
        launcher.global_scratch_align = launcher.profile_scratch_align = 1
        launcher.launch_cooperative_grid = launcher.launch_pdl = False

        def noop_launch(checked: tuple[int, ...]) -> Any:
            return compiled_launch(
                kernel="fma_kernel",
                params=tuple(SIGNATURE),
                arg_names=module.fma_kernel.arg_names,
                constants={"XBLOCK": BLOCK},
                pointers=(0, 1, 2, 3),
                checked=checked,
                block=BLOCK,
                device=0,
                compiled=None,
                run=launcher,
                function=None,
                packed_metadata=None,
                get_stream=lambda index: 0,
            )

        noop = noop_launch((0, 1, 2, 3))
        kernel.launch = noop  # the bound launch, as after a first call
        timings["ember TritonKernel(...) (launcher no-op)"] = per_call_us(
            lambda: kernel(NUMEL, *args), options.repeats, options.launches * 10, lambda: None
        )
        timings["ember kernel.launch (launcher no-op)"] = per_call_us(
            lambda: kernel.launch(NUMEL, *args),
            options.repeats,
            options.launches * 10,
            lambda: None,
        )
        unchecked = noop_launch(())
        timings["ember kernel.launch, known_aligned (no-op)"] = per_call_us(
            lambda: unchecked(NUMEL, *args), options.repeats, options.launches * 10, lambda: None
        )
        timings["triton CudaLauncher.__call__ alone (no-op)"] = per_call_us(
            lambda: launcher(1, 1, 1, 0, None, None, None, None, None, *args, BLOCK),
            options.repeats,
            options.launches * 10,
            lambda: None,
        )
        timings["no-op C-launch stand-in alone (reference)"] = per_call_us(
            lambda: _noop(
                1, 1, 1, 0, None, False, False, None, None, None, None, None, None, *args, BLOCK
            ),
            options.repeats,
            options.launches * 10,
            lambda: None,
        )
    text = json.dumps(results, indent=2)
    print(text)
    if options.json is not None:
        options.json.write_text(text + "\n")
    print(f"\n{'launch':<44} {'µs/call':>9}")
    for name, value in timings.items():
        print(f"{name:<44} {'skipped' if value is None else f'{value:9.2f}':>9}")


if __name__ == "__main__":
    main()
