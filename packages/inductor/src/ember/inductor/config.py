"""ember-inductor's settings: one frozen config class read from `EMBER_*` variables."""

from __future__ import annotations

from typing import Literal

from ember.prims.config import config_class, setting


@config_class
class InductorConfig:
    """Settings of ember-inductor: caching, fusion and autotuning."""

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
    mixed_order_reductions: bool = setting(
        True,
        env="EMBER_INDUCTOR_MIXED_ORDER_REDUCTIONS",
        help="Compute a split column sum (a norm's weight gradient) inside the row reduction "
        "that reads the same maps, on backends that can (scheduler/mixed_order_reductions.py); "
        "off keeps the two kernels.",
        cache_key=True,
    )
    max_autotune: bool = setting(
        False,
        env="EMBER_INDUCTOR_MAX_AUTOTUNE",
        help="Benchmark a few launch configurations of every GPU kernel on its first call and "
        'keep the fastest (cached on disk); `ember.compile(mode="max-autotune")` turns it on.',
        cache_key=False,
    )
    gemm_templates: bool = setting(
        False,
        env="EMBER_INDUCTOR_GEMM_TEMPLATES",
        help="Generate Triton GEMM templates for static-shape mm/addmm/bmm on the GPU, with the "
        "pointwise kernel that reads the product fused into them (bias, activation, residual, "
        "cast), and choose between each template and cuBLAS by timing both on the first call "
        '(cached on disk); `ember.compile(mode="max-autotune")` turns it on.',
        cache_key=True,
    )
    conv_templates: bool = setting(
        False,
        env="EMBER_INDUCTOR_CONV_TEMPLATES",
        help="The default mode's share of `gemm_templates`: convolutions only, each with the "
        "pointwise kernel after it fused in (a ResNet's batch norm and ReLU in inference) as "
        "one Triton implicit-GEMM kernel, launched in a few us where a cuDNN call costs "
        "25-45 us of host time; its first configuration, kept only where timing it against "
        "cuDNN on the first call finds it faster (cached on disk). Off until measured on the "
        "GPU (issue 16's default mode).",
        cache_key=True,
    )
    native_wrapper: Literal["gpu", "always", "never"] = setting(
        "gpu",
        env="EMBER_INDUCTOR_NATIVE_WRAPPER",
        help="Run compiled graphs' wrappers in ember-runtime's C++ interpreter from their "
        "second call on (allocations through ATen, Triton kernels through cuLaunchKernel, "
        "extern ops through the dispatcher's boxed call), where the Python wrapper pays the "
        "interpreter for every line: `gpu` for GPU graphs, `always` also for CPU graphs (whose "
        "C++ kernels it calls back in Python), `never` keeps the Python wrapper. The "
        "interpreter is built once per torch and Python with g++ (about 20-40 s); graphs it "
        "cannot translate (size symbols, host inputs) keep the Python wrapper.",
        cache_key=False,
    )
    horizontal_launches: bool = setting(
        True,
        env="EMBER_INDUCTOR_HORIZONTAL_LAUNCHES",
        help="Launch the pointwise kernels that read only a graph's inputs (autocast's casts "
        "of weights and biases: over half of a transformer's inference launches) as a few "
        "launches, each part on programs of its own, grouped within about a layer "
        "(scheduler/horizontal.py); off: one launch per kernel.",
        cache_key=True,
    )
    autotune_reductions: bool = setting(
        False,
        env="EMBER_INDUCTOR_AUTOTUNE_REDUCTIONS",
        help="Benchmark the launch configurations of every GPU reduction kernel on its first "
        "call and keep the fastest (cached on disk); `max_autotune` does this for every "
        "kernel. Off by default: compiling every candidate made training's first call 4-5x "
        "longer on the H100 (BERT 42 -> 203 s) for 0-7% less GPU time.",
        cache_key=False,
    )
    cached_cubins: bool = setting(
        True,
        env="EMBER_INDUCTOR_CACHED_CUBINS",
        help="Warm starts on a GPU launch a graph's kernels from the cubins an earlier process "
        "kept in the on-disk cache, through the CUDA driver: no Triton import, no Triton cache "
        "lookups (the cubins are kept either way). A module whose index or cubin is missing, "
        "damaged or refused by the driver loads with Triton; `EMBER_LOGS=inductor` says how "
        "each module loaded. 0 always loads with Triton.",
        cache_key=False,
    )
    check_bounds: bool = setting(
        True,
        env="EMBER_INDUCTOR_CHECK_BOUNDS",
        help="Before generating code, prove that every load and store index of every kernel "
        "stays inside its buffer (a compiler bug otherwise corrupts memory or kills the CUDA "
        "context) and stop the compile if one does not; off skips the check.",
        cache_key=False,
    )
    reuse_buffers: bool = setting(
        True,
        env="EMBER_INDUCTOR_REUSE_BUFFERS",
        help="Place a new buffer in the memory of a dead one of the same dtype and span, or in "
        "place of a buffer its pointwise kernel reads for the last time (fewer allocations, "
        "lower peak memory); off allocates every buffer fresh.",
        cache_key=True,
    )
    wider_in_place: bool = setting(
        True,
        env="EMBER_INDUCTOR_WIDER_IN_PLACE",
        help="Also write a kernel's result over a training backward's saved value it reads for "
        "the last time (when the call holds it alone, checked at run time) and, in a kernel with "
        "reductions, a plain store over a buffer only it reads; off: only pure pointwise "
        "kernels write in place, never over a graph input.",
        cache_key=True,
    )
    pad_matmuls: bool = setting(
        True,
        env="EMBER_INDUCTOR_PAD_MATMULS",
        help="Pad large 16-bit GPU matmuls whose leading dimensions are not 16-byte multiples "
        "(cuBLAS falls back to slow alignment-1 kernels; GPT-2's LM head, vocabulary 50257).",
        cache_key=True,
    )
    padded_outputs: bool = setting(
        True,
        env="EMBER_INDUCTOR_PADDED_OUTPUTS",
        help="Return a padded matmul's product that is a graph output as a view of the padded "
        "buffer (its rows keep the padded stride, as torch.compile returns it) instead of "
        "copying it into row-major strides (GPT-2's and BERT's logits: 0.3 ms and 313-420 MiB "
        "of peak memory on the H100).",
        cache_key=True,
    )
    pointwise_convolutions_as_matmuls: bool = setting(
        True,
        env="EMBER_INDUCTOR_POINTWISE_CONVOLUTIONS_AS_MATMULS",
        help="Run a 16-bit 1x1 convolution of stride 1 whose maps are channels-last (and its "
        "input and weight gradients) as matrix multiplies over the maps' rows: the same "
        "products through `torch.mm`, a few us of host time where a cuDNN call costs 20-60 "
        "(lowering/pointwise_convolutions.py); off keeps every convolution a cuDNN call.",
        cache_key=True,
    )
    layout_optimization: Literal["auto", "channels_last", "off"] = setting(
        "auto",
        env="EMBER_INDUCTOR_LAYOUT_OPTIMIZATION",
        help="Channels-last activations for convolution-heavy graphs: 'auto' when the code "
        "generator states that its convolutions prefer channels-last (C++ and Triton: oneDNN's "
        "and cuDNN's NHWC kernels, no NCHW<->NHWC conversions) and at least two 2-D "
        "convolutions carry most of the graph's work, 'channels_last' for every graph with "
        "convolutions, 'off' keeps eager's NCHW strides.",
        cache_key=True,
    )
