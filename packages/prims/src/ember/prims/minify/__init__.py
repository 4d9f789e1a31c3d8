"""Repro directories and the minifier: a failing Graph, shrunk and made reproducible.

When a backend fails on a Graph — it raises while compiling, its compiled callable raises,
or its result differs from the interpreter's — `probe` names the failure, `minify` shrinks
the Graph while the same failure persists, and `write_repro` writes a directory with the
Graph, its inputs and a `repro.py` that reproduces the failure with only ember-prims and the
backend's own layers installed (`run_repro`). `record_failure` does all three; ember-capture
calls it under `EMBER_REPRO`. See the package README, "Repro and minifier".
"""

from ember.prims.minify.failure import (
    Backend,
    Failure,
    FailureKind,
    clone_inputs,
    compare,
    interpreter,
    probe,
    tolerances,
)
from ember.prims.minify.isolated import blocked_layers, run_isolated
from ember.prims.minify.record import record_failure
from ember.prims.minify.repro import (
    backend_reference,
    load_repro,
    needed_layers,
    resolve_backend,
    run_repro,
    write_repro,
)
from ember.prims.minify.shrink import Minified, minify
from ember.prims.minify.subgraph import Cutter

__all__ = [
    "Backend",
    "Cutter",
    "Failure",
    "FailureKind",
    "Minified",
    "backend_reference",
    "blocked_layers",
    "clone_inputs",
    "compare",
    "interpreter",
    "load_repro",
    "minify",
    "needed_layers",
    "probe",
    "record_failure",
    "resolve_backend",
    "run_isolated",
    "run_repro",
    "tolerances",
    "write_repro",
]
