"""Derived layer: computed once from the TraceModel, typed, read by the analyzers."""
