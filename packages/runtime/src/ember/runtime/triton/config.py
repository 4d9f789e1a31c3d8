"""`LaunchConfig`: one way to launch a Triton kernel (its constexpr block sizes, warps, stages).

A `TritonKernel` holds a list of them; the first is the heuristic default, the others are
what autotuning may choose instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchConfig:
    """The constexpr block sizes of a kernel, e.g. `(("XBLOCK", 64), ("RBLOCK", 128))`."""

    constants: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 1

    def constant(self, name: str) -> int:
        """The value of the block size `name`."""
        for key, value in self.constants:
            if key == name:
                return value
        raise KeyError(f"launch config {self} has no constant {name!r}")

    def describe(self) -> str:
        """A short label for logs: `XBLOCK=64, RBLOCK=128, warps=4, stages=1`."""
        parts = [f"{name}={value}" for name, value in self.constants]
        parts += [f"warps={self.num_warps}", f"stages={self.num_stages}"]
        return ", ".join(parts)
