"""The opcode table covers every opcode of the running Python: a handler or a deliberate
unsupported entry, each declared for the versions it serves."""

from __future__ import annotations

import sys

from ember.capture.bytecode import missing_opcodes, table
from ember.capture.bytecode.registry import SUPPORTED_VERSIONS


def test_running_version_is_supported() -> None:
    assert sys.version_info[:2] in SUPPORTED_VERSIONS


def test_every_opcode_has_a_handler_or_an_unsupported_entry() -> None:
    assert missing_opcodes() == []


def test_table_names_handlers_and_reasons() -> None:
    rows = table()
    assert rows["BINARY_OP"] == "binary_op"
    assert rows["IMPORT_STAR"].startswith("unsupported: import")
