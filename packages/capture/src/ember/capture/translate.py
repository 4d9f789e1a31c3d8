"""Capture one call: interpret the function's bytecode over Variables, record its tensor
work into a Graph, collect the guards, hand the Graph to the backend, and generate the
entry function that replays the result on later calls whose guards hold.

When capture meets something it cannot model, it captures again and stops at the function's
own instruction that was running (a call into a function that broke is broken at the call):
the graph so far is compiled, the entry function runs that instruction in plain Python and
continues in a generated resume function, compiled on its own (see break_point.py,
resume.py). With `fullgraph=True` the first break is an error instead.
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ember.capture import logs
from ember.capture.break_point import (
    BRANCHES,
    callable_index,
    instructions,
    is_method_load,
    stack_effect,
    user_handler,
)
from ember.capture.breaks import GraphBreak
from ember.capture.bytecode import Frame
from ember.capture.cache import CacheEntry
from ember.capture.codegen import Continuation, OutputPlan, SideEffectPlan, entry_function
from ember.capture.dynamic import DynamicPolicy
from ember.capture.guards.check import build_check
from ember.capture.guards.kinds import Guard, GuardKind, autocast_state
from ember.capture.guards.source import AttrSource, ItemSource, LocalSource, ModuleEntrySource
from ember.capture.guards.symbolic import SizeCondition
from ember.capture.reconstruct import REPLACE_DICT, REPLACE_LIST, CompileCallee, Reconstructor
from ember.capture.resume import STACK_PREFIX, resume_function
from ember.capture.session import CaptureSession
from ember.capture.side_effects import AttributeWrite, MethodCall, call_method
from ember.capture.unsupported import Unsupported
from ember.capture.variables.autocast import ResumedAutocast
from ember.capture.variables.containers import ListVariable
from ember.capture.variables.context_vars import replay_value
from ember.capture.variables.functions import CellVariable
from ember.prims import Graph, Ref, Tracer, cross_boundary, tree_flatten
from ember.prims.symbolic import ShapeEnv

# The compiled function itself travels in the arguments dict under this key, so guards and
# generated code can read its closure cells.
FUNCTION_KEY = "__ember_function__"

Compiler = Callable[[Graph, Sequence[Any]], Callable[..., Any]]

# Compiles a resume function or a callee that broke, on its own, with the same backend and
# the given answer to torch.compiler.is_compiling().
CompileRelated = Callable[[types.FunctionType, bool], Callable[..., Any]]


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture: `fullgraph` makes breaks errors; `compile_function` compiles resume
    functions and callees that broke, with the same backend.

    `compiling` is what torch.compiler.is_compiling() answers: True, as under torch.compile,
    so library code takes its compiler-friendly path; False, eager's answer, for a call whose
    capture raised on that path (Nystromformer adds the 4-d mask transformers builds only
    under a compiler to its landmark scores, which eager never does when nothing is padded).
    Resume functions and callees compiled from such a capture answer False as well."""

    fullgraph: bool = False
    compile_function: CompileRelated | None = None
    compiling: bool = True
    # which input dims get size symbols (dynamic=, marks, what automatic dynamic learnt)
    policy: DynamicPolicy = field(default_factory=DynamicPolicy)

    def compile_callee(self) -> CompileCallee | None:
        """`compile_function` with this capture's answer to is_compiling()."""
        related, compiling = self.compile_function, self.compiling
        if related is None:
            return None
        return lambda fn: related(fn, compiling)


def capture_call(
    fn: types.FunctionType,
    arguments: dict[str, Any],
    compiler: Compiler,
    options: CaptureOptions | None = None,
) -> CacheEntry:
    """Capture `fn` called with `arguments` (parameter name -> value) into a cache entry."""
    options = options or CaptureOptions()
    try:
        return _capture(fn, arguments, compiler, options, None)
    except Unsupported as error:
        if error.compiler_path and options.compiling:
            # The program asked whether it is being compiled and, told yes, raised: eager
            # may never take that path. Capture it as eager runs it.
            return capture_call(fn, arguments, compiler, replace(options, compiling=False))
        if options.fullgraph or options.compile_function is None:
            raise
        reason = error
    if reason.root_pc is not None:
        try:
            return _capture(fn, arguments, compiler, options, reason)
        except Unsupported as error:
            reason = Unsupported.of("cannot-resume", construct=reason.construct).at(
                error.location or reason.location
            )
    else:
        reason = Unsupported.of("cannot-resume", construct=reason.construct).at(reason.location)
    return _eager_entry(fn, reason.as_break())


