"""ember-inductor's exception family."""

from __future__ import annotations


class InductorError(Exception):
    """Base of every error ember-inductor raises."""


class CompileError(InductorError):
    """Generated code did not compile, or no compiler is available."""


class LoweringError(InductorError):
    """A Graph could not be lowered; the message names the node and the user's line."""


class DeviceMismatchError(InductorError, RuntimeError):
    """A tensor reached a compiled graph on another device than the one it was compiled for;
    the message names the tensor, the user's line that first reads it, and the fix."""


class OutOfBoundsError(InductorError):
    """A generated kernel would load or store outside a storage (a compiler bug caught before
    the kernel runs); the message names the kernel, the access and the user's lines."""
