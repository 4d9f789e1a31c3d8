"""What the min-cut partitioner may compute again in the backward, and what saving costs.

An op is *recomputable* when the backward may run it again instead of the forward saving its
result: pointwise ops, casts and views (what ember-inductor fuses into the kernels that read
them), never matmuls, convolutions, reductions or random ops. A value's *saving cost* is its
size in bytes (so a bf16 value costs half its float32 upcast), zero for parameters and
buffers (they stay alive anyway), doubled where every forward reader would fuse it (saving it
adds a write the fused forward does not have), and biased towards values near the backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ember.prims import resolve_op
from ember.prims.ops import op_schema

# Ops cheap enough to compute again in the backward instead of saving their results, beyond
# pointwise ops and views (which are recognized by their tags and schemas).
RECOMPUTABLE_OPS: frozenset[str] = frozenset(
    {
        "aten::_to_copy.default",
        "aten::clone.default",
        "aten::zeros_like.default",
        "aten::ones_like.default",
        "aten::full_like.default",
        "aten::full.default",
        "aten::zeros.default",
        "aten::ones.default",
        "aten::scalar_tensor.default",
        "aten::arange.start_step",
        "aten::expand.default",
        "aten::where.self",
        # rows gathered from a table that stays alive (a token embedding): recomputed, the
        # backward kernel that reads them loads the same bytes a saved copy holds, and the
        # forward keeps no copy (Llama-8L at 8x1024: 32 MiB)
        "aten::embedding.default",
    }
)
# Ops a compiler calls as library kernels (cuBLAS, cuDNN, fused attention), by name without
# the overload: they read their tensor arguments from memory, so the half that runs one
# writes each of them to memory whatever it fuses (`reads_from_memory`).
LIBRARY_OPS: frozenset[str] = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_scaled_mm",
        "aten::convolution",
        "aten::_convolution",
        "aten::convolution_backward",
        "aten::_flash_attention_forward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_forward",
        "aten::_efficient_attention_backward",
    }
)
# ...and every scaled-dot-product attention kernel and its backward.
LIBRARY_OP_PREFIXES: tuple[str, ...] = ("aten::_scaled_dot_product_",)
# Prim families that are as cheap as pointwise ops.
RECOMPUTABLE_PRIM_FAMILIES: frozenset[str] = frozenset({"elementwise", "views"})


@dataclass(frozen=True)
class RecomputePolicy:
    """The knobs of the min-cut partitioner's costs (defaults follow torch.compile's)."""

    # Never recompute a value a non-fusible backward op (a matmul, a convolution, an extern
    # call) reads: the backward would have to materialize it anyway, as a kernel of its own.
    # torch.compile bans these; off here because the measured cost is the other way round:
    # under bf16 autocast it makes the forward save every weight's bf16 copy (ResNet tiny
    # 1.12 -> 1.38 MB saved, Llama tiny 1.20 -> 2.54 MB; torch.compile saves 1.12 MB on ResNet),
    # where recomputing a cast in the backward costs one pointwise kernel per weight.
    ban_materialized_in_backward: bool = False
    # Saving a value that every forward reader fuses costs a write the forward would not do.
    fused_value_factor: int = 2
    # Each step further from the backward makes a value this much dearer to save (in
    # per-mille: 1100 = 1.1x), so that among equal sizes the cut saves what the backward
    # reads first and keeps the forward's early values short-lived.
    distance_per_mille: int = 1100
    max_distance: int = 100
    # Never recompute a value whose recompute reads more bytes, from sources the backward keeps
    # for nothing else, than the value holds (`recompute_bans.banned_for_extra_reads`):
    # Llama's residual stream was rebuilt in the backward from the embedding through every
    # block's projection outputs.
    ban_recompute_reading_more: bool = True
    # ...the extra reads, per mille of the value's bytes, at which it is banned.
    extra_read_per_mille: int = 1000
    # Save a value both halves write to memory (a matmul reads it in each) whose recompute
    # normalizes and narrows (`recompute_bans.banned_narrowed_normalizations`): Llama's
    # RMSNorm outputs cast to bf16 for the projections, recomputed by a kernel of their own
    # per norm in the backward (17 a step at 8x1024, 16 MiB each).
    save_narrowed_normalizations: bool = True
    # Save a value both halves write to memory (a library kernel reads it in each) whose
    # recompute would be a backward kernel of its own (`recompute_bans.banned_lone_recomputes`):
    # ResNet's batch-norm-ReLU outputs, read by the next convolution's backward before the
    # batch-norm backward reads the convolution output (25 kernels, 0.55 ms on the H100). On
    # since the backward frees each saved value after its last use (the runtime's boxed call,
    # as torch.compile's): ResNet-50's 48 ReLU outputs (+570 MB saved at batch 32) leave its
    # backward's peak at what it was without them (counted on the CPU at batch 4: 196.7 MB
    # before, 195.1 with both).
    save_lone_recomputes: bool = True
    # Save the copies of the weights (their bf16 casts under autocast) that a library kernel
    # reads in both halves (`recompute_bans.banned_weight_copies`): recomputed, the backward
    # casts every weight again (Llama-8L: 0.56 ms of casts a step against torch.compile's
    # 0.27 on the H100); saved, a copy of the weights (Llama-8L +244 MB) is held into the
    # backward and freed at its last use there, as torch.compile does.
    save_weight_copies: bool = True
    # A source under 1/this of the value's bytes (a row statistic) does not count.
    small_source_ratio: int = 8


DEFAULT_POLICY = RecomputePolicy()


def is_recomputable(target: str) -> bool:
    """Whether the backward may compute `target` again rather than the forward saving it."""
    if target in RECOMPUTABLE_OPS:
        return True
    op = resolve_op(target)
    family = getattr(op, "family", None)
    if family is not None:
        return family in RECOMPUTABLE_PRIM_FAMILIES
    tags = getattr(op, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if torch.Tag.pointwise in tags:
        return True
    return is_view(target)


def is_view(target: str) -> bool:
    """Whether `target` returns a view of an argument (and writes nothing)."""
    op = resolve_op(target)
    family = getattr(op, "family", None)
    if family is not None:
        return bool(family == "views")
    schema = op_schema(target)
    if schema is None:
        return False
    view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    return view and not writes


def is_fusible(target: str) -> bool:
    """Whether a reader running `target` takes its argument inside its own kernel (pointwise,
    casts, views), so the argument need not be written to memory."""
    return is_recomputable(target)


def reads_from_memory(target: str) -> bool:
    """Whether `target` is a library kernel (a matmul, a convolution, attention, or one of
    their backwards): its arguments must be in memory, unlike a gather's or a reduction's,
    which a compiler's kernel loads as it computes them."""
    op = target.rsplit(".", 1)[0] if "." in target.split("::", 1)[-1] else target
    return op in LIBRARY_OPS or op.startswith(LIBRARY_OP_PREFIXES)


def saving_cost(size: int, distance: int, fused: bool, policy: RecomputePolicy) -> int:
    """The capacity of a value's edge in the flow network: its bytes, weighted."""
    cost = size * (policy.fused_value_factor if fused else 1)
    steps = max(1, min(distance, policy.max_distance))
    return cost * policy.distance_per_mille**steps // 1000**steps
