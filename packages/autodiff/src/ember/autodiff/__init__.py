"""ember-autodiff: ahead-of-time autograd for ember Graphs.

Today it holds the alias and mutation analysis (`analyze_aliasing`) that functionalization
builds on; functionalization, the joint forward/backward trace, the min-cut partitioner and
the `aot_eager` backend come next (see the package README).
"""

from ember.autodiff.aliasing import (
    UNDECLARED_WRITES,
    AliasInfo,
    InputMutation,
    OutputAlias,
    Write,
    analyze_aliasing,
)
from ember.autodiff.errors import AliasAnalysisError, AutodiffError

__all__ = [
    "UNDECLARED_WRITES",
    "AliasAnalysisError",
    "AliasInfo",
    "AutodiffError",
    "InputMutation",
    "OutputAlias",
    "Write",
    "analyze_aliasing",
]