def _eager_entry(fn: types.FunctionType, graph_break: GraphBreak) -> CacheEntry:
    """The whole function runs eagerly (capture could not resume after a break)."""
    from ember.capture.compile import call_with_arguments

    _log_break(fn, graph_break)

    def entry(arguments: dict[str, Any], inputs: tuple[Any, ...]) -> Any:
        return call_with_arguments(fn, arguments)

    return CacheEntry(build_check([]), entry, None, [graph_break])


def _log_break(fn: types.FunctionType, graph_break: GraphBreak) -> None:
    logs.graph_breaks.info("Graph break in %s: %s", fn.__qualname__, graph_break)


def _capture(
    fn: types.FunctionType,
    arguments: dict[str, Any],
    compiler: Compiler,
    options: CaptureOptions,
    reason: Unsupported | None,
) -> CacheEntry:
    started = time.perf_counter()
    tracer = Tracer(ShapeEnv())
    session = CaptureSession(
        tracer, fn.__globals__, fn.__qualname__, options.compiling, policy=options.policy
    )
    session.guard(GuardKind.GRAD_MODE, None, torch.is_grad_enabled())
    session.guard(GuardKind.AUTOCAST, None, autocast_state())
    grad_mode = torch.is_grad_enabled()
    root_source = LocalSource(FUNCTION_KEY)
    closure = [
        CellVariable(
            real=cell,
            source=AttrSource(
                ItemSource(AttrSource(root_source, "__closure__"), i), "cell_contents"
            ),
        )
        for i, cell in enumerate(fn.__closure__ or ())
    ]
    user_arguments = {k: v for k, v in arguments.items() if k != FUNCTION_KEY}
    rebuild = Reconstructor(session, options.compile_callee())
    continuation: Continuation | None = None
    output: OutputPlan | None = None
    breaks: list[GraphBreak] = []
    try:
        with tracer.active():
            frame = Frame(
                session, fn.__code__, fn.__globals__, {}, closure, root_arguments=user_arguments
            )
            if reason is not None:
                frame.break_pc = reason.root_pc
                frame.break_visit = reason.root_visit
            result = frame.run()
            effects = _effects(session, rebuild)
            if frame.stopped:
                assert reason is not None
                try:
                    continuation = _continuation(fn, frame, rebuild, options, reason)
                except (ValueError, TypeError, KeyError, IndexError) as error:
                    # bytecode refused the generated code: resume eagerly instead of failing.
                    raise Unsupported(f"generating the resume function ({error})") from error
                breaks.append(reason.as_break(frame.location()))
            else:
                output = rebuild.plan(result)
    finally:
        for manager in reversed(session.open_contexts):
            manager.__exit__(None, None, None)
        torch.set_grad_enabled(grad_mode)
    outputs = rebuild.outputs
    graph: Graph | None = None
    compiled = None
    if tracer.graph.nodes:
        example_inputs = [entry.tensor for entry in session.inputs]
        leaves = [Ref(entry.value_name) for entry in session.inputs]
        tracer.set_inputs_signature(tree_flatten(tuple(example_inputs))[1], leaves)
        graph = tracer.finish(tuple(outputs))
        _guard_storage_offsets(session, graph)
        graph.name = _graph_name(fn)
        graph.meta = {"pass": "capture", "time_ms": f"{(time.perf_counter() - started) * 1e3:.1f}"}
        state = _state_inputs(session, graph)
        if state:
            graph.meta["state_inputs"] = state
        if logs.graphs.isEnabledFor(logging.INFO):
            logs.graphs.info("captured %s:\n%s", fn.__qualname__, graph)
        compiled = compiler(cross_boundary(graph, "capture -> backend"), example_inputs)
    elif outputs:
        raise AssertionError("graph outputs without graph nodes")
    _guard_sizes(session, tracer.shape_env)
    sources = [entry.source for entry in session.inputs] if compiled is not None else []
    # the guard check reads the inputs on its way, unless a prologue must run before them
    check = build_check(session.guards, [] if session.prologue else sources)
    if logs.guards.isEnabledFor(logging.INFO):
        logs.guards.info(
            "guards of %s:\n%s", fn.__qualname__, "\n".join(map(guard_line, session.guards))
        )
    for graph_break in breaks:
        _log_break(fn, graph_break)
    prologue = [
        SideEffectPlan("call", OutputPlan("call", ResumedAutocast.suspend, (plan,)))
        for plan in (OutputPlan("source", source) for source in session.prologue)
    ]
    entry = entry_function(
        compiled,
        sources,
        output,
        fn.__globals__,
        f"__ember_entry_{fn.__name__}",
        effects,
        continuation,
        prologue,
        read_inputs=bool(session.prologue),
    )
    shapes = [(i.source, tuple(i.tensor.shape)) for i in session.inputs]
    return CacheEntry(check, entry, graph, breaks, shapes)


