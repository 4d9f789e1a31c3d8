"""Tracing: record the ATen ops a program performs into a Graph."""

from ember.prims.tracer.recorder import Tracer
from ember.prims.tracer.tensor import TracerTensor
from ember.prims.tracer.trace import trace

__all__ = ["Tracer", "TracerTensor", "trace"]
