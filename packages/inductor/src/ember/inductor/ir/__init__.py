"""The loop-level IR: loop bodies built by running index functions (`body.py`), index
arithmetic with sympy (`indexing.py`), the tensors lowering passes around (`tensors.py`) and
the realized program the scheduler and code generators consume (`program.py`).
"""