def guard_line(guard: Guard) -> str:
    """One guard for the `guards` log: its kind, and what it checks in the user's terms."""
    subject = guard.source.name() if guard.source else ""
    if guard.kind is GuardKind.SIZE_RANGE:
        lower, upper = guard.expected
        subject = f"{subject} in {lower}..{'inf' if upper is None else upper}"
    elif guard.kind is GuardKind.SIZE_EXPR:
        subject = guard.expected.text()
        if guard.seen_at is not None:
            subject += f"  (assumed at {guard.seen_at.short()})"
    elif guard.kind is GuardKind.TENSOR and guard.expected.dynamic:
        dims = ", ".join(str(d) for d in sorted(guard.expected.dynamic))
        subject += f"  (symbolic dims {dims})"
    return f"  {guard.kind.value:<12} {subject}"


def _guard_sizes(session: CaptureSession, shape_env: ShapeEnv) -> None:
    """Guard the Graph's size symbols: each input dim it keeps symbolic stays in the symbol's
    range, and every condition the trace assumed over the symbols holds (`x.shape[1] % 8 ==
    0`, `x.shape[1] == y.shape[0]`), printed as Python over the sizes."""
    for name, info in shape_env.symbols.items():
        source = session.sizes.get(name)
        if source is None:
            raise AssertionError(f"size symbol {name} stands for no input dim")
        # no line: the range belongs to the input, not to a line that used it
        session.guards.append(Guard(GuardKind.SIZE_RANGE, source, (info.lower, info.upper)))
    for shape_guard in shape_env.guards:
        names = sorted(str(sym) for sym in shape_guard.expr.free_symbols)
        condition = SizeCondition(
            shape_guard.expr, tuple((name, session.sizes[name]) for name in names)
        )
        session.guards.append(Guard(GuardKind.SIZE_EXPR, None, condition, shape_guard.source))


def _graph_name(fn: types.FunctionType) -> str:
    name = fn.__name__ if fn.__name__ != "<lambda>" else "lambda_"
    return name if name.isidentifier() else "forward"


def _effects(session: CaptureSession, rebuild: Reconstructor) -> list[SideEffectPlan]:
    """The side effects to replay after the graph, in program order."""
    plans: list[SideEffectPlan] = []
    for write in session.side_effects.writes:
        if isinstance(write, MethodCall):
            arguments = tuple(rebuild.plan(v) for v in write.args)
            keywords = tuple(rebuild.plan(v) for v in write.kwargs.values())
            parts = (
                rebuild.plan(write.owner),
                OutputPlan("constant", write.name),
                OutputPlan("tuple", children=arguments),
                OutputPlan("dict", tuple(write.kwargs), keywords),
            )
            plans.append(SideEffectPlan("call", OutputPlan("call", call_method, parts)))
            continue
        value = rebuild.plan(write.value)
        if isinstance(write, AttributeWrite):
            plans.append(SideEffectPlan("attr", value, rebuild.plan(write.owner), write.name))
        else:
            plans.append(SideEffectPlan("global", value, write.table, write.name))
    for state in session.side_effects.context_vars.values():
        replayed = replay_value(state)
        if replayed is not None:  # the net change: one set() after the graph
            parts = (
                rebuild.plan(state.owner),
                OutputPlan("constant", "set"),
                OutputPlan("tuple", children=(rebuild.plan(replayed),)),
                OutputPlan("dict", (), ()),
            )
            plans.append(SideEffectPlan("call", OutputPlan("call", call_method, parts)))
    for container in session.side_effects.mutated_containers():
        assert container.source is not None
        target = OutputPlan("source", container.source)
        if isinstance(container, ListVariable):
            items = OutputPlan("list", children=tuple(rebuild.plan(v) for v in container.values))
            plans.append(SideEffectPlan("call", OutputPlan("call", REPLACE_LIST, (target, items))))
        else:
            entries = container.entries  # type: ignore[attr-defined]
            mapping = OutputPlan(
                "dict", tuple(entries), tuple(rebuild.plan(v) for v in entries.values())
            )
            plans.append(
                SideEffectPlan("call", OutputPlan("call", REPLACE_DICT, (target, mapping)))
            )
    return plans


