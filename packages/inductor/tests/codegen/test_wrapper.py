"""The Python wrapper: literal arguments of extern calls are spelled as Python values (a
complex scalar: polar's backward multiplies by 1j); the per-call path: kernels called through
their `launch`, one-tensor extern results bound with no helper call, restrides that only
view when the memory is the same."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch

import ember
from ember import prims
from ember.inductor.codegen.wrapper import (
    PUBLIC_BINDINGS,
    direct_op,
    restride,
    wrapper_namespace,
)
from ember.inductor.pipeline import compile_graph


def test_a_complex_literal_reaches_an_extern_call() -> None:
    radius = torch.rand(5, requires_grad=True)
    angle = torch.randn(5, requires_grad=True)
    compiled = ember.compile(lambda r, a: torch.polar(r, a), backend="inductor")
    torch.testing.assert_close(compiled(radius, angle), torch.polar(radius, angle))


@contextlib.contextmanager
def _wrapper_helper_calls() -> Iterator[list[str]]:
    """The names of the functions of codegen/wrapper.py called inside the block (the
    generated wrapper should call none of them per extern)."""
    helpers: list[str] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("codegen/wrapper.py"):
            helpers.append(frame.f_code.co_name)

    sys.setprofile(watch)
    try:
        yield helpers
    finally:
        sys.setprofile(None)


def _conv_relu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x, w).relu() + 1


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 6, 6, generator=generator), torch.randn(
        4, 3, 3, 3, generator=generator
    )


def test_a_one_tensor_extern_result_needs_no_helper_call() -> None:
    """A convolution's result is bound as it comes and its strides compared inline: no
    Python call per extern besides the op (it was flatten_result and restride each)."""
    x, w = _inputs()
    compiled = compile_graph(prims.trace(_conv_relu, x, w), (x, w))
    expected = _conv_relu(x, w)
    torch.testing.assert_close(compiled(x, w), expected)
    with _wrapper_helper_calls() as helpers:
        out = compiled(x, w)
    assert helpers == []
    torch.testing.assert_close(out, expected)


def test_an_extern_returning_tensors_needs_no_helper_call() -> None:
    """convolution_backward returns three Tensors: unpacked as they come, no flatten_result
    or restride call per extern in the backward wrapper either."""
    x, w = _inputs()
    x.requires_grad_()
    w.requires_grad_()
    compiled = ember.compile(_conv_relu, backend="inductor")
    compiled(x, w).sum().backward()  # compile forward and backward
    expected = torch.autograd.grad(_conv_relu(x, w).sum(), (x, w))
    x.grad = w.grad = None
    with _wrapper_helper_calls() as helpers:
        compiled(x, w).sum().backward()
    assert helpers == []
    torch.testing.assert_close(x.grad, expected[0])
    torch.testing.assert_close(w.grad, expected[1])


def _cudnn_attention_standin(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any, lse: bool, dropout: float,
    causal: bool, debug: bool, *, scale: float,
) -> tuple[Any, ...]:  # fmt: skip
    """What `_scaled_dot_product_cudnn_attention` returns (Tensors, two ints, Nones), on the
    CPU, its output contiguous rather than in the (b, s, h, d) memory its meta declares."""
    out = torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v
    return out, torch.logsumexp(q, -1), None, None, 8, 8, torch.tensor(0), torch.tensor(0), None


def test_an_extern_returning_tensors_and_numbers_is_unpacked_without_helper_calls() -> None:
    """cuDNN attention returns seven Tensors (or Nones) and two ints: the result is unpacked
    as it comes (no `flatten_result` call, 12 a GPT-2 forward on the GPU), and an output in
    other strides than declared is still restrided."""
    from ember.inductor.codegen.cpp.backend import CppBackend
    from ember.inductor.codegen.wrapper import generate_wrapper
    from ember.inductor.ir.program import ExternNode, Program, Storage, TensorArg
    from ember.inductor.ir.tensors import Layout

    target, shape, f32 = (
        "aten::_scaled_dot_product_cudnn_attention.default",
        (2, 3, 8, 16),
        torch.float32,
    )
    full, heads_last = Layout.contiguous(f32, shape), Layout(f32, shape, (384, 16, 48, 1))
    storages = {n: Storage(n, f32, None, is_input=True) for n in ("q", "k", "v")}
    storages["out"] = Storage("out", f32, None, declared=heads_last)
    storages["lse"] = Storage("lse", f32, None, declared=Layout.contiguous(f32, shape[:3]))
    node = ExternNode(
        name="attention",
        target=target,
        args=[TensorArg(n, full) for n in ("q", "k", "v")] + [None, True, 0.0, True, False],
        kwargs={"scale": 0.25},
        outputs=["out", "lse", *[None] * 7],
        reads_from={"q", "k", "v"},
        writes_to=set(),
        origins=("sdpa",),
    )
    outputs: list[object] = [
        TensorArg("out", heads_last),
        TensorArg("lse", storages["lse"].declared),
    ]
    program = Program(
        storages=storages, input_storages=["q", "k", "v"], nodes=[node], outputs=outputs
    )
    namespace = wrapper_namespace({}, {target: _cudnn_attention_standin})
    exec(generate_wrapper(program, [node], {}, CppBackend()), namespace)  # noqa: S102
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g) for _ in range(3))
    with _wrapper_helper_calls() as helpers:
        out, lse = namespace["call"]([q, k, v])
    assert "flatten_result" not in helpers
    assert helpers.count("restride") == 1  # the contiguous output only
    expected = _cudnn_attention_standin(q, k, v, None, True, 0.0, True, False, scale=0.25)
    assert out.stride() == (384, 16, 48, 1)
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(lse, expected[1])


class _Kernel:
    """A kernel whose `launch` is the fast path and whose `__call__` is the slow one."""

    def __init__(self, kernel: Any, slow: list[str]) -> None:
        self.launch = getattr(kernel, "launch", kernel)
        self._slow = slow

    def __call__(self, *args: Any) -> None:
        self._slow.append("__call__")
        self.launch(*args)


def test_kernels_are_called_through_their_launch_fast_path() -> None:
    """A Triton kernel's `launch` is its generated launch once bound; `kernel(...)` added a
    frame (TritonKernel.__call__) to each of the ~400 launches of a ResNet-50 training step."""
    x, w = _inputs()
    compiled = compile_graph(prims.trace(_conv_relu, x, w), (x, w))
    namespace = compiled.call.__globals__  # the loaded wrapper's own globals
    slow: list[str] = []
    kernels = {name: _Kernel(kernel, slow) for name, kernel in namespace["kernels"].items()}
    loaded = wrapper_namespace(kernels, namespace["ops"])
    exec(compile(compiled.source, "<wrapper>", "exec"), loaded)  # noqa: S102
    out = loaded["call"]([x, w])
    assert kernels and slow == []
    torch.testing.assert_close(out[0], _conv_relu(x, w))


def test_restride_views_a_tensor_whose_strides_differ_only_in_size_one_dims() -> None:
    """cuDNN's weight gradient of a 1x1 convolution in channels-last has strides (C, 1, C, C)
    where the Graph declares (C, 1, 1, 1): the same memory, viewed, not copied."""
    grad = torch.empty(8, 4, 1, 1, memory_format=torch.channels_last).normal_()
    assert grad.stride() == (4, 1, 4, 4)
    out = restride(grad, (8, 4, 1, 1), (4, 1, 1, 1))
    assert out.stride() == (4, 1, 1, 1)
    assert out.data_ptr() == grad.data_ptr()
    torch.testing.assert_close(out, grad)
    moved = torch.randn(8, 4, 2, 2).contiguous(memory_format=torch.channels_last)
    copied = restride(moved, (8, 4, 2, 2), (16, 4, 2, 1))  # other memory order: a copy
    assert copied.stride() == (16, 4, 2, 1) and copied.data_ptr() != moved.data_ptr()
    torch.testing.assert_close(copied, moved)


def test_an_extern_op_is_called_without_the_overloads_python_call() -> None:
    """`ops[target]` is the overload's dispatcher entry: `OpOverload.__call__` was one Python
    frame more per extern call (1.9 -> 1.5 us a `mm` on the CPU; a ResNet-50 inference step
    calls 54 convolutions)."""
    x, w = _inputs()
    compiled = compile_graph(prims.trace(_conv_relu, x, w), (x, w))
    assert any("ops[" in line for line in compiled.source.splitlines())  # an extern call
    called: list[Any] = []

    def watch(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            called.append(frame.f_code)

    sys.setprofile(watch)
    try:
        out = compiled(x, w)
    finally:
        sys.setprofile(None)
    assert torch._ops.OpOverload.__call__.__code__ not in called
    torch.testing.assert_close(out, _conv_relu(x, w))


def _public_cases() -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Arguments for each extern op of PUBLIC_BINDINGS that runs on the CPU, as the wrapper
    passes them (the schema's positional arguments positionally, keyword-only ones by name)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    q, k, v = r(2, 3, 8, 16), r(2, 3, 8, 16), r(2, 3, 8, 16)
    return {
        "mm": ((r(4, 5), r(5, 6)), {}),
        "addmm": ((r(6), r(4, 5), r(5, 6)), {"beta": 0.5, "alpha": 2.0}),
        "bmm": ((r(3, 4, 5), r(3, 5, 6)), {}),
        "baddbmm": ((r(3, 4, 6), r(3, 4, 5), r(3, 5, 6)), {"beta": 0.5, "alpha": 2.0}),
        "convolution": (
            (r(2, 4, 9, 9), r(5, 4, 3, 3), r(5), [2, 1], [1, 0], [1, 2], False, [0, 0], 1),
            {},
        ),
        "_scaled_dot_product_flash_attention_for_cpu": ((q, k, v, 0.0, True), {"scale": 0.25}),
    }


def test_extern_ops_go_through_torchs_binding_and_compute_what_the_overload_does() -> None:
    """The matmuls, convolution and attention forwards are called through torch's Python
    binding (`torch.addmm`: 1.3-1.7 us less a call than the overload's pybind entry), which
    runs the same overload: same values, and an overload that another binding signature
    could catch (`cat`: a Dimname dim) or a non-default one (`mm.dtype`) keeps its entry."""
    cases = _public_cases()
    for name in PUBLIC_BINDINGS:
        overload = getattr(torch.ops.aten, name).default
        called = direct_op(overload)
        if hasattr(torch._C._VariableFunctions, name):
            assert called is getattr(torch._C._VariableFunctions, name), name
        if name not in cases:
            continue  # CUDA-only kernels: the binding is checked above
        args, kwargs = cases[name]
        ours, theirs = called(*args, **kwargs), overload(*args, **kwargs)
        for a, b in zip(ours if isinstance(ours, tuple) else (ours,),
                        theirs if isinstance(theirs, tuple) else (theirs,)):  # fmt: skip
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for overload in (torch.ops.aten.cat.default, torch.ops.aten.mm.dtype):
        assert direct_op(overload) is overload._op


def _linear_bmm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.linear(x, w, b)  # addmm
    return torch.baddbmm(h[:2], h[:2], h[:2].transpose(1, 2), alpha=0.5) @ h[2:].reshape(2, 4, 4)


def test_a_graph_of_matmuls_through_torchs_bindings_matches_eager() -> None:
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(4, 4, 4, generator=g), torch.randn(4, 4, generator=g),
               torch.randn(4, generator=g))  # fmt: skip
    compiled = compile_graph(prims.trace(_linear_bmm, x, w, b), (x, w, b))
    torch.testing.assert_close(compiled(x, w, b), _linear_bmm(x, w, b))


class _CountViews(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.views = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.as_strided.default:
            self.views += 1
        return func(*args, **(kwargs or {}))


def _norm_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.relu() + 1).reshape(-1, x.shape[-1]) @ w


def test_a_buffer_an_extern_reads_in_one_view_is_allocated_in_that_view() -> None:
    """A (b, s, k) kernel result that `mm` reads as (b*s, k) is allocated as (b*s, k): the
    kernel takes only its pointer, and the view was one `as_strided` a call (GPT-2: 37 of its
    129 a step)."""
    x, w = torch.randn(2, 3, 4), torch.randn(4, 5)
    compiled = compile_graph(prims.trace(_norm_linear, x, w), (x, w))
    counter = _CountViews()
    with counter:
        out = compiled(x, w)
    assert counter.views == 0
    torch.testing.assert_close(out, _norm_linear(x, w))


def test_a_buffer_an_extern_reads_in_one_view_is_allocated_in_that_view_over_symbols() -> None:
    """The same over size symbols: the buffer's (s0, s1, k) and the view's (s0*s1, k) reach
    the same elements for every value of the symbols (TinyDecoder's dynamic Graph made 40
    views a call where its static Graph made 19)."""
    import ember

    compiled = ember.compile(_norm_linear, dynamic=True)
    w = torch.randn(4, 5)
    for batch, length in ((2, 3), (3, 5), (4, 7)):
        x = torch.randn(batch, length, 4)
        torch.testing.assert_close(compiled(x, w), _norm_linear(x, w))
    counter = _CountViews()
    with counter:
        out = compiled(x, w)
    assert counter.views == 0
    torch.testing.assert_close(out, _norm_linear(x, w))


def _residual_layers(depth: int) -> Any:
    def layers(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        for _ in range(depth):
            x = torch.relu(x @ w) * 0.5 + x  # a kernel in place on each product
        return x

    return layers


def _opcodes(fn: Any, *args: Any) -> int:
    """Bytecode instructions Python runs for a call of `fn` (guards, entry and wrapper): the
    fewest of a few calls under the tracer (the first ones compile anew for it, and check)."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        frame.f_trace_opcodes = True
        count += event == "opcode"
        return trace

    counts = []
    sys.settrace(trace)
    try:
        for _ in range(4):
            count = 0
            fn(*args)
            counts.append(count)
    finally:
        sys.settrace(None)
    return min(counts)


def test_a_symbolic_call_costs_what_a_static_one_does_however_deep() -> None:
    """Over size symbols the wrapper computes each size tuple once a call (it built them at
    every use: ~140 a call in a 12-layer GPT-2), and a kernel working in place on an extern
    result takes that tensor, not an `as_strided` of it (18 of GPT-2's 112 views a call
    at batch 1). What a symbolic call does beyond a static one then grows, layer by layer,
    by the sizes each kernel takes as arguments only."""
    w = torch.randn(4, 4)
    x = torch.randn(3, 5, 4)
    extra = {}
    for depth in (1, 3):
        fn = _residual_layers(depth)
        views = []
        for compiled in (
            compile_graph(prims.trace(fn, x, w, dynamic=True), (x, w)),
            compile_graph(prims.trace(fn, x, w), (x, w)),
        ):
            torch.testing.assert_close(compiled(x, w), fn(x, w))
            counter = _CountViews()
            with counter:
                compiled(x, w)
            views.append(counter.views)
        assert views[0] == views[1]
        # every size symbolic (batch, length, width): guards, entry and wrapper
        symbolic, static = ember.compile(fn, dynamic=True), ember.compile(fn, dynamic=False)
        symbolic(torch.randn(2, 3, 4), w)
        torch.testing.assert_close(symbolic(x, w), fn(x, w))
        static(x, w)
        extra[depth] = _opcodes(symbolic, x, w) - _opcodes(static, x, w)
    # two more layers: two kernel launches, each given the sizes s0, s1 and s2
    assert extra[3] - extra[1] <= 2 * 3
