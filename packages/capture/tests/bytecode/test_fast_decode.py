"""`fast_decode` gives exactly the Steps the `bytecode` library gives, on every code object of
a corpus of modules (generators, coroutines, try blocks, closures, long functions whose
jumps need EXTENDED_ARG, comprehensions), so capture interprets the same instructions."""

from __future__ import annotations

import dis
import importlib
import types
from typing import Any

import pytest
from bytecode import Bytecode, Instr, Label

from ember.capture.bytecode import fast_decode
from ember.capture.bytecode.frame import decode, label_indexes

pytestmark = pytest.mark.skipif(not fast_decode.SUPPORTED, reason="3.11's layout only")

MODULES = (
    "argparse", "asyncio.tasks", "dataclasses", "inspect", "json.decoder", "typing",
    "torch.nn.functional", "torch.nn.modules.module", "torch._tensor",
    "ember.capture.bytecode.frame", "ember.prims.serialize.decode",
    "transformers.models.gpt2.modeling_gpt2", "transformers.modeling_utils",
)  # fmt: skip


def _reference(code: types.CodeType) -> list[tuple[str, Any, int | None]]:
    items = list(Bytecode.from_code(code))
    labels = label_indexes(items)
    return [
        (item.name, labels[item.arg] if isinstance(item.arg, Label) else item.arg, item.lineno)
        for item in items
        if isinstance(item, Instr)
    ]


def _codes(source: str, filename: str) -> list[types.CodeType]:
    found: list[types.CodeType] = []
    pending = [compile(source, filename, "exec")]
    while pending:
        code = pending.pop()
        found.append(code)
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


@pytest.mark.parametrize("name", MODULES)
def test_every_code_object_of_a_module_decodes_as_bytecode_does(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")
    assert module.__file__ is not None
    with open(module.__file__, encoding="utf-8") as file:
        codes = _codes(file.read(), module.__file__)
    assert len(codes) > 10
    for code in codes:
        assert fast_decode.steps(code) == _reference(code), code


def test_long_jumps_and_closures() -> None:
    body = "\n".join(f"            x = x + {i} if x > {i} else y" for i in range(400))
    source = (
        "def outer(y):\n    def inner(x):\n        nonlocal y\n"
        f"        while x < 10**9:\n{body}\n            y += 1\n        return x\n    return inner\n"
    )
    codes = _codes(source, "<long>")
    extended = [i for c in codes for i in dis.get_instructions(c) if i.opname == "EXTENDED_ARG"]
    assert extended  # the loop's jumps need EXTENDED_ARG
    for code in codes:
        assert fast_decode.steps(code) == _reference(code)


def test_frame_decode_uses_it() -> None:
    def fn(x: int) -> int:
        return x + 1

    steps = decode(fn.__code__)
    assert [tuple(step) for step in steps] == _reference(fn.__code__)
