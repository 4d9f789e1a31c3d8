"""Tests of ember.prims.logs: EMBER_LOGS parsing, topic loggers, quiet default."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ember.prims.logs import (
    LAYERS,
    OFF,
    TOPICS,
    LogsSpecError,
    configure_logging,
    layer_logger,
    parse_logs,
    topic_logger,
)


@pytest.fixture(autouse=True)
def quiet_afterwards() -> Iterator[None]:
    yield
    configure_logging("")


def test_parse_topics_and_layers_with_prefixes() -> None:
    assert parse_logs("graph_breaks, +inductor,-guards,capture") == {
        "ember.capture.graph_breaks": logging.INFO,
        "ember.inductor": logging.DEBUG,
        "ember.capture.guards": OFF,
        "ember.capture": logging.INFO,
    }
    assert parse_logs("") == {} and parse_logs(" , ") == {}


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(LogsSpecError) as caught:
        parse_logs("graph_brakes")
    message = str(caught.value)
    assert "'graph_brakes'" in message and "did you mean 'graph_breaks'" in message
    for name in [*TOPICS, *LAYERS]:
        assert name in message


def test_topic_and_layer_loggers() -> None:
    assert topic_logger("graph_breaks").name == "ember.capture.graph_breaks"
    assert topic_logger("output_code").name == "ember.inductor.output_code"
    assert layer_logger("runtime").name == "ember.runtime"
    assert set(TOPICS) == {
        "graph_breaks",
        "recompiles",
        "guards",
        "graphs",
        "output_code",
        "perf_hints",
        "autotune",
    }
    with pytest.raises(LogsSpecError, match="unknown log topic"):
        topic_logger("bytecode")


def _handlers() -> list[logging.Handler]:
    return [
        h for h in logging.getLogger("ember").handlers if not isinstance(h, logging.NullHandler)
    ]


def test_quiet_by_default() -> None:
    configure_logging("")
    root = logging.getLogger("ember")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    assert _handlers() == []
    assert not topic_logger("guards").isEnabledFor(logging.CRITICAL)


def test_configure_is_idempotent_and_replaceable() -> None:
    configure_logging("guards,+capture")
    configure_logging("guards,+capture")
    assert len(_handlers()) == 1
    assert topic_logger("guards").isEnabledFor(logging.INFO)
    assert not topic_logger("guards").isEnabledFor(logging.DEBUG)
    assert layer_logger("capture").isEnabledFor(logging.DEBUG)
    assert not topic_logger("recompiles").isEnabledFor(logging.CRITICAL)  # not named: off

    configure_logging("recompiles")
    assert len(_handlers()) == 1
    assert not topic_logger("guards").isEnabledFor(logging.CRITICAL)
    assert topic_logger("recompiles").isEnabledFor(logging.INFO)
    assert not layer_logger("capture").isEnabledFor(logging.INFO)


def test_bad_spec_changes_nothing() -> None:
    configure_logging("graphs")
    with pytest.raises(LogsSpecError):
        configure_logging("graphs,nonsense")
    assert topic_logger("graphs").isEnabledFor(logging.INFO)


def test_named_topic_prints_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("graph_breaks")
    topic_logger("graph_breaks").info("break at model.py:3")
    topic_logger("guards").info("not shown")
    err = capsys.readouterr().err
    assert "[ember.capture.graph_breaks] INFO: break at model.py:3" in err
    assert "not shown" not in err


def test_spec_defaults_to_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_LOGS", "+perf_hints")
    configure_logging()
    assert topic_logger("perf_hints").isEnabledFor(logging.DEBUG)
