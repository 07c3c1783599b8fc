"""The one loader: any Kineto/Chrome trace that torch.profiler exports -> TraceModel.

Speed comes from the design, not from tuning: msgspec decodes the bytes straight into
small typed records (skipping every field nobody reads), columns are built with one
list comprehension each, and joins are integer indexing. No per-event pandas work.
The stages, each a module:

    read     the file's bytes, bounded (gzip, sizes, regular files only)
    stream   chunked inflate and the event array cut into batches
    decode   JSON batches into typed records, repairs of odd input, counters
    collect  events into column pieces, a batch at a time
    columns  the pieces into typed host and GPU frames
    nest     parents, ops, frames and steps of host rows; GPU rows to their launches
    meta     devices, versions, vendor, vintage
    split    a large file read by two processes
    load     load_trace: stream, or read whole when the stream cannot place the file

The input file is only ever read.
"""

from tracelens.model.loader.load import ProgressFn, build_model, load_trace
from tracelens.model.loader.read import MAX_JSON_BYTES, read_trace_bytes
from tracelens.model.loader.split import discard_early, early_started, start_split_early

__all__ = [
    "MAX_JSON_BYTES",
    "ProgressFn",
    "build_model",
    "discard_early",
    "early_started",
    "load_trace",
    "read_trace_bytes",
    "start_split_early",
]
