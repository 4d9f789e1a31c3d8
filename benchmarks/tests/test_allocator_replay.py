"""The caching-allocator model that replays `cudagraph_memory --trace` files: segment sizes,
best fit, splitting and merging as torch's CUDA allocator does them, and a reserved block."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from benchmarks.allocator_replay import MB, AllocatorModel, load, recorded_segments, replay


def test_large_requests_get_segments_of_their_own_that_never_merge() -> None:
    model = AllocatorModel()
    first, second = model.malloc(12 * MB), model.malloc(12 * MB)
    assert model.reserved == 2 * 12 * MB and model.segments == 2
    model.release(first)
    model.release(second)
    model.malloc(20 * MB)  # 24 MB free, but in two segments of 12
    assert model.segments == 3 and model.reserved == 44 * MB


def test_a_reserved_block_is_split_and_merges_back() -> None:
    model = AllocatorModel()
    model.release(model.malloc(24 * MB))
    first, second = model.malloc(12 * MB), model.malloc(12 * MB)
    assert model.segments == 1  # both from the reserved block
    model.release(first)
    model.release(second)
    model.malloc(24 * MB)  # the halves merged: it fits again
    assert model.segments == 1 and model.peak_reserved == 24 * MB


def test_small_and_medium_requests_share_segments() -> None:
    model = AllocatorModel()
    small = [model.malloc(100_000) for _ in range(10)]  # 1 MB of the small pool's 2 MB
    assert model.reserved == 2 * MB
    medium = [model.malloc(4 * MB) for _ in range(5)]  # 20 MB: one large segment
    assert model.reserved == 22 * MB and model.segments == 2
    assert model.allocated == 10 * 100_352 + 20 * MB  # sizes round up to 512 bytes
    for address in small + medium:
        model.release(address)
    assert model.allocated == 0


def test_best_fit_takes_the_smallest_free_block() -> None:
    model = AllocatorModel()
    big, small = model.malloc(40 * MB), model.malloc(12 * MB)
    model.release(big)
    model.release(small)
    model.malloc(11 * MB)
    # the 12 MB block served it: a 40 MB request still fits without a new segment
    model.malloc(40 * MB)
    assert model.segments == 2


def test_replay_of_a_trace_file(tmp_path: Path) -> None:
    events = [
        ["segment_alloc", 1, 12 * MB, 0, 0, "x"],
        ["alloc", 1, 12 * MB, 0, 0, "x"],
        ["segment_alloc", 2, 12 * MB, 0, 0, "x"],
        ["alloc", 2, 12 * MB, 0, 0, "x"],
        ["free_requested", 1, 12 * MB, 0, 0, "x"],
        ["free_completed", 1, 12 * MB, 0, 0, "x"],
        ["free_completed", 2, 12 * MB, 0, 0, "x"],
        ["segment_alloc", 3, 24 * MB, 0, 1, "y"],
        ["alloc", 3, 24 * MB, 0, 1, "y"],
    ]
    path = tmp_path / "trace.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.writelines(json.dumps(event) + "\n" for event in events)
    both = load(str(path))
    assert recorded_segments(both) == 48 * MB
    assert replay(both).peak_reserved == 48 * MB  # the 24 MB request fits neither 12
    assert replay(both, reserve=24 * MB).peak_reserved == 24 * MB
    assert len(load(str(path), [1])) == 2
