"""Corpus: nn.Module programs — user modules (inlined), torch.nn leaf modules, Sequential,
ModuleList, ModuleDict, parameters and buffers, methods, properties, training flag."""

from __future__ import annotations

import pytest
import torch
from capture_corpus_support import assert_same
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class WithHelper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.scale = 0.5

    def act(self, x):
        return torch.sigmoid(x) * self.scale

    def forward(self, x):
        return self.act(self.linear(x))


class WithProperty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    @property
    def doubled(self):
        return self.weight * 2

    def forward(self, x):
        return x @ self.doubled


class RawParameters(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))
        self.bias = nn.Parameter(torch.zeros(3))
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x):
        return x @ self.weight.t() + self.bias + self.offset


class SequentialNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4), nn.Tanh())

    def forward(self, x):
        return self.body(x)


class ModuleListNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        return x


class ModuleListIndex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        x = self.layers[0](x)
        for layer in self.layers[1:]:
            x = layer(x)
        return x * len(self.layers)


class ModuleDictNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        out = {}
        for name, head in self.heads.items():
            out[name] = head(x)
        return out, self.heads["a"](x)


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = MLP()
        self.norm = nn.LayerNorm(2)

    def forward(self, x):
        return self.norm(self.inner(x))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(torch.relu(self.bn(self.conv(x)))).flatten(1)


class TrainingBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self.linear(x) * 2
        return self.linear(x)


class SharedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a

    def forward(self, x):
        return self.b(self.a(x))


class Embedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids):
        return self.dropout(self.embed(ids)).mean(1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


class StaticAndClassMethods(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    @staticmethod
    def act(x):
        return x.clamp(min=0)

    @classmethod
    def factor(cls):
        return 3

    def forward(self, x):
        return self.act(self.linear(x)) * self.factor()


def functional_with_module(model, x):
    return model(x) + 1


MODULES = [
    (MLP, lambda: (torch.randn(2, 4),)),
    (WithHelper, lambda: (torch.randn(2, 4),)),
    (WithProperty, lambda: (torch.randn(2, 4),)),
    (RawParameters, lambda: (torch.randn(2, 4),)),
    (SequentialNet, lambda: (torch.randn(2, 4),)),
    (ModuleListNet, lambda: (torch.randn(2, 4),)),
    (ModuleListIndex, lambda: (torch.randn(2, 4),)),
    (ModuleDictNet, lambda: (torch.randn(2, 4),)),
    (Nested, lambda: (torch.randn(2, 4),)),
    (ConvNet, lambda: (torch.randn(2, 3, 6, 6),)),
    (TrainingBranch, lambda: (torch.randn(2, 4),)),
    (SharedWeights, lambda: (torch.randn(2, 4),)),
    (Embedder, lambda: (torch.randint(0, 10, (2, 5)),)),
    (Attention, lambda: (torch.randn(2, 3, 8),)),
    (StaticAndClassMethods, lambda: (torch.randn(2, 4),)),
]


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("make,inputs", MODULES, ids=[m[0].__name__ for m in MODULES])
def test_module(make, inputs, training: bool) -> None:
    torch.manual_seed(0)
    model = make().train(training)
    if training and make in (Embedder,):
        model.dropout.p = 0.0
    args = inputs()
    reference = make().train(training)
    reference.load_state_dict(model.state_dict())
    if training and make in (Embedder,):
        reference.dropout.p = 0.0
    expected = reference(*args)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    assert_same(compiled(*args), expected)
    assert_same(compiled(*args), reference(*args))
    assert counter.frame_count == 1
    # The compiled module shares the original's state.
    assert compiled.state_dict().keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert compiled.state_dict()[key] is value or torch.equal(compiled.state_dict()[key], value)


def test_module_passed_as_argument() -> None:
    model = MLP()
    x = torch.randn(2, 4)
    counter = CompileCounter()
    compiled = ember_compile(functional_with_module, backend=counter)
    assert_same(compiled(model, x), functional_with_module(model, x))
    assert counter.frame_count == 1


def test_gradients_flow_to_parameters() -> None:
    torch.manual_seed(0)
    model = MLP()
    reference = MLP()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(3, 4)
    compiled = ember_compile(model, backend=CompileCounter())
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad)


def test_attribute_writes_go_through() -> None:
    model = WithHelper()
    compiled = ember_compile(model, backend=CompileCounter())
    compiled.scale = 3.0
    assert model.scale == 3.0
    assert isinstance(compiled, WithHelper)
    assert compiled.linear is model.linear
