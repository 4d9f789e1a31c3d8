"""Corpus: what library code (transformers, the stdlib) does inside a model's forward, captured
whole as torch.compile captures it: new objects of plain classes, os.environ reads, dtype
facts, inspect.signature, deep copies of configs, loss modules built in forward, log calls,
torch.compiler.is_compiling(). Each program matches eager (outputs, state written) with the
graph and break counts given, on two calls."""

from __future__ import annotations

import collections.abc
import contextvars
import copy
import inspect
import logging
import os
from typing import Any

import pytest
import torch
from capture_corpus_support import Case, cases, check, randn
from torch import nn

from ember.capture.compile import compile as ember_compile
from ember.capture.explain import collecting
from ember.capture.testing import CompileCounter

# ---- objects made in the function ---------------------------------------------------------


class Layer:
    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None

    def update(self, keys: torch.Tensor) -> torch.Tensor:
        self.keys = keys if self.keys is None else torch.cat([self.keys, keys])
        return self.keys


class Cache:
    """Like transformers' DynamicCache: layers made in __init__, mutated by update()."""

    def __init__(self, layers: int) -> None:
        self.layers = [Layer() for _ in range(layers)]
        self.seen = 0

    def update(self, keys: torch.Tensor, index: int) -> torch.Tensor:
        self.seen += keys.shape[0]
        return self.layers[index].update(keys)

    def __len__(self) -> int:
        return len(self.layers)


class Pair:
    def __init__(self, first: Cache, second: Cache) -> None:
        self.first = first
        self.second = second


class View(collections.abc.Sequence):  # type: ignore[type-arg]
    """A Sequence subclass (empty __slots__ in its bases), iterated by __len__/__getitem__."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> float:  # type: ignore[override]
        if index >= 3:
            raise IndexError(index)
        return self.scale * (index + 1)


def cache_returned(x):
    cache = Cache(2)
    y = cache.update(x * 2, 0)
    cache.update(x + 1, 1)
    cache.update(y, 0)
    return cache, len(cache)


def cache_used_not_returned(x):
    cache = Cache(1)
    if cache:
        x = cache.update(x, 0) + 1
    return x * cache.seen


def nested_new_objects(x):
    pair = Pair(Cache(1), Cache(1))
    pair.first.update(x * 2, 0)
    pair.second = pair.first  # aliasing survives the rebuild
    return pair


def new_object_across_break(x):
    cache = Cache(1)
    cache.update(x * 2, 0)
    print("break")
    cache.update(x * 3, 0)
    return cache


def sequence_view(x):
    total = x
    for scale in View(2.0):
        total = total * scale
    return total, hasattr(View(1.0), "scale"), hasattr(View(1.0), "missing")


def new_object_attribute_deleted(x):
    cache = Cache(1)
    cache.extra = x * 2
    del cache.extra
    return x + cache.seen, hasattr(cache, "extra")


# ---- context variables ---------------------------------------------------------------------

COLLECTOR: contextvars.ContextVar[Any] = contextvars.ContextVar("collector", default=None)
SCALE: contextvars.ContextVar[float] = contextvars.ContextVar("scale")


def _inner(x):
    collected = COLLECTOR.get()
    if collected is not None:
        collected.append("inner")
    return x * 2


def context_set_reset(x):
    # transformers' output capturing: set, run, reset in finally
    token = COLLECTOR.set([])
    try:
        y = _inner(x)
        seen = list(COLLECTOR.get())
    finally:
        COLLECTOR.reset(token)
    return y, seen, COLLECTOR.get()


def context_set_kept(x):
    SCALE.set(3.0)
    return x * SCALE.get()


def context_read(x):
    return x * SCALE.get(1.0)


def _context_state() -> Any:
    return COLLECTOR.get(), SCALE.get("unset")


def _context_reset() -> None:
    COLLECTOR.set(None)


# ---- Mapping mixins and autograd.Function without grad -----------------------------------


class Registry(collections.abc.MutableMapping):  # type: ignore[type-arg]
    """transformers' GeneralInterface: a class-wide mapping and a local one."""

    _global_mapping = {"double": lambda t: t * 2}  # noqa: RUF012

    def __init__(self) -> None:
        self._local_mapping: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._local_mapping[key] = value

    def __delitem__(self, key: str) -> None:
        del self._local_mapping[key]

    def __iter__(self) -> Any:
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self) -> int:
        return len({**self._global_mapping, **self._local_mapping})


REGISTRY = Registry()


def mapping_get_missing(x):
    negate = REGISTRY.get("missing", lambda t: -t)
    return REGISTRY.get("double", None)(negate(x)), "missing" in REGISTRY, "double" in REGISTRY


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


def function_apply_no_grad(x):
    with torch.no_grad():
        return Square.apply(x) + 1


# ---- the process environment -------------------------------------------------------------

MISSING_KEY = "EMBER_TEST_SURELY_UNSET_VARIABLE"
SET_KEY = "EMBER_TEST_SET_VARIABLE"


def environ_missing(x):
    if os.environ.get(MISSING_KEY, "0") == "1":
        return x * 2
    return x + (MISSING_KEY in os.environ)


