"""`CubinKernel`: one kernel of an ahead-of-time package, launched from its cubin.

It takes the calls a `TritonKernel` takes (`launch(numel, *args)`, arguments in signature
order, grid `cdiv(numel, block)`), so a generated wrapper runs unchanged with either. The
parameters the cubin declares are the signature's (pointers as 64-bit addresses, sizes as
64-bit integers; constexprs are compiled in) followed by Triton's two scratch pointers, which
are null unless the kernel asks for global scratch memory. Pointers that are not 16-byte
aligned take the unaligned variant, as `TritonKernel` does (or, where none was kept, a
launch made on demand by the caller's `fallback`).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ember.runtime.cubin.driver import check, driver, load_function
from ember.runtime.errors import KernelArgumentError, KernelSignatureError

_SCALARS: dict[str, type[Any]] = {
    "i1": ctypes.c_int8,
    "i8": ctypes.c_int8,
    "i16": ctypes.c_int16,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "u1": ctypes.c_uint8,
    "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32,
    "u64": ctypes.c_uint64,
    "fp32": ctypes.c_float,
    "fp64": ctypes.c_double,
}


def supported_type(kind: str) -> bool:
    """Whether a signature type can be passed to a cubin by this launcher."""
    return kind.startswith("*") or kind in _SCALARS


@dataclass(frozen=True)
class CubinVariant:
    """One compiled binary and what its launch needs (from Triton's compile metadata)."""

    cubin: bytes
    function: str  # the kernel's name in the cubin
    num_warps: int
    shared: int  # bytes of dynamic shared memory
    global_scratch_size: int = 0  # bytes per program
    global_scratch_align: int = 1


class CubinKernel:
    """`launch(numel, *args)` runs the kernel on the current stream of the args' device."""

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
        unsupported = [f"{param}: {kind}" for param, kind in signature if not supported_type(kind)]
        if unsupported:
            raise KernelSignatureError(f"kernel {name}: cannot launch parameters {unsupported}")
        self.types = tuple(
            ctypes.c_uint64 if kind.startswith("*") else _SCALARS[kind] for _, kind in signature
        )
        self.pointers = tuple(i for i, (_, kind) in enumerate(signature) if kind.startswith("*"))
        self.block = block
        self.variants = {True: aligned, False: unaligned}
        # without an unaligned variant: a launch for unaligned pointers made on demand (the
        # kernel compiled by Triton), or an error
        self._fallback = fallback
        self._fallback_launch: Callable[..., None] | None = None
        self._functions: dict[tuple[bool, int], int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CubinKernel({self.name})"

    def __call__(self, numel: int, *args: Any) -> None:
        self.launch(numel, *args)

    def launch(self, numel: int, *args: Any) -> None:
        import torch

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
            self._unaligned_fallback()(numel, *args)
            return
        device = (
            args[self.pointers[0]].device.index if self.pointers else torch.cuda.current_device()
        )
        function = self._function(aligned, variant, device)
        values = [
            kind(addresses[i] if i in addresses else args[i]) for i, kind in enumerate(self.types)
        ]
        scratch = None
        if variant.global_scratch_size:
            scratch = torch.empty(
                grid * variant.global_scratch_size + variant.global_scratch_align,
                dtype=torch.uint8,
                device=torch.device("cuda", device),
            )
            address = scratch.data_ptr()
            address += -address % variant.global_scratch_align
            values.append(ctypes.c_uint64(address))
        else:
            values.append(ctypes.c_uint64(0))
        values.append(ctypes.c_uint64(0))  # profile scratch: only profilers ask for it
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(value) for value in values])
        stream = torch.cuda.current_stream(device).cuda_stream
        result = driver().cuLaunchKernel(
            function, grid, 1, 1, 32 * variant.num_warps, 1, 1, variant.shared, stream, params, None
        )
        check(result, f"launching {self.name}")
        del scratch  # freed on the stream's order by the caching allocator

    def _unaligned_fallback(self) -> Callable[..., None]:
        if self._fallback_launch is None:
            if self._fallback is None:
                raise KernelArgumentError(
                    f"kernel {self.name} got a pointer that is not 16-byte aligned and has no "
                    "unaligned variant; pass tensors that start at 16-byte aligned addresses"
                )
            self._fallback_launch = self._fallback()
        return self._fallback_launch

    def _function(self, aligned: bool, variant: CubinVariant, device: int) -> int:
        key = (aligned, device)
        function = self._functions.get(key)
        if function is None:
            with self._lock:
                function = self._functions.get(key)
                if function is None:
                    function = load_function(
                        variant.cubin, variant.function, variant.shared, device
                    )
                    self._functions[key] = function
        return function
