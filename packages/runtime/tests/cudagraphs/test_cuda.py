"""Capture and replay on a GPU: ember.compile(mode="reduce-overhead") against eager, in
inference and training, the error for an overwritten output, and the step marker."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

ember = pytest.importorskip("ember")
backend = pytest.importorskip("ember.inductor.backend")
from ember.runtime.cudagraphs import reset_trees, tree_for  # noqa: E402

CUDA = torch.device("cuda", torch.cuda.current_device())


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)).to(
        CUDA
    )


def test_inference_replays_and_matches_eager() -> None:
    reset_trees()
    model = _mlp().eval()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(4, 16, device=CUDA)
            torch.testing.assert_close(compiled(x), model(x))
    tree = tree_for(CUDA)
    assert (tree.node_count(), tree.replays >= 3) == (1, True), vars(tree)


def test_training_matches_eager_with_forward_and_backward_in_one_tree() -> None:
    reset_trees()
    model, reference = _mlp(), _mlp()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(5):
        x = torch.randn(4, 16, device=CUDA)
        for m, o in ((compiled, opt), (reference, ref_opt)):
            o.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            o.step()
        torch.testing.assert_close(loss, loss)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    tree = tree_for(CUDA)
    roots = [node for nodes in tree.roots.values() for node in nodes]
    assert len(roots) == 1 and roots[0].children  # the backward recorded under its forward
    assert tree.replays >= 4


def test_reading_an_overwritten_output_raises_naming_the_fix() -> None:
    reset_trees()
    model = _mlp().eval()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    x = torch.randn(4, 16, device=CUDA)
    with torch.no_grad():
        compiled(x), compiled(x)
        kept = compiled(x)
        cloned = kept.clone()
        compiled(x + 1)
        with pytest.raises(RuntimeError, match=r"clone\(\)"):
            kept + 1
        torch.testing.assert_close(cloned, model(x))


def test_mark_step_begin_keeps_outputs_until_the_next_step() -> None:
    reset_trees()
    model = _mlp().eval()
    compiled = ember.compile(model, backend=backend.inductor, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            ember.cudagraph_mark_step_begin()
            x = torch.randn(4, 16, device=CUDA)
            out = compiled(x)
            torch.testing.assert_close(out, model(x))
