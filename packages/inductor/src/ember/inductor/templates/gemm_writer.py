"""The Triton source of a `GemmKernel`: a tiled matmul (`tl.dot`, float32 accumulation) and
its fused epilogue, generated from ember's loop IR.

A program computes one `BLOCK_M x BLOCK_N` tile of one batch entry; tiles are ordered in
groups of `GROUP_M` rows (the group-M swizzle: neighbouring programs share operand blocks in
L2). The launcher's grid is `cdiv(numel, XBLOCK)` with `XBLOCK = BLOCK_M * BLOCK_N` and
`numel = batch * roundup(M, 256) * roundup(N, 256)`, so every configuration gets at least one
program per tile; programs past the last tile do nothing. A persistent configuration sets
XBLOCK so that the grid is one program per SM (`PROGRAMS`) and each program walks
`ITERATIONS` tiles `PROGRAMS` apart (the same tile body, pasted in a loop). With `TMA` the
operand blocks come through tensor descriptors (`tma.py`; sm90) instead of pointers. Sizes, strides and offsets are
literals. Rows and columns past the edge read row 0 (`% M`), the K tail is masked when K is
not a multiple of `BLOCK_K` (a compile-time branch), and every store is masked. A
convolution's K loop walks its kernel taps, then channel blocks of the input pixels each output
row reads (zero outside the image), and its tile's flat index is the result's dense-layout
index.

After the K loop the accumulator becomes the matmul's result (`alpha * acc + beta * bias`,
rounded to the result dtype as eager rounds it), and the fused epilogue's members run on the
tile. Their loop variables are the tile's rows (`[BLOCK_M, 1]`) and columns (`[1, BLOCK_N]`)
when the loops split there, else are recovered from the flat index (`xindex`, 2-D): every
load of the result takes the register, other loads (bias, residual) read memory at their
own indices under the rows', the columns' or the tile's mask, stores under the tile's. A
float32 erf (GELU's) is libdevice's `erff` as straight-line code (`epilogue_erf.py`).
"""

from __future__ import annotations

import sympy
import torch

from ember.inductor.codegen.backend import KernelArgument, KernelSource
from ember.inductor.codegen.kernel_names import name_by_content
from ember.inductor.codegen.triton.kernel import TritonKernelWriter
from ember.inductor.codegen.triton.ops import (
    HALF_TYPES,
    POINTER_TYPES,
    TRITON_TYPES,
    compute_type,
)
from ember.inductor.ir.body import BodyValue
from ember.inductor.ir.indexing import Expr
from ember.inductor.ir.program import Program
from ember.inductor.templates.configs import GRID_UNIT, gemm_configs
from ember.inductor.templates.epilogue_erf import erf_lines
from ember.inductor.templates.gemm import Gemm, GemmKernel, Operand
from ember.inductor.templates.tma import TmaOperand, descriptor_line, tma_operands

# UPCAST (0 on GPUs) makes tl.dot take float32 operands: Triton 3.6's interpreter multiplies
# bfloat16 blocks wrongly (it reads their bits as integers), so interpreted runs set it; they
# also take the epilogue's erf from the interpreter's libdevice stand-in (eager's, torch's).
CONSTEXPRS = (
    "XBLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "UPCAST", "TMA", "PROGRAMS", "ITERATIONS",
    "SPLIT_K", "K_CHUNK",
)  # fmt: skip
# A split-K template's own buffers, after the graph's storages: float32 partial tiles (one
# slice per K chunk) and a counter per tile; `gemm_choice.GemmChoice` owns and passes them.
SPLIT_BUFFERS = {"p_split_partials": "*fp32", "p_split_counters": "*i32"}


# The launch data's name for a product the template keeps in registers (no argument holds
# it): position-free, so that equal layers' templates are one kernel (named by content). Its
# storage's name (`buf73`) made each of BERT's 12 layers compile and time its own templates.
KEPT_RESULT = "product"


def _product(sizes: list[int]) -> int:
    result = 1
    for size in sizes:
        result *= size
    return result


