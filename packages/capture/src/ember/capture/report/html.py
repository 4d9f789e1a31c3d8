"""`render`: the compile report as one static HTML page (inline CSS, no scripts).

Sections, each a `<section id=...>`: summary, compiled frames (function, source line,
recompile reason), graphs per stage (captured, ember-autodiff's stages, inductor's Graph after
its passes with the scheduled kernels), graph breaks, recompiles, guards, generated kernels,
compile time per stage, cache, memory and performance hints. `SECTIONS` lists them; the CI
test renders the page in headless Chromium and checks each is there.
"""

from __future__ import annotations

import html
import os
import resource
import sys
import time

from ember.capture.report.recorder import FrameRecord, Recorder, Stage

SECTIONS: dict[str, str] = {
    "summary": "Summary",
    "frames": "Compiled frames",
    "graphs": "Graphs per stage",
    "breaks": "Graph breaks",
    "recompiles": "Recompiles",
    "guards": "Guards",
    "kernels": "Generated kernels",
    "times": "Compile time per stage",
    "cache": "Cache",
    "memory": "Memory",
    "hints": "Performance hints",
}

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d232a; background: #fafafa; }
header { background: #23272f; color: #fff; padding: 12px 24px; }
header h1 { margin: 0; font-size: 20px; }
nav { background: #fff; border-bottom: 1px solid #ddd; padding: 6px 24px; position: sticky; top: 0; }
nav a { margin-right: 14px; color: #b34700; text-decoration: none; }
main { padding: 8px 24px 40px; }
section { background: #fff; border: 1px solid #e3e3e3; border-radius: 6px; padding: 8px 16px;
  margin: 14px 0; }
h2 { font-size: 17px; margin: 6px 0 10px; }
h3 { font-size: 15px; margin: 12px 0 4px; }
pre { background: #f4f5f7; padding: 8px; overflow-x: auto; font-size: 12px; max-height: 420px; }
table { border-collapse: collapse; }
td, th { border-bottom: 1px solid #eee; padding: 3px 10px 3px 0; text-align: left;
  vertical-align: top; }
th { font-weight: 600; }
.muted { color: #777; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f4f5f7; padding: 0 3px; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _where(frame: FrameRecord) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line}"


def _table(headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _section(key: str, body: str) -> str:
    return f'<section id="{key}"><h2>{_e(SECTIONS[key])}</h2>{body}</section>'


def _frame_link(frame: FrameRecord) -> str:
    return f'<a href="#frame-{frame.number}">#{frame.number} {_e(frame.function)}</a>'


def _summary(recorder: Recorder, title: str) -> str:
    frames = recorder.frames
    graphs = sum(frame.graph is not None for frame in frames)
    kernels = sum(len(frame.kernels) for frame in frames)
    compile_ms = sum(frame.capture_ms for frame in frames)
    hits = sum(stage.cache_hit for frame in frames for stage in frame.stages)
    ended = recorder.stopped or time.time()
    rows = [
        ["program", f"<code>{_e(title)}</code>"],
        ["recorded", f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(recorder.started))} "
         f"for {ended - recorder.started:.1f} s"],
        ["compiled frames", str(len(frames))],
        ["graphs", str(graphs)],
        ["graph breaks", str(sum(len(frame.breaks) for frame in frames))],
        ["recompiles", str(sum(frame.recompile_reason is not None for frame in frames))],
        ["generated modules", str(kernels)],
        ["time in capture and backends", f"{compile_ms:.0f} ms"],
        ["artifact cache hits", str(hits)],
    ]  # fmt: skip
    return _section("summary", _table(["", ""], rows, ""))


def _frames(recorder: Recorder) -> str:
    rows = [
        [
            _frame_link(frame),
            f"<code>{_e(frame.file)}:{frame.line}</code><br><code>{_e(frame.code)}</code>",
            str(len(frame.graph.nodes)) if frame.graph is not None else "—",
            _e(frame.recompile_reason or "first capture"),
        ]
        for frame in recorder.frames
    ]
    table = _table(["frame", "source line", "ops", "why captured"], rows, "no frame was compiled")
    return _section("frames", table)


def _stage_ms(stage: Stage) -> float | None:
    """A stage's time: the sum of its passes where it lists them (the Graph's own stamp is
    only its last pass's)."""
    return sum(stage.pass_ms.values()) if stage.pass_ms else stage.time_ms


def _capture_ms(frame: FrameRecord) -> float | None:
    stamp = frame.graph.meta.get("time_ms") if frame.graph is not None else None
    return float(stamp) if stamp else None


def _stage(stage: Stage) -> str:
    ms = _stage_ms(stage)
    timing = f" · {ms:.1f} ms" if ms is not None else ""
    name = stage.name.removeprefix(f"{stage.layer} ")
    nodes = f" · {stage.nodes} ops" if stage.nodes else ""
    return f'<h3>{_e(stage.layer)}: {_e(name)}<span class="muted">{nodes}{timing}</span></h3>' + (
        f"<pre>{_e(stage.text)}</pre>" if stage.text else ""
    )


def _graphs(recorder: Recorder) -> str:
    parts: list[str] = []
    for frame in recorder.frames:
        parts.append(
            f'<details open id="frame-{frame.number}"><summary><b>#{frame.number} '
            f"{_e(frame.function)}</b> <code>{_e(_where(frame))}</code></summary>"
        )
        if frame.graph is not None:
            ms = _capture_ms(frame)
            timing = f" · {ms:.1f} ms" if ms is not None else ""
            parts.append(
                f"<h3>capture: captured<span class='muted'> · {len(frame.graph.nodes)} ops"
                f"{timing}</span></h3><pre>{_e(frame.graph)}</pre>"
            )
        else:
            parts.append('<p class="muted">no graph: the frame runs eagerly</p>')
        parts.extend(_stage(stage) for stage in frame.stages)
        parts.append("</details>")
    return _section("graphs", "".join(parts) or '<p class="muted">no graphs</p>')


def _breaks(recorder: Recorder) -> str:
    rows = [
        [_frame_link(frame), _e(reason)] for frame in recorder.frames for reason in frame.breaks
    ]
    return _section("breaks", _table(["frame", "break"], rows, "no graph breaks"))


def _recompiles(recorder: Recorder) -> str:
    rows = [
        [_frame_link(frame), _e(frame.recompile_reason)]
        for frame in recorder.frames
        if frame.recompile_reason is not None
    ]
    return _section("recompiles", _table(["frame", "reason"], rows, "no recompiles"))


def _guards(recorder: Recorder) -> str:
    parts = []
    for frame in recorder.frames:
        items = "".join(f"<li><code>{_e(guard)}</code></li>" for guard in frame.guards)
        parts.append(
            f"<details><summary>{_frame_link(frame)}: {len(frame.guards)} guard(s)</summary>"
            f"<ul>{items}</ul></details>"
        )
    return _section("guards", "".join(parts) or '<p class="muted">no guards</p>')


def _kernels(recorder: Recorder) -> str:
    parts = []
    for frame in recorder.frames:
        for kernels in frame.kernels:
            lines = kernels.module.count("\n") + 1
            parts.append(
                f"<details><summary>{_frame_link(frame)}: graph {_e(kernels.graph)} "
                f"({lines} lines of kernels)</summary><h3>kernels</h3><pre>{_e(kernels.module)}"
                f"</pre><h3>wrapper</h3><pre>{_e(kernels.wrapper)}</pre></details>"
            )
    body = "".join(parts) or '<p class="muted">no generated code (a backend without codegen)</p>'
    return _section("kernels", body)


def _times(recorder: Recorder) -> str:
    rows: list[list[str]] = []
    for frame in recorder.frames:
        link = _frame_link(frame)
        rows.append([link, "<b>capture and backends, in all</b>", f"<b>{frame.capture_ms:.1f}</b>"])
        capture_ms = _capture_ms(frame)
        if capture_ms is not None:
            rows.append([link, "capture: bytecode to Graph", f"{capture_ms:.1f}"])
        for stage in frame.stages:
            if stage.pass_ms:
                for name, ms in stage.pass_ms.items():
                    rows.append([link, _e(f"{stage.layer}: {name}"), f"{ms:.1f}"])
            elif stage.time_ms is not None:
                rows.append([link, _e(f"{stage.layer}: {stage.name}"), f"{stage.time_ms:.1f}"])
    return _section("times", _table(["frame", "stage", "ms"], rows, "nothing was compiled"))


def _cache(recorder: Recorder) -> str:
    rows = []
    for frame in recorder.frames:
        hits = sum(stage.cache_hit for stage in frame.stages)
        built = sum(bool(stage.pass_ms) for stage in frame.stages)
        rows.append([_frame_link(frame), str(hits), str(built)])
    return _section(
        "cache",
        _table(["frame", "artifact cache hits", "graphs generated"], rows, "nothing was compiled"),
    )


def _memory(recorder: Recorder) -> str:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_mib = usage / 1024 if sys.platform != "darwin" else usage / 2**20
    rows = [["process peak resident memory", f"{peak_mib:.0f} MiB"]]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        rows.append(["CUDA peak allocated", f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"])
    for frame in recorder.frames:
        for stage in frame.stages:
            if stage.memory:
                plan = ", ".join(f"{k} {v}" for k, v in stage.memory.items())
                rows.append([f"{_frame_link(frame)} {_e(stage.name)}", _e(plan)])
    return _section("memory", _table(["", ""], rows, ""))


def _hints(recorder: Recorder) -> str:
    items = "".join(f"<li>{_e(hint)}</li>" for hint in recorder.hints)
    body = f"<ul>{items}</ul>" if items else '<p class="muted">no performance hints</p>'
    return _section("hints", body)


def render(recorder: Recorder, title: str = "") -> str:
    """The report page of everything `recorder` collected."""
    title = title or " ".join(sys.argv) or "python"
    nav = "".join(f'<a href="#{key}">{_e(name)}</a>' for key, name in SECTIONS.items())
    body = "".join(
        [
            _summary(recorder, title),
            _frames(recorder),
            _graphs(recorder),
            _breaks(recorder),
            _recompiles(recorder),
            _guards(recorder),
            _kernels(recorder),
            _times(recorder),
            _cache(recorder),
            _memory(recorder),
            _hints(recorder),
        ]
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>ember compile report: {_e(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>ember compile report</h1><div>{_e(title)}</div></header>"
        f"<nav>{nav}</nav><main>{body}</main></body></html>\n"
    )
