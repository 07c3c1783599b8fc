"""Facts of the domain, each defined once, for every layer to read: the runtime calls
tracelens recognises, element types, the name markers of collectives, torch.profiler and
torch.compile, what the ledger's causes are called, and how names and numbers are
written. Below everything but the contract's enumerations (tracelens.report.enums);
standard library only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tracelens.report.enums import WHOLE_UNITS, ReportUnit, Severity

# --- runtime and driver calls (CUDA, the driver API and their HIP twins) ---------------

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
#: Calls that free device memory: they wait for the device to finish with it.
FREE_APIS = ("cudaFree", "hipFree", "cuMemFree_v2")
#: Reserved memory this much above allocated at the peak is fragmentation worth naming
#: (the caching allocator holds blocks it cannot reuse for the sizes asked): the trace
#: report's [memory] events and the memory snapshot report alike.
FRAGMENTATION_SHARE = 0.25
#: Pinned host allocations: made once, they are cheap; made per step, each is a
#: cudaHostAlloc of host time (and the driver pins the pages).
PINNED_APIS = ("cudaHostAlloc", "cudaMallocHost", "hipHostMalloc")
#: Calls that replay a captured CUDA (HIP) graph: their kernels carry no op shapes.
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
#: Host calls that launch GPU work.
LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipGraphLaunch",
    }
)
#: Calls that launch one kernel each (Kineto's range profiler measures kernels in their order).
KERNEL_LAUNCH_APIS = LAUNCH_APIS - GRAPH_LAUNCH_APIS

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

# --- element types, by the profiler's type names (`Input type`) ---------------------------

#: Floating-point element types: bytes per element.
FLOAT_DTYPE_BYTES = {
    "c10::BFloat16": 2,
    "c10::Half": 2,
    "float": 4,
    "double": 8,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
}
#: Integer and bool element types: bytes per element.
INTEGER_DTYPE_BYTES = {"long int": 8, "int": 4, "bool": 1, "unsigned char": 1, "signed char": 1, "short int": 2}
#: The ScalarType names a collective's record carries (record_param_comms' and NCCL
#: kernels' `dtype`: "Float", "BFloat16", "Long", "Byte" in the public traces).
SCALAR_TYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Byte": 1, "Char": 1,
    "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "ComplexFloat": 8,
}  # fmt: skip
#: Every element type by any name a trace gives it: the profiler's (above), the
#: ScalarType names of collectives' records, and torch.dtype names (`float32`).
DTYPE_BYTES = {
    **FLOAT_DTYPE_BYTES,
    **INTEGER_DTYPE_BYTES,
    **SCALAR_TYPE_BYTES,
    "float32": 4,
    "half": 2,
    "bfloat16": 2,
    "long": 8,
    "int64": 8,
    "int32": 4,
}
_DTYPE_BYTES_LOWER = {k.lower(): v for k, v in DTYPE_BYTES.items()}


def dtype_bytes(name: str | None) -> int | None:
    """Bytes per element of a type by any of its names (case and a `torch.`/`c10::`
    prefix aside), None when unknown."""
    if not name:
        return None
    low = str(name).strip().lower().removeprefix("torch.")
    return (
        _DTYPE_BYTES_LOWER.get(low)
        or _DTYPE_BYTES_LOWER.get("c10::" + low)
        or _DTYPE_BYTES_LOWER.get(low.removeprefix("c10::"))
    )


#: Short names of the floating-point types (the roofline's and the matmul table's).
DTYPE_SHORT = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8_e4m3",
    "c10::Float8_e5m2": "fp8_e5m2",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "fp8_e5m2fnuz",
}
#: Bytes per element by short name.
SHORT_DTYPE_BYTES = {short: FLOAT_DTYPE_BYTES[name] for name, short in DTYPE_SHORT.items()}

# --- name markers ---------------------------------------------------------------------

#: Collective kernels (NCCL, RCCL), by name fragment (lower case).
COLLECTIVE_KERNEL_MARKERS = (
    "nccl",
    "rccl",
    "allreduce",
    "all_reduce",
    "allgather",
    "reducescatter",
    "reduce_scatter",
    "alltoall",
    "sendrecv",
    "multimem",
)
#: Ops whose kernels are collectives whatever the kernel is called (the roofline leaves
#: them out).
COLLECTIVE_LAUNCH_OPS = ("record_param_comms", "c10d::", "nccl:", "symm_mem::", "_c10d_functional::")
#: Host ops of collectives: the host inside one is waiting for the other ranks (gloo runs
#: the collective on the host; NCCL's wait() blocks there too).
COLLECTIVE_WAIT_OPS = ("gloo:", "nccl:", "c10d::", "record_param_comms", "ProcessGroup", "c10d_functional::wait")


def is_collective_kernel(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in COLLECTIVE_KERNEL_MARKERS)


def is_collective_wait_op(name: str) -> bool:
    return name.startswith(COLLECTIVE_WAIT_OPS)


#: torch.profiler's step mark: a user annotation ProfilerStep#N per prof.step().
PROFILER_STEP_PREFIX = "ProfilerStep#"
#: A whole step mark's name, N captured.
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: Python frames of torch.profiler itself (prof.step(), start/stop, its event export): a
#: gap the host spent in them is the profiler's cost, not the program's.
PROFILER_FRAMES = ("torch/profiler/", "torch/autograd/profiler.py", "torch/autograd/profiler_util.py")
#: Python frames of the capturing tool itself (tracelens capture): overhead where no op
#: runs under them (derive/host_calls.profiler_intervals); its frames that run the user's
#: script (run_script, capture) hold the whole run.
CAPTURE_TOOL_FRAMES = ("tracelens/capture/",)
#: Ranges of a benchmark harness's own method between its timed regions (brief misc §1):
#: flushing the cache (PARAM's "[param|clear_cache]": aten::zeros of a large buffer and a
#: mul over it before every measured iteration), its warm-up iterations. Matched (lower
#: case) in user annotations and Python frames; the idle under them is the harness's.
HARNESS_MARKERS = ("clear_cache", "flush_cache", "cache_flush", "flush_l2", "l2_flush", "|warmup|")
#: Python frames and annotations of torch.compile's compiler at work, for the ledger's
#: "the host was compiling": Dynamo's frame conversion, Inductor's compile and code
#: cache, and torch.compile's own timed ranges (recorded as CPU ops in traces without
#: Python stacks: "_compile.compile_inner (dynamo_timed)", "compile_fx_inner
#: (dynamo_timed)"). Not its cache lookup, and not Inductor's compile-worker pool
#: (COMPILER_EXCLUDE), whose thread idles beside the whole run.
COMPILER_MARKERS = (
    "torch/_dynamo/convert_frame",
    "torch/_dynamo/output_graph",
    "torch/_inductor/compile_fx",
    "torch/_inductor/graph.py",
    "torch/_inductor/codecache",
    "(dynamo_timed)",
)
COMPILER_EXCLUDE = ("compile_worker",)
#: The row torch.compile opens around each run of compiled code (`Torch-Compiled Region:
#: 0/1`: frame 0, compile 1).
COMPILED_REGION = "Torch-Compiled Region"
#: Rows of compiled code that call a compiled graph (AOTAutograd's wrappers).
GRAPH_CALL_MARKERS = ("## Call CompiledFxGraph", "CompiledFunction", "## Call CompiledFunction")
#: Rows torch.compile adds around compiled code: bookkeeping, not eager ops.
COMPILE_BOOKKEEPING = (
    COMPILED_REGION,
    "TorchDynamo Cache Lookup",
    "Pregraph bytecode",
    "AOTDispatcher",
    "## ",
    "CompiledFunction",
)
#: Start-up that compiling costs, for the window's start-up kinds: running compiled code
#: the first time (the region, Dynamo's frame evaluation, AOTAutograd's compiled
#: functions) and every compiler stage, Triton's and TorchScript's included.
STARTUP_COMPILE_MARKERS = (
    COMPILED_REGION,
    "TorchDynamo",
    "CompiledFunction",
    "torch/_dynamo/convert_frame",
    "torch/_dynamo/output_graph",
    "torch/_dynamo/symbolic_convert",
    "torch/_inductor/compile_fx",
    "torch/_inductor/codecache",
    "torch/_inductor/graph",
    "torch/_functorch/aot_autograd",
    "triton/compiler/compiler.py",
    "torch/jit/_script",
)

#: The Python frames of a sleep the program asks for (torch.profiler's with_stack names
#: time.sleep `<built-in function sleep>`): neither slow host work nor data loading.
SLEEP_FRAMES = frozenset({"<built-in function sleep>", "time.sleep"})

#: Libraries a program calls into, as their paths start once the site-packages prefix is
#: dropped (model/sources.short_path). A sync inside one is named at the program's own
#: frame that called the library (OWLv2's 81 syncs are transformers' pipeline
#: _ensure_tensor_on_device; the program's line is the harness's run_on_input), with the
#: library's frame kept in the site's stack. torch itself is machinery (model/sources).
LIBRARY_PACKAGES = (
    "transformers/", "diffusers/", "accelerate/", "peft/", "datasets/", "tokenizers/",
    "lightning/", "pytorch_lightning/", "lightning_fabric/", "lightning_utilities/", "timm/",
    "torchvision/", "torchaudio/",
    "torchrec/", "fbgemm_gpu/", "deepspeed/", "apex/", "vllm/", "sentence_transformers/",
    "numpy/", "scipy/", "PIL/", "sklearn/", "pandas/",
)  # fmt: skip


def is_library_file(file: str) -> bool:
    """Whether a (shortened) source path lies in one of LIBRARY_PACKAGES."""
    return file.replace("\\", "/").startswith(LIBRARY_PACKAGES)


#: Python functions in which the host waits rather than works (the stdlib's selectors and
#: threading, multiprocessing's connections): a gap under one belongs to what it waits
#: for, which the container names (diff_workers_before: selectors' select() inside the
#: workers' DataLoader __next__ is the loop waiting for its workers, not code to speed up).
WAIT_FUNCTIONS = frozenset({"select", "poll", "_poll", "wait", "acquire", "join", "recv", "_recv", "_recv_bytes"})


# --- distributed training frameworks' ranges ---------------------------------------------

#: TorchRec's record_function ranges around its collectives (torchrec.distributed):
#: the input dist, the sparse features' (KJT) all-to-alls of a batch...
TORCHREC_INPUT_DIST_MARKERS = ("sparse_data_dist", "## sdd_", "KJT", "all2all_data", "input_dist")
#: ...the pooled embeddings' all-to-all (forward and backward) and reduce-scatter...
TORCHREC_EMBEDDING_MARKERS = ("alltoall_fwd_single", "alltoall_bwd_single", "alltoall_pooled", "reduce_scatter_base")
#: ...and a train pipeline that starts the next batch's input dist a batch ahead
#: (TrainPipelineSparseDist's `## sparse_data_dist ##`, its successors' `## sdd_... ##`).
TORCHREC_PIPELINE_MARKERS = ("## sparse_data_dist ##", "## sdd_")
#: The op of DistributedDataParallel's forward, where it broadcasts the model's buffers
#: from rank 0 (broadcast_buffers=True) by flattening them into one tensor and back.
DDP_FORWARD = "DistributedDataParallel.forward"
DDP_BUFFER_OPS = frozenset({"aten::flatten_dense_tensors", "aten::unflatten_dense_tensors"})


# --- severity ------------------------------------------------------------------------------

#: Severity is the share of the analysed window a finding costs. A tenth of the run is the
#: first thing to fix; a few percent is worth a change; under half a percent is noise
#: next to run-to-run variation of a profiled step.
HIGH_SHARE = 0.10
MEDIUM_SHARE = 0.03
LOW_SHARE = 0.005


def severity_for(share: float) -> Severity:
    if share >= HIGH_SHARE:
        return Severity.HIGH
    if share >= MEDIUM_SHARE:
        return Severity.MEDIUM
    if share >= LOW_SHARE:
        return Severity.LOW
    return Severity.INFO


# --- the ledger's causes, as reports name them ---------------------------------------------

#: What each ledger cause (tracelens.report.enums.Cause) is called in reports.
CAUSE_LABELS: dict[str, str] = {
    "gpu_busy_compute": "busy: compute-bound kernels",
    "gpu_busy_memory": "busy: memory-bound kernels",
    "gpu_busy_latency": "busy: latency-bound kernels",
    "gpu_busy_unknown": "busy: other kernels (not classified)",
    "gpu_busy_copy": "busy: copies and memsets",
    "communication": "communication (exposed or waiting)",
    "host_sync": "idle: host sync",
    "allocation": "idle: allocator calls",
    "compilation": "idle: compiling",
    "profiler": "idle: profiler overhead",
    "harness": "idle: benchmark harness (cache flush, warm-up)",
    "startup": "idle: start-up (graph capture, first launches)",
    "launch_overhead": "idle: launch overhead",
    "host_bound": "idle: host-bound",
    "idle_other": "idle: other (queued work waits)",
    "unrecorded": "idle: not recorded (events removed from the trace)",
}
#: Short names for the terminal's one-line ledger.
CAUSE_SHORT: dict[str, str] = {
    "gpu_busy_compute": "compute",
    "gpu_busy_memory": "memory",
    "gpu_busy_latency": "latency",
    "gpu_busy_unknown": "unclassified",
    "gpu_busy_copy": "copy",
    "communication": "comm",
    "host_sync": "sync",
    "allocation": "alloc",
    "compilation": "compile",
    "profiler": "profiler",
    "harness": "harness",
    "startup": "startup",
    "launch_overhead": "launch",
    "host_bound": "host",
    "idle_other": "other",
    "unrecorded": "unrecorded",
}

#: What each finding category (tracelens.report.enums.Category) is called in prose: the
#: headline, the finding cards, the terminal (issue 27: "Memory-bound elementwise kernels",
#: not `memory_bound`; the ids stay in the JSON).
CATEGORY_LABELS: dict[str, str] = {
    "host_sync": "host syncs",
    "host_bound": "host-bound",
    "communication": "communication",
    "queued_idle": "queued work waiting",
    "launch_overhead": "kernel-launch overhead",
    "memory_bound": "memory-bound kernels",
    "eager_attention": "unfused attention",
    "shape_dynamism": "changing shapes",
    "compilation": "compilation",
    "allocation": "allocator calls",
    "compute_bound": "compute-bound kernels",
    "misaligned_matmul": "misaligned matmul shapes",
    "wave_quantization": "wave quantization",
    "power_throttle": "clock throttling",
}


#: The GPU's name where the trace has no deviceProperties (issue 27: it read "unknown GPU
#: (no deviceProperties in the trace) (NVIDIA)").
GPU_NOT_RECORDED = "GPU (model not recorded in the trace)"


def gpu_not_recorded(vendor: str | None) -> str:
    """ "NVIDIA GPU (model not recorded in the trace)", or without the vendor when the
    trace does not say."""
    v = (vendor or "").strip()
    known = v and v.upper() != "UNKNOWN"
    return f"{v.upper() if v.lower() in ('nvidia', 'amd') else v} {GPU_NOT_RECORDED}" if known else GPU_NOT_RECORDED


def category_label(category: object, capital: bool = True) -> str:
    """A finding category in words, capital first ("Memory-bound kernels") unless not
    `capital`; an id this table lacks is shown with spaces for underscores."""
    key = str(getattr(category, "value", category))
    words = CATEGORY_LABELS.get(key, key.replace("_", " "))
    return words[:1].upper() + words[1:] if capital else words


# --- how names and numbers are written -------------------------------------------------------

#: Names longer than this are cut in reports (C++ template kernel names reach tens of kB;
#: the trace keeps the full name).
MAX_NAME_CHARS = 2000
#: The op name a site carries when no aten op encloses its call (JSON sites[].ops).
NO_ENCLOSING_OP = "(no enclosing op)"
#: The longest kernel name a counter record keeps (template names reach tens of kB).
MAX_COUNTER_NAME_CHARS = 4096
#: Names longer than this are cut as the trace is read (start and end kept). The longest
#: real names are C++ template kernels of about 5,100 characters; a 64 KB name is not a
#: name but it would widen every fixed-width string array made from a name column.
MAX_TRACE_NAME_CHARS = 8192


def cut_name(name: str, limit: int = MAX_NAME_CHARS) -> str:
    """A name for a report: at most `limit` characters, its end marked `…` when cut."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def cut_middle(text: str, limit: int) -> str:
    """At most `limit` characters, the middle cut out (`…`): the start and end of a long
    name (a kernel's template arguments, a path) tell it apart; two thirds are the start."""
    if len(text) <= limit:
        return text
    keep = max(limit - 1, 1)
    head = keep * 2 // 3
    return text[:head] + "…" + text[-(keep - head) :]


