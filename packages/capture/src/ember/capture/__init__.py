"""ember-capture: turns Python programs into ember Graphs and hands them to backends.

`compile()` captures a function or nn.Module by interpreting its bytecode, guards what it
assumed and caches the result (`reset()`, `disable()`); backends come from the registry
(`register_backend`, `list_backends`, `lookup_backend`, the `ember.backends` entry points)
with the built-in `eager`. `mark_dynamic` / `mark_static` choose which input dims
are compiled with symbolic sizes. What capture cannot model becomes a graph break; `explain()`
reports the graphs and breaks of one call, each break from the `CATALOGUE`. `export()`
captures one whole-program Graph with the weights as named state (an `ExportedProgram`).
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
from ember.capture.breaks import CATALOGUE, BreakKind, GraphBreak
from ember.capture.cache import RecompileLimitWarning
from ember.capture.compile import compile, disable, reset
from ember.capture.config import CaptureConfig
from ember.capture.dynamic import mark_dynamic, mark_static
from ember.capture.errors import (
    AccuracyError,
    BackendLoadError,
    BackendNotFound,
    BackendRegistrationError,
    CaptureError,
)
from ember.capture.explain import ExplainResult, explain
from ember.capture.export import Dim, ExportError, export
from ember.capture.perf_warning import PerformanceWarning
from ember.capture.report import CompileReport, compile_report
from ember.capture.unsupported import Unsupported

__all__ = [
    "CATALOGUE",
    "ENTRY_POINT_GROUP",
    "KNOWN_BACKENDS",
    "AccuracyError",
    "Backend",
    "BackendLoadError",
    "BackendNotFound",
    "BackendRegistrationError",
    "BackendRegistry",
    "BreakKind",
    "CaptureConfig",
    "CaptureError",
    "CompileReport",
    "Dim",
    "ExplainResult",
    "ExportError",
    "GraphBreak",
    "PerformanceWarning",
    "RecompileLimitWarning",
    "Unsupported",
    "compile",
    "compile_report",
    "default_registry",
    "disable",
    "eager",
    "explain",
    "export",
    "list_backends",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "register_backend",
    "reset",
]
