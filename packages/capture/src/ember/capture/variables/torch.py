"""torch itself: torch functions and tensor methods (run on tracing tensors, so the tracer
records them), Python modules such as `torch` or `torch.nn.functional`, and the grad-mode
context managers (`no_grad`, `enable_grad`, `set_grad_enabled`).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from ember.capture.guards.kinds import GuardKind
from ember.capture.guards.source import AttrSource, Source
from ember.capture.unsupported import Unsupported
from ember.capture.variables.attention_mask import attention_arguments, is_attention
from ember.capture.variables.base import Variable
from ember.capture.variables.constant import ConstantVariable
from ember.prims import Node, TraceError, register_op

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame

T = TypeVar("T")

# Python modules whose attributes capture trusts not to be reassigned (no guards on them).
_TRUSTED_MODULES = ("torch", "math", "operator", "builtins", "functools", "itertools")

# torch functions that change global state when called; capture must not run them.
_GLOBAL_STATE = {
    "manual_seed": "seeding the random generator",
    "seed": "seeding the random generator",
    "set_default_dtype": "changing the default dtype",
    "set_default_device": "changing the default device",
    "set_printoptions": "changing print options",
    "use_deterministic_algorithms": "changing determinism settings",
    "set_num_threads": "changing the thread count",
}


def _stream_capturing(module: Any) -> Callable[[], bool]:
    # Without the backend initialized no stream is capturing (the call itself would raise
    # on a build without that backend).
    def answer() -> bool:
        return bool(module.is_initialized() and module.is_current_stream_capturing())

    return answer


# torch functions that answer a question about the process, not the tensors: capture asks
# them for real and uses the answer as a constant.
QUERIES: dict[Any, Callable[[], Any]] = {
    torch.is_grad_enabled: torch.is_grad_enabled,
    torch.jit.is_scripting: lambda: False,
    torch.jit.is_tracing: lambda: False,
    torch.compiler.is_exporting: lambda: False,
    torch.cuda.is_available: torch.cuda.is_available,
    torch.cuda.is_current_stream_capturing: _stream_capturing(torch.cuda),
}
if hasattr(torch, "xpu") and hasattr(torch.xpu, "is_current_stream_capturing"):
    QUERIES[torch.xpu.is_current_stream_capturing] = _stream_capturing(torch.xpu)

# Answered by the session (CaptureSession.answer_compiling): True as under torch.compile, so
# library code takes its compiler-friendly path (transformers skips its ContextVar and
# data-dependent mask checks); False, eager's answer, where that path raised.
COMPILER_QUERIES = (torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling)


# The Graph op that switches grad mode where the user's code did (a `with no_grad():` block).
# TODO(issue 4 report): this op belongs in ember-prims' op set.
SET_GRAD_ENABLED = "ember::set_grad_enabled.default"


def _set_grad_enabled(enabled: bool) -> tuple[()]:
    torch.set_grad_enabled(enabled)
    return ()


register_op(SET_GRAD_ENABLED, _set_grad_enabled)


def record_grad_mode(frame: Frame, enabled: bool) -> None:
    """Switch grad mode now and record the switch as a Graph node."""
    torch.set_grad_enabled(enabled)
    node = Node(SET_GRAD_ENABLED, [enabled], {}, [], frame.session.location)
    frame.session.tracer.graph.nodes.append(node)


GRAD_MODE_CLASSES: tuple[type, ...] = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)


def is_torch_function(value: Any) -> bool:
    """True for callables that live in torch (functions, builtins, tensor methods)."""
    if isinstance(value, type) or not callable(value):
        return False
    if isinstance(value, torch._ops.OpOverloadPacket | torch._ops.OpOverload):
        return True
    module = getattr(value, "__module__", None) or ""
    if module == "torch" or module.startswith("torch."):
        return True
    owner = getattr(value, "__objclass__", None) or getattr(value, "__self__", None)
    return (
        owner is torch.Tensor
        or owner is torch._C.TensorBase
        or (
            isinstance(value, types.BuiltinFunctionType)
            and getattr(value, "__self__", None) is not None
            and type(value.__self__).__module__ == "torch._C"
        )
    )


def call_traced(frame: Frame, thunk: Callable[[], T]) -> T:
    """Run `thunk` with tracing tensors, naming the user's line on the nodes it records."""
    nodes = frame.session.tracer.graph.nodes
    start = len(nodes)
    try:
        result = thunk()
    except TraceError as error:
        raise _raised(
            frame,
            Unsupported(
                "an operation that needs tensor values in Python",
                f"{error}".split(": ", 1)[-1][:200],
            ),
        ) from error
    except Unsupported:
        raise
    except Exception as error:  # noqa: BLE001 - it runs in plain Python, which reports it
        raise _raised(
            frame,
            Unsupported(
                f"a torch call that raised {type(error).__name__} while capturing ({error})"[:300]
            ),
        ) from error
    location = frame.session.location
    if location is not None:
        for node in nodes[start:]:
            node.source = location
    return result


def _raised(frame: Frame, error: Unsupported) -> Unsupported:
    """`error` for a torch call that raised, marked when the program had been told it runs
    under a compiler (capture then tries again with eager's answer, see capture_call)."""
    error.compiler_path = frame.session.answered_compiling
    return error


