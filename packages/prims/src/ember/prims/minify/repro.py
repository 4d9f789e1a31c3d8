"""Repro directories: a failing Graph, its inputs and a script that reproduces the failure.

`write_repro(directory, backend, graph, inputs, failure)` writes

    graph.ember    the Graph (ember-prims' pickle-free format)
    inputs.ember   a Graph with no operators that returns the input tensors (their values)
    repro.json     the failure, the backend by import path (`module:function` and keywords),
                   the layers it needs, node counts and which ember wrote it
    repro.py       a script: load both, compile with the backend, run, compare with the
                   interpreter; exit 1 when the failure reproduces, 0 when it does not

`run_repro(directory)` is what repro.py calls; it imports only ember.prims and the backend's
module, so the layers the backend does not import need not be installed.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ember.prims.graph import Graph, GraphInput, InputKind, Ref, Value
from ember.prims.interpreter import Interpreter
from ember.prims.minify.failure import Backend, Failure, probe
from ember.prims.pytree import TreeSpec
from ember.prims.serialize import load, save
from ember.prims.specs import TensorSpec

# What each ember layer needs installed besides itself (DESIGN.md's DAG).
LAYER_NEEDS: dict[str, tuple[str, ...]] = {
    "prims": (),
    "runtime": ("prims",),
    "capture": ("prims",),
    "autodiff": ("prims",),
    "inductor": ("prims", "autodiff", "runtime"),
}

SCRIPT = '''\
"""ember repro: {summary}

{nodes} node(s) (minified from {original}); backend {backend}.
Needs: {needs}. Run `python repro.py [--backend module:function]`: it exits 1 when the
failure reproduces and 0 when it does not.
"""

import sys
from pathlib import Path

import ember.prims as prims
from ember.prims.minify import run_repro

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    print(prims.load(here / "graph.ember"))
    sys.exit(run_repro(here, sys.argv[1:]))
'''


def backend_reference(backend: Callable[..., Any]) -> tuple[str | None, dict[str, Any]]:
    """`module:qualname` of a backend function and the keyword arguments a `partial` binds,
    or (None, keywords) when the function cannot be imported back by that name."""
    keywords: dict[str, Any] = {}
    function: Any = backend
    while isinstance(function, functools.partial):
        keywords = {**function.keywords, **keywords}
        function = function.func
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None, keywords
    reference = f"{module}:{qualname}"
    try:
        found = resolve_backend(reference)
    except (ImportError, AttributeError):
        return None, keywords
    return (reference if found is function else None), keywords


def resolve_backend(reference: str, keywords: dict[str, Any] | None = None) -> Backend:
    """The backend a `module:qualname` reference names (imported now), with `keywords`."""
    module_name, _, qualname = reference.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if keywords:
        return functools.partial(found, **keywords)
    return found


def needed_layers(reference: str | None) -> list[str]:
    """The ember layers a backend needs installed: ember.prims, the layer the backend lives in
    or, for a backend outside ember, the layers its module imports, and what those need."""
    direct: set[str] = set()
    module_name = (reference or "").partition(":")[0]
    if module_name.startswith("ember."):
        direct.add(module_name.split(".")[1])
    elif module_name in sys.modules:
        for value in vars(sys.modules[module_name]).values():
            owner = (
                value.__name__
                if isinstance(value, types.ModuleType)
                else getattr(value, "__module__", None)
            )
            if isinstance(owner, str) and owner.startswith("ember."):
                direct.add(owner.split(".")[1])
    layers = {"prims"}
    for layer in direct & set(LAYER_NEEDS):
        layers.update((layer, *LAYER_NEEDS[layer]))
    return [f"ember.{layer}" for layer in LAYER_NEEDS if layer in layers]


def write_repro(
    directory: str | Path,
    backend: Backend,
    graph: Graph,
    inputs: Sequence[Any],
    failure: Failure,
    *,
    check_accuracy: bool = True,
    original_nodes: int | None = None,
    reference: str | None = None,
) -> Path:
    """Write a repro directory (see the module docstring); returns its path."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    keywords: dict[str, Any] = {}
    if reference is None:
        reference, keywords = backend_reference(backend)
    keywords = {k: v for k, v in keywords.items() if _json_safe(v)}
    save(graph, path / "graph.ember")
    tensors = [value for value in inputs if isinstance(value, torch.Tensor)]
    save(_carrier(tensors), path / "inputs.ember")
    described = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            described.append({"tensor": True, "requires_grad": value.requires_grad})
        else:
            described.append({"tensor": False, "value": value})
    manifest: dict[str, Any] = {
        "failure": failure.to_json(),
        "backend": reference,
        "backend_keywords": keywords,
        "check_accuracy": check_accuracy,
        "inputs": described,
        "nodes": len(graph.nodes),
        "original_nodes": original_nodes if original_nodes is not None else len(graph.nodes),
        "needs": needed_layers(reference),
        "torch": torch.__version__,
    }
    (path / "repro.json").write_text(json.dumps(manifest, indent=2) + "\n")
    script = SCRIPT.format(
        summary=failure.summary().replace('"""', "'''"),
        nodes=manifest["nodes"],
        original=manifest["original_nodes"],
        backend=reference or "(not importable by name: pass --backend module:function)",
        needs=", ".join(manifest["needs"]),
    )
    (path / "repro.py").write_text(script)
    return path


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _carrier(tensors: Sequence[torch.Tensor]) -> Graph:
    """A Graph without operators whose constants are `tensors` and which returns them."""
    inputs = []
    constants: dict[str, torch.Tensor] = {}
    for position, tensor in enumerate(tensors):
        name = f"input{position}"
        value = tensor.detach().clone()  # keeps the strides (a clone of a view is dense)
        constants[name] = value
        inputs.append(GraphInput(Value(name, TensorSpec.of(value)), InputKind.CONSTANT, name))
    return Graph(
        inputs=inputs,
        out_spec=TreeSpec("tuple", tuple(TreeSpec("leaf") for _ in tensors)),
        output_leaves=[Ref(gi.value.name) for gi in inputs],
        constants=constants,
        name="repro_inputs",
        meta={"pass": "minify"},
    )


