"""The ember-prims exception family.

Every error names what went wrong, where (a node, a field path or the user's source line)
and what the user can do about it.
"""

from __future__ import annotations


class PrimsError(Exception):
    """Base class of every error raised by ember-prims."""


class GraphFormatError(PrimsError):
    """Serialized Graph bytes or documents are malformed; the message says what and where."""


class GraphVerificationError(PrimsError):
    """A Graph breaks one of the format's rules (references, order, specs, schemas)."""


class TraceError(PrimsError):
    """The tracer met something it cannot record; the message names the user's line."""


class InterpreterError(PrimsError):
    """Running a Graph failed; the message names the node and its user source line."""
