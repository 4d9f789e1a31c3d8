"""Replays a training step's allocator events through a model of torch's CUDA caching
allocator, to ask what a change of allocation pattern would do to the reserved peak without a
GPU.

    python -m benchmarks.allocator_replay TRACE.jsonl.gz [--steps 0] [--reserve-mb 0,1000,1400]

`TRACE` is what `python -m benchmarks.cudagraph_memory --variant V --trace TRACE` writes on the
GPU machine (one JSON list per allocator event: action, address, size, stream, step, the line
of ours that allocated). The replay takes the `alloc` and `free_completed` events of the chosen
steps in order and serves them the way the caching allocator does (below), so the reserved
peak it prints can be set beside the one the trace itself records (`segment_alloc` events)
and beside a variant's: `--reserve-mb X` first reserves one segment of X MB and frees it, as a
graph that asks for its planned peak in one block before it runs would, and prints the peak
for each X.

The model (torch 2.x `CUDACachingAllocator`, no `PYTORCH_CUDA_ALLOC_CONF` settings): sizes
round up to 512 bytes; a request of at most 1 MiB comes from the small pool, whose segments
are 2 MiB; a larger one from the large pool, in a 20 MiB segment below 10 MiB and in a
segment of its own size rounded up to 2 MiB above; a request takes the smallest free block of
its pool that fits (the lowest address among equals) and splits off the rest when it is at
least 512 bytes (small pool) or more than 1 MiB (large pool); a freed block merges with free
neighbours of its segment, never across segments. Streams, graph pools and `empty_cache` are
not modelled: a step's events are served as one stream of one pool. Replaying session 17's
traces (H200, torch 2.11) gives the recorded reserved peak within 2-3% (Llama-style 3444 MB
replayed as 3444; ResNet-50's warm-up 1674 as 1702). Not part of CI; CPU only.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MB = 2**20
SMALL_REQUEST = 1 * MB  # at most this: the small pool
SMALL_SEGMENT = 2 * MB
LARGE_SEGMENT = 20 * MB  # for large requests under MIN_OWN_SEGMENT
MIN_OWN_SEGMENT = 10 * MB  # from this size on, a request gets a segment of its own size
OWN_SEGMENT_ROUND = 2 * MB
MIN_BLOCK = 512


@dataclass
class _Block:
    size: int
    small: bool
    free: bool = True
    prev: int | None = None  # neighbours in the same segment, by address
    next: int | None = None


def round_request(size: int) -> int:
    """A request's size as the allocator serves it."""
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def segment_size(size: int) -> int:
    """The segment the allocator reserves for a (rounded) request no cached block fits."""
    if size <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if size < MIN_OWN_SEGMENT:
        return LARGE_SEGMENT
    return -(-size // OWN_SEGMENT_ROUND) * OWN_SEGMENT_ROUND


class AllocatorModel:
    """One pool of the caching allocator: blocks by address, free blocks sorted by size."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.free_blocks: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
        self.reserved = self.allocated = 0
        self.peak_reserved = self.peak_allocated = 0
        self.segments = 0
        self._next_address = 1 << 40

    def malloc(self, size: int) -> int:
        """Serve a request; returns the block's address."""
        size = round_request(size)
        small = size <= SMALL_REQUEST
        free = self.free_blocks[small]
        at = bisect.bisect_left(free, (size, 0))
        if at < len(free):
            _, address = free.pop(at)
        else:
            address = self._new_segment(segment_size(size), small)
        block = self.blocks[address]
        rest = block.size - size
        if rest >= MIN_BLOCK if small else rest > SMALL_REQUEST:
            tail = address + size
            self.blocks[tail] = _Block(rest, small, prev=address, next=block.next)
            if block.next is not None:
                self.blocks[block.next].prev = tail
            block.next, block.size = tail, size
            bisect.insort(free, (rest, tail))
        block.free = False
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return address

    def release(self, address: int) -> None:
        """Free a block, merging it with free neighbours of its segment."""
        block = self.blocks[address]
        self.allocated -= block.size
        block.free = True
        free = self.free_blocks[block.small]
        following = block.next
        if following is not None and self.blocks[following].free:
            merged = self.blocks.pop(following)
            free.remove((merged.size, following))
            block.size += merged.size
            block.next = merged.next
            if merged.next is not None:
                self.blocks[merged.next].prev = address
        preceding = block.prev
        if preceding is not None and self.blocks[preceding].free:
            before = self.blocks[preceding]
            free.remove((before.size, preceding))
            before.size += block.size
            before.next = block.next
            if block.next is not None:
                self.blocks[block.next].prev = preceding
            del self.blocks[address]
            address, block = preceding, before
        bisect.insort(free, (block.size, address))

    def _new_segment(self, size: int, small: bool) -> int:
        address = self._next_address
        self._next_address += size + (1 << 30)  # segments never touch: no merging across
        self.blocks[address] = _Block(size, small)
        self.reserved += size
        self.segments += 1
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return address


Event = Sequence[object]  # [action, address, size, stream, step, origin]


def load(path: str, steps: Iterable[int] | None = None) -> list[Event]:
    """The events of `path` (a `cudagraph_memory --trace` file), of `steps` only if given."""
    wanted = None if steps is None else set(steps)
    with gzip.open(path, "rt") as lines:
        events = [json.loads(line) for line in lines]
    return [e for e in events if wanted is None or e[4] in wanted]


def recorded_segments(events: Sequence[Event]) -> int:
    """Bytes of the segments the trace itself records as reserved."""
    return sum(int(e[2]) for e in events if e[0] == "segment_alloc")  # type: ignore[call-overload]


def replay(events: Sequence[Event], reserve: int = 0) -> AllocatorModel:
    """Serve the events' allocations and frees; `reserve` bytes first reserved as one
    segment and freed (cached, for later requests to split)."""
    model = AllocatorModel()
    if reserve:
        model.release(model.malloc(reserve))
        model.peak_allocated = 0
    served: dict[object, int] = {}
    for action, address, size, *_ in events:
        if action == "alloc":
            served[address] = model.malloc(int(size))  # type: ignore[call-overload]
        elif action == "free_completed" and address in served:
            model.release(served.pop(address))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--steps", default="0", help="comma-separated steps to replay")
    parser.add_argument("--reserve-mb", default="0", help="comma-separated block sizes")
    arguments = parser.parse_args()
    steps = [int(s) for s in arguments.steps.split(",")]
    reserves = [float(r) for r in arguments.reserve_mb.split(",")]
    print("trace | steps | recorded reserved MB | reserve MB | replayed reserved / allocated MB")
    for path in arguments.traces:
        events = load(path, steps)
        recorded = recorded_segments(events) / MB
        for reserve in reserves:
            model = replay(events, int(reserve * MB))
            print(
                f"{path} | {arguments.steps} | {recorded:.0f} | {reserve:.0f} | "
                f"{model.peak_reserved / MB:.0f} / {model.peak_allocated / MB:.0f}"
            )


if __name__ == "__main__":
    main()