def _unique(configs: list[dict[str, object]]) -> list[dict[str, object]]:
    """`configs` without repeats (a persistent configuration with no more tiles than SMs
    launches as the same kernel as its one-tile-a-program twin)."""
    unique: list[dict[str, object]] = []
    for config in configs:
        if config not in unique:
            unique.append(config)
    return unique


def _roundup(value: int, unit: int) -> int:
    return -(-value // unit) * unit


class GemmWriter(TritonKernelWriter):
    """Builds the source of one GEMM template kernel and its launch metadata."""

    def __init__(self, kernel: GemmKernel, program: Program) -> None:
        super().__init__(kernel, program)
        assert kernel.gemm is not None
        self.gemm: Gemm = kernel.gemm
        self.gemm_kernel = kernel
        self.row_variables: set[str] = set()
        self.column_variables: set[str] = set()
        self.reduces = False  # the epilogue is pointwise over the tile
        self.tma = tma_operands(self.gemm)
        self.configs = gemm_configs(
            self.gemm.m,
            self.gemm.n,
            self.gemm.k,
            self.gemm.dtype,
            tma=self.tma is not None,
            split=self.gemm.conv is None,
            batch=self.gemm.batch,
        )
        self.split_k = max(config.split_k for config in self.configs)

    def generate(self) -> KernelSource:
        gemm = self.gemm
        body_lines = self._gemm_body()
        arguments = [KernelArgument(name, "pointer") for name in self.storages]
        params = [f"p_{a.name}" for a in arguments]
        if self.split_k > 1:
            params += list(SPLIT_BUFFERS)
        params += [f"{name}: tl.constexpr" for name in CONSTEXPRS]
        lines = dict.fromkeys(line for m in self.kernel.members for line in m.node.sources)
        comments = [f"# {line}" for line in lines]
        header = [*comments, "@triton.jit", f"def {self.kernel.name}({', '.join(params)}):"]
        signature = {
            f"p_{a.name}": POINTER_TYPES[self.program.storages[a.name].dtype] for a in arguments
        }
        if self.split_k > 1:
            signature.update(SPLIT_BUFFERS)
        numel = gemm.batch * _roundup(gemm.m, GRID_UNIT) * _roundup(gemm.n, GRID_UNIT)
        launch: dict[str, object] = {
            "signature": signature,
            "configs": _unique(
                [
                    config.as_json(gemm.batch, gemm.m, gemm.n, gemm.k, numel)
                    for config in self.configs
                ]
            ),
            "mutated": [f"p_{name}" for name in self.written if name in self.storages],
            "persistent": False,
            "gemm": _extern_description(gemm, self.gemm_kernel, self._result_name()),
            # the operands TMA configurations read through descriptors (gemm_choice checks them)
            "tma": [f"p_{operand.storage}" for operand in self.tma or ()],
            # split-K: the float32 partials and the tile counters (see SPLIT_BUFFERS)
            "split": None
            if self.split_k == 1
            else {
                "partials": self.split_k * gemm.batch * gemm.m * gemm.n,
                # a counter a tile, for tiles down to 16x16 (any launch of the kernel)
                "counters": gemm.batch * -(-gemm.m // 16) * -(-gemm.n // 16),
            },
        }
        text = "\n".join([*header, *body_lines])
        epilogue = self.gemm_kernel.epilogue
        if epilogue is not None:  # the epilogue alone, for the vendor path (cuBLAS, then it)
            alone = name_by_content(
                TritonKernelWriter(epilogue, self.program).generate(),
                sorted(epilogue.local_buffers),
            )
            assert all(a.kind == "pointer" for a in alone.arguments)
            launch["gemm"]["epilogue_kernel"] = {  # type: ignore[index]
                "name": alone.name,
                "arguments": [
                    self._result_name() if a.name == gemm.result else a.name
                    for a in alone.arguments
                ],
                "grid": alone.grid,
                "launch": alone.launch,
            }
            text = f"{text}\n\n\n{alone.source}"
        return KernelSource(
            self.kernel.name,
            text,
            arguments,
            launch=launch,
            grid=[str(numel)],
        )

    def _result_name(self) -> str:
        """The product's name in the launch data: its storage where the template stores it
        (an argument, renamed by position with the others), else `KEPT_RESULT`."""
        return self.gemm.result if self.gemm.result in self.storages else KEPT_RESULT

    def _expression(self, node: BodyValue, names: dict[int, str]) -> str:
        """As a pointwise kernel's, but a float32 erf is libdevice's as straight-line code
        (`epilogue_erf.py`: no per-element coefficient moves on the tile's 128 values a
        thread); interpreted runs keep the stand-in."""
        if node.op != "erf" or compute_type(node.dtype) != "tl.float32":
            return super()._expression(node, names)
        (operand,) = node.args
        assert isinstance(operand, BodyValue)
        x = self.value(operand, names)
        lines, result = erf_lines(x, self.fresh)
        with self.block("if UPCAST:"):
            self.line(f"{result} = libdevice.erf({x})")
        with self.block("else:"):
            for line in lines:
                self.line(line)
        return result

    def _use(self, storage: str) -> str:
        self.storages[storage] = None
        return f"p_{storage}"

    def _operand_pointers(self, name: str, operand: Operand, rows: str, cols: str) -> None:
        parts = [str(operand.offset)] if operand.offset else []
        if operand.batch_stride and self.gemm.batch > 1:
            parts.append(f"pid_b * {operand.batch_stride}")
        if operand.row_stride:
            parts.append(f"{rows}[:, None] * {operand.row_stride}")
        if operand.col_stride:
            parts.append(f"{cols}[None, :] * {operand.col_stride}")
        parts.append(f"0 * ({rows}[:, None] + {cols}[None, :])")  # the tile's shape
        self.line(f"{name} = {self._use(operand.storage)} + ({' + '.join(parts)})")

    def _gemm_body(self) -> list[str]:
        gemm = self.gemm
        m, n = gemm.m, gemm.n
        self.lines = []
        self.depth = 1
        index_type = "tl.int64" if self.wide else "tl.int32"
        self.line(f"pid0 = tl.program_id(0).to({index_type})")
        self.line(f"grid_m = ({m} + BLOCK_M - 1) // BLOCK_M")
        self.line(f"grid_n = ({n} + BLOCK_N - 1) // BLOCK_N")
        self.line("tiles = grid_m * grid_n")
        if self.tma is not None:
            with self.block("if TMA:"):
                for operand in self.tma:
                    self.line(descriptor_line(operand, self._use(operand.storage)))
        in_range = f"if pid < {gemm.batch} * tiles:"
        with self.block("if ITERATIONS == 1:"):
            self.line("pid = pid0")
            with self.block(in_range):
                start = len(self.lines)
                self._tile()
                tile = self.lines[start:]
        if self.split_k > 1:  # split-K: the tile's place, its K chunk, then the last one's sum
            place, rest = tile[: self.marks[0] - start], tile[self.marks[1] - start :]
            header = start - 3  # "if ITERATIONS == 1:", then "pid = pid0", then in_range
            self.depth = 3
            chunk_start = len(self.lines)
            self._split_loop()
            chunk = self.lines[chunk_start:]
            del self.lines[chunk_start:]
            self.depth = 1
            split = [
                "    if SPLIT_K > 1:",
                "        pid = pid0 // SPLIT_K",
                "        pid_k = pid0 % SPLIT_K",
                f"        {in_range}",
                *place,
                *chunk,
                "            if arrived == SPLIT_K - 1:",
                *[f"    {line}" for line in self._split_sum()],
                *[f"    {line}" for line in rest],
            ]
            self.lines[header] = "    elif ITERATIONS == 1:"
            self.lines[header:header] = split
        if any(config.persistent for config in self.configs):
            with self.block("else:"):  # persistent: the same tile body, for each tile it owns
                with self.block("for iteration in range(0, ITERATIONS):"):
                    self.line("pid = pid0 + iteration * PROGRAMS")
                    self.line(in_range)
                    self.lines.extend(f"    {line}" for line in tile)
        return self.lines

    def _tile(self) -> None:
        """One tile: its place, the K loop, the result and the epilogue."""
        gemm = self.gemm
        self.line("pid_b = pid // tiles")
        self.line("tile = pid % tiles")
        self.line("width = GROUP_M * grid_n")
        self.line("first_m = (tile // width) * GROUP_M")
        self.line("group_rows = tl.minimum(grid_m - first_m, GROUP_M)")
        self.line("pid_m = first_m + (tile % width) % group_rows")
        self.line("pid_n = (tile % width) // group_rows")
        self.line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
        self.line("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        self.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
        self.marks = [len(self.lines), 0]  # the end of the tile's place, the start of its result
        if gemm.conv is not None:
            self._convolution_loop()
        elif self.tma is not None:
            with self.block("if TMA:"):
                self._descriptor_loop(*self.tma)
            with self.block("else:"):
                self._product_loop()
        else:
            self._product_loop()
        self.marks[1] = len(self.lines)
        self._tile_index()
        self.line(f"mmask = (rm < {gemm.m})[:, None]")
        self.line(f"nmask = (rn < {gemm.n})[None, :]")
        self.line("xmask = mmask & nmask")
        self._result()
        self._loop_variables()
        for member in self.kernel.members[1:]:
            self._store(member, self.value(member.body, {}))

    def _split_loop(self) -> None:
        """A split-K program's K chunk (`K_CHUNK` from `pid_k * K_CHUNK`; past K masked),
        stored as float32 partials, then its arrival at the tile's counter: the program that
        arrives last (`arrived`) sums the chunks in order and runs the epilogue."""
        gemm = self.gemm
        m, n, k = gemm.m, gemm.n, gemm.k
        self.line(f"ram = rm % {m}")
        self.line(f"rbn = rn % {n}")
        self.line("rk = tl.arange(0, BLOCK_K)")
        self.line("k_start = pid_k * K_CHUNK")
        self._operand_pointers("a_ptrs", gemm.a, "ram", "rk")
        self._operand_pointers("b_ptrs", gemm.b, "rk", "rbn")
        self.line(f"a_ptrs += k_start * {gemm.a.col_stride}")
        self.line(f"b_ptrs += k_start * {gemm.b.row_stride}")
        precision = ', input_precision="ieee"' if gemm.dtype == torch.float32 else ""
        with self.block("for kk in range(0, K_CHUNK, BLOCK_K):"):
            self.line(f"k_left = {k} - k_start - kk")
            with self.block(f"if SPLIT_K * K_CHUNK == {k}:"):
                self.line("a = tl.load(a_ptrs)")
                self.line("b = tl.load(b_ptrs)")
            with self.block("else:"):
                self.line("a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)")
                self.line("b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)")
            with self.block("if UPCAST:"):
                self.line("a = a.to(tl.float32)")
                self.line("b = b.to(tl.float32)")
            self.line(f"acc += tl.dot(a, b{precision})")
            self.line(f"a_ptrs += BLOCK_K * {gemm.a.col_stride}")
            self.line(f"b_ptrs += BLOCK_K * {gemm.b.row_stride}")
        self.line(f"split_index = pid_b * {m * n} + rm[:, None] * {n} + rn[None, :]")
        self.line(f"split_mask = (rm < {m})[:, None] & (rn < {n})[None, :]")
        partials = f"p_split_partials + pid_k * {gemm.batch * m * n} + split_index"
        self.line(f"tl.store({partials}, acc, split_mask)")
        self.line("tl.debug_barrier()  # every thread's partials before the arrival")
        self.line('arrived = tl.atomic_add(p_split_counters + pid, 1, sem="acq_rel", scope="gpu")')

    def _split_sum(self) -> list[str]:
        """The last program's sum of a tile's chunks (in chunk order: the same every run),
        at depth 3; it resets the tile's counter for the next call."""
        size = self.gemm.batch * self.gemm.m * self.gemm.n
        return [
            "            tl.store(p_split_counters + pid, 0)",
            "            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            "            for chunk in tl.static_range(SPLIT_K):",
            f"                acc += tl.load(p_split_partials + chunk * {size} + split_index, "
            'split_mask, other=0.0, cache_modifier=".cg")',
        ]

    def _descriptor_loop(self, a: TmaOperand, b: TmaOperand) -> None:
        """The K loop by TMA: blocks at tile coordinates, zeros past the edges."""
        self.line("tma_row = (pid_m * BLOCK_M).to(tl.int32)")
        self.line("tma_column = (pid_n * BLOCK_N).to(tl.int32)")
        with self.block(f"for k in range(0, {self.gemm.k}, BLOCK_K):"):
            self.line(f"a = {a.load('tma_row', 'k')}")
            self.line(f"b = {b.load('k', 'tma_column')}")
            with self.block("if UPCAST:"):
                self.line("a = a.to(tl.float32)")
                self.line("b = b.to(tl.float32)")
            self.line("acc += tl.dot(a, b)")

    def _product_loop(self) -> None:
        """The K loop of a matrix product: operand blocks by their strides."""
        gemm = self.gemm
        m, n, k = gemm.m, gemm.n, gemm.k
        # rows and columns past the edge read row 0 (their results are never stored);
        # whole tiles let Triton vectorize along a contiguous dimension
        with self.block(f"if {m} % BLOCK_M == 0:"):
            self.line("ram = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)")
        with self.block("else:"):
            self.line(f"ram = rm % {m}")
        with self.block(f"if {n} % BLOCK_N == 0:"):
            self.line("rbn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)")
        with self.block("else:"):
            self.line(f"rbn = rn % {n}")
        self.line("rk = tl.arange(0, BLOCK_K)")
        self._operand_pointers("a_ptrs", gemm.a, "ram", "rk")
        self._operand_pointers("b_ptrs", gemm.b, "rk", "rbn")
        precision = ', input_precision="ieee"' if gemm.dtype == torch.float32 else ""
        with self.block(f"for k in range(0, {k}, BLOCK_K):"):
            with self.block(f"if {k} % BLOCK_K == 0:"):
                self.line("a = tl.load(a_ptrs)")
                self.line("b = tl.load(b_ptrs)")
            with self.block("else:"):
                self.line(f"a = tl.load(a_ptrs, mask=rk[None, :] < {k} - k, other=0.0)")
                self.line(f"b = tl.load(b_ptrs, mask=rk[:, None] < {k} - k, other=0.0)")
            with self.block("if UPCAST:"):
                self.line("a = a.to(tl.float32)")
                self.line("b = b.to(tl.float32)")
            self.line(f"acc += tl.dot(a, b{precision})")
            self.line(f"a_ptrs += BLOCK_K * {gemm.a.col_stride}")
            self.line(f"b_ptrs += BLOCK_K * {gemm.b.row_stride}")

    def _tile_index(self) -> None:
        """`xindex`: the flat index of each tile point in the result (and the epilogue)."""
        gemm = self.gemm
        conv = gemm.conv
        if conv is None:
            self.line(f"xindex = pid_b * {gemm.m * gemm.n} + rm[:, None] * {gemm.n} + rn[None, :]")
            return
        # the result's dense layout: image, output channel, output row and column
        hw = conv.out_h * conv.out_w
        sn, sc, sh, sw = conv.result_strides
        self.line(f"out_image = (rm // {hw})[:, None]")
        self.line(f"out_pixel = (rm % {hw})[:, None]")
        self.line(
            f"xindex = out_image * {sn} + rn[None, :] * {sc} + (out_pixel // {conv.out_w}) * {sh} "
            f"+ (out_pixel % {conv.out_w}) * {sw}"
        )

    def _convolution_loop(self) -> None:
        """The K loop of a convolution as an implicit GEMM: for each kernel tap, the input
        pixels its output rows read (zero outside the image) over channel blocks."""
        gemm = self.gemm
        conv = gemm.conv
        assert conv is not None
        hw = conv.out_h * conv.out_w
        sn, sc, sh, sw = conv.input_strides
        wo, wc, wh, ww = conv.weight_strides
        self.line(f"ram = rm % {gemm.m}")
        self.line(f"rbn = rn % {gemm.n}")
        self.line(f"image = ram // {hw}")
        self.line(f"pixel = ram % {hw}")
        self.line(f"row0 = (pixel // {conv.out_w}) * {conv.stride[0]} - {conv.padding[0]}")
        self.line(f"column0 = (pixel % {conv.out_w}) * {conv.stride[1]} - {conv.padding[1]}")
        self.line("rk = tl.arange(0, BLOCK_K)")
        precision = ', input_precision="ieee"' if gemm.dtype == torch.float32 else ""
        data, weight = self._use(gemm.a.storage), self._use(gemm.b.storage)
        with self.block(f"for tap in range(0, {conv.kernel_h * conv.kernel_w}):"):
            self.line(f"kh = tap // {conv.kernel_w}")
            self.line(f"kw = tap % {conv.kernel_w}")
            self.line(f"row = row0 + kh * {conv.dilation[0]}")
            self.line(f"column = column0 + kw * {conv.dilation[1]}")
            self.line(
                f"inside = (row >= 0) & (row < {conv.height}) & (column >= 0) & "
                f"(column < {conv.width})"
            )
            self.line(f"pixels = {gemm.a.offset} + image * {sn} + row * {sh} + column * {sw}")
            self.line(f"taps = {gemm.b.offset} + kh * {wh} + kw * {ww}")
            with self.block(f"for c in range(0, {conv.channels}, BLOCK_K):"):
                self.line("channels = c + rk")
                self.line(f"cmask = channels < {conv.channels}")
                self.line(
                    f"a = tl.load({data} + (pixels[:, None] + channels[None, :] * {sc}), "
                    "mask=inside[:, None] & cmask[None, :], other=0.0)"
                )
                self.line(
                    f"b = tl.load({weight} + (taps + channels[:, None] * {wc} + "
                    f"rbn[None, :] * {wo}), mask=cmask[:, None], other=0.0)"
                )
                with self.block("if UPCAST:"):
                    self.line("a = a.to(tl.float32)")
                    self.line("b = b.to(tl.float32)")
                self.line(f"acc += tl.dot(a, b{precision})")

    def _loop_variables(self) -> None:
        """The epilogue's loop variables on the tile. When its loops split into row loops
        (batch and M) and column loops (N), each is a `[BLOCK_M, 1]` or `[1, BLOCK_N]` vector of
        the tile's rows or columns, so a load along one of them (a bias, a scale per row) is
        a vector load under its own mask; otherwise every variable comes from the flat
        `xindex`."""
        sizes = [int(size) for size in self.kernel.outer]
        gemm = self.gemm
        if gemm.conv is not None:  # tile rows are (image, pixel): flat index only
            self._split("xindex", "x", self.kernel.outer)
            return
        split = next(
            (at for at in range(len(sizes) + 1) if _product(sizes[at:]) == gemm.n),
            None,
        )
        if split is None or _product(sizes[:split]) != gemm.batch * gemm.m:
            self._split("xindex", "x", self.kernel.outer)
            return
        self.row_variables = {f"x{i}" for i in range(split)}
        self.column_variables = {f"x{i}" for i in range(split, len(sizes))}
        rows = f"(pid_b * {gemm.m} + rm)[:, None]"
        for position in range(len(sizes)):
            last = split if position < split else len(sizes)
            first = 0 if position < split else split
            flat = rows if position < split else "rn[None, :]"
            inner = _product(sizes[position + 1 : last])
            value = flat if inner == 1 else f"({flat} // {inner})"
            if position > first:
                value = f"({value} % {sizes[position]})"
            self.line(f"x{position} = {value}")

    def _mask(self, expr: Expr) -> str | None:
        """The mask of a load or store on the tile: rows, columns or both (see
        `_loop_variables`), and any enclosing `masked` conditions."""
        names = {str(symbol) for symbol in sympy.sympify(expr).free_symbols}
        variables = {name for name in names if name[0] == "x" and name[1:].isdigit()}
        indirect = any(name.startswith("ind") for name in names)
        parts: list[str] = []
        if indirect or (variables & self.row_variables and variables & self.column_variables):
            parts.append("xmask")
        elif variables & self.row_variables:
            parts.append("mmask")
        elif variables & self.column_variables:
            parts.append("nmask")
        elif variables:  # loop variables of the flat index
            parts.append("xmask")
        parts.extend(self.conditions)
        return " & ".join(parts) if parts else None

    def _result(self) -> None:
        """The matmul's value on the tile, as eager's kernel returns it."""
        gemm = self.gemm
        value = "acc" if gemm.alpha == 1.0 else f"acc * {gemm.alpha!r}"
        if gemm.bias is not None and gemm.beta != 0.0:
            bias = gemm.bias
            parts = [str(bias.offset)] if bias.offset else []
            if bias.row_stride:
                parts.append(f"rm[:, None] * {bias.row_stride}")
            if bias.col_stride:
                parts.append(f"rn[None, :] * {bias.col_stride}")
            # a vector along the columns (nn.Linear's bias) or rows loads as one
            mask = {(True, True): "xmask", (True, False): "mmask", (False, True): "nmask"}.get(
                (bool(bias.row_stride), bool(bias.col_stride))
            )
            pointer = f"{self._use(bias.storage)} + ({' + '.join(parts) or '0'})"
            masked = f", {mask}, other=0.0" if mask else ""
            self.line(f"bias = tl.load({pointer}{masked}).to(tl.float32)")
            scaled = "bias" if gemm.beta == 1.0 else f"bias * {gemm.beta!r}"
            value = f"{value} + {scaled}"
        stored_type = TRITON_TYPES[gemm.dtype]
        self.line(f"result = ({value}).to({stored_type})")
        if gemm.store_result:
            self.written[gemm.result] = None
            self.line(f"tl.store({self._use(gemm.result)} + xindex, result, xmask)")
        register = "result.to(tl.float32)" if gemm.dtype in HALF_TYPES else "result"
        self.line(f"result_value = {register}")
        self.locals[gemm.result] = "result_value"


def _extern_description(gemm: Gemm, kernel: GemmKernel, result: str) -> dict[str, object]:
    """What the runtime choice needs to run the vendor library instead (`gemm_choice.py`);
    `result` names the product (`GemmWriter._result_name`)."""

    def view(operand: Operand | None) -> list[object] | None:
        if operand is None:
            return None
        layout = operand.layout
        return [operand.storage, [int(s) for s in layout.size], [int(s) for s in layout.stride],
                int(layout.offset)]  # fmt: skip

    return {
        "target": gemm.target,
        "a": view(gemm.a),
        "b": view(gemm.b),
        "bias": view(gemm.bias),
        "alpha": gemm.alpha,
        "beta": gemm.beta,
        "result": result,
        "shape": [gemm.batch, gemm.m, gemm.n, gemm.k],
        "dtype": str(gemm.dtype),
        "epilogue": kernel.epilogue is not None,
        "conv": None
        if gemm.conv is None
        else {
            "stride": list(gemm.conv.stride),
            "padding": list(gemm.conv.padding),
            "dilation": list(gemm.conv.dilation),
            "result_size": [
                gemm.conv.batch,
                gemm.conv.out_channels,
                gemm.conv.out_h,
                gemm.conv.out_w,
            ],
            "result_stride": list(gemm.conv.result_strides),
        },
    }


def generate_gemm(kernel: GemmKernel, program: Program) -> KernelSource:
    """The source of `kernel` (see the module)."""
    return GemmWriter(kernel, program).generate()


__all__ = ["GemmWriter", "generate_gemm"]
