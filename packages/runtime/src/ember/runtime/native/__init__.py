"""The native wrapper's interpreter: a compiled graph's program run in C++ (see the README)."""

from ember.runtime.native.build import NativeBuildError, interpreter, interpreter_if_ready
from ember.runtime.native.launch_spec import NativeLaunch, parameter_codes

__all__ = [
    "NativeBuildError",
    "NativeLaunch",
    "interpreter",
    "interpreter_if_ready",
    "parameter_codes",
]
