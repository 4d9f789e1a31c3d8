"""Graph breaks: every catalogue entry has a program that triggers it; without fullgraph the
program still matches eager and explain() names the break, with fullgraph=True it raises
Unsupported naming the user's line; explain() on PyTorch's FAQ example; the graph_breaks
log; resume functions keep the user's names and lines."""

from __future__ import annotations

import logging
import operator
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ember.capture import CATALOGUE, Unsupported, explain
from ember.capture.compile import compile as ember_compile
from ember.capture.compile import disable
from ember.capture.explain import collecting
from ember.capture.resume import resume_function
from ember.capture.testing import CompileCounter


def prints(x):
    y = x + 1
    print("hello")
    return y


def branches_on_tensor(x):
    if x.sum() > 0:
        return x
    return -x


def reads_item(x):
    return x * x.sum().item()


@disable
def _opaque(x):
    return x + 1


def calls_disabled(x):
    return _opaque(x) * 2


def calls_opaque_object(fn, x):
    return fn(x) + 1


class _Accumulator:
    # __slots__ keep ember from modelling the object (plain classes are built as Variables).
    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


def constructs_object(x):
    y = x + 1
    acc = _Accumulator()
    return y * 2, acc.total


def imports(x):
    import colorsys

    return x * colorsys.ONE_THIRD


def seeds(x):
    torch.manual_seed(0)
    return x + 1


def raises(x, flag):
    y = x + 1
    if flag:
        raise ValueError("boom")
    return y


class _Hooked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.linear.register_forward_hook(lambda module, inputs, output: output * 2)

    def forward(self, x):
        return self.linear(x) + 1


_HOOKED = _Hooked()


def calls_hooked_module(x):
    return _HOOKED(x)


DELETED = 1


def deletes_global(x):
    global DELETED
    del DELETED
    return x + 1


def reads_grad(x):
    return x + 1 if x.grad is None else x


def matches(x, pair):
    match pair:
        case (a, b):
            return x * a + b
    return x


# catalogue id -> (program, arguments, the id fullgraph=True reports, restore after a run)
TRIGGERS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]], str]] = {
    "print": (prints, lambda: (torch.ones(2),), "print"),
    "tensor-branch": (branches_on_tensor, lambda: (torch.ones(2),), "tensor-branch"),
    "tensor-to-python": (reads_item, lambda: (torch.ones(2),), "tensor-to-python"),
    "disabled-function": (calls_disabled, lambda: (torch.ones(2),), "disabled-function"),
    "opaque-call": (
        calls_opaque_object,
        lambda: (operator.methodcaller("sin"), torch.ones(2)),
        "opaque-call",
    ),
    "import": (imports, lambda: (torch.ones(2),), "import"),
    "object-construction": (constructs_object, lambda: (torch.ones(2),), "object-construction"),
    "global-state": (seeds, lambda: (torch.ones(2),), "global-state"),
    "module-hooks": (calls_hooked_module, lambda: (torch.ones(2),), "module-hooks"),
    "unsupported-instruction": (
        deletes_global,
        lambda: (torch.ones(2),),
        "unsupported-instruction",
    ),
    "unsupported-construct": (reads_grad, lambda: (torch.ones(2),), "unsupported-construct"),
    "cannot-resume": (matches, lambda: (torch.ones(2), (2, 3)), "unsupported-instruction"),
}


def _fresh() -> None:
    global DELETED
    DELETED = 1
    sys.modules.pop("colorsys", None)


def test_every_catalogue_entry_has_a_trigger() -> None:
    assert set(TRIGGERS) | {"raise"} == set(CATALOGUE)
    for entry in CATALOGUE.values():
        assert entry.template and entry.hint


@pytest.mark.parametrize("kind", sorted(TRIGGERS))
def test_break_matches_eager_and_is_explained(kind: str) -> None:
    fn, inputs, _ = TRIGGERS[kind]
    _fresh()
    expected = fn(*inputs())
    _fresh()
    result = explain(fn)(*inputs())
    torch.testing.assert_close(result.output, expected)
    assert kind in [b.id for b in result.breaks], [str(b) for b in result.breaks]
    graph_break = next(b for b in result.breaks if b.id == kind)
    assert graph_break.location is not None
    assert graph_break.location.short().startswith("test_breaks.py:")
    assert f"[{kind}]" in str(graph_break)


@pytest.mark.parametrize("kind", sorted(TRIGGERS))
def test_fullgraph_raises_at_the_first_break(kind: str) -> None:
    fn, inputs, reported = TRIGGERS[kind]
    _fresh()
    compiled = ember_compile(fn, backend=CompileCounter(), fullgraph=True)
    with pytest.raises(Unsupported) as info:
        compiled(*inputs())
    assert info.value.kind == reported
    message = str(info.value)
    assert "test_breaks.py:" in message
    assert "ember.compile does not support" in message
    assert CATALOGUE[reported].hint.split(";")[0][:20] in message or info.value.hint in message


