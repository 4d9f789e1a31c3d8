"""Building and loading the native wrapper's interpreter (`interpreter.cpp`) as an extension.

The interpreter is compiled once per source, torch version and Python: `g++` against the
headers and libraries of the installed torch (20-40 s), into `<cache root>/native/<key>/`,
and imported from there by every later process. `interpreter_if_ready` (what compiled
graphs ask) never waits for the compiler: it starts the build in a background thread and
answers None until it is done. Two processes that build at once take turns on a lock file;
a failed build is remembered for the process (`NativeBuildError` names the compiler's first
error lines) and its callers keep the Python wrapper.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from types import ModuleType

from ember.runtime.cache.store import default_cache_root
from ember.runtime.errors import EmberRuntimeError

SOURCE = Path(__file__).with_name("interpreter.cpp")
COMPILER = os.environ.get("CXX", "g++")

_lock = threading.Lock()
_loaded: dict[Path, ModuleType | NativeBuildError] = {}
_building: set[Path] = set()  # directories a background thread is building into


class NativeBuildError(EmberRuntimeError, RuntimeError):
    """The native wrapper's interpreter could not be built or imported."""


def interpreter(root: Path | None = None) -> ModuleType:
    """The interpreter extension, built now if it has to be (NativeBuildError if it cannot
    be)."""
    directory = _directory(root)
    with _lock:
        known = _loaded.get(directory)
        if known is None:
            known = _loaded[directory] = _attempt(directory)
    if isinstance(known, NativeBuildError):
        raise known
    return known


def interpreter_if_ready(root: Path | None = None) -> ModuleType | None:
    """The interpreter if it is loaded or on disk; else None, with a build started in a
    background thread (the compiler's 20-40 s are no call's wait). NativeBuildError once a
    build has failed."""
    directory = _directory(root)
    with _lock:
        known = _loaded.get(directory)
        if known is None and directory not in _building:
            if (directory / f"{_module_name(directory)}.so").exists():
                known = _loaded[directory] = _attempt(directory)
            else:
                _building.add(directory)
                threading.Thread(
                    target=_build_in_background,
                    args=(directory,),
                    name="ember-native-wrapper-build",
                    daemon=True,
                ).start()
    if isinstance(known, NativeBuildError):
        raise known
    return known


def _directory(root: Path | None) -> Path:
    return (root or default_cache_root()) / "native" / _key()


def _attempt(directory: Path) -> ModuleType | NativeBuildError:
    try:
        return _load_or_build(directory)
    except NativeBuildError as error:
        return error


def _build_in_background(directory: Path) -> None:
    known = _attempt(directory)
    with _lock:
        _loaded.setdefault(directory, known)
        _building.discard(directory)


def _key() -> str:
    import torch

    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(f"{torch.__version__}|{sys.version}|{COMPILER}|{_flags()}".encode())
    return digest.hexdigest()[:24]


def _module_name(directory: Path) -> str:
    return f"_ember_interpreter_{directory.name}"


def _load_or_build(directory: Path) -> ModuleType:
    name = _module_name(directory)
    library = directory / f"{name}.so"
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it
            if not library.exists():
                _build(name, library)
    spec = importlib.util.spec_from_file_location(
        name, library, loader=importlib.machinery.ExtensionFileLoader(name, str(library))
    )
    if spec is None or spec.loader is None:
        raise NativeBuildError(f"cannot import the native wrapper's interpreter at {library}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise NativeBuildError(
            f"cannot import the native wrapper's interpreter at {library} ({error}); delete "
            "that folder to build it again"
        ) from error
    return module


def _flags() -> list[str]:
    import torch

    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return ["-O2", "-std=c++17", "-shared", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]


def _build(name: str, library: Path) -> None:
    import torch

    root = Path(torch.__file__).parent
    include, lib = root / "include", root / "lib"
    command = [
        COMPILER,
        *_flags(),
        f"-DEMBER_MODULE_NAME={name}",
        f"-I{include}",
        f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE),
        "-o",
        "",  # the temporary output, below
        f"-L{lib}",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
        f"-Wl,-rpath,{lib}",
        "-ldl",
    ]
    handle, temporary = tempfile.mkstemp(dir=library.parent, prefix=".build.", suffix=".so")
    os.close(handle)
    command[command.index("")] = temporary
    try:
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as error:
            raise NativeBuildError(
                f"no C++ compiler: running {COMPILER!r} failed ({error}); install g++ or set CXX"
            ) from error
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if "error" in line][:5]
            raise NativeBuildError(
                "building the native wrapper's interpreter failed:\n" + "\n".join(lines)
            )
        os.replace(temporary, library)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
