"""Kernels of the linear-algebra, complex-number and FFT prims."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ember_numpy_backend.kernels import kernel

Array = Any  # numpy.ndarray


@kernel("matmul")
def _matmul(a: Array, b: Array) -> Array:
    return np.matmul(a, b)


@kernel("convolution")
def _convolution(
    x: Array,
    weight: Array,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> Array:
    """Cross-correlation as a sum over kernel offsets of strided input views times weights."""
    spatial = x.ndim - 2
    padded = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel_sizes = weight.shape[2:]
    out_sizes = [
        (padded.shape[2 + i] - dilation[i] * (kernel_sizes[i] - 1) - 1) // stride[i] + 1
        for i in range(spatial)
    ]
    batch, out_channels = x.shape[0], weight.shape[0]
    per_group_in, per_group_out = x.shape[1] // groups, out_channels // groups
    out = np.zeros([batch, out_channels, *out_sizes], dtype=x.dtype)
    for group in range(groups):
        inputs = padded[:, group * per_group_in : (group + 1) * per_group_in]
        weights = weight[group * per_group_out : (group + 1) * per_group_out]
        acc = out[:, group * per_group_out : (group + 1) * per_group_out]
        for offset in itertools.product(*(range(k) for k in kernel_sizes)):
            steps = tuple(
                slice(
                    offset[i] * dilation[i],
                    offset[i] * dilation[i] + (out_sizes[i] - 1) * stride[i] + 1,
                    stride[i],
                )
                for i in range(spatial)
            )
            window = inputs[(slice(None), slice(None), *steps)]
            taps = weights[(slice(None), slice(None), *offset)]  # [out, in]
            acc += np.einsum("nc...,oc->no...", window, taps)
    return out


# ---- complex numbers --------------------------------------------------------------------


@kernel("real")
def _real(a: Array) -> Array:
    return np.real(a).copy()


@kernel("imag")
def _imag(a: Array) -> Array:
    return np.imag(a).copy()


@kernel("complex")
def _complex(re: Array, im: Array) -> Array:
    return re + 1j * im


@kernel("conj")
def _conj(a: Array) -> Array:
    return np.conj(a)


# ---- FFT: unnormalized in both directions ("forward" puts NumPy's 1/n on the forward) ----


@kernel("fft_c2c")
def _fft_c2c(a: Array, dims: list[int], forward: bool) -> Array:
    if forward:
        return np.fft.fftn(a, axes=dims, norm="backward")
    return np.fft.ifftn(a, axes=dims, norm="forward")


@kernel("fft_r2c")
def _fft_r2c(a: Array, dims: list[int]) -> Array:
    return np.fft.rfftn(a, axes=dims, norm="backward")


@kernel("fft_c2r")
def _fft_c2r(a: Array, dims: list[int], last_dim_size: int) -> Array:
    sizes = [a.shape[d] for d in dims[:-1]] + [last_dim_size]
    return np.fft.irfftn(a, s=sizes, axes=dims, norm="forward")
