"""A compile worker process: compiles kernel variants sent as JSON lines on stdin.

Started by path (`python compile_worker.py`), never imported by ember: it loads `variant.py`
beside it by path, so a worker imports only the standard library, triton and the kernel module
(not torch, not ember, not the user's `__main__`). One reply line per job, on the original
stdout; anything the compiler prints goes to stderr. A worker also builds the kernel's C launcher
into the Triton cache (a C compile of its own, the slowest part of loading a kernel).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0] or ".").resolve() == here:
        sys.path.pop(0)  # our file names must not shadow other modules
    spec = importlib.util.spec_from_file_location(
        "ember_triton_compile_variant", here / "variant.py"
    )
    assert spec is not None and spec.loader is not None
    variant = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = variant
    spec.loader.exec_module(variant)
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    for line in sys.stdin:
        job = json.loads(line)
        start = time.perf_counter()
        reply: dict[str, object] = {"ok": True}
        try:
            compiled = variant.compile_variant_file(
                variant.Variant.from_json(job["variant"]), job["cache_dir"]
            )
        except Exception as error:  # reported; the parent compiles it again and raises there
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        else:
            try:  # the launcher too: its C compile is the slowest part of a first load
                variant.build_launcher(compiled, job["cache_dir"])
            except Exception as error:  # the parent builds it when it loads the kernel
                reply["launcher_error"] = f"{type(error).__name__}: {error}"
        reply["seconds"] = time.perf_counter() - start
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
