"""The runtime wrapper: an `autograd.Function` over the compiled forward and backward.

`CompiledFunction` is what `aot` returns. Called with grad enabled and an input that requires
grad, it runs the compiled forward inside an autograd.Function that saves what the partition
chose and runs the compiled backward on `.backward()`; otherwise it runs the compiled pure
Graph (no backward). Either way it then copies new values into the inputs the Graph wrote,
and rebuilds outputs that are views of inputs from the real inputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ember.autodiff.errors import AutodiffError, DoubleBackwardError
from ember.autodiff.functionalize import Signature
from ember.autodiff.tangent_reach import unreached
from ember.autodiff.view_rules import apply_view
from ember.prims import InputKind, Ref, tree_flatten, tree_unflatten


@dataclass
class TrainingStep:
    """The compiled forward and backward for one pattern of inputs that require grad."""

    forward: Callable[..., Any]  # (primals...) -> (outputs..., saved...)
    backward: Callable[..., Any]  # (saved..., tangents...) -> (gradient per primal...)
    num_forward_outputs: int
    differentiable: tuple[bool, ...]  # per forward output: it has a tangent
    clone_saved: tuple[int, ...]  # saved primals the copy-back overwrites: saved as copies
    # per gradient, the tangents it depends on (`tangent_reach`): one that depends on missing
    # tangents alone is None, as in eager; empty: every gradient as the backward gives it
    tangent_reach: tuple[frozenset[int], ...] = ()
    # derived from `differentiable` once, not on every call
    frozen: tuple[int, ...] = field(init=False)  # outputs without a tangent
    tangent_outputs: tuple[int, ...] = field(init=False)  # outputs with one
    # the backward's boxed entry, if its compiler gives one (`backward.call_boxed`): it takes
    # (saved..., tangents...) as a list it empties, and drops each value after its last use
    boxed_backward: Callable[[list[Any]], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.frozen = tuple(i for i, diff in enumerate(self.differentiable) if not diff)
        self.tangent_outputs = tuple(i for i, diff in enumerate(self.differentiable) if diff)
        self.boxed_backward = getattr(self.backward, "call_boxed", None)


class _CompiledFunction(torch.autograd.Function):
    """Runs a TrainingStep: forward now, backward when autograd asks."""

    @staticmethod
    def forward(ctx: Any, step: TrainingStep, *primals: Any) -> Any:
        results = step.forward(*primals)
        if not isinstance(results, (tuple, list)):
            results = (results,)
        count = step.num_forward_outputs
        outputs = tuple(results[:count])
        saved = results[count:]
        if step.clone_saved:
            saved = list(saved)
            for index in step.clone_saved:
                saved[index] = saved[index].clone()
        ctx.step = step
        ctx.save_for_backward(*saved)
        if step.frozen:
            frozen = [outputs[i] for i in step.frozen if isinstance(outputs[i], torch.Tensor)]
            if frozen:
                ctx.mark_non_differentiable(*frozen)
        # Autograd would hand the backward a zero-filled gradient for every output nobody
        # differentiated, the non-differentiable ones too (a ResNet-50 training step: 159
        # batch-norm buffers, 159 allocations and fill kernels, all thrown away): only the
        # differentiable outputs get zeros, made here when their gradient is missing.
        ctx.set_materialize_grads(False)
        ctx.tangent_specs = [
            (out.shape, out.dtype, out.device) if isinstance(out, torch.Tensor) else None
            for out in map(outputs.__getitem__, step.tangent_outputs)
        ]
        return outputs

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        step: TrainingStep = ctx.step
        given = map(grad_outputs.__getitem__, step.tangent_outputs)
        tangents = [
            grad.contiguous() if grad is not None else _zeros(spec)
            for grad, spec in zip(given, ctx.tangent_specs)
        ]
        missing = (
            frozenset(
                index
                for index, output in enumerate(step.tangent_outputs)
                if grad_outputs[output] is None
            )
            if step.tangent_reach
            else None
        )
        gradients = _CompiledFunction._gradients(ctx, step, tangents)
        if missing:  # outputs nobody differentiated: what only they reach gets no gradient
            return (None, *unreached(gradients[1:], step.tangent_reach, missing))
        return gradients

    @staticmethod
    def _gradients(ctx: Any, step: TrainingStep, tangents: list[Any]) -> Any:
        """(None, gradient per primal...): the backward run on the saved values and
        `tangents` (a list it empties)."""
        if not torch.is_grad_enabled() and step.boxed_backward is not None:
            # Saved values freed after their last use in the backward, as torch.compile's
            # runtime does: the list below holds the only references the backward's wrapper
            # does not drop (unpacking checks in-place writes and runs saved-tensor hooks);
            # autograd's own are released now unless the graph is kept for another backward
            # (retain_graph=True: a later backward unpacks them again).
            args = [*ctx.saved_tensors, *tangents]
            tangents.clear()  # the caller's list: the args hold the only references now
            ctx.maybe_clear_saved_tensors()
            if _saved_kept(ctx):
                # retain_graph=True: another backward reads them, so the call must leave them
                # alone (the boxed call lets a CUDA graph reuse their memory)
                return (None, *_as_tuple(step.backward(*args)))
            return (None, *_as_tuple(step.boxed_backward(args)))
        saved = ctx.saved_tensors
        if not torch.is_grad_enabled():
            return (None, *_as_tuple(step.backward(*saved, *tangents)))
        # create_graph=True: compute the gradients, and make a second backward through them
        # fail with a clear message instead of silently giving wrong results.
        with torch.no_grad():
            grads = list(_as_tuple(step.backward(*saved, *tangents)))
        watched = [t for t in (*tangents, *saved) if t is not None and t.requires_grad]
        present = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
        if watched and present:
            guarded = _NoDoubleBackward.apply(len(present), *[grads[i] for i in present], *watched)
            for i, g in zip(present, guarded):
                grads[i] = g
        return (None, *grads)


class _NoDoubleBackward(torch.autograd.Function):
    """Identity on the gradients, whose own backward raises DoubleBackwardError."""

    @staticmethod
    def forward(ctx: Any, count: int, *tensors: Any) -> Any:
        return tuple(t.clone() for t in tensors[:count])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        raise DoubleBackwardError(
            "double backward (a gradient of a gradient) through an ember-compiled graph is not "
            "supported; compute the higher-order gradient outside ember.compile, or "
            "use backend='eager' for this function"
        )


class CompiledFunction:
    """The callable `aot` returns; it takes inputs as `ember.prims.run(graph, ...)` does."""

    def __init__(
        self,
        signature: Signature,
        state: Mapping[str, torch.Tensor],
        inference: Callable[[], Callable[..., Any]],
        training: Callable[[tuple[bool, ...]], TrainingStep],
    ) -> None:
        self.signature = signature
        self._state = state
        self._make_inference = inference
        self._make_training = training
        self._inference: Callable[..., Any] | None = None
        self._training: dict[tuple[bool, ...], TrainingStep] = {}
        # the common call: the inputs are the flat leaves, in the pure Graph's order, with no
        # state to bind (capture passes parameters as inputs): no tree walk, no spec compare
        self._in_order = (
            signature.in_spec.kind == "tuple"
            and all(child.kind == "leaf" for child in signature.in_spec.children)
            and len(signature.input_leaves) == len(signature.inputs)
            and all(
                graph_input.kind is InputKind.USER
                and isinstance(leaf, Ref)
                and leaf.name == graph_input.value.name
                for leaf, graph_input in zip(signature.input_leaves, signature.inputs)
            )
        )
        # the copy-back's foreach groups, by mutation: found on the first copy-back
        self._copy_groups: list[list[int]] | None = None

    def __call__(self, *inputs: Any, state: Mapping[str, torch.Tensor] | None = None) -> Any:
        flat = self.flat_inputs(inputs, state or {})
        flags = _requires_grad_flags(flat) if torch.is_grad_enabled() else None
        if flags is not None and any(flags):
            step = self._training.get(flags)
            if step is None:
                step = self._training[flags] = self._make_training(flags)
            results = _CompiledFunction.apply(step, *flat) if step.num_forward_outputs else ()
        else:
            if self._inference is None:
                self._inference = self._make_inference()
            results = _as_tuple(self._inference(*flat))
        self._copy_back(flat, results)
        return self._outputs(flat, results)

    def flat_inputs(
        self, inputs: Sequence[Any], state: Mapping[str, torch.Tensor]
    ) -> list[torch.Tensor]:
        """The pure Graph's flat inputs: user inputs placed by the signature, then state."""
        signature = self.signature
        if (
            self._in_order
            and not state
            and len(inputs) == len(signature.inputs)
            and _CONTAINERS.isdisjoint(map(type, inputs))
        ):
            return list(inputs)  # what the walk below makes of them (ResNet-50: 316 inputs)
        leaves, spec = tree_flatten(tuple(inputs))
        if spec != signature.in_spec:
            raise AutodiffError(
                f"the compiled graph takes inputs shaped {signature.in_spec}, got {spec}; pass "
                "the inputs the graph was captured with"
            )
        by_name = {
            leaf.name: value
            for leaf, value in zip(signature.input_leaves, leaves)
            if isinstance(leaf, Ref)
        }
        flat: list[torch.Tensor] = []
        for graph_input in signature.inputs:
            name = graph_input.value.name
            if graph_input.kind is InputKind.USER:
                flat.append(by_name[name])
                continue
            target = graph_input.target or name
            value = state.get(target, self._state.get(target))
            if value is None:
                raise AutodiffError(
                    f"no value for {graph_input.kind.value} {target!r}; pass it in state={{...}}"
                )
            flat.append(value)
        return flat

    def _copy_back(self, flat: list[torch.Tensor], results: Sequence[Any]) -> None:
        targets: list[torch.Tensor] = []
        news: list[torch.Tensor] = []
        for input_index, output_index in self.signature.mutations:
            new = results[output_index]
            target = flat[input_index]
            # A leaf that requires grad can only have been written under no_grad; a non-leaf
            # keeps its autograd history through the copy, as after an in-place op in eager.
            if new.requires_grad and not target.is_leaf:
                target.copy_(new)
            else:
                targets.append(target)
                news.append(new)
        if not targets:
            return
        with torch.no_grad():
            if len(targets) > 1 and _distinct_storages(targets, news):
                # One launch per dtype (a ResNet-50 training step updates 159 running stats:
                # a copy each was 159 device copies and 159 Python calls a step); the foreach
                # kernel takes one dtype and device, a mixed call falls back to a copy each.
                # The groups are found once (by position: the Graph fixes each value's dtype
                # and device; grouping 156 pairs a call cost ~240 us on the CPU).
                groups = self._copy_groups
                if groups is None or sum(map(len, groups)) != len(targets):
                    groups = self._copy_groups = _foreach_groups(targets, news)
                for group in groups:
                    if len(group) == len(targets):
                        torch._foreach_copy_(targets, news)
                    else:
                        torch._foreach_copy_([targets[i] for i in group], [news[i] for i in group])
                return
            for target, new in zip(targets, news):  # in order: they may overlap
                target.copy_(new)

    def _outputs(self, flat: list[torch.Tensor], results: Sequence[Any]) -> Any:
        leaves: list[Any] = []
        for source in self.signature.outputs:
            if source.kind == "literal":
                leaves.append(source.literal)
            elif source.kind == "computed":
                leaves.append(results[source.index])
            else:
                tensor: Any = (
                    flat[source.index] if source.kind == "input" else results[source.index]
                )
                for step in source.steps:
                    tensor = apply_view(step, tensor)
                leaves.append(tensor)
        return tree_unflatten(leaves, self.signature.out_spec)


