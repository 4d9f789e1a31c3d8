"""Guard-check time of one compiled call: the Python check against the C tensor guards.

    python -m benchmarks.guard_check [--models hf_resnet,hf_gpt2] [--mode inference]
                                     [--batch 1] [--rounds 15] [--calls 200] [--json FILE]

Each model is built at its GPU size (ResNet-50, GPT-2 small: 12 layers) on the CPU, captured
once by ember with a backend that runs the Graph eagerly (no codegen: only the guards
matter), and its cache entry's `check_inputs` is timed both ways, interleaved in rounds in
one process: the generated Python check, and the same check with the tensor guards in C
(EMBER_NATIVE_GUARDS; built on the first run, then loaded from disk). Medians in us a call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.models.huggingface import build_gpt2, build_resnet


def _workload(model: str, mode: str, batch: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    if model == "hf_resnet":
        workload = build_resnet("gpu", mode)
        return workload.module, tuple(t[:batch].contiguous() for t in workload.inputs)
    if model == "hf_gpt2":
        workload = build_gpt2("gpu", mode)
        return workload.module, tuple(t[:batch, :64].contiguous() for t in workload.inputs)
    raise SystemExit(f"unknown model {model!r}: hf_resnet or hf_gpt2")


def _per_call_us(call: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def measure(model: str, mode: str, batch: int, rounds: int, calls: int) -> dict[str, Any]:
    import ember
    from ember.capture.guards.check import is_native_tensor_guard
    from ember.capture.guards.kinds import GuardKind
    from ember.capture.guards.native import NATIVE
    from ember.capture.testing import CompileCounter
    from ember.capture.translate import FUNCTION_KEY

    torch.manual_seed(0)
    module, inputs = _workload(model, mode, batch)
    compiled = ember.compile(module, backend=CompileCounter())
    grad = torch.enable_grad() if mode == "training" else torch.no_grad()
    with grad:
        started = time.perf_counter()
        native_module = NATIVE.wait()
        native_wait = time.perf_counter() - started
        for _ in range(2):  # a classifier's second training step recompiles (config writes)
            compiled(*inputs)
        state = type(compiled).forward._ember_compiled
        arguments = {"self": compiled, "inputs": inputs, FUNCTION_KEY: state.fn}
        check = next(  # the entry a call now runs
            entry.check
            for entry in state.table.entries
            if entry.check.check_inputs(arguments, state.globals) is not None
        )
        row: dict[str, Any] = {
            "model": model,
            "mode": mode,
            "batch": batch,
            "guards": len(check.guards),
            "tensor_guards": sum(g.kind is GuardKind.TENSOR for g in check.guards),
            "native_eligible": sum(is_native_tensor_guard(g) for g in check.guards),
            "native_wait_s": round(native_wait, 3),
            "entries": len(state.table.entries),
            "native": native_module is not None,
            "native_reason": NATIVE.reason,
        }
        if native_module is None or check.python is None:
            return row
        row["c_calls_a_check"] = check.source_text.count("__r = ")
        python_inputs, python_check = check.python
        native_inputs, native_check = check.check_inputs, check.check
        globals_dict = state.globals
        assert python_inputs(arguments, globals_dict) is not None, "the Python check missed"
        assert native_inputs(arguments, globals_dict) is not None, "the C check missed"
        variants = {
            "python_check_inputs": lambda: python_inputs(arguments, globals_dict),
            "native_check_inputs": lambda: native_inputs(arguments, globals_dict),
            "python_check": lambda: python_check(arguments, globals_dict),
            "native_check": lambda: native_check(arguments, globals_dict),
        }
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for call in variants.values():
            _per_call_us(call, calls)  # warm-up
        for index in range(rounds):  # interleaved, the order alternating each round
            names = list(variants) if index % 2 == 0 else list(reversed(variants))
            for name in names:
                samples[name].append(_per_call_us(variants[name], calls))
    for name, values in samples.items():
        row[f"{name}_us"] = round(statistics.median(values), 2)
        row[f"{name}_us_min"] = round(min(values), 2)
    row["speedup_check_inputs"] = round(
        row["python_check_inputs_us"] / row["native_check_inputs_us"], 2
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="hf_resnet,hf_gpt2")
    parser.add_argument("--mode", default="inference", choices=("inference", "training"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    rows = []
    for model in arguments.models.split(","):
        row = measure(model, arguments.mode, arguments.batch, arguments.rounds, arguments.calls)
        row["loadavg"] = os.getloadavg()
        print(json.dumps(row), flush=True)
        rows.append(row)
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
