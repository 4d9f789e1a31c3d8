"""DDP, FSDP2 and FSDP1 under ember.compile, on CPU with gloo in two processes.

Each test spawns one pair of processes that runs a group of cases (cases.py): an eager and
an ember-compiled copy of one small model train three steps on per-rank inputs; losses,
gradients and updated parameters must equal eager's on both ranks, no step may recompile,
and the Graph counts must follow the design (one Graph per DDP gradient bucket; FSDP's
collectives outside every Graph).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built"),
]

HERE = Path(__file__).parent
WORLD = 2


def _spawn(names: list[str], tmp_path: Path) -> list[dict[str, Any]]:
    """Run the case groups `names` on two gloo ranks; what each rank recorded."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # spawned processes import cases by name
    import cases

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(cases.worker, args=(WORLD, port, names, str(tmp_path)), nprocs=WORLD)
    found = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    for rank, results in enumerate(found):
        errors = {k: v for k, v in results.items() if k.endswith("_error")}
        assert not errors, f"rank {rank}: {errors}"
    return found


def _assert_same_training(case: str, result: dict[str, Any]) -> None:
    eager, ember = result["eager"], result["ember"]
    for step in range(len(eager["loss"])):
        where = f"{case}, step {step + 1}"
        torch.testing.assert_close(ember["loss"][step], eager["loss"][step], msg=where)
        for kind in ("grads", "params"):
            expected, actual = eager[kind][step], ember[kind][step]
            assert actual.keys() == expected.keys(), where
            for name, tensor in expected.items():
                if tensor is None:
                    assert actual[name] is None, f"{where}: {name} has a gradient"
                    continue
                torch.testing.assert_close(actual[name], tensor, msg=f"{where}: {kind} {name}")
    graphs = ember["graphs"]
    assert graphs[0] == graphs[-1], f"{case}: steps 2-3 captured again ({graphs})"


def test_ddp_matches_eager_and_splits_at_buckets(tmp_path: Path) -> None:
    for rank, results in enumerate(_spawn(["ddp"], tmp_path)):
        for case in (
            "ddp_small_buckets",
            "ddp_one_bucket",
            "ddp_in_function",
            "ddp_bucket_view",
            "ddp_static_graph",
            "ddp_unused_search",
        ):
            _assert_same_training(case, results[case])
        small, one = results["ddp_small_buckets"], results["ddp_one_bucket"]
        # one Graph per bucket DDP all-reduces (its own rebuilt buckets, from bucket_cap_mb)
        assert small["ddp_buckets"] > 2, small["logged"]
        assert small["graphs"] == small["ddp_buckets"] == small["ember_buckets"], small
        assert one["graphs"] == one["ddp_buckets"] == 1, one
        # called inside a compiled function: the same pieces, plus the function's own Graph
        assert results["ddp_in_function"]["graphs"] == small["graphs"] + 1
        # overlap: split, buckets are all-reduced before the backward reaches the input;
        # one Graph makes every gradient ready at its end
        order = small["order"]
        assert order.index("input-grad") >= 2, f"rank {rank}: {order}"
        assert one["order"][0] == "input-grad", f"rank {rank}: {one['order']}"


def test_fsdp2_and_fsdp1_match_eager(tmp_path: Path) -> None:
    for results in _spawn(["fsdp2", "fsdp1"], tmp_path):
        cases = (
            "fsdp2_whole",
            "fsdp2_blocks",
            "fsdp2_swapped",
            "fsdp2_no_reshard",
            "fsdp2_mixed_precision",
            "fsdp1_whole",
            "fsdp1_blocks",
        )
        for case in cases:
            result = results[case]
            _assert_same_training(case, result)
            # the block bodies are compiled (a block is layer_norm, 2 linears, gelu, add)
            assert max(result["graph_ops"]) >= 7, (case, result["graph_ops"])
            assert not result["collectives"], (case, result["collectives"])
        # whole model: a graph break at each sharded block (its hooks or FSDP1 wrapper run in
        # plain Python, with the collectives): the embedding, the block body, the head
        assert results["fsdp2_whole"]["graphs"] == 3, results["fsdp2_whole"]["graph_ops"]
        assert results["fsdp1_whole"]["graphs"] == 3, results["fsdp1_whole"]["graph_ops"]
