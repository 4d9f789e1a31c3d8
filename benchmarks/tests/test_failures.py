"""Failure classes: CUDA faults that kill the context are told apart from ordinary errors."""

from __future__ import annotations

import math

import torch

from benchmarks.failures import accuracy_class, exception_class, kills_context


def test_illegal_memory_access_kills_the_context() -> None:
    error = RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel ...")
    assert exception_class(error) == "illegal_memory_access"
    assert kills_context("illegal_memory_access")


def test_out_of_memory_and_other_errors_do_not() -> None:
    assert exception_class(torch.OutOfMemoryError("CUDA out of memory.")) == "out_of_memory"
    assert exception_class(ValueError("bad")) == "ValueError"
    assert not kills_context("out_of_memory")
    assert not kills_context("ValueError")


def test_accuracy_classes() -> None:
    assert accuracy_class({"accuracy_passed": True, "dropout_passed": True}) is None
    assert accuracy_class({"accuracy_passed": False, "accuracy_error": math.nan}) == "non_finite"
    assert accuracy_class({"accuracy_passed": False, "accuracy_error": 0.5}) == "accuracy"
    assert accuracy_class({"accuracy_passed": True, "dropout_passed": False}) == (
        "dropout_statistics"
    )
