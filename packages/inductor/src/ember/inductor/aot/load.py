"""Loading an ahead-of-time package: no Triton, no C++ compiler, nothing compiled.

`load_package(path)` reads the exported program, checks `aot/plan.json` against this process
(torch's major.minor version, the machine, for a GPU package a cubin for the GPU's
architecture; AotPackageError says what differs and to run `aot_compile` again), checks every
binary's sha256, opens the C++ library with ctypes or makes a `CubinKernel` of each cubin,
and runs the wrapper source with them: the same `CompiledGraph` a compile would give.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ember.inductor.codegen.wrapper import wrapper_namespace
from ember.inductor.compiled import CompiledGraph
from ember.inductor.errors import InductorError
from ember.prims import ExportedProgram, load_program, resolve_op

PLAN_FILE = "plan.json"
PLAN_FORMAT = 1


class AotPackageError(InductorError):
    """An ahead-of-time package cannot run here (device, versions, damage); the message says
    what differs and what to do."""


def package_versions() -> dict[str, str]:
    """The versions a package records and checks."""
    return {"torch": torch.__version__, "ember-inductor": _version("ember-inductor")}


def load_package(path: str | os.PathLike[str]) -> tuple[ExportedProgram, CompiledGraph]:
    """The program saved at `path` and its compiled callable, from the package's binaries."""
    folder = Path(path)
    program = load_program(folder)
    directory = folder / "aot"
    try:
        plan = json.loads((directory / PLAN_FILE).read_text())
    except (OSError, ValueError) as error:
        raise AotPackageError(
            f"{directory / PLAN_FILE} cannot be read ({error}); run aot_compile again"
        ) from error
    if (
        not isinstance(plan, dict)
        or plan.get("format") != "ember-aot"
        or plan.get("version") != PLAN_FORMAT
    ):
        raise AotPackageError(
            f"{directory} is not an ember ahead-of-time package of format {PLAN_FORMAT}"
        )
    _check_versions(plan)
    if plan["device"] == "cpu":
        kernels = _cpu_kernels(plan, directory)
    else:
        kernels = _gpu_kernels(plan, directory)
    flat = program.flat_graph()
    ops = {target: resolve_op(target) for target in plan["targets"]}
    namespace = wrapper_namespace(kernels, ops)
    exec(compile(plan["wrapper"], f"<ember aot wrapper {flat.name}>", "exec"), namespace)  # noqa: S102
    return program, CompiledGraph(
        flat, namespace["call"], plan["wrapper"], "", int(plan["kernel_count"])
    )


def _check_versions(plan: dict[str, Any]) -> None:
    packaged = str(plan.get("versions", {}).get("torch", "?"))
    if _major_minor(packaged) != _major_minor(torch.__version__):
        raise AotPackageError(
            f"the package was built with torch {packaged}, this process runs torch "
            f"{torch.__version__}; the wrapper calls ATen ops of its torch: run aot_compile "
            "again with this torch"
        )
    if plan.get("machine") != platform.machine():
        raise AotPackageError(
            f"the package was built on {plan.get('machine')}, this machine is "
            f"{platform.machine()}: run aot_compile on this kind of machine"
        )


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def _read(directory: Path, entry: dict[str, str]) -> bytes:
    path = directory / entry["file"]
    try:
        payload = path.read_bytes()
    except OSError as error:
        raise AotPackageError(
            f"{path} cannot be read ({error}); the package is incomplete"
        ) from error
    if hashlib.sha256(payload).hexdigest() != entry["sha256"]:
        raise AotPackageError(f"{path} does not match the plan's sha256: the package is damaged")
    return payload


def _cpu_kernels(plan: dict[str, Any], directory: Path) -> dict[str, Any]:
    if "library" not in plan:
        return {}
    _read(directory, plan["library"])  # checked before ctypes opens it
    library = ctypes.CDLL(str(directory / plan["library"]["file"]))
    kernels: dict[str, Any] = {}
    for name, kinds in plan["exports"].items():
        function = getattr(library, name)
        function.restype = None
        function.argtypes = [
            ctypes.c_void_p if kind == "pointer" else ctypes.c_int64 for kind in kinds
        ]
        kernels[name] = function
    return kernels


def _gpu_kernels(plan: dict[str, Any], directory: Path) -> dict[str, Any]:
    from ember.runtime.cubin import CubinKernel, CubinVariant

    if not plan.get("gpus"):
        return {}
    if not torch.cuda.is_available():
        raise AotPackageError("the package holds CUDA kernels, but this process sees no GPU")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major * 10 + minor}"
    built = plan["gpus"].get(arch)
    if built is None:
        raise AotPackageError(
            f"the package holds kernels for {', '.join(sorted(plan['gpus']))}, this GPU "
            f"({torch.cuda.get_device_name()}) is {arch}: run aot_compile(..., targets=[{major * 10 + minor}])"
        )
    kernels: dict[str, Any] = {}
    for name, entry in built["kernels"].items():
        variants = {
            kind: CubinVariant(
                cubin=_read(directory, data),
                function=data["function"],
                num_warps=int(data["num_warps"]),
                shared=int(data["shared"]),
                global_scratch_size=int(data["global_scratch_size"]),
                global_scratch_align=int(data["global_scratch_align"]),
            )
            for kind, data in entry["variants"].items()
        }
        signature = [(str(param), str(kind)) for param, kind in entry["signature"]]
        kernels[name] = CubinKernel(
            name, signature, int(entry["block"]), variants["aligned"], variants.get("unaligned")
        )
    return kernels


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "0+source"
