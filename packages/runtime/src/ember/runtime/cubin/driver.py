"""The few CUDA driver calls a precompiled kernel needs, through ctypes on `libcuda.so.1`.

Loading a cubin into the current context (the primary context torch uses, made current if
the thread has none), looking up its function, raising its dynamic shared memory limit when
it needs more than the default 48 KiB, and `cuLaunchKernel`. Every failing call raises
KernelLaunchError with the driver's name of the error.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from ember.runtime.errors import EmberRuntimeError

CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
DEFAULT_SHARED = 49152
CUDA_ERROR_INVALID_CONTEXT = 201  # the calling thread has no current context


class KernelLaunchError(EmberRuntimeError, RuntimeError):
    """A CUDA driver call for a precompiled kernel failed."""


@functools.cache
def driver() -> Any:
    """`libcuda.so.1` with the argument types of the calls used here."""
    try:
        library = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise KernelLaunchError(
            f"cannot open the CUDA driver library libcuda.so.1 ({error}); precompiled GPU "
            "kernels need an NVIDIA driver"
        ) from error
    return declare(library)


def declare(library: Any) -> Any:
    """`library` with the argument types of the driver calls used here."""
    void_p, c_int, c_uint = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    library.cuModuleLoadData.argtypes = [ctypes.POINTER(void_p), ctypes.c_char_p]
    library.cuModuleGetFunction.argtypes = [ctypes.POINTER(void_p), void_p, ctypes.c_char_p]
    library.cuFuncSetAttribute.argtypes = [void_p, c_int, c_int]
    library.cuFuncGetAttribute.argtypes = [ctypes.POINTER(c_int), c_int, void_p]
    library.cuDeviceGetAttribute.argtypes = [ctypes.POINTER(c_int), c_int, c_int]
    library.cuCtxGetCurrent.argtypes = [ctypes.POINTER(void_p)]
    library.cuCtxSetCurrent.argtypes = [void_p]
    library.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(void_p), c_int]
    library.cuDeviceGet.argtypes = [ctypes.POINTER(c_int), c_int]
    library.cuGetErrorName.argtypes = [c_int, ctypes.POINTER(ctypes.c_char_p)]
    library.cuLaunchKernel.argtypes = [
        void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, void_p,
        ctypes.POINTER(void_p), ctypes.POINTER(void_p),
    ]  # fmt: skip
    return library


def raw_launch() -> Any:
    """`cuLaunchKernel` without declared argument types, for callers that pass the function
    and stream as `c_void_p` objects and the rest as small ints: ctypes then converts each
    argument in a few tens of nanoseconds, not the 2 us the declared types cost per call."""
    library = driver()
    if not isinstance(library, ctypes.CDLL):  # a stand-in (tests)
        return library.cuLaunchKernel
    function = library["cuLaunchKernel"]  # a new function object: `declare`'s stays as it is
    function.restype = ctypes.c_int
    return function


def check(result: int, what: str) -> None:
    """KernelLaunchError naming the driver's error unless `result` is CUDA_SUCCESS."""
    if result == 0:
        return
    name = ctypes.c_char_p()
    driver().cuGetErrorName(result, ctypes.byref(name))
    text = name.value.decode() if name.value else f"error {result}"
    raise KernelLaunchError(f"{what} failed: {text}")


def ensure_context(device: int) -> None:
    """Make `device`'s primary context current on this thread if none is."""
    library = driver()
    current = ctypes.c_void_p()
    check(library.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
    if current.value:
        return
    handle = ctypes.c_int()
    check(library.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(
        library.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle), "cuDevicePrimaryCtxRetain"
    )
    check(library.cuCtxSetCurrent(context), "cuCtxSetCurrent")


def load_function(cubin: bytes, name: str, shared: int, device: int) -> int:
    """The CUfunction `name` of `cubin`, loaded into `device`'s context, allowed `shared`
    bytes of dynamic shared memory."""
    library = driver()
    ensure_context(device)
    module = ctypes.c_void_p()
    check(library.cuModuleLoadData(ctypes.byref(module), cubin), f"loading the cubin of {name}")
    function = ctypes.c_void_p()
    check(
        library.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
        f"finding {name} in its cubin",
    )
    if shared > DEFAULT_SHARED:  # as Triton's loader does: opt in to the device's maximum
        optin, static = ctypes.c_int(), ctypes.c_int()
        check(
            library.cuDeviceGetAttribute(
                ctypes.byref(optin), CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device
            ),
            "cuDeviceGetAttribute",
        )
        check(
            library.cuFuncGetAttribute(
                ctypes.byref(static), CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function
            ),
            "cuFuncGetAttribute",
        )
        if shared > optin.value:
            raise KernelLaunchError(
                f"kernel {name} needs {shared} bytes of shared memory; this GPU allows "
                f"{optin.value}: build the package for this GPU"
            )
        check(
            library.cuFuncSetAttribute(
                function,
                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                optin.value - static.value,
            ),
            "cuFuncSetAttribute",
        )
    return int(function.value or 0)
