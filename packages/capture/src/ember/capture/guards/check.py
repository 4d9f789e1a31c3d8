"""Compile a list of guards into one fast check, and explain the first failing guard.

The check is one generated Python function `check(L, G)` whose body is the conjunction of
every guard's expression; any exception while reading a source counts as a miss. Its twin
`check_inputs(L, G)` runs the same checks and returns the Graph's inputs it has read on the
way (None on a miss), so a call reads each parameter once, not once for the guards and again
for the Graph. Once the C tensor guards are built (native.py), the tensor guards of plain
Tensors and Parameters are checked in batches, one C call each, in place of their Python
expressions; everything else stays the generated Python. A run of constant or identity
guards on items of one dict, list or tuple (a label map's 1000 entries) is one test: the
items read by one `itemgetter`, compared as tuples in C. With the C module, the module
walk (submodule, parameter and buffer reads, their identity and `training` guards) is one C
call too (module_walk.py).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ember.capture.guards.kinds import Guard, GuardKind, TensorFacts
from ember.capture.guards.module_walk import plan_walk, walk_lines
from ember.capture.guards.native import NATIVE, NATIVE_TYPES, NativeGuards
from ember.capture.guards.source import ItemSource, Source


@dataclass
class GuardCheck:
    """The guards of one cache entry and their compiled check."""

    guards: list[Guard]
    check: Callable[[dict[str, Any], dict[str, Any]], bool]
    source_text: str
    # the same checks; on a hit, the values of the `inputs` given to build_check, in order
    check_inputs: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...] | None]
    # the values of those inputs, without checks (the call a capture was made from)
    read_inputs: Callable[[dict[str, Any], dict[str, Any]], tuple[Any, ...]]
    inputs: tuple[Source, ...] = ()
    # True once `check` and `check_inputs` run the tensor guards in C (see native.py)
    native: bool = False
    # the Python check_inputs and check, which the C ones fall back to in a torch-function mode
    python: tuple[Callable[..., Any], Callable[..., Any]] | None = field(default=None, repr=False)

    def __call__(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> bool:
        return self.check(arguments, globals_dict)

    def failure(self, arguments: dict[str, Any], globals_dict: dict[str, Any]) -> str:
        """The first failing guard's reason, in user terms."""
        for guard in self.guards:
            reason = guard.failure(arguments, globals_dict)
            if reason is not None:
                return reason
        return "no guard failed"

    def use_native(self, module: ModuleType) -> None:
        """Run the tensor guards through `module` (the C tensor guards) from now on. Called
        from the thread that built the module: each function is replaced in one assignment."""
        if self.native:
            return
        python = self.python or (self.check_inputs, self.check)
        namespace, text = _generate(self.guards, self.inputs, module, python)
        self.python = python
        self.source_text = text
        self.check_inputs = namespace["check_inputs"]
        self.check = namespace["check"]
        self.native = True

    def __str__(self) -> str:
        return self.source_text


def build_check(
    guards: list[Guard], inputs: Sequence[Source] = (), native: NativeGuards | None = NATIVE
) -> GuardCheck:
    """One function checking every guard, in order (type guards come before reads of items).

    Each source is read once, into a local, the first time a guard needs it, and its prefix
    is shared: the guards on a model's 300 parameters walk `self.layer1[0].conv1` once, not
    once per guard (a walk through `nn.Module.__getattr__` costs about a microsecond a step).
    `check_inputs` then reads the `inputs` no guard has read and returns them all.

    With `native` (the process's C tensor guards unless None), the tensor guards run in C
    as soon as that module is built: at once if it is, else when its build finishes.
    """
    namespace, text = _generate(guards, inputs, None, None)
    check = GuardCheck(
        list(guards),
        namespace["check"],
        text,
        namespace["check_inputs"],
        namespace["read_inputs"],
        tuple(inputs),
    )
    if native is not None and any(is_native_tensor_guard(guard) for guard in guards):
        native.when_ready(check, GuardCheck.use_native)  # at once if it is built
    return check


def is_native_tensor_guard(guard: Guard) -> bool:
    """Whether the C tensor guards can check `guard` with the Python check's result: a tensor
    guard expecting a plain Tensor or Parameter, whose getters torch answers in C++."""
    return guard.kind is GuardKind.TENSOR and guard.expected.type in NATIVE_TYPES


# The generated lines a miss returns from, and where a C check hands over to Python.
_MISS = "            return False"
_FALLBACK = "___python_fallback"


