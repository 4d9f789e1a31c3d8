"""ember quick start: compile a real model with `ember.compile` and show what happened.

The model is GPT-2 built from a transformers config with random weights (no download). The
script explains the capture (graphs, graph breaks and why), runs inference and a training
step through the default backend (`inductor`: fused C++ kernels on the CPU) and checks every
result against eager PyTorch, times both, and finally shows the Graph format every layer
speaks: traced with a symbolic batch size, saved to a pickle-free file, loaded back and run
at other batch sizes.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import torch
from torch import nn

import ember


class LogitsOnly(nn.Module):
    """GPT-2 returning plain logits."""

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
        resid_pdrop=0.0,  # no dropout, so a training step is deterministic to compare
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return LogitsOnly(GPT2LMHeadModel(config))


def compare_ms(steps: dict[str, Callable[[], object]], repeats: int = 25) -> dict[str, float]:
    """Median milliseconds of each step, the steps run in turn (on a shared, busy machine
    back-to-back runs would see different loads)."""
    for step in steps.values():
        for _ in range(3):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - started) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def check(name: str, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    error = (actual - expected).abs().max().item()
    ok = torch.allclose(actual, expected, rtol=1e-4, atol=1e-4)
    print(f"  {name:<34} max |ember - eager| = {error:.1e}  {'OK' if ok else 'MISMATCH'}")
    return ok


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model = build_model().eval()
    ids = torch.randint(0, 2048, (4, 32))
    results: list[bool] = []

    print("== what capture sees (ember.explain)")
    report = ember.explain(model)(ids)
    print(report)

    print("\n== inference: ember.compile(model) (backend inductor) vs eager")
    compiled = ember.compile(model)
    with torch.no_grad():
        started = time.perf_counter()
        logits = compiled(ids)
        first_s = time.perf_counter() - started
        results.append(check("logits", logits, model(ids)))
        timed = compare_ms({"eager": lambda: model(ids), "ember": lambda: compiled(ids)})
        eager_ms, ember_ms = timed["eager"], timed["ember"]
    print(f"  first call (capture + compile): {first_s:.1f} s")
    print(f"  step: eager {eager_ms:.2f} ms, ember {ember_ms:.2f} ms ({eager_ms / ember_ms:.2f}x)")

    print("\n== training step: compiled forward and backward vs eager")
    train_eager = build_model().train()
    train_twin = copy.deepcopy(train_eager)
    train_compiled = ember.compile(train_twin)
    targets = torch.randint(0, 2048, (4, 32))
    for net, forward in ((train_eager, train_eager), (train_twin, train_compiled)):
        logits = forward(ids)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        net.loss = loss.detach()  # type: ignore[assignment]
    results.append(check("loss", train_twin.loss, train_eager.loss))  # type: ignore[arg-type]
    grads = [
        (name, p.grad, dict(train_twin.named_parameters())[name].grad)
        for name, p in train_eager.named_parameters()
    ]
    worst = max(grads, key=lambda g: (g[2] - g[1]).abs().max().item())
    results.append(check(f"gradients ({len(grads)}, worst shown)", worst[2], worst[1]))

    print("\n== the Graph format: trace with a symbolic batch, save, load, run at other sizes")
    graph = ember.trace(model, ids, dynamic=True)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "gpt2.ember")
        ember.save(graph, path)
        size_kib = os.path.getsize(path) / 1024
        loaded = ember.load(path)
    print(
        f"  {len(graph.nodes)} nodes, symbols {sorted(graph.symbols)}, saved {size_kib:.0f} KiB,"
        f" loaded graph equals traced: {loaded == graph}"
    )
    results.append(loaded == graph)
    with torch.no_grad():
        for batch in (2, 7):
            other = torch.randint(0, 2048, (batch, 32))
            results.append(
                check(
                    f"batch {batch} through the loaded Graph",
                    ember.run(loaded, other),
                    model(other),
                )
            )

    failures = results.count(False)
    print("\nall results match eager" if failures == 0 else f"\n{failures} MISMATCHES")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
