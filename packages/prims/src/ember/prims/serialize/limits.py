"""The bounds of the Graph format: integer widths, sizes and nesting depths.

The encoder and the decoder enforce the same bounds, so whatever `dumps` writes `loads` reads,
and hostile input can neither recurse without end nor make the decoder allocate much more
memory than the input itself holds.
"""

from __future__ import annotations

# Integers: JSON numbers when |n| <= 2**53 (exact in every JSON reader), else {"$int": "..."}.
JSON_SAFE_INT = 2**53
# Integer literals (arguments, sympy integers, pytree keys) fit in 256 signed bits.
MAX_INT_BITS = 256
MAX_INT_DIGITS = 80  # decimal digits of a {"$int": ...} string; 2**256 has 78

# A tensor size, stride or storage offset, and a constant's byte count.
MAX_SIZE = 2**62
MAX_NDIM = 64
# SymbolInfo bounds and hints, and source line numbers, are signed 64-bit integers.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Device indices are signed 8-bit in torch (c10::DeviceIndex).
MAX_DEVICE_INDEX = 127

# sympy Floats: binary precision and exponent range of their mantissa * 2**exponent form.
MAX_FLOAT_PRECISION = 4096
MAX_FLOAT_EXPONENT = 2**20

# Nesting depths. A sub-graph level costs a few Python frames per level in the decoder, the
# verifier and Graph.__eq__; these keep every recursion far below the interpreter's limit.
MAX_ARG_DEPTH = 32  # lists and tuples inside one argument
MAX_EXPR_DEPTH = 128  # sympy expression trees
# Operands of one expression node: sympy sorts the operands of Max, Min, And and Or, so the
# cost per operand grows with their number; real size expressions have a handful.
MAX_EXPR_ARGS = 1024
MAX_TREE_DEPTH = 64  # pytree signatures (in_spec, out_spec)
MAX_SUBGRAPH_DEPTH = 16  # sub-graphs inside sub-graphs