#: How long a shortened kernel name may be: about one line of a phone table cell (the
#: full name is one tap away in the HTML, and in the JSON).
KERNEL_NAME_CHARS = 60
#: Namespaces and wrappers that every ATen/CUTLASS kernel repeats: they make different
#: kernels look alike at a glance, so the short name leaves them out.
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*::)+")
_ANON = re.compile(r"\(anonymous namespace\)::")
_SOURCE_NAME = re.compile(r"(\d+)")


def _mangled_names(name: str) -> list[str]:
    """The identifiers of an Itanium-mangled name (`_ZN19cutlass_cudnn_train6KernelI...`),
    in order: enough to name the kernel and its first template arguments. Not a full
    demangler: template arguments that are numbers or types are skipped."""
    out: list[str] = []
    i = 2
    n = len(name)
    while i < n and len(out) < 8:
        m = _SOURCE_NAME.match(name, i)
        if m is None or name[i - 1 : i] == "L":  # `Li128E` is a literal, not a name
            i += 1
            continue
        length = int(m.group(1))
        start = m.end()
        if length <= 0 or start + length > n:
            i = m.end()
            continue
        out.append(name[start : start + length])
        i = start + length
    return out


def demangle(name: str) -> str:
    """A readable form of a mangled C++ kernel name (outer name and the first names of its
    template arguments); other names are returned as they are."""
    if not name.startswith("_Z") or len(name) < 4:
        return name
    parts = _mangled_names(name)
    if not parts:
        return name
    nested = name.startswith("_ZN")
    if nested and len(parts) >= 2:
        head = "::".join(parts[:2])
        rest = parts[2:]
    else:
        head, rest = parts[0], parts[1:]
    # The names after the outer one are mostly the first template argument's nested
    # name (`NS_4conv6kernel23ImplicitGemmConvolution...`): shown as one qualified name.
    return head + (f"<{'::'.join(rest[:3])}{', …' if len(rest) > 3 else ''}>" if rest else "")


