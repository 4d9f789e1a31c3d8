"""ember's logger names and the `EMBER_LOGS` switch.

Every layer logs through standard `logging` under `ember.<layer>`; a few user-facing topics
(graph breaks, recompiles, guards, graphs, output code, perf hints) have loggers of their own
that print only when named in `EMBER_LOGS`. Quiet by default: `ember` holds a NullHandler.
"""

from __future__ import annotations

import difflib
import logging
import sys
from dataclasses import dataclass

from ember.prims.errors import PrimsError

__all__ = [
    "LAYERS",
    "TOPICS",
    "LogsSpecError",
    "configure_logging",
    "layer_logger",
    "parse_logs",
    "topic_logger",
]

ROOT = "ember"
LAYERS = ("prims", "capture", "autodiff", "inductor", "runtime")


@dataclass(frozen=True)
class Topic:
    """A user-facing log topic: its logger and a line for the docs."""

    logger: str
    help: str


TOPICS: dict[str, Topic] = {
    "graph_breaks": Topic(
        "ember.capture.graph_breaks",
        "each graph break: the user's line, the reason and what to do about it",
    ),
    "recompiles": Topic(
        "ember.capture.recompiles",
        "each recompilation of a function, with the guard that failed",
    ),
    "guards": Topic("ember.capture.guards", "the guards of each compiled entry"),
    "graphs": Topic(
        "ember.prims.graphs",
        "each Graph a layer produces, printed with the pass that made it and the user's lines",
    ),
    "output_code": Topic("ember.inductor.output_code", "the generated wrapper and kernel source"),
    "perf_hints": Topic(
        "ember.inductor.perf_hints",
        "places where ember could not generate fast code and why",
    ),
    "autotune": Topic(
        "ember.runtime.autotune",
        "each autotuned kernel: the launch configs timed, their times and the one chosen",
    ),
}

OFF = logging.CRITICAL + 1
_FORMAT = "[%(name)s] %(levelname)s: %(message)s"


class LogsSpecError(PrimsError, ValueError):
    """`EMBER_LOGS` names an unknown topic or layer, or is malformed."""


def topic_logger(topic: str) -> logging.Logger:
    """The logger for a user-facing topic (`graph_breaks`, `recompiles`, ...)."""
    if topic not in TOPICS:
        raise LogsSpecError(_unknown(topic, "log topic"))
    return logging.getLogger(TOPICS[topic].logger)


def layer_logger(layer: str) -> logging.Logger:
    """The logger of an ember layer (`ember.capture`, ...)."""
    if layer not in LAYERS:
        raise LogsSpecError(_unknown(layer, "layer"))
    return logging.getLogger(f"{ROOT}.{layer}")


def parse_logs(spec: str) -> dict[str, int]:
    """Logger name -> level for an `EMBER_LOGS` value such as `"graph_breaks,+inductor,-guards"`.

    A name alone means INFO, `+name` DEBUG, `-name` off. Names are topics or layers.
    """
    levels: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        prefix, name = (item[0], item[1:].strip()) if item[0] in "+-" else ("", item)
        if name in TOPICS:
            logger = TOPICS[name].logger
        elif name in LAYERS:
            logger = f"{ROOT}.{name}"
        else:
            raise LogsSpecError(_unknown(name, "EMBER_LOGS entry"))
        levels[logger] = {"": logging.INFO, "+": logging.DEBUG, "-": OFF}[prefix]
    return levels


class _EmberHandler(logging.StreamHandler):  # type: ignore[type-arg, unused-ignore]
    """The stderr handler `configure_logging` installs; recognised so it is never doubled."""


_applied: str | None = None


def configure_logging(spec: str | None = None) -> None:
    """Apply an `EMBER_LOGS` spec (default: the `EMBER_LOGS` variable) to ember's loggers.

    Idempotent: the same spec twice changes nothing, a new spec replaces the old one, and an
    empty spec restores the quiet default. Topics not named are off.
    """
    global _applied
    if spec is None:
        from ember.prims.config import PrimsConfig, load

        spec = load(PrimsConfig).logs
    levels = parse_logs(spec)  # raises before anything changes
    canonical = ",".join(f"{name}={level}" for name, level in sorted(levels.items()))
    if canonical == _applied:
        return
    root = logging.getLogger(ROOT)
    for handler in [h for h in root.handlers if isinstance(h, _EmberHandler)]:
        root.removeHandler(handler)
    for layer in LAYERS:
        logging.getLogger(f"{ROOT}.{layer}").setLevel(logging.NOTSET)
    for topic in TOPICS.values():
        logging.getLogger(topic.logger).setLevel(OFF)
    if levels:
        handler = _EmberHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        root.propagate = False  # printed once, by our handler, not again by the root logger's
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    else:
        root.setLevel(logging.NOTSET)
        root.propagate = True
    _applied = canonical


def _unknown(name: str, what: str) -> str:
    valid = [*TOPICS, *LAYERS]
    close = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown {what} {name!r}{hint}; valid topics: {', '.join(TOPICS)}; "
        f"valid layers: {', '.join(LAYERS)} (prefix '+' for debug, '-' for off)"
    )


def _install_null_handler() -> None:
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())


_install_null_handler()
