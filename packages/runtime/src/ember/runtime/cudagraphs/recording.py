"""Recording: the small interface between the tree and CUDA, and its CUDA implementation.

The tree (plain Python bookkeeping) calls a `Recorder` to capture a graph, to make tensors
that show a node's output memory without owning it, and to poison outputs a later replay
overwrote. `CudaRecorder` does it with `torch.cuda.CUDAGraph`; CPU tests pass a fake.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, cast

import torch

from ember.runtime.cudagraphs.pool import MemoryPool


class Recording(Protocol):
    """A captured graph: `outputs` hold its output memory; `replay()` runs it again."""

    outputs: Sequence[Any]

    def replay(self) -> None: ...


class Recorder(Protocol):
    """The CUDA calls the tree needs; everything else it does is plain Python."""

    def record(
        self, call: Callable[[list[Any]], Sequence[Any]], args: list[Any], reserve: int = 0
    ) -> Recording:
        """Capture `call(args)` and replay it once, so `outputs` hold real values; `reserve`
        bytes are first reserved in the pool as one block and freed (its buffers split it)."""
        ...

    def warm_up(self, reserve: int = 0) -> contextlib.AbstractContextManager[object]:
        """Where a warm-up run allocates: in the pool while it holds no recording (its memory
        is then the recordings' to reuse, as in torch's trees), `reserve` bytes reserved there
        first as one block; elsewhere, as it is, when the pool cannot take eager runs."""
        ...

    def storage_alias(self, owner: torch.Tensor) -> torch.UntypedStorage:
        """A new storage over `owner`'s memory that does not own it (freeing it frees nothing)."""
        ...

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        """Make every later read of `tensor`'s storage raise `message`."""
        ...

    def on_device(self, tensor: torch.Tensor) -> bool:
        """Whether a graph can read `tensor` (False for CPU tensors)."""
        ...


class CaptureError(RuntimeError):
    """The graph could not be captured (an op synchronizes or is not capturable)."""


class CudaRecording:
    """A `torch.cuda.CUDAGraph` and the tensors its capture allocated for its outputs."""

    def __init__(self, graph: torch.cuda.CUDAGraph, outputs: Sequence[Any]) -> None:
        self.graph = graph
        self.outputs = outputs
        self.replay = graph.replay  # the hot path: one attribute lookup, no extra frame


class CudaRecorder:
    """Records into one `MemoryPool`, on its side stream, the way torch.cuda.graph does."""

    def __init__(self, pool: MemoryPool) -> None:
        self.pool = pool
        self.recorded = False  # whether a graph was captured into the pool yet

    def record(
        self, call: Callable[[list[Any]], Sequence[Any]], args: list[Any], reserve: int = 0
    ) -> Recording:
        graph = torch.cuda.CUDAGraph()
        stream = self.pool.stream
        current = torch.cuda.current_stream(self.pool.device)
        stream.wait_stream(current)
        torch.cuda.synchronize(self.pool.device)
        if not self.recorded:
            # The warm-up runs (eager, before any recording) left their freed blocks cached
            # in the caching allocator, where the pool cannot take them: given back now, the
            # process does not hold that memory twice (H100, ResNet-50 training: reserved
            # 3792 MB against torch.compile's 1702, whose trees warm up inside their pool;
            # BERT inference 5154 against 4620, one logits tensor). Free blocks of graphs'
            # pools stay with their graphs.
            torch.cuda.empty_cache()
            self.recorded = True
        # cuBLAS keeps a workspace per stream in the caching allocator; dropping them lets the
        # capture stream's workspace live in the pool instead of beside one more (torch's trees
        # do the same)
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        with torch.cuda.stream(stream):
            graph.capture_begin(pool=self.pool.handle, capture_error_mode="thread_local")
            try:
                if reserve:  # an allocation, no kernel: the freed block stays in the pool
                    torch.empty(reserve, dtype=torch.uint8, device=self.pool.device)
                outputs = tuple(call(args))
            except Exception as error:
                _end_failed_capture(graph)
                self._fresh_pool()
                raise CaptureError(f"{type(error).__name__}: {error}") from error
            try:
                graph.capture_end()
            except Exception as error:
                self._fresh_pool()
                raise CaptureError(f"{type(error).__name__}: {error}") from error
        current.wait_stream(stream)
        graph.replay()
        return CudaRecording(graph, outputs)

    @contextlib.contextmanager
    def warm_up(self, reserve: int = 0) -> Iterator[None]:
        mem_pool = self.pool.mem_pool
        if self.recorded or mem_pool is None:
            # a recording's freed temporaries sit in the pool: an eager run there would take
            # memory its replays overwrite
            yield
            return
        # On the capture stream: the caching allocator keeps free blocks per stream, so blocks
        # a warm-up frees on the caller's stream would be out of the capture's reach (H200,
        # ResNet-50 training: the recording reserved its 1.4 GB a second time). Every use of
        # the side stream first waits for the caller's, so its blocks are never reused early.
        stream = self.pool.stream
        current = torch.cuda.current_stream(self.pool.device)
        stream.wait_stream(current)
        try:
            with torch.cuda.stream(stream), torch.cuda.use_mem_pool(mem_pool, self.pool.device):
                if reserve:
                    torch.empty(reserve, dtype=torch.uint8, device=self.pool.device)
                yield
        finally:
            current.wait_stream(stream)

    def _fresh_pool(self) -> None:
        """A failed capture leaves its pool unusable for the next one: later graphs record
        into a new pool (graphs already recorded keep theirs)."""
        self.pool = MemoryPool(self.pool.device, self.pool.mem_pool is not None)

    def storage_alias(self, owner: torch.Tensor) -> torch.UntypedStorage:
        storage = owner.untyped_storage()
        alias = torch._C._construct_storage_from_data_pointer(
            storage.data_ptr(), owner.device, storage.nbytes()
        )
        return cast(torch.UntypedStorage, alias)

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        torch._C._set_storage_access_error_msg(tensor, message)

    def on_device(self, tensor: torch.Tensor) -> bool:
        return tensor.is_cuda


def _end_failed_capture(graph: torch.cuda.CUDAGraph) -> None:
    """End a capture whose call raised; CUDA then reports the capture as invalid."""
    with contextlib.suppress(Exception):  # the failing op already invalidated the capture
        graph.capture_end()
