"""`ember.capture.export`: one Graph with the weights as named state, saved and loaded back
with no model code (here run by the prims interpreter: capture's tests run without the
other layers), equal to eager; dynamic sizes; errors that name the user's line."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember.capture import Dim, ExportError, export
from ember.prims import ExportedProgram, GraphFormatError, InputKind, Interpreter, load_program


def _run(program: ExportedProgram, *args: Any, **kwargs: Any) -> Any:
    """The loaded program's result, as the interpreter computes it."""
    return Interpreter(program.graph)(args, kwargs, state=program.state)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.norm = nn.BatchNorm1d(5)
        self.register_buffer("scale", torch.full((5,), 2.0))
        self.offset = torch.arange(5.0)  # a plain tensor attribute: a constant of the Graph

    def forward(self, x: torch.Tensor, *, shift: float = 0.0) -> dict[str, Any]:
        y = self.norm(self.fc(x)) * self.scale + self.offset + shift
        return {"y": y, "parts": (y.sum(1), x.shape[0]), "tag": "net"}


def test_module_round_trips_through_files_equal_to_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(3, 6)
    program = export(net, (x,), {"shift": 0.5})
    kinds = {gi.target: gi.kind for gi in program.graph.state_inputs()}
    assert kinds["fc.weight"] is InputKind.PARAMETER
    assert kinds["norm.running_mean"] is InputKind.BUFFER
    assert kinds["scale"] is InputKind.BUFFER
    assert InputKind.CONSTANT in kinds.values()  # self.offset, kept in the Graph's table
    assert set(program.state) == {name for name, _ in net.state_dict().items()}
    program.save(tmp_path / "net")
    loaded = load_program(tmp_path / "net")
    expected = net(x, shift=0.5)
    with torch.no_grad():
        net.fc.weight.zero_()  # the loaded program owns copies of the weights
    got = _run(loaded, x, shift=0.5)
    assert got.keys() == expected.keys() and got["tag"] == "net"
    torch.testing.assert_close(got["y"], expected["y"])
    torch.testing.assert_close(got["parts"][0], expected["parts"][0])
    assert got["parts"][1] == 3


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor | None = None


class Dataclassy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, unused: torch.Tensor) -> Output:
        return Output(self.proj(x).relu(), x)


def test_dataclass_results_become_dicts_and_unread_arguments_stay_in_the_call() -> None:
    module = Dataclassy()
    x, unused = torch.randn(2, 4), torch.randn(7)
    program = export(module, (x, unused))
    got = _run(program, x, unused)
    assert set(got) == {"logits", "hidden"}
    torch.testing.assert_close(got["logits"], module(x, unused).logits)
    assert got["hidden"] is x  # an input handed back as it came


def test_dynamic_shapes_accept_other_sizes_in_range() -> None:
    module = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    x = torch.randn(4, 8)
    program = export(module, (x,), dynamic_shapes={"input": {0: Dim("batch", max=64)}})
    for rows in (2, 9, 64):
        y = torch.randn(rows, 8)
        torch.testing.assert_close(_run(program, y), module(y))
    assert program.graph.symbols
    static = export(module, (x,))
    assert not static.graph.symbols


def test_program_flat_arguments_check_sizes_and_ranges() -> None:
    module = nn.Linear(8, 3)
    program = export(module, (torch.randn(4, 8),), dynamic_shapes=[{0: Dim("b", max=16)}])
    with pytest.raises(Exception, match=r"outside the range 2\.\.16"):
        program.flat_arguments((torch.randn(17, 8),), {}, program.state)
    with pytest.raises(Exception, match="size 8 in dim 1"):
        program.flat_arguments((torch.randn(4, 7),), {}, program.state)
    with pytest.raises(Exception, match="float64"):
        program.flat_arguments((torch.randn(4, 8, dtype=torch.float64),), {}, program.state)


class Branchy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent: no single graph holds both branches
            return x * 2
        return x - 1


def test_data_dependent_control_flow_names_the_line() -> None:
    with pytest.raises(ExportError) as error:
        export(Branchy(), (torch.randn(3),))
    message = str(error.value)
    assert "test_export.py" in message and "cannot export" in message


def test_results_export_cannot_hold_are_errors() -> None:
    class Opaque(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return x + 1, object

    with pytest.raises(ExportError, match="is a type"):
        export(Opaque(), (torch.randn(2),))


def test_damaged_weights_are_refused(tmp_path: Path) -> None:
    program = export(nn.Linear(3, 2), (torch.randn(1, 3),))
    folder = program.save(tmp_path / "linear")
    weights = folder / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(GraphFormatError, match="sha256"):
        load_program(folder)
