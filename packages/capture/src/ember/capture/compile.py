"""`compile()`, `reset()` and `disable()`: the user-facing entry points of capture.

`compile(fn)` returns a function with `fn`'s signature that, on each call, looks for a cache
entry whose guards hold and runs it; on a miss it captures the call (see translate.py).
`compile(module)` returns a module of a derived class that shares the original's `__dict__`
(parameters, buffers, submodules, attributes, state_dict) and whose `forward` is compiled.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from ember.capture import explain, logs, report
from ember.capture.backends.registry import Backend, lookup_backend
from ember.capture.bytecode.frame import decode
from ember.capture.cache import CACHE, CacheEntry, CodeEntries, RecompileLimitWarning
from ember.capture.checked import Frame, compile_checked
from ember.capture.codegen import dispatcher_function
from ember.capture.config import CaptureConfig
from ember.capture.distributed.wrappers import compile_wrapper, is_wrapper
from ember.capture.dynamic import DynamicPolicy
from ember.capture.gc_freeze import old_objects_frozen
from ember.capture.guards.kinds import autocast_state
from ember.capture.translate import FUNCTION_KEY, CaptureOptions, capture_call
from ember.capture.variables.functions import DISABLED_CODES
from ember.prims import Graph
from ember.prims.config import load

F = TypeVar("F", bound=Callable[..., Any])

# The functions compiled for one compile(): resume functions and callees that broke, each
# by its answer to torch.compiler.is_compiling().
Family = weakref.WeakKeyDictionary[types.FunctionType, dict[bool, Any]]


class CompiledFunction:
    """The state behind one compile() of one function: its backend and cache entries.

    Resume functions and callees that broke the graph are compiled with the same backend
    and options; `family` holds the compiled callees, shared by every function of one
    compile() so each callee is compiled once for each answer to is_compiling() (see
    CaptureOptions.compiling).
    """

    def __init__(
        self,
        fn: types.FunctionType,
        backend: Backend,
        name: str,
        fullgraph: bool = False,
        family: Family | None = None,
        compiling: bool = True,
        dynamic: bool | None = None,
    ) -> None:
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.family: Family = family if family is not None else weakref.WeakKeyDictionary()
        self.code = fn.__code__
        self.globals = fn.__globals__
        self.backend = backend
        self.backend_name = name
        self.captures = 0
        self._reused = False  # whether the capture in progress reused compiled code
        self.recompile_reasons: list[str] = []
        self.eager_fallbacks = 0
        self.table = CACHE.table(self.code)
        # what automatic dynamic learns lives in the table, so reset() forgets it too
        self.policy = DynamicPolicy(dynamic, self.table.automatic)
        self.options = CaptureOptions(fullgraph, self.compile_related, compiling, self.policy)
        self._capturing = threading.RLock()

    def dispatch(self, arguments: dict[str, Any]) -> Any:
        arguments[FUNCTION_KEY] = self.fn
        for entry in self.table.entries:  # the hot path: one generated check per entry
            inputs = entry.check.check_inputs(arguments, self.globals)
            if inputs is not None:
                return entry.entry(arguments, inputs)
        with self._capturing:  # threads that miss together capture in turn and share it
            found = self._lookup(arguments)
            if found is None:
                captured = self._capture(arguments)
                if captured is not None:  # runs on the call it was captured from, unchecked
                    found = captured, captured.check.read_inputs(arguments, self.globals)
        if found is None:
            return self._run_eagerly(self.table, arguments)
        entry, inputs = found
        return entry.entry(arguments, inputs)

    def _lookup(self, arguments: dict[str, Any]) -> tuple[CacheEntry, tuple[Any, ...]] | None:
        for entry in self.table.entries:
            inputs = entry.check.check_inputs(arguments, self.globals)
            if inputs is not None:
                return entry, inputs
        return None

    def _capture(self, arguments: dict[str, Any]) -> CacheEntry | None:
        """A new entry for `arguments`, or None past the cache-size limit."""
        table = self.table
        started = time.perf_counter()
        reason: str | None = None
        if table.entries:
            if len(table.entries) >= CACHE.limit:
                return None
            latest = table.latest or table.entries[-1]
            reason = latest.check.failure(arguments, self.globals)
            reason += self._learn_dynamic_dims(arguments)
            self.recompile_reasons.append(reason)
            logs.recompiles.info(
                "Recompiling %s (%s): %s", self.fn.__qualname__, self._where(), reason
            )
        self._reused = False
        with old_objects_frozen():  # collections skip the process's older objects
            entry = capture_call(self.fn, arguments, self._compile_graph, self.options)
        self.captures += 1
        table.add(entry, reused=self._reused)
        explain.record(entry)
        report.record_capture(self.fn, entry, reason, started)
        return entry

    def _learn_dynamic_dims(self, arguments: dict[str, Any]) -> str:
        """Automatic dynamic (dynamic=None): the input dims whose size differs from an earlier
        capture's become symbolic in this one. Returns what it learnt, for the log."""
        if self.policy.dynamic is not None:
            return ""
        learnt: list[str] = []
        for entry in self.table.entries:
            for source, shape in entry.shapes:
                try:
                    value = source.read(arguments, self.globals)
                except Exception:  # noqa: BLE001 - a source that cannot be read has no size
                    continue
                if isinstance(value, torch.Tensor):
                    new = tuple(value.shape)
                    for dim in self.policy.learn(source, shape, new):
                        learnt.append(f"{source.name()}.shape[{dim}]")
        if not learnt:
            return ""
        return f"; compiling {', '.join(learnt)} as symbolic sizes (automatic dynamic)"

    def _compile_graph(self, graph: Graph, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        """The backend's callable for `graph`. A recompile that captured an equal Graph reuses
        the earlier one: transformers' loss writes config.problem_type on its first call, so
        a classifier's second training step recompiles, to the same Graph (Swin's case
        compiled its forward and backward twice)."""
        state = (torch.is_grad_enabled(), autocast_state())
        known = self.table.compiled_for(graph, state)
        if known is not None:
            logs.recompiles.info(
                "%s (%s): the Graph is unchanged; reusing its compiled code",
                self.fn.__qualname__,
                self._where(),
            )
            self._reused = True
            return known
        frame = Frame(f"{self.fn.__qualname__} ({self._where()})", self._break_count)
        compiled = compile_checked(self.backend, graph, example_inputs, frame)
        self.table.compiled.append((graph, state, compiled))
        return compiled

    def _break_count(self) -> int:
        return sum(len(entry.breaks) for entry in self.table.entries)

    def compile_related(self, fn: types.FunctionType, compiling: bool) -> Any:
        """A resume function or a callee, compiled with this function's backend."""
        compiled = self.family.setdefault(fn, {})
        known = compiled.get(compiling)
        if known is None:
            known = _compile_function(
                fn,
                self.backend,
                self.backend_name,
                self.fullgraph,
                self.family,
                compiling,
                self.dynamic,
            )
            compiled[compiling] = known
        return known

    def _run_eagerly(self, table: CodeEntries, arguments: dict[str, Any]) -> Any:
        if not table.warned:
            reason = (table.latest or table.entries[-1]).check.failure(arguments, self.globals)
            table.warned = True
            warnings.warn(
                f"ember.compile: {self.fn.__qualname__} ({self._where()}) was recompiled "
                f"{CACHE.limit} times, the cache size limit; it now runs eagerly for inputs "
                f"no cached graph accepts. Last reason: {reason}. Keep that input stable or "
                f"raise EMBER_CACHE_SIZE_LIMIT{_size_hint(reason)}.",
                RecompileLimitWarning,
                stacklevel=4,
            )
        self.eager_fallbacks += 1
        return call_with_arguments(self.fn, arguments)

    def _where(self) -> str:
        return f"{self.code.co_filename.rsplit('/', 1)[-1]}:{self.code.co_firstlineno}"


def _size_hint(reason: str) -> str:
    """What to do when the sizes of an input keep changing."""
    if ".shape[" not in reason:
        return ""
    return (
        "; for sizes that keep changing, compile with dynamic=None or dynamic=True, or mark "
        "the dim with ember.mark_dynamic(tensor, dim) before the call"
    )


def call_with_arguments(fn: types.FunctionType, arguments: dict[str, Any]) -> Any:
    """Call `fn` with a parameter-name -> value dict (the inverse of binding)."""
    code = fn.__code__
    names = code.co_varnames
    positional = [arguments[name] for name in names[: code.co_argcount]]
    index = code.co_argcount + code.co_kwonlyargcount
    keywords = {name: arguments[name] for name in names[code.co_argcount : index]}
    if code.co_flags & inspect.CO_VARARGS:
        positional.extend(arguments[names[index]])
        index += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        keywords.update(arguments[names[index]])
    return fn(*positional, **keywords)


def _backend(backend: str | Backend) -> tuple[Backend, str]:
    if isinstance(backend, str):
        return lookup_backend(backend), backend
    if not callable(backend):
        raise TypeError(f"backend must be a name or a callable, got {type(backend).__name__}")
    return backend, getattr(backend, "__name__", type(backend).__name__)


def _with_options(
    compiler: Backend, name: str, mode: str | None, options: dict[str, Any] | None
) -> Backend:
    """`compiler` called with `mode=` and `options=` where given and accepted."""
    given = {k: v for k, v in (("mode", mode), ("options", options)) if v is not None}
    if not given:
        return compiler
    try:
        parameters = inspect.signature(compiler).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    accepted = {k: v for k, v in given.items() if takes_all or k in parameters}
    ignored = sorted(set(given) - set(accepted))
    if ignored:
        warnings.warn(
            f"ember.compile: backend {name!r} takes no {', '.join(ignored)}; ignoring it",
            stacklevel=3,
        )
    if not accepted:
        return compiler
    return functools.partial(compiler, **accepted)


def compile(  # noqa: A001 - mirrors torch.compile
    fn_or_module: Any = None,
    *,
    backend: str | Backend = "inductor",
    mode: str | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    options: dict[str, Any] | None = None,
) -> Any:
    """Compile a function or nn.Module; with no target, return a decorator.

    `backend` is a registered name (`ember.capture.list_backends()`) or a callable taking the
    captured Graph and example inputs. `mode` and `options` reach a backend that takes them
    as keyword arguments (`inductor`: `mode="max-autotune"`); a backend that does not is
    warned about and called without.
    `dynamic=None` captures static sizes first and, when a call changes a dim's size,
    captures once more with that dim symbolic; `dynamic=True` makes every input dim symbolic
    from the start (parameters and buffers keep their sizes); `dynamic=False` specializes
    every size. `mark_dynamic` / `mark_static` decide single dims under any of them.
    What capture cannot model becomes a graph break (it runs in plain Python between
    graphs); `fullgraph=True` raises `Unsupported` at the first break instead.
    """
    if fn_or_module is None:
        return functools.partial(
            compile,
            backend=backend,
            mode=mode,
            dynamic=dynamic,
            fullgraph=fullgraph,
            options=options,
        )
    logs.configure_once()
    report.start_from_environment(load(CaptureConfig).report)
    compiler, name = _backend(backend)
    compiler = _with_options(compiler, name, mode, options)
    if isinstance(fn_or_module, nn.Module):
        if is_wrapper(fn_or_module):  # DDP / FSDP1: see distributed/wrappers.py
            return compile_wrapper(
                fn_or_module,
                compiler,
                lambda inner, inner_backend: _compile_module(
                    inner, inner_backend, name, fullgraph, dynamic
                ),
            )
        return _compile_module(fn_or_module, compiler, name, fullgraph, dynamic)
    fn = fn_or_module
    if getattr(fn, "_ember_compiled", None) is not None:
        fn = fn._ember_compiled.fn
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        compiled = _compile_function(fn.__func__, compiler, name, fullgraph, dynamic=dynamic)
        return types.MethodType(compiled, fn.__self__)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"ember.compile takes a Python function or an nn.Module, got {fn!r}")
    return _compile_function(fn, compiler, name, fullgraph, dynamic=dynamic)


