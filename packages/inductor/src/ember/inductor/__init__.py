"""ember-inductor: lowers ember Graphs to fused kernels.

Today it holds the Graph passes that run before lowering (`eliminate_dead_code`,
`eliminate_common_subexpressions`); the loop-level IR, the scheduler, C++/Triton code
generation and the `inductor` backend come next (see the package README).
"""

from ember.inductor.passes.common_subexpressions import eliminate_common_subexpressions
from ember.inductor.passes.dead_code import eliminate_dead_code
from ember.inductor.passes.effects import (
    SEEDED_RANDOM_OPS,
    SIDE_EFFECT_OPS,
    is_effectful,
    is_seeded_random,
)

__all__ = [
    "SEEDED_RANDOM_OPS",
    "SIDE_EFFECT_OPS",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "is_effectful",
    "is_seeded_random",
]
