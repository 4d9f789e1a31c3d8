"""`CubinKernel`: one precompiled kernel launched from its cubin through the CUDA driver.

It takes the calls a `TritonKernel` takes (`launch(numel, *args)`, arguments in signature
order, grid `cdiv(numel, block)`), so a generated wrapper runs unchanged with either. The
parameters the cubin declares are the signature's (pointers as 64-bit addresses, sizes as
64-bit integers; constexprs are compiled in) followed by Triton's two scratch pointers, which
are null unless the kernel asks for global scratch memory. Pointers that are not 16-byte
aligned take the unaligned variant, as `TritonKernel` does (or, where none was kept, the
caller's `fallback`: a Triton launch made on demand).

Once the aligned function is loaded on a device, `launch` is a small generated function (its
source in `launch.source`): the pointers' `data_ptr()`s, one `struct.pack_into` of every
argument into the kernel's own parameter buffer, the current stream read per call (so a
stream switch or a CUDA graph capture is followed) and `cuLaunchKernel`. Everything else
(unaligned pointers, scratch memory, a first launch on another device, a second thread
launching at the same time) takes the general path, `launch_general`. A kernel with a
`fallback` whose cubin the driver refuses on a device launches through Triton there.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.runtime.cubin import driver as cuda
from ember.runtime.cubin.driver import KernelLaunchError
from ember.runtime.errors import KernelArgumentError, KernelSignatureError
from ember.runtime.native.launch_spec import NativeLaunch, parameter_codes

logger = logging.getLogger("ember.runtime")

# struct codes of the parameter types, each padded to an 8-byte slot ("=": no alignment)
_SCALARS: dict[str, str] = {
    "i1": "b7x",
    "i8": "b7x",
    "i16": "h6x",
    "i32": "i4x",
    "i64": "q",
    "u1": "B7x",
    "u8": "B7x",
    "u16": "H6x",
    "u32": "I4x",
    "u64": "Q",
    "fp32": "f4x",
    "fp64": "d",
}

# launches that went through Triton instead of a cubin, by reason ("unaligned", "load
# failed"): read by benchmarks and tests, cleared with `fallbacks.clear()`
fallbacks: Counter[str] = Counter()


def supported_type(kind: str) -> bool:
    """Whether a signature type can be passed to a cubin by this launcher."""
    return kind.startswith("*") or kind in _SCALARS


def current_stream(device: int) -> int:
    """The raw handle of `device`'s current CUDA stream (torch's; its capture stream while a
    CUDA graph records)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def stream_reader() -> Callable[[int], int]:
    """The cheapest callable giving `current_stream(device)` (torch's raw query when present)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else current_stream


@dataclass(frozen=True)
class CubinVariant:
    """One compiled binary and what its launch needs (from Triton's compile metadata)."""

    cubin: bytes
    function: str  # the kernel's name in the cubin
    num_warps: int
    shared: int  # bytes of dynamic shared memory
    global_scratch_size: int = 0  # bytes per program
    global_scratch_align: int = 1


class _Refused:
    """A variant the driver would not load on a device: its launches go through Triton."""


_REFUSED = _Refused()


class CubinKernel:
    """`launch(numel, *args)` runs the kernel on the current stream of the args' device."""

    launch: Callable[..., None]

    def __init__(
        self,
        name: str,
        signature: Sequence[tuple[str, str]],
        block: int,
        aligned: CubinVariant,
        unaligned: CubinVariant | None = None,
        fallback: Callable[[], Callable[..., None]] | None = None,
    ) -> None:
        self.name = name
        self.params = tuple(param for param, _ in signature)
        self.kinds = tuple(kind for _, kind in signature)
        unsupported = [f"{param}: {kind}" for param, kind in signature if not supported_type(kind)]
        if unsupported:
            raise KernelSignatureError(f"kernel {name}: cannot launch parameters {unsupported}")
        self.pointers = tuple(i for i, (_, kind) in enumerate(signature) if kind.startswith("*"))
        # every parameter and the two scratch pointers, one 8-byte slot each
        self.packing = (
            "="
            + "".join("Q" if kind.startswith("*") else _SCALARS[kind] for _, kind in signature)
            + "QQ"
        )
        self.block = block
        self.variants = {True: aligned, False: unaligned}
        # without an unaligned variant, or where the driver refuses a cubin: a Triton launch
        # made on demand (the kernel compiled by Triton), or an error
        self._fallback = fallback
        self._triton_launch: Callable[..., None] | None = None
        self._functions: dict[tuple[bool, int], int | _Refused] = {}
        self._load_lock = threading.Lock()
        self._buffer_lock = threading.Lock()  # the fast path's parameter buffer
        self._fast_functions: dict[int, Any] = {}  # device -> aligned CUfunction (c_void_p)
        self._fast_made = False
        self.launch = self.launch_general

    def __repr__(self) -> str:
        return f"CubinKernel({self.name})"

    def __call__(self, numel: int, *args: Any) -> None:
        self.launch(numel, *args)

    def load(self, device: int) -> None:
        """Load the aligned function on `device` now (KernelLaunchError if the driver refuses
        it), so that a caller can choose another path before the first launch."""
        if isinstance(self._load_function(True, device, refuse=False), _Refused):
            raise KernelLaunchError(
                f"kernel {self.name}: the driver refused its cubin on cuda:{device}"
            )

    def native_launch(self, device: int) -> NativeLaunch | None:
        """The aligned variant on `device` for the native wrapper, once loaded there (None
        before, and for a variant that needs scratch memory or that the driver refused)."""
        variant = self.variants[True]
        function = self._functions.get((True, device))
        codes = parameter_codes(self.kinds)
        if variant is None or not isinstance(function, int) or codes is None:
            return None
        if variant.global_scratch_size:
            return None
        return NativeLaunch(function, self.block, 32 * variant.num_warps, variant.shared, codes)

    def launch_general(self, numel: int, *args: Any) -> None:
        """Every launch the generated fast path does not take."""
        if len(args) != len(self.params):
            raise KernelArgumentError(
                f"kernel {self.name} takes {len(self.params)} arguments ({', '.join(self.params)}), "
                f"got {len(args)}"
            )
        grid = (int(numel) + self.block - 1) // self.block
        if grid <= 0:
            return
        addresses = {i: args[i].data_ptr() for i in self.pointers}
        aligned = not any(address & 15 for address in addresses.values())
        variant = self.variants[aligned]
        if variant is None:
            fallbacks["unaligned"] += 1
            self._triton()(numel, *args)
            return
        device = args[self.pointers[0]].get_device() if self.pointers else _current_device()
        function = self._load_function(aligned, device, refuse=self._fallback is not None)
        if isinstance(function, _Refused):
            fallbacks["load failed"] += 1
            self._triton()(numel, *args)
            return
        values = [addresses[i] if i in addresses else args[i] for i in range(len(self.params))]
        scratch = None
        if variant.global_scratch_size:
            import torch

            scratch = torch.empty(
                grid * variant.global_scratch_size + variant.global_scratch_align,
                dtype=torch.uint8,
                device=torch.device("cuda", device),
            )
            address = scratch.data_ptr()
            values.append(address + (-address % variant.global_scratch_align))
        else:
            values.append(0)
        values.append(0)  # profile scratch: only profilers ask for it
        buffer, params = self._parameters()
        struct.pack_into(self.packing, buffer, 0, *values)
        for attempt in range(2):
            result = cuda.driver().cuLaunchKernel(
                function, grid, 1, 1, 32 * variant.num_warps, 1, 1, variant.shared,
                current_stream(device), params, None,
            )  # fmt: skip
            if result != cuda.CUDA_ERROR_INVALID_CONTEXT or attempt:
                break
            cuda.ensure_context(device)  # a thread with no context yet (autograd's backward)
        cuda.check(result, f"launching {self.name}")
        del scratch  # freed on the stream's order by the caching allocator
        if aligned and not variant.global_scratch_size and not self._fast_made:
            self._fast_made = True
            self.launch = self._fast_launch(variant)

    def _parameters(self) -> tuple[Any, Any]:
        """A fresh parameter buffer and the array of its slots' addresses."""
        count = len(self.params) + 2
        buffer = (ctypes.c_uint64 * count)()
        base = ctypes.addressof(buffer)
        params = (ctypes.c_void_p * count)(*[base + 8 * i for i in range(count)])
        return buffer, params

    def _triton(self) -> Callable[..., None]:
        if self._triton_launch is None:
            if self._fallback is None:
                raise KernelArgumentError(
                    f"kernel {self.name} got a pointer that is not 16-byte aligned and has no "
                    "unaligned variant; pass tensors that start at 16-byte aligned addresses"
                )
            self._triton_launch = self._fallback()
        return self._triton_launch

    def _load_function(self, aligned: bool, device: int, refuse: bool) -> int | _Refused:
        """The variant's CUfunction on `device`, loaded once; with `refuse`, a driver error
        marks it refused (Triton launches it there) instead of raising."""
        key = (aligned, device)
        function = self._functions.get(key)
        if function is not None:
            return function
        with self._load_lock:
            function = self._functions.get(key)
            if function is None:
                variant = self.variants[aligned]
                assert variant is not None
                try:
                    with _device_scope(device):  # its context is where the module loads
                        function = cuda.load_function(
                            variant.cubin, variant.function, variant.shared, device
                        )
                except KernelLaunchError as error:
                    if not refuse:
                        raise
                    logger.warning(
                        "kernel %s: the cached cubin does not load on cuda:%d (%s); it "
                        "launches through Triton there",
                        self.name, device, error,
                    )  # fmt: skip
                    function = _REFUSED
                self._functions[key] = function
                if aligned and isinstance(function, int):
                    self._fast_functions[device] = ctypes.c_void_p(function)
        return function

    def _fast_launch(self, variant: CubinVariant) -> Callable[..., None]:
        """The generated launch of the aligned variant on devices where it is loaded."""
        count = len(self.params)
        names = [f"a{i}" for i in range(count)]
        arguments = ", ".join(names)
        lines = [f"def launch(_e_numel, {arguments}):" if names else "def launch(_e_numel):"]
        if self.pointers:
            lines += [f"    _e_p{i} = a{i}.data_ptr()" for i in self.pointers]
            lines.append(f"    _e_device = a{self.pointers[0]}.get_device()")
            ored = " | ".join(f"_e_p{i}" for i in self.pointers)
            unaligned = f"({ored}) & 15 or "
        else:
            lines.append("    _e_device = _e_current_device()")
            unaligned = ""
        lines.append("    _e_function = _e_functions.get(_e_device)")
        lines.append(f"    if {unaligned}_e_function is None or not _e_lock.acquire(False):")
        lines.append(f"        return _e_general(_e_numel, {arguments})")
        lines.append("    try:")
        lines.append(f"        _e_grid = (_e_numel + {self.block - 1}) // {self.block}")
        lines.append("        if _e_grid > 0:")
        values = ", ".join([f"_e_p{i}" if i in self.pointers else n for i, n in enumerate(names)])
        values = f"{values}, 0, 0" if values else "0, 0"
        lines.append(f"            _e_pack(_e_buffer, 0, {values})")
        lines.append("            _e_raw = _e_stream(_e_device)")
        lines.append("            _e_handle = _e_streams.get(_e_raw)")
        lines.append("            if _e_handle is None:")
        lines.append("                _e_handle = _e_new_stream(_e_raw)")
        call = (
            f"_e_launch(_e_function, _e_grid, 1, 1, {32 * variant.num_warps}, 1, 1, "
            f"{variant.shared}, _e_handle, _e_params, None)"
        )
        lines.append(f"            _e_result = {call}")
        lines.append("            if _e_result:")
        # a thread where no context is current yet (autograd's device thread runs the
        # backward: torch's runtime calls make the primary context current lazily, driver
        # calls do not): make it current, then launch again
        lines.append(f"                if _e_result == {cuda.CUDA_ERROR_INVALID_CONTEXT}:")
        lines.append("                    _e_ensure_context(_e_device)")
        lines.append(f"                    _e_result = {call}")
        lines.append("                if _e_result:")
        lines.append("                    _e_check(_e_result, _e_what)")
        lines.append("    finally:")
        lines.append("        _e_lock.release()")
        source = "\n".join(lines) + "\n"
        buffer, params = self._parameters()
        namespace: dict[str, Any] = {
            "_e_current_device": _current_device,
            "_e_functions": self._fast_functions,
            "_e_lock": self._buffer_lock,
            "_e_general": self.launch_general,
            "_e_pack": struct.Struct(self.packing).pack_into,
            "_e_buffer": buffer,
            "_e_params": params,
            "_e_launch": cuda.raw_launch(),
            "_e_stream": stream_reader(),
            "_e_streams": _STREAMS,
            "_e_new_stream": _stream_handle,
            "_e_check": cuda.check,
            "_e_ensure_context": cuda.ensure_context,
            "_e_what": f"launching {self.name}",
        }
        exec(compile(source, f"<ember cubin launch of {self.name}>", "exec"), namespace)
        launch: Any = namespace["launch"]
        launch.source = source
        launch.keep = (buffer, params)  # alive as long as the function
        return launch


# raw stream -> its c_void_p, what the fast path passes to cuLaunchKernel (few streams live)
_STREAMS: dict[int, Any] = {}


def _stream_handle(raw: int) -> Any:
    if len(_STREAMS) > 256:
        _STREAMS.clear()
    handle = _STREAMS[raw] = ctypes.c_void_p(raw)
    return handle


def _device_scope(device: int) -> Any:
    """torch's `cuda.device(device)` where a GPU is present (its primary context current)."""
    import contextlib

    import torch

    if device >= 0 and torch.cuda.is_available():
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _current_device() -> int:
    import torch

    return int(torch.cuda.current_device())
