"""Kernels named by their content, so that equal kernels are compiled once.

A generated kernel names its parameters after the program's storages (`buf53`, `in184`) and
itself after its position (`triton_fused_add_mul_12`), so two layers' equal kernels differ in
text: each is compiled again, within a graph and across graphs (the dropout-on compile of a
model, its backward), and Triton's and the C++ build's source-keyed caches never hit.
`name_by_content` renames the parameters by position (`arg0`, `arg1`, ...) and the local
buffers by first use, and names the kernel `<stem>_<digest of its text and launch data>`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Sequence

from ember.inductor.codegen.backend import KernelSource

_POSITION = re.compile(r"(_\d+)+$")
_COMMENT_PREFIXES = ("#", "//")


def name_by_content(source: KernelSource, local_buffers: Iterable[str] = ()) -> KernelSource:
    """`source` with position-free parameter, local-buffer and kernel names. Its arguments
    (what the wrapper passes, in order) and grid stay as they were."""
    renames = {argument.name: f"arg{i}" for i, argument in enumerate(source.arguments)}
    renames |= _locals_by_first_use(source.source, [b for b in local_buffers if b not in renames])
    text, launch = source.source, source.launch
    if renames:
        pattern = _pattern(renames)
        text = _rename(text, pattern, renames)
        launch = {
            str(_renamed(key, pattern, renames)): _renamed(value, pattern, renames)
            for key, value in launch.items()
        }
    stem = _POSITION.sub("", source.name)
    own_name = {source.name: "KERNEL"}
    body = "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith(_COMMENT_PREFIXES)
    )
    payload = [stem, _rename(body, _pattern(own_name), own_name), launch]
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    name = f"{stem}_{digest[:16]}"
    new_name = {source.name: name}
    text = _rename(text, _pattern(new_name), new_name)
    return dataclasses.replace(source, name=name, source=text, launch=launch)


def distinct(sources: Iterable[KernelSource]) -> list[KernelSource]:
    """One source per kernel name, in first-use order: the definitions a module holds."""
    first: dict[str, KernelSource] = {}
    for source in sources:
        first.setdefault(source.name, source)
    return list(first.values())


def _locals_by_first_use(text: str, names: Sequence[str]) -> dict[str, str]:
    first = {name: _pattern([name]).search(text) for name in names}
    used = sorted((match.start(), name) for name, match in first.items() if match is not None)
    return {name: f"local{i}" for i, (_, name) in enumerate(used)}


def _pattern(names: Iterable[str]) -> re.Pattern[str]:
    # a parameter appears bare or as the pointer `p_<name>` the backends declare
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"\b(p_)?({alternatives})\b")


def _rename(text: str, pattern: re.Pattern[str], renames: dict[str, str]) -> str:
    return pattern.sub(lambda m: (m.group(1) or "") + renames[m.group(2)], text)


def _renamed(value: object, pattern: re.Pattern[str], renames: dict[str, str]) -> object:
    """A parameter name in a backend's launch data (e.g. Triton's signature and mutated
    pointers) renamed as in the text; other values as they are."""
    if isinstance(value, str):
        return _rename(value, pattern, renames) if pattern.fullmatch(value) else value
    if isinstance(value, dict):
        return {
            _renamed(k, pattern, renames): _renamed(v, pattern, renames) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_renamed(v, pattern, renames) for v in value)
    return value
