"""Why a call did not run from a CUDA graph: a catalogue of stable reason ids.

Each entry has an id (used in logs and tests), a message template in user terms and a hint
saying what to do. The tree logs a reason once per compiled graph through the `perf_hints`
topic (`EMBER_LOGS=perf_hints`), so a skipped or re-recorded graph never goes unexplained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reason:
    """One catalogue entry: `id`, a `message` template (str.format fields) and a `hint`."""

    id: str
    message: str
    hint: str

    def format(self, **fields: Any) -> str:
        return f"[{self.id}] {self.message.format(**fields)}; {self.hint}"


CPU_TENSOR = Reason(
    "cpu_tensor",
    "graph {graph} got a CPU tensor as input {position}, which a CUDA graph cannot read; "
    "it runs without CUDA graphs",
    "move the tensor to the GPU before the call (or pass a Python number)",
)
CPU_IN_GRAPH = Reason(
    "cpu_in_graph",
    "graph {graph} makes a CPU tensor inside ({where}), which a CUDA graph cannot capture; "
    "it runs without CUDA graphs",
    "create the tensor on the GPU (`device=x.device`) or pass it in as a Python number",
)
CPU_GRAPH = Reason(
    "cpu_graph",
    "graph {graph} runs on {device}, and CUDA graphs need a CUDA device; it runs without them",
    "mode='reduce-overhead' only changes graphs that run on CUDA",
)
MUTATED_INPUT = Reason(
    "mutated_input",
    "graph {graph} writes into its input {position}, which is not a parameter or buffer; a "
    "CUDA graph would write into its own copy instead, so the graph runs without CUDA graphs",
    "return the new value instead of updating the input in place, or compile that code "
    "without mode='reduce-overhead'",
)
DYNAMIC_SHAPES = Reason(
    "dynamic_shapes",
    "graph {graph} has been recorded for {count} different input shapes or addresses (the "
    "limit); calls with new ones run without CUDA graphs",
    "pad inputs to a few fixed sizes, or raise EMBER_CUDAGRAPH_MAX_RECORDINGS",
)
STATIC_INPUT_MOVED = Reason(
    "static_input_moved",
    "parameter or buffer {position} of graph {graph} is at a new address (it was replaced, "
    "not updated in place); the graph is recorded again",
    "update parameters in place (`p.copy_(...)`, optimizers do) rather than assigning new tensors",
)
UNCAPTURABLE = Reason(
    "uncapturable",
    "graph {graph} could not be captured into a CUDA graph ({error}); it runs without CUDA graphs",
    "an operation in it synchronizes with the CPU or is not allowed while capturing; "
    "compile that code without mode='reduce-overhead'",
)
PENDING_BACKWARD = Reason(
    "pending_backward",
    "graph {graph} was called {depth} times in one step while backward passes were pending; "
    "further calls run without CUDA graphs until the next step",
    "call backward() between forward calls, run inference under torch.no_grad(), or call "
    "ember.cudagraph_mark_step_begin() at the start of each step",
)
SAVED_VALUES_LIVE = Reason(
    "saved_values_live",
    "graph {graph} was first called between a forward and the backward whose recording reuses "
    "the forward's saved-value memory ({forward}); recording it there could overwrite values "
    "the backward still reads, so it runs without CUDA graphs at that point",
    "call it in the same place in every step (the tree records it on the first one), or call "
    "ember.cudagraph_mark_step_begin() at the start of each step",
)
RETAINED_SAVED = Reason(
    "retained_saved",
    "backward graph {graph} was called while its saved values are kept for another backward "
    "(retain_graph=True); its recording reuses their memory, so this call runs without CUDA "
    "graphs",
    "call backward() without retain_graph=True in the steps you want replayed",
)

CATALOGUE: dict[str, Reason] = {
    reason.id: reason
    for reason in (
        CPU_TENSOR,
        CPU_IN_GRAPH,
        CPU_GRAPH,
        MUTATED_INPUT,
        DYNAMIC_SHAPES,
        STATIC_INPUT_MOVED,
        UNCAPTURABLE,
        PENDING_BACKWARD,
        SAVED_VALUES_LIVE,
        RETAINED_SAVED,
    )
}

OVERWRITTEN = (
    "ember: this tensor is an output of {graph} run as a CUDA graph (mode='reduce-overhead'), "
    "and a later step replayed that graph and overwrote it (the output was made in step "
    "{step}). Keep it with `.clone()` before calling the compiled function again, or call "
    "`ember.cudagraph_mark_step_begin()` only once the previous step's outputs are no longer "
    "needed."
)
