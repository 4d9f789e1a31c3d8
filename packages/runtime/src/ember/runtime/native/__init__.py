"""The native wrapper's interpreter: a compiled graph's program run in C++ (see the README)."""

from ember.runtime.native.build import NativeBuildError, interpreter
from ember.runtime.native.launch_spec import NativeLaunch, parameter_codes

__all__ = ["NativeBuildError", "NativeLaunch", "interpreter", "parameter_codes"]
