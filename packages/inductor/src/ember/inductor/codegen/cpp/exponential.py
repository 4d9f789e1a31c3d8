"""`ember_exp`, the float32 exponential that generated C++ kernels call, and its spelling.

glibc's vector math library (libmvec, which GCC calls for `std::exp` in a vectorized loop)
sends every SIMD vector holding an input outside about [-87, 88] through a scalar call per
such lane. A causal-masked softmax exponentiates -inf in half of its lanes: `_ZGVeN16v_expf`
took 11.5 ms over 4M such values against 1.5 ms over finite ones (and 20 ms over all -inf),
so TinyDecoder's attention softmax kernel spent 13 of its 15 ms in exp. `ember_exp` is
Sleef's `expf_u10` algorithm (what ATen's `Vectorized<float>::exp` calls), branch-free:
`x = q ln2 + s` with `|s| <= ln2/2`, `exp(s)` by a degree-6 polynomial, times `2^q` in two
factors so that results below FLT_MIN come out subnormal; inputs below -104 give 0, above 104
infinity, NaN itself. At most 1.23 ulp from the exact value over every 7th float32 (glibc's
`expf` is correctly rounded in nearly all cases); 1.7 ms over 4M finite values, 2.0 ms with
half of them -inf. `omp declare simd` makes GCC emit vector variants that the kernels'
vectorized loops call (as they called libmvec's), so each call site is one exp of a loop.
It is not `static`, so that there is a variant for every x86 vector width a loop may take
(a static one had only AVX-512's 16 lanes: on a Rocket Lake, tuned for 256-bit vectors,
every loop with an exp ran scalar; see the comment in `EXP_PRELUDE`).
"""

from __future__ import annotations

EXP_PRELUDE = r"""
// exp of a float without libmvec's per-lane slow path for -inf and other out-of-range inputs
// (Sleef's expf_u10, ATen's vectorized exp): see ember-inductor's codegen/cpp/exponential.py
static inline float ember_pow2i(int32_t q) {
  int32_t bits = (q + 0x7f) << 23;
  float result;
  __builtin_memcpy(&result, &bits, sizeof result);
  return result;
}
// not `static`: GCC makes a static function's SIMD clone for one ISA only (AVX-512's 16
// lanes wherever AVX-512F is on), which no loop vectorized at 8 lanes can call (CPUs tuned
// for 256-bit vectors); a visible one gets a clone for SSE2, AVX, AVX2 and AVX-512 each.
// `inline` keeps it out of modules that never call it, hidden keeps each module's own copy;
// `const` because GCC does not infer it for an inline (COMDAT) function, and a call that
// may write memory keeps its loop from being if-converted and vectorized
#pragma omp declare simd notinbranch
__attribute__((const, noinline, visibility("hidden"))) inline float ember_exp(float x) {
  // NaN and the saturated ranges compute exp(0) (no subnormal work) and are selected below
  float d = (x >= -104.0f && x <= 104.0f) ? x : 0.0f;
  float q = __builtin_rintf(d * 1.442695040888963407359924681001892137426645954152985934f);
  float s = __builtin_fmaf(q, -0.693145751953125f, d);
  s = __builtin_fmaf(q, -1.428606765330187045e-06f, s);
  float u = 0.000198527617612853646278381f;
  u = __builtin_fmaf(u, s, 0.00139304355252534151077271f);
  u = __builtin_fmaf(u, s, 0.00833336077630519866943359f);
  u = __builtin_fmaf(u, s, 0.0416664853692054748535156f);
  u = __builtin_fmaf(u, s, 0.166666671633720397949219f);
  u = __builtin_fmaf(u, s, 0.5f);
  u = __builtin_fmaf(s * s, u, s + 1.0f);
  int32_t n = static_cast<int32_t>(q);
  u = u * ember_pow2i(n >> 1) * ember_pow2i(n - (n >> 1));
  u = x < -104.0f ? 0.0f : u;
  u = x > 104.0f ? __builtin_inff() : u;
  return x != x ? x : u;
}
"""


def exp(operands: list[str], cpp_type: str) -> str:
    """The C++ exp of one operand of type `cpp_type`: `ember_exp` for float, else `std::exp`."""
    if cpp_type == "float":
        return f"ember_exp({operands[0]})"
    return f"std::exp({operands[0]})"
