"""ember-capture: turns Python programs into ember Graphs and hands them to backends.

Today it holds the backend registry (`register_backend`, `list_backends`, `lookup_backend`,
filled from the `ember.backends` entry-point group) and the built-in `eager` backend;
`compile()` and the bytecode interpreter come next (see the package README).
"""

from ember.capture.backends.eager import eager
from ember.capture.backends.registry import (
    ENTRY_POINT_GROUP,
    KNOWN_BACKENDS,
    Backend,
    BackendRegistry,
    default_registry,
    list_backends,
    lookup_backend,
    register_backend,
)
from ember.capture.errors import (
    BackendLoadError,
    BackendNotFound,
    BackendRegistrationError,
    CaptureError,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "KNOWN_BACKENDS",
    "Backend",
    "BackendLoadError",
    "BackendNotFound",
    "BackendRegistrationError",
    "BackendRegistry",
    "CaptureError",
    "default_registry",
    "eager",
    "list_backends",
    "lookup_backend",
    "register_backend",
]
