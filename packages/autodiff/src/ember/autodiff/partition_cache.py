"""The partition cache: a training Graph's forward and backward halves kept across processes.

`aot` traces the joint forward/backward Graph through torch's autograd and partitions it on
every compile; a second process compiling the same captured Graph gets the same halves. With
a store (any object with `get(key) -> bytes | None` and `put(key, bytes)`, such as
ember-runtime's `ArtifactCache`, which a backend hands in), the halves are kept under a key of
the serialized Graph (its provenance aside), the flags of the inputs that require grad, the
partitioner, the decomposition table (the source files of its functions) and the source of
ember-autodiff and ember-prims. The entry is two serialized Graphs (pickle-free) and a JSON
header; an entry that does not decode is a miss.

The header also keeps what functionalization found about the Graph's calling convention
(the `Signature`'s computed outputs, copy-backs and output sources) when it is plain data (no
output rebuilt through view steps): a hit then skips functionalization too. The rest of the
Signature is the Graph's own inputs and tree specs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import struct
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from ember.autodiff.functionalize import OutputSource, Signature
from ember.autodiff.partition import Partition
from ember.prims import Graph, InputKind, TensorSpec, dumps, loads

_DOMAIN = b"ember-partition\x00v2\x00"
_LITERALS = (type(None), bool, int, float, str)  # output literals kept as JSON
_LENGTH = struct.Struct("<Q")


@dataclasses.dataclass(frozen=True)
class CachedPartition:
    """What an entry holds: the partition, the differentiable flags of the forward's outputs,
    and the Signature of the Graph it was made for (None: functionalize to get it)."""

    parts: Partition
    differentiable: tuple[bool, ...]
    signature: Signature | None


class PartitionStore(Protocol):
    """Where partitions are kept: keys are 64 lowercase hex digits."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> bool: ...


def partition_key(
    graph: Graph,
    requires_grad: Sequence[bool],
    partitioner: str,
    resident: Collection[int],
    decompositions: Mapping[str, Callable[..., Any]] | None,
) -> str | None:
    """The key of `graph`'s partition, or None for a Graph the format cannot carry."""
    try:
        payload = dumps(dataclasses.replace(graph, meta={}))
    except Exception:  # noqa: BLE001 - compiled, just not cached
        return None
    settings = {
        "requires_grad": [bool(flag) for flag in requires_grad],
        "partitioner": partitioner,
        "resident": sorted(int(i) for i in resident),
        "decompositions": sorted(decompositions or ()),
        "decomposition_sources": _decomposition_sources(decompositions),
        "sources": _source_fingerprint(),
        "torch": torch.__version__,
    }
    digest = hashlib.sha256(_DOMAIN)
    for part in (payload, json.dumps(settings, sort_keys=True).encode()):
        digest.update(_LENGTH.pack(len(part)))
        digest.update(part)
    return digest.hexdigest()


def encode(
    parts: Partition, differentiable: Sequence[bool], signature: Signature | None = None
) -> bytes:
    """The entry bytes of a partition (and of the Signature, when it is plain data)."""
    forward, backward = dumps(parts.forward), dumps(parts.backward)
    header = json.dumps(
        {
            "saved": list(parts.saved),
            "saved_bytes": parts.saved_bytes,
            "num_forward_outputs": parts.num_forward_outputs,
            "differentiable": [bool(flag) for flag in differentiable],
            "forward_bytes": len(forward),
            "signature": _encode_signature(signature) if signature is not None else None,
        }
    ).encode()
    return _LENGTH.pack(len(header)) + header + forward + backward


def decode(data: bytes, graph: Graph) -> CachedPartition | None:
    """The entry in `data` for `graph` (the Graph its key was made of), or None if it does not
    decode (a damaged or foreign entry is a miss, never an error)."""
    try:
        (length,) = _LENGTH.unpack_from(data, 0)
        header = json.loads(data[_LENGTH.size : _LENGTH.size + length])
        start = _LENGTH.size + length
        middle = start + int(header["forward_bytes"])
        forward, backward = _with_constants_of(
            graph, loads(data[start:middle]), loads(data[middle:])
        )
        parts = Partition(
            forward,
            backward,
            tuple(str(name) for name in header["saved"]),
            int(header["saved_bytes"]),
            int(header["num_forward_outputs"]),
        )
        differentiable = tuple(bool(flag) for flag in header["differentiable"])
        signature = _decode_signature(header.get("signature"), graph, parts.num_forward_outputs)
        return CachedPartition(parts, differentiable, signature)
    except Exception:  # noqa: BLE001 - any damage reads as a miss
        return None


