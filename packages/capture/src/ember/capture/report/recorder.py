"""`Recorder`: what the compile report shows, collected while a program runs.

Capture tells it each new cache entry (`record_capture`: the function, its source line, the
captured Graph, graph breaks, guards, the recompile reason, the capture time). The later
stages reach it through the `graphs`, `output_code` and `perf_hints` log topics, which
every layer already writes (ember-autodiff's functionalized, joint and partitioned Graphs,
ember-inductor's Graph after its passes with its schedule, pass times, memory plan and
artifact cache hits, and the generated source): the recorder listens to those loggers while
it records, without printing what the user did not ask for. Capture never imports the later
layers; the logs are the interface.
"""

from __future__ import annotations

import linecache
import logging
import threading
import time
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ember.prims import Graph
from ember.prims.logs import TOPICS

if TYPE_CHECKING:
    from ember.capture.cache import CacheEntry

# The topics the recorder listens to, and the layer each graph log comes from.
LISTENED = ("graphs", "output_code", "perf_hints")


@dataclass
class Stage:
    """One Graph a layer produced for a frame (or a note such as an artifact cache hit)."""

    layer: str
    name: str
    text: str
    nodes: int = 0
    time_ms: float | None = None
    pass_ms: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    cache_hit: bool = False


@dataclass
class Kernels:
    """The generated source of one compiled graph."""

    graph: str
    module: str
    wrapper: str


@dataclass
class FrameRecord:
    """One capture: a compiled function's new cache entry and what every layer did with it."""

    number: int
    function: str
    file: str
    line: int
    code: str
    graph: Graph | None
    breaks: list[str]
    guards: list[str]
    recompile_reason: str | None
    capture_ms: float
    # what the later layers logged for this frame, in order; a backward compiled on the
    # first backward call joins it later
    items: list[Stage | Kernels] = field(default_factory=list)

    @property
    def stages(self) -> list[Stage]:
        return [item for item in self.items if isinstance(item, Stage)]

    @property
    def kernels(self) -> list[Kernels]:
        return [item for item in self.items if isinstance(item, Kernels)]


class _Listener(logging.Handler):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__(logging.INFO)
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.recorder.on_log(record)
        except Exception:  # noqa: BLE001 - a report must never break the program
            self.handleError(record)


class Recorder:
    """Collects frames, stages, kernels and hints between `start()` and `stop()`."""

    def __init__(self) -> None:
        self.frames: list[FrameRecord] = []
        self.hints: list[str] = []
        self.started = time.time()
        self.stopped: float | None = None
        self._lock = threading.Lock()
        self._groups: dict[int, list[Stage | Kernels]] = {}  # id(captured Graph) -> stages
        self._current: list[Stage | Kernels] | None = None
        self._orphans: list[Stage | Kernels] = []
        self._listener = _Listener(self)
        self._saved: list[tuple[logging.Logger, int, bool]] = []

    # ---- listening ---------------------------------------------------------------------

    def start(self) -> None:
        for topic in LISTENED:
            logger = logging.getLogger(TOPICS[topic].logger)
            self._saved.append((logger, logger.level, logger.propagate))
            if not logger.isEnabledFor(logging.INFO):  # not asked for: record, do not print
                logger.propagate = False
                logger.setLevel(logging.INFO)
            logger.addHandler(self._listener)

    def stop(self) -> None:
        for logger, level, propagate in self._saved:
            logger.removeHandler(self._listener)
            logger.setLevel(level)
            logger.propagate = propagate
        self._saved.clear()
        self.stopped = time.time()

    def on_log(self, record: logging.LogRecord) -> None:
        topic = next((t for t in LISTENED if record.name.startswith(TOPICS[t].logger)), "graphs")
        args = record.args if isinstance(record.args, tuple) else ()
        with self._lock:
            if topic == "perf_hints":
                self.hints.append(record.getMessage())
                return
            if topic == "output_code":
                name, module, wrapper = (str(a) for a in args[:3])
                self._add(Kernels(name, module, wrapper))
                return
            graph = next((a for a in args if isinstance(a, Graph)), None)
            if graph is not None and record.getMessage().startswith("captured "):
                self._current = self._groups.setdefault(id(graph), [])
                return
            self._add(self._stage(record, graph))

    def _stage(self, record: logging.LogRecord, graph: Graph | None) -> Stage:
        message = record.getMessage()
        header = message.split("\n", 1)[0].rstrip(":")
        layer = record.pathname.replace("\\", "/").split("/ember/")[-1].split("/")[0]
        text = message.split("\n", 1)[1] if "\n" in message else ""
        time_ms = None
        if graph is not None and graph.meta.get("time_ms"):
            time_ms = float(graph.meta["time_ms"])
        return Stage(
            layer=layer,
            name=header,
            text=text,
            nodes=len(graph.nodes) if graph is not None else 0,
            time_ms=time_ms,
            pass_ms={k: float(v) for k, v in getattr(record, "ember_pass_ms", {}).items()},
            memory=dict(getattr(record, "ember_memory", {})),
            cache_hit=bool(getattr(record, "ember_cache_hit", False)),
        )

    def _add(self, item: Stage | Kernels) -> None:
        (self._current if self._current is not None else self._orphans).append(item)

    # ---- captures ------------------------------------------------------------------------

    def record_capture(
        self,
        fn: types.FunctionType,
        entry: CacheEntry,
        recompile_reason: str | None,
        seconds: float,
        guards: list[str],
    ) -> None:
        code = fn.__code__
        with self._lock:
            items = self._groups.pop(id(entry.graph), []) if entry.graph is not None else []
            frame = FrameRecord(
                number=len(self.frames) + 1,
                function=fn.__qualname__,
                file=code.co_filename,
                line=code.co_firstlineno,
                code=linecache.getline(code.co_filename, code.co_firstlineno).strip(),
                graph=entry.graph,
                breaks=[str(b) for b in entry.breaks],
                guards=guards,
                recompile_reason=recompile_reason,
                capture_ms=seconds * 1e3,
                items=items,
            )
            self.frames.append(frame)
            self._current = frame.items

    @property
    def orphans(self) -> list[Stage | Kernels]:
        """What the layers logged outside any recorded capture (a Graph compiled directly)."""
        return self._orphans
