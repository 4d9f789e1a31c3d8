"""`compile_kernels`: compile many kernels in parallel worker processes, then load them here.

Workers (`compile_worker.py`, started by path) fill Triton's on-disk cache; the compiles in
this process that follow are cache hits (same `ASTSource`, same key). Worker count: the
`workers` argument, else `EMBER_COMPILE_THREADS`, else one per CPU; one worker, one job, or
(unless `workers` is given) fewer than four jobs compile in this process. A progress bar
appears when compiling takes over 2 s. Workers stay alive between calls (a training step
compiles a forward and a backward graph) and exit with this process. A variant that compiled
once leaves a marker in the ember cache, so a warm process compiles it here, from Triton's
cache, without starting a worker.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ember.prims import write_atomically
from ember.prims.config import load
from ember.prims.logs import layer_logger
from ember.runtime.config import RuntimeConfig
from ember.runtime.triton.kernel import TritonKernel, interpreting
from ember.runtime.triton.module import triton_cache_dir
from ember.runtime.triton.progress import Progress
from ember.runtime.triton.target import cuda_target
from ember.runtime.triton.variant import Variant

logger = layer_logger("runtime")

WORKER = Path(__file__).resolve().parent / "compile_worker.py"

# Starting a worker (python, triton, Triton's backend) costs about as much as compiling one or
# two small kernels, so unless the caller asks for workers, fewer jobs than this stay in-process.
MIN_POOL_JOBS = 4


def compile_kernels(
    kernels: Sequence[TritonKernel],
    target: Any = None,
    workers: int | None = None,
    *,
    aligned: Sequence[bool] = (True,),
    progress_threshold: float = 2.0,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Compile every config each kernel will use (the aligned variant; `aligned=(True, False)`
    adds the unaligned one, which ahead-of-time packages carry) for `target` (default: the
    current CUDA device). Nothing to do without a GPU and no target, or when the kernels run
    in the Triton interpreter (their module was imported with `TRITON_INTERPRET=1`)."""
    kernels = list(kernels)
    if not kernels or interpreting(kernels[0].function):
        return
    if target is None:
        import torch

        if not torch.cuda.is_available():
            return
        target = cuda_target()
    jobs = [
        (kernel, config, flag)
        for kernel in kernels
        for config in kernel.planned_configs()
        for flag in aligned
    ]
    count = worker_count(workers, len(jobs))
    progress = Progress(len(jobs), threshold=progress_threshold, stream=stream, clock=clock)
    try:
        if count > 1:
            variants = {  # kernels that share a variant compile it once
                (
                    kernel.variant(config, aligned=flag, target=target),
                    triton_cache_dir(kernel.cache),
                ): kernel.cache.root
                for kernel, config, flag in jobs
            }
            # a warm start: variants an earlier process compiled are Triton cache hits here,
            # so they start no worker (16 workers importing triton cost seconds)
            cold = [job for job, root in variants.items() if not _marker(job, root).exists()]
            progress.total = len(cold)
            if cold:
                _warm(sorted(cold, key=repr), min(count, len(cold)), progress)
            for kernel, config, flag in jobs:
                kernel.compile(config, aligned=flag, target=target)  # cache hits now
            for job, root in variants.items():
                marker = _marker(job, root)
                if not marker.exists():
                    with contextlib.suppress(OSError):
                        write_atomically(marker, b"")
        else:
            for kernel, config, flag in jobs:
                kernel.compile(config, aligned=flag, target=target)
                progress.advance()
    finally:
        progress.close()


def _marker(job: tuple[Variant, str | None], root: Path) -> Path:
    """The file that says `job` compiled in some process into its Triton cache (keyed by the
    variant, that cache's folder and Triton's version): later processes hit the cache."""
    import triton

    variant, cache_dir = job
    text = json.dumps([variant.to_json(), cache_dir, str(triton.__version__)])
    return root / "triton" / "compiled" / hashlib.sha256(text.encode()).hexdigest()


def worker_count(requested: int | None, jobs: int) -> int:
    """How many worker processes to start for `jobs` compile jobs (1: compile in-process)."""
    if requested is None and jobs < MIN_POOL_JOBS:
        return 1
    count = requested if requested is not None else load(RuntimeConfig).compile_threads
    if count <= 0:
        count = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    return max(1, min(count, jobs))


def _warm(jobs: Sequence[tuple[Variant, str | None]], count: int, progress: Progress) -> None:
    """Compile `jobs` in `count` worker processes; failures are logged and left to this process."""
    pending: queue.SimpleQueue[tuple[Variant, str | None]] = queue.SimpleQueue()
    for job in jobs:
        pending.put(job)
    threads = [threading.Thread(target=_drive, args=(pending, progress)) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# Workers idle between compiles: a process's start (python, triton, Triton's backend) is paid
# once per process, not once per compiled graph. They exit with this process.
_IDLE: list[subprocess.Popen[str]] = []
_IDLE_LOCK = threading.Lock()


def _start_worker() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env={**os.environ, "TRITON_INTERPRET": "0"},  # workers compile, never interpret
    )


def _take_worker() -> subprocess.Popen[str]:
    with _IDLE_LOCK:
        while _IDLE:
            process = _IDLE.pop()
            if process.poll() is None:
                return process
    return _start_worker()


def _release_worker(process: subprocess.Popen[str]) -> None:
    with _IDLE_LOCK:
        _IDLE.append(process)


@atexit.register
def _stop_workers() -> None:
    with _IDLE_LOCK:
        workers, _IDLE[:] = list(_IDLE), []
    for process in workers:
        _stop(process)


def _stop(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(OSError):
        assert process.stdin is not None
        process.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5.0)


def _drive(pending: queue.SimpleQueue[tuple[Variant, str | None]], progress: Progress) -> None:
    """Run one worker process: hand it jobs one at a time until none are left, then keep it
    for the next compile."""
    try:
        process = _take_worker()
    except OSError as error:
        logger.warning("cannot start a Triton compile worker (%s); compiling in-process", error)
        return
    assert process.stdin is not None and process.stdout is not None
    healthy = True
    try:
        while True:
            try:
                variant, cache_dir = pending.get_nowait()
            except queue.Empty:
                break
            message = {"variant": variant.to_json(), "cache_dir": cache_dir}
            try:
                process.stdin.write(json.dumps(message) + "\n")
                process.stdin.flush()
                line = process.stdout.readline()
            except OSError:
                line = ""
            progress.advance()
            if not line:
                logger.warning("a Triton compile worker exited; compiling the rest in-process")
                healthy = False
                break
            reply = json.loads(line)
            if not reply["ok"]:
                logger.debug("compile worker failed on %s: %s", variant.kernel, reply["error"])
    finally:
        if healthy and process.poll() is None:
            _release_worker(process)
        else:
            _stop(process)
