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
        function, stream = (getattr(x, "value", x) for x in (function, stream))  # c_void_p
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


FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
uint64_t slots[16]; uint64_t last_stream; unsigned last_grid, last_threads, last_shared, count;
unsigned context_sets;
static __thread void *current;  /* as the driver: a context is current per thread */
int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                   unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                   void **extra) {
    if (!current) return 201;  /* CUDA_ERROR_INVALID_CONTEXT */
    for (int i = 0; i < 6; i++) memcpy(&slots[i], params[i], 8);
    last_stream = (uint64_t)stream; last_grid = gx; last_threads = bx; last_shared = shared;
    count++;
    return 0;
}
int cuCtxGetCurrent(void **context) { *context = current; return 0; }
int cuCtxSetCurrent(void *context) { current = context; context_sets++; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **context, int device) { *context = (void *)1; return 0; }
int cuModuleLoadData(void **module, const char *image) {  /* 200: CUDA_ERROR_INVALID_IMAGE */
    if (memcmp(image, "bad", 3) == 0) return 200;
    *module = (void *)2; return 0;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
    *function = (void *)0x1234; return 0;
}
int cuFuncSetAttribute(void *function, int attribute, int value) { return 0; }
int cuFuncGetAttribute(int *value, int attribute, void *function) { *value = 0; return 0; }
int cuDeviceGetAttribute(int *value, int attribute, int device) { *value = 232448; return 0; }
int cuGetErrorName(int error, const char **name) {
    *name = error == 200 ? "CUDA_ERROR_INVALID_IMAGE"
          : error == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
"""


def _c_driver(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, stream: Any = lambda device: 5
) -> Any:
    """FAKE_LIBCUDA built and put in place of libcuda with the real argument types (skips
    without a C compiler); `stream(device)` is the current stream each launch reads."""
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source, library_path = tmp_path / "fake_cuda.c", tmp_path / "libfakecuda.so"
    source.write_text(FAKE_LIBCUDA)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library_path), str(source)], check=True)
    library = cuda.declare(ctypes.CDLL(str(library_path)))
    monkeypatch.setattr(cuda, "driver", lambda: library)
    monkeypatch.setattr(kernel_module, "current_stream", stream)
    monkeypatch.setattr(kernel_module, "stream_reader", lambda: stream)
    return library


def test_launches_through_ctypes_into_a_c_driver(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ctypes marshalling (the driver's argument types, the slot-address array, the
    module loading calls) into a C stand-in for libcuda: what a GPU's driver would read, and a
    cubin it refuses launched through Triton."""
    stream = [0x7F00_0000_1000]
    library = _c_driver(tmp_path, monkeypatch, lambda device: stream[0])
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x, y = torch.zeros(1000), torch.zeros(1000)
    for scale in (0.5, -2.0):  # the general path, then the generated one
        kernel.launch(1000, x, y, 1000, scale)
        slots = list((ctypes.c_uint64 * 6).in_dll(library, "slots"))
        assert slots == [x.data_ptr(), y.data_ptr(), 1000, _bits(scale), 0, 0]
        assert ctypes.c_uint64.in_dll(library, "last_stream").value == stream[0]
        assert ctypes.c_uint.in_dll(library, "last_grid").value == 8
        assert ctypes.c_uint.in_dll(library, "last_threads").value == 128
        assert ctypes.c_uint.in_dll(library, "last_shared").value == 64
        stream[0] += 0x100
    assert ctypes.c_uint.in_dll(library, "count").value == 2
    assert kernel.launch != kernel.launch_general
    calls: list[int] = []
    bad = CubinVariant(cubin=b"bad cubin", function="k", num_warps=4, shared=0)
    refused = CubinKernel("k", SIGNATURE, 128, bad, fallback=lambda: lambda n, *a: calls.append(n))
    with pytest.raises(KernelLaunchError, match="CUDA_ERROR_INVALID_IMAGE"):
        refused.load(-1)
    refused.launch(1000, x, y, 1000, 1.0)
    assert calls == [1000] and ctypes.c_uint.in_dll(library, "count").value == 2
    big = CubinVariant(cubin=b"cubin", function="k", num_warps=4, shared=100_000)
    CubinKernel("k", SIGNATURE, 128, big).load(-1)  # opts in to more shared memory


@pytest.mark.parametrize("warm", [False, True], ids=["general path", "fast path"])
def test_a_thread_without_a_current_context_launches(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, warm: bool
) -> None:
    """autograd runs the backward on its own device thread, where torch's runtime calls make
    the primary context current only lazily: the driver refuses a launch there with
    CUDA_ERROR_INVALID_CONTEXT until the kernel makes the context current (the H100's
    cached-cubin training steps failed so before)."""
    library = _c_driver(tmp_path, monkeypatch)
    kernel = CubinKernel("k", SIGNATURE, 128, ALIGNED)
    x, y = torch.zeros(1000), torch.zeros(1000)
    if warm:  # loaded and launched on this thread: the next launch takes the fast path
        kernel.launch(1000, x, y, 1000, 1.0)
        assert kernel.launch != kernel.launch_general
    else:
        kernel.load(-1)
    errors: list[BaseException] = []

    def backward_thread() -> None:
        try:
            kernel.launch(1000, x, y, 1000, 3.0)
            kernel.launch(1000, x, y, 1000, 4.0)  # the context stays current
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            errors.append(error)

    sets = ctypes.c_uint.in_dll(library, "context_sets").value
    thread = threading.Thread(target=backward_thread)
    thread.start()
    thread.join()
    assert errors == []
    assert list((ctypes.c_uint64 * 4).in_dll(library, "slots")) == [
        x.data_ptr(), y.data_ptr(), 1000, _bits(4.0),
    ]  # fmt: skip
    assert ctypes.c_uint.in_dll(library, "context_sets").value == sets + 1
