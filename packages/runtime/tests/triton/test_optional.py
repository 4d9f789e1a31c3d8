"""triton is optional: ember.runtime imports without it, and asking for Triton kernels then
says what to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_runtime_imports_without_triton() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["triton"] = None  # as if triton were not installed
        import ember.runtime
        from ember.runtime import ArtifactCache, TritonUnavailableError, load_triton_module
        try:
            load_triton_module("import triton\\n", ArtifactCache("unused"))
        except TritonUnavailableError as error:
            print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "pip install 'ember-runtime[gpu]'" in result.stdout