def _drop_arguments(name: str) -> str:
    """`void f<T>(int, float)` -> `f<T>`: the return type before the name and the
    parameter list after it, both found at template depth 0 (parentheses inside template
    arguments, as in `enable_if<(8 > 0)>`, hide their `<` and `>`)."""
    depth = parens = 0
    last_space = -1
    for i, ch in enumerate(name):
        if parens:
            parens += {"(": 1, ")": -1}.get(ch, 0)
        elif ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(":
            if depth == 0 and i > 0:
                return name[last_space + 1 : i]
            parens = 1
        elif ch == " " and depth == 0:
            last_space = i
    return name[last_space + 1 :]


def _flatten_templates(name: str) -> str:
    """Template arguments nested two deep or more become `…`: `k<4, F<float>>` stays,
    `k<4, F<G<float>>>` becomes `k<4, F<…>>`."""
    out: list[str] = []
    depth = 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth <= 2:
                out.append(ch)
            if depth == 3:
                out.append("…")
        elif ch == ">":
            if depth <= 2:
                out.append(ch)
            depth -= 1
        elif depth <= 2:
            out.append(ch)
    return "".join(out)


def short_kernel(name: str, width: int = KERNEL_NAME_CHARS) -> str:
    """A kernel (or op) name a person can scan: demangled, without return type, parameter
    list, namespaces or deeply nested template arguments, at most `width` characters
    (cut at the end, where template arguments are least telling)."""
    s = demangle(name.strip())
    s = _ANON.sub("", s)
    s = _drop_arguments(s)
    s = _QUALIFIER.sub("", s)
    s = _flatten_templates(s)
    s = re.sub(r"\s*>\s*>", ">>", s).replace(" >", ">").strip()
    if len(s) > width:
        s = s[: max(width - 1, 1)].rstrip(", <…") + "…"
    return s or name[:width]


def fmt_us(us: float, *, fine: bool = False) -> str:
    """A duration in µs as people write it: 12 µs, 3.4 ms, 1.23 s (the one duration
    formatter); `fine`: one decimal under 10 µs (4.2 µs), as tables of short kernels need."""
    us = float(us)
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.1f} ms"
    if fine and abs(us) < 10:
        return f"{us:.1f} µs"
    return f"{us:.0f} µs"


