"""`CubinKernel` on the CPU with a fake CUDA driver: the parameter slots each launch passes
(general path and generated fast path), the stream read per launch, and the fallbacks to a
Triton launch (unaligned pointers, a cubin the driver refuses). Real launches need a GPU
(benchmarks/cubins_check.py)."""

from __future__ import annotations

import ctypes
import struct
import threading
from typing import Any

import pytest
import torch

from ember.runtime.cubin import CubinKernel, CubinVariant
from ember.runtime.cubin import driver as cuda
from ember.runtime.cubin import kernel as kernel_module
from ember.runtime.cubin.driver import KernelLaunchError

SIGNATURE = [("in_ptr0", "*fp32"), ("out_ptr0", "*fp32"), ("xnumel", "i32"), ("scale", "fp32")]
ALIGNED = CubinVariant(cubin=b"aligned", function="k_aligned", num_warps=4, shared=64)
UNALIGNED = CubinVariant(cubin=b"unaligned", function="k_unaligned", num_warps=2, shared=0)


class FakeDriver:
    """Records what each cuLaunchKernel would launch; `load_function` hands out handles."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []
        self.loaded: list[tuple[str, int]] = []
        self.refuse = False
        self.stream = 7

    def load_function(self, cubin: bytes, name: str, shared: int, device: int) -> int:
        if self.refuse:
            raise KernelLaunchError(f"loading the cubin of {name} failed: CUDA_ERROR_INVALID_IMAGE")
        self.loaded.append((name, device))
        return 1000 + len(self.loaded)

    def cuLaunchKernel(self, function: int, gx: int, gy: int, gz: int, bx: int, by: int,
                       bz: int, shared: int, stream: int, params: Any, extra: Any) -> int:  # fmt: skip
        slots = [ctypes.c_uint64.from_address(params[i]).value for i in range(6)]
        self.launches.append({"function": function, "grid": gx, "threads": bx,
                              "shared": shared, "stream": stream, "slots": slots})  # fmt: skip
        return 0


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    driver = FakeDriver()
    monkeypatch.setattr(cuda, "driver", lambda: driver)
    monkeypatch.setattr(cuda, "load_function", driver.load_function)
    monkeypatch.setattr(kernel_module, "current_stream", lambda device: driver.stream)
    monkeypatch.setattr(kernel_module, "stream_reader", lambda: lambda device: driver.stream)
    kernel_module.fallbacks.clear()
    return driver


def _bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def test_slots_of_general_and_fast_launches(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x, y = torch.zeros(1000), torch.zeros(1000)
    for _ in range(3):
        kernel.launch(1000, x, y, 1000, 0.5)
    assert kernel.launch != kernel.launch_general  # generated once the function was loaded
    assert "_e_pack" in kernel.launch.source  # type: ignore[attr-defined]
    expected = {"function": 1001, "grid": 8, "threads": 128, "shared": 64, "stream": 7,
                "slots": [x.data_ptr(), y.data_ptr(), 1000, _bits(0.5), 0, 0]}  # fmt: skip
    assert fake.launches == [expected] * 3
    assert fake.loaded == [("k_aligned", -1)]  # once


def test_negative_and_wide_scalars_fill_their_slots(fake: FakeDriver) -> None:
    signature = [("p", "*i64"), ("a", "i64"), ("b", "i32"), ("c", "fp64")]
    kernel = CubinKernel("k", signature, 64, ALIGNED)
    p = torch.zeros(4, dtype=torch.int64)
    kernel.launch(4, p, -(2**40), -3, 1.5)
    kernel.launch(4, p, -(2**40), -3, 1.5)
    first, second = (launch["slots"][:4] for launch in fake.launches)
    assert first == second == [p.data_ptr(), 2**64 - 2**40, 2**32 - 3,
                                struct.unpack("<Q", struct.pack("<d", 1.5))[0]]  # fmt: skip


def test_each_launch_reads_the_current_stream(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x = torch.zeros(64)
    streams = []
    for stream in (7, 11, 7, 13):  # a stream switch, as torch.cuda.graph's capture stream
        fake.stream = stream
        kernel.launch(64, x, x, 64, 1.0)
        streams.append(fake.launches[-1]["stream"])
    assert streams == [7, 11, 7, 13]


def test_empty_grid_launches_nothing(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x = torch.zeros(64)
    kernel.launch(64, x, x, 64, 1.0)
    kernel.launch(0, x, x, 0, 1.0)
    assert len(fake.launches) == 1


def test_unaligned_pointer_launches_through_triton(fake: FakeDriver) -> None:
    calls: list[tuple[Any, ...]] = []
    made: list[int] = []

    def fallback() -> Any:
        made.append(1)
        return lambda numel, *args: calls.append((numel, *args))

    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED, fallback=fallback)
    x = torch.zeros(65)
    kernel.launch(64, x, x, 64, 1.0)  # aligned: the cubin (and the fast path from now on)
    offset = x[1:]  # 4 bytes past a 16-byte boundary
    kernel.launch(64, offset, x, 64, 1.0)
    kernel.launch(64, x, offset, 64, 1.0)
    assert len(fake.launches) == 1 and len(calls) == 2 and made == [1]
    assert calls[0][1] is offset and calls[1][2] is offset
    assert kernel_module.fallbacks["unaligned"] == 2


def test_unaligned_pointer_takes_the_unaligned_variant(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED, UNALIGNED)
    x = torch.zeros(65)
    kernel.launch(64, x, x, 64, 1.0)
    kernel.launch(64, x[1:], x, 64, 1.0)
    assert [name for name, _ in fake.loaded] == ["k_aligned", "k_unaligned"]
    assert fake.launches[1]["threads"] == 64 and fake.launches[1]["slots"][0] == x[1:].data_ptr()


def test_unaligned_pointer_without_variant_or_fallback_is_an_error(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x = torch.zeros(65)
    with pytest.raises(Exception, match="16-byte aligned"):
        kernel.launch(64, x[1:], x, 64, 1.0)


def test_refused_cubin_launches_through_triton(fake: FakeDriver) -> None:
    calls: list[int] = []
    kernel = CubinKernel(
        "k", SIGNATURE, 128, ALIGNED, fallback=lambda: lambda numel, *args: calls.append(numel)
    )
    fake.refuse = True
    x = torch.zeros(64)
    kernel.launch(64, x, x, 64, 1.0)
    kernel.launch(32, x, x, 32, 1.0)  # refused once, not retried
    assert calls == [64, 32] and fake.launches == []
    assert kernel_module.fallbacks["load failed"] == 2
    with pytest.raises(KernelLaunchError, match="refused"):
        kernel.load(-1)  # asked again, after the launch marked it refused there


def test_refused_cubin_without_fallback_raises(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)  # an AOT package's kernel
    fake.refuse = True
    with pytest.raises(KernelLaunchError, match="INVALID_IMAGE"):
        kernel.launch(64, torch.zeros(64), torch.zeros(64), 64, 1.0)
    with pytest.raises(KernelLaunchError):
        kernel.load(0)


def test_launch_while_the_buffer_is_busy_takes_the_general_path(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x = torch.zeros(64)
    kernel.launch(64, x, x, 64, 1.0)
    kernel._buffer_lock.acquire()  # another thread inside its launch
    try:
        kernel.launch(64, x, x, 64, 2.0)
    finally:
        kernel._buffer_lock.release()
    assert fake.launches[1]["slots"] == [x.data_ptr(), x.data_ptr(), 64, _bits(2.0), 0, 0]


def test_threads_launching_at_once_pass_their_own_arguments(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x = torch.zeros(64)
    kernel.launch(64, x, x, 64, 0.0)

    def work(value: int) -> None:
        for _ in range(200):
            kernel.launch(64, x, x, value, 1.0)

    threads = [threading.Thread(target=work, args=(v,)) for v in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = {v: sum(1 for launch in fake.launches if launch["slots"][2] == v) for v in (1, 2, 3)}
    assert counts == {1: 200, 2: 200, 3: 200}


def test_wrong_argument_count(fake: FakeDriver) -> None:
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    with pytest.raises(Exception, match="takes 4 arguments"):
        kernel.launch(64, torch.zeros(64))
