"""The scheduler: loop simplification (`loops.py`) and grouping of loop nodes into fused
kernels in program order (`fusion.py`), with the buffers fusion makes unnecessary.
"""
