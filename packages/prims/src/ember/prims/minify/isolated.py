"""`run_isolated`: run a repro script in a fresh process where some ember layers are absent.

A meta-path finder placed first on `sys.meta_path` refuses to import the named packages, as
if their distributions were not installed, and makes `ember` the layers' namespace package
(the umbrella distribution, which imports every layer, counts as not installed); the script
runs as `__main__`. Tests use it to show
a repro needs only the layers its backend imports; users can use it to check a repro before
sending it to a vendor that installs fewer layers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ember.prims.logs import LAYERS

_GUARD = """
import importlib.machinery, os, runpy, sys
BLOCKED = {blocked!r}

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name == "ember":  # the layers' namespace package, without the umbrella's __init__
            portions = [
                os.path.join(entry, "ember") for entry in sys.path
                if os.path.isdir(os.path.join(entry or ".", "ember"))
                and not os.path.exists(os.path.join(entry or ".", "ember", "__init__.py"))
            ]
            spec = importlib.machinery.ModuleSpec("ember", None, is_package=True)
            spec.submodule_search_locations = portions
            return spec
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed here)", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.argv = [{script!r}, *{arguments!r}]
runpy.run_path({script!r}, run_name="__main__")
"""


def blocked_layers(needs: Sequence[str]) -> list[str]:
    """The ember layer packages not in `needs` (`["ember.prims"]` blocks the other four)."""
    return [f"ember.{layer}" for layer in LAYERS if f"ember.{layer}" not in needs]


def run_isolated(
    script: str | Path,
    blocked: Sequence[str],
    *,
    arguments: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Run `script` with `python` in a fresh process that cannot import `blocked` packages."""
    code = _GUARD.format(blocked=list(blocked), script=str(script), arguments=list(arguments))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=str(Path(script).parent),
        check=False,
    )
