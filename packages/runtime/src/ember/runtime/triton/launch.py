"""The per-call launch paths: generated code for a compiled kernel on CUDA, or the interpreter.

`compiled_launch` generates one small Python function per bound variant (its source is kept
in `launch.source`): parameters by name, constexprs and the grid block as literals, no loop,
no dict, no `inspect`. Per call it ORs the pointers' `data_ptr()`s to check 16-byte alignment
(an unaligned one switches to the unaligned variant), computes the grid from numel, reads the
current stream once and calls Triton's launcher (its C function directly, when Triton's Python
wrapper would add nothing but a frame) with those addresses as ints, so the launcher neither
calls `data_ptr()` again nor asks the driver where each pointer lives (2199 pointers a
ResNet-50 training step); launch metadata and hooks only while a hook is set. The launch
therefore trusts its tensors to be on the kernel's device, as a generated wrapper's are (its
buffers are allocated there, its inputs' devices guarded; `TritonKernel` checks the first
call's, and every call through `TritonKernel.__call__`). A launch that fails is explained
afterwards (a CPU tensor names its parameter), so the checks cost nothing on calls that
succeed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.runtime.errors import KernelArgumentError, KernelDeviceError, TritonInterpreterError

Launch = Callable[..., None]  # launch(numel, *args), args in signature order

# What a kernel run by the interpreter says when it calls a helper that is still compiled-mode.
_TOO_LATE = "outside of the scope of a kernel"


def compiled_launch(
    *,
    kernel: str,
    params: Sequence[str],
    arg_names: Sequence[str],
    constants: Mapping[str, int],
    pointers: Sequence[int],
    checked: Sequence[int],
    block: int,
    device: int,
    compiled: Any,
    run: Callable[..., Any],
    function: Any,
    packed_metadata: Any,
    get_stream: Callable[[int], int],
    unaligned: Callable[[], Launch] | None = None,
    enter_hook: Any = None,
    exit_hook: Any = None,
) -> Launch:
    """The launch function of one compiled variant.

    `params` are the non-constexpr parameters in signature order (the call's arguments),
    `arg_names` all of the kernel's parameters in its own order (what Triton's launcher takes,
    constexprs included), `pointers` the positions in `params` of the pointer parameters.
    """
    for name in params:
        if not name.isidentifier() or name.startswith("_e_"):
            raise KernelArgumentError(f"Triton kernel {kernel!r}: unusable parameter name {name!r}")
    names = ", ".join(params)
    lines = [f"def launch(_e_numel, {names}):", "    try:"]
    # A checked pointer's address, read once: the alignment test and Triton's launcher both
    # take it (an int skips the launcher's own `data_ptr()` call and `cuPointerGetAttribute`).
    address = {params[i]: f"_e_a{i}" for i in checked}
    if checked:
        lines += [f"        _e_a{i} = {params[i]}.data_ptr()" for i in checked]
        ored = " | ".join(address.values())
        lines.append(f"        if ({ored}) & 15:")
        lines.append(f"            return _e_unaligned()(_e_numel, {names})")
    lines.append(f"        _e_grid = (_e_numel + {block - 1}) // {block}")
    lines.append(f"        _e_stream = _e_get_stream({device})")
    passed = ", ".join(
        repr(constants[n]) if n in constants else address.get(n, n) for n in arg_names
    )
    call_args = ", ".join(repr(constants[n]) if n in constants else n for n in arg_names)
    direct = _unwrap_cuda_launcher(run)
    if direct is not None:
        # What CudaLauncher.__call__ passes to its C function when no scratch memory is needed
        # (no global or profile scratch buffers), minus one Python frame per call.
        run, cooperative, pdl = direct
        flags = f"{cooperative!r}, {pdl!r}, None, None, "
    else:
        flags = ""
    start = f"_e_run(_e_grid, 1, 1, _e_stream, _e_function, {flags}_e_packed"
    plain = f"{start}, None, None, None, {passed})"
    hooked = [  # hooks and launch metadata see the tensors
        f"_e_metadata = _e_compiled.launch_metadata((_e_grid, 1, 1), _e_stream, {call_args})",
        f"{start}, _e_metadata, _e_enter, _e_exit, {call_args})",
    ]
    if enter_hook is None and exit_hook is None:
        lines.append(f"        {plain}")
    elif _is_chain(enter_hook) and _is_chain(exit_hook):
        # Triton 3.6's hooks are HookChains, never None and nearly always empty: building the
        # launch metadata and calling two empty chains cost more than the launch itself.
        # A hook added later (a profiler) is seen on the next launch.
        lines.append("        if _e_enter.calls or _e_exit.calls:")
        lines += [f"            {line}" for line in hooked]
        lines.append("        else:")
        lines.append(f"            {plain}")
    else:
        lines += [f"        {line}" for line in hooked]
    lines.append("    except Exception as _e_error:")
    lines.append(f"        _e_explain(_e_error, ({names},))")
    lines.append("        raise")
    source = "\n".join(lines) + "\n"

    def explain(error: Exception, args: tuple[Any, ...]) -> None:
        problem = explain_arguments(kernel, params, pointers, args, cuda=True)
        if problem is not None:
            raise problem from error

    namespace: dict[str, Any] = {
        "_e_unaligned": unaligned,
        "_e_get_stream": get_stream,
        "_e_compiled": compiled,
        "_e_run": run,
        "_e_function": function,
        "_e_packed": packed_metadata,
        "_e_enter": enter_hook,
        "_e_exit": exit_hook,
        "_e_explain": explain,
    }
    exec(compile(source, f"<ember launch of {kernel}>", "exec"), namespace)
    launch: Any = namespace["launch"]
    launch.source = source
    return launch


def _is_chain(hook: Any) -> bool:
    """Whether `hook` is a chain of hooks (Triton's HookChain: its `calls` may be empty)."""
    return isinstance(getattr(hook, "calls", None), list)


def _unwrap_cuda_launcher(run: Any) -> tuple[Callable[..., Any], bool, bool] | None:
    """Triton's CUDA launcher object as its C `launch` function and two flags, when calling
    that directly is exactly what the object would do (it needs no scratch buffers)."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:
        return None
    if type(run) is not CudaLauncher:
        return None
    if run.global_scratch_size or run.profile_scratch_size:
        return None
    return run.launch, bool(run.launch_cooperative_grid), bool(run.launch_pdl)


class InterpretedLaunch:
    """Runs a kernel through the Triton interpreter: `function[grid](*args, **constants)`."""

    def __init__(
        self,
        *,
        kernel: str,
        params: Sequence[str],
        pointers: Sequence[int],
        function: Any,
        constants: Mapping[str, int],
        block: int,
    ) -> None:
        self.kernel = kernel
        self.params = tuple(params)
        self.pointers = tuple(pointers)
        self.function = function
        self.constants = dict(constants)
        self.block = block

    def __call__(self, numel: int, *args: Any) -> None:
        problem = explain_arguments(self.kernel, self.params, self.pointers, args, cuda=False)
        if problem is not None:
            raise problem
        grid = ((numel + self.block - 1) // self.block,)
        try:
            self.function[grid](**dict(zip(self.params, args)), **self.constants)
        except Exception as error:
            if _TOO_LATE not in str(error):
                raise
            raise TritonInterpreterError(
                f"Triton kernel {self.kernel!r} calls a @triton.jit function (such as tl.sum) "
                f"that triton defined before TRITON_INTERPRET=1 was set: triton 3 reads the "
                f"variable when each function is defined, its own library at import. Set "
                f"TRITON_INTERPRET=1 in the environment before the process imports triton "
                f"(e.g. TRITON_INTERPRET=1 pytest ...)"
            ) from error


def explain_arguments(
    kernel: str,
    params: Sequence[str],
    pointers: Sequence[int],
    args: Sequence[Any],
    *,
    cuda: bool,
) -> KernelArgumentError | None:
    """The error a call with `args` deserves (wrong count, a non-tensor pointer, a CPU tensor
    for a CUDA kernel), or None when the arguments look right."""
    if len(args) != len(params):
        return KernelArgumentError(
            f"Triton kernel {kernel!r} takes {len(params)} arguments after numel "
            f"({', '.join(params)}), got {len(args)}"
        )
    import torch

    for index in pointers:
        if not isinstance(args[index], torch.Tensor):
            return KernelArgumentError(
                f"Triton kernel {kernel!r}: parameter {params[index]!r} is a pointer and needs "
                f"a tensor, got {type(args[index]).__name__}"
            )
    for name, arg in zip(params, args):
        if cuda and isinstance(arg, torch.Tensor) and arg.device.type != "cuda":
            return KernelDeviceError(
                f"Triton kernel {kernel!r} got a {arg.device.type} tensor for parameter "
                f"{name!r} (shape {tuple(arg.shape)}, {arg.dtype}); it runs on the GPU: move "
                f"the tensor to the GPU (tensor.cuda() or .to('cuda')) before the call"
            )
    return None
