"""`load_triton_module`: the source lands in the ember cache as a real file, loads once per
process, is rewritten when damaged, and imports again in another process (compile workers)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

from ember.runtime import ArtifactCache, load_triton_module  # noqa: E402

from .kernels import POINTWISE  # noqa: E402


def test_source_is_cached_as_a_file_and_loaded_once(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    module = load_triton_module(POINTWISE, cache)
    digest = hashlib.sha256(POINTWISE.encode()).hexdigest()
    path = tmp_path / "triton" / f"{digest}.py"
    assert Path(str(module.__file__)) == path
    assert path.read_text() == POINTWISE
    assert module.add_kernel.arg_names == ["in_ptr0", "in_ptr1", "out_ptr0", "xnumel", "XBLOCK"]
    assert load_triton_module(POINTWISE, cache) is module
    assert [p.name for p in (tmp_path / "triton").iterdir() if p.is_file()] == [path.name]


def test_damaged_file_is_rewritten(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    source = POINTWISE + "\n# damaged-file test\n"
    path = Path(str(load_triton_module(source, cache).__file__))
    path.write_text("garbage")
    load_triton_module(source, ArtifactCache(tmp_path))
    assert path.read_text() == source


def test_another_process_imports_the_same_file(tmp_path: Path) -> None:
    module = load_triton_module(POINTWISE + "\n# subprocess test\n", ArtifactCache(tmp_path))
    script = textwrap.dedent(
        f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("kernels", {str(module.__file__)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(module.add_kernel.arg_names, type(module.add_kernel).__name__)
        """
    )
    environment = {**os.environ, "TRITON_INTERPRET": "0"}  # a compile worker's environment
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [*str(module.add_kernel.arg_names).split(), "JITFunction"]
