"""Backward ops whose torch meta kernels refuse symbolic sizes: on OpInfo samples, the
gradient computation traces (static and with `dynamic=True`), records the backward op,
decomposes fully to prims and matches eager's gradients (issue 19)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

op_db = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations", reason="needs expecttest"
).op_db

from ember.prims import run, trace  # noqa: E402
from ember.prims.decompositions import PRIM_DECOMPOSITIONS, decompose  # noqa: E402
from ember.prims.decompositions.verification import op_label  # noqa: E402
from ember.prims.primitives import is_prim  # noqa: E402
from ember.prims.pytree import tree_flatten, tree_unflatten  # noqa: E402

# OpInfo entry -> the backward op its gradient records
BACKWARD_OPS = {
    "nn.functional.hardswish": "aten::hardswish_backward.default",
    "nn.functional.hardsigmoid": "aten::hardsigmoid_backward.default",
    "logit": "aten::logit_backward.default",
    "nn.functional.hardshrink": "aten::hardshrink_backward.default",
    "nn.functional.softshrink": "aten::softshrink_backward.default",
    "nn.functional.logsigmoid": "aten::log_sigmoid_backward.default",
    "nn.functional.prelu": "aten::_prelu_kernel_backward.default",
    "nn.functional.glu": "aten::glu_backward.default",
    "nn.functional.binary_cross_entropy": "aten::binary_cross_entropy_backward.default",
    "nn.functional.huber_loss": "aten::huber_loss_backward.default",
    "nn.functional.smooth_l1_loss": "aten::smooth_l1_loss_backward.default",
    "nn.functional.soft_margin_loss": "aten::soft_margin_loss_backward.default",
    "nn.functional.group_norm": "aten::native_group_norm_backward.default",
    "_batch_norm_with_update": "aten::batch_norm_backward.default",
    "nn.functional.unfold": "aten::col2im.default",
    "unfold_copy": "aten::unfold_backward.default",
    "nn.functional.fractional_max_pool2d": "aten::fractional_max_pool2d_backward.default",
    "linalg.householder_product": "aten::tril_.default",
}

_OPS = {op_label(op): op for op in op_db}


def _gradient_program(op: Any, sample: Any) -> tuple[Any, list[torch.Tensor]]:
    """A function of the sample's tensors returning the gradients of sum(output * cotangent)
    for those that require grad, and those tensors."""
    leaves, spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    tensors = [
        leaves[i].detach().clone().requires_grad_(leaves[i].requires_grad) for i in positions
    ]

    def differentiable_outputs(inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        filled = list(leaves)
        for position, tensor in zip(positions, inputs):
            filled[position] = tensor
        first, args, kwargs = tree_unflatten(filled, spec)
        outputs = tree_flatten(op.op(first, *args, **kwargs))[0]
        return [o for o in outputs if isinstance(o, torch.Tensor) and o.requires_grad]

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    cotangents = [
        torch.randn(o.shape, generator=generator, dtype=o.dtype)
        for o in differentiable_outputs(tuple(tensors))
    ]

    def gradients(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = differentiable_outputs(inputs)
        total = sum((o * c).sum() for o, c in zip(outputs, cotangents))
        return torch.autograd.grad(total, [t for t in inputs if t.requires_grad])

    return gradients, tensors


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(BACKWARD_OPS))
def test_backward_op_decomposes_and_matches_eager_gradients(name: str, dynamic: bool) -> None:
    op = _OPS[name]
    checked = 0
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=True):
        if checked == 2:
            break
        gradients, tensors = _gradient_program(op, sample)
        torch.manual_seed(0)
        graph = trace(gradients, *tensors, dynamic=dynamic)
        target = BACKWARD_OPS[name]
        recorded = {node.target for node in graph.nodes}
        if target not in recorded:
            continue  # a sample whose gradient takes another path (no weight, ...)
        # The backward op and everything its decomposition makes go to prims; the rest of
        # the Graph (the forward, checked by the OpInfo decomposition tests) stays as traced
        table = {k: v for k, v in PRIM_DECOMPOSITIONS.items() if k not in recorded}
        decomposed = decompose(graph, {**table, target: PRIM_DECOMPOSITIONS[target]})
        left = {n.target for n in decomposed.nodes if not is_prim(n.target)}
        assert not left - (recorded - {target}), f"not decomposed: {sorted(left)}"
        torch.manual_seed(0)
        expected = gradients(*tensors)
        torch.manual_seed(0)
        actual = run(decomposed, *tensors)
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
        checked += 1
    assert checked, f"no sample of {name} records {BACKWARD_OPS[name]}"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_fractional_max_pool3d_backward_matches_eager(dynamic: bool) -> None:
    # its OpInfo samples draw the pooling regions inside the op (ember's random streams differ
    # from torch's): the indices come from one eager forward here
    x = torch.randn(2, 3, 6, 7, 5)
    _, indices = torch.nn.functional.fractional_max_pool3d(
        x, 2, output_size=(3, 4, 2), return_indices=True
    )
    grad = torch.randn(2, 3, 3, 4, 2)

    def backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.fractional_max_pool3d_backward(grad, x, [2, 2, 2], [3, 4, 2], indices)

    graph = decompose(trace(backward, grad, x, indices, dynamic=dynamic), PRIM_DECOMPOSITIONS)
    assert all(is_prim(node.target) for node in graph.nodes)
    torch.testing.assert_close(run(graph, grad, x, indices), backward(grad, x, indices))
