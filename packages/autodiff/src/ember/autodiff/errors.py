"""The ember-autodiff exception family.

Every error says what went wrong, where (a node, and the user's source line when known) and
what the user can do about it.
"""

from __future__ import annotations


class AutodiffError(Exception):
    """Base class of every error raised by ember-autodiff."""


class AliasAnalysisError(AutodiffError):
    """A Graph cannot be analyzed for aliasing (a malformed reference, an unknown op)."""
