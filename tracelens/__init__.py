"""tracelens: explains why a PyTorch GPU program is slow, from a torch.profiler trace.

The pipeline is visible in the sub-packages, in order:

    capture/   -> writes one Kineto trace (torch.profiler + an NVML sampler)
    model/     -> loads any trace vintage into a typed, columnar TraceModel
    analyzers/ -> each reads the model and returns Findings (data, not strings)
    ranking    -> orders findings by the diagnostic order, picks the primary bottleneck
    render/    -> HTML, Markdown, JSON and terminal views of the finished Report

Capture and report meet only at the trace file.
"""

__version__ = "0.1.0"