def _with_constants_of(graph: Graph, *parts: Graph) -> tuple[Graph, ...]:
    """`parts` holding the tensors a cold compile would: a constant of `graph` (the captured
    Graph) is that very tensor, and another one moves to the device its input declares. The
    format loads constants on the CPU: a warm start's forward then read a CPU tensor where the
    cold one read the GPU's, which kept it off CUDA graphs (GPT-2 training, reduce-overhead)."""
    for part in parts:
        devices = {
            gi.target: gi.value.spec.device
            for gi in part.inputs
            if gi.target is not None and isinstance(gi.value.spec, TensorSpec)
        }
        for name, tensor in list(part.constants.items()):
            own = graph.constants.get(name)
            if isinstance(own, torch.Tensor) and _same_kind(own, tensor):
                part.constants[name] = own
            elif name in devices and tensor.device != devices[name]:
                part.constants[name] = tensor.to(devices[name])
    return parts


def _same_kind(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape


def _encode_signature(signature: Signature) -> dict[str, Any] | None:
    """The traced part of `signature` as JSON, or None where an output is rebuilt through
    view steps or is a literal JSON cannot carry exactly."""
    outputs: list[list[Any]] = []
    for source in signature.outputs:
        if source.steps or type(source.literal) not in _LITERALS:
            return None
        outputs.append([source.kind, source.index, source.literal])
    return {
        "computed": signature.computed,
        "mutations": [list(pair) for pair in signature.mutations],
        "outputs": outputs,
    }


def _decode_signature(
    encoded: dict[str, Any] | None, graph: Graph, forward_outputs: int
) -> Signature | None:
    """The Signature of `graph` from its traced part; None when absent. Raises on an entry
    whose indices do not fit the Graph (the caller reads that as a miss)."""
    if encoded is None:
        return None
    flat = tuple(gi for gi in graph.inputs if gi.kind is not InputKind.CONSTANT)
    computed = int(encoded["computed"])
    mutations = tuple((int(i), int(o)) for i, o in encoded["mutations"])
    outputs = tuple(OutputSource(str(kind), int(index), (), literal) for kind, index, literal in encoded["outputs"])  # fmt: skip
    if not (
        computed + len(mutations) == forward_outputs
        and len(outputs) == len(graph.output_leaves)
        and all(0 <= i < len(flat) and computed <= o < forward_outputs for i, o in mutations)
        and all(_fits(source, len(flat), computed) for source in outputs)
    ):
        raise ValueError("the entry's signature does not fit the Graph")
    return Signature(
        inputs=flat,
        computed=computed,
        mutations=mutations,
        outputs=outputs,
        out_spec=graph.out_spec,
        in_spec=graph.in_spec,
        input_leaves=tuple(graph.input_leaves),
    )


def _fits(source: OutputSource, inputs: int, computed: int) -> bool:
    if source.kind in ("computed", "output"):
        return 0 <= source.index < computed
    if source.kind == "input":
        return 0 <= source.index < inputs
    return source.kind == "literal"


def _decomposition_sources(table: Mapping[str, Callable[..., Any]] | None) -> str:
    """A hash of the source files that define the table's functions (an edit misses)."""
    modules = sorted({getattr(fn, "__module__", "") or "" for fn in (table or {}).values()})
    return _files_digest(tuple(modules))


@functools.cache
def _files_digest(modules: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in modules:
        module = sys.modules.get(name)
        path = inspect.getsourcefile(module) if module is not None else None
        digest.update(name.encode())
        if path:
            digest.update(Path(path).read_bytes())
    return digest.hexdigest()


@functools.cache
def _source_fingerprint() -> str:
    """A hash of ember-autodiff's and ember-prims' own source: tracing and partitioning."""
    import ember.prims

    digest = hashlib.sha256()
    for package in (Path(__file__).parent, Path(ember.prims.__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