def environ_set(x):
    factor = float(os.environ.get(SET_KEY, "1"))
    return x * factor + float(os.environ[SET_KEY])


# ---- constants from torch and inspect ----------------------------------------------------


def finfo_min(x):
    return x.masked_fill(x < 0, torch.finfo(x.dtype).min) + torch.iinfo(torch.int8).max


class Stages(nn.Module):
    """timm's RegNet: forward walks `self.children()`."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.skipped = None
        self.second = nn.ReLU()
        self.again = self.first  # a repeat: children() yields it once

    def forward(self, x):
        for block in self.children():
            x = block(x)
        names = [name for name, _ in self.named_children()]
        return x, names


def test_module_children_walk() -> None:
    model = Stages()
    check(Case(Stages.forward, lambda: (model, randn(2, 3)), copy_inputs=False))


def _chunk(hidden):
    return hidden * 2


def signature_length(x):
    count = len(inspect.signature(_chunk).parameters)
    names = list(inspect.signature(_chunk).parameters)
    return x * count, names


class Chunked(nn.Module):
    def feed_forward(self, hidden):
        return hidden + 1

    def forward(self, x):
        # transformers' apply_chunking_to_forward: the signature of a bound method
        assert len(inspect.signature(self.feed_forward).parameters) == 1
        return self.feed_forward(x)


def compiling_flag(x):
    if torch.compiler.is_compiling():
        return x * 2
    return x.nonzero()


# ---- deep copies of configs ---------------------------------------------------------------


class Config:
    attribute_map = {"num_layers": "layers"}

    def __init__(self) -> None:
        self.layers = 2
        self.decoder_layers = 3
        self.names = ["a", "b"]

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def config_deepcopy(config, x):
    decoder = copy.deepcopy(config)
    for key in decoder.to_dict():
        if key.startswith("decoder_"):
            setattr(decoder, key[len("decoder_") :], getattr(decoder, key))
            delattr(decoder, key)
    return x * decoder.layers + config.num_layers, decoder


# ---- modules built in forward, log calls --------------------------------------------------


def loss_built_in_forward(x, target):
    loss = nn.CrossEntropyLoss(ignore_index=-100)
    return loss(x, target)


LOGGER = logging.getLogger("ember.tests.library")


def logs_a_warning(x):
    LOGGER.warning("a warning with %s", "an argument")
    return x + 1


CASES = cases(
    Case(mapping_get_missing, lambda: (randn(3),)),
    Case(function_apply_no_grad, lambda: (randn(3).requires_grad_(),)),
    Case(context_set_reset, lambda: (randn(3),), state=_context_state, reset=_context_reset),
    Case(context_read, lambda: (randn(3),), state=_context_state, reset=_context_reset),
    Case(cache_returned, lambda: (randn(2, 3),)),
    Case(cache_used_not_returned, lambda: (randn(2, 3),)),
    Case(nested_new_objects, lambda: (randn(2, 3),)),
    Case(new_object_across_break, lambda: (randn(2, 3),), graphs=2, breaks=1),
    Case(sequence_view, lambda: (randn(3),)),
    Case(new_object_attribute_deleted, lambda: (randn(3),)),
    Case(environ_missing, lambda: (randn(3),)),
    Case(finfo_min, lambda: (randn(4),)),
    Case(signature_length, lambda: (randn(3),)),
    Case(config_deepcopy, lambda: (Config(), randn(3))),
    Case(loss_built_in_forward, lambda: (randn(4, 5), torch.tensor([0, 1, -100, 4]))),
    Case(logs_a_warning, lambda: (randn(3),)),
)


@pytest.mark.parametrize("case", CASES)
def test_library(case: Case) -> None:
    check(case)


def test_bound_method_signature_in_module() -> None:
    check(Case(Chunked().forward.__func__, lambda: (Chunked(), randn(3)), copy_inputs=False))


def test_environ_value_is_guarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed environment variable recompiles instead of reusing the old constant."""
    monkeypatch.setenv(SET_KEY, "2")
    counter = CompileCounter()
    compiled = ember_compile(environ_set, backend=counter)
    x = randn(3)
    torch.testing.assert_close(compiled(x), environ_set(x))
    monkeypatch.setenv(SET_KEY, "3")
    torch.testing.assert_close(compiled(x), environ_set(x))
    assert counter.frame_count == 2
    monkeypatch.setenv(MISSING_KEY, "1")
    missing = ember_compile(environ_missing, backend=counter)
    torch.testing.assert_close(missing(x), environ_missing(x))


def test_config_change_recompiles_the_deep_copy() -> None:
    config = Config()
    counter = CompileCounter()
    compiled = ember_compile(config_deepcopy, backend=counter)
    x = randn(3)
    first, copied = compiled(config, x)
    torch.testing.assert_close(first, x * 3 + 2)
    assert copied.layers == 3 and not hasattr(copied, "decoder_layers")
    assert config.decoder_layers == 3  # the original is untouched
    again, second_copy = compiled(config, x)
    torch.testing.assert_close(again, first)
    assert second_copy is not copied  # a fresh copy per call, as in eager
    config.decoder_layers = 5
    changed, copied = compiled(config, x)
    torch.testing.assert_close(changed, x * 5 + 2)
    assert counter.frame_count == 2


