"""`record_failure`: what a layer calls when a backend failed on a Graph.

It writes the failing Graph as a repro directory (`full/`), and with `minify=True` shrinks it
and writes the smallest repro beside it (the directory's own `repro.py`); it never raises
(a failure while recording is logged and the user's error stays the one they see).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.prims.graph import Graph
from ember.prims.minify.failure import Backend, Failure
from ember.prims.minify.repro import write_repro
from ember.prims.minify.shrink import minify as shrink

logger = logging.getLogger("ember.prims")


def next_directory(root: str | Path, name: str) -> Path:
    """A fresh directory under `root` for a repro of the Graph `name` (`name-1`, `name-2`...)."""
    base = Path(root)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "graph"
    number = 1
    while (base / f"{stem}-{number}").exists():
        number += 1
    return base / f"{stem}-{number}"


def record_failure(
    root: str | Path,
    backend: Backend,
    graph: Graph,
    inputs: Sequence[Any],
    failure: Failure,
    *,
    minify: bool,
    check_accuracy: bool = True,
) -> Path | None:
    """Write the repro of `failure` under `root` (minified when asked); its path, or None
    when writing failed."""
    try:
        directory = next_directory(root, graph.name)
        write_repro(
            directory / "full", backend, graph, inputs, failure, check_accuracy=check_accuracy
        )
        if not minify:
            return directory / "full"
        found = shrink(backend, graph, inputs, failure=failure, check_accuracy=check_accuracy)
        write_repro(
            directory,
            backend,
            found.graph,
            found.inputs,
            found.failure,
            check_accuracy=check_accuracy,
            original_nodes=len(graph.nodes),
        )
        (directory / "minify.log").write_text("\n".join(found.log) + "\n")
        return directory
    except Exception:  # noqa: BLE001 - the user's failure matters more than ours
        logger.warning("ember: writing the repro of graph %s failed", graph.name, exc_info=True)
        return None
