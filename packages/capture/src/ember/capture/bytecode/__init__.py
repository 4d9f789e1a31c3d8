"""Bytecode: the symbolic frame and the table of opcode handlers it dispatches to."""

from ember.capture.bytecode import ops_data, ops_flow, ops_names, ops_unsupported
from ember.capture.bytecode.frame import Frame
from ember.capture.bytecode.registry import handler_for, missing_opcodes, table

__all__ = [
    "Frame",
    "handler_for",
    "missing_opcodes",
    "ops_data",
    "ops_flow",
    "ops_names",
    "ops_unsupported",
    "table",
]
