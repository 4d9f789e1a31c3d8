"""The native wrapper: a generated Python wrapper translated into ember-runtime's interpreter.

`translate` reads the wrapper source (`codegen/wrapper.py` writes a small straight-line
language: allocations, views, launches, extern calls, frees, a return) and gives the
instructions of `ember.runtime.native`'s interpreter, or None with the reason when a line is
outside what it knows (size symbols, host inputs): that graph keeps its Python wrapper.
`NativeCall` runs the Python wrapper on the first call (kernels bind, autotune and load
there) and until the interpreter is built, then builds the program and runs every later
call in C++.

The instruction tuples are the interpreter's (`interpreter.cpp`, `parse_instruction`).
"""

from __future__ import annotations

import ast
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

logger = logging.getLogger("ember.inductor")

ALLOC, ALIAS, VIEW, FREE, LAUNCH, EXTERN, DONATED, RETURN = range(8)
CONSTANT, REGISTER, VIEWED, TENSOR_LIST, OPTIONAL_TENSOR_LIST, ADDRESS = range(6)


class Untranslatable(Exception):
    """A wrapper line the interpreter has no instruction for."""


@dataclass
class Translation:
    """A wrapper as the interpreter's program, with the tables its instructions index."""

    instructions: list[tuple[Any, ...]]
    registers: dict[str, int]
    kernels: list[str]  # kernel names, by index
    externs: list[str]  # extern targets, by index
    device: torch.device
    native_externs: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # per instruction, what an error names


def translate(
    source: str, namespace: Mapping[str, Any], ops: Mapping[str, Any]
) -> Translation | str:
    """The wrapper `source` (run with `namespace`; `ops` are the extern targets' resolved
    overloads) as the interpreter's program, or why it cannot be."""
    try:
        translator = _Translator(namespace, ops)
        translator.lines = source.splitlines()
        return translator.run(ast.parse(source))
    except Untranslatable as reason:
        return str(reason)


