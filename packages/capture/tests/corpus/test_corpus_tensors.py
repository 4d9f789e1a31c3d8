"""Corpus: tensor attributes, methods and operators, torch.* and torch.nn.functional calls,
indexing, dtype/device/Size values and grad-mode blocks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from capture_corpus_support import Case, cases, check, randn


def attr_shape(x):
    return x.reshape(x.shape[0], -1) * x.shape[1]


def attr_size_method(x):
    return x.view(x.size(0), x.size(-1) * x.size()[1])


def attr_dtype(x):
    if x.dtype == torch.float32:
        return x.to(torch.float64)
    return x


def attr_device(x):
    return torch.zeros(3, device=x.device) + x


def attr_ndim(x):
    if x.ndim == 2:
        return x.sum(-1)
    return x


def attr_T(x):
    return x.T @ x


def attr_requires_grad(x):
    if x.requires_grad:
        return x * 2
    return x * 3


def attr_dim_numel(x):
    return x * x.dim() + x.numel()


def tensor_methods(x):
    return x.exp().log1p().clamp(min=0.1).sqrt().mean(dim=1, keepdim=True)


def tensor_methods_chain(x):
    return x.transpose(0, 1).contiguous().flatten().softmax(dim=0)


def torch_functions(x, y):
    return torch.cat([x, y], dim=0), torch.stack([x, y]), torch.where(x > 0, x, y)


def torch_factories(x):
    return x + torch.ones(3) + torch.arange(3) + torch.full((3,), 2.0)


def torch_zeros_like(x):
    return torch.zeros_like(x) + torch.ones_like(x) * 2 + torch.empty_like(x).fill_(1)


def torch_reductions(x):
    return torch.sum(x), torch.amax(x, dim=0), x.argmax(dim=1), torch.max(x, dim=1).values


def torch_max_tuple(x):
    values, indices = torch.max(x, dim=0)
    return values * 2, indices


def topk_named(x):
    result = torch.topk(x, 2)
    return result.values, result.indices


def functional_activations(x):
    return F.relu(x), F.gelu(x), F.silu(x), F.softmax(x, dim=-1), torch.tanh(x)


def functional_linear(x, w, b):
    return F.linear(x, w, b)


def functional_layer_norm(x):
    return F.layer_norm(x, (x.shape[-1],))


def functional_conv(x, w):
    return F.conv2d(x, w, padding=1)


def functional_dropout_eval(x):
    return F.dropout(x, p=0.5, training=False)


def functional_pad(x):
    return F.pad(x, (1, 1))


def indexing_basic(x):
    return x[0], x[:, 1], x[1:, ::2], x[..., -1], x[None, 0]


def indexing_tensor(x, idx):
    return x[idx]


def index_bool_mask_where(x):
    return torch.where(x > 0, x, torch.zeros_like(x))


def setitem_tensor(x):
    y = x.clone()
    y[0] = 5.0
    y[:, 1] = y[:, 2] * 2
    return y


def inplace_on_input(x):
    x.add_(1)
    return x


def inplace_methods(x):
    y = x.clone()
    y.mul_(2).add_(1)
    y.clamp_(max=1.0)
    return y


def view_ops(x):
    return x.view(-1), x.unsqueeze(0).squeeze(0), x.permute(1, 0), x.expand(2, 3, 4)


def split_chunk(x):
    a, b = x.chunk(2, dim=0)
    c, d = torch.split(x, 2, dim=0)
    return a + b, c * d


def unbind_unpack(x):
    a, b, c = x.unbind(0)
    return a + b + c


def dtype_conversions(x):
    return x.float(), x.double(), x.int(), x.long().float(), x.half().float()


def type_as(x, y):
    return x.type_as(y) + y


def size_object(x):
    size = x.shape
    return x.new_zeros(size) + torch.ones(size)


def size_compare(x, y):
    if x.shape == y.shape:
        return x + y
    return x


def dtype_argument(x, dtype):
    return x.to(dtype) * 2


def device_argument(x, device):
    return x.to(device) + 1


def no_grad_block(x, w):
    with torch.no_grad():
        y = x * w
    return y, x * w


def enable_grad_inside(x, w):
    with torch.no_grad():
        with torch.enable_grad():
            y = x * w
        z = x * w
    return y, z


def set_grad_enabled_block(x, w):
    with torch.set_grad_enabled(False):
        y = x @ w
    return y


def is_grad_enabled_branch(x):
    if torch.is_grad_enabled():
        return x + 1
    return x - 1


def scalar_tensor_ops(x):
    return x * torch.tensor(2.0) + torch.tensor([1.0, 2.0, 3.0])


def clone_detach(x):
    return x.detach().clone() * 2


def matmul_family(a, b):
    return torch.mm(a, b), torch.matmul(a, b), a.mm(b), torch.einsum("ij,jk->ik", a, b)


def bmm_baddbmm(a, b):
    return torch.bmm(a, b), torch.baddbmm(torch.zeros(2, 3, 3), a, b)


def cumsum_sort(x):
    values, _ = torch.sort(x, dim=-1)
    return torch.cumsum(x, dim=0), values


def masked_fill(x):
    return x.masked_fill(x < 0, 0.0)


def requires_grad_output(x, w):
    return (x @ w).sum()


def random_shape_only(x):
    noise = torch.randn_like(x)
    return noise.shape == x.shape, x * 0 + 1


CASES = cases(
    Case(attr_shape, lambda: (randn(2, 3, 4),)),
    Case(attr_size_method, lambda: (randn(2, 3, 4),)),
    Case(attr_dtype, lambda: (randn(3),)),
    Case(attr_device, lambda: (randn(3),)),
    Case(attr_ndim, lambda: (randn(3, 2),)),
    Case(attr_T, lambda: (randn(3, 2),)),
    Case(attr_requires_grad, lambda: (randn(3).requires_grad_(),)),
    Case(attr_dim_numel, lambda: (randn(3, 2),)),
    Case(tensor_methods, lambda: (randn(3, 4),)),
    Case(tensor_methods_chain, lambda: (randn(3, 4),)),
    Case(torch_functions, lambda: (randn(3), randn(3))),
    Case(torch_factories, lambda: (randn(3),)),
    Case(torch_zeros_like, lambda: (randn(3),)),
    Case(torch_reductions, lambda: (randn(3, 4),)),
    Case(torch_max_tuple, lambda: (randn(3, 4),)),
    Case(topk_named, lambda: (randn(5),)),
    Case(functional_activations, lambda: (randn(3, 4),)),
    Case(functional_linear, lambda: (randn(2, 4), randn(3, 4), randn(3))),
    Case(functional_layer_norm, lambda: (randn(2, 5),)),
    Case(functional_conv, lambda: (randn(1, 2, 5, 5), randn(3, 2, 3, 3))),
    Case(functional_dropout_eval, lambda: (randn(4),), graphs=0),
    Case(functional_pad, lambda: (randn(2, 3),)),
    Case(indexing_basic, lambda: (randn(3, 4),)),
    Case(indexing_tensor, lambda: (randn(5, 2), torch.tensor([0, 2, 4]))),
    Case(index_bool_mask_where, lambda: (randn(5),)),
    Case(setitem_tensor, lambda: (randn(3, 4),)),
    Case(inplace_on_input, lambda: (randn(3),)),
    Case(inplace_methods, lambda: (randn(3),)),
    Case(view_ops, lambda: (randn(3, 4),)),
    Case(split_chunk, lambda: (randn(4, 3),)),
    Case(unbind_unpack, lambda: (randn(3, 2),)),
    Case(dtype_conversions, lambda: (randn(3),)),
    Case(type_as, lambda: (torch.arange(3), randn(3))),
    Case(size_object, lambda: (randn(2, 3),)),
    Case(size_compare, lambda: (randn(2, 3), randn(2, 3))),
    Case(dtype_argument, lambda: (randn(3), torch.float64)),
    Case(device_argument, lambda: (randn(3), torch.device("cpu"))),
    Case(no_grad_block, lambda: (randn(3), randn(3).requires_grad_())),
    Case(enable_grad_inside, lambda: (randn(3), randn(3).requires_grad_())),
    Case(set_grad_enabled_block, lambda: (randn(2, 3), randn(3, 2).requires_grad_())),
    Case(is_grad_enabled_branch, lambda: (randn(3),)),
    Case(scalar_tensor_ops, lambda: (randn(3),)),
    Case(clone_detach, lambda: (randn(3).requires_grad_(),)),
    Case(matmul_family, lambda: (randn(3, 4), randn(4, 3))),
    Case(bmm_baddbmm, lambda: (randn(2, 3, 4), randn(2, 4, 3))),
    Case(cumsum_sort, lambda: (randn(3, 4),)),
    Case(masked_fill, lambda: (randn(5),)),
    Case(requires_grad_output, lambda: (randn(2, 3), randn(3, 2).requires_grad_())),
    Case(random_shape_only, lambda: (randn(3),)),
)


@pytest.mark.parametrize("case", CASES)
def test_program(case: Case) -> None:
    check(case)
