"""ember-capture's settings: one frozen config class read from `EMBER_*` variables.

They switch on the diagnostics around the backend a compiled function calls (repro
directories and the minifier, the accuracy check, performance warnings, the HTML report)
and say where the guard check runs (the C tensor guards). None of them changes what is
compiled, so none enters a cache key.
"""

from __future__ import annotations

from typing import Literal

from ember.prims.config import config_class, setting


@config_class
class CaptureConfig:
    """Settings of ember-capture: diagnostics around each compiled graph; the C tensor guards."""

    repro: Literal["off", "write", "minify"] = setting(
        "off",
        env="EMBER_REPRO",
        help="When a backend fails on a captured Graph (it raises while compiling or running, "
        "or, with EMBER_ACCURACY_CHECK, its result differs from eager): 'write' saves a repro "
        "directory (the Graph, its inputs, repro.py) under EMBER_REPRO_DIR; 'minify' also "
        "shrinks the Graph while the failure persists and writes the smallest repro.",
        cache_key=False,
    )
    repro_dir: str = setting(
        "ember_repro",
        env="EMBER_REPRO_DIR",
        help="Where EMBER_REPRO writes repro directories (one per failing Graph).",
        cache_key=False,
    )
    accuracy_check: bool = setting(
        False,
        env="EMBER_ACCURACY_CHECK",
        help="Run every compiled graph's first call again with ember-prims' interpreter (eager "
        "ATen, one call per node) and raise AccuracyError naming the user's lines when the "
        "results differ. Doubles the first call's time; graphs with random ops are skipped.",
        cache_key=False,
    )
    perf_warnings: bool = setting(
        True,
        env="EMBER_PERF_WARNINGS",
        help="After two warm-up calls, time each compiled inference graph once against the "
        "interpreter running its ATen ops eagerly, and warn (PerformanceWarning, once per graph) "
        "when it is measurably slower, with the graph's source lines and the likely cause.",
        cache_key=False,
    )
    report: str = setting(
        "",
        env="EMBER_REPORT",
        help="A directory: write a static HTML compile report there when the process exits "
        "(every compiled frame, graphs per stage, breaks, recompiles, guards, kernels, times). "
        "The API is ember.capture.report.recording().",
        cache_key=False,
    )
    native_guards: bool = setting(
        True,
        env="EMBER_NATIVE_GUARDS",
        help="Check tensor guards (type, dtype, device, sizes, strides, requires_grad) in one "
        "C++ function instead of Python (tens of ns a tensor instead of ~0.5 us). Built once "
        "per machine with torch.utils.cpp_extension, in the background: the Python check runs "
        "until it is ready, and stays where no C++ compiler or ninja is found "
        "(EMBER_LOGS=guards says why). Off: always the Python check.",
        cache_key=False,
    )
    native_guards_dir: str = setting(
        "",
        env="EMBER_NATIVE_GUARDS_DIR",
        help="Where the C tensor guards' built library is kept, under a name hashed from its "
        "source and the torch and Python versions (default ~/.cache/ember/native-guards).",
        cache_key=False,
    )