@dataclass(frozen=True)
class PerUnit:
    """The report's one unit (issue 27): how many of them the analysed window holds and
    their name ("step", "iteration", "call"; "window" and "sweep" are the window whole).
    Every window total the report says is said in it (`per_unit`)."""

    count: int = 1
    name: ReportUnit = "window"

    @property
    def splits(self) -> bool:
        """Whether a window total is said per unit: several units, none of them the whole."""
        return self.name not in WHOLE_UNITS and self.count > 1

    def of(self, total_us: float) -> float:
        """A window total's amount per unit (the total itself where the unit does not split)."""
        return total_us / self.count if self.splits else total_us


def per_unit(total_us: float, unit: PerUnit, *, label: bool = True, fine: bool = False, short: bool = False) -> str:
    """A window total said in the report's unit, the one formatter for it: "1.6 ms per
    step" where the window holds several units, the plain total where its unit is the
    window (or one step); `label=False` leaves the " per step" off (a range's ends);
    `short` writes "1.6 ms/step" (a legend, a terminal column). Per-item values (a median
    kernel, a call's time) are not totals: fmt_us says them."""
    text = fmt_us(unit.of(total_us), fine=fine or unit.splits)  # a total split is often small
    if not (label and unit.splits):
        return text
    return f"{text}/{unit.name}" if short else f"{text} per {unit.name}"


