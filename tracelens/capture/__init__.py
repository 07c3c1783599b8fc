"""`tracelens capture`: run a script under torch.profiler with an NVML sampler beside it,
write one trace. Nothing here imports torch until a capture starts.

A script can mark its iterations explicitly (training loops are marked automatically at
every optimizer.step()):

    import tracelens.capture
    for batch in data:
        infer(batch)
        tracelens.capture.step()
"""

from tracelens.capture.runner import CaptureOptions, CaptureResult, capture, step

__all__ = ["CaptureOptions", "CaptureResult", "capture", "step"]
