"""TorchScript functions met while capturing: capture the Python function they were made from.

`torch.jit.script` and `torch.jit.trace` keep the Python function they compiled (torch sets
`_torchdynamo_inline` on the result, for compilers). Calling the TorchScript function itself
with tracing tensors is wrong on a GPU: after its profiling runs, TorchScript's fuser launches
a kernel of its own on the tensors' raw data pointers, which tracing tensors do not have (an
illegal memory access that kills the CUDA context; DeBERTa-v2's relative-position helpers are
scripted). So capture reads the Python original instead, and breaks the graph at a TorchScript
function that has none (one loaded from a file).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ember.capture.unsupported import Unsupported

ORIGINAL = "_torchdynamo_inline"  # where torch.jit keeps the Python function it compiled


def is_scripted(value: Any) -> bool:
    """True for a TorchScript function (scripted or traced)."""
    return isinstance(value, torch.jit.ScriptFunction)


def scripted_original(value: Any) -> types.FunctionType:
    """The Python function `value` (a TorchScript function) was compiled from."""
    original = getattr(value, ORIGINAL, None)
    if isinstance(original, types.FunctionType):
        return original
    name = getattr(value, "name", None) or getattr(value, "__name__", "?")
    raise Unsupported(
        f"a TorchScript function ({name}) without its Python source",
        "capture cannot trace into TorchScript; it runs eagerly between two graphs. "
        "Script it from Python source in the same process, or call the Python function",
    )
