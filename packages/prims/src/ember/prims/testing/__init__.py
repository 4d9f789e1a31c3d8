"""Reference models for checking a layer or a backend against eager PyTorch.

The small model zoo every ember test suite (and a vendor's) runs: an MLP, a CNN with
BatchNorm, and a pre-norm transformer block with causal attention. Each comes with an input
factory of the size the tests use, so a check is `model(x)` against its compiled twin.
"""

from ember.prims.testing.models import MLP, AttentionBlock, SmallCNN, example_input

__all__ = ["MLP", "AttentionBlock", "SmallCNN", "example_input"]
