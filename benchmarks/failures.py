"""What went wrong in a case, in a few words: the class the dashboard groups failures by.

An exception is classed by what it means for the run (a CUDA fault such as an illegal memory
access leaves the process's CUDA context unusable, so its worker must be replaced) and
otherwise by its type; an accuracy failure by whether the values were not finite, wrong, or
only the dropout statistics disagreed.
"""

from __future__ import annotations

import math
from typing import Any

# CUDA errors after which the context is dead ("sticky"): every later call in the process fails
STICKY_CUDA = {
    "an illegal memory access was encountered": "illegal_memory_access",
    "misaligned address": "misaligned_address",
    "device-side assert triggered": "device_assert",
    "unspecified launch failure": "launch_failure",
    "an illegal instruction was encountered": "illegal_instruction",
    "operation not permitted when stream is capturing": "stream_capture",
}


def exception_class(error: BaseException) -> str:
    """`illegal_memory_access`, `out_of_memory`, ... or the exception's type name."""
    text = str(error)
    for message, name in STICKY_CUDA.items():
        if message in text:
            return name
    if type(error).__name__ == "OutOfMemoryError" or "out of memory" in text.lower():
        return "out_of_memory"
    return type(error).__name__


def kills_context(error_class: str) -> bool:
    """Whether a worker that saw this must exit before it runs another case."""
    return error_class in STICKY_CUDA.values()


def accuracy_class(record: dict[str, Any]) -> str | None:
    """`non_finite`, `accuracy` or `dropout_statistics` for a case that ran but failed."""
    error = record.get("accuracy_error")
    if record.get("accuracy_passed") is False:
        if isinstance(error, float) and not math.isfinite(error):
            return "non_finite"
        return "accuracy"
    if record.get("dropout_passed") is False:
        return "dropout_statistics"
    return None
