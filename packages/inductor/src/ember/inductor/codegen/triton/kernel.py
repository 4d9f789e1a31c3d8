"""One fused kernel as a `@triton.jit` function.

A program instance computes `XBLOCK` points of the kernel's flattened outer loops. A kernel
that reduces works on `[XBLOCK, RBLOCK]` tiles: *persistent* when the whole reduction fits
one tile (every reduction and epilogue then shares the loads of one tile), *looped*
otherwise (one `for` over the reduction per batch of independent reductions and per group of
epilogue nodes, accumulating elementwise and reducing the tile at the end). Masks guard the
ragged last block; masked (`masked`) values load only where their condition holds. Index
arithmetic is int32 unless a tensor or a symbolic size may need int64. Sizes the Graph keeps
symbolic are kernel arguments; everything else is a literal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sympy
import torch

from ember.inductor.codegen.backend import KernelArgument, KernelSource
from ember.inductor.codegen.triton.heuristics import Tiling, choose_tiling, reduces
from ember.inductor.codegen.triton.ops import (
    CONSTANT_POWERS,
    HALF_TYPES,
    OPERAND_DTYPE_OPS,
    OPS,
    POINTER_TYPES,
    TRITON_TYPES,
    compute_type,
    literal,
    reduction_combine,
    reduction_final,
    reduction_identity,
)
from ember.inductor.codegen.triton.printer import triton_index
from ember.inductor.codegen.triton.size_variants import (
    INT32_SAFE,
    Specialization,
    condition,
    misaligning_sizes,
    plan,
    renamed,
    size_locals,
    static_factor_aligned,
)
from ember.inductor.codegen.value_scopes import ValueScopes, operand_key
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.bounds import storage_extent
from ember.inductor.ir.indexing import Expr, index_var, largest, product
from ember.inductor.ir.program import Program, Storage
from ember.inductor.scheduler.fusion import Kernel, Member

INT32_LIMIT = 2**31 - 1


def _constant(value: object) -> float | None:
    """The number a body value is, when it is a literal (or a cast of one)."""
    while isinstance(value, BodyValue) and value.op == "to_dtype":
        value = value.args[0]
    if isinstance(value, BodyValue) and value.op == "constant":
        number = value.args[0]
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
    return None


@dataclass
class _Context:
    """Where code is being emitted: outside the reduction loop or inside an r-block."""

    reduction: bool = False


class TritonKernelWriter(ValueScopes):
    """Builds the source of one Triton kernel and its launch metadata."""

    def __init__(
        self,
        kernel: Kernel,
        program: Program,
        special: Specialization | None = None,
        first_block: str | None = None,
    ) -> None:
        super().__init__()
        # a horizontal launch's part: its blocks start at program `first_block`
        self.first_block = first_block
        # a body specialized on its sizes' run-time values (`size_variants`), or the general one
        self.special = special
        self.kernel = kernel
        self.program = program
        self.lines: list[str] = []
        self.depth = 1
        self.storages: dict[str, None] = {}
        self.written: dict[str, None] = {}
        self.sizes: set[str] = set()
        self.addressed: set[str] = set()  # sizes the addresses read (their alignment matters)
        self.locals: dict[str, str] = {}
        self.conditions: list[str] = []  # enclosing `masked` conditions
        # storage -> (variable holding what was stored, the r-loop it was stored in): a later
        # read of it (fusion guarantees: at the same index) takes the register, because the
        # threads of a program do not see each other's stores without a barrier
        self.stored: dict[str, tuple[str, int | None]] = {}
        self.loop: int | None = None  # the r-loop being emitted (looped reductions)
        self.loops = 0
        self.context = _Context()
        self.reduces = reduces(kernel)
        self.xnumel: Expr = product(kernel.outer)
        self.rnumel: Expr = product(kernel.inner)
        self.tiling: Tiling = choose_tiling(kernel, program)
        self.wide = False if special is not None else self._needs_int64()
        # a pointwise kernel's stores, emitted after all its loads (`_defers_stores`)
        self.deferred: list[str] | None = [] if self._defers_stores() else None

    # ---- emission helpers -------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header)
        self.depth += 1
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()
            self.depth -= 1

    def index(self, expr: Expr, *, address: bool = False) -> str:
        for symbol in sympy.sympify(expr).free_symbols:
            name = str(symbol)
            if not (name[0] in "xr" and name[1:].isdigit()) and not name.startswith("ind"):
                self.sizes.add(name)
        if address:
            self.addressed |= misaligning_sizes(expr, self.reduces) & self.sizes
        if self.special is not None:
            expr = renamed(expr, self.special.renames)
        return triton_index(expr)

    def _defers_stores(self) -> bool:
        """Whether a pointwise kernel's stores wait until its last load: the compiler may not
        move a load above a store through another pointer (they might alias), so a load
        after a store waited for memory a second time. Llama's SiLU backward (three loads,
        three stores, interleaved) took 0.091 ms a call on the H100, torch.compile's 0.077
        with its stores last. Indirect and atomic accesses keep their order."""
        if self.reduces:
            return False
        for member in self.kernel.members:
            if member.store_mode == "atomic_add" or member.store_indirect:
                return False
            if any(load.args[2] for load in member.loads()):
                return False
        return True

    def _needs_int64(self) -> bool:
        """Whether an index may pass int32: symbolic sizes count at their largest value
        under their ranges and the Graph's guards (`size_ranges`); unbounded ones do."""
        numel = self._largest(self.xnumel * self.rnumel)
        if numel is None or numel > INT32_LIMIT // 2:
            return True
        touched = {member.node.storage for member in self.kernel.members}
        for member in self.kernel.members:
            touched.update(str(load.args[0]) for load in member.loads())
        for name in touched:
            storage = self.program.storages[name]
            extent = storage_extent(storage)
            if extent is None:
                extent = self._largest_extent(storage)
            if extent is None or extent > INT32_LIMIT // 2:
                return True
        return False

    def _largest(self, expr: Expr) -> int | None:
        return largest(sympy.sympify(expr), self.program.size_ranges)

    def _largest_extent(self, storage: Storage) -> int | None:
        layout = storage.layout or storage.declared
        if layout is None:
            return None
        found = [self._largest(e) for e in (*layout.size, *layout.stride, layout.offset)]
        parts = [p for p in found if p is not None and p >= 0]
        if len(parts) < len(found):
            return None
        rank = len(layout.size)
        sizes, strides, offset = parts[:rank], parts[rank : 2 * rank], parts[-1]
        return 1 + offset + sum((n - 1) * st for n, st in zip(sizes, strides) if n)

    # ---- values ---------------------------------------------------------------------------

    def value(self, node: BodyValue, names: dict[int, str]) -> str:
        """Emit `node` (and what it needs) once; its Triton variable name."""
        done = names.get(id(node))
        if done is not None:
            return done
        if node.op == "masked":
            return self._masked(node, names)
        if node.op == "load":
            if node.args[2]:  # indirect loads are not shared
                key: tuple[object, ...] = ("indirect", self.fresh())
            else:
                key = (
                    "load",
                    str(node.args[0]),
                    str(node.args[1]),
                    node.dtype,
                    self.context.reduction,
                )
        elif node.op == "random":
            key = ("random", self.fresh())
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
        self.line(f"{name} = {expression}")
        self.scopes[-1][key] = name
        names[id(node)] = name
        return name

    def _mask(self, expr: Expr) -> str | None:
        """The mask a load or store at `expr` needs in the current context."""
        names = {str(s) for s in sympy.sympify(expr).free_symbols}
        uses_x = any(n[0] == "x" and n[1:].isdigit() for n in names)
        uses_r = any(n[0] == "r" and n[1:].isdigit() for n in names)
        indirect = any(n.startswith("ind") for n in names)
        parts: list[str] = []
        if self.context.reduction and (uses_r or indirect):
            parts.append("xrmask" if uses_x or indirect else "rmask")
        elif uses_x or indirect:
            parts.append("xmask")
        parts.extend(self.conditions)
        return " & ".join(parts) if parts else None

    def _expression(self, node: BodyValue, names: dict[int, str]) -> str:
        op = node.op
        kind = compute_type(node.dtype)
        if op == "load":
            storage, index, indirect = node.args
            assert isinstance(index, sympy.Expr) and isinstance(indirect, tuple)
            local = self.locals.get(str(storage))
            if local is not None:
                return local
            written = self.stored.get(str(storage))
            if written is not None and not indirect:
                variable, loop = written
                if loop is None or loop == self.loop:
                    if self.program.storages[str(storage)].dtype in HALF_TYPES:
                        return f"{variable}.to(tl.float32)"
                    return variable
                self.line("tl.debug_barrier()")  # written in an earlier loop, by other threads
            substitution = {}
            for symbol, chosen in indirect:
                variable = self.fresh("ind")
                self.line(f"{variable} = ({self.value(chosen, names)}).to({self._index_type()})")
                substitution[symbol] = sympy.Symbol(variable, integer=True)
            index = index.xreplace(substitution)
            self.storages[str(storage)] = None
            mask = self._mask(index)
            masked = f", {mask}, other=0" if mask else ""
            pointer = f"p_{storage} + ({self.index(index, address=True)})"
            if self.conditions:
                # a `masked` condition may vary along loops the index does not read (a scalar
                # read where a cat's part is a broadcast value): the pointer takes the mask's
                # shape, which tl.load requires
                pointer += f" + 0 * ({mask}).to({self._index_type()})"
            load = f"tl.load({pointer}{masked})"
            stored = self.program.storages[str(storage)].dtype
            if stored in HALF_TYPES:
                return f"{load}.to(tl.float32)"
            return load
        if op == "constant":
            return literal(node.args[0], node.dtype)
        if op == "index_expr":
            expr = sympy.sympify(node.args[0])
            if expr.is_Integer:
                return literal(int(expr), node.dtype)
            return f"(tl.zeros([1], {self._index_type()}) + ({self.index(expr)})).to({kind})"
        if op == "to_dtype":
            source = node.args[0]
            assert isinstance(source, BodyValue)
            value = self.value(source, names)
            if node.dtype == torch.bool:
                return f"({value} != 0)"
            if node.dtype in HALF_TYPES:  # round as eager does, compute on in float32
                return f"{value}.to({TRITON_TYPES[node.dtype]}).to(tl.float32)"
            return f"{value}.to({kind})"
        if op == "where":
            c, a, b = (self.value(arg, names) for arg in node.args)  # type: ignore[arg-type]
            return f"tl.where({c}, {a}, {b})"
        if op == "random":
            seed, offset, distribution = node.args
            assert isinstance(seed, BodyValue) and isinstance(offset, sympy.Expr)
            seed_value = self.value(seed, names)
            function = "tl.rand" if distribution == "uniform" else "tl.randn"
            offsets = f"(tl.zeros([1], tl.int64) + ({self.index(offset)})).to(tl.uint32)"
            return f"{function}({seed_value}.to(tl.int64), {offsets})"
        if op == "pow" and "float" in kind:
            exponent = _constant(node.args[1])
            if exponent is not None and exponent in CONSTANT_POWERS:
                base = node.args[0]
                assert isinstance(base, BodyValue)
                return CONSTANT_POWERS[exponent](self.value(base, names))
        operands = [self.value(arg, names) for arg in node.args]  # type: ignore[arg-type]
        operand_type = kind
        if op in OPERAND_DTYPE_OPS:
            first = node.args[0]
            assert isinstance(first, BodyValue)
            operand_type = compute_type(first.dtype)
        return OPS[op](operands, operand_type)

    def _masked(self, node: BodyValue, names: dict[int, str]) -> str:
        mask, inner, other = node.args
        assert isinstance(mask, BodyValue) and isinstance(inner, BodyValue)
        condition = self.value(mask, names)
        scoped = dict(names)
        self.scopes.append({})
        self.conditions.append(condition)
        try:
            value = self.value(inner, scoped)
        finally:
            self.conditions.pop()
            self.scopes.pop()
        result = self.fresh()
        self.line(f"{result} = tl.where({condition}, {value}, {literal(other, node.dtype)})")
        names[id(node)] = result
        return result

    def _index_type(self) -> str:
        return "tl.int64" if self.wide else "tl.int32"

    # ---- kernel structure -------------------------------------------------------------------

    def generate(self) -> KernelSource:
        kernel = self.kernel
        body_lines = self._body()
        body_lines = [*self._specialized_bodies(), *body_lines]
        arguments = [KernelArgument(name, "pointer") for name in self.storages]
        arguments += [KernelArgument(name, "size") for name in sorted(self.sizes)]
        params = [f"p_{a.name}" if a.kind == "pointer" else a.name for a in arguments]
        params.append("XBLOCK: tl.constexpr")
        if self.reduces:
            params.append("RBLOCK: tl.constexpr")
        lines = dict.fromkeys(line for m in kernel.members for line in m.node.sources)
        comments = [f"# {line}" for line in lines]
        header = [*comments, "@triton.jit", f"def {kernel.name}({', '.join(params)}):"]
        signature = {
            (f"p_{a.name}" if a.kind == "pointer" else a.name): (
                POINTER_TYPES[self.program.storages[a.name].dtype] if a.kind == "pointer" else "i64"
            )
            for a in arguments
        }
        source = "\n".join([*header, *body_lines])
        launch = {
            "signature": signature,
            "configs": [config.as_json() for config in self.tiling.configs],
            "mutated": [f"p_{name}" for name in self.written if name in self.storages],
            "persistent": self.tiling.persistent,
        }
        return KernelSource(
            kernel.name,
            source,
            arguments,
            launch=launch,
            grid=[self._python_size(self.xnumel)],
        )

    def _specialized_bodies(self) -> list[str]:
        """The bodies specialized on the sizes' run-time values, each behind its test and
        ending in a return (`size_variants`); none for a kernel without sizes. After the
        general body: which sizes the kernel and its addresses read."""
        aligned = set(self.addressed)
        if self.reduces:
            aligned |= {str(s) for s in sympy.sympify(self.rnumel).free_symbols}
        elif not static_factor_aligned(self.xnumel):
            aligned |= {str(s) for s in sympy.sympify(self.xnumel).free_symbols}
        limits = self._int32_limits()
        if limits is None:
            return []
        narrowable = self.tiling.persistent and bool(sympy.sympify(self.rnumel).free_symbols)
        rblock = self.tiling.configs[0].rblock if self.tiling.configs else None
        lines: list[str] = []
        for special in plan(set(self.sizes), aligned, narrowable, rblock):
            writer = TritonKernelWriter(self.kernel, self.program, special)
            body = writer._body()
            extra = set(writer.storages) - set(self.storages)
            assert not extra and writer.sizes <= self.sizes, (extra, writer.sizes)
            if special.rblock_divisor > 1:
                body = [re.sub(r"\bRBLOCK\b", special.rblock, line) for line in body]
            lines.append(f"    if {condition(special, limits, self.rnumel)}:")
            lines += [f"        {line}" for line in size_locals(special)]
            lines += [f"    {line}" for line in body]
            lines.append("        return")
        if not lines:
            return []
        for limit in limits:  # the tests read these sizes too
            self.index(limit)
        return lines

    def _int32_limits(self) -> list[Expr] | None:
        """What must stay under `INT32_SAFE` for int32 indices: the tile's points, every
        storage's extent and every size (None when a storage's extent is unknown)."""
        limits: list[Expr] = [sympy.sympify(self.xnumel * self.rnumel)]
        touched = {member.node.storage for member in self.kernel.members}
        for member in self.kernel.members:
            touched.update(str(load.args[0]) for load in member.loads())
        for name in sorted(touched):
            extent = _extent(self.program.storages[name])
            if extent is None:
                return None
            limits.append(extent)
        limits += [sympy.Symbol(name, integer=True, positive=True) for name in sorted(self.sizes)]
        if any(not e.free_symbols and int(e) > INT32_SAFE for e in limits):
            return None
        return [e for e in dict.fromkeys(limits) if e.free_symbols]

    def _python_size(self, expr: Expr) -> str:
        from ember.inductor.codegen.cpp.printer import python_index

        return python_index(expr)

    def _body(self) -> list[str]:
        kernel = self.kernel
        self.lines = []
        self.depth = 1
        self.line(f"xnumel = {self.index(self.xnumel)}")
        program_id = "tl.program_id(0).to(tl.int64)" if self.wide else "tl.program_id(0)"
        if self.first_block is not None:
            program_id = f"({program_id} - ({self.first_block}))"
        self.line(f"xoffset = {program_id} * XBLOCK")
        lanes = "tl.arange(0, XBLOCK)[:, None]" if self.reduces else "tl.arange(0, XBLOCK)"
        self.line(f"xindex = xoffset + {lanes}")
        self.line("xmask = xindex < xnumel")
        self._split("xindex", "x", kernel.outer)
        if self.reduces:
            self.line(f"rnumel = {self.index(self.rnumel)}")
            rbase = "tl.arange(0, RBLOCK)[None, :]"
            self.line(f"rbase = {rbase}.to(tl.int64)" if self.wide else f"rbase = {rbase}")
            if self.tiling.persistent:
                self._r_variables("rbase")
        self._members(kernel.members)
        for store in self.deferred or ():
            self.line(store)
        return self.lines

    def _members(self, members: list[Member]) -> None:
        """The members' code, in order: inner loops by group, reductions in batches."""
        position = 0
        while position < len(members):
            member = members[position]
            if member.level == "inner":
                group = [
                    m for m in members[position:] if m.level == "inner" and m.group == member.group
                ]
                self._inner(group)
                position += len(group)
            elif member.level == "reduction":
                batch = self._reduction_batch(members, position)
                self._reductions(batch)
                position += len(batch)
            else:
                self._store(member, self.value(member.body, {}))
                position += 1

    def _split(self, flat: str, prefix: str, sizes: tuple[Expr, ...]) -> None:
        """Loop variables from a flat index (the first loop is the slowest)."""
        count = len(sizes)
        for position in range(count):
            inner = product(sizes[position + 1 :])
            value = flat if inner == 1 else f"({flat} // ({self.index(inner)}))"
            if position > 0:
                value = f"({value} % ({self.index(sizes[position])}))"
            self.line(f"{index_var(prefix, position)} = {value}")

    def _r_variables(self, start: str) -> None:
        self.line(f"rindex = {start}")
        self.line("rmask = rindex < rnumel")
        self.line("xrmask = xmask & rmask")
        self._split("rindex", "r", self.kernel.inner)

    @contextmanager
    def _r_block(self) -> Iterator[None]:
        """Code over the reduction loops: a loop (looped) or the single tile (persistent)."""
        self.context.reduction = True
        try:
            if self.tiling.persistent:
                yield
                return
            # the bound is spelled out: the interpreter turns a local `rnumel` into a block
            bound = self.index(self.rnumel)
            self.loops += 1
            self.loop = self.loops
            if not self.rnumel.free_symbols:
                steps = f"range(0, {bound}, RBLOCK)"
                if self.tiling.stages > 1:  # the next blocks' loads issued ahead (shared memory)
                    steps = f"tl.range(0, {bound}, RBLOCK, num_stages={self.tiling.stages})"
                with self.block(f"for roffset in {steps}:"):
                    self._r_variables("roffset + rbase")
                    yield
                return
            # a size argument as the bound: Triton 3.6's interpreter cannot `range` to one
            # (under numpy 2 it refuses int() of a scalar argument's one-element array)
            self.line(f"roffset = tl.full([], 0, {self._index_type()})")
            with self.block(f"while roffset < {bound}:"):
                self._r_variables("roffset + rbase")
                yield
                self.line("roffset += RBLOCK")
        finally:
            self.context.reduction = False
            self.loop = None

    def _reduction_batch(self, members: list[Member], position: int) -> list[Member]:
        """Consecutive reductions that read nothing another of them writes share a loop."""
        batch: list[Member] = []
        written: set[str] = set()
        for member in members[position:]:
            if member.level != "reduction" or member.node.reads() & written:
                break
            batch.append(member)
            written.add(member.node.storage)
        return batch

    def _reductions(self, batch: list[Member]) -> None:
        accumulators: list[tuple[Member, str, str | None]] = []
        persistent = self.tiling.persistent
        # a looped welford_m2's pivot and running mean, by its m2 accumulator
        welford: dict[str, tuple[str, str]] = {}
        for member in batch:
            reduction_type = member.node.reduction_type
            assert reduction_type is not None
            accumulator = self.fresh("acc")
            best = self.fresh("idx") if reduction_type in {"argmax", "argmin"} else None
            if not persistent:
                identity = reduction_identity(reduction_type, member.body.dtype)
                kind = compute_type(member.body.dtype)
                self.line(f"{accumulator} = tl.full([XBLOCK, RBLOCK], {identity}, {kind})")
                if best is not None:
                    self.line(f"{best} = tl.full([XBLOCK, RBLOCK], {INT32_LIMIT}, tl.int64)")
                if reduction_type == "welford_m2":
                    welford[accumulator] = (self.fresh("pivot"), self.fresh("mean"))
                    for name in welford[accumulator]:
                        self.line(f"{name} = tl.full([XBLOCK, RBLOCK], 0.0, {kind})")
            accumulators.append((member, accumulator, best))
        # reductions of one value the same way share an accumulator: a split variance's
        # chunk sums and its mean's partial sums (one add and one select an element less)
        same: dict[str, str] = {}
        first: dict[tuple[str, str, str], str] = {}
        with self._r_block():
            for member, accumulator, best in accumulators:
                reduction_type = member.node.reduction_type
                assert reduction_type is not None
                value = self.value(member.body, {})
                key = (reduction_type, value, str(member.body.dtype))
                if key in first:
                    same[accumulator] = first[key]
                    continue
                first[key] = accumulator
                if reduction_type == "welford_m2":
                    kind = compute_type(member.body.dtype)
                    self._welford_step(accumulator, value, welford.get(accumulator), kind)
                    continue
                identity = reduction_identity(reduction_type, member.body.dtype)
                guarded = f"tl.where(xrmask, {value}, {identity})"
                if persistent:
                    self.line(f"{accumulator} = {guarded}")
                    if best is not None:
                        self.line(f"{best} = (rindex + tl.zeros([XBLOCK, 1], tl.int64))")
                    continue
                if best is not None:
                    step = f"ember_{reduction_type}_step"
                    new_value, new_index = self.fresh("acc"), self.fresh("idx")
                    self.line(
                        f"{new_value}, {new_index} = {step}({accumulator}, {best}, {value}, "
                        f"rindex.to(tl.int64))"
                    )
                    self.line(f"{accumulator} = tl.where(xrmask, {new_value}, {accumulator})")
                    self.line(f"{best} = tl.where(xrmask, {new_index}, {best})")
                    continue
                step = reduction_combine(reduction_type, accumulator, value, member.body.dtype)
                self.line(f"{accumulator} = tl.where(xrmask, {step}, {accumulator})")
        results: dict[str, str] = {}
        for member, accumulator, best in accumulators:
            reduction_type = member.node.reduction_type
            assert reduction_type is not None
            if accumulator in same:
                self._store(member, results[same[accumulator]])
                continue
            result = results[accumulator] = self.fresh("red")
            if best is not None:
                step = f"ember_{reduction_type}_step"
                self.line(f"_, {result} = tl.reduce(({accumulator}, {best}), 1, {step})")
                self.line(f"{result} = {result}[:, None]")
            elif accumulator in welford:
                pivot, mean = welford[accumulator]
                # lane j held the values at j, j + RBLOCK, ... below rnumel
                count = self.fresh("count")
                kind = compute_type(member.body.dtype)
                self.line(
                    f"{count} = ((rnumel - rbase + RBLOCK - 1) // RBLOCK).to({kind}) "
                    f"+ tl.zeros([XBLOCK, RBLOCK], {kind})"
                )
                merged = f"ember_welford_m2({pivot}, {mean}, {accumulator}, {count})"
                self.line(f"{result} = {merged}[:, None]")
            else:
                final = reduction_final(reduction_type, accumulator, member.body.dtype)
                self.line(f"{result} = {final}")
            self._store(member, result)

    def _welford_step(
        self, m2: str, value: str, running: tuple[str, str] | None, kind: str
    ) -> None:
        """One tile of a welford_m2 reduction. Looped (`running`: the pivot and mean
        accumulators; a lane's count is its number of tiles, known at the end): each lane updates its own mean and squared deviations by Welford's
        recurrence, whose increments are never negative, so nothing cancels whatever the
        data's offset (float32 shifted sums lost 5e-4 of a variance whose shift sat 1000
        standard deviations from the mean; float64 sums ran batch norm's statistics at 0.84
        TB/s on the H100, about half of float32's speed). The mean is held as an offset from
        the lane's latest value (its pivot): a float32 mean near 1000 rounds by 6e-5, which
        cost 15x eager's error on channels 1000 from zero with zero corners. Persistent: the
        row is in registers, so its mean first, then the squared deviations from it (two
        passes over registers, one over memory)."""
        if running is None:
            mean = self.fresh("mean")
            self.line(f"{mean} = tl.sum(tl.where(xrmask, {value}, 0.0), 1)[:, None] / rnumel")
            deviation = self.fresh("dev")
            self.line(f"{deviation} = tl.where(xrmask, {value} - {mean}, 0.0)")
            self.line(f"{m2} = {deviation} * {deviation}")
            return
        pivot, mean = running
        shifted = self.fresh("shifted")
        delta, moved, share = self.fresh("delta"), self.fresh("mean"), self.fresh("share")
        # every lane a tile updates holds its (roffset / RBLOCK + 1)-th value: one division
        # a tile, not one an element (a memory-bound reduction has ~20 ALU operations an
        # element on an H100; Welford's update with a division takes most of them)
        self.line(f"{share} = tl.full([1], 1.0, {kind}) / (roffset // RBLOCK + 1)")
        self.line(f"{shifted} = {value} - {pivot}")
        self.line(f"{delta} = {shifted} - {mean}")
        self.line(f"{moved} = {mean} + {delta} * {share}")
        self.line(f"{m2} = tl.where(xrmask, {m2} + {delta} * ({shifted} - {moved}), {m2})")
        # the value becomes the pivot: the mean as an offset from it
        self.line(f"{mean} = tl.where(xrmask, {moved} - {shifted}, {mean})")
        self.line(f"{pivot} = tl.where(xrmask, {value}, {pivot})")

    def _inner(self, group: list[Member]) -> None:
        with self._r_block():
            for member in group:
                self._store(member, self.value(member.body, {}))

    def _store(self, member: Member, value: str) -> None:
        storage = member.node.storage
        dtype = self.program.storages[storage].dtype
        if storage in self.kernel.local_buffers:
            # not named after the storage: `buf82_v11` escaped `name_by_content`'s renaming
            # (no word boundary), so each of BERT's 12 layers compiled its own layer norm
            local = self.fresh("kept")
            self.line(f"{local} = {value}")
            self.locals[storage] = local
            return
        self.storages[storage] = None
        self.written[storage] = None
        stored = f"({value} != 0)" if dtype == torch.bool else f"{value}.to({TRITON_TYPES[dtype]})"
        index = member.store_index
        substitution = {}
        for symbol, chosen in member.store_indirect:
            variable = self.fresh("ind")
            self.line(f"{variable} = ({self.value(chosen, {})}).to({self._index_type()})")
            substitution[symbol] = sympy.Symbol(variable, integer=True)
        index = index.xreplace(substitution)
        mask = self._mask(index)
        pointer = f"p_{storage} + ({self.index(index, address=True)})"
        if mask is None:  # the same address in every lane: a block of it, masked to one
            mask = "xrmask" if self.context.reduction else "xmask"
            pointer += " + 0 * xindex"
        if member.store_mode == "atomic_add":
            self.line(f"tl.atomic_add({pointer}, {stored}, {mask}, sem='relaxed')")
            self.stored.pop(storage, None)
        else:
            variable = self.fresh("stored")
            self.line(f"{variable} = {stored}")
            store = f"tl.store({pointer}, {variable}, {mask})"
            if self.deferred is not None:
                self.deferred.append(store)
            else:
                self.line(store)
            self.stored[storage] = (variable, self.loop)
        self.forget_loads(storage)


def _extent(storage: Storage) -> Expr | None:
    """Elements from a storage's pointer to past its last one, over its symbolic sizes."""
    layout = storage.layout or storage.declared
    if layout is None:
        return None
    extent: Expr = sympy.Integer(1) + sympy.sympify(layout.offset)
    for size, stride in zip(layout.size, layout.stride):
        extent += (sympy.sympify(size) - 1) * sympy.sympify(stride)
    return sympy.expand(extent)
