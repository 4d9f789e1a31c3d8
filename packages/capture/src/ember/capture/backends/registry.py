"""The backend registry: backend names → compilers, filled lazily from installed packages.

A backend is a callable `(graph, example_inputs) -> compiled`, where `compiled` takes the user
inputs as `ember.prims.run(graph, ...)` takes them. Backends come from three places, in order
of precedence: direct registration (`register_backend`), the built-in table (`eager`), and the
`ember.backends` entry-point group of installed distributions. Entry points are listed on the
first query and imported only when their backend is looked up.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, overload

from ember.capture.errors import BackendLoadError, BackendNotFound, BackendRegistrationError
from ember.prims import Graph

Backend: TypeAlias = Callable[[Graph, Sequence[Any]], Callable[..., Any]]

ENTRY_POINT_GROUP = "ember.backends"

# ember's own backend names and the distribution that provides each. Capture never imports
# these packages; the table only lets a lookup miss say what to install.
KNOWN_BACKENDS: dict[str, str] = {
    "eager": "ember-capture",
    "aot_eager": "ember-autodiff",
    "inductor": "ember-inductor",
}

# Backends that ship inside ember-capture. They are also declared as entry points in its
# pyproject; listing them here keeps them usable when that metadata is absent (a source tree
# on sys.path, a vendored copy).
BUILTIN_BACKENDS: dict[str, str] = {
    "eager": "ember.capture.backends.eager:eager",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")

logger = logging.getLogger("ember.capture")


def installed_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    """Every entry point of the `ember.backends` group in the installed distributions."""
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


@dataclass
class _Entry:
    """One backend name: where it comes from and, once loaded, the backend itself."""

    origin: str  # for messages: "registered directly", "built in", "entry point of <dist>"
    entry_point: importlib.metadata.EntryPoint | None = None
    backend: Backend | None = None


class BackendRegistry:
    """A name → backend table. `reset()` forgets registrations and rescans on the next query.

    `discover` lists the entry points to offer; it defaults to the installed distributions'
    `ember.backends` group.
    """

    def __init__(
        self,
        discover: Callable[[], Iterable[importlib.metadata.EntryPoint]] = installed_entry_points,
    ) -> None:
        self._discover = discover
        self._lock = threading.RLock()
        self._registered: dict[str, _Entry] = {}
        self._installed: dict[str, _Entry] | None = None  # None until the first query

    # ---- registration ---------------------------------------------------------------------

    @overload
    def register(self, name: str) -> Callable[[Backend], Backend]: ...

    @overload
    def register(self, name: str, backend: Backend) -> Backend: ...

    def register(
        self, name: str, backend: Backend | None = None
    ) -> Backend | Callable[[Backend], Backend]:
        """Register `backend` under `name`; without `backend`, return a decorator that does.

        A direct registration takes precedence over a built-in or installed backend of the
        same name. Registering a different callable under a name already registered directly
        is an error; registering the same one again is allowed.
        """
        if backend is None:

            def decorator(fn: Backend) -> Backend:
                return self.register(name, fn)

            return decorator
        _check_name(name)
        if not callable(backend):
            raise BackendRegistrationError(
                f"backend {name!r} must be a callable (graph, example_inputs) -> compiled, "
                f"got {type(backend).__name__}"
            )
        with self._lock:
            known = self._registered.get(name)
            if known is not None and known.backend is not backend:
                raise BackendRegistrationError(
                    f"a different backend is already registered as {name!r} "
                    f"({_describe(known.backend)}); pick another name, or call reset() on "
                    "the registry first"
                )
            self._registered[name] = _Entry("registered directly", backend=backend)
        return backend

    # ---- queries --------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Every available backend name, sorted. Imports no backend."""
        with self._lock:
            return sorted({*self._registered, *self._scan()})

    def lookup(self, name: str) -> Backend:
        """The backend called `name`, importing its package on first use.

        Raises BackendNotFound (naming the package to install, for ember's own backends) or
        BackendLoadError (the installed backend failed to import).
        """
        with self._lock:
            entry = self._registered.get(name) or self._scan().get(name)
            if entry is None:
                raise _not_found(name, self.names())
            if entry.backend is None:
                entry.backend = _load(name, entry)
            return entry.backend

    def origin(self, name: str) -> str:
        """Where the backend called `name` comes from, in words (for messages and logs)."""
        with self._lock:
            entry = self._registered.get(name) or self._scan().get(name)
            if entry is None:
                raise _not_found(name, self.names())
            return entry.origin

    def reset(self) -> None:
        """Forget direct registrations and loaded backends; rescan entry points on next use."""
        with self._lock:
            self._registered.clear()
            self._installed = None

    # ---- discovery ------------------------------------------------------------------------

    def _scan(self) -> dict[str, _Entry]:
        if self._installed is None:
            installed: dict[str, _Entry] = {}
            builtins = (
                importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)
                for name, value in BUILTIN_BACKENDS.items()
            )
            for entry_point in builtins:
                installed[entry_point.name] = _Entry("built in", entry_point)
            discovered = sorted(self._discover(), key=lambda ep: (_distribution(ep), ep.name))
            for entry_point in discovered:
                _add_installed(installed, entry_point)
            self._installed = installed
        return self._installed


