"""A Recorder without CUDA: "capture" runs the graph once, "replay" runs it again on the
recorded arguments and writes the results into the recorded output memory, as a CUDA graph
writes the same addresses. Poisoned tensors are listed instead of made unreadable."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.runtime.cudagraphs import CaptureError


class FakeRecording:
    def __init__(self, recorder: FakeRecorder, call: Callable[[list[Any]], Sequence[Any]],
                 args: list[Any]) -> None:  # fmt: skip
        self.recorder = recorder
        self.call = call
        # its own list: the call may empty the one it gets, and tensors donated to it must
        # stay allocated (a CUDA pool keeps freed memory; here it would go back to malloc)
        self.args = list(args)
        self.outputs = tuple(call(args))

    def replay(self) -> None:
        self.recorder.replays += 1
        for owned, new in zip(self.outputs, self.call(list(self.args))):
            if isinstance(owned, torch.Tensor) and owned.data_ptr() != new.data_ptr():
                owned.copy_(new)


class FakeRecorder:
    def __init__(self) -> None:
        self.recordings: list[FakeRecording] = []
        self.replays = 0
        self.invalidated: list[tuple[torch.Tensor, str]] = []
        self.host: set[int] = set()  # ids of tensors that count as CPU tensors
        self.fail_with: type[Exception] | None = None
        self.reserves: list[int] = []  # each recording's `reserve`
        self.warm_up_reserves: list[int] = []  # each warm-up's, when it asks the recorder

    def record(
        self, call: Callable[[list[Any]], Sequence[Any]], args: list[Any], reserve: int = 0
    ) -> FakeRecording:
        self.reserves.append(reserve)
        try:
            recording = FakeRecording(self, call, args)
        except Exception as error:
            if self.fail_with is not None and isinstance(error, self.fail_with):
                raise CaptureError(str(error)) from error
            raise
        self.recordings.append(recording)
        return recording

    def warm_up(self, reserve: int = 0) -> contextlib.AbstractContextManager[object]:
        self.warm_up_reserves.append(reserve)
        return contextlib.nullcontext()

    def storage_alias(self, owner: torch.Tensor) -> torch.UntypedStorage:
        storage = owner.untyped_storage()
        return torch._C._construct_storage_from_data_pointer(
            storage.data_ptr(), owner.device, storage.nbytes()
        )

    def invalidate(self, tensor: torch.Tensor, message: str) -> None:
        self.invalidated.append((tensor, message))

    def on_device(self, tensor: torch.Tensor) -> bool:
        return id(tensor) not in self.host