def test_raise_breaks_and_raises_for_real() -> None:
    compiled = ember_compile(raises, backend=CompileCounter())
    torch.testing.assert_close(compiled(torch.ones(2), False), torch.full((2,), 2.0))
    with collecting() as seen, pytest.raises(ValueError, match="boom"):
        compiled(torch.ones(2), True)
    assert [b.id for b in seen.breaks] == ["raise"]
    strict = ember_compile(raises, backend=CompileCounter(), fullgraph=True)
    with pytest.raises(Unsupported) as info:
        strict(torch.ones(2), True)
    assert info.value.kind == "raise"


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_explain_faq_toy_example() -> None:
    a, b = torch.randn(10), torch.randn(10)
    result = explain(toy_example)(a, b)
    torch.testing.assert_close(result.output, toy_example(a, b))
    assert result.graph_count == 3
    assert result.break_count == 2
    lines = toy_example.__code__.co_firstlineno
    assert [b.location.line - lines for b in result.breaks if b.location] == [2, 3]
    assert [b.id for b in result.breaks] == ["print", "tensor-branch"]
    assert len(result.ops_per_graph) == 3 and all(n > 0 for n in result.ops_per_graph)
    assert result.guards
    text = str(result)
    assert text.startswith("3 graph(s), 2 graph break(s)")
    assert 'print("woo")' in text and "if b.sum() < 0:" in text
    assert len(text.splitlines()) < 12


def test_graph_breaks_log_one_line_per_break() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("ember.capture.graph_breaks")
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        compiled = ember_compile(toy_example, backend=CompileCounter())
        compiled(torch.ones(3), -torch.ones(3))
        compiled(torch.ones(3), -torch.ones(3))  # cached: no new breaks, no new lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [record.getMessage() for record in records]
    assert len(lines) == 2
    assert all("\n" not in line for line in lines)
    assert "test_breaks.py:" in lines[0] and "print()" in lines[0]
    assert "tensor's value" in lines[1]


def test_resume_function_keeps_the_users_name_and_lines() -> None:
    def user_function(x):
        y = x + 1
        print("break here")
        z = y * 2
        raise RuntimeError(f"failed with {z.shape}")

    # Resume after `print("break here")` and its POP_TOP, with y live.
    from ember.capture.bytecode.frame import decode

    steps = decode(user_function.__code__)
    after = next(i for i, s in enumerate(steps) if s.name == "POP_TOP") + 1
    line = user_function.__code__.co_firstlineno + 2
    resumed = resume_function(user_function, after, [], ["y"], line)
    assert resumed.__name__ == f"resume_in_user_function_at_{line}"
    with pytest.raises(RuntimeError) as info:
        resumed(torch.ones(2))
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert last.name == resumed.__name__
    assert last.lineno == user_function.__code__.co_firstlineno + 4
    assert last.line is not None and "raise RuntimeError" in last.line


def test_docs_list_every_catalogue_entry() -> None:
    from pathlib import Path

    docs = Path(__file__).parents[3] / "docs" / "graph-breaks.md"
    if not docs.exists():
        pytest.skip("the repository docs are not next to this package")
    text = docs.read_text()
    for entry in CATALOGUE.values():
        assert f"| `{entry.id}` | {entry.template} |" in text
        assert entry.hint in text


@disable
def _fails(y):
    raise RuntimeError("inside the block")


def raises_inside_resumed_no_grad(x):
    with torch.no_grad():
        print("before")
        y = x * 2
        _fails(y)
    return y


def raises_past_a_handler(x):
    y = x + 1
    try:
        int("not a number")
    except KeyError:
        return x
    return y


def test_exception_in_a_resumed_block_runs_its_cleanup() -> None:
    compiled = ember_compile(raises_inside_resumed_no_grad, backend=CompileCounter())
    for _ in range(2):
        with pytest.raises(RuntimeError, match="inside the block"):
            compiled(torch.ones(2, requires_grad=True))
        assert torch.is_grad_enabled()


def test_what_a_break_raises_reaches_the_users_handlers() -> None:
    compiled = ember_compile(raises_past_a_handler, backend=CompileCounter())
    with pytest.raises(ValueError, match="not a number"):
        compiled(torch.ones(2))
    torch.testing.assert_close(
        ember_compile(toy_example, backend=CompileCounter())(torch.ones(2), torch.ones(2)),
        toy_example(torch.ones(2), torch.ones(2)),
    )


class _ReadsParameterDtype(nn.Module):
    """LayoutLM's pattern: `mask.to(dtype=self.dtype)`, where `self.dtype` breaks the graph
    while `mask.to` (a method of a tensor the graph computed) waits on the stack."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(ids.shape).unsqueeze(1)
        mask = mask.to(dtype=self.dtype)
        return (1.0 - mask) * 3


def test_a_tensor_method_kept_across_a_break_is_the_computed_tensors() -> None:
    """A tensor's bound method rebuilt after a break must belong to the tensor the graph
    computed: the tracing tensor's own method handed that memory-less tensor to the resumed
    code (its kernels then read a bad pointer: a segfault on CPU, an illegal memory access on
    CUDA)."""
    seen: list[torch.Tensor] = []

    def backend(graph: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        run = CompileCounter()(graph, example_inputs)

        def call(*inputs: Any) -> Any:
            seen.extend(i for i in inputs if isinstance(i, torch.Tensor))
            return run(*inputs)

        return call

    module = _ReadsParameterDtype()
    ids = torch.zeros(2, 3, dtype=torch.long)
    result = ember_compile(module, backend=backend)(ids)
    torch.testing.assert_close(result, module(ids))
    assert seen and all(type(t) is torch.Tensor for t in seen)