def test_log_call_is_replayed_after_the_graph(caplog: pytest.LogCaptureFixture) -> None:
    compiled = ember_compile(logs_a_warning, backend=CompileCounter())
    with caplog.at_level(logging.WARNING, logger=LOGGER.name), collecting() as seen:
        compiled(randn(3))
        compiled(randn(3))
    assert [r.getMessage() for r in caplog.records] == ["a warning with an argument"] * 2
    assert seen.break_count == 0


def test_is_compiling_is_true_while_capturing() -> None:
    """As under torch.compile, library code takes its compiler path (one graph, no break)."""
    x = randn(3)
    assert compiling_flag(x).shape == (3, 1)  # eager: not compiling
    counter = CompileCounter()
    with collecting() as seen:
        result = ember_compile(compiling_flag, backend=counter)(x)
    torch.testing.assert_close(result, x * 2)
    assert (counter.frame_count, seen.break_count) == (1, 0)


def landmark_mask(x):
    # transformers' mask builders: under a compiler, always materialize the mask; in eager,
    # skip it when nothing is padded (a data-dependent check).
    if torch.compiler.is_compiling():
        return torch.zeros(x.shape[-1], x.shape[-1])
    if bool((x > 0).all()):
        return None
    return torch.zeros(x.shape[-1], x.shape[-1])


def landmark_scores(x, mask):
    # Nystromformer: landmark scores (landmarks x seq) take a (seq x seq) mask, which only
    # broadcasts when landmarks == seq, so the compiler path raises.
    scores = x.reshape(2, -1).sum(-1, keepdim=True) * x.reshape(1, -1)[:, :4]
    return scores if mask is None else scores + mask


def masked_landmarks(x):
    return landmark_scores(x, landmark_mask(x)) * 2


def raises_when_compiling(x):
    if torch.compiler.is_compiling():
        return x + torch.ones(5)  # (3,) + (5,): raises
    return x * 3


def test_is_compiling_path_that_raises_is_captured_as_eager_runs() -> None:
    """A program told it is compiled that then raises (a path eager does not take) is
    captured again answering is_compiling() False, as eager runs it."""
    x = randn(3)
    counter = CompileCounter()
    compiled = ember_compile(raises_when_compiling, backend=counter)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), x * 3)
    assert counter.frame_count == 1


def test_is_compiling_answer_reaches_callees_compiled_after_a_break() -> None:
    """Captured again with eager's answer, the callee that breaks at the data-dependent check
    and the resume function after it answer False too (the mask stays None, as in eager)."""
    x = torch.rand(4) + 1.0
    expected = masked_landmarks(x)
    counter = CompileCounter()
    compiled = ember_compile(masked_landmarks, backend=counter)
    with collecting() as seen:
        for _ in range(2):
            torch.testing.assert_close(compiled(x), expected)
    assert seen.break_count >= 1


def test_context_var_set_is_replayed_and_guarded() -> None:
    """A set() left in place is replayed after the graph; a later value recompiles."""

    def run() -> None:
        counter = CompileCounter()
        compiled = ember_compile(context_set_kept, backend=counter)
        x = randn(3)
        with collecting() as seen:
            torch.testing.assert_close(compiled(x), x * 3)
        assert SCALE.get() == 3.0 and seen.break_count == 0
        reading = ember_compile(context_read, backend=counter)
        torch.testing.assert_close(reading(x), x * 3)
        SCALE.set(5.0)
        torch.testing.assert_close(reading(x), x * 5)  # guarded: recompiles
        assert counter.frame_count == 3

    contextvars.copy_context().run(run)  # SCALE stays unset outside
    assert SCALE.get("unset") == "unset"


def model_output_views(x):
    from transformers.modeling_outputs import BaseModelOutput

    out = BaseModelOutput(last_hidden_state=x * 2, hidden_states=None)
    keys = list(out.keys())
    pairs = [(k, v + 1) for k, v in out.items()]
    return out.to_tuple(), keys, out[0], out["last_hidden_state"], pairs, list(out.values())


def test_model_output_keys_items_to_tuple_and_indexing() -> None:
    """transformers' ModelOutput (an OrderedDict subclass and a dataclass) made in the
    function: keys/values/items, to_tuple() and indexing by name and position."""
    pytest.importorskip("transformers")
    check(Case(model_output_views, lambda: (randn(3),)))


def model_output_passed_in(out, x):
    return [v * x for v in out.values()], list(out.keys()), out.to_tuple()[0] + 1


def test_model_output_passed_in_reads_its_entries() -> None:
    """A ModelOutput from outside (or kept across a break): keys/values/to_tuple read its
    entries through guarded sources instead of breaking at the C-level dict methods."""
    pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutput

    def make() -> tuple[Any, torch.Tensor]:
        return BaseModelOutput(last_hidden_state=randn(3), hidden_states=None), randn(3)

    check(Case(model_output_passed_in, make))
