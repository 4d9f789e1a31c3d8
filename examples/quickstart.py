"""ember quick start: trace a real model to a Graph, print it, save it, load it, run it.

The model is GPT-2 built from a transformers config with random weights (no download).
The Graph is traced with a symbolic batch size, saved to a pickle-free file, loaded back and
run by the prims interpreter at the traced batch size and at two others; every result is
compared with eager PyTorch.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch
from torch import nn

import ember


class LogitsOnly(nn.Module):
    """GPT-2 returning plain logits (a Graph output is tensors, not ModelOutput objects)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits


def build_model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=2048,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
    )
    return LogitsOnly(GPT2LMHeadModel(config)).eval()


def main() -> int:
    torch.manual_seed(0)
    model = build_model()
    input_ids = torch.randint(0, 2048, (4, 32))

    started = time.perf_counter()
    graph = ember.trace(model, input_ids, dynamic=True)
    trace_ms = (time.perf_counter() - started) * 1e3
    text = str(graph).splitlines()
    print(
        f"== traced GPT-2 (2 layers, random weights) in {trace_ms:.0f} ms: "
        f"{len(graph.nodes)} nodes, {len(graph.state_inputs())} parameters/buffers, "
        f"symbols {sorted(graph.symbols)}, {len(graph.guards)} size guards"
    )
    print("\n".join([*text[:12], "    ...", *text[-14:]]))

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "gpt2.ember")
        ember.save(graph, path)
        size_kib = os.path.getsize(path) / 1024
        loaded = ember.load(path)
    print(
        f"\n== saved and loaded {size_kib:.0f} KiB; loaded graph equals traced: {loaded == graph}"
    )

    failures = 0
    with torch.no_grad():
        for batch in (4, 2, 7):
            ids = torch.randint(0, 2048, (batch, 32))
            expected = model(ids)
            actual = ember.run(loaded, ids)
            error = (actual - expected).abs().max().item()
            ok = torch.allclose(actual, expected, rtol=1e-4, atol=1e-4)
            failures += not ok
            print(f"batch {batch}: max |graph - eager| = {error:.2e}  {'OK' if ok else 'MISMATCH'}")
    print("\nall results match eager" if failures == 0 else f"\n{failures} MISMATCHES")
    return 1 if failures or loaded != graph else 0


if __name__ == "__main__":
    sys.exit(main())
