"""The lint checks really fail when a layer breaks the rules in DESIGN.md.

Each test copies the sources to a temporary tree, injects one forbidden import, and runs the
real checker on the copy: scripts/check_forbidden_imports.py for PyTorch's compiler modules
and the umbrella, import-linter for the layer DAG.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "scripts" / "check_forbidden_imports.py"
LAYERS = ("prims", "capture", "autodiff", "inductor", "runtime")


def _copy_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "tests", "*.egg-info")
    for layer in LAYERS:
        shutil.copytree(
            ROOT / "packages" / layer / "src", tree / "packages" / layer / "src", ignore=ignore
        )
    shutil.copytree(ROOT / "src", tree / "src", ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _inject(tree: Path, layer: str, line: str, module: str = "__init__.py") -> Path:
    path = tree / "packages" / layer / "src" / "ember" / layer / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    return path


def _check(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKER), str(tree)], capture_output=True, text=True, check=False
    )


def test_checker_passes_on_the_repository() -> None:
    result = _check(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "line",
    [
        "import torch._dynamo",
        "import torch.fx",
        "from torch import fx",
        "from torch._inductor import config",
        "import torch\ncompiled = torch.compile",
        "import importlib\nimportlib.import_module('torch._subclasses')",
    ],
)
def test_checker_fails_on_a_torch_compiler_import(tmp_path: Path, line: str) -> None:
    tree = _copy_tree(tmp_path)
    _inject(tree, "capture", line)
    result = _check(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "packages/capture/src/ember/capture/__init__.py" in result.stdout


def test_checker_allows_an_interop_module(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    interop = tree / "packages" / "prims" / "src" / "ember" / "prims" / "interop.py"
    interop.write_text('"""Graph <-> torch.fx."""\nimport torch.fx\n', encoding="utf-8")
    assert _check(tree).returncode == 0


def test_checker_fails_when_a_layer_imports_the_umbrella(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    _inject(tree, "runtime", "from ember import trace")
    result = _check(tree)
    assert result.returncode == 1 and "umbrella" in result.stdout


def test_import_linter_fails_on_a_layer_cycle(tmp_path: Path) -> None:
    pytest.importorskip("importlinter", reason="import-linter is not installed here")
    tree = _copy_tree(tmp_path)
    _inject(tree, "capture", "import ember.inductor")
    # Only the copied tree may provide `ember`: drop the editable installs' source paths (the
    # umbrella's regular package would also stop grimp from seeing the namespace layers).
    editable_sources = (str(ROOT / "src"), str(ROOT / "packages"))
    script = (
        "import sys\n"
        f"sys.path[:] = [p for p in sys.path if not p.startswith({editable_sources!r})]\n"
        f"sys.path[:0] = {[str(tree / 'packages' / layer / 'src') for layer in LAYERS]!r}\n"
        "from importlinter.cli import lint_imports_command\n"
        "lint_imports_command(['--config', 'pyproject.toml', '--no-cache'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tree, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ember.capture is not allowed to import ember.inductor" in result.stdout
