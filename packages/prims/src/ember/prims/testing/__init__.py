"""Reference models for checking a layer or a backend against eager PyTorch.

The small model zoo every ember test suite (and a vendor's) runs: an MLP, a CNN with
BatchNorm, and a pre-norm transformer block with causal attention. Each comes with an input
factory of the size the tests use, so a check is `model(x)` against its compiled twin; and
`assert_same_step`, a training step's outputs and gradients against eager's.
"""

from ember.prims.testing.gradients import assert_same_step
from ember.prims.testing.models import MLP, AttentionBlock, SmallCNN, example_input

__all__ = ["MLP", "AttentionBlock", "SmallCNN", "assert_same_step", "example_input"]
