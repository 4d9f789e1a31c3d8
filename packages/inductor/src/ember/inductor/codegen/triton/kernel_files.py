"""Each kernel of a graph's Triton module as a module of its own: the prelude and that kernel.

Triton keys its compile cache by a kernel's text and the line it starts on in its file. In
the graph's module a kernel's line depends on every kernel before it (and on its comments),
so a kernel named by its content (`codegen/kernel_names.py`) would still be compiled again
in every graph that holds it. In its own file, after the prelude and without the comments, it
starts on the same line everywhere, and the file (named by its digest) is shared too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ember.inductor.codegen.triton.ops import PRELUDE


def kernel_files(module: str, names: Iterable[str]) -> dict[str, str]:
    """The source of each kernel `names` in `module` as a module of its own."""
    lines = module.splitlines(keepends=True)
    functions = {
        node.name: node for node in ast.parse(module).body if isinstance(node, ast.FunctionDef)
    }
    files: dict[str, str] = {}
    for name in names:
        function = functions[name]
        start = min([function.lineno, *(d.lineno for d in function.decorator_list)])
        text = "".join(lines[start - 1 : function.end_lineno])
        files[name] = f"{PRELUDE.strip()}\n\n\n{text.rstrip()}\n"
    return files