class TorchFunctionVariable(Variable):
    """A torch function, `torch.nn.functional` function or (bound) tensor method."""

    def __init__(self, fn: Any, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))

    def python_type(self) -> type:
        return type(self.fn)

    def realize(self) -> Any:
        return self.fn

    def identity(self) -> object:
        return self.fn

    def describe(self) -> str:
        return f"torch function {self.name}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        from ember.capture.variables.builder import wrap_result

        short = getattr(self.fn, "__name__", "")
        if short in _GLOBAL_STATE:
            raise Unsupported.of("global-state", what=_GLOBAL_STATE[short], name=short)
        if not args and not kwargs and self.fn in COMPILER_QUERIES:
            return ConstantVariable(frame.session.answer_compiling())
        query = QUERIES.get(self.fn) if not args and not kwargs else None
        if query is not None:
            return ConstantVariable(query())
        real_args = [arg.realize() for arg in args]
        real_kwargs = {key: arg.realize() for key, arg in kwargs.items()}
        if is_attention(self.fn):
            return wrap_result(
                frame, call_traced(frame, lambda: self._attention(real_args, real_kwargs))
            )
        return wrap_result(frame, call_traced(frame, lambda: self.fn(*real_args, **real_kwargs)))

    def _attention(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        args, kwargs = attention_arguments(args, kwargs)
        return self.fn(*args, **kwargs)

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap_result

        return wrap_result(frame, getattr(self.fn, name))


class PythonModuleVariable(Variable):
    """A Python module object (`torch`, `torch.nn.functional`, `math`, a user's module)."""

    def __init__(self, module: types.ModuleType, source: Source | None) -> None:
        self.module = module
        self.source = source

    def python_type(self) -> type:
        return types.ModuleType

    def identity(self) -> object:
        return self.module

    def describe(self) -> str:
        return f"the module {self.module.__name__}"

    def getattr(self, frame: Frame, name: str) -> Variable:
        from ember.capture.variables.builder import wrap, wrap_result

        try:
            value = getattr(self.module, name)
        except AttributeError as error:
            raise Unsupported(f"reading a missing attribute ({error})") from error
        trusted = self.module.__name__.split(".")[0] in _TRUSTED_MODULES
        if trusted or self.source is None:
            if isinstance(value, types.ModuleType):
                return PythonModuleVariable(value, None)
            return wrap_result(frame, value)
        return wrap(frame, value, AttrSource(self.source, name))


class GradModeClassVariable(Variable):
    """`torch.no_grad`, `torch.enable_grad` or `torch.set_grad_enabled`, before calling."""

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def identity(self) -> object:
        return self.kind

    def describe(self) -> str:
        return f"torch.{self.kind.__name__}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        if self.kind is torch.set_grad_enabled:
            enabled = bool((args[0] if args else kwargs["mode"]).constant())
            # set_grad_enabled(False) also works as a plain call: it takes effect at once.
            previous = torch.is_grad_enabled()
            frame.session.guard(GuardKind.GRAD_MODE, None, frame.session.initial_grad_mode)
            record_grad_mode(frame, enabled)
            return GradModeVariable(enabled, previous)
        return GradModeVariable(self.kind is torch.enable_grad, None)


class GradModeVariable(Variable):
    """A grad-mode context manager; entering it sets grad mode for the captured region."""

    def __init__(self, enabled: bool, previous: bool | None) -> None:
        self.enabled = enabled
        self.previous = previous

    def describe(self) -> str:
        return f"a grad-mode context (grad {'on' if self.enabled else 'off'})"

    def enter(self, frame: Frame) -> Variable:
        if self.previous is None:
            self.previous = torch.is_grad_enabled()
        frame.session.guard(GuardKind.GRAD_MODE, None, frame.session.initial_grad_mode)
        if self.enabled != self.previous:
            record_grad_mode(frame, self.enabled)
        return ConstantVariable(None)

    def exit(self, frame: Frame) -> None:
        assert self.previous is not None
        if torch.is_grad_enabled() != self.previous:
            record_grad_mode(frame, self.previous)


class GradModeExitVariable(Variable):
    """The bound `__exit__` that BEFORE_WITH leaves on the stack for a grad-mode block.

    Across a graph break it becomes a real function that restores the grad mode the block
    found (`restore_grad_mode`), so the resume function leaves the block as Python would.
    """

    def __init__(self, manager: GradModeVariable) -> None:
        self.manager = manager

    def describe(self) -> str:
        return f"the exit of {self.manager.describe()}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        self.manager.exit(frame)
        return ConstantVariable(None)


def _restore_grad_enabled(*exception: object) -> None:
    torch.set_grad_enabled(True)


def _restore_grad_disabled(*exception: object) -> None:
    torch.set_grad_enabled(False)


def restore_grad_mode(previous: bool) -> Callable[..., None]:
    """A stand-in `__exit__` that sets grad mode back to `previous` (one function per mode,
    so the resume function's guard on it holds from call to call)."""
    return _restore_grad_enabled if previous else _restore_grad_disabled
