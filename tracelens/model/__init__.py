"""Trace model: one loader for every Kineto vintage, typed columnar tables."""

from tracelens.model.loader import load_trace
from tracelens.model.schema import Kind
from tracelens.model.trace import DeviceInfo, TraceMeta, TraceModel

__all__ = ["DeviceInfo", "Kind", "TraceMeta", "TraceModel", "load_trace"]
