"""The native wrapper: compiled graphs whose wrappers run in ember-runtime's C++ interpreter.

Values and gradients are compared with eager PyTorch (CPU: C++ kernels called back in
Python, extern ops through the dispatcher's boxed call, allocations and views in C++); on the
GPU machine (`EMBER_TEST_DEVICE=cuda`) the interpreter launches the Triton kernels itself and
must give exactly the Python wrapper's bits. The first test that needs the interpreter builds
it (about 40 s with g++) into the artifact cache; later ones import it.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import pytest
import torch
from torch import nn

import ember
from ember.inductor.codegen.native_wrapper import (
    ALIAS,
    ALLOC,
    EXTERN,
    FREE,
    LAUNCH,
    RETURN,
    VIEW,
    NativeCall,
    Translation,
    translate,
)
from ember.inductor.codegen.wrapper import wrapper_namespace


@pytest.fixture(autouse=True, scope="module")
def built_interpreter() -> Any:
    """The interpreter, built before the tests (compiled graphs only ask whether it is ready:
    a first build runs in the background)."""
    from ember.runtime import native_interpreter

    return native_interpreter()


class Block(nn.Module):
    """Linear, layer norm, convolution, batch norm, softmax: C++ kernels and extern calls
    (mm/addmm, convolution and its tuple-returning backward) in both graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.norm = nn.LayerNorm(32)
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.l2(torch.relu(self.norm(self.l1(x))))
        z = self.bn(self.conv(image)).relu().mean((2, 3))
        return y.softmax(-1), z


def _native_calls(before: set[int]) -> list[NativeCall]:
    return [o for o in gc.get_objects() if type(o) is NativeCall and id(o) not in before]


def _existing() -> set[int]:
    return {id(o) for o in gc.get_objects() if type(o) is NativeCall}


def _train(model: nn.Module, compiled: Any, device: str, steps: int = 3) -> list[Any]:
    torch.manual_seed(0)
    x = torch.randn(5, 16, device=device, requires_grad=True)
    image = torch.randn(2, 3, 8, 8, device=device)
    seen = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        x.grad = None
        outputs = compiled(x, image)
        (outputs[0].square().sum() + outputs[1].sum()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        seen.append((*[o.detach().clone() for o in outputs], x.grad.clone(), *grads))
    return seen


def test_training_equals_eager_and_runs_in_the_interpreter() -> None:
    before = _existing()
    torch.manual_seed(0)
    model = Block()
    reference = Block()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model, options={"native_wrapper": "always"})
    got = _train(model, compiled, "cpu")
    expected = _train(reference, reference, "cpu")
    for step_got, step_expected in zip(got, expected):
        for a, b in zip(step_got, step_expected):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # the running statistics, written after the graph, follow eager's too
    torch.testing.assert_close(model.bn.running_mean, reference.bn.running_mean)
    calls = _native_calls(before)
    assert sorted(c.name for c in calls) == ["forward_backward", "forward_forward"]
    assert all(c.program is not None for c in calls)


def test_outputs_keep_their_aliasing_with_inputs() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x.view(4, 3), (x @ y).relu(), x.t()

    x, y = torch.randn(3, 4), torch.randn(4, 5)
    compiled = ember.compile(fn, options={"native_wrapper": "always"})
    for _ in range(3):  # the first call runs the Python wrapper, the others the interpreter
        got = compiled(x, y)
        expected = fn(x, y)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
        assert got[0].data_ptr() == x.data_ptr() and got[2].data_ptr() == x.data_ptr()
        assert got[2].stride() == expected[2].stride()


