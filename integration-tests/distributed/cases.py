"""Worker code for the gloo tests of DDP and FSDP under ember.compile (test_distributed.py).

Each `run_*` function runs in one of two processes of a gloo group: it trains an eager
copy and an ember-compiled copy of one small model for three steps on per-rank inputs and
writes what the test compares (losses, gradients, updated parameters, graph counts) to a
file per rank. Spawned processes import this module by name, so it is a plain module.
"""

from __future__ import annotations

import copy
import functools
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

STEPS = 3
WIDTH = 32


class Block(nn.Module):
    """A residual MLP block with a layer norm (pre-norm, as transformers are)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = 4) -> None:
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def _inputs(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(6, 8, generator=generator), torch.randn(6, 4, generator=generator)


class Counting:
    """A backend that counts the Graphs it is handed and compiles them with `inner`."""

    def __init__(self, inner: str) -> None:
        from ember.capture import lookup_backend

        self.inner = lookup_backend(inner)
        self.graphs: list[Any] = []
        self.__name__ = f"counting({inner})"

    def __call__(self, graph: Any, example_inputs: Sequence[Any]) -> Any:
        self.graphs.append(graph)
        return self.inner(graph, example_inputs)


def _train(
    model: Callable[[torch.Tensor], torch.Tensor],
    params: Callable[[], list[tuple[str, torch.Tensor]]],
    rank: int,
    backend: Counting | None = None,
    accumulate: bool = False,
) -> dict[str, Any]:
    """Three SGD steps; losses, gradients and parameters (full tensors) after each step, and
    how many Graphs `backend` had been handed after each step (to see recompiles). With
    `accumulate`, each step first accumulates a micro-batch under DDP's no_sync()."""
    optimizer = torch.optim.SGD([p for _, p in params()], lr=0.05, momentum=0.9)
    record: dict[str, Any] = {"loss": [], "grads": [], "params": [], "graphs": []}
    for step in range(STEPS):
        x, target = _inputs(rank, step)
        optimizer.zero_grad(set_to_none=True)
        if accumulate:
            with model.no_sync():  # type: ignore[attr-defined]
                torch.nn.functional.mse_loss(model(x * 0.5), target).backward()
        loss = torch.nn.functional.mse_loss(model(x).float(), target)
        loss.backward()
        record["loss"].append(loss.detach().clone())
        record["grads"].append({n: _full(p.grad) for n, p in params()})
        optimizer.step()
        record["params"].append({n: _full(p.detach()) for n, p in params()})
        record["graphs"].append(len(backend.graphs) if backend is not None else 0)
    return record


def _compare(
    eager: dict[str, Any], make: Callable[[Counting], nn.Module], named: Any, rank: int
) -> dict[str, Any]:
    """Train an ember-compiled model made by `make(backend)` and pair it with `eager`."""
    backend = Counting("aot_eager")
    model = make(backend)
    record = _train(model, named(model), rank, backend)
    return {
        "eager": eager,
        "ember": record,
        "graphs": len(backend.graphs),
        "graph_ops": [len(graph.nodes) for graph in backend.graphs],
        "collectives": [
            node.target for graph in backend.graphs for node in graph.nodes if "c10d" in node.target
        ],
    }


def _full(tensor: torch.Tensor | None) -> torch.Tensor | None:
    if tensor is None:
        return None
    full = getattr(tensor, "full_tensor", None)  # a DTensor shard (FSDP2)
    return (full() if full is not None else tensor).detach().clone()


def _named(module: nn.Module) -> Callable[[], list[tuple[str, torch.Tensor]]]:
    """The model's parameters under FSDP1-independent names (a compiled model shares them)."""
    return lambda: [
        (n.replace("_fsdp_wrapped_module.", ""), p) for n, p in module.named_parameters()
    ]


# ---- DDP -----------------------------------------------------------------------------------


