"""Backend resolution: eager and torch.compile always; ember names never crash the runner."""

from __future__ import annotations

import pytest

from benchmarks import backends


def test_eager_and_peer_resolve() -> None:
    resolved = backends.resolve(["eager", "torch.compile", "torch.compile:aot_eager"])
    assert [b.name for b in resolved] == ["eager", "torch.compile", "torch.compile:aot_eager"]
    assert [b.kind for b in resolved] == ["baseline", "peer", "peer"]


def test_ember_backends_are_found_or_explained() -> None:
    backends.ensure_ember_importable()
    for backend in backends.resolve(["ember"]):
        assert backend.kind == "ember"
        assert backend.unavailable is None or backend.unavailable  # a reason, never an exception


def test_unknown_ember_name_is_unavailable_not_an_error() -> None:
    backends.ensure_ember_importable()
    backend = backends.lookup("ember:no_such_backend_anywhere")
    assert backend.unavailable


def test_unknown_backend_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        backends.resolve(["tvm"])
