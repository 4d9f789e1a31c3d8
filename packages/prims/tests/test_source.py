"""User source locations: the innermost frame of user code, found without classifying a file
twice (every recorded op walks its stack)."""

from __future__ import annotations

import ember.prims.source as source
from ember.prims.source import SourceLocation, user_location


def _where() -> SourceLocation | None:
    return user_location(skip=0)  # starts inside ember (internal), then this file


def test_user_location_names_the_user_line_and_classifies_each_file_once() -> None:
    source._is_internal.cache_clear()
    first = _where()
    classified = source._is_internal.cache_info().misses
    second = _where()
    assert first is not None and first.file == __file__ and first.function == "_where"
    assert "user_location(skip=0)" in first.code
    assert second == first
    assert classified >= 2  # ember's file and this one
    assert source._is_internal.cache_info().misses == classified  # none classified again
