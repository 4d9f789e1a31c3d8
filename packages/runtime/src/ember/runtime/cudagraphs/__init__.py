"""CUDA graph trees: `mode="reduce-overhead"` replays compiled graphs as CUDA graphs.

`cudagraphify(call, ...)` wraps a compiled graph's `call(args)`; every wrapped graph on a device
joins that device's `CudaGraphTree`, whose recordings share one `MemoryPool`. Files: `tree`
(the walk, steps and decisions), `node` (a recording and its outputs), `static_inputs` (what a
replay copies and checks), `recording` (the CUDA interface, replaceable in tests), `pool`,
`step` (`mark_step_begin`), `reasons` (the catalogue of skip and re-record reasons).
"""

from ember.runtime.cudagraphs.function import (
    CudaGraphCall,
    FunctionMode,
    GraphFunction,
    cudagraphify,
)
from ember.runtime.cudagraphs.reasons import CATALOGUE, Reason
from ember.runtime.cudagraphs.recording import CaptureError, Recorder, Recording
from ember.runtime.cudagraphs.step import mark_step_begin
from ember.runtime.cudagraphs.tree import (
    CudaGraphTree,
    reset_trees,
    set_recorder_factory,
    tree_for,
    trees,
)

__all__ = [
    "CATALOGUE",
    "CaptureError",
    "CudaGraphCall",
    "CudaGraphTree",
    "FunctionMode",
    "GraphFunction",
    "Reason",
    "Recorder",
    "Recording",
    "cudagraphify",
    "mark_step_begin",
    "reset_trees",
    "set_recorder_factory",
    "tree_for",
    "trees",
]
