"""benchmarks/cubins_check.py's verdicts from rows like a GPU run's (the cases themselves need
a GPU; `--device cpu --models hf_gpt2 --quick` runs the dry path)."""

from __future__ import annotations

from typing import Any

from benchmarks.cubins_check import verdicts

LOADS = {"cubins": 3, "kernels": 40, "triton": 1, "reasons": {"not indexable": 1},
         "kernel_fallbacks": {}}  # fmt: skip
KERNEL = {"kernel": "triton_poi_0", "cubin_type": "CubinKernel",
          "us_per_launch": {"triton": 4.0, "cubin": 3.5}, "aligned_equal": True,
          "unaligned_equal": True, "unaligned_fallbacks": {"unaligned": 1},
          "refused_equal": True, "refused_fallbacks": {"load failed": 1},
          "refused_index": {"loaded_with_triton": True, "why": "the driver refused a cubin"}}  # fmt: skip


def _rows(cubin_loss: str = "0x1.0p+0", cubin_step: float = 10.0) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for phase in ("cold", "warm-triton", "warm-cubins"):
        loss = cubin_loss if phase == "warm-cubins" else "0x1.0p+0"
        rows.append({"case": "suite hf_gpt2", "phase": phase, "losses": [loss, loss],
                     "first_step_s": 1.0, "loads": LOADS})  # fmt: skip
        step = cubin_step if phase == "warm-cubins" else 10.0
        rows.append({"case": "launch-bound hf_gpt2 gpu b1 training", "phase": phase,
                     "losses": ["0x1.0p+1"] * 2, "first_step_s": 1.0, "step_ms": step,
                     "loads": LOADS})  # fmt: skip
        rows.append({"case": "cudagraphs hf_gpt2 small", "phase": phase, "loss_rel_diff_max": 1e-7,
                     "grad_rel_err_max": 1e-6, "gradients": 28, "loads": LOADS})  # fmt: skip
    rows.append({"case": "one kernel", "phase": "warm-cubins", **KERNEL})
    return rows


def _items(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        text = line.strip()
        if (
            text.startswith("item ")
            and ": " in text
            and text.split(": ", 1)[1][:4] in ("PASS", "FAIL", "UNKN", "REPO")
        ):
            item, verdict = text.split(": ", 1)
            found[item.split(" (")[0]] = verdict.split()[0]
    return found


def test_all_items_pass() -> None:
    items = _items(verdicts(_rows()))
    assert items == {"item 1": "PASS", "item 2": "PASS", "item 3": "PASS", "item 4": "PASS",
                     "item 5": "REPORTED"}  # fmt: skip


def test_a_different_loss_and_a_slower_step_fail() -> None:
    items = _items(verdicts(_rows(cubin_loss="0x1.0000000000001p+0", cubin_step=11.0)))
    assert items["item 1"] == "FAIL" and items["item 2"] == "FAIL"


def test_missing_rows_are_unknown() -> None:
    rows = [r for r in _rows() if r["case"] != "one kernel" and not r["case"].startswith("cuda")]
    items = _items(verdicts(rows))
    assert items["item 3"] == "UNKNOWN" and items["item 4"] == "UNKNOWN"