def _generate(
    guards: list[Guard],
    inputs: Sequence[Source],
    module: ModuleType | None,
    python: tuple[Callable[..., Any], Callable[..., Any]] | None,
) -> tuple[dict[str, Any], str]:
    """The namespace holding `check`, `check_inputs` and `read_inputs`, and check's text.
    With `module`, the tensor guards it can check are batched into its C checks and
    `python` (check_inputs, check) are what they fall back to."""
    namespace: dict[str, Any] = {"sys": sys}
    lines, read = _reader()
    _append_checks(guards, namespace, read, lines, module)
    checks = len(lines)
    values = [read(source) for source in inputs]  # reads no guard made come after the checks
    fallbacks = ["", ""]
    if python is not None:
        fallbacks = [_constant(namespace, function) for function in python]
    read_lines = [
        "            return None" if line == _MISS else line.replace(_FALLBACK, fallbacks[0])
        for line in lines
    ]
    check_lines = [line.replace(_FALLBACK, fallbacks[1]) for line in lines[:checks]]
    text = _function("check", check_lines, "True", "False")
    texts = [text, _function("check_inputs", read_lines, _tuple(values), "None")]
    plain_lines, plain_read = _reader()
    plain_values = [plain_read(source) for source in inputs]
    texts.append(_function("read_inputs", plain_lines, _tuple(plain_values), None))
    exec(compile("".join(texts), "<ember guards>", "exec"), namespace)  # noqa: S102
    return namespace, text


def _append_checks(
    guards: list[Guard],
    namespace: dict[str, Any],
    read: Callable[[Source], str],
    lines: list[str],
    module: ModuleType | None,
) -> None:
    """The lines checking every guard in order. With `module`, the tensor guards it can
    check wait in a batch that one C call checks: before any guard that reads through one of
    the batch's tensors (`x.shape[0]`, `x.grad`), so that those reads still come after the
    tensor's own guard, and at the end."""
    batch: list[tuple[str, Guard]] = []
    batched: set[Source] = set()
    touched: list[Source] = []  # the sources the current guard reads

    def tracking(source: Source) -> str:
        touched.append(source)
        return read(source)

    def flush(at: int) -> None:
        if batch:
            lines[at:at] = _native_lines(namespace, module, batch)
            batch.clear()
            batched.clear()

    absorbed: set[int] = set()
    if module is not None and hasattr(module, "module_walk"):
        plan = plan_walk(guards)
        if plan.steps:
            walk = module.module_walk(len(plan.roots), plan.steps)
            bind = read.bind  # type: ignore[attr-defined]
            constant = functools.partial(_constant, namespace)
            lines.extend(walk_lines(plan, walk, read, bind, constant, _MISS))
            absorbed = plan.absorbed
    exact: set[Source] = set()  # sources whose type is guarded to be exactly dict/list/tuple
    index = 0
    while index < len(guards):
        guard = guards[index]
        index += 1
        if index - 1 in absorbed:
            continue
        start = len(lines)
        touched.clear()
        run = _item_run(guards, index - 1, exact)
        if len(run) >= _GROUPED:
            index += len(run) - 1
            condition = _grouped_expr(run, namespace, tracking)
            if _reaches(touched, batched):
                flush(start)
            lines.append(f"        if not {condition}:")
            lines.append(_MISS)
            continue
        if guard.kind is GuardKind.TYPE and guard.expected in _ITEM_TYPES:
            with contextlib.suppress(TypeError):
                exact.add(guard.source)  # type: ignore[arg-type]
        if module is not None and is_native_tensor_guard(guard):
            assert guard.source is not None
            name = tracking(guard.source)
            if _reaches(touched, batched):
                flush(start)
            batch.append((name, guard))
            with contextlib.suppress(TypeError):  # an unhashable index: never read through
                batched.add(guard.source)
            continue
        condition = guard.expr(namespace, tracking)
        if _reaches(touched, batched):
            flush(start)
        lines.append(f"        if not {condition}:")
        lines.append(_MISS)
    flush(len(lines))


# Containers whose items a grouped guard reads: `[key]` on them calls no user code.
_ITEM_TYPES = (dict, list, tuple)
# Keys and constant values a grouped guard accepts: hashing and `==` call no user code, and
# `==` holds exactly when the per-item check does (no NaN floats: `==` on a tuple says an
# object equals itself).
_PLAIN_KEYS = (int, str)
_PLAIN_VALUES = (int, str, bool, type(None))
# The shortest run of item guards checked as one: below it, one line per item is as fast.
_GROUPED = 4


def _item_run(guards: list[Guard], start: int, exact: set[Source]) -> list[Guard]:
    """The guards from `start` on that check items of one container by one test: constant
    guards (`config.id2label[i] == 'tench'`, 1000 of ResNet-50's training entry) or identity
    guards (`LOSS_MAPPING['ForCausalLM'] is f`), consecutive, on `[key]`s of a source whose
    type an earlier guard pins to dict, list or tuple. Empty when `guards[start]` is none."""
    first = guards[start]
    if not _groupable(first, exact):
        return []
    run = [first]
    for guard in guards[start + 1 :]:
        if guard.kind is not first.kind or not _groupable(guard, exact):
            break
        if guard.source.base != first.source.base:  # type: ignore[union-attr]
            break
        run.append(guard)
    return run


