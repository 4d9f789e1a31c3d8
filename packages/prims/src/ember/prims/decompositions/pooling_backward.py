"""Backward ops of the fractional max pools: each output's gradient is added at its window's
argmax (`indices` count within each plane of the input), a `scatter_add` over the flattened
planes as `max_pool2d_with_indices_backward` in `pooling.py`.

torch has CPU and CUDA kernels of these ops only (ember's shape rule is in
`tracer/missing_meta.py`); the decomposition lets the tracer take symbolic sizes and
ember-inductor lower them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ember.prims.decompositions.table import to_prims

aten = torch.ops.aten


def _fractional_max_pool_backward(spatial: int) -> Any:
    def backward(
        grad: torch.Tensor,
        x: torch.Tensor,
        kernel_size: Sequence[int],
        output_size: Sequence[int],
        indices: torch.Tensor,
    ) -> torch.Tensor:
        # indices count within each plane (the last `spatial` dims) of x
        lead = list(x.shape[: x.dim() - spatial])
        plane = 1
        for size in x.shape[x.dim() - spatial :]:
            plane = plane * size
        flat_grad = aten.reshape.default(grad, [*lead, -1])
        flat_index = aten.reshape.default(indices, [*lead, -1])
        zeros = aten.new_zeros.default(grad, [*lead, plane])
        summed = aten.scatter_add.default(zeros, len(lead), flat_index, flat_grad)
        return aten.reshape.default(summed, list(x.shape))

    return backward


to_prims("aten::fractional_max_pool2d_backward.default")(_fractional_max_pool_backward(2))
to_prims("aten::fractional_max_pool3d_backward.default")(_fractional_max_pool_backward(3))
