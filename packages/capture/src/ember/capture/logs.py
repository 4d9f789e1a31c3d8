"""ember.capture's loggers and the `EMBER_LOGS` switch.

Loggers: `ember.capture.recompiles` (why a cached graph could not be reused),
`ember.capture.guards` (the guards of each new cache entry), `ember.capture.graphs` (each
captured Graph). Quiet by default; `EMBER_LOGS=recompiles,guards` turns topics on.
"""

from __future__ import annotations

import logging
import os

recompiles = logging.getLogger("ember.capture.recompiles")
guards = logging.getLogger("ember.capture.guards")
graphs = logging.getLogger("ember.capture.graphs")

TOPICS = {"recompiles": recompiles, "guards": guards, "graphs": graphs}


def configure_from_environment(value: str | None = None) -> None:
    """Enable the topics named in `EMBER_LOGS` (comma-separated) at INFO level on stderr."""
    value = os.environ.get("EMBER_LOGS", "") if value is None else value
    for topic in (part.strip() for part in value.split(",")):
        logger = TOPICS.get(topic)
        if logger is None:
            continue
        logger.setLevel(logging.INFO)
        if not any(getattr(h, "_ember", False) for h in logger.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            handler._ember = True  # type: ignore[attr-defined]
            logger.addHandler(handler)


configure_from_environment()
