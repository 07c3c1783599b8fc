"""The runtime and driver calls the derived layer recognises, in one place (CUDA, the
driver API and their HIP twins)."""

from __future__ import annotations

#: Blocking host calls. Each makes the calling thread wait for device work to finish.
#: hipMemcpyWithStream and cudaMemcpy (not Async) are synchronous copies.
SYNC_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)
#: Asynchronous copy calls that block the host anyway when the host side is pageable
#: memory: the driver stages the data through a bounce buffer (host to device) or waits
#: for the stream to drain (device to host) before returning.
ASYNC_COPY_APIS = frozenset({"cudaMemcpyAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2", "hipMemcpyAsync"})
#: Allocator calls: cudaFree (and cudaMalloc when the pool must grow) synchronise the
#: device, and both take host time the caching allocator normally hides.
ALLOC_APIS = frozenset(
    {
        "cudaMalloc",
        "cudaMallocAsync",
        "cudaMallocHost",
        "cudaHostAlloc",
        "cudaMallocManaged",
        "cudaFree",
        "cudaFreeAsync",
        "cudaFreeHost",
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemCreate",
        "cuMemMap",
        "hipMalloc",
        "hipMallocAsync",
        "hipHostMalloc",
        "hipExtMallocWithFlags",
        "hipFree",
        "hipFreeAsync",
        "hipHostFree",
    }
)
#: Stream capture into a CUDA/HIP graph: the launches between a begin and its end are
#: recorded into the graph, not run (vLLM and SGLang capture their decode graphs so).
CAPTURE_BEGIN_APIS = frozenset(
    {"cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture", "cuStreamBeginCapture_v2",
     "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph"}
)  # fmt: skip
CAPTURE_END_APIS = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
#: Building an executable graph from a captured one (one-off work, like the capture).
GRAPH_INSTANTIATE_APIS = frozenset(
    {"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
     "cuGraphInstantiate", "cuGraphInstantiateWithFlags", "hipGraphInstantiate", "hipGraphInstantiateWithFlags"}
)  # fmt: skip
#: Kernel and graph launch calls.
LAUNCH_CALL_APIS = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
     "cudaGraphLaunch", "cuGraphLaunch", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
     "hipGraphLaunch", "hipExtLaunchKernel"}
)  # fmt: skip