def load_repro(directory: str | Path) -> tuple[Graph, list[Any], dict[str, Any]]:
    """The Graph, the inputs and the manifest of a repro directory."""
    path = Path(directory)
    manifest = json.loads((path / "repro.json").read_text())
    graph = load(path / "graph.ember")
    carrier = load(path / "inputs.ember")
    # constants load on the CPU: each input goes back to the device its spec names (a CUDA
    # repro's inputs met a CUDA Graph on the CPU and failed with a device mismatch instead)
    tensors = [
        tensor.to(held.value.spec.device) if isinstance(held.value.spec, TensorSpec) else tensor
        for tensor, held in zip(Interpreter(carrier)(), carrier.inputs, strict=True)
    ]
    inputs: list[Any] = []
    for described in manifest["inputs"]:
        if described["tensor"]:
            inputs.append(tensors.pop(0).requires_grad_(described["requires_grad"]))
        else:
            inputs.append(described["value"])
    return graph, inputs, manifest


def run_repro(directory: str | Path, argv: Sequence[str] = ()) -> int:
    """Reproduce a repro directory's failure: 1 when it reproduces, 0 when it does not.
    `argv` may hold `--backend module:function` to try another backend."""
    graph, inputs, manifest = load_repro(directory)
    reference = manifest["backend"]
    arguments = list(argv)
    if "--backend" in arguments:
        reference = arguments[arguments.index("--backend") + 1]
    if not reference:
        print("repro: the backend is not importable by name; pass --backend module:function")
        return 2
    backend = resolve_backend(reference, manifest.get("backend_keywords") or None)
    expected = Failure.from_json(manifest["failure"])
    found = probe(backend, graph, inputs, check_accuracy=manifest["check_accuracy"])
    if found is None:
        print(f"repro: {reference} compiles and runs this Graph correctly: not reproduced")
        return 0
    same = (
        "the same failure"
        if expected.same_as(found)
        else f"a different failure ({expected.summary()} was recorded)"
    )
    print(f"repro: {found.summary()}\nrepro: reproduced {same} with {len(graph.nodes)} node(s)")
    sys.stdout.flush()
    return 1
