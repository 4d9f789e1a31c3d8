"""`MemoryPool`: the one private CUDA memory pool that every graph of a tree records into.

Forward, backward and the graphs between graph breaks share it, so memory that one graph
frees at its end is reused by the next graph's recording instead of being reserved twice.
A graph's outputs are owned by its tree node and stay allocated while the node lives, so no
later recording can take their memory: only what a graph freed is shared.
"""

from __future__ import annotations

from typing import Any

import torch


class MemoryPool:
    """The pool handle captures record into and the side stream they use. `warm_ups`: the
    pool is a `torch.cuda.MemPool`, so that eager runs can allocate in it too (warm-ups
    before the first recording, `cudagraph_reserve_block`); otherwise a handle of
    `torch.cuda.graph_pool_handle()`, which only captures can use."""

    def __init__(self, device: torch.device, warm_ups: bool = False) -> None:
        self.device = device
        self.mem_pool: Any = None
        with torch.cuda.device(device):
            if warm_ups and hasattr(torch.cuda, "use_mem_pool"):
                self.mem_pool = torch.cuda.MemPool()
                self.handle: Any = self.mem_pool.id
            else:
                self.handle = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream(device)
