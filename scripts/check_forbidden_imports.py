"""Check that ember's source never reaches into PyTorch's compiler or into the umbrella package.

DESIGN.md: ember builds on eager PyTorch only. import-linter cannot forbid subpackages of an
external package (`torch._dynamo`), so this AST scan does it: any import of, or attribute
access to, a forbidden torch module (and any call of `torch.compile`) in `packages/*/src` or
`src/` fails, except inside modules named `interop`. It also fails when a layer imports the
umbrella `ember` package itself (layers import each other only as `ember.<layer>`).

Usage: python scripts/check_forbidden_imports.py [ROOT]   (exit status 1 on any violation)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FORBIDDEN_TORCH_MODULES = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch",
    "torch._decomp",
    "torch._refs",
    "torch._prims",
    "torch._prims_common",
    "torch.fx",
    "torch.export",
    "torch._export",
    "torch._subclasses",
    "torch._higher_order_ops",
)
FORBIDDEN_TORCH_NAMES = (*FORBIDDEN_TORCH_MODULES, "torch.compile")
LAYERS = ("prims", "capture", "autodiff", "inductor", "runtime")
ALLOWED_MODULE_NAME = "interop"


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _forbidden(dotted: str) -> str | None:
    """The forbidden name that `dotted` is or lies under, if any."""
    for name in FORBIDDEN_TORCH_NAMES:
        if dotted == name or dotted.startswith(name + "."):
            return name
    return None


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for an attribute chain rooted at a plain name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def check_source(source: str, path: Path, *, is_layer: bool) -> list[Violation]:
    """Violations in one module's source text."""
    tree = ast.parse(source, filename=str(path))
    found: list[Violation] = []
    torch_aliases = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (name := _forbidden(alias.name)) is not None:
                    found.append(Violation(path, node.lineno, f"imports {name}"))
                if is_layer and alias.name == "ember":
                    found.append(
                        Violation(path, node.lineno, "a layer imports the umbrella `ember`")
                    )
                if alias.name == "torch" and alias.asname:
                    torch_aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if (name := _forbidden(node.module) or _forbidden(full)) is not None:
                    found.append(Violation(path, node.lineno, f"imports {name}"))
                if is_layer and node.module == "ember" and alias.name not in LAYERS:
                    found.append(
                        Violation(
                            path,
                            node.lineno,
                            f"a layer imports `{alias.name}` from the umbrella `ember`",
                        )
                    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            # importlib.import_module("torch._dynamo") and __import__("torch.fx")
            callee = _dotted(node.func) or ""
            target = node.args[0].value
            if callee.rpartition(".")[2] in ("import_module", "__import__") and isinstance(
                target, str
            ):
                if (name := _forbidden(target)) is not None:
                    found.append(Violation(path, node.lineno, f"imports {name} dynamically"))
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in torch_aliases and rest:
                if (name := _forbidden(f"torch.{rest}")) is not None:
                    found.append(Violation(path, node.lineno, f"uses {name}"))
    # An attribute chain `torch.fx.Graph` holds `torch.fx` too: report each line once per name.
    unique = {(v.line, v.what): v for v in found}
    return sorted(unique.values(), key=lambda v: (v.line, v.what))


def source_files(root: Path) -> Iterator[tuple[Path, bool]]:
    """Every ember module under `root`, with whether it belongs to a layer package."""
    for path in sorted((root / "packages").glob("*/src/**/*.py")):
        yield path, True
    for path in sorted((root / "src").glob("**/*.py")):
        yield path, False


def is_interop(path: Path) -> bool:
    return path.stem == ALLOWED_MODULE_NAME or ALLOWED_MODULE_NAME in path.parent.parts


def check_tree(root: Path) -> list[Violation]:
    found: list[Violation] = []
    for path, is_layer in source_files(root):
        violations = check_source(
            path.read_text(encoding="utf-8"), path.relative_to(root), is_layer=is_layer
        )
        if is_interop(path):
            violations = [v for v in violations if "umbrella" in v.what]
        found.extend(violations)
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    found = check_tree(root)
    for violation in found:
        print(violation)
    if found:
        print(
            f"{len(found)} forbidden import(s): ember builds on eager PyTorch only "
            "(see DESIGN.md, 'Torch surface'); conversions to torch.fx belong in a module named "
            "`interop`.",
            file=sys.stderr,
        )
        return 1
    print(f"forbidden imports: none in {sum(1 for _ in source_files(root))} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