def _continuation(
    fn: types.FunctionType,
    frame: Frame,
    rebuild: Reconstructor,
    options: CaptureOptions,
    reason: Unsupported,
) -> Continuation:
    """How the entry function goes on after the graph, at the instruction that broke."""
    assert options.compile_function is not None and frame.break_pc is not None
    step = frame.instructions[frame.break_pc]
    line = frame.lineno
    stack = list(frame.stack)
    if step.name in BRANCHES:
        used, left = 1, 0
    else:
        effect = stack_effect(step, stack)
        if effect is None:
            raise Unsupported(f"the instruction {step.name}").at(frame.location())
        used, left = effect
    called = callable_index(step, stack)

    def plan(index: int) -> OutputPlan:
        item = stack[index]
        return rebuild.callee(item) if index == called else rebuild.plan(item)

    # Planned in the order the entry function rebuilds them (shared values come first).
    split = len(stack) - used
    stack_plans = [plan(index) for index in range(split)]
    # Live locals: wrapped ones, arguments not read yet, and the contents of cells.
    names: list[str] = []
    values: list[OutputPlan] = []
    for name, value in frame.locals.items():
        if name.startswith(STACK_PREFIX):
            continue  # a resume function's stack arguments are dead past its prologue
        names.append(name)
        values.append(rebuild.plan(value))
    for name in frame.pending_arguments:
        if name.startswith(STACK_PREFIX):
            continue
        names.append(name)
        values.append(OutputPlan("source", LocalSource(name)))
    for name in fn.__code__.co_cellvars:
        contents = frame.cells[name].contents
        if contents is not None and name not in names:
            names.append(name)
            values.append(rebuild.plan(contents))
    first = fn.__code__.co_varnames[0] if fn.__code__.co_argcount else None
    if first in names and names[0] != first:  # zero-argument super() needs it first
        position = names.index(first)
        names.insert(0, names.pop(position))
        values.insert(0, values.pop(position))
    stack_plans += [plan(index) for index in range(split, len(stack))]
    prefix = [item.kind == "null" for item in stack_plans[:split]]
    grad_mode = torch.is_grad_enabled()
    compile_function = options.compile_callee()
    assert compile_function is not None
    if step.name in BRANCHES:
        at_target = resume_function(fn, step.arg, prefix, names, line)
        at_next = resume_function(fn, frame.break_pc + 1, prefix, names, line)
        branch = (BRANCHES[step.name], compile_function(at_target), compile_function(at_next))
        return Continuation(grad_mode, stack_plans, 1, [], 0, values, branch=branch)
    handler = user_handler(fn.__code__, frame.break_pc)
    if handler is not None and handler.depth > split:
        # The handler expects what the entry function cannot give it: the resume function
        # starts at the instruction itself (under the user's try) and runs as plain Python.
        layout = [item.kind == "null" for item in stack_plans]
        resumed = resume_function(fn, frame.break_pc, layout, names, line)
        return Continuation(grad_mode, stack_plans, 0, [], 0, values, resumed)
    catch = None
    if handler is not None:
        # What the instruction raises goes to the user's handler, resumed as plain Python
        # with the stack below the try and the exception.
        below = prefix[: handler.depth] + [False] * (2 if handler.lasti else 1)
        at_handler = resume_function(fn, handler.target, below, names, line)
        catch = (at_handler, handler.depth, handler.lasti)
    code = instructions(step, frame.kw_names, line)
    resume = None
    if step.name != "RAISE_VARARGS":
        layout = prefix + ([True] if is_method_load(step) else []) + [False] * left
        resumed = resume_function(fn, frame.break_pc + 1, layout, names, line)
        resume = compile_function(resumed)
    return Continuation(grad_mode, stack_plans, used, code, left, values, resume, catch=catch)


# ATen ops whose offset argument counts from the start of the input's storage, not from its
# first element: a Graph holding one is right only for the storage offsets it was captured with.
_ABSOLUTE_OFFSET_OPS = ("aten::as_strided", "aten::as_strided_", "aten::as_strided_scatter")


def _state_inputs(session: CaptureSession, graph: Graph) -> str:
    """The positions (comma-separated) of the Graph inputs that are module parameters or
    buffers: tensors that live as long as their module, at one address, which a CUDA graph
    may read in place rather than copy (ember-inductor's reduce-overhead)."""
    positions = {graph_input.value.name: i for i, graph_input in enumerate(graph.inputs)}
    state = [
        positions[entry.value_name]
        for entry in session.inputs
        if entry.value_name in positions
        and (
            isinstance(entry.tensor, torch.nn.Parameter)
            or (
                isinstance(entry.source, ModuleEntrySource)
                and entry.source.table in ("_parameters", "_buffers")
            )
        )
    ]
    return ",".join(map(str, sorted(state)))


def _guard_storage_offsets(session: CaptureSession, graph: Graph) -> None:
    """Pin the storage offset of every tensor input when the Graph calls an op that reads it
    (a view input passed again at another offset would otherwise reuse a wrong Graph)."""
    if not any(node.target.split(".")[0] in _ABSOLUTE_OFFSET_OPS for node in graph.nodes):
        return
    for entry in session.inputs:
        session.guard(GuardKind.STORAGE_OFFSET, entry.source, entry.tensor.storage_offset())
