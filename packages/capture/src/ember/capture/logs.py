"""ember.capture's user-facing loggers, from the shared `EMBER_LOGS` topics of ember-prims.

`graph_breaks` (one line per break: the user's line and the reason), `recompiles` (why
a cached graph could not be reused), `guards` (the guards of each new
cache entry) and `graphs` (each captured Graph). Quiet by default; `EMBER_LOGS=recompiles`
turns a topic on (applied when compile() is first called).
"""

from __future__ import annotations

from ember.prims.logs import configure_logging, topic_logger

recompiles = topic_logger("recompiles")
guards = topic_logger("guards")
graphs = topic_logger("graphs")
graph_breaks = topic_logger("graph_breaks")

_configured = False


def configure_once() -> None:
    """Apply `EMBER_LOGS` the first time capture is used."""
    global _configured
    if not _configured:
        _configured = True
        configure_logging()