def fmt_us_change(us: float) -> str:
    """A signed change of a duration: +1.23 ms, -450 µs (a prediction's error)."""
    sign = "-" if us < 0 else "+"
    us = abs(us)
    return f"{sign}{us / 1e3:.2f} ms" if us >= 1e3 else f"{sign}{us:.0f} µs"


#: The fixes a prediction replays (predict.FIX_ORDER's ids), as a reader says them.
FIX_LABELS = {
    "sdpa": "SDPA for the eager attention",
    "aligned_matmul": "aligned matmul shapes",
    "static_shapes": "static shapes",
    "remove_allocator_calls": "no allocator calls in the loop",
    "remove_host_syncs": "host syncs removed",
    "pinned_async_copy": "pinned, async copies",
    "dataloader_workers": "DataLoader workers",
    "dataloader_keeps_up": "workers that keep up",
    "no_recompiles": "no recompiles",
    "nccl_backend": "the NCCL backend",
    "cuda_graph": "a CUDA graph",
    "fuse_chains": "fused elementwise chains",
    "memory_at_roof": "memory-bound kernels at the bandwidth roof",
    "compute_at_roof": "compute-bound kernels at their roof",
    "full_waves": "full waves",
    "full_clocks": "full clocks",
    "overlap_collectives": "collectives overlapped with compute",
    "estimate": "an estimate",
    "none": "no fix",
}


