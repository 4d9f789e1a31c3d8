"""Running exported programs: `LoadedProgram` (a saved `ExportedProgram` made callable with a
backend of the caller's choice) and `resolve_backend` (backend names without ember-capture)."""

from ember.runtime.exported.backends import resolve_backend
from ember.runtime.exported.loaded import LoadedProgram, load_exported

__all__ = ["LoadedProgram", "load_exported", "resolve_backend"]
