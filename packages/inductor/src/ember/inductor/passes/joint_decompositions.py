"""The ATen ops ember-inductor has ember-autodiff decompose in the joint Graph, before the
min cut chooses what the forward saves (torch.compile's inductor hands AOTAutograd its
decomposition table the same way).

`_log_softmax` is `x - max - log(sum(exp(x - max)))`: opaque, its float32 output is what its
backward reads, so the forward saved it (Llama's 8192 x 32000 log-probabilities, 1 GB, written
by the forward and read by the backward). Decomposed, the cut saves the bf16 logits (in memory
anyway, half the bytes) and two values per row, and both halves compute the log-probabilities
where they read them. The values are the same: inductor decomposed the op this way already.

`native_batch_norm_backward` in training mode takes the running mean and variance without
reading them: opaque, its backward node made the forward save both, and since the forward
also writes them (the running-stat update), as copies (a ResNet-50 training step: 106 device
copies and 106 saved buffers). Decomposed, the backward reads only what it uses.

`_native_batch_norm_legit_functional` (training-mode batch norm) likewise: opaque, its
normalized output cannot be computed again, so the forward saved the ReLU after it (the next
convolution's input) besides the convolution's output. Decomposed, the cut saves the
convolution's output and the per-channel statistics, and the backward recomputes norm and
ReLU where it reads them, as torch.compile does (ResNet-50 at batch 32, bf16: 1336 -> 749 MiB
saved; its training peak was 1982 MiB on the H100 against torch.compile's 1587).
`max_pool2d_with_indices` (and its backward): opaque, the forward saved its int64 flat
indices. Decomposed, the window offset passes through int8 (ember-prims' decomposition), so
the cut saves that byte per output and the backward computes the flat index again
(ResNet-50 at batch 32: 6 MB saved instead of 51 MB, as torch.compile saves).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember.prims.decompositions import PRIM_DECOMPOSITIONS


def _log_softmax(a: torch.Tensor, dim: int, half_to_float: bool = False) -> torch.Tensor:
    """ember-prims' decomposition; a 16-bit input with `half_to_float` computes in float32,
    as the op does."""
    if half_to_float:
        a = a.to(torch.float32)
    result: torch.Tensor = PRIM_DECOMPOSITIONS["aten::_log_softmax.default"](a, dim, False)
    return result


JOINT_DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    "aten::max_pool2d_with_indices.default": PRIM_DECOMPOSITIONS[
        "aten::max_pool2d_with_indices.default"
    ],
    "aten::max_pool2d_with_indices_backward.default": PRIM_DECOMPOSITIONS[
        "aten::max_pool2d_with_indices_backward.default"
    ],
    "aten::_log_softmax.default": _log_softmax,
    "aten::_native_batch_norm_legit_functional.default": PRIM_DECOMPOSITIONS[
        "aten::_native_batch_norm_legit_functional.default"
    ],
    "aten::native_batch_norm_backward.default": PRIM_DECOMPOSITIONS[
        "aten::native_batch_norm_backward.default"
    ],
}
