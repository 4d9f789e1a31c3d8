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
    """The pool handle of `torch.cuda.graph_pool_handle()` and the side stream captures use."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        with torch.cuda.device(device):
            self.handle: Any = torch.cuda.graph_pool_handle()
            self.stream = torch.cuda.Stream(device)
