"""Scaled dot-product attention written with prims (the "math" form): scores with matmul,
causal and explicit masks with where/add, a numerically stable softmax, and the matching
backward that recomputes the probabilities from the saved logsumexp.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ember.prims.decompositions.operands import scalar_like
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _transpose_last(t: torch.Tensor) -> torch.Tensor:
    order = list(range(t.dim()))
    order[-1], order[-2] = order[-2], order[-1]
    return prims.permute(t, order)


def _masked_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    is_causal: bool,
    mask: torch.Tensor | None,
    scale: float | None,
) -> tuple[torch.Tensor, float]:
    factor = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    raw = prims.matmul(q, _transpose_last(k))
    scores = prims.mul(raw, scalar_like(factor, raw))
    shape = list(scores.shape)
    length, source = shape[-2], shape[-1]
    if is_causal:
        rows = prims.broadcast_in_dim(
            prims.iota(length, 0, 1, dtype=torch.int64, device=q.device), [length, source], [0]
        )
        cols = prims.broadcast_in_dim(
            prims.iota(source, 0, 1, dtype=torch.int64, device=q.device), [length, source], [1]
        )
        allowed = prims.broadcast_in_dim(
            prims.le(cols, rows), shape, [len(shape) - 2, len(shape) - 1]
        )
        scores = prims.where(allowed, scores, scalar_like(-math.inf, scores))
    if mask is not None:
        dims = list(range(len(shape) - mask.dim(), len(shape)))
        full = prims.broadcast_in_dim(mask, shape, dims)
        if mask.dtype == torch.bool:
            scores = prims.where(full, scores, scalar_like(-math.inf, scores))
        else:
            scores = prims.add(scores, full)
    return scores, factor


def _logsumexp_last(scores: torch.Tensor) -> torch.Tensor:
    last = scores.dim() - 1
    high = prims.amax(scores, [last])
    high = prims.where(prims.isinf(high), scalar_like(0, high), high)
    shape = list(scores.shape)
    shifted = prims.exp(prims.sub(scores, prims.broadcast_in_dim(high, shape, list(range(last)))))
    return prims.add(prims.log(prims.sum(shifted, [last])), high)


@to_prims("aten::_scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_flash_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if dropout_p:
        raise NotImplementedError("attention dropout inside the fused kernel")
    scores, _ = _masked_scores(q, k, is_causal, attn_mask, scale)
    lse = _logsumexp_last(scores)
    last = scores.dim() - 1
    probs = prims.exp(
        prims.sub(scores, prims.broadcast_in_dim(lse, list(scores.shape), list(range(last))))
    )
    return prims.matmul(probs, v), lse


@to_prims("aten::_scaled_dot_product_flash_attention_for_cpu_backward.default")
def _sdpa_flash_cpu_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dropout_p: float,
    is_causal: bool,
    *,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[Any, Any, Any]:
    scores, factor = _masked_scores(q, k, is_causal, attn_mask, scale)
    last = scores.dim() - 1
    shape = list(scores.shape)
    probs = prims.exp(prims.sub(scores, prims.broadcast_in_dim(lse, shape, list(range(last)))))
    grad_v = prims.matmul(_transpose_last(probs), grad)
    grad_probs = prims.matmul(grad, _transpose_last(v))
    row = prims.sum(prims.mul(grad, out), [grad.dim() - 1])
    grad_scores = prims.mul(
        probs, prims.sub(grad_probs, prims.broadcast_in_dim(row, shape, list(range(last))))
    )
    grad_scores = prims.mul(grad_scores, scalar_like(factor, grad_scores))
    grad_q = prims.matmul(grad_scores, k)
    grad_k = prims.matmul(_transpose_last(grad_scores), q)
    return grad_q, grad_k, grad_v
