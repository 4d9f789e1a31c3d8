"""benchmarks.dynamic_shapes at a tiny size on CPU: the grid, the training loop and the
JSON lines it writes; the GPT-2-small preset and the CUDA defaults as parsed options."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.dynamic_shapes import Bench, main, parse


def test_a_tiny_grid_and_training_write_their_rows(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    main(
        [
            "--backend", "aot_eager", "--width", "16", "--depth", "1", "--lengths", "4,8",
            "--batches", "1,2", "--rounds", "1", "--budget", "16", "--train",
            "--out", str(out),
        ]
    )  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    kinds = [row["kind"] for row in rows]
    assert kinds == [
        "compilations",
        *["inference"] * 4,
        "summary",
        "training compilations",
        "training",
        "training",
    ]
    assert rows[0]["compilations"]["dynamic=True"] == 2
    assert rows[0]["compilations"]["dynamic=None, per batch over the lengths"] == {"1": 2, "2": 2}
    assert [(row["batch"], row["length"]) for row in rows[1:5]] == [(1, 4), (1, 8), (2, 4), (2, 8)]
    assert all(set(row["ms"]) == {"eager", "dynamic", "static"} for row in rows[1:5])
    assert rows[5]["text"].startswith("ember dynamic within 10% of static at ")
    assert rows[6]["compilations"]["dynamic=None"] == 2
    assert all(set(row["ms"]) == {"eager", "dynamic", "static"} for row in rows[7:])
    assert all(row["static_compile_s"] > 0 for row in rows[7:])
    assert rows[6]["compilations"]["dynamic=None"] == 2  # the static compiles are their own


def test_the_gpt2_small_preset_on_cuda_runs_bf16() -> None:
    options = parse(["--device", "cuda", "--preset", "gpt2-small", "--depth", "2"])
    assert (options.width, options.depth, options.heads, options.vocab) == (768, 2, 12, 50257)
    assert options.dtype == "bfloat16"
    assert parse([]).dtype == "float32"


def test_a_failing_variant_on_the_gpu_is_recorded_and_left_out(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    bench = Bench(parse(["--out", str(out)]))
    bench.keep_going = True  # as on CUDA

    def broken() -> None:
        raise RuntimeError("symbolic kernel failed")

    assert bench.attempt("dynamic", broken) is None
    assert bench.attempt("static", lambda: None) is not None
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["kind"] == "error" and row["variant"] == "dynamic"
    assert "symbolic kernel failed" in row["error"]