def ddp_cases(rank: int) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ember.capture as capture
    from ember.capture.distributed import bucket_of

    results: dict[str, Any] = {}
    torch.manual_seed(0)
    base = Net()
    # ~8.6 KB per block: small caps give several buckets (the first one DDP's own size)
    for name, cap in (("ddp_small_buckets", 0.01), ("ddp_one_bucket", 25.0)):
        eager = DDP(copy.deepcopy(base), bucket_cap_mb=cap)
        ddp = DDP(copy.deepcopy(base), bucket_cap_mb=cap)
        backend = Counting("aot_eager")
        compiled = capture.compile(ddp, backend=backend)
        eager_record = _train(eager, _named(eager.module), rank)
        ember_record = _train(compiled, _named(ddp.module), rank)
        graphs = len(backend.graphs)  # one capture served all three steps
        # a fourth backward: is a bucket's all-reduce launched before the backward reaches
        # the model's input (the end of the backward)?
        order: list[str] = []
        ddp.register_comm_hook(order, _recording_allreduce)
        x, _ = _inputs(rank, STEPS)
        x.requires_grad_(True)
        x.register_hook(functools.partial(_mark, order, "input-grad"))
        compiled(x).sum().backward()
        logged = ddp._get_ddp_logging_data()
        results[name] = {
            "eager": eager_record,
            "ember": ember_record,
            "graphs": graphs,
            "ddp_buckets": len(str(logged.get("rebuilt_bucket_sizes", "")).split(", ")),
            "ember_buckets": len(set(bucket_of(ddp).values())),
            "order": order,
            "logged": {k: v for k, v in logged.items() if "bucket" in k},
        }
    # DDP's options: gradients as views of the buckets, and accumulation under no_sync()
    # (eager DDP's static_graph fails an internal assert under no_sync: no accumulation)
    for name, options, accumulate in (
        ("ddp_bucket_view", {"gradient_as_bucket_view": True}, True),
        ("ddp_static_graph", {"static_graph": True}, False),
        ("ddp_unused_search", {"find_unused_parameters": True}, True),
    ):
        eager = DDP(copy.deepcopy(base), bucket_cap_mb=0.01, **options)
        ddp = DDP(copy.deepcopy(base), bucket_cap_mb=0.01, **options)
        backend = Counting("aot_eager")
        compiled = capture.compile(ddp, backend=backend)
        results[name] = {
            "eager": _train(eager, _named(eager.module), rank, accumulate=accumulate),
            "ember": _train(compiled, _named(ddp.module), rank, backend, accumulate=accumulate),
            "graphs": len(backend.graphs),
        }
    # DDP called inside a compiled function (a compiled training step): capture breaks at
    # the DDP call and runs DDP's forward around its wrapped module, compiled and split
    eager = DDP(copy.deepcopy(base), bucket_cap_mb=0.01)
    ddp = DDP(copy.deepcopy(base), bucket_cap_mb=0.01)
    backend = Counting("aot_eager")
    forward = capture.compile(_call_model, backend=backend)
    results["ddp_in_function"] = {
        "eager": _train(eager, _named(eager.module), rank),
        "ember": _train(functools.partial(forward, ddp), _named(ddp.module), rank, backend),
        "graphs": len(backend.graphs),
        "graph_ops": [len(graph.nodes) for graph in backend.graphs],
    }
    return results


def _call_model(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x) * 1.0


def _mark(order: list[str], what: str, grad: torch.Tensor) -> None:
    order.append(what)


def _recording_allreduce(order, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations
    order.append(f"bucket{bucket.index()}")
    tensor = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])


# ---- FSDP ----------------------------------------------------------------------------------


def fsdp2_cases(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import ember.capture as capture

    results: dict[str, Any] = {}
    torch.manual_seed(0)
    base = Net()

    def sharded(**options: Any) -> nn.Module:
        model = copy.deepcopy(base)
        for block in model.blocks:
            fully_shard(block, **options)
        fully_shard(model, **options)
        return model

    eager = sharded()
    eager_record = _train(eager, _named(eager), rank)

    def whole(backend: Counting) -> nn.Module:
        return capture.compile(sharded(), backend=backend)

    def blocks(backend: Counting) -> nn.Module:
        model = sharded()
        for block in model.blocks:  # in place: FSDP2 keeps its state per module object
            block.forward = capture.compile(block.forward, backend=backend)
        return model

    def swapped(backend: Counting) -> nn.Module:
        model = sharded()
        for index, block in enumerate(model.blocks):  # the compiled twin replaces the block
            model.blocks[index] = capture.compile(block, backend=backend)
        return model

    results["fsdp2_whole"] = _compare(eager_record, whole, _named, rank)
    # FSDP2's options: parameters kept unsharded between forward and backward, and mixed
    # precision (float64 compute: bfloat16 on the CPU meets a layer-norm dtype bug of its own)
    for name, options in (
        ("fsdp2_no_reshard", {"reshard_after_forward": False}),
        ("fsdp2_mixed_precision", {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.float64)}),
    ):
        optioned = sharded(**options)
        record = _train(optioned, _named(optioned), rank)
        results[name] = _compare(
            record,
            lambda backend, o=options: capture.compile(sharded(**o), backend=backend),
            _named,
            rank,
        )
    results["fsdp2_blocks"] = _compare(eager_record, blocks, _named, rank)
    results["fsdp2_swapped"] = _compare(eager_record, swapped, _named, rank)
    return results


def fsdp1_cases(rank: int) -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    import ember.capture as capture

    results: dict[str, Any] = {}
    torch.manual_seed(0)
    base = Net()

    def wrapped() -> nn.Module:
        return FSDP(
            copy.deepcopy(base),
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            use_orig_params=True,
            device_id=torch.device("cpu"),
        )

    eager = wrapped()
    eager_record = _train(eager, _named(eager), rank)

    def whole(backend: Counting) -> nn.Module:
        return capture.compile(wrapped(), backend=backend)

    def blocks(backend: Counting) -> nn.Module:
        model = wrapped()
        inner = model._fsdp_wrapped_module
        for index, block in enumerate(inner.blocks):  # each block's FSDP wrapper
            inner.blocks[index] = capture.compile(block, backend=backend)
        return model

    results["fsdp1_whole"] = _compare(eager_record, whole, _named, rank)
    results["fsdp1_blocks"] = _compare(eager_record, blocks, _named, rank)
    return results


CASES = {"ddp": ddp_cases, "fsdp2": fsdp2_cases, "fsdp1": fsdp1_cases}


def worker(rank: int, world: int, port: int, names: list[str], out: str) -> None:
    """One rank: join the gloo group, run the named case groups, save what they recorded."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    results: dict[str, Any] = {}
    try:
        for name in names:
            try:
                results.update(CASES[name](rank))
            except Exception:  # noqa: BLE001 - reported to the test, which fails on it
                results[f"{name}_error"] = traceback.format_exc()
    finally:
        torch.save(results, f"{out}/rank{rank}.pt")
        dist.destroy_process_group()
