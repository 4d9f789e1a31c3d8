"""ember's developer and CI sessions: lint, tests, isolation, build, demo.

`nox -s lint isolation tests` is what CI runs (.ci/run); `nox -s demo` runs the quick start.
Each session installs what it needs into its own venv, so a fresh machine with Python 3.11+
and nox is enough. Virtual environments are reused locally and rebuilt under CI=true.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
LAYERS = ("prims", "capture", "autodiff", "inductor", "runtime")
# The CPU build; the pinned version keeps pip from fetching a multi-GB CUDA build.
TORCH = "torch==2.13.0"
TEST_DEPS = (
    "pytest>=8",
    "pytest-xdist",
    "hypothesis",
    "jsonschema",
    "expecttest",  # torch.testing's OpInfo database imports it
    "triton==3.6.0",  # Triton kernels run under TRITON_INTERPRET=1 and compile to PTX, no GPU
    "numpy",
    "transformers",
    "import-linter",
)
LINT_DEPS = (
    "ruff==0.17.6",
    "import-linter",
    "mypy==2.4.1",
    "pytest>=8",
    "hypothesis",
    "jsonschema",
    "nox",
)
TEST_BACKEND = ROOT / "packages" / "capture" / "tests" / "fixtures" / "ember_test_backend"
ISOLATED_LAYERS = ("prims", "capture")
# The vendor example: a backend built on ember-prims and ember-capture alone.
VENDOR_EXAMPLE = ROOT / "examples" / "numpy_backend"
ABSENT_IN_ISOLATION = ("ember.autodiff", "ember.inductor", "ember.runtime")
# Browsers the compile report test renders with (integration-tests/test_compile_report.py).
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")

MYPY_PATHS = (
    *(f"packages/{layer}/src" for layer in LAYERS),
    "src/ember/__init__.py",
    "scripts",
    "noxfile.py",
    "conftest.py",
)
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "no" if CI else "yes"
nox.options.sessions = ["lint", "isolation", "tests"]
nox.options.error_on_external_run = True


def _test_dirs() -> list[str]:
    return [
        f"packages/{layer}/tests"
        for layer in LAYERS
        if (ROOT / "packages" / layer / "tests").is_dir()
    ]


def _test_backend() -> list[str]:
    """The entry-point test backend distribution, once capture's tests ship it."""
    return [str(TEST_BACKEND)] if (TEST_BACKEND / "pyproject.toml").is_file() else []


def _install_editable(session: nox.Session, *extra: str, umbrella: bool = True) -> None:
    """torch, the five layers and the umbrella (editable) in one pip command, so the local
    distributions satisfy each other's requirements instead of being looked up on an index."""
    editables = [arg for layer in LAYERS for arg in ("-e", f"packages/{layer}")]
    session.install(TORCH, *editables, *(["-e", "."] if umbrella else []), *extra)


def _ensure_chromium(session: nox.Session) -> None:
    """The compile report's test renders its page in headless Chromium: install Debian's
    `chromium` package when no browser is on PATH (about 30 s as root with apt-get; without
    root the test skips locally and fails under CI)."""
    if any(shutil.which(name) for name in BROWSERS):
        return
    apt = shutil.which("apt-get")
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        session.warn("no Chromium and no root apt-get: the compile report test cannot render")
        return
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    install = (apt, "install", "-y", "-qq", "--no-install-recommends", "chromium")
    try:
        session.run(*install, external=True, env=env, silent=True)
    except nox.command.CommandFailed:  # stale or missing package lists
        session.run(apt, "update", "-qq", external=True, env=env, silent=True)
        session.run(*install, external=True, env=env, silent=True)


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests, integration-tests/ and the benchmark runner's tests, against
    editable installs."""
    _install_editable(session, *TEST_DEPS, *_test_backend())
    _ensure_chromium(session)
    session.run(
        "pytest", "-n", "2", *_test_dirs(), "integration-tests", "benchmarks/tests",
        *session.posargs,
    )  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, ruff format, import-linter (layer DAG), mypy, and the torch-compiler import ban.
    Runs every check and reports all that failed."""
    # Without the umbrella: import-linter (grimp) needs `ember` to stay a namespace package.
    _install_editable(session, *LINT_DEPS, umbrella=False)
    # A cache of its own: one written by another environment (other stubs) can crash mypy.
    mypy_cache = str(Path(session.virtualenv.location) / "mypy_cache")
    checks = [
        ("ruff check", ["ruff", "check", "."]),
        ("ruff format", ["ruff", "format", "--check", "."]),
        ("import-linter", ["lint-imports"]),
        ("forbidden torch imports", ["python", "scripts/check_forbidden_imports.py"]),
        ("mypy", ["mypy", *MYPY_PATHS, "--cache-dir", mypy_cache]),
    ]
    failed = []
    for name, command in checks:
        session.log(f"--- {name}")
        try:
            session.run(*command)
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"lint failed: {', '.join(failed)}")


