"""The generated fast path with a fake Triton launcher (no GPU): the grid, the stream, constexprs
in the kernel's parameter order, the unaligned variant for an unaligned pointer, and a launch
that fails on a CPU tensor explained with the parameter's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ember.runtime import KernelDeviceError
from ember.runtime.triton.launch import Launch, compiled_launch

PARAMS = ("in_ptr0", "out_ptr0", "xnumel")


class FakeRun:
    """Stands for Triton's C launcher: records each call, or fails like it does on CPU memory."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.error = error

    def __call__(self, *args: Any) -> None:
        if self.error is not None:
            raise self.error
        self.calls.append(args)


def _launch(
    run: FakeRun,
    *,
    aligned: bool,
    unaligned: Launch | None = None,
    arg_names: tuple[str, ...] = (*PARAMS, "XBLOCK"),
) -> Launch:
    return compiled_launch(
        kernel="copy_kernel",
        params=PARAMS,
        arg_names=arg_names,
        constants={"XBLOCK": 32, "RBLOCK": 8},
        pointers=(0, 1),
        checked=(0, 1) if aligned else (),
        block=32,
        device=7,
        compiled=None,
        run=run,
        function="cu-function",
        packed_metadata=(4, 1, 0),
        get_stream=lambda device: 1000 + device,
        unaligned=(lambda: unaligned) if unaligned is not None else None,
    )


def _device_zero_launch(
    run: FakeRun,
    kernel: str,
    params: tuple[str, ...],
    pointers: tuple[int, ...],
    checked: tuple[int, ...],
) -> Launch:
    """A launch of `kernel` on device 0 with one XBLOCK of 32, no compiled kernel behind it."""
    return compiled_launch(
        kernel=kernel,
        params=params,
        arg_names=(*params, "XBLOCK"),
        constants={"XBLOCK": 32},
        pointers=pointers,
        checked=checked,
        block=32,
        device=0,
        compiled=None,
        run=run,
        function=None,
        packed_metadata=None,
        get_stream=lambda device: 0,
    )


def test_fast_path_arguments() -> None:
    run = FakeRun()
    launch = _launch(run, aligned=True)
    x, out = torch.empty(128), torch.empty(128)
    launch(100, x, out, 100)
    # checked pointers go to the launcher as the addresses the alignment test read
    addresses = (x.data_ptr(), out.data_ptr())
    assert run.calls == [
        (4, 1, 1, 1007, "cu-function", (4, 1, 0), None, None, None, *addresses, 100, 32)
    ]
    launch(0, x, out, 0)  # an empty launch has grid 0 (Triton's launcher skips it)
    assert run.calls[-1][:3] == (0, 1, 1)


def test_constexprs_follow_the_kernels_parameter_order() -> None:
    run = FakeRun()
    launch = _launch(
        run, aligned=True, arg_names=("XBLOCK", "in_ptr0", "RBLOCK", "out_ptr0", "xnumel")
    )
    x, out = torch.empty(16), torch.empty(16)
    launch(16, x, out, 16)
    assert run.calls[0][9:] == (32, x.data_ptr(), 8, out.data_ptr(), 16)


def test_unaligned_pointer_uses_the_unaligned_variant() -> None:
    aligned_run, unaligned_run = FakeRun(), FakeRun()
    launch = _launch(aligned_run, aligned=True, unaligned=_launch(unaligned_run, aligned=False))
    x, out = torch.empty(129)[1:], torch.empty(128)
    assert x.data_ptr() % 16 != 0
    launch(128, x, out, 128)
    assert aligned_run.calls == [] and len(unaligned_run.calls) == 1
    assert "data_ptr" not in _launch(unaligned_run, aligned=False).source  # type: ignore[attr-defined]


def test_known_aligned_pointers_are_not_checked() -> None:
    run = FakeRun()
    # out_ptr0 is a buffer the wrapper allocated
    launch = _device_zero_launch(run, "copy_kernel", PARAMS, (0, 1), (0,))
    assert "in_ptr0.data_ptr()" in launch.source  # type: ignore[attr-defined]
    assert "out_ptr0.data_ptr()" not in launch.source  # type: ignore[attr-defined]
    x, out = torch.empty(8), torch.empty(8)
    launch(8, x, out, 8)
    assert run.calls[0][9:12] == (x.data_ptr(), out, 8)  # an unchecked pointer goes as it is


def test_cpu_tensor_names_the_parameter() -> None:
    error = ValueError("Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)")
    launch = _launch(FakeRun(error), aligned=True)
    with pytest.raises(
        KernelDeviceError, match=r"cpu tensor for parameter 'in_ptr0'.*move the tensor to the GPU"
    ) as caught:
        launch(64, torch.empty(64), torch.empty(64), 64)
    assert caught.value.__cause__ is error


def test_launch_hooks_get_launch_metadata() -> None:
    class Compiled:
        def launch_metadata(self, grid: tuple[int, int, int], stream: int, *args: Any) -> str:
            return f"metadata grid={grid} stream={stream} args={len(args)}"

    run = FakeRun()

    def enter(metadata: Any) -> None:
        pass

    launch = compiled_launch(
        kernel="copy_kernel",
        params=PARAMS,
        arg_names=(*PARAMS, "XBLOCK"),
        constants={"XBLOCK": 32},
        pointers=(0, 1),
        checked=(0, 1),
        block=32,
        device=2,
        compiled=Compiled(),
        run=run,
        function=None,
        packed_metadata=None,
        get_stream=lambda device: 5,
        enter_hook=enter,
    )
    x, out = torch.empty(64), torch.empty(64)
    launch(64, x, out, 64)
    assert run.calls[0][6:9] == ("metadata grid=(2, 1, 1) stream=5 args=4", enter, None)
    assert run.calls[0][9:11] == (x, out)  # hooks and launch metadata see the tensors


