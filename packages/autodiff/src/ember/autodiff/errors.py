"""The ember-autodiff exception family.

Every error says what went wrong, where (a node, and the user's source line when known) and
what the user can do about it.
"""

from __future__ import annotations


class AutodiffError(Exception):
    """Base class of every error raised by ember-autodiff."""


class AliasAnalysisError(AutodiffError):
    """A Graph cannot be analyzed for aliasing (a malformed reference, an unknown op)."""


class FunctionalizationError(AutodiffError):
    """A Graph cannot be made pure: a write ember-autodiff cannot express without mutation."""


class PartitionError(AutodiffError):
    """A joint Graph cannot be split into forward and backward Graphs."""


class DoubleBackwardError(AutodiffError):
    """Backward through the backward of an ember-compiled graph, which is not supported."""