def _compile_function(
    fn: types.FunctionType,
    compiler: Backend,
    name: str,
    fullgraph: bool = False,
    family: Family | None = None,
    compiling: bool = True,
    dynamic: bool | None = None,
) -> Any:
    state = CompiledFunction(fn, compiler, name, fullgraph, family, compiling, dynamic)
    wrapper = dispatcher_function(fn, state.dispatch)
    functools.update_wrapper(wrapper, fn)
    wrapper._ember_compiled = state  # type: ignore[attr-defined]
    return wrapper


def _compile_module(
    module: nn.Module,
    compiler: Backend,
    name: str,
    fullgraph: bool = False,
    dynamic: bool | None = None,
) -> nn.Module:
    cls = type(module)
    original = getattr(cls, "_ember_original_class", cls)
    forward = original.forward
    if not isinstance(forward, types.FunctionType):
        raise TypeError(f"{original.__name__}.forward is not a Python function")
    namespace = {
        "forward": _compile_function(forward, compiler, name, fullgraph, dynamic=dynamic),
        "_ember_original_class": original,
        "__module__": original.__module__,
        "__qualname__": original.__qualname__,
    }
    derived = type(original.__name__, (original,), namespace)
    compiled: nn.Module = object.__new__(derived)
    # One __dict__ for both: parameters, buffers, submodules and attributes read and write
    # through, and state_dict() is the original's.
    compiled.__dict__ = module.__dict__
    return compiled


def reset() -> None:
    """Forget every captured graph; the next call of each compiled function captures again."""
    CACHE.reset()
    decode.cache_clear()


def disable(fn: F) -> F:
    """Never capture `fn`: calling it runs eagerly, and capture refuses to inline it."""
    compiled = getattr(fn, "_ember_compiled", None)
    target = compiled.fn if compiled is not None else fn
    code = getattr(target, "__code__", None)
    if code is not None:
        DISABLED_CODES.add(code)
    return target
