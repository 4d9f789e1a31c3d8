"""What the min cut saves for a Llama-style stack (RMSNorm, residual adds, SiLU-gated MLP):
the backward never rebuilds a residual stream through more than one add, the saved bytes stay
within a few percent of the unconstrained cut's, the SiLU product and the casts are
recomputed, the RMSNorm's row statistic is saved, recomputed nodes sit just before their
first reader, and gradients equal eager's (float32 and bf16 autocast)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.autodiff import aot_eager, partition, trace_joint
from ember.autodiff.dead_code import references
from ember.autodiff.duplicate_casts import merge_duplicate_casts
from ember.autodiff.recompute_bans import recompute_sources
from ember.autodiff.recompute_policy import DEFAULT_POLICY, RecomputePolicy, is_recomputable
from ember.prims import trace
from ember.prims.testing import assert_same_step


class _RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6)).to(x.dtype)


class _Block(nn.Module):
    """x + attention-like projection of norm(x), then x + SiLU-gated MLP of norm(x)."""

    def __init__(self, width: int = 32, hidden: int = 88) -> None:
        super().__init__()
        self.norm1, self.norm2 = _RMSNorm(width), _RMSNorm(width)
        self.proj = nn.Linear(width, width, bias=False)
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.proj(self.norm1(x))
        normed = self.norm2(x)
        return x + self.down(F.silu(self.gate(normed)) * self.up(normed))


class _Stack(nn.Module):
    def __init__(self, blocks: int = 3, vocab: int = 32, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(_Block(width) for _ in range(blocks))
        self.norm = _RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _partitions(autocast: bool, policy: RecomputePolicy = DEFAULT_POLICY):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    module = _Stack()
    tokens = torch.randint(0, 32, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        graph = trace(module, tokens)
    state = dict(module.named_parameters())
    count = 1 + len([gi for gi in graph.state_inputs() if gi.target in state])
    joint = trace_joint(graph, [False] + [True] * (count - 1))
    resident = range(1, count)
    return joint, partition(joint, "min_cut", resident, policy)


def _producers(joint):  # type: ignore[no-untyped-def]
    return {v.name: i for i, n in enumerate(joint.graph.nodes) for v in n.output_values()}


def _residual_adds(joint) -> list[str]:  # type: ignore[no-untyped-def]
    """The float32 full-width adds of two full-width values: the residual stream."""
    values = joint.graph.values()
    adds = []
    for node in joint.graph.nodes:
        if node.target != "aten::add.Tensor":
            continue
        out = next(iter(node.output_values()))
        refs = [ref.name for ref in references(node)]
        if len(refs) == 2 and all(values[r].spec.shape == out.spec.shape for r in refs):
            if out.spec.shape[-1] == 32 and out.name not in _tangent_dependent(joint):
                adds.append(out.name)
    return adds


def _tangent_dependent(joint) -> set[str]:  # type: ignore[no-untyped-def]
    leaves = [leaf.name for leaf in joint.graph.input_leaves]
    dependent = set(leaves[joint.num_primals :])
    for node in joint.graph.nodes:
        if any(ref.name in dependent for ref in references(node)):
            dependent.update(v.name for v in node.output_values())
    return dependent


def _recomputed(parts, joint) -> set[str]:  # type: ignore[no-untyped-def]
    """Forward values the backward computes again (their joint names)."""
    dependent = _tangent_dependent(joint)
    names = set()
    for node in parts.backward.nodes:
        for value in node.output_values():
            name = value.name.removesuffix("_recomputed").rstrip("_")
            if name not in dependent:
                names.add(name)
    return names


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_residual_stream_is_not_rebuilt_from_the_embedding(autocast: bool) -> None:
    """Without the ban the backward recomputes every residual add from the embedding (a
    chain as long as the network); with it, a recomputed add reads no other recomputed add."""
    joint, parts = _partitions(autocast)
    adds = set(_residual_adds(joint))
    assert len(adds) == 6
    recomputed_adds = _recomputed(parts, joint) & adds
    producer = _producers(joint)
    for name in recomputed_adds:
        sources = recompute_sources(name, joint.graph.nodes, producer, set(parts.saved))
        through = {
            ref.name
            for ref in references(joint.graph.nodes[producer[name]])
            if ref.name in recomputed_adds
        }
        assert not through, (name, through, sources)
    _, unbanned = _partitions(autocast, RecomputePolicy(ban_recompute_reading_more=False))
    chain = _recomputed(unbanned, joint) & adds
    assert len(chain) == len(adds)  # the property the ban changes: all were rebuilt


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_saved_bytes_stay_close_to_the_unconstrained_cut(autocast: bool) -> None:
    joint, parts = _partitions(autocast)
    reads_only = RecomputePolicy(save_narrowed_normalizations=False)
    _, without_norms = _partitions(autocast, reads_only)
    _, unbanned = _partitions(
        autocast,
        RecomputePolicy(ban_recompute_reading_more=False, save_narrowed_normalizations=False),
    )
    values = joint.graph.values()
    weights = {leaf.name for leaf in joint.graph.input_leaves[1 : joint.num_primals]}

    def size(name: str) -> int:
        return math.prod(values[name].spec.shape) * values[name].spec.dtype.itemsize

    def activations(saved: tuple[str, ...]) -> int:
        return sum(size(n) for n in saved if n not in weights)

    # a ban adds the value but drops sources kept only for its recompute
    assert activations(without_norms.saved) <= 1.15 * activations(unbanned.saved)
    # the saved normalization outputs add their own bytes and nothing else
    added = set(parts.saved) - set(without_norms.saved)
    assert activations(parts.saved) <= activations(without_norms.saved) + sum(map(size, added))
    assert all(values[n].spec.dtype == torch.bfloat16 for n in added)
    assert bool(added) == autocast


def test_silu_product_and_casts_are_recomputed_statistics_saved() -> None:
    joint, parts = _partitions(autocast=True)
    nodes = joint.graph.nodes
    producer = _producers(joint)
    targets = {name: nodes[producer[name]].target for name in parts.saved if name in producer}
    # the SiLU product (read by the down projection's weight gradient) is recomputed where
    # the SiLU backward reads the gate and up products, which are saved (matmul results)
    assert "aten::silu.default" not in targets.values()
    products = [
        v.name
        for n in nodes
        if n.target == "aten::mul.Tensor"
        and any(
            nodes[producer[r.name]].target == "aten::silu.default"
            for r in references(n)
            if r.name in producer
        )
        for v in n.output_values()
    ]
    assert products and not set(products) & set(parts.saved)
    assert sum(t == "aten::mm.default" for t in targets.values()) == 0  # views of mm are saved
    # the bf16 cast of each RMSNorm output (read by the projections' matmuls in both halves)
    # is saved once per norm: its recompute would read the float32 block input (the first
    # block's gathered from the embedding table) and the row statistic
    primals = {leaf.name for leaf in joint.graph.input_leaves[: joint.num_primals]}
    casts = [
        name
        for name, target in targets.items()
        if target == "aten::_to_copy.default"
        and references(nodes[producer[name]])[0].name not in primals
    ]
    sources = [references(nodes[producer[name]])[0].name for name in casts]
    assert len(sources) == len(set(sources)) == 2 * 3 + 1
    assert all(joint.graph.values()[name].spec.dtype == torch.bfloat16 for name in casts)
    # the RMSNorm's row statistic (a reduction) is never recomputed
    means = [v.name for n in nodes if n.target == "aten::mean.dim" for v in n.output_values()]
    assert means and not set(means) & _recomputed(parts, joint)


def test_recomputed_nodes_sit_just_before_their_first_reader() -> None:
    joint, parts = _partitions(autocast=True)
    dependent = _tangent_dependent(joint)
    backward = parts.backward.nodes
    forward_names = {v.name for n in parts.forward.nodes for v in n.output_values()}
    position = {v.name: i for i, n in enumerate(backward) for v in n.output_values()}
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(backward):
        for ref in references(node):
            readers.setdefault(ref.name, []).append(i)
    recomputed = [
        i
        for i, n in enumerate(backward)
        if all(v.name.removesuffix("_recomputed") not in dependent for v in n.output_values())
    ]
    assert recomputed
    for i in recomputed:
        assert is_recomputable(backward[i].target) or not any(
            v.name in forward_names for v in backward[i].output_values()
        )
        first = min(
            (r for v in backward[i].output_values() for r in readers.get(v.name, ())),
            default=len(backward),
        )
        # only other recomputed nodes (the reader's other recomputed inputs) lie between
        assert all(j in recomputed for j in range(i + 1, first)), backward[i].target
    assert max(position.values()) == len(backward) - 1


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16"])
def test_gradients_equal_eager(autocast: bool) -> None:
    torch.manual_seed(0)
    module = _Stack()
    reference = _Stack()
    reference.load_state_dict(module.state_dict())
    tokens = torch.randint(0, 32, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = aot_eager(trace(module, tokens), [tokens])(tokens)
        expected = reference(tokens)
    assert_same_step(out, expected, module, reference)


def test_duplicate_casts_merge_into_one_value() -> None:
    """Under autocast q/k/v-style projections of one value each cast it; merged, one cast
    per (value, dtype) remains, and every reader reads that one."""
    joint, _ = _partitions(autocast=True)

    def casts(graph) -> list[str]:  # type: ignore[no-untyped-def]
        return [
            references(n)[0].name
            for n in graph.nodes
            if n.target == "aten::_to_copy.default" and n.kwargs.get("dtype") == torch.bfloat16
        ]

    before = casts(joint.graph)
    merged = merge_duplicate_casts(joint)
    after = casts(merged.graph)
    assert len(before) > len(set(before))  # gate and up cast the same normalized value
    assert sorted(after) == sorted(set(before))
    merged.graph.verify()
