"""The catalogue of graph-break reasons: each kind of break has a stable id, a message
template in user terms and a hint (what to change, or which ember API helps).

`Unsupported.of(id, **fields)` raises one; `GraphBreak` is what capture records when it
breaks the graph there instead (explain(), `EMBER_LOGS=graph_breaks`, fullgraph errors).
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.prims import SourceLocation


@dataclass(frozen=True)
class BreakKind:
    """One catalogue entry: `template` is formatted with the raise site's fields."""

    id: str
    template: str
    hint: str


CATALOGUE: dict[str, BreakKind] = {}


def _entry(id: str, template: str, hint: str) -> None:
    CATALOGUE[id] = BreakKind(id, template, hint)


_entry(
    "print",
    "print()",
    "the print runs in plain Python between two graphs; remove it, or print outside the "
    "compiled function",
)
_entry(
    "tensor-branch",
    "control flow that depends on a tensor's value",
    "use torch.where, or branch on Python values or tensor metadata (shape, dtype)",
)
_entry(
    "tensor-to-python",
    "{what}",
    "keep the value a tensor (a 0-d tensor works in arithmetic), or return it and read it "
    "outside the compiled function",
)
_entry(
    "disabled-function",
    "calling {name}, which is marked ember.capture.disable",
    "it runs in plain Python between two graphs; drop the disable() to capture it",
)
_entry(
    "opaque-call",
    "calling {name}, which ember.compile cannot look inside",
    "it runs in plain Python between two graphs; wrap it in ember.capture.disable to say so, "
    "or write it with torch operations",
)
_entry(
    "object-construction",
    "creating a {name} object",
    "objects of plain Python classes are modelled; this class has a custom __new__, "
    "__setattr__ or __getattribute__, non-empty __slots__, or is a torch.nn module with "
    "parameters, so it is created in plain Python between two graphs; create it outside the "
    "compiled function and pass it in",
)
_entry(
    "import",
    "{construct}",
    "an import of a module not imported yet runs in plain Python; move it to module level",
)
_entry(
    "global-state",
    "{what} (torch.{name}) inside a compiled function",
    "change the setting before calling the compiled function",
)
_entry(
    "raise",
    "raising an exception (or a failing assert)",
    "check the condition outside the compiled function, or keep the raise in a branch on "
    "Python values",
)
_entry(
    "module-hooks",
    "calling {name}, which has hooks registered",
    "remove the hooks, or compile the module's submodules instead",
)
_entry(
    "unsupported-instruction",
    "{construct}",
    "move that code outside the compiled function",
)
_entry(
    "unsupported-construct",
    "{construct}",
    "it runs in plain Python between two graphs; write it with torch operations or move it "
    "outside the compiled function",
)
_entry(
    "cannot-resume",
    "resuming after {construct}",
    "the whole function runs eagerly; keep values that cross the break to tensors, Python "
    "constants and containers of them",
)


@dataclass(frozen=True)
class GraphBreak:
    """One break: the catalogue id, the message, the hint and the user's line."""

    id: str
    message: str
    hint: str
    location: SourceLocation | None
    # Where the compiled function broke, when that is not `location` (a call into a
    # function that broke inside): `name (file:line)`.
    broke: str = ""

    def __str__(self) -> str:
        where = f"{self.location.short()}: " if self.location is not None else ""
        code = f" (`{self.location.code}`)" if self.location and self.location.code else ""
        broke = f", breaking {self.broke}" if self.broke else ""
        return f"{where}{self.message}{code} [{self.id}]{broke}"
