"""The lone-recompute rule (`recompute_bans.banned_lone_recomputes`): a value that a library
kernel reads in both halves and whose recompute could join no backward kernel is saved. A
conv-BN-ReLU stack saves its ReLU outputs (the next convolution's backward needs each before
the batch-norm backward reads the convolution output) and never recomputes them; a
Linear-GELU-Linear block recomputes its GELU output in the GELU backward's kernel. The
weight-copy rule (`recompute_bans.banned_weight_copies`) saves the weights' bf16 casts that the
convolutions and matmuls read in both halves, which the backward would otherwise cast again.
Training steps equal eager's (float32 and bf16 autocast)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from ember.autodiff import partition, trace_joint
from ember.autodiff.dead_code import references
from ember.autodiff.recompute_policy import RecomputePolicy, is_view, reads_from_memory
from ember.prims import run, trace
from ember.prims.decompositions import PRIM_DECOMPOSITIONS

# batch norm decomposed into prims, as ember-inductor's joint decompositions have it
BATCH_NORM = {
    name: PRIM_DECOMPOSITIONS[name]
    for name in (
        "aten::_native_batch_norm_legit_functional.default",
        "aten::native_batch_norm_backward.default",
    )
}
ON = RecomputePolicy(save_lone_recomputes=True, save_weight_copies=False)
OFF = RecomputePolicy(save_lone_recomputes=False, save_weight_copies=False)
DEFAULT = RecomputePolicy()


def _conv_bn_relu() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 4, 1, bias=False),
    ).train()


def _linear_gelu_linear() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))


def _joint(module: nn.Module, x: torch.Tensor, autocast: bool) -> tuple[Any, list[int]]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        graph = trace(module, x)
    state = dict(module.named_parameters())
    flags = [False] + [gi.target in state for gi in graph.state_inputs()]
    joint = trace_joint(graph, flags, BATCH_NORM)
    return joint, [i for i, flag in enumerate(flags) if flag]


def _producer_targets(joint: Any) -> dict[str, str]:
    return {v.name: n.target for n in joint.graph.nodes for v in n.output_values()}


def _read_by_convolution(joint: Any, name: str) -> bool:
    return any(
        n.target == "aten::convolution.default" and name in {r.name for r in references(n)}
        for n in joint.graph.nodes
    )


def _recomputed_targets(parts: Any) -> list[str]:
    """The ops of the backward Graph that compute a forward value again."""
    forward = {v.name for n in parts.forward.nodes for v in n.output_values()}
    return [
        n.target
        for n in parts.backward.nodes
        if any(v.name.removesuffix("_recomputed").rstrip("_") in forward for v in n.output_values())
    ]


def _nbytes(joint: Any, names: Any) -> int:
    values = joint.graph.values()
    return sum(math.prod(values[n].spec.shape) * values[n].spec.dtype.itemsize for n in names)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_relu_outputs_are_saved_not_recomputed(autocast: bool) -> None:
    torch.manual_seed(0)
    joint, resident = _joint(_conv_bn_relu(), torch.randn(2, 3, 8, 8), autocast)
    targets = _producer_targets(joint)
    relus = [
        name
        for name, target in targets.items()
        if target == "aten::relu.default" and _read_by_convolution(joint, name)
    ]
    assert len(relus) == 2
    parts = partition(joint, "min_cut", resident, ON)
    assert set(relus) <= set(parts.saved)
    assert "aten::relu.default" not in _recomputed_targets(parts)
    # the rule is what changes it: without it the cut saves the convolution outputs only
    # and the backward computes each ReLU output again
    alone = partition(joint, "min_cut", resident, OFF)
    assert not set(relus) & set(alone.saved)
    assert _recomputed_targets(alone).count("aten::relu.default") == 2
    # the ReLU outputs are added, nothing else changes
    assert set(parts.saved) == set(alone.saved) | set(relus)
    assert parts.saved_bytes == alone.saved_bytes + _nbytes(joint, relus)
    # the weights' bf16 casts (read by the convolutions in both halves, made from parameters
    # alone) are not this rule's: it leaves them to the cut, which recomputes them
    assert not set(_weight_casts(joint)) & set(parts.saved)


def _weight_casts(joint: Any) -> list[str]:
    """The casts of parameters (primals other than the first, the input)."""
    params = {gi.value.name for gi in joint.graph.inputs[1 : joint.num_primals]}
    return [
        v.name
        for n in joint.graph.nodes
        if n.target == "aten::_to_copy.default" and {r.name for r in references(n)} & params
        for v in n.output_values()
    ]


@pytest.mark.parametrize("model", [_conv_bn_relu, _linear_gelu_linear])
def test_weight_copies_are_saved_not_cast_again(model: Any) -> None:
    """Under bf16 autocast every weight's cast is read by a library kernel in the forward and
    again for the input gradient: the default policy saves each (the backward casts no
    weight); without the rule the backward casts them again. In float32 there is nothing to
    save and the partition is the same with the rule and without it."""
    torch.manual_seed(0)
    module = model()
    x = torch.randn(2, 3, 8, 8) if isinstance(module[0], nn.Conv2d) else torch.randn(4, 5, 16)
    joint, resident = _joint(module, x, autocast=True)
    casts = _weight_casts(joint)
    read_twice = [name for name in casts if len(_library_readers(joint, name)) >= 2]
    # every convolution_backward takes its weight; the first Linear's input needs no gradient,
    # so only the second Linear's weight is read again
    assert len(read_twice) == (3 if isinstance(module[0], nn.Conv2d) else 1)
    parts = partition(joint, "min_cut", resident, DEFAULT)
    assert set(read_twice) <= set(parts.saved)
    without = partition(joint, "min_cut", resident, RecomputePolicy(save_weight_copies=False))
    assert not set(read_twice) & set(without.saved)
    # without the rule the backward casts again the weights it reads through a library kernel
    assert _recomputed_targets(without).count("aten::_to_copy.default") >= len(read_twice)
    assert _recomputed_targets(parts).count("aten::_to_copy.default") < len(read_twice)
    assert parts.saved_bytes == without.saved_bytes + _nbytes(joint, read_twice)
    joint32, resident32 = _joint(model(), x, autocast=False)
    assert (
        partition(joint32, "min_cut", resident32, DEFAULT).saved
        == partition(
            joint32, "min_cut", resident32, RecomputePolicy(save_weight_copies=False)
        ).saved
    )


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_gelu_output_is_recomputed_where_its_backward_reads_the_sources(autocast: bool) -> None:
    """The GELU output is read by the second Linear's matmuls in both halves, but the GELU
    backward reads the first Linear's output without waiting for the weight gradient's
    matmul: the recompute joins that kernel, so the rule leaves the cut's choice alone."""
    torch.manual_seed(0)
    joint, resident = _joint(_linear_gelu_linear(), torch.randn(4, 5, 16), autocast)
    targets = _producer_targets(joint)
    gelus = [name for name, target in targets.items() if target == "aten::gelu.default"]
    assert len(gelus) == 1
    # a matmul reads it (through views, and under autocast its bf16 cast) in both halves
    assert len(_library_readers(joint, gelus[0])) >= 2
    parts = partition(joint, "min_cut", resident, ON)
    alone = partition(joint, "min_cut", resident, OFF)
    assert parts.saved == alone.saved
    assert not set(gelus) & set(parts.saved)
    assert "aten::gelu.default" in _recomputed_targets(parts)


