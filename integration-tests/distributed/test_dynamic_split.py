"""DDP's bucket splitter with symbolic sizes, through ember-autodiff (no process group: the
splitter reads DDP's settings from a stand-in): every piece's forward and backward bind the
sizes they use, and one capture trains at every length with gradients equal to eager's."""

from __future__ import annotations

import torch
from torch import nn

import ember.capture as capture
from ember.autodiff.aot import aot_eager
from ember.capture.distributed import bucketed_backend
from ember.capture.testing import TinyDecoder


class StandInDDP(nn.Module):
    """What the splitter reads of a DistributedDataParallel: its module and bucket cap."""

    def __init__(self, module: nn.Module, bucket_bytes_cap: int) -> None:
        super().__init__()
        self.module = module
        self.bucket_bytes_cap = bucket_bytes_cap
        self.parameters_to_ignore: set[str] = set()


def test_symbolic_pieces_train_at_every_length() -> None:
    torch.manual_seed(0)
    model = TinyDecoder(vocab=17, width=16, heads=2, context=32, depth=3)
    reference = TinyDecoder(vocab=17, width=16, heads=2, context=32, depth=3)
    reference.load_state_dict(model.state_dict())
    graphs: list[object] = []

    def counting(graph, example_inputs):  # type: ignore[no-untyped-def]
        graphs.append(graph)
        return aot_eager(graph, example_inputs)

    backend = bucketed_backend(StandInDDP(model, 4000), counting)
    compiled = capture.compile(model, backend=backend, dynamic=True)
    for length in (8, 12, 20):
        ids = torch.randint(0, 17, (2, length))
        model.zero_grad()
        reference.zero_grad()
        compiled(ids).square().mean().backward()
        reference(ids).square().mean().backward()
        for got, expected in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got.grad, expected.grad)
        if length == 8:
            pieces = len(graphs)
    assert pieces > 2
    assert len(graphs) == pieces  # one capture, split once, served lengths 12 and 20
