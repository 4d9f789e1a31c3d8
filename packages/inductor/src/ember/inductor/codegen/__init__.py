"""Code generation: the backend interface (`backend.py`), the Python wrapper every backend
shares (`wrapper.py`), and the C++/OpenMP generator (`cpp/`); Triton comes next (issue 9).
"""
