"""ember-inductor's settings: one frozen config class read from `EMBER_*` variables."""

from __future__ import annotations

from ember.prims.config import config_class, setting


@config_class
class InductorConfig:
    """Settings of ember-inductor: caching and fusion."""

    cache: bool = setting(
        True,
        env="EMBER_INDUCTOR_CACHE",
        help="Reuse compiled graphs from ember-runtime's on-disk cache; off regenerates every "
        "graph's code (shared libraries stay cached under a key of their source).",
        cache_key=False,
    )
    fusion: bool = setting(
        True,
        env="EMBER_INDUCTOR_FUSION",
        help="Fuse loop nodes into shared kernels; off gives one kernel per realized buffer "
        "(for debugging and for measuring what fusion buys).",
        cache_key=True,
    )
