"""The `fake` fixture: new CUDA graph trees record with a FakeRecorder (no GPU needed)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # cudagraph_fakes, under --import-mode=importlib

from cudagraph_fakes import FakeRecorder  # noqa: E402

from ember.runtime.cudagraphs import set_recorder_factory  # noqa: E402


@pytest.fixture
def fake() -> Iterator[FakeRecorder]:
    """New trees record with one FakeRecorder; restored afterwards."""
    recorder = FakeRecorder()
    set_recorder_factory(lambda device: recorder)
    yield recorder
    set_recorder_factory(None)
