"""Recomputable values the backward still may not compute again: those whose recompute reads
more bytes than saving them would, normalizations both halves write, values the backward
would write in a kernel of its own, and copies of the weights that library kernels read in
both halves.

The min cut minimizes the bytes saved; it does not see what a recompute reads. Recomputing a
value reads its sources; a source the backward reads anyway costs nothing more, but one it
keeps for nothing else than this recompute is an extra read. When the extra reads reach the
value's own bytes, saving the value is cheaper for the backward (`banned_for_extra_reads`):
Llama's residual stream, rebuilt in the backward from the embedding through every block's
projection outputs, is cut into links of one add. The README's "recompute rules" has figures.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ember.autodiff.dead_code import references
from ember.autodiff.recompute_policy import RecomputePolicy, is_recomputable, is_view
from ember.prims import Node

CASTS = frozenset({"aten::_to_copy.default", "prims::convert_element_type"})
# Recomputable reads of a table that stays alive: a recompute through one reads the rows it
# gathers, as many bytes as the gathered value (BERT's three embeddings summed: 12 bytes an
# element read to rebuild 4), so the gathered value counts as a source.
GATHERS = frozenset({"aten::embedding.default"})


def recompute_sources(
    name: str,
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    stops: Collection[str],
) -> set[str]:
    """The values the backward reads to compute `name` again: its ancestors through
    recomputable ops, stopping at values no recomputable op makes (matmul and reduction
    results, primals), at gathered rows (`GATHERS`) and at `stops` (values that will not be
    recomputed)."""
    return recompute_region(name, nodes, producer, stops)[0]


def recompute_region(
    name: str,
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    stops: Collection[str],
) -> tuple[set[str], set[str]]:
    """`recompute_sources` of `name`, and the values its recompute computes (`name` too)."""
    sources: set[str] = set()
    region: set[str] = set()
    seen = {name}
    pending = [name]
    while pending:
        current = pending.pop()
        index = producer.get(current)
        if current != name and (current in stops or index is None):
            sources.add(current)
            continue
        if index is None or not is_recomputable(nodes[index].target):
            sources.add(current)
            continue
        if current != name and nodes[index].target in GATHERS:
            sources.add(current)  # its table stays alive, but the rows are read again
            continue
        region.add(current)
        for ref in references(nodes[index]):
            if ref.name not in seen:
                seen.add(ref.name)
                pending.append(ref.name)
    return sources, region


def read_through_views(
    reads: Collection[str], nodes: Sequence[Node], producer: Mapping[str, int]
) -> set[str]:
    """`reads` and the bases they view: a backward op reading a view of a value reads it."""
    closed = set(reads)
    pending = list(reads)
    while pending:
        index = producer.get(pending.pop())
        if index is None or not is_view(nodes[index].target):
            continue
        for ref in references(nodes[index]):
            if ref.name not in closed:
                closed.add(ref.name)
                pending.append(ref.name)
    return closed


def banned_for_extra_reads(
    candidates: Sequence[str],
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    sizes: Mapping[str, int],
    held_anyway: Collection[str],
    backward_reads: Collection[str],
    users: Mapping[str, Sequence[int]],
    policy: RecomputePolicy,
) -> set[str]:
    """The recomputable `candidates` (in topological order, each computed by the forward
    anyway) whose recompute reads, from sources the backward needs for nothing else, at least
    `policy.extra_read_per_mille` / 1000 of the value's bytes.

    A source needs reading for nothing else when no backward op reads it (or a view of it)
    and every op that reads it is part of this recompute. Sources held anyway (`held_anyway`:
    parameters, buffers, forward outputs) and small statistics (under
    `1/policy.small_source_ratio` of the value: a row's mean, broadcast) do not count. Views
    and casts are judged through the value they are taken of. A banned value is saved (or
    something computed from it is) and becomes a source for the candidates after it, so a
    chain is cut wherever its links' extra reads add up to a link's size."""
    banned: set[str] = set()
    read = read_through_views(backward_reads, nodes, producer)
    for name in candidates:
        index = producer.get(name)
        if index is None or not is_recomputable(nodes[index].target):
            continue
        if is_view(nodes[index].target) or nodes[index].target in CASTS:
            # judged through the value they are taken of: ranked on its own, a narrow cast
            # would be saved next to the value the backward still reads (Llama's three bf16
            # casts of each normalized input, one per projection)
            continue
        size = sizes.get(name, 0)
        sources, region = recompute_region(name, nodes, producer, banned)
        counted = [
            source
            for source in sources
            if source not in held_anyway
            and sizes.get(source, 0) * policy.small_source_ratio >= size
        ]
        extra_read = sum(
            sizes.get(source, 0)
            for source in counted
            if source not in read and _read_only_within(source, region, nodes, producer, users)
        )
        if extra_read and extra_read * 1000 >= size * policy.extra_read_per_mille:
            banned.add(name)
    return banned


def _read_only_within(
    source: str,
    region: Collection[str],
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    users: Mapping[str, Sequence[int]],
) -> bool:
    """Whether every op reading `source` (through views) computes a value of `region`: then
    nothing but this recompute needs it (a ResNet convolution's output is also read by its
    batch norm's statistics and the recompute of the normalized value, so it is not)."""
    pending, seen = [source], {source}
    while pending:
        current = pending.pop()
        for index in users.get(current, ()):
            node = nodes[index]
            outputs = [v.name for v in node.output_values()]
            if is_view(node.target):
                for out in outputs:
                    if out not in seen:
                        seen.add(out)
                        pending.append(out)
            elif not any(out in region for out in outputs):
                return False
    return True


def banned_narrowed_normalizations(
    candidates: Sequence[str],
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    sizes: Mapping[str, int],
    widths: Mapping[str, int],
    held_anyway: Collection[str],
    materialized_twice: Collection[str],
    stops: Collection[str],
    policy: RecomputePolicy,
) -> set[str]:
    """The `candidates` that both halves must write to memory (`materialized_twice`: a
    matmul reads each in the forward and in the backward) and whose recompute normalizes and
    narrows: it reads a statistic (a reduction's result, under `1/policy.small_source_ratio`
    of the value) and full-size sources that outweigh the value, one of them wider.

    That is an RMSNorm's bf16 output under autocast, read by the projections' weight
    gradients. The forward writes it anyway; recomputed, the backward runs one more kernel
    that reads the float32 block input and the row statistic and writes it again (the
    normalization's own backward is a reduction kernel it does not join). Saving it costs its
    bf16 bytes and no traffic. A value computed from full-size values alone (a SiLU product:
    its recompute joins the SiLU backward's kernel, one more store) or of the same width as
    its sources (ResNet's batch-norm-ReLU outputs, bf16 from bf16) is left to the cut."""
    banned: set[str] = set()
    for name in candidates:
        index = producer.get(name)
        if name not in materialized_twice or index is None:
            continue
        if not is_recomputable(nodes[index].target) or is_view(nodes[index].target):
            continue
        size = sizes.get(name, 0)
        counted = [
            source
            for source in recompute_sources(name, nodes, producer, stops)
            if source not in held_anyway
        ]
        full = [s for s in counted if sizes.get(s, 0) * policy.small_source_ratio >= size]
        statistics = [s for s in counted if s not in full]
        if (
            statistics
            and sum(sizes.get(s, 0) for s in full) > size
            and any(widths.get(s, 0) > widths.get(name, 0) for s in full)
        ):
            banned.add(name)
    return banned


def banned_lone_recomputes(
    candidates: Sequence[str],
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    sizes: Mapping[str, int],
    users: Mapping[str, Sequence[int]],
    resident: Collection[str],
    unfused_backward_readers: Mapping[str, Collection[int]],
    backward_nodes: Collection[int],
    stops: Collection[str],
    policy: RecomputePolicy,
) -> set[str]:
    """The `candidates` that both halves write to memory (`unfused_backward_readers` maps each
    to the backward ops that read it unfused; the forward reads it unfused too) and whose
    recompute in the backward would be a kernel of its own.

    A recompute joins a backward kernel when every full-size source it reads (at least
    `1/policy.small_source_ratio` of the value) is also read by a fusible backward op that does
    not wait for the value's unfused readers: ember-inductor moves the recompute into that
    kernel (Llama's `silu(gate) * up` into the SiLU backward's, which reads gate and up), one
    more store. Otherwise (ResNet's batch-norm-ReLU output: the batch-norm backward, the only
    other reader of the convolution output, waits for the next convolution's backward, which
    reads the ReLU output) the backward runs a kernel that reads the sources and writes the
    value, which the forward wrote anyway: saving it costs its bytes and no traffic. Values
    computed from `resident` values alone (parameters, buffers: the bf16 weight casts) are
    left to the cut: saving them would keep a second copy of the weights through the step."""
    banned: set[str] = set()
    backward = set(backward_nodes)
    for name in candidates:
        index = producer.get(name)
        readers = unfused_backward_readers.get(name)
        if index is None or not readers:
            continue
        if not is_recomputable(nodes[index].target) or is_view(nodes[index].target):
            continue
        size = sizes.get(name, 0)
        sources = [s for s in recompute_sources(name, nodes, producer, stops) if s not in resident]
        if not sources:
            continue  # a copy of the weights, or made from nothing (a mask from `arange`)
        full = [s for s in sources if sizes.get(s, 0) * policy.small_source_ratio >= size]
        waiting = _waiting_on(readers, nodes, backward, users)
        joinable = backward - waiting - set(readers)
        if any(not _read_by_fusible(s, joinable, nodes, users) for s in full):
            banned.add(name)
    return banned


def banned_weight_copies(
    candidates: Sequence[str],
    nodes: Sequence[Node],
    producer: Mapping[str, int],
    resident: Collection[str],
    library_twice: Collection[str],
    stops: Collection[str],
) -> set[str]:
    """The `candidates` that a library kernel reads in both halves (`library_twice`) and that
    are computed from `resident` values alone (parameters, buffers): under autocast, the bf16
    copy of each weight that a matmul or convolution reads in the forward and again for the
    input gradient.

    Recomputed, the backward casts every weight again, a kernel per weight that reads the
    float32 parameter and writes the copy the forward already wrote (Llama-8L: 0.56 ms of
    casts a step on the H100 against torch.compile's 0.27). Saved, it costs the copy's bytes
    held into the backward (freed at its last use there) and no traffic; torch.compile saves
    them too (its ban on recomputing what the backward materializes). Values made from nothing
    (a mask from `arange`) are left to the cut."""
    banned: set[str] = set()
    for name in candidates:
        index = producer.get(name)
        if index is None or name not in library_twice:
            continue
        if not is_recomputable(nodes[index].target) or is_view(nodes[index].target):
            continue
        sources = recompute_sources(name, nodes, producer, stops)
        if sources and all(source in resident for source in sources):
            banned.add(name)
    return banned


def _waiting_on(
    readers: Collection[int],
    nodes: Sequence[Node],
    backward: Collection[int],
    users: Mapping[str, Sequence[int]],
) -> set[int]:
    """The backward ops that run after `readers`: those that depend on their results, and
    fusible ops (pointwise, casts, views) whose every reader runs after them, as these are
    computed in their readers' kernels (the batch-norm backward's cast of the convolution
    output, which needs no tangent, runs in the kernels that wait for the gradient)."""
    results = {v.name for index in readers for v in nodes[index].output_values()}
    ordered = sorted(backward)
    waiting: set[int] = set()
    for index in ordered:
        if index in readers or index < min(readers):
            continue
        if any(ref.name in results for ref in references(nodes[index])):
            waiting.add(index)
            results.update(v.name for v in nodes[index].output_values())
    for index in reversed(ordered):
        if index in waiting or index in readers or not is_recomputable(nodes[index].target):
            continue
        consumers = {u for v in nodes[index].output_values() for u in users.get(v.name, ())}
        if consumers and consumers <= waiting:
            waiting.add(index)
    return waiting


def _read_by_fusible(
    source: str,
    ops: Collection[int],
    nodes: Sequence[Node],
    users: Mapping[str, Sequence[int]],
) -> bool:
    """Whether one of `ops` reads `source` (directly or through views) inside a kernel of its
    own (a pointwise op, a cast), where a recompute of a value from `source` can join it."""
    pending, seen = [source], {source}
    while pending:
        current = pending.pop()
        for index in users.get(current, ()):
            node = nodes[index]
            if index in ops and is_recomputable(node.target) and not is_view(node.target):
                return True
            if is_view(node.target):
                for value in node.output_values():
                    if value.name not in seen:
                        seen.add(value.name)
                        pending.append(value.name)
    return False