_WRAPPER = """DEVICE = torch.device('cpu')


def call(args):
    in0, in1, = args
    args.clear()
    buf0 = empty_strided((4, 8, ), (8, 1, ), dtype=torch.float32, device=DEVICE)
    kernels['k'].launch(32, in0, buf0, 3)
    buf1 = ops['aten::mm.default'](buf0, in1)
    if buf1.stride() != (2, 1, ):
        buf1 = restride(buf1, (4, 2, ), (2, 1, ))
    del buf0
    buf2 = as_strided(buf1, (2, 4, ), (1, 2, ), buf1.storage_offset() + 0)
    buf3 = buf2  # reuse buf2, same layout
    return (buf3, as_strided(in0, (8, ), (1, ), 4).detach(), )
"""


def test_translation_of_each_kind_of_line() -> None:
    ops = {"aten::mm.default": torch.ops.aten.mm.default}
    kernels = {"k": lambda numel, *args: None}
    translation = translate(_WRAPPER, wrapper_namespace(kernels, ops), ops)
    assert isinstance(translation, Translation)
    kinds = [instruction[0] for instruction in translation.instructions]
    assert kinds == [ALLOC, LAUNCH, EXTERN, FREE, VIEW, ALIAS, RETURN]
    registers = translation.registers
    launch = translation.instructions[1]
    assert launch[2] == 32 and launch[3][-1] == (0, ("", 3))  # numel, a constant argument
    extern = translation.instructions[2]
    mm = torch.ops.aten.mm.default._schema
    assert len(extern[2]) == len(mm.arguments)  # every schema argument, in order
    assert extern[4] == [(registers["buf1"], [4, 2], [2, 1])]  # restrided when it differs
    view = translation.instructions[4]
    assert view[3] == ([2, 4], [1, 2], 0, True)  # relative to the base's own offset
    returned = translation.instructions[-1][1]
    assert returned[1][1] is True  # detached


@pytest.mark.parametrize(
    "line, reason",
    [
        ("    s0 = in0.shape[0]", "shape"),
        ("    in0 = in0.to(DEVICE, non_blocking=True)", "to"),
        ("    kernels['k'].launch(size0, in0)", "symbolic"),
    ],
)
def test_lines_it_cannot_run_keep_the_python_wrapper(line: str, reason: str) -> None:
    source = (
        "DEVICE = torch.device('cpu')\n\n\ndef call(args):\n    in0, = args\n    args.clear()\n"
        f"{line}\n    return (in0, )\n"
    )
    ops: dict[str, Any] = {}
    translation = translate(source, wrapper_namespace({"k": lambda *a: None}, ops), ops)
    assert isinstance(translation, str) and reason in translation


