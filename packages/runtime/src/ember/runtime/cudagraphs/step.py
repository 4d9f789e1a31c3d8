"""The step marker: `mark_step_begin()` tells every tree that the next call starts a step.

Re-exported as `ember.cudagraph_mark_step_begin` (torch.compiler.cudagraph_mark_step_begin's
counterpart). Call it at the start of each iteration when the tree cannot tell steps apart
on its own, e.g. a training forward whose backward is never run (evaluation with grad on).
"""

from __future__ import annotations

from ember.runtime.cudagraphs.tree import trees


def mark_step_begin() -> None:
    """Start a new step at the next call of a graph compiled with mode='reduce-overhead':
    outputs of the previous step that are still referenced are poisoned (reading one raises
    an error saying to `.clone()` it), and replays may then overwrite their memory."""
    for tree in trees():
        tree.mark_step_begin()