def _groupable(guard: Guard, exact: set[Source]) -> bool:
    source = guard.source
    if not isinstance(source, ItemSource) or type(source.index) not in _PLAIN_KEYS:
        return False
    try:
        if source.base not in exact:
            return False
    except TypeError:  # an unhashable index further down
        return False
    if guard.kind is GuardKind.ID:
        return True
    return guard.kind is GuardKind.CONSTANT and type(guard.expected) in _PLAIN_VALUES


def _grouped_expr(
    run: list[Guard], namespace: dict[str, Any], read: Callable[[Source], str]
) -> str:
    """One expression holding exactly when every guard of `run` (from `_item_run`) holds:
    the items read by one `itemgetter` in the guards' order, then compared as tuples in C
    (identities by `id`, which the expected objects, kept alive here, keep unique)."""
    base = read(run[0].source.base)  # type: ignore[union-attr]
    getter = _constant(namespace, operator.itemgetter(*(g.source.index for g in run)))  # type: ignore[union-attr]
    if run[0].kind is GuardKind.ID:
        ids = _constant(namespace, tuple(id(g.expected) for g in run))
        namespace.setdefault("___kept", []).append([g.expected for g in run])
        return f"tuple(map(id, {getter}({base}))) == {ids}"
    types = _constant(namespace, tuple(type(g.expected) for g in run))
    values = _constant(namespace, tuple(g.expected for g in run))
    return f"(tuple(map(type, __v := {getter}({base}))) == {types} and __v == {values})"


def _native_lines(
    namespace: dict[str, Any], module: Any, batch: list[tuple[str, Guard]]
) -> list[str]:
    """One call of a C check over the batch's tensors: False is a miss, None (a
    torch-function mode is active) hands the whole check over to the Python one."""
    specs = []
    for _, guard in batch:
        facts: TensorFacts = guard.expected
        sizes = tuple(-1 if dim in facts.dynamic else size for dim, size in enumerate(facts.shape))
        strides = None if facts.dynamic else facts.stride
        specs.append((facts.type, facts.dtype, facts.device, sizes, strides, facts.requires_grad))
    check = _constant(namespace, module.tensor_guards(specs))
    return [
        f"        __r = {check}({_tuple([name for name, _ in batch])})",
        "        if __r is not True:",
        "            if __r is None:",
        f"                return {_FALLBACK}(L, G)",
        _MISS,
    ]


def _reaches(sources: list[Source], batched: set[Source]) -> bool:
    """Whether any of `sources` is, or is read through, a source in `batched`."""
    if not batched:
        return False
    for source in sources:
        current: Source | None = source
        while current is not None:
            try:
                if current in batched:
                    return True
            except TypeError:  # an unhashable index: never batched itself
                pass
            current = getattr(current, "base", None)
    return False


def _reader() -> tuple[list[str], Callable[[Source], str]]:
    """Lines that read sources into locals, sharing prefixes, and `read(source)`, which adds
    the lines a source needs and returns the expression of its value. `read.bind(source)`
    names a local that other lines assign (the C module walk's results)."""
    lines: list[str] = []
    names: dict[Source, str] = {}

    def bind(source: Source) -> str:
        name = names[source] = f"__s{len(names)}"
        return name

    def read(source: Source) -> str:
        try:
            known = names.get(source)
        except TypeError:  # an unhashable index: read it whole
            return source.expr()
        if known is not None:
            return known
        base: Source | None = getattr(source, "base", None)
        expression = source.expr_on(read(base) if base is not None else "")
        name = f"__s{len(names)}"
        lines.append(f"        {name} = {expression}")
        names[source] = name
        return name

    read.bind = bind  # type: ignore[attr-defined]
    return lines, read


def _tuple(values: list[str]) -> str:
    return f"({''.join(value + ', ' for value in values)})"


def _function(name: str, lines: list[str], hit: str, miss: str | None) -> str:
    """`def name(L, G)`: the lines, then `return hit`; with `miss`, any exception returns it
    (a guard that cannot read its source fails), without, it propagates."""
    if miss is None:
        return "\n".join(
            [f"def {name}(L, G):", *(line[4:] for line in lines), f"    return {hit}", ""]
        )
    return "\n".join(
        [
            f"def {name}(L, G):",
            "    try:",
            *lines,
            f"        return {hit}",
            "    except Exception:",
            f"        return {miss}",
            "",
        ]
    )


def _constant(namespace: dict[str, Any], value: Any) -> str:
    name = f"___n{len(namespace)}"
    namespace[name] = value
    return name
