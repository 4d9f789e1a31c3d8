"""Layer boundaries: where one ember layer hands a Graph to the next.

Each layer passes the Graphs it gives away through `cross_boundary`. With
`EMBER_SERIALIZE_BOUNDARIES=1` the Graph travels through `dumps`/`loads`, so the receiving
layer gets a fresh copy built from bytes alone: proof that the layers share only the format.
"""

from __future__ import annotations

from ember.prims.config import PrimsConfig, load
from ember.prims.graph import Graph
from ember.prims.logs import layer_logger
from ember.prims.serialize import dumps, loads

logger = layer_logger("prims")


def cross_boundary(graph: Graph, boundary: str, config: PrimsConfig | None = None) -> Graph:
    """`graph` as the next layer receives it: a serialized round trip when the config says so.

    `boundary` names the hand-over for the debug log ("capture -> backend"). The config is
    read from the environment on each call unless given, so tests can turn the setting on for
    one block with `monkeypatch.setenv`.
    """
    config = config if config is not None else load(PrimsConfig)
    if not config.serialize_boundaries:
        return graph
    data = dumps(graph)
    logger.debug("boundary %s: graph %s crossed as %d bytes", boundary, graph.name, len(data))
    return loads(data)
