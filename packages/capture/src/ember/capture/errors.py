"""The ember-capture exception family.

Every error says what went wrong in the user's terms and what the user can do about it
(install a package, register a backend, change a call).
"""

from __future__ import annotations


class CaptureError(Exception):
    """Base class of every error raised by ember-capture."""


class BackendNotFound(CaptureError, LookupError):
    """No backend of the requested name is registered or installed.

    `name` is the name asked for, `available` the installed names, and `distribution` the
    package that provides `name` when it is one of ember's own backends (else None).
    """

    def __init__(
        self, message: str, *, name: str, available: list[str], distribution: str | None
    ) -> None:
        super().__init__(message)
        self.name = name
        self.available = available
        self.distribution = distribution


class BackendLoadError(CaptureError):
    """An installed backend's entry point failed to import or is not callable."""


class BackendRegistrationError(CaptureError):
    """A backend registration conflicts with another or is malformed."""


class AccuracyError(CaptureError):
    """A backend's result differs from eager on a compiled graph (EMBER_ACCURACY_CHECK=1).

    The message names the graph's user lines, how the outputs differ and, under EMBER_REPRO,
    the repro directory; `repro` is that directory or None.
    """

    def __init__(self, message: str, *, repro: str | None = None) -> None:
        super().__init__(message)
        self.repro = repro