@nox.session
def isolation(session: nox.Session) -> None:
    """Only the ember-prims and ember-capture wheels (built by hatch), and the numpy_prims vendor
    example, in a venv without the other layers: they import, and their tests pass against the
    installed wheels."""
    session.install("hatch")
    wheel_dir = Path(session.create_tmp()).resolve() / "wheels"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    projects = [ROOT / "packages" / layer for layer in ISOLATED_LAYERS] + [VENDOR_EXAMPLE]
    for project in projects:
        with session.chdir(project):
            session.run("hatch", "build", "-t", "wheel", str(wheel_dir))
    wheels = sorted(str(path) for path in wheel_dir.glob("*.whl"))
    if len(wheels) != len(projects):
        session.error(f"expected {len(projects)} wheels in {wheel_dir}, found {wheels}")
    test_deps = [dep for dep in TEST_DEPS if dep not in ("transformers", "import-linter")]
    session.install(TORCH, *wheels, *test_deps, *_test_backend())
    # A reused venv may hold an older build of the same version: replace ours, drop the rest.
    session.install("--force-reinstall", "--no-deps", *wheels, *_test_backend())
    session.run(
        "python", "-m", "pip", "uninstall", "-y", "-q",
        "ember", "ember-autodiff", "ember-inductor", "ember-runtime",
    )  # fmt: skip
    check = (
        "import importlib.util, sys\n"
        "import ember.prims, ember.capture\n"
        "for module in (ember.prims, ember.capture):\n"
        "    assert 'site-packages' in module.__file__, module.__file__\n"
        f"present = [m for m in {ABSENT_IN_ISOLATION!r} if importlib.util.find_spec(m)]\n"
        "assert not present, f'importable but must not be: {present}'\n"
        "print('isolation: ember.prims and ember.capture import from', ember.prims.__file__)\n"
    )
    with session.chdir(Path(session.create_tmp()).resolve()):  # away from the source tree
        session.run("python", "-c", check)
    session.run(
        "pytest", "-n", "2", "-p", "no:cacheprovider",
        *[f"packages/{layer}/tests" for layer in ISOLATED_LAYERS],
        str(VENDOR_EXAMPLE.relative_to(ROOT) / "tests"), *session.posargs,
        env={"EMBER_TEST_INSTALLED": "1"},
    )  # fmt: skip


@nox.session
def build(session: nox.Session) -> None:
    """Wheels of the five layers and the umbrella into dist/."""
    session.install("hatch")
    dist = ROOT / "dist"
    for old in dist.glob("ember*.whl"):
        old.unlink()
    for project in [*(ROOT / "packages" / layer for layer in LAYERS), ROOT]:
        with session.chdir(project):
            session.run("hatch", "build", "-t", "wheel", str(dist))
    session.log("built: " + ", ".join(sorted(path.name for path in dist.glob("ember*.whl"))))


@nox.session
def demo(session: nox.Session) -> None:
    """The quick start: trace a real model to a Graph, print, save, load, run, compare."""
    script = ROOT / "examples" / "quickstart.py"
    if not script.is_file():
        session.error(f"{script.relative_to(ROOT)} is missing: the demo has nothing to run")
    _install_editable(session, "transformers")
    session.run("python", str(script), *session.posargs)


if __name__ == "__main__":
    sys.exit("run the sessions with nox, e.g. `nox -s demo`")
