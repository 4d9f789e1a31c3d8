"""ember-runtime's settings: one frozen config class read from `EMBER_*` variables.

Declared with ember-prims' config base (`config_class`, `setting`); `load(RuntimeConfig)`
reads the environment, and docs/configuration.md lists every field.
"""

from __future__ import annotations

from ember.prims.config import config_class, setting


@config_class
class RuntimeConfig:
    """Settings of ember-runtime: where compiled artifacts are cached, how kernels compile."""

    cache_dir: str = setting(
        "",
        env="EMBER_CACHE_DIR",
        help="Root directory of ember's on-disk caches (compiled artifacts live under "
        "'artifacts/'); empty means ~/.cache/ember.",
        cache_key=False,
    )

    compile_threads: int = setting(
        0,
        env="EMBER_COMPILE_THREADS",
        help="Worker processes that compile Triton kernels in parallel; 0 means one per CPU, "
        "1 compiles in the calling process.",
        cache_key=False,
    )

    cudagraph_max_recordings: int = setting(
        8,
        env="EMBER_CUDAGRAPH_MAX_RECORDINGS",
        help="CUDA graphs recorded per compiled graph (one per input shape or moved "
        "parameter) before further new shapes run without CUDA graphs (mode='reduce-overhead').",
        cache_key=False,
    )

    cudagraph_reserve_block: bool = setting(
        True,
        env="EMBER_CUDAGRAPH_RESERVE_BLOCK",
        help="mode='reduce-overhead': warm-ups before the first recording run in the graph "
        "pool (as torch's trees do), and a step's first graph (a forward), warmed up or "
        "recorded, first reserves there one block of its buffers' planned peak (those below "
        "128 MB), so they share a segment and merge when freed; off: each buffer takes its "
        "own segment as the allocator finds one.",
        cache_key=False,
    )

    cudagraph_max_depth: int = setting(
        32,
        env="EMBER_CUDAGRAPH_MAX_DEPTH",
        help="Graphs recorded one after another within a step of a CUDA graph tree before "
        "further ones run without CUDA graphs (a step whose backward never comes).",
        cache_key=False,
    )