def test_without_the_interpreter_the_python_wrapper_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ops = {"aten::mm.default": torch.ops.aten.mm.default}
    seen: list[int] = []
    kernels = {"k": lambda numel, *args: seen.append(numel)}
    namespace = wrapper_namespace(kernels, ops)
    exec(compile(_WRAPPER, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(_WRAPPER, namespace, ops)
    assert isinstance(translation, Translation)

    def broken() -> Any:
        raise RuntimeError("no compiler here")

    call = NativeCall("g", namespace["call"], translation, namespace["kernels"], ops, broken)
    x, w = torch.randn(4, 8), torch.randn(8, 2)
    with caplog.at_level(logging.WARNING, logger="ember.inductor"):
        for _ in range(2):
            out = call([x, w])
            assert out[0].shape == (2, 4)
    assert call.program is None and seen == [32, 32]
    assert "native wrapper is unavailable" in caplog.text and "no compiler here" in caplog.text


def test_kernels_called_back_and_misaligned_views() -> None:
    """A kernel without a native launch is called back in Python with the registers'
    tensors; a view at an odd offset reaches it as it is."""
    ops = {"aten::mm.default": torch.ops.aten.mm.default}
    seen: list[Any] = []

    def kernel(numel: int, source: torch.Tensor, out: torch.Tensor, scale: int) -> None:
        seen.append((numel, source.storage_offset()))
        out.copy_(source.reshape(-1)[:32].reshape(4, 8) * scale)

    namespace = wrapper_namespace({"k": kernel}, ops)
    exec(compile(_WRAPPER, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(_WRAPPER, namespace, ops)
    assert isinstance(translation, Translation)
    from ember.runtime import native_interpreter

    kernels = namespace["kernels"]
    call = NativeCall("g", namespace["call"], translation, kernels, ops, native_interpreter)
    base = torch.randn(41)
    x, w = base[1:], torch.randn(8, 2)  # storage offset 1
    expected = ((x[:32].reshape(4, 8) * 3) @ w).t()
    for _ in range(3):
        out = call([x, w])
        torch.testing.assert_close(out[0], expected)
        torch.testing.assert_close(out[1], base[4:12])  # absolute offset
    assert call.program is not None and seen == [(32, 1)] * 3


@pytest.mark.skipif(
    os.environ.get("EMBER_TEST_DEVICE") != "cuda" or not torch.cuda.is_available(),
    reason="launches Triton kernels on the GPU",
)
def test_gpu_training_gives_the_python_wrappers_bits() -> None:
    before = _existing()
    torch.manual_seed(0)
    model = Block().cuda()
    python_model = Block().cuda()
    python_model.load_state_dict(model.state_dict())
    native = ember.compile(model, options={"native_wrapper": "always"})
    python = ember.compile(python_model, options={"native_wrapper": "never"})
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = _train(model, native, "cuda", steps=4)
        expected = _train(python_model, python, "cuda", steps=4)
    for step_got, step_expected in zip(got, expected):
        for a, b in zip(step_got, step_expected):
            assert torch.equal(a, b)
    calls = _native_calls(before)
    assert calls and all(c.program is not None for c in calls)
    assert all(c.native_kernels > 0 for c in calls)


_DONATING = """DEVICE = torch.device('cpu')


def call(args):
    in0, in1, = args
    args.clear()
    buf0 = in0 if getrefcount(in0) == SOLE_REFERENCES and storage_use_count(in0.untyped_storage()._cdata) == SOLE_STORAGE_USES else empty_strided((4, ), (1, ), dtype=torch.float32, device=DEVICE)  # in place in0 if held alone
    kernels['k'].launch(4, in0, in1, buf0)
    del in0, in1
    return (buf0, )
"""


@pytest.mark.parametrize("interpreter", [False, True])
def test_a_donated_input_is_written_over_only_when_held_alone(interpreter: bool) -> None:
    ops: dict[str, Any] = {}

    def add(numel: int, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(a, b, out=out)

    namespace = wrapper_namespace({"k": add}, ops)
    exec(compile(_DONATING, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(_DONATING, namespace, ops)
    assert isinstance(translation, Translation)
    from ember.runtime import native_interpreter

    call = NativeCall(
        "g", namespace["call"], translation, namespace["kernels"], ops, native_interpreter
    )
    if interpreter:
        call([torch.zeros(4), torch.zeros(4)])  # the first call runs the Python wrapper
        assert call.program is not None
    y = torch.arange(4.0)
    for _ in range(2):
        donated = torch.ones(4)
        address = donated.data_ptr()
        args = [donated, y]
        del donated  # the list holds it alone: its memory takes the result
        (out,) = call(args)
        assert out.data_ptr() == address and out.tolist() == [1.0, 2.0, 3.0, 4.0]
        kept = torch.ones(4)
        (out,) = call([kept, y])  # the caller keeps it: a fresh buffer, the input untouched
        assert out.data_ptr() != kept.data_ptr() and kept.tolist() == [1.0] * 4
        base = torch.ones(8)
        (out,) = call([base[:4], y])  # the list holds the view alone; `base` shares its storage
        assert out.data_ptr() != base.data_ptr() and base.tolist() == [1.0] * 8


def test_calls_run_the_python_wrapper_until_the_interpreter_is_ready(
    built_interpreter: Any,
) -> None:
    ops = {"aten::mm.default": torch.ops.aten.mm.default}
    seen: list[int] = []
    kernels = {"k": lambda numel, source, out, scale: seen.append(numel)}
    namespace = wrapper_namespace(kernels, ops)
    exec(compile(_WRAPPER, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(_WRAPPER, namespace, ops)
    assert isinstance(translation, Translation)
    answers = iter([None, None, built_interpreter])  # building, building, ready
    asked: list[int] = []

    def build() -> Any:
        asked.append(1)
        return next(answers)

    call = NativeCall("g", namespace["call"], translation, namespace["kernels"], ops, build)
    x, w = torch.randn(4, 8), torch.randn(8, 2)
    for calls in range(1, 6):
        call([x, w])
        # a CPU graph asks before and after each Python call (its C++ kernels need no
        # first launch): building, building, then ready before the second call
        assert (call.program is not None) == (calls >= 2)
    assert len(asked) == 3  # not asked again once the program is made
    assert seen == [32] * 5  # the Python wrapper's launches, then the interpreter's call-backs


_FAILING = """DEVICE = torch.device('cpu')


def call(args):
    in0, in1, = args
    args.clear()
    buf0 = empty_strided((SIZE, ), (1, ), dtype=torch.float32, device=DEVICE)
    buf1 = ops['aten::index_select.default'](in0, 0, in1)  # model.py:42
    return (buf1, )
"""


@pytest.mark.parametrize(
    "size, index, message",
    [(4, 7, "aten::index_select.default (model.py:42)"), (1 << 62, 0, "allocating buf0")],
)
def test_errors_keep_their_python_type_and_name_the_source_line(
    size: int, index: int, message: str
) -> None:
    source = _FAILING.replace("SIZE", str(size))
    ops = {"aten::index_select.default": torch.ops.aten.index_select.default}
    namespace = wrapper_namespace({}, ops)
    exec(compile(source, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(source, namespace, ops)
    assert isinstance(translation, Translation)
    from ember.runtime import native_interpreter

    program = native_interpreter().Program(
        translation.instructions,
        [],
        [("aten::index_select", "", ops["aten::index_select.default"])],  # a boxed call
        len(translation.registers),
        namespace["call"],
        translation.notes,
        "g",
    )
    x = torch.randn(5, 3)
    with pytest.raises(Exception) as python_error:  # noqa: PT011 - compared below
        namespace["call"]([x, torch.tensor([index])])
    with pytest.raises(type(python_error.value)) as native_error:
        program.run([x, torch.tensor([index])], 0)
    assert type(native_error.value) is type(python_error.value)
    text = str(native_error.value)
    assert message in text and "graph g's native wrapper" in text
    assert "EMBER_INDUCTOR_NATIVE_WRAPPER=never" in text


def test_timings_count_each_kind_of_instruction(built_interpreter: Any) -> None:
    ops = {"aten::mm.default": torch.ops.aten.mm.default}
    namespace = wrapper_namespace({"k": lambda numel, source, out, scale: None}, ops)
    exec(compile(_WRAPPER, "<test wrapper>", "exec"), namespace)  # noqa: S102
    translation = translate(_WRAPPER, namespace, ops)
    assert isinstance(translation, Translation)
    call = NativeCall(
        "g", namespace["call"], translation, namespace["kernels"], ops, lambda: built_interpreter
    )
    x, w = torch.randn(4, 8), torch.randn(8, 2)
    call([x, w])
    call.program.set_timing(True)
    for _ in range(3):
        call([x, w])
    timings = call.program.timings()
    assert {key: count for key, (count, _) in timings.items()} == {
        "alloc": 3,
        "launch python": 3,
        "extern aten::mm": 3,
        "free": 3,
        "view": 3,
        "alias": 3,
        "return": 3,
    }
    assert all(seconds >= 0 for _, seconds in timings.values())
    call.program.set_timing(False)
    assert call.program.timings() == {}
