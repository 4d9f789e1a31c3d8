"""Compiling models wrapped by torch.distributed: DDP, FSDP2 (`fully_shard`) and FSDP1.

DDP: the wrapped module's Graph is split at DDP's gradient buckets (`buckets.py`, `split.py`)
so each bucket's all-reduce overlaps the backward of the pieces before it. FSDP2 and
FSDP1: communication runs in plain Python between graphs, at the module hooks and wrapper
forwards (`wrappers.py`). docs/distributed.md has the design and its reasons.
"""

from ember.capture.distributed.buckets import (
    bucket_of,
    bucket_size_limits,
    bucket_starts,
    bucketed_backend,
    ddp_parameters,
)
from ember.capture.distributed.split import Piece, SplitGraph, split_graph, without_cross_mutation
from ember.capture.distributed.wrappers import (
    compile_wrapper,
    is_ddp,
    is_fsdp1,
    is_wrapper,
    with_compiled_forward,
)

__all__ = [
    "Piece",
    "SplitGraph",
    "bucket_of",
    "bucket_size_limits",
    "bucket_starts",
    "bucketed_backend",
    "compile_wrapper",
    "ddp_parameters",
    "is_ddp",
    "is_fsdp1",
    "is_wrapper",
    "split_graph",
    "with_compiled_forward",
    "without_cross_mutation",
]
