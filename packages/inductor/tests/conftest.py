"""Fixtures shared by inductor's tests.

`build_for_sm90`: Triton compiles to PTX without a GPU, so a test module's cases can be
generated for CUDA and built for an H100 (sm_90) here. The build runs in a fresh process with
the interpreter off (the repository's conftest turns `TRITON_INTERPRET` on for this one) and
no visible GPU; it answers, per case, the PTX of each generated kernel (of a template's
kernel, for a matmul or convolution choice) for the test to check.

`interpreted_case`: a case of a test module's `CASES` compiled through the Triton backend
and run on the CPU by Triton's interpreter.

`output_code`: the generated code (kernels module, wrapper) of every Graph compiled during
the test, as the `output_code` log topic shows it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

_BUILD = """
import importlib.util, json, sys
import torch
import ember.prims as prims
from ember.inductor.codegen.triton import TritonBackend
from ember.inductor.config import InductorConfig
from ember.inductor.pipeline import generate
from ember.runtime import ArtifactCache
from triton.backends.compiler import GPUTarget

path, cache_dir, config_name, dtype, *names = sys.argv[1:]
spec = importlib.util.spec_from_file_location("sm90_cases", path)
cases = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cases)
backend = TritonBackend()
cache = ArtifactCache(cache_dir)
target = GPUTarget("cuda", 90, 32)
report = {}
for name in names:
    fn, make_inputs = cases.CASES[name]
    inputs = make_inputs()
    if dtype != "-":
        inputs = tuple(t.to(getattr(torch, dtype)) for t in inputs)
    config = getattr(cases, config_name)() if config_name != "-" else InductorConfig()
    artifact = generate(prims.trace(fn, *inputs), backend, config, torch.device("cuda"))
    kernels = backend.load(artifact["module"], cache)
    report[name] = [
        {
            "template": hasattr(kernel, "template"),
            "ptx": [c.asm["ptx"] for c in getattr(kernel, "template", kernel).precompile(target)],
        }
        for kernel in kernels.values()
    ]
print(json.dumps(report))
"""

Build = Callable[..., dict[str, list[dict[str, Any]]]]


@pytest.fixture
def build_for_sm90(tmp_path: Path) -> Build:
    """`build(test_file, names, config="_config", dtype="bfloat16")`: the cases `names` of the
    module at `test_file` (its `CASES`: name -> (function, make_inputs); `config` names its
    InductorConfig factory, default `InductorConfig()`; `dtype` casts the inputs) built for
    sm_90; returns {name: [{"template": bool, "ptx": [text, ...]}, ...]}."""

    def build(
        test_file: str, names: Sequence[str], config: str = "-", dtype: str = "-"
    ) -> dict[str, list[dict[str, Any]]]:
        environment = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
        command = [sys.executable, "-c", _BUILD, test_file, str(tmp_path), config, dtype]
        result = subprocess.run(
            [*command, *names], capture_output=True, text=True, env=environment, timeout=600
        )
        assert result.returncode == 0, result.stderr[-4000:]
        report: dict[str, list[dict[str, Any]]] = json.loads(result.stdout.strip().splitlines()[-1])
        assert sorted(report) == sorted(names)
        return report

    return build


Interpreted = Callable[[Callable[..., Any], Callable[[], Sequence[Any]]], tuple[list[Any], Any]]


@pytest.fixture
def interpreted_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Interpreted:
    """`run(fn, make_inputs)`: `fn` traced on `make_inputs()`, compiled through the Triton
    backend (kernels run by Triton's interpreter), called on those inputs; returns (the
    compiled outputs as a list, the inputs)."""
    import ember.prims as prims
    from ember.inductor.codegen.triton import TritonBackend
    from ember.inductor.pipeline import compile_graph
    from ember.runtime import ArtifactCache

    monkeypatch.setenv("TRITON_INTERPRET", "1")

    def run(
        fn: Callable[..., Any], make_inputs: Callable[[], Sequence[Any]]
    ) -> tuple[list[Any], Any]:
        inputs = make_inputs()
        graph = prims.trace(fn, *inputs)
        backend = TritonBackend()
        compiled = compile_graph(graph, inputs, backend=backend, cache=ArtifactCache(tmp_path))
        return list(compiled(*inputs)), inputs

    return run


@dataclasses.dataclass
class OutputCode:
    """What the `output_code` log topic showed: per compiled Graph, its kernels module and
    its wrapper, in compile order."""

    kernels: list[str] = dataclasses.field(default_factory=list)
    wrappers: list[str] = dataclasses.field(default_factory=list)


class _OutputCodeHandler(logging.Handler):
    def __init__(self, captured: OutputCode) -> None:
        super().__init__()
        self.captured = captured

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if ": kernels\n" in text:
            self.captured.kernels.append(text.split(": kernels\n", 1)[1].split("\nwrapper\n")[0])
        if "\nwrapper\n" in text:
            self.captured.wrappers.append(text.split("\nwrapper\n", 1)[1])


@pytest.fixture
def output_code() -> Iterator[OutputCode]:
    """The generated code of the Graphs compiled during the test (the topic on for the test)."""
    import torch

    import ember
    from ember.prims.logs import configure_logging

    captured = OutputCode()
    handler = _OutputCodeHandler(captured)
    logger = logging.getLogger("ember.inductor.output_code")
    logger.addHandler(handler)
    # capture applies EMBER_LOGS at its first compile in the process: that first, then the
    # topic on for the test's compiles only
    ember.compile(lambda t: t + 1, backend="inductor")(torch.ones(2))
    configure_logging("output_code")
    try:
        yield captured
    finally:
        logger.removeHandler(handler)
        configure_logging()
