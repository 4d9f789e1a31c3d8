"""Backends: the compilers capture hands each captured Graph to, found by name.

`registry` holds the name → backend table (filled from the `ember.backends` entry-point
group and by direct registration); `eager` is the built-in backend that runs the Graph with
the prims interpreter.
"""
