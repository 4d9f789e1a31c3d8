"""ATen activation functions and their backward ops written with elementwise prims: relu,
threshold, gelu (exact and tanh), silu, sigmoid, hardtanh, leaky_relu, elu, softplus, mish,
hardswish, hardsigmoid, and the *_backward ops autograd records for them.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ember.prims.decompositions.elementwise import _register_with_inplace, inplace
from ember.prims.decompositions.operands import convert, scalar_like, to_float
from ember.prims.decompositions.table import to_prims
from ember.prims.primitives import prims


def _c(value: float, like: torch.Tensor) -> torch.Tensor:
    return scalar_like(value, like)


def sigmoid(a: torch.Tensor) -> torch.Tensor:
    x = convert(a, to_float(a.dtype))
    return prims.div(_c(1, x), prims.add(_c(1, x), prims.exp(prims.neg(x))))


_register_with_inplace("sigmoid", ("default",), sigmoid)


def relu(a: torch.Tensor) -> torch.Tensor:
    if a.dtype == torch.bool:
        return prims.clone(a)
    zero = _c(0, a)
    return prims.where(prims.le(a, zero), zero, a)


_register_with_inplace("relu", ("default",), relu)


@to_prims("aten::threshold.default")
def _threshold(a: torch.Tensor, threshold: Any, value: Any) -> torch.Tensor:
    return prims.where(prims.le(a, _c(threshold, a)), _c(value, a), a)


to_prims("aten::threshold_.default")(inplace(_threshold))


@to_prims("aten::threshold_backward.default")
def _threshold_backward(grad: torch.Tensor, a: torch.Tensor, threshold: Any) -> torch.Tensor:
    return prims.where(prims.le(a, _c(threshold, a)), _c(0, grad), grad)


def gelu(a: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    if approximate == "tanh":
        inner = prims.mul(
            _c(math.sqrt(2 / math.pi), a),
            prims.add(a, prims.mul(_c(0.044715, a), prims.mul(a, prims.mul(a, a)))),
        )
        return prims.mul(prims.mul(_c(0.5, a), a), prims.add(_c(1, a), prims.tanh(inner)))
    cdf = prims.mul(
        _c(0.5, a), prims.add(_c(1, a), prims.erf(prims.mul(a, _c(1 / math.sqrt(2), a))))
    )
    return prims.mul(a, cdf)


_register_with_inplace("gelu", ("default",), gelu)


@to_prims("aten::gelu_backward.default")
def _gelu_backward(
    grad: torch.Tensor, a: torch.Tensor, *, approximate: str = "none"
) -> torch.Tensor:
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        x2 = prims.mul(a, a)
        inner = prims.mul(_c(k, a), prims.add(a, prims.mul(_c(c, a), prims.mul(x2, a))))
        t = prims.tanh(inner)
        left = prims.mul(_c(0.5, a), prims.add(_c(1, a), t))
        dinner = prims.mul(_c(k, a), prims.add(_c(1, a), prims.mul(_c(3 * c, a), x2)))
        right = prims.mul(
            prims.mul(_c(0.5, a), a), prims.mul(prims.sub(_c(1, a), prims.mul(t, t)), dinner)
        )
        return prims.mul(grad, prims.add(left, right))
    cdf = prims.mul(
        _c(0.5, a), prims.add(_c(1, a), prims.erf(prims.mul(a, _c(1 / math.sqrt(2), a))))
    )
    pdf = prims.mul(
        _c(1 / math.sqrt(2 * math.pi), a), prims.exp(prims.mul(_c(-0.5, a), prims.mul(a, a)))
    )
    return prims.mul(grad, prims.add(cdf, prims.mul(a, pdf)))


def silu(a: torch.Tensor) -> torch.Tensor:
    return prims.mul(a, sigmoid(a))


_register_with_inplace("silu", ("default",), silu)


@to_prims("aten::silu_backward.default")
def _silu_backward(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    s = sigmoid(a)
    return prims.mul(grad, prims.mul(s, prims.add(_c(1, a), prims.mul(a, prims.sub(_c(1, a), s)))))


@to_prims("aten::sigmoid_backward.default")
def _sigmoid_backward(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return prims.mul(grad, prims.mul(output, prims.sub(_c(1, output), output)))


@to_prims("aten::tanh_backward.default")
def _tanh_backward(grad: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return prims.mul(grad, prims.sub(_c(1, output), prims.mul(output, output)))


def hardtanh(a: torch.Tensor, min_val: Any = -1.0, max_val: Any = 1.0) -> torch.Tensor:
    return prims.minimum(prims.maximum(a, _c(min_val, a)), _c(max_val, a))


_register_with_inplace("hardtanh", ("default",), hardtanh)


@to_prims("aten::hardtanh_backward.default")
def _hardtanh_backward(
    grad: torch.Tensor, a: torch.Tensor, min_val: Any, max_val: Any
) -> torch.Tensor:
    outside = prims.bitwise_or(prims.le(a, _c(min_val, a)), prims.ge(a, _c(max_val, a)))
    return prims.where(outside, _c(0, grad), grad)


def leaky_relu(a: torch.Tensor, negative_slope: Any = 0.01) -> torch.Tensor:
    return prims.where(prims.gt(a, _c(0, a)), a, prims.mul(a, _c(negative_slope, a)))


_register_with_inplace("leaky_relu", ("default",), leaky_relu)


@to_prims("aten::leaky_relu_backward.default")
def _leaky_relu_backward(
    grad: torch.Tensor, a: torch.Tensor, negative_slope: Any, self_is_result: bool
) -> torch.Tensor:
    return prims.where(prims.gt(a, _c(0, a)), grad, prims.mul(grad, _c(negative_slope, grad)))


def elu(
    a: torch.Tensor, alpha: Any = 1.0, scale: Any = 1.0, input_scale: Any = 1.0
) -> torch.Tensor:
    negative = prims.mul(_c(alpha, a), prims.expm1(prims.mul(a, _c(input_scale, a))))
    return prims.mul(_c(scale, a), prims.where(prims.gt(a, _c(0, a)), a, negative))


_register_with_inplace("elu", ("default",), elu)


@to_prims("aten::softplus.default")
def _softplus(a: torch.Tensor, beta: Any = 1.0, threshold: Any = 20.0) -> torch.Tensor:
    scaled = prims.mul(a, _c(beta, a))
    soft = prims.div(prims.log1p(prims.exp(scaled)), _c(beta, a))
    return prims.where(prims.gt(scaled, _c(threshold, a)), a, soft)


@to_prims("aten::mish.default")
def _mish(a: torch.Tensor) -> torch.Tensor:
    return prims.mul(a, prims.tanh(_softplus(a)))


def hardsigmoid(a: torch.Tensor) -> torch.Tensor:
    shifted = prims.add(prims.div(a, _c(6, a)), _c(0.5, a))
    return prims.minimum(prims.maximum(shifted, _c(0, a)), _c(1, a))


_register_with_inplace("hardsigmoid", ("default",), hardsigmoid)


def hardswish(a: torch.Tensor) -> torch.Tensor:
    gate = prims.minimum(prims.maximum(prims.add(a, _c(3, a)), _c(0, a)), _c(6, a))
    return prims.div(prims.mul(a, gate), _c(6, a))


_register_with_inplace("hardswish", ("default",), hardswish)


@to_prims("aten::hardshrink.default")
def _hardshrink(a: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    inside = prims.le(prims.abs(a), _c(lambd, a))
    return prims.where(inside, _c(0, a), a)


@to_prims("aten::softshrink.default")
def _softshrink(a: torch.Tensor, lambd: Any = 0.5) -> torch.Tensor:
    shrunk = prims.sub(a, prims.mul(prims.sign(a), _c(lambd, a)))
    return prims.where(prims.le(prims.abs(a), _c(lambd, a)), _c(0, a), shrunk)


@to_prims("aten::log_sigmoid_forward.default")
def _log_sigmoid_forward(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    low = prims.minimum(a, _c(0, a))
    # The buffer is exp(-|a|), which ATen's CPU log_sigmoid_backward reads (CUDA's ignores it)
    buffer = prims.exp(prims.neg(prims.abs(a)))
    return prims.sub(low, prims.log1p(buffer)), buffer


@to_prims("aten::celu.default")
def _celu(a: torch.Tensor, alpha: Any = 1.0) -> torch.Tensor:
    return elu(a, alpha, 1.0, 1.0 / alpha)


@to_prims("aten::prelu.default", "aten::_prelu_kernel.default")
def _prelu(a: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    if weight.numel() == 1 or a.dim() < 2:
        w = prims.broadcast_in_dim(
            prims.reshape(weight, []) if weight.numel() == 1 and weight.dim() else weight,
            list(a.shape),
            [] if weight.numel() == 1 else [0],
        )
    else:
        w = prims.broadcast_in_dim(weight, list(a.shape), [1])
    return prims.where(prims.gt(a, _c(0, a)), a, prims.mul(a, w))
