"""The C++/OpenMP backend: sympy index printing (`printer.py`), the op table (`ops.py`), one
kernel's source (`kernel.py`), and compiling with the system compiler (`compiler.py`).
"""