class _Translator:
    def __init__(self, namespace: Mapping[str, Any], ops: Mapping[str, Any]) -> None:
        self.namespace = dict(namespace)
        self.ops = ops
        self.registers: dict[str, int] = {}
        self.kernels: dict[str, int] = {}
        self.externs: dict[str, int] = {}
        self.native: dict[str, bool] = {}
        self.out: list[tuple[Any, ...]] = []
        self.notes: list[str] = []  # per instruction, what an error names
        self.lines: list[str] = []
        self.last_extern: dict[str, tuple[list[Any], int]] = {}  # name -> (outputs, position)
        self.flattened: list[Any] | None = None  # the pending `result = flatten_result(...)`

    # ---- the module and the function --------------------------------------------------------

    def run(self, module: ast.Module) -> Translation:
        call = None
        for statement in module.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == "call":
                call = statement
            elif isinstance(statement, ast.Assign):
                exec(compile(ast.Module([statement], []), "<wrapper>", "exec"), self.namespace)  # noqa: S102
            else:
                raise Untranslatable(f"module line {ast.unparse(statement)!r}")
        if call is None:
            raise Untranslatable("no call function")
        for statement in call.body:
            self.statement(statement)
        if not self.out or self.out[-1][0] != RETURN:
            raise Untranslatable("no return at the end")
        device = self.namespace.get("DEVICE")
        if not isinstance(device, torch.device):
            raise Untranslatable("no DEVICE")
        return Translation(
            self.out,
            self.registers,
            list(self.kernels),
            list(self.externs),
            device,
            self.native,
            self.notes,
        )

    def emit(self, instruction: tuple[Any, ...], note: str) -> None:
        self.out.append(instruction)
        self.notes.append(note)

    def where(self, target: str, call: ast.Call) -> str:
        """An extern call as an error names it: the op and the user's source line, which the
        wrapper writes as the line's comment (`# modeling_gpt2.py:312`)."""
        line = self.lines[call.lineno - 1] if 0 < call.lineno <= len(self.lines) else ""
        _, _, comment = line.partition("  # ")
        return f"{target} ({comment.strip()})" if comment.strip() else target

    def register(self, name: str) -> int:
        index = self.registers.get(name)
        if index is None:
            index = self.registers[name] = len(self.registers)
        return index

    def known(self, name: str) -> int:
        if name not in self.registers:
            raise Untranslatable(f"{name} is read before it is bound")
        return self.registers[name]

    # ---- statements --------------------------------------------------------------------------

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            self.assign(node.targets[0], node.value)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.call_statement(node.value)
        elif isinstance(node, ast.Delete):
            regs = [
                self.registers[t.id]
                for t in node.targets
                if isinstance(t, ast.Name) and t.id in self.registers
            ]
            if regs:
                self.emit((FREE, regs), "freeing buffers")
        elif isinstance(node, ast.If):
            self.restride_check(node)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.returned(node.value)
        else:
            raise Untranslatable(f"line {ast.unparse(node)!r}")

    def call_statement(self, call: ast.Call) -> None:
        function = call.func
        if isinstance(function, ast.Attribute) and function.attr == "clear":
            return  # args.clear(): the interpreter empties the list itself
        if (
            isinstance(function, ast.Attribute)
            and function.attr == "launch"
            and isinstance(function.value, ast.Subscript)
        ):
            self.launch(_string(function.value.slice), call.args)
            return
        if _is_op(function):
            self.extern(call, [])
            return
        raise Untranslatable(f"call {ast.unparse(call)!r}")

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple):
            if isinstance(value, ast.Name) and value.id == "args":
                for element in target.elts:
                    if not isinstance(element, ast.Name):
                        raise Untranslatable("input binding")
                    self.register(element.id)
                return
            if isinstance(value, ast.Call) and _is_op(value.func):
                self.extern(value, [_name(e) for e in target.elts])
                return
            raise Untranslatable(f"assignment {ast.unparse(value)!r}")
        if not isinstance(target, ast.Name):
            raise Untranslatable(f"assignment to {ast.unparse(target)!r}")
        name = target.id
        if isinstance(value, ast.Name):
            source = self.known(value.id)
            self.emit((ALIAS, self.register(name), source), f"binding {name}")
        elif isinstance(value, ast.IfExp):
            self.donated(name, value)
        elif isinstance(value, ast.Call) and _callee(value) == "empty_strided":
            size, stride, dtype = self.allocation(value)
            self.emit(
                (ALLOC, self.register(name), size, stride, dtype, self.device()),
                f"allocating {name} ({_dims(size)}, {dtype})",
            )
        elif isinstance(value, ast.Call) and _callee(value) == "as_strided":
            source, view = self.view(value)
            self.emit((VIEW, self.register(name), source, view), f"viewing {name}")
        elif isinstance(value, ast.Call) and _is_op(value.func):
            self.extern(value, [name])
        elif isinstance(value, ast.Call) and _callee(value) == "flatten_result":
            if len(value.args) != 1 or not isinstance(value.args[0], ast.Call):
                raise Untranslatable("flatten_result")
            self.flattened = []
            self.extern(value.args[0], self.flattened)
        elif isinstance(value, ast.Subscript) and _is_result(value.value):
            self.flattened_output(name, value, None)
        elif (
            isinstance(value, ast.Call)
            and _callee(value) == "restride"
            and isinstance(value.args[0], ast.Subscript)
            and _is_result(value.args[0].value)
        ):
            declared = (self.constant(value.args[1]), self.constant(value.args[2]))
            self.flattened_output(name, value.args[0], declared)
        else:
            raise Untranslatable(f"assignment {ast.unparse(value)!r}")

    def flattened_output(
        self, name: str, subscript: ast.Subscript, declared: tuple[Any, Any] | None
    ) -> None:
        if self.flattened is None:
            raise Untranslatable("result[...] without flatten_result")
        position = self.constant(subscript.slice)
        outputs = self.flattened
        while len(outputs) <= position:
            outputs.append((-1, None, None))
        size, stride = declared if declared is not None else (None, None)
        outputs[position] = (self.register(name), size, stride)

    def restride_check(self, node: ast.If) -> None:
        """`if x.stride() != (...): x = restride(x, size, stride)` after an extern call."""
        if len(node.body) != 1 or node.orelse or not isinstance(node.body[0], ast.Assign):
            raise Untranslatable(f"if {ast.unparse(node.test)!r}")
        value = node.body[0].value
        if not (isinstance(value, ast.Call) and _callee(value) == "restride"):
            raise Untranslatable(f"if body {ast.unparse(value)!r}")
        name = _name(value.args[0])
        entry = self.last_extern.get(name)
        if entry is None:
            raise Untranslatable(f"restride of {name}, not an extern result")
        outputs, position = entry
        register = outputs[position][0]
        outputs[position] = (register, self.constant(value.args[1]), self.constant(value.args[2]))

    def donated(self, name: str, value: ast.IfExp) -> None:
        fresh = value.orelse
        if not (isinstance(fresh, ast.Call) and _callee(fresh) == "empty_strided"):
            raise Untranslatable("a donated buffer without a fresh allocation")
        test = ast.unparse(value.test)
        if "getrefcount" not in test or "storage_use_count" not in test:
            raise Untranslatable(f"condition {test!r}")
        size, stride, dtype = self.allocation(fresh)
        view: tuple[Any, ...] | None = None
        if isinstance(value.body, ast.Name):
            donor = self.known(value.body.id)
        elif isinstance(value.body, ast.Call) and _callee(value.body) == "as_strided":
            donor, view = self.view(value.body)
        else:
            raise Untranslatable(f"donated view {ast.unparse(value.body)!r}")
        self.emit(
            (DONATED, self.register(name), donor, view, size, stride, dtype, self.device()),
            f"allocating {name} ({_dims(size)}, {dtype})",
        )

    def launch(self, kernel: str, args: list[ast.expr]) -> None:
        numel = -1  # a kernel without numel (C++): its sizes are compiled in
        if args and isinstance(args[0], ast.Constant):
            numel, args = self.constant(args[0]), args[1:]
        elif args and not _reads(args[0], self.registers):
            raise Untranslatable(f"launch of {kernel} over a symbolic size")
        index = self.kernels.setdefault(kernel, len(self.kernels))
        values: list[tuple[int, Any]] = []
        for arg in args:
            if isinstance(arg, ast.Name) and arg.id in self.registers:
                values.append((REGISTER, self.registers[arg.id]))
            elif (
                isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "data_ptr"
                and not arg.args
            ):
                values.append((ADDRESS, self.known(_name(arg.func.value))))
            else:
                values.append((CONSTANT, ("", self.constant(arg))))
        self.emit((LAUNCH, index, numel, values), f"kernel {kernel}")

    def extern(self, call: ast.Call, targets: list[Any]) -> None:
        target = _string(_op_key(call.func))
        op = self.ops.get(target)
        native = _boxable(op, self.namespace["ops"].get(target))
        index = self.externs.setdefault(target, len(self.externs))
        self.native[target] = native
        if native:
            args, keywords = self.boxed_arguments(op, call), []
        else:
            args = [self.argument(a, "") for a in call.args]
            args += [self.argument(k.value, "") for k in call.keywords]
            keywords = [str(k.arg) for k in call.keywords]
        flat = targets is self.flattened
        if flat:
            outputs = targets  # filled by the `result[i]` lines that follow
        else:
            outputs = []
            for position, name in enumerate(targets):
                register = -1 if name == "_" else self.register(name)
                outputs.append((register, None, None))
                if name != "_":
                    self.last_extern[name] = (outputs, position)
        self.emit((EXTERN, index, args, keywords, outputs, ""), self.where(target, call))

    def boxed_arguments(self, op: Any, call: ast.Call) -> list[Any]:
        """The call's arguments in the schema's order, defaults filled in (a boxed call)."""
        schema = op._schema
        given: dict[str, ast.expr] = {}
        positional = [a for a in schema.arguments if not a.kwarg_only]
        if len(call.args) > len(positional):
            raise Untranslatable(f"{schema.name}: too many positional arguments")
        for argument, node in zip(positional, call.args):
            given[argument.name] = node
        for keyword in call.keywords:
            given[str(keyword.arg)] = keyword.value
        values = []
        for argument in schema.arguments:
            kind = str(argument.type)
            if argument.name in given:
                value = self.argument(given[argument.name], kind)
                if kind == "Tensor" and value == (CONSTANT, ("", None)):
                    value = (CONSTANT, ("tensor", None))  # an undefined tensor, as Python passes
                values.append(value)
            elif argument.has_default_value():
                values.append((CONSTANT, (_hint(kind), argument.default_value)))
            else:
                raise Untranslatable(f"{schema.name}: no value for {argument.name}")
        return values

    def argument(self, node: ast.expr, kind: str) -> Any:
        if isinstance(node, ast.Name) and node.id in self.registers:
            return (REGISTER, self.registers[node.id])
        if isinstance(node, ast.Call) and _callee(node) == "as_strided":
            return (VIEWED, self.view(node))
        if isinstance(node, (ast.List, ast.Tuple)) and any(
            _reads(e, self.registers) for e in node.elts
        ):
            items = []
            for element in node.elts:
                item = self.argument(element, "")
                if item[0] not in (REGISTER, VIEWED, CONSTANT) or (
                    item[0] == CONSTANT and item[1][1] is not None
                ):
                    raise Untranslatable(f"list argument {ast.unparse(node)!r}")
                items.append(item)
            optional = "Optional[Tensor]" in kind
            return (OPTIONAL_TENSOR_LIST if optional else TENSOR_LIST, items)
        return (CONSTANT, (_hint(kind), self.constant(node)))

    def returned(self, value: ast.expr) -> None:
        if not isinstance(value, ast.Tuple):
            raise Untranslatable("return")
        results = []
        for element in value.elts:
            restrided = (None, None)
            if isinstance(element, ast.Call) and _callee(element) == "restride":
                restrided = (self.constant(element.args[1]), self.constant(element.args[2]))
                element = element.args[0]
            detach = False
            if (
                isinstance(element, ast.Call)
                and isinstance(element.func, ast.Attribute)
                and element.func.attr == "detach"
            ):
                detach, element = True, element.func.value
            results.append((self.argument(element, ""), detach, *restrided))
        self.emit((RETURN, results), "returning the outputs")

    # ---- expressions ------------------------------------------------------------------------

    def allocation(self, call: ast.Call) -> tuple[Any, Any, Any]:
        size, stride = self.constant(call.args[0]), self.constant(call.args[1])
        keywords = {k.arg: k.value for k in call.keywords}
        dtype = self.constant(keywords["dtype"])
        return size, stride, dtype

    def view(self, call: ast.Call) -> tuple[int, tuple[Any, ...]]:
        """`as_strided(base, size, stride, offset)`: the base's register and the view."""
        base = _name(call.args[0])
        register = self.known(base)
        size, stride = self.constant(call.args[1]), self.constant(call.args[2])
        offset_node = call.args[3]
        relative, offset = False, 0
        if _storage_offset_of(offset_node) == base:
            relative = True
        elif (
            isinstance(offset_node, ast.BinOp)
            and isinstance(offset_node.op, ast.Add)
            and _storage_offset_of(offset_node.left) == base
        ):
            relative, offset = True, self.constant(offset_node.right)
        else:
            offset = self.constant(offset_node)
        if not isinstance(offset, int):
            raise Untranslatable("a view at a symbolic offset")
        return register, (size, stride, offset, relative)

    def constant(self, node: ast.expr) -> Any:
        if _reads(node, self.registers):
            raise Untranslatable(f"{ast.unparse(node)!r} is not a constant")
        try:
            value = eval(compile(ast.Expression(node), "<wrapper>", "eval"), self.namespace)  # noqa: S307
        except Exception as error:
            raise Untranslatable(f"{ast.unparse(node)!r}: {error}") from error
        if isinstance(value, tuple):
            value = list(value)
        return value

    def device(self) -> Any:
        return self.namespace["DEVICE"]


