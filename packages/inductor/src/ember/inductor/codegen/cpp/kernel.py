"""One fused kernel as C++: OpenMP over the outer loops, a loop per reduction and per group
of inner (epilogue) nodes, bodies emitted once per distinct value (common subexpressions
shared), buffers local to the kernel kept in registers. Atomic accumulations are `+=` under
`#pragma omp atomic`, and a loop holding one is not vectorized, but in a kernel that runs on
one thread (serial_accumulation.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sympy
import torch

from ember.inductor.codegen.backend import KernelArgument, KernelSource
from ember.inductor.codegen.cpp.byte_rows import widen_byte_rows
from ember.inductor.codegen.cpp.half_precision import (
    HALF_TYPES,
    STORAGE_TYPE,
    narrow,
    round_to,
    widen,
)
from ember.inductor.codegen.cpp.ops import (
    CPP_TYPES,
    OPERAND_DTYPE_OPS,
    OPS,
    RANDOM,
    accumulator_dtype,
    literal,
    reduction_combine,
    reduction_init,
)
from ember.inductor.codegen.cpp.outer_lanes import generate_outer_lanes, outer_lanes
from ember.inductor.codegen.cpp.parallel_regions import thread_clause
from ember.inductor.codegen.cpp.printer import cpp_index
from ember.inductor.codegen.cpp.row_invariants import hoist_row_invariant_loads
from ember.inductor.codegen.cpp.row_reuse import row_capacity, shared_rows, structure, subtrees
from ember.inductor.codegen.cpp.row_sums import combine_lanes, declare_lanes, generate_row_sum
from ember.inductor.codegen.cpp.serial_accumulation import (
    lanes_accumulate_apart,
    one_thread_twin,
)
from ember.inductor.codegen.cpp.tiling import generate_tiled, transposed_tile
from ember.inductor.codegen.value_scopes import ValueScopes, operand_key
from ember.inductor.ir.body import BodyValue, walk
from ember.inductor.ir.indexing import Expr, index_var, product
from ember.inductor.ir.program import Program
from ember.inductor.scheduler.fusion import Kernel, Member


class CppKernel(ValueScopes):
    """Builds the source of one kernel."""

    def __init__(self, kernel: Kernel, program: Program) -> None:
        super().__init__()
        self.kernel = kernel
        self.program = program
        self.lines: list[str] = []
        self.depth = 1
        self.storages: dict[str, None] = {}
        self.sizes: set[str] = set()
        self.locals: dict[str, str] = {}
        # row values a reduction loop saves for a later loop (row_reuse.py), by structure
        self.shared: dict[tuple[object, ...], str] = {}
        self.saved: set[str] = set()  # rows already written by an emitted reduction loop
        # transposed loads a whole tile reads from its stack buffers (tiling.py), by
        # (storage, index)
        self.staged: dict[tuple[str, str], str] = {}
        # masked values whose mask does not vary along the SIMD loop, with the offsets of
        # their loads computed before it (`hoist_window_masks`): by id of the masked value,
        # and by id of the load its offset variable and the SIMD part of its index
        self.hoisted: set[int] = set()
        self.offsets: dict[int, tuple[str, Expr]] = {}
        # hoisted masked loads read through a pointer chosen before the loop (the storage
        # where the mask is on, an array of the fill value where off), by id of the masked
        # value: the pointer and the SIMD loop's variable
        self.sources: dict[int, tuple[str, str]] = {}
        self.hoisting = 0  # how many hoisted masked values are being emitted
        self.row_loops = 0  # how many loops over the reduction dims are being emitted
        self.serial = False  # known to open no parallel region: accumulations need no atomics

    # ---- emission helpers -------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(f"{header} {{".lstrip())
        self.depth += 1
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.depth -= 1
            self.line("}")

    def index(self, expr: Expr) -> str:
        for symbol in expr.free_symbols:
            name = str(symbol)
            if not (name[0] in "xr" and name[1:].isdigit()) and not name.startswith("ind"):
                self.sizes.add(name)
        return cpp_index(expr)

    def size(self, expr: Expr) -> str:
        return self.index(sympy.sympify(expr))

    # ---- values ---------------------------------------------------------------------------

    def value(self, node: BodyValue, names: dict[int, str]) -> str:
        """Emit `node` (and what it needs) once; its C++ variable name."""
        done = names.get(id(node))
        if done is not None:
            return done
        if node.op == "masked":
            return self._masked(node, names)
        if node.op == "load":
            if node.args[2]:  # indirect loads are not shared
                key: tuple[object, ...] = ("indirect", self.fresh())
            else:
                key = ("load", str(node.args[0]), str(node.args[1]), node.dtype)
                if self.hoisting and id(node) in self.offsets:  # elsewhere where masked off
                    key += (self.offsets[id(node)][0],)
        else:
            operands = [
                self.value(child, names) if isinstance(child, BodyValue) else child
                for child in node.args
            ]
            key = (node.op, *(operand_key(a) for a in operands), node.dtype)
        found = self.lookup(key)
        if found is not None:
            names[id(node)] = found
            return found
        expression = self._expression(node, names)
        if node.op == "constant":
            names[id(node)] = expression
            return expression
        name = self.fresh()
        self.line(f"{CPP_TYPES[node.dtype]} {name} = {expression};")
        self.scopes[-1][key] = name
        names[id(node)] = name
        return name

    def _expression(self, node: BodyValue, names: dict[int, str]) -> str:
        op = node.op
        cpp = CPP_TYPES[node.dtype]
        if op == "load":
            storage, index, indirect = node.args
            assert isinstance(index, sympy.Expr) and isinstance(indirect, tuple)
            substitution = {}
            for symbol, chosen in indirect:
                variable = self.fresh("ind")
                self.line(f"int64_t {variable} = {self.value(chosen, names)};")
                substitution[symbol] = sympy.Symbol(variable, integer=True)
            local = self.locals.get(str(storage))
            if local is not None:
                return local
            stored = self.program.storages[str(storage)].dtype
            staged = self.staged.get((str(storage), str(index))) if not indirect else None
            if staged is not None:
                return widen(stored, staged) if stored in HALF_TYPES else staged
            self.storages[str(storage)] = None
            element = f"{storage}[{self.index(index.xreplace(substitution))}]"
            if self.hoisting and id(node) in self.offsets:
                start, along = self.offsets[id(node)]
                element = f"{storage}[{self.index(along)} + {start}]"
            if stored in HALF_TYPES:  # 16-bit bits, a float in registers
                return widen(stored, element)
            # bool storages are bytes to the compiler (see `_pointee`)
            return f"({element} != 0)" if node.dtype == torch.bool else element
        if op == "constant":
            return literal(node.args[0], node.dtype)
        if op == "index_expr":
            index = f"static_cast<{cpp}>({self.index(node.args[0])})"
            return round_to(node.dtype, index) if node.dtype in HALF_TYPES else index
        if op == "random":
            seed, offset, kind = node.args
            assert isinstance(seed, BodyValue) and isinstance(offset, sympy.Expr)
            return f"{RANDOM[str(kind)]}({self.value(seed, names)}, {self.index(offset)})"
        if op == "to_dtype":
            source = node.args[0]
            assert isinstance(source, BodyValue)
            if source.dtype == torch.bool and node.dtype != torch.bool:
                # a select: GCC 12 vectorized no loop converting a comparison's bool to a
                # float beside 64-bit integer math (a dropout mask: `(u < p)` of Philox bits)
                return f"({self.value(source, names)} ? {cpp}(1) : {cpp}(0))"
            if node.dtype in HALF_TYPES:  # round as eager's cast does, compute on in float
                return round_to(node.dtype, f"static_cast<float>({self.value(source, names)})")
            return f"static_cast<{cpp}>({self.value(source, names)})"
        if op == "where":
            c, a, b = (self.value(arg, names) for arg in node.args)  # type: ignore[arg-type]
            return f"({c} ? {a} : {b})"
        operands = [self.value(arg, names) for arg in node.args]  # type: ignore[arg-type]
        if op == "div" and self._by_row_constant(node):
            # GCC hoists the reciprocal out of the row loop: one division a row, a product an
            # element (a softmax's output pass; eager's softmax multiplies so too)
            return f"({operands[0]} * ({literal(1, node.dtype)} / {operands[1]}))"
        operand_type = cpp
        if op in OPERAND_DTYPE_OPS:
            first = node.args[0]
            assert isinstance(first, BodyValue)
            operand_type = CPP_TYPES[first.dtype]
        return OPS[op](operands, operand_type)

    def _by_row_constant(self, node: BodyValue) -> bool:
        """Whether `node` is a float division, in a loop over a row, by a value computed
        once for the row before the loop (a reduction's result kept in a register)."""
        divisor = node.args[1]
        return (
            self.row_loops > 0
            and node.dtype in (torch.float32, torch.float64)
            and isinstance(divisor, BodyValue)
            and divisor.op == "load"
            and not divisor.args[2]
            and str(divisor.args[0]) in self.locals
        )

    def _masked(self, node: BodyValue, names: dict[int, str]) -> str:
        """A value under a mask, shared like any other op by what it computes: a pooling
        window's element read by each step of its select chain is one tree per reader (its
        lazy value inlined again), and each was a block of its own (a 3x3 window over a
        padded map: 36 blocks where 9 compute every value)."""
        mask, inner, other = node.args
        assert isinstance(mask, BodyValue) and isinstance(inner, BodyValue)
        condition = self.value(mask, names)
        key = ("masked", condition, structure(inner), operand_key(other), node.dtype,
               id(node) in self.hoisted)  # fmt: skip
        found = self.lookup(key)
        if found is not None:
            names[id(node)] = found
            return found
        result = self.fresh()
        source = self.sources.get(id(node))
        if source is not None:
            self.line(f"{CPP_TYPES[node.dtype]} {result} = {source[0]}[{source[1]}];")
        elif id(node) in self.hoisted:  # its loads read at offsets computed before the loop
            self.hoisting += 1
            try:
                computed = self.value(inner, dict(names))
            finally:
                self.hoisting -= 1
            fallback = literal(other, node.dtype)
            self.line(f"{CPP_TYPES[node.dtype]} {result} = {condition} ? {computed} : {fallback};")
        else:
            self.line(f"{CPP_TYPES[node.dtype]} {result} = {literal(other, node.dtype)};")
            scoped = dict(names)
            with self.block(f"if ({condition})"):
                self.line(f"{result} = {self.value(inner, scoped)};")
        self.scopes[-1][key] = result
        names[id(node)] = result
        return result

    # ---- kernel structure -------------------------------------------------------------------

    def generate(self) -> KernelSource:
        kernel = self.kernel
        outer_vars = [index_var("x", i) for i in range(len(kernel.outer))]
        numel = product(kernel.outer) * product(kernel.inner)
        parallel_outer = bool(kernel.outer)
        header_lines = self.lines
        self.lines = []
        self.depth = 1
        lanes = outer_lanes(self) if parallel_outer else None
        tile = transposed_tile(self) if parallel_outer and lanes is None else None
        if lanes is not None:
            generate_outer_lanes(self, outer_vars, numel, lanes)
        elif tile is not None:
            generate_tiled(self, outer_vars, numel, tile)
        elif not parallel_outer:
            hoist_row_invariant_loads(self)
            self._members(parallel_outer)
        else:
            clause = thread_clause(numel, self.size(numel))
            if clause == "" and one_thread_twin(kernel):
                # the same loops for a run on one thread (torch.set_num_threads(1)): plain
                # `+=` accumulations, SIMD where lanes add apart (serial_accumulation.py)
                with self.block("if (omp_get_max_threads() == 1)"):
                    self._outer_nest(outer_vars, None)
                with self.block("else"):
                    self._outer_nest(outer_vars, clause)
            else:
                self._outer_nest(outer_vars, clause)
        return self._finish(header_lines)

    def _outer_nest(self, outer_vars: list[sympy.Symbol], clause: str | None) -> None:
        """A kernel's loops over its outer dims and everything in them: threads (`clause`:
        see `thread_clause`; None, none) over all loops but the last, SIMD over the last
        (collapsing the last loop too would hide its stride-1 accesses from the vectorizer)."""
        kernel = self.kernel
        loops_open = 0
        split = len(kernel.outer) - 1 if not kernel.inner and len(kernel.outer) > 1 else None
        threaded = kernel.outer[:split] if split is not None else kernel.outer
        collapse = f" collapse({len(threaded)})" if len(threaded) > 1 else ""
        self.serial = clause is None
        vector = not any(m.store_mode for m in kernel.members if m.level == "outer") or (
            self.serial and not kernel.inner and lanes_accumulate_apart(kernel, outer_vars[-1])
        )
        simd = " simd" if not kernel.inner and len(kernel.outer) == 1 and vector else ""
        if clause is not None:
            self.line(f"#pragma omp parallel for{simd}{collapse}{clause}")
        elif simd:
            self.line("#pragma omp simd")
        for position, (variable, size) in enumerate(zip(outer_vars, kernel.outer)):
            if split is not None and position == split and vector:
                if hoistable_masks(kernel, self.program, variable, size):
                    self.line("{")
                    self.depth += 1
                    loops_open += 1
                    hoist_window_masks(self, variable, size)
                self.line("#pragma omp simd")
            bound = self.size(size)
            self.line(f"for (int64_t {variable} = 0; {variable} < {bound}; ++{variable})")
        self.line("{")
        self.depth += 1
        loops_open += 1
        self.shared = shared_rows(kernel, self.program.size_ranges)
        for key, row in self.shared.items():
            capacity = row_capacity(kernel.inner[0], self.program.size_ranges)
            self.line(f"{CPP_TYPES[key[-1]]} {row}[{capacity}L];")  # type: ignore[index]
        widen_byte_rows(self)
        hoist_row_invariant_loads(self)
        self._members(True)
        for _ in range(loops_open):
            self.depth -= 1
            self.line("}")

    def _members(self, parallel_outer: bool) -> None:
        """Every member's loops and stores, at one point of the outer loops."""
        members = self.kernel.members
        position = 0
        while position < len(members):
            member = members[position]
            if member.level == "inner":
                group = [
                    m for m in members[position:] if m.level == "inner" and m.group == member.group
                ]
                self._inner(group, parallel=not parallel_outer)
                position += len(group)
                continue
            if member.level == "reduction":
                self._reduction(member, parallel=not parallel_outer and len(members) == 1)
            else:
                names: dict[int, str] = {}
                self._store(member, self.value(member.body, names), names)
            position += 1

    def _finish(self, header_lines: list[str]) -> KernelSource:
        kernel = self.kernel
        body_lines = self.lines
        self.lines = header_lines
        arguments = [KernelArgument(name, "pointer") for name in self.storages]
        arguments += [KernelArgument(name, "size") for name in sorted(self.sizes)]
        params = [
            f"void* p_{a.name}" if a.kind == "pointer" else f"int64_t {a.name}" for a in arguments
        ]
        casts = [
            f"  auto* {a.name} = static_cast<{self._pointee(a.name)}*>(p_{a.name});"
            for a in arguments
            if a.kind == "pointer"
        ]
        lines = dict.fromkeys(line for m in kernel.members for line in m.node.sources)
        # a backslash ending a // comment would continue it onto the next line
        comments = [f"// {line.replace(chr(92), '/')}" for line in lines]
        signature = f'extern "C" void {kernel.name}({", ".join(params)})'
        source = "\n".join([*comments, signature, "{", *casts, *body_lines, "}"])
        return KernelSource(kernel.name, source, arguments)

    def _pointee(self, storage: str) -> str:
        """The element type of a storage's pointer. A bool storage is read and written as
        `uint8_t` (torch keeps a bool as one byte, 0 or 1): GCC 12 vectorizes no loop that
        loads through a `bool*` ("no vectype"), so a masked softmax's row loops ran scalar."""
        dtype = self.program.storages[storage].dtype
        if dtype in HALF_TYPES:
            return STORAGE_TYPE
        return "uint8_t" if dtype == torch.bool else CPP_TYPES[dtype]

    def _store(self, member: Member, value: str, names: dict[int, str]) -> None:
        storage = member.node.storage
        cpp = CPP_TYPES[member.node.dtype]
        half = member.node.dtype if member.node.dtype in HALF_TYPES else None
        if storage in self.kernel.local_buffers:
            local = f"{storage}_v"
            if half is not None and not _rounded_to(member, half):
                value = round_to(half, value)
            self.line(f"{cpp} {local} = {value};")
            self.locals[storage] = local
            return
        self.storages[storage] = None
        substitution = {}
        for symbol, chosen in member.store_indirect:
            variable = self.fresh("ind")
            self.line(f"int64_t {variable} = {self.value(chosen, names)};")
            substitution[symbol] = sympy.Symbol(variable, integer=True)
        target = f"{storage}[{self.index(member.store_index.xreplace(substitution))}]"
        if half is not None:
            # a value just rounded to this type narrows from the float it rounded: same bits
            source = member.body.args[0] if _rounded_to(member, half) else None
            unrounded = names.get(id(source)) if isinstance(source, BodyValue) else None
            value = narrow(half, unrounded or value)
        forward = None
        at_row_start = member.level == "reduction" or (
            member.level == "outer" and bool(self.kernel.inner)
        )
        if at_row_start and half is None and not member.store_indirect:
            # a row's value stored before the loops that read it (a reduction's result, a
            # layer norm's 1/std): they read the variable (row_invariants.py: GCC cannot hoist
            # the load past stores that may alias it; PRE then reloads it in the latch, and a
            # loop whose latch is not empty is not vectorized)
            forward = self.fresh()
            self.line(f"{cpp} {forward} = {value};")
            value = forward
        if member.store_mode == "atomic_add":
            if not self.serial:  # one thread: a plain `+=` (serial_accumulation.py)
                self.line("#pragma omp atomic")
            self.line(f"{target} += {value};")
        else:
            assert member.store_mode is None, member.store_mode
            self.line(f"{target} = {value};")
        self.forget_loads(storage)
        if forward is not None and member.store_mode is None:
            key = ("load", storage, str(member.store_index), member.node.dtype)
            self.scopes[-1][key] = forward

    def _reduction_loops(self, parallel_clause: str) -> list[str]:
        headers = []
        for k, size in enumerate(self.kernel.inner):
            variable = index_var("r", k)
            headers.append(
                f"for (int64_t {variable} = 0; {variable} < {self.size(size)}; ++{variable})"
            )
        return headers

    def _reduction(self, member: Member, parallel: bool) -> None:
        node = member.node
        reduction_type = node.reduction_type
        assert reduction_type is not None
        dtype = node.dtype
        value_dtype = member.body.dtype
        accumulator_type = accumulator_dtype(reduction_type, value_dtype)
        accumulator = self.fresh("acc")
        self.line(
            f"{CPP_TYPES[accumulator_type]} {accumulator} = "
            f"{reduction_init(reduction_type, accumulator_type)};"
        )
        arg = reduction_type in {"argmax", "argmin"}
        if arg:
            best = self.fresh("idx")
            self.line(f"int64_t {best} = 0;")
        headers = self._reduction_loops("")
        numel = product(self.kernel.inner)
        if reduction_type in {"max", "min"} and len(headers) == 1 and value_dtype != torch.bool:
            result = self._row_extremum(member, reduction_type, accumulator)
            self._store(member, f"static_cast<{CPP_TYPES[dtype]}>({result})", {})
            return
        widened = accumulator_type != value_dtype and (
            value_dtype == torch.float32 or value_dtype in HALF_TYPES
        )
        if reduction_type == "sum" and widened and not parallel and headers:
            # over one or several loops (a batch norm's sums over N, H, W): lanes along the last
            lanes = declare_lanes(self, accumulator)
            for header in headers[:-1]:
                self.line(header + " {")
                self.depth += 1
            generate_row_sum(self, member, accumulator, lanes)
            for _ in headers[:-1]:
                self.depth -= 1
                self.line("}")
            combine_lanes(self, accumulator, lanes)
            self._store(member, f"static_cast<{CPP_TYPES[dtype]}>({accumulator})", {})
            return
        if reduction_type == "sum" and len(headers) == 1:
            clause = thread_clause(numel, self.size(numel)) if parallel else None
            threads = "parallel for " if clause is not None else ""
            self.line(f"#pragma omp {threads}simd reduction(+:{accumulator}){clause or ''}")
        for header in headers[:-1]:
            self.line(header + " {")
            self.depth += 1
        with self.block(headers[-1] if headers else ""):
            names = self._saved_rows(member)
            value = self.value(member.body, names)
            self._save_rows(member, names)
            if arg:
                flat = sympy.S.Zero
                for k, size in enumerate(self.kernel.inner):
                    flat = flat * size + index_var("r", k)
                compare = ">" if reduction_type == "argmax" else "<"
                with self.block(
                    f"if ({value} {compare} {accumulator} || ({value} != {value} && {accumulator} == {accumulator}))"
                ):
                    self.line(f"{accumulator} = {value};")
                    self.line(f"{best} = {self.index(flat)};")
            else:
                self.line(reduction_combine(reduction_type, accumulator, value, accumulator_type))
        for _ in headers[:-1]:
            self.depth -= 1
            self.line("}")
        result = best if arg else accumulator
        self._store(member, f"static_cast<{CPP_TYPES[dtype]}>({result})", {})

    def row_value(self, member: Member) -> str:
        """Emit a reduction member's body at one point of its row loop, reading and saving
        the rows it shares with other loops (row_reuse.py); the value's name."""
        self.row_loops += 1
        try:
            names = self._saved_rows(member)
            value = self.value(member.body, names)
        finally:
            self.row_loops -= 1
        self._save_rows(member, names)
        return value

    def _row_extremum(self, member: Member, reduction_type: str, accumulator: str) -> str:
        """A max or min over one reduction loop, vectorized by an `omp simd reduction(max)`
        loop (GCC vectorizes no loop-carried NaN-propagating max, so the select in the loop
        drops NaN and a float reduction also ORs a per-row flag of whether it met one; a
        flagged row's result is NaN, as eager's). Returns the variable holding the result
        (declared as `accumulator`)."""
        dtype = member.body.dtype
        floating = dtype.is_floating_point
        keep = ">" if reduction_type == "max" else "<"
        nan = f"{accumulator}_nan"
        clauses = f"reduction({reduction_type}:{accumulator})"
        if floating:
            self.line(f"int {nan} = 0;")
            clauses += f" reduction(|:{nan})"
        size = self.size(self.kernel.inner[0])
        variable = index_var("r", 0)
        self.line(f"#pragma omp simd {clauses}")
        with self.block(f"for (int64_t {variable} = 0; {variable} < {size}; ++{variable})"):
            value = self.value(member.body, {})
            self.line(f"{accumulator} = ({accumulator} {keep} {value}) ? {accumulator} : {value};")
            if floating:
                self.line(f"{nan} = {nan} | ({value} != {value});")
        if floating:
            quiet = f"std::numeric_limits<{CPP_TYPES[dtype]}>::quiet_NaN()"
            self.line(f"if ({nan}) {accumulator} = {quiet};")
        return accumulator

    def _save_rows(self, member: Member, names: dict[int, str]) -> None:
        """In a reduction loop: store the values later loops read back (`self.shared`), but
        for rows an earlier reduction loop already wrote (this one read them)."""
        saved: set[str] = set()
        for node in subtrees(member.body):
            row = self.shared.get(structure(node)) if self.shared else None
            if row is not None and row not in saved | self.saved and id(node) in names:
                self.line(f"{row}[{index_var('r', 0)}] = {names[id(node)]};")
                saved.add(row)
        self.saved |= saved

    def _saved_rows(self, member: Member) -> dict[int, str]:
        """In an inner loop or a later sum: the body values to read from the rows an
        earlier reduction loop saved."""
        names: dict[int, str] = {}
        if self.shared:
            for node in subtrees(member.body):
                row = self.shared.get(structure(node))
                if row is not None and row in self.saved:  # not in loops that run before
                    names[id(node)] = f"{row}[{index_var('r', 0)}]"
        return names

    def _inner(self, group: list[Member], parallel: bool) -> None:
        headers = self._reduction_loops("")
        numel = product(self.kernel.inner)
        simd = "" if any(m.store_mode for m in group) else " simd"
        if len(headers) == 1:
            clause = thread_clause(numel, self.size(numel)) if parallel else None
            if clause is not None:
                self.line(f"#pragma omp parallel for{simd}{clause}")
            elif simd:
                self.line("#pragma omp simd")
        for header in headers[:-1]:
            self.line(header + " {")
            self.depth += 1
        with self.block(headers[-1]):
            self.row_loops += 1
            try:
                for member in group:
                    names = self._saved_rows(member)
                    self._store(member, self.value(member.body, names), names)
            finally:
                self.row_loops -= 1
        for _ in headers[:-1]:
            self.depth -= 1
            self.line("}")


def _rounded_to(member: Member, dtype: torch.dtype) -> bool:
    """Whether the value `member` stores is an explicit cast to the 16-bit `dtype` (already
    rounded); a reduction stores its result, not its body."""
    body = member.body
    return member.level != "reduction" and body.op == "to_dtype" and body.dtype == dtype


# Integer ops that trap on some operands (a zero divisor), which a masked-off lane may hold.
TRAPPING_INTEGER_OPS = frozenset({"div", "floordiv", "truncdiv", "remainder", "fmod"})


def _window_masks(
    kernel: Kernel, program: Program, variable: sympy.Symbol, size: Expr
) -> list[tuple[BodyValue, list[tuple[BodyValue, Expr, Expr]]]]:
    """The masked values of a pointwise kernel whose mask is index arithmetic not reading
    `variable` (the SIMD loop's), each with its loads as (load, the index's terms in
    `variable`, the rest): a pooling window's bounds checks. Such a value may be computed
    in every lane, its loads reading `index` where the mask is on and the terms in
    `variable` alone where it is off, when those stay inside a buffer of known size and
    nothing in it traps. GCC 12 vectorized no loop holding `if (mask) { load }` with a mask
    constant along the loop ("no vectype for .MASK_LOAD"): ResNet's channels-last stem max
    pool ran scalar, 9 such blocks an output."""
    found = []
    seen: set[int] = set()
    extent = sympy.sympify(size)
    for member in kernel.members:
        for value in walk(member.body):
            if value.op != "masked" or id(value) in seen:
                continue
            seen.add(id(value))
            mask, inner = value.args[0], value.args[1]
            assert isinstance(mask, BodyValue) and isinstance(inner, BodyValue)
            symbols = _index_symbols(mask)
            if symbols is None or variable in symbols or not extent.is_Integer:
                continue
            loads = _offset_loads(inner, program, variable, int(extent), symbols)
            if loads is not None:
                found.append((value, loads))
    return found


def _index_symbols(tree: BodyValue) -> set[sympy.Symbol] | None:
    """The loop variables a mask reads, None where it loads memory or draws numbers."""
    symbols: set[sympy.Symbol] = set()
    for value in walk(tree):
        if value.op in ("load", "random", "masked"):
            return None
        for arg in value.args:
            if isinstance(arg, sympy.Expr):
                symbols |= arg.free_symbols
    return symbols


def _offset_loads(
    inner: BodyValue,
    program: Program,
    variable: sympy.Symbol,
    extent: int,
    mask_symbols: set[sympy.Symbol],
) -> list[tuple[BodyValue, Expr, Expr]] | None:
    """The loads of `inner` whose index reads what the mask reads, split into the terms in
    `variable` and the rest; the others read the elements lanes where the mask is on read
    (a batch norm's per-channel scale), so they need no offset. None where one can not be
    offset safely."""
    loads = []
    for value in walk(inner):
        if value.op in ("masked", "random") or (
            value.op in TRAPPING_INTEGER_OPS and not value.dtype.is_floating_point
        ):
            return None
        if value.op != "load":
            continue
        index, indirect = value.args[1], value.args[2]
        if indirect or not isinstance(index, sympy.Expr):
            return None
        if not index.free_symbols & mask_symbols:
            continue
        along = sum(
            (
                term
                for term in sympy.Add.make_args(sympy.expand(index))
                if variable in term.free_symbols
            ),
            sympy.S.Zero,
        )
        coefficient = along.coeff(variable) if along != 0 else sympy.S.Zero
        if along != coefficient * variable or not coefficient.is_Integer or coefficient < 0:
            return None
        storage = program.storages.get(str(value.args[0]))
        layout = None if storage is None else storage.layout or storage.declared
        if layout is None or str(value.args[0]) in program.unbounded:
            return None
        elements = sympy.sympify(product(layout.size)) if layout.size else sympy.S.One
        if not elements.is_Integer or int(coefficient) * (extent - 1) >= int(elements):
            return None
        loads.append((value, along, sympy.expand(index) - along))
    return loads


def hoistable_masks(kernel: Kernel, program: Program, variable: sympy.Symbol, size: Expr) -> bool:
    return bool(_window_masks(kernel, program, variable, size))


def hoist_window_masks(writer: CppKernel, variable: sympy.Symbol, size: Expr) -> None:
    """Emit, before the SIMD loop over `variable`, each window mask and its loads' offsets
    (`mask ? index - the terms in variable : 0`); `_masked` and the loads use them."""
    made: dict[str, str] = {}  # offsets by their expression
    fills: dict[str, str] = {}  # fill arrays by their literal
    for masked, loads in _window_masks(writer.kernel, writer.program, variable, size):
        mask = masked.args[0]
        assert isinstance(mask, BodyValue)
        condition = writer.value(mask, {})
        if _loaded_alone(writer, masked, loads, variable, size):
            # `mask ? load : fill` as a load through a pointer chosen here: GCC 12 vectorized
            # no loop comparing two such selects on an invariant mask ("no vectype"), as a
            # max pool's window search over a stored map does (ResNet's stem, backward)
            dtype, fill = masked.dtype, literal(masked.args[2], masked.dtype)
            cpp = CPP_TYPES[dtype]
            array = fills.get(fill)
            if array is None:
                array = fills[fill] = writer.fresh("fill")
                values = ", ".join([fill] * int(sympy.sympify(size)))
                writer.line(f"static const {cpp} {array}[{writer.size(size)}] = {{{values}}};")
            storage, _, rest = loads[0]
            name = str(storage.args[0])
            writer.storages[name] = None
            pointer = writer.fresh("src")
            place = f"{name} + {writer.index(rest)}"
            writer.line(f"const {cpp}* {pointer} = {condition} ? {place} : {array};")
            writer.sources[id(masked)] = (pointer, writer.index(variable))
            writer.hoisted.add(id(masked))
            continue
        for load, along, rest in loads:
            line = f"{condition} ? {writer.index(rest)} : 0L"
            offset = made.get(line)
            if offset is None:
                offset = made[line] = writer.fresh("off")
                writer.line(f"int64_t {offset} = {line};")
            writer.offsets[id(load)] = (offset, along)
        writer.hoisted.add(id(masked))


# Longest SIMD loop whose masked loads read through a pointer to a fill array when off.
MAX_FILL = 4096


def _loaded_alone(
    writer: CppKernel,
    masked: BodyValue,
    loads: list[tuple[BodyValue, Expr, Expr]],
    variable: sympy.Symbol,
    size: Expr,
) -> bool:
    """Whether `masked` is a single load, contiguous along `variable`, of a 32- or 64-bit
    storage of its own dtype that the kernel reads from memory."""
    inner = masked.args[1]
    extent = sympy.sympify(size)
    if len(loads) != 1 or loads[0][0] is not inner or loads[0][1] != variable:
        return False
    if not extent.is_Integer or int(extent) > MAX_FILL:
        return False
    name = str(inner.args[0])
    storage = writer.program.storages.get(name)
    return (
        masked.dtype in (torch.float32, torch.float64, torch.int32, torch.int64)
        and storage is not None
        and storage.dtype == masked.dtype
        and name not in writer.kernel.local_buffers
    )
