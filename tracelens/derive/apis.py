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
#: Calls that launch one kernel each (Kineto's range profiler measures the kernels in the
#: order of these calls).
KERNEL_LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
    }
)
#: Calls that replay a captured graph (many kernels each).
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "hipGraphLaunch"})
