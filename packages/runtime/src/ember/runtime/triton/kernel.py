"""`TritonKernel`: one @triton.jit kernel of a loaded module, compiled our way and launched fast.

`kernel(numel, *args)` launches on the grid `(cdiv(numel, config[grid_block]), 1, 1)`. The first
call picks the mode (the Triton interpreter when `TRITON_INTERPRET=1`, else CUDA), the config
(`configs[0]`, or the autotuned one per sizes) and binds a launch; later calls go straight to
it. Variants are compiled with `variant.compile_variant`: aligned first, unaligned on demand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from ember.runtime.cache.store import ArtifactCache
from ember.runtime.errors import KernelSignatureError, TritonInterpreterError
from ember.runtime.native.launch_spec import NativeLaunch, parameter_codes
from ember.runtime.triton.autotune import AutotuneKey, Autotuner, Bench
from ember.runtime.triton.config import LaunchConfig
from ember.runtime.triton.launch import (
    InterpretedLaunch,
    Launch,
    compiled_launch,
    explain_arguments,
)
from ember.runtime.triton.module import reimport, require_triton, source_digest, triton_cache_dir
from ember.runtime.triton.target import cuda_target, target_fields
from ember.runtime.triton.variant import Variant, compile_variant, triton_cache_scope


class TritonKernel:
    """The kernel `module.<name>` with our signature, launch configs and launch fast path."""

    def __init__(
        self,
        module: ModuleType,
        name: str,
        *,
        signature: Mapping[str, str],
        configs: Sequence[LaunchConfig],
        grid_block: str,
        mutated: Sequence[str] = (),
        autotune: bool = False,
        cache: ArtifactCache | None = None,
        bench: Bench | None = None,
        known_aligned: Sequence[str] = (),
    ) -> None:
        self.module = module
        self.name = name
        require_triton()
        function = getattr(module, name, None)
        if function is None:
            raise KernelSignatureError(f"module {module.__name__} has no Triton kernel {name!r}")
        self.function: Any = function
        self.signature = tuple(signature.items())
        self.params = tuple(signature)
        self.configs = tuple(configs)
        if not self.configs:
            raise KernelSignatureError(f"Triton kernel {name!r} needs at least one LaunchConfig")
        for config in self.configs:
            if grid_block not in dict(config.constants):
                raise KernelSignatureError(
                    f"Triton kernel {name!r}: launch config ({config.describe()}) has no "
                    f"grid block {grid_block!r}"
                )
        for role, names in (("mutated", mutated), ("known_aligned", known_aligned)):
            unknown = [param for param in names if param not in signature]
            if unknown:
                raise KernelSignatureError(
                    f"Triton kernel {name!r}: {role} parameters {unknown} are not in its signature"
                )
        arg_names = list(getattr(self.function, "arg_names", ()))
        for config in self.configs:
            declared = [*self.params, *dict(config.constants)]
            if sorted(declared) != sorted(arg_names):
                raise KernelSignatureError(
                    f"Triton kernel {name!r} has parameters {arg_names}, but the signature and "
                    f"launch config ({config.describe()}) declare {declared}: give every "
                    f"non-constexpr parameter a type in the signature and every constexpr a value"
                )
        self.grid_block = grid_block
        self.mutated = tuple(mutated)
        self.autotune = autotune and len(self.configs) > 1
        self.cache = cache if cache is not None else ArtifactCache()
        self.autotuner = Autotuner(self.cache, bench)
        self.pointers = tuple(i for i, (_, kind) in enumerate(self.signature) if kind[0] == "*")
        self.sizes = tuple(i for i in range(len(self.params)) if i not in self.pointers)
        # Pointers checked for 16-byte alignment per call: all but those the caller vouches for
        # (buffers it allocated itself), which saves a data_ptr() call each.
        self.checked = tuple(i for i in self.pointers if self.params[i] not in known_aligned)
        self._tuned: dict[tuple[int, ...], Launch] = {}  # autotuned: a launch per sizes
        self._compiled: dict[Variant, Any] = {}
        self._lock = threading.Lock()
        # `launch(numel, *args)`: the first call binds, then this is the generated fast path
        # (`launch.source` shows it). Wrappers may call it directly to skip `__call__`.
        self.launch: Launch = self._first_launch

    def __call__(self, numel: int, *args: Any) -> None:
        launch = self.launch
        if launch != self._first_launch and not isinstance(launch, InterpretedLaunch):
            # the bound launch passes addresses and trusts their device: a caller's tensors
            # are checked here (a CPU tensor would reach the GPU as an address)
            problem = explain_arguments(self.name, self.params, self.pointers, args, cuda=True)
            if problem is not None:
                raise problem
        try:
            launch(numel, *args)
        except TypeError as error:
            if len(args) == len(self.params):
                raise
            problem = explain_arguments(self.name, self.params, self.pointers, args, cuda=False)
            raise (problem or error) from error

    def __repr__(self) -> str:
        return f"TritonKernel({self.module.__name__}.{self.name})"

    # ---- compiling ------------------------------------------------------------------------

    def planned_configs(self) -> tuple[LaunchConfig, ...]:
        """The configs a call may use: all of them when autotuning, else the first."""
        return self.configs if self.autotune else self.configs[:1]

    def variant(self, config: LaunchConfig, *, aligned: bool, target: Any) -> Variant:
        """The compile job for `config` on `target` (a GPUTarget)."""
        return Variant(
            path=str(self.module.__file__),
            kernel=self.name,
            signature=self.signature,
            constants=config.constants,
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            aligned=aligned,
            target=target_fields(target),
        )

    def compile(self, config: LaunchConfig, *, aligned: bool, target: Any) -> Any:
        """The `CompiledKernel` of one variant (compiled once per process, cached by Triton)."""
        variant = self.variant(config, aligned=aligned, target=target)
        compiled = self._compiled.get(variant)
        if compiled is None:
            if _is_interpreted(self.function):
                raise TritonInterpreterError(
                    f"cannot compile Triton kernel {self.name!r}: this process imported triton "
                    f"and the kernel module with TRITON_INTERPRET=1, so they run in the "
                    f"interpreter; compile in a process started with TRITON_INTERPRET=0"
                )
            compiled = compile_variant(self.function, variant, triton_cache_dir(self.cache))
            self._compiled[variant] = compiled
        return compiled

    def precompile(self, target: Any = None) -> list[Any]:
        """Compile the aligned variant of each planned config for `target` (default: the current
        CUDA device) without launching; returns the `CompiledKernel`s."""
        target = target if target is not None else cuda_target()
        return [self.compile(c, aligned=True, target=target) for c in self.planned_configs()]

    def native_launch(self, device: int) -> NativeLaunch | None:
        """The bound aligned variant for the native wrapper (None before the first launch,
        and for autotuned or interpreted kernels, or one needing scratch memory)."""
        launch = self.launch
        if launch == self._first_launch or self.autotune or isinstance(launch, InterpretedLaunch):
            return None
        config = self.configs[0]
        variant = self.variant(config, aligned=True, target=cuda_target(device))
        compiled = self._compiled.get(variant)
        codes = parameter_codes([kind for _, kind in self.signature])
        if compiled is None or codes is None:
            return None
        metadata = compiled.metadata
        scratch = getattr(metadata, "global_scratch_size", 0) or getattr(
            metadata, "profile_scratch_size", 0
        )
        function = getattr(compiled, "function", None)
        special = getattr(metadata, "launch_cooperative_grid", False) or getattr(
            metadata, "launch_pdl", False
        )
        if scratch or special or not function or getattr(metadata, "num_ctas", 1) != 1:
            return None
        block = dict(config.constants)[self.grid_block]
        return NativeLaunch(
            int(function), block, 32 * metadata.num_warps, int(metadata.shared), codes
        )

    # ---- the first call -------------------------------------------------------------------

    def _first_launch(self, numel: int, *args: Any) -> None:
        with self._lock:
            if self.launch == self._first_launch:
                self.launch = self._prepare(args)
        self.launch(numel, *args)

    def _prepare(self, args: tuple[Any, ...]) -> Launch:
        """The launch every later call takes: interpreted, one bound config, or per sizes."""
        if interpreting(self.function):
            return self._interpreted(self.configs[0])
        problem = explain_arguments(self.name, self.params, self.pointers, args, cuda=True)
        if problem is not None:
            raise problem
        device = args[self.pointers[0]].device.index if self.pointers else _current_device()
        if not self.autotune:
            return self._bind(self.configs[0], device, aligned=True)

        def tuned(numel: int, *args: Any) -> None:
            sizes = (numel, *[args[i] for i in self.sizes])
            launch = self._tuned.get(sizes)
            if launch is None:
                launch = self._tuned[sizes] = self._tune(numel, args, sizes, device)
            launch(numel, *args)

        return tuned

    def _interpreted(self, config: LaunchConfig) -> Launch:
        function = self.function
        if not _is_interpreted(function):
            # Imported before TRITON_INTERPRET was set: import the file again, now interpreted,
            # so the kernel and every @triton.jit helper it calls run in the interpreter.
            function = getattr(reimport(self.module, "interpreted"), self.name)
        constants = dict(config.constants)
        return InterpretedLaunch(
            kernel=self.name,
            params=self.params,
            pointers=self.pointers,
            function=function,
            constants=constants,
            block=constants[self.grid_block],
        )

    def _tune(
        self, numel: int, args: tuple[Any, ...], sizes: tuple[int, ...], device: int
    ) -> Launch:
        import torch

        positions = [self.params.index(name) for name in self.mutated]
        clones = list(args)
        for index in positions:
            original = args[index]
            clones[index] = torch.empty_strided(
                original.size(), original.stride(), dtype=original.dtype, device=original.device
            ).copy_(original)
        scratch = tuple(clones)

        def launch_for(config: LaunchConfig) -> Callable[[], None]:
            launch = self._bind(config, device, aligned=True)
            return lambda: launch(numel, *scratch)

        key = AutotuneKey(
            source=source_digest(self.module),
            kernel=self.name,
            sizes=tuple(int(size) for size in sizes),
            device=torch.cuda.get_device_name(device),
        )
        with torch.cuda.device(device):
            chosen = self.autotuner.choose(key, self.configs, launch_for)
        return self._bind(chosen, device, aligned=True)

    def _bind(self, config: LaunchConfig, device: int, *, aligned: bool) -> Launch:
        import torch
        from triton import knobs
        from triton.runtime.driver import driver

        compiled = self.compile(config, aligned=aligned, target=cuda_target(device))
        with torch.cuda.device(device), triton_cache_scope(triton_cache_dir(self.cache)):
            run = compiled.run  # loads the binary on `device` and builds Triton's C launcher
        constants = dict(config.constants)
        return compiled_launch(
            kernel=self.name,
            params=self.params,
            arg_names=list(self.function.arg_names),
            constants=constants,
            pointers=self.pointers,
            checked=self.checked if aligned else (),
            block=constants[self.grid_block],
            device=device,
            compiled=compiled,
            run=run,
            function=compiled.function,
            packed_metadata=compiled.packed_metadata,
            get_stream=driver.active.get_current_stream,
            unaligned=self._unaligned_factory(config, device) if aligned else None,
            enter_hook=knobs.runtime.launch_enter_hook,
            exit_hook=knobs.runtime.launch_exit_hook,
        )

    def _unaligned_factory(self, config: LaunchConfig, device: int) -> Callable[[], Launch]:
        bound: list[Launch] = []

        def unaligned() -> Launch:
            if not bound:
                bound.append(self._bind(config, device, aligned=False))
            return bound[0]

        return unaligned


def interpreting(function: Any) -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret) or _is_interpreted(function)


def _is_interpreted(function: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(function, InterpretedFunction)


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()
