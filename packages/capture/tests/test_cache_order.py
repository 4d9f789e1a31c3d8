"""The order in which a call meets the cached entries: an entry whose recompile reused an
earlier entry's compiled code is checked first (both run the same code), so a classifier
whose first call wrote its config does not check its stale first entry on every later call;
recompile reasons still describe the entry captured last."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from ember.capture.compile import compile as ember_compile
from ember.capture.testing import CompileCounter, ConfigWritingClassifier


def _count_checks(state: Any, counts: Counter[int]) -> None:
    """Count each entry's guard checks (by its position now) from here on."""
    for index, entry in enumerate(state.table.entries):
        check_inputs = entry.check.check_inputs

        def counted(
            arguments: Any, globals_dict: Any, index: int = index, original: Any = check_inputs
        ) -> Any:
            counts[index] += 1
            return original(arguments, globals_dict)

        entry.check.check_inputs = counted


def test_the_entry_that_replaced_a_stale_one_is_checked_first() -> None:
    torch.manual_seed(0)
    model = ConfigWritingClassifier()
    x = torch.randn(2, 4)
    counter = CompileCounter()
    compiled = ember_compile(model, backend=counter)
    state = compiled.forward._ember_compiled
    compiled(x)
    compiled(x)  # recompiles: the first call wrote problem_type
    assert state.captures == 2 and counter.frame_count == 1
    stale = next(e for e in state.table.entries if e is not state.table.latest)
    assert state.table.entries[0] is state.table.latest
    counts: Counter[int] = Counter()
    _count_checks(state, counts)
    expected = model.linear(x).log_softmax(-1)
    for _ in range(5):
        torch.testing.assert_close(compiled(x), expected)
    assert counts == Counter({0: 5}), counts  # the stale entry is never checked

    model.config.problem_type = None  # the stale entry's guards hold again: it serves
    torch.testing.assert_close(compiled(x), expected)
    assert state.captures == 2
    assert stale in state.table.entries


def test_recompile_reason_describes_the_latest_capture() -> None:
    model = ConfigWritingClassifier()
    x = torch.randn(2, 4)
    compiled = ember_compile(model, backend=CompileCounter())
    state = compiled.forward._ember_compiled
    compiled(x)
    compiled(x)
    model.config.problem_type = "regression"  # another Graph: a third capture
    torch.testing.assert_close(compiled(x), model.linear(x))
    assert state.captures == 3
    assert (
        "changed from 'single_label_classification' to 'regression'"
        in (state.recompile_reasons[-1])
    ), state.recompile_reasons


def test_automatic_dynamic_entries_are_checked_first() -> None:
    """A decoder called at a new length, then a new batch: each symbolic recompile is checked
    before the narrower entries, so later calls at new sizes check one entry, not three."""

    def decoder(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1])
        return (table[ids] + table[positions]).softmax(-1)

    table = torch.randn(64, 8)
    compiled = ember_compile(decoder, backend=CompileCounter())
    state = compiled._ember_compiled
    for shape in ((2, 4), (2, 9), (3, 9)):  # static, then the length, then the batch symbolic
        ids = torch.randint(0, 64, shape)
        torch.testing.assert_close(compiled(ids, table), decoder(ids, table))
    assert state.captures == 3
    general = state.table.entries[0]
    assert general is state.table.latest and general.graph is not None
    assert len(general.graph.symbols) == 2
    counts: Counter[int] = Counter()
    _count_checks(state, counts)
    for shape in ((5, 7), (4, 30), (2, 4)):
        ids = torch.randint(0, 64, shape)
        torch.testing.assert_close(compiled(ids, table), decoder(ids, table))
    assert state.captures == 3
    assert counts == Counter({0: 3}), counts  # the narrower entries are never reached