def test_direct_call_passes_what_tritons_cuda_launcher_would() -> None:
    driver = pytest.importorskip("triton.backends.nvidia.driver")
    recorded: list[tuple[Any, ...]] = []

    # Triton's CUDA launcher object without its compiled C module: `launch` records instead.
    launcher = object.__new__(driver.CudaLauncher)
    launcher.launch = lambda *args: recorded.append(args)
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid = False
    launcher.launch_pdl = False

    launch = compiled_launch(
        kernel="copy_kernel",
        params=PARAMS,
        arg_names=(*PARAMS, "XBLOCK"),
        constants={"XBLOCK": 32},
        pointers=(0, 1),
        checked=(0, 1),
        block=32,
        device=3,
        compiled=None,
        run=launcher,
        function=1234,
        packed_metadata=(4, 1, 0),
        get_stream=lambda device: 99,
    )
    assert "_e_run(_e_grid, 1, 1, _e_stream, _e_function, False, False, None, None" in launch.source  # type: ignore[attr-defined]
    x, out = torch.empty(64), torch.empty(64)
    launch(64, x, out, 64)
    addresses = x.data_ptr(), out.data_ptr()  # Triton's C launcher takes ints as addresses
    launcher(2, 1, 1, 99, 1234, (4, 1, 0), None, None, None, *addresses, 64, 32)  # Triton's path
    assert len(recorded) == 2 and recorded[0] == recorded[1]

    launcher.global_scratch_size = 128  # needs scratch memory: keep Triton's Python wrapper
    wrapped = compiled_launch(
        kernel="copy_kernel",
        params=PARAMS,
        arg_names=(*PARAMS, "XBLOCK"),
        constants={"XBLOCK": 32},
        pointers=(0, 1),
        checked=(),
        block=32,
        device=3,
        compiled=None,
        run=launcher,
        function=1234,
        packed_metadata=(4, 1, 0),
        get_stream=lambda device: 99,
    )
    assert "_e_function, _e_packed" in wrapped.source  # type: ignore[attr-defined]


def test_empty_hook_chains_cost_no_metadata_and_a_hook_added_later_is_called() -> None:
    """Triton 3.6's launch hooks are chains that are never None and nearly always empty: with
    none in them a launch builds no metadata and passes no hooks (on the H100 the metadata
    and two empty chains were 516 calls of each a ResNet-50 training step); a hook added
    later gets its metadata on the next launch."""
    knobs = pytest.importorskip("triton.knobs")
    made: list[tuple[int, int, int]] = []

    class Compiled:
        def launch_metadata(self, grid: tuple[int, int, int], stream: int, *args: Any) -> str:
            made.append(grid)
            return "metadata"

    enter, leave = knobs.HookChain(), knobs.HookChain(reversed=True)
    run = FakeRun()
    launch = compiled_launch(
        kernel="copy_kernel",
        params=PARAMS,
        arg_names=(*PARAMS, "XBLOCK"),
        constants={"XBLOCK": 32},
        pointers=(0, 1),
        checked=(),
        block=32,
        device=0,
        compiled=Compiled(),
        run=run,
        function=None,
        packed_metadata=None,
        get_stream=lambda device: 5,
        enter_hook=enter,
        exit_hook=leave,
    )
    x, out = torch.empty(64), torch.empty(64)
    launch(64, x, out, 64)
    assert made == [] and run.calls[0][6:9] == (None, None, None)
    seen: list[Any] = []
    enter.add(seen.append)
    launch(64, x, out, 64)
    assert made == [(2, 1, 1)] and run.calls[1][6:9] == ("metadata", enter, leave)


def test_kernel_call_checks_devices_the_bound_launch_trusts(tmp_path: Path) -> None:
    """The bound launch passes addresses (no device check by Triton's launcher): a CPU tensor
    through `TritonKernel.__call__` is refused by name before it reaches the launch."""
    from ember.runtime import ArtifactCache, LaunchConfig, TritonKernel, load_triton_module

    from .kernels import POINTWISE, POINTWISE_SIGNATURE

    cache = ArtifactCache(tmp_path)
    kernel = TritonKernel(
        load_triton_module(POINTWISE, cache),
        "add_kernel",
        signature=POINTWISE_SIGNATURE,
        configs=[LaunchConfig((("XBLOCK", 32),))],
        grid_block="XBLOCK",
        cache=cache,
    )
    run = FakeRun()
    kernel.launch = _device_zero_launch(  # what `_bind` makes on a GPU, with a fake launcher
        run, "add_kernel", ("in_ptr0", "in_ptr1", "out_ptr0", "xnumel"), (0, 1, 2), (0, 1, 2)
    )
    a, b, out = torch.ones(8), torch.ones(8), torch.empty(8)
    with pytest.raises(KernelDeviceError, match=r"parameter 'in_ptr0'.*move the tensor to the GPU"):
        kernel(8, a, b, out, 8)
    assert run.calls == []
    kernel.launch(8, a, b, out, 8)  # the wrapper's path: trusted
    assert run.calls[0][9:12] == (a.data_ptr(), b.data_ptr(), out.data_ptr())