_CONTAINERS = frozenset((tuple, list, dict))  # what tree_flatten walks into
_requires_grad = operator.attrgetter("requires_grad")


def _requires_grad_flags(flat: list[Any]) -> tuple[bool, ...]:
    """Per input, whether it is a tensor that requires grad (one C-level pass when every input
    is a tensor: ResNet-50's 316 inputs 86 -> ~30 us on the CPU)."""
    try:
        return tuple(map(_requires_grad, flat))
    except AttributeError:  # a number or None among the inputs
        return tuple(isinstance(t, torch.Tensor) and t.requires_grad for t in flat)


def _foreach_groups(
    targets: Sequence[torch.Tensor], news: Sequence[torch.Tensor]
) -> list[list[int]]:
    """Positions of the copy-back pairs grouped by (dtype, device) of target and new value."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, (target, new) in enumerate(zip(targets, news)):
        key = (target.dtype, new.dtype, target.device, new.device)
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def _zeros(spec: tuple[torch.Size, torch.dtype, torch.device] | None) -> Any:
    """The gradient autograd would have materialized for an output nobody differentiated."""
    if spec is None:
        return None
    shape, dtype, device = spec
    return torch.zeros(shape, dtype=dtype, device=device)


def _distinct_storages(targets: Sequence[torch.Tensor], news: Sequence[torch.Tensor]) -> bool:
    """Whether no two of the tensors share memory (then the copies commute)."""
    storages = {t.untyped_storage().data_ptr() for t in (*targets, *news)}
    return len(storages) == len(targets) + len(news)


def _as_tuple(results: Any) -> tuple[Any, ...]:
    if isinstance(results, (tuple, list)):
        return tuple(results)
    return (results,)


def _saved_kept(ctx: Any) -> bool:
    """Whether autograd kept `ctx`'s saved values after `maybe_clear_saved_tensors()` (the
    graph is retained for another backward)."""
    try:
        kept = ctx.saved_tensors
    except RuntimeError:  # freed: the usual backward
        return False
    return kept is not None