def _library_readers(joint: Any, name: str) -> list[str]:
    """The library kernels reading `name`, directly or through views and casts."""
    found, pending, seen = [], [name], {name}
    while pending:
        current = pending.pop()
        for node in joint.graph.nodes:
            if current not in {r.name for r in references(node)}:
                continue
            if reads_from_memory(node.target):
                found.append(node.target)
            elif is_view(node.target) or node.target == "aten::_to_copy.default":
                for value in node.output_values():
                    if value.name not in seen:
                        seen.add(value.name)
                        pending.append(value.name)
    return found


@pytest.mark.parametrize("model", [_conv_bn_relu, _linear_gelu_linear])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_training_step_equals_eager(model: Any, autocast: bool) -> None:
    """A step through the rule's partition (batch norm decomposed, both halves interpreted):
    the output and every parameter's gradient equal eager's."""
    torch.manual_seed(0)
    module, reference = model(), model()
    reference.load_state_dict(module.state_dict())
    x = torch.randn(2, 3, 8, 8) if isinstance(module[0], nn.Conv2d) else torch.randn(4, 5, 16)
    joint, resident = _joint(module, x, autocast)
    parts = partition(joint, "min_cut", resident, DEFAULT)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        graph = trace(module, x)
        expected = reference(x)
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    primals = [x] + [state[gi.target].detach() for gi in graph.state_inputs()]
    results = run(parts.forward, *primals)
    outputs = results[: parts.num_forward_outputs]
    saved = results[parts.num_forward_outputs :]
    torch.testing.assert_close(outputs[0], expected)
    tangent = torch.randn_like(expected)
    grads = run(parts.backward, *saved, tangent)
    wanted = torch.autograd.grad(expected, list(reference.parameters()), tangent)
    by_input = dict(zip([gi.target for gi in graph.state_inputs()], grads[1:]))
    for (name, _), want in zip(reference.named_parameters(), wanted):
        torch.testing.assert_close(by_input[name], want, msg=name)


def test_library_kernels_read_from_memory() -> None:
    for target in (
        "aten::mm.default",
        "aten::mm.dtype",
        "aten::addmm.default",
        "aten::convolution.default",
        "aten::convolution_backward.default",
        "aten::_scaled_dot_product_efficient_attention_backward.default",
        "aten::_scaled_dot_product_flash_attention_for_cpu.default",
    ):
        assert reads_from_memory(target), target
    for target in ("aten::gather.default", "aten::sum.dim_IntList", "aten::relu.default"):
        assert not reads_from_memory(target), target