def _add_installed(
    installed: dict[str, _Entry], entry_point: importlib.metadata.EntryPoint
) -> None:
    origin = f"entry point {entry_point.name} = {entry_point.value} of {_distribution(entry_point)}"
    known = installed.get(entry_point.name)
    if known is None:
        installed[entry_point.name] = _Entry(origin, entry_point)
        return
    assert known.entry_point is not None
    if known.entry_point.value == entry_point.value:
        return  # the same backend declared twice (built in and by metadata, or two installs)
    logger.warning(
        "two installed packages declare the ember backend %r: %s (kept) and %s (ignored); "
        "uninstall one, or register the one you want with ember.capture.register_backend",
        entry_point.name,
        known.origin,
        origin,
    )


def _load(name: str, entry: _Entry) -> Backend:
    assert entry.entry_point is not None
    try:
        backend = entry.entry_point.load()
    except Exception as error:
        raise BackendLoadError(
            f"the ember backend {name!r} ({entry.origin}) failed to import: "
            f"{type(error).__name__}: {error}; reinstall the package that provides it"
        ) from error
    if not callable(backend):
        raise BackendLoadError(
            f"the ember backend {name!r} ({entry.origin}) is a {type(backend).__name__}, not a "
            "callable (graph, example_inputs) -> compiled; the package that provides it is broken"
        )
    logger.debug("loaded backend %r from %s", name, entry.origin)
    return backend


def _not_found(name: str, available: list[str]) -> BackendNotFound:
    listing = ", ".join(available) if available else "none"
    distribution = KNOWN_BACKENDS.get(name)
    if distribution is not None:
        message = (
            f"the ember backend {name!r} is not installed: it comes with the package "
            f"{distribution} (pip install {distribution}). Installed backends: {listing}."
        )
    else:
        close = difflib.get_close_matches(name, [*available, *KNOWN_BACKENDS], n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        message = (
            f"there is no ember backend named {name!r}.{hint} Installed backends: {listing}. "
            f"Register one with ember.capture.register_backend({name!r}), or install a package "
            f"that declares it in the entry-point group {ENTRY_POINT_GROUP!r}."
        )
    return BackendNotFound(message, name=name, available=available, distribution=distribution)


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BackendRegistrationError(
            f"backend names are identifiers such as 'my_backend' (letters, digits, '_', '.', "
            f"'-'); got {name!r}"
        )


def _distribution(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown distribution"


def _describe(backend: object) -> str:
    module = getattr(backend, "__module__", None)
    qualname = getattr(backend, "__qualname__", type(backend).__name__)
    return f"{module}.{qualname}" if module else str(qualname)


# The registry that `ember.compile(backend="...")` and the functions below use.
default_registry = BackendRegistry()


@overload
def register_backend(name: str) -> Callable[[Backend], Backend]: ...


@overload
def register_backend(name: str, backend: Backend) -> Backend: ...


def register_backend(
    name: str, backend: Backend | None = None
) -> Backend | Callable[[Backend], Backend]:
    """Register a backend in the default registry: `@register_backend("name")` or a direct call."""
    if backend is None:
        return default_registry.register(name)
    return default_registry.register(name, backend)


def list_backends() -> list[str]:
    """The names of every backend available in the default registry, sorted."""
    return default_registry.names()


def lookup_backend(name: str) -> Backend:
    """The backend called `name` in the default registry; BackendNotFound if there is none."""
    return default_registry.lookup(name)
