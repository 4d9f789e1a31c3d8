"""Loading compiled artifacts: shared libraries kept in the artifact cache, opened with
ctypes (`shared_library.py`)."""