def fix_label(fix: str) -> str:
    """A prediction's fix in words ("remove_host_syncs" -> "host syncs removed")."""
    return FIX_LABELS.get(fix, fix.replace("_", " "))


def gain_error(error: float) -> str:
    """A predicted change against the measured one (score.py's error: (predicted - measured)
    / |measured|, both changes negative for a gain), in words: "105% over" where the
    prediction promised more than came, "8% short" where less (issue 25: a signed "-105%"
    beside "105% over" read as two verdicts)."""
    return f"{abs(error):.0%} {'short' if error > 0 else 'over'}"


def pct(share: float) -> str:
    """A share in whole percents (as `{:.0%}`), one decimal under 1%: "<0.1%", "0.4%",
    "3%" (the one share formatter: a small share never reads "0%")."""
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return "n/a"
    s = float(share) * 100
    if s == 0 or abs(s) >= 0.95:  # (0.95% and up round to "1%", not "1.0%")
        return f"{s:.0f}%"
    if abs(s) >= 0.1:
        return f"{s:.1f}%"
    return "<0.1%" if s > 0 else "-<0.1%"


def fmt_bytes(value: float | None) -> str:
    """Bytes with a decimal prefix: 512 B, 3.4 MB; "n/a" for a count that was not made."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    v = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000 or unit == "TB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB"