def _boxable(op: Any, direct: Any) -> bool:
    """Whether an extern runs as the dispatcher's boxed call of its overload: an ATen
    overload whose Python call goes straight to the dispatcher (`wrapper.direct_op` found a
    direct entry for it)."""
    return type(op) is torch._ops.OpOverload and direct is not op and direct is not None


def _dims(size: Any) -> str:
    return "x".join(str(n) for n in size) if isinstance(size, list) and size else "scalar"


def _hint(kind: str) -> str:
    if "List[float]" in kind:
        return "float"
    if "List[bool]" in kind:
        return "bool"
    return ""


def _callee(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else None


def _is_op(function: ast.expr) -> bool:
    return (
        isinstance(function, ast.Subscript)
        and isinstance(function.value, ast.Name)
        and function.value.id == "ops"
    )


def _op_key(function: ast.expr) -> ast.expr:
    assert isinstance(function, ast.Subscript)
    return function.slice


def _is_result(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "result"


def _string(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise Untranslatable(f"{ast.unparse(node)!r} is not a string")


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    raise Untranslatable(f"{ast.unparse(node)!r} is not a name")


def _storage_offset_of(node: ast.expr) -> str | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "storage_offset"
        and isinstance(node.func.value, ast.Name)
    ):
        return node.func.value.id
    return None


def _reads(node: ast.expr, registers: Mapping[str, int]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in registers for n in ast.walk(node))


class NativeCall:
    """A compiled graph's call: its Python wrapper first, then the interpreter's program.

    `build` gives the interpreter module, or None while it is not ready (ember-runtime's
    `interpreter_if_ready`, which builds it in the background): until then every call runs
    the Python wrapper. A graph whose wrapper does not translate, or a process where the
    interpreter cannot be built, keeps calling the Python wrapper (the reason logged once)."""

    def __init__(
        self,
        name: str,
        python_call: Callable[[list[Any]], Any],
        translation: Translation,
        kernels: Mapping[str, Any],
        ops: Mapping[str, Any],
        build: Callable[[], Any],
    ) -> None:
        self.name = name
        self.python_call = python_call
        self.translation = translation
        self.kernel_objects = kernels
        self.ops = ops
        self.build = build
        self.program: Any = None
        self.stream: Callable[[], int] = lambda: 0
        self._lock = threading.Lock()
        self._pending = True  # the program may still be made
        self.native_kernels = 0

    @property
    def __globals__(self) -> dict[str, Any]:
        """The Python wrapper's globals (`kernels`, `ops`), as a plain wrapper function has
        them: what tools and tests read a compiled graph's kernels from."""
        return self.python_call.__globals__

    def __call__(self, args: list[Any]) -> Any:
        program = self.program
        if program is not None:
            return program.run(args, self.stream())
        if self.translation.device.type == "cpu" and self._pending:
            # C++ kernels need no first launch to bind: the first call can be the program's
            self._try_make()
            if self.program is not None:
                return self.program.run(args, self.stream())
        result = self.python_call(args)  # the first call binds the kernels
        self._try_make()
        return result

    def _try_make(self) -> None:
        if self._pending and self._lock.acquire(blocking=False):
            try:
                if self._pending:
                    self._make()
            finally:
                self._lock.release()

    def _make(self) -> None:
        try:
            module = self.build()
        except Exception as error:  # no compiler, a failed build: the Python wrapper stays
            self._pending = False
            logger.warning("graph %s: the native wrapper is unavailable (%s)", self.name, error)
            return
        if module is None:  # still building: ask again after the next call
            return
        self._pending = False
        translation = self.translation
        device = translation.device
        index = device.index if device.index is not None else _current_index(device)
        kernels = []
        for name in translation.kernels:
            kernel = self.kernel_objects[name]
            spec = None
            describe = getattr(kernel, "native_launch", None)
            if device.type == "cuda" and describe is not None:
                spec = describe(index)
            fallback = kernel.launch
            if spec is None:
                kernels.append((name, 0, 1, 0, 0, index, "", fallback))
                continue
            self.native_kernels += 1
            kernels.append(
                (
                    name,
                    spec.function,
                    spec.block,
                    spec.threads,
                    spec.shared,
                    index,
                    spec.codes,
                    fallback,
                )
            )
        externs = []
        for target in translation.externs:
            op = self.ops[target]
            if translation.native_externs.get(target):
                schema = op._schema
                externs.append((schema.name, schema.overload_name, op))
            else:
                externs.append((target, None, op))
        kernels = [_with_codes(k, instruction_args(translation, i)) for i, k in enumerate(kernels)]
        try:
            program = module.Program(
                translation.instructions,
                kernels,
                externs,
                len(translation.registers),
                self.python_call,
                translation.notes,
                self.name,
            )
        except Exception as error:
            logger.warning("graph %s: the native wrapper cannot run it (%s)", self.name, error)
            return
        if device.type == "cuda":
            raw = torch._C._cuda_getCurrentRawStream
            self.stream = lambda: raw(index)
        self.program = program


def instruction_args(translation: Translation, kernel: int) -> int:
    """How many arguments the program passes to kernel `kernel` (after numel)."""
    for instruction in translation.instructions:
        if instruction[0] == LAUNCH and instruction[1] == kernel:
            return len(instruction[3])
    return 0


def _with_codes(kernel: tuple[Any, ...], count: int) -> tuple[Any, ...]:
    """A kernel without a native launch takes `count` placeholder codes (every launch of it
    goes back to Python, whatever the codes)."""
    if kernel[1]:
        return kernel
    return (*kernel[:6], "P" * count, kernel[7])


def _current_index(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.current_device())
    return 0
