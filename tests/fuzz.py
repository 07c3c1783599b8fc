"""Mutation fuzzer for `tracelens report`, seeded with real traces.

    python tests/fuzz.py --seed 1 --seconds 600 --jobs 4 --save /tmp/finds
    python tests/fuzz.py --replay tests/fuzz_corpus

Each case mutates a seed trace (structurally: events dropped, repeated, shuffled, fields
of other types, huge values, nulls, deep nesting, long strings, truncation; or byte by
byte: flips, inserts, cuts, odd tokens) and runs the whole command on it in a forked
child with a time and memory limit. The invariants (the README's "Guarantees"):

- exit 0 with sane numbers: every share in [0, 1], every time >= 0, no NaN/inf and no
  null where a number belongs (NaN is written as null), strict JSON, a Markdown summary
  that fits one GitHub comment, a terminal summary without control characters; or
- exit 2 with one line `tracelens: error: ...`;
- never another exit code, a traceback, a hang, more than MAX_RSS_BYTES of memory, or
  a changed input file.

A case that breaks one is written (with --save) as a small input file that
tests/test_fuzz.py replays on every run once it is moved into tests/fuzz_corpus/.
Runs on Linux/macOS (fork).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import hashlib
import io
import json
import math
import os
import pickle
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# tests/ is on the path: as sys.path[0] when this runs as a script, put there by pytest
# when a test imports it.
from support.cli import error_lines, one_error_line_problem  # noqa: E402

#: Seeds: small traces, so a case takes well under a second. The H200 captures cover
#: record_shapes, stacks, steps and NVML counters; the two public ones an old vintage
#: (2023, no steps) and AMD.
SEED_FILES = (
    "sample_traces/elementwise_fp32.pt.trace.json.gz",
    "sample_traces/gemm_bf16.pt.trace.json.gz",
    "sample_traces/gemm_misaligned.pt.trace.json.gz",
    "sample_traces/roofline_cases.pt.trace.json.gz",
    "sample_traces/matmul_sweep.pt.trace.json.gz",
    "sample_traces/host_sync_static.pt.trace.json.gz",
    "../shared/real_traces/HolisticTraceAnalysis/benchmark_result_2869224_1695835535_trace.json.gz",
    "../shared/real_traces/HolisticTraceAnalysis/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
)
#: A case on a seed above takes 0.3-1 s; far past this it is hung.
CASE_TIMEOUT_S = 60.0
#: No case may take more than this many times the CPU time of its unmutated seed (issue
#: 29: every dur set to 0 made the README sample run past 300 s, 0.5 s unmutated): CPU
#: time, not wall time, so the machine's load does not decide. SLOW_MIN_CPU_S is the
#: least any case is allowed (a seed's report takes 0.2-0.6 s of CPU in the forked child).
SLOW_FACTOR = 10.0
SLOW_MIN_CPU_S = 2.0
#: "More than a few GB": peak resident memory of one case (the seeds are < 4 MB of JSON).
MAX_RSS_BYTES = 3 * 2**30
#: Address-space cap of a child, so a runaway allocation fails in the child rather than
#: taking the machine (above MAX_RSS_BYTES: numpy and pandas reserve address space).
CHILD_ADDRESS_SPACE = 12 * 2**30
#: What a corpus folder's inputs are called (notes beside them end in .txt).
INPUT_SUFFIXES = (".json", ".json.gz", ".gz", ".bin")
#: GitHub's comment limit: the Markdown summary must fit.
MARKDOWN_LIMIT = 65_536
#: Fields that may be null (Optional in tracelens.report); any other null is a NaN.
NULLABLE = frozenset(
    {
        "num_sms",
        "rank",
        "world_size",
        "device",
        "source",
        "primary",
        "timeline",
        "clocks",
        "roofline",
        "memory",  # the [memory]-event timeline, null without profile_memory
        # Issue 32's parts, null when the trace has none: a memory snapshot beside it,
        # CUDA-graph replays, serving step annotations; a kernel source's line where the
        # file is not readable here, the frame that launched it, a block's allocation time.
        "snapshot",
        "graphs",
        "serving",
        "line",
        "launched_from",
        "library",
        "allocated_at_us",
        "peak_at_us",
        "at_us",
        # findings[].parent: the category a finding refines, null for a top-level one; the
        # diff's main cause and primaries are null when there is none.
        "parent",
        # PySource.call_line: the calling statement's line, null when it is not inferred.
        "call_line",
        "main_cause",
        "before_primary",
        "after_primary",
        # Hardware counters (issue 35): null without counters in the trace; a counted_* value
        # is null when it was not counted, timeline ones when the trace has no kernel events.
        "counters",
        "counted_steps",
        "counted_flops",
        "counted_dram_bytes",
        "counted_instructions",
        "counted_intensity",
        "counted_flops_per_s",
        "counted_bytes_per_s",
        "timeline_us",
        "of_compute_roof",
        "of_dram_roof",
        "replay_us",
        "model_to_counted_flops",
        "model_to_counted_bytes",
    }
)


def _schema_nullable() -> frozenset[str]:
    """Properties the report schemas declare nullable (type null, or anyOf with null): a
    field made Optional in tracelens.report is nullable here without a second list."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, spec in (node.get("properties") or {}).items():
                if not isinstance(spec, dict):
                    continue
                kinds = spec.get("type")
                kinds = kinds if isinstance(kinds, list) else [kinds]
                alts = spec.get("anyOf") or spec.get("oneOf") or []
                if "null" in kinds or any(isinstance(x, dict) and x.get("type") == "null" for x in alts):
                    found.add(name)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for schema in sorted((REPO / "tracelens" / "report" / "schemas").glob("*.schema.json")):
        walk(json.loads(schema.read_text()))
    return frozenset(found)


NULLABLE = NULLABLE | _schema_nullable()
#: Fractions: must lie in [0, 1]. (Lists of them too: the timeline's per-bin shares.)
SHARE_KEYS = frozenset(
    {
        "share",
        "primary_share",
        "estimated_share",
        "coverage",
        "classified",
        "wave_efficiency",
        "last_wave_fill",
        "busy",
        "launch",
        "host_sync",
        "host_bound",
        "profiler",
        "other",
    }
)
#: Achieved over peak: the measured peaks are a little below what some kernels reach
#: (gemm_bf16 on the H200 shows 101%), so up to this is measurement, beyond is a bug.
ROOF_SHARE_MAX = 1.5
#: Float noise allowed below zero for times computed as differences.
TIME_EPS = 1e-6
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Invariant violations whose cause is in code this harness's owner may not change
#: (ranking, analyzers): (pattern of the problem, where it comes from). They are counted
#: and printed, not failed on; their minimal inputs are in tests/fuzz_corpus/pending/,
#: which CI does not replay. Remove an entry once its cause is fixed.
PENDING: tuple[tuple[re.Pattern[str], str], ...] = (
    # None now: the violations once listed here were fixed with the ledger (issue 9); their
    # inputs are in the corpus.
)


# ----------------------------------------------------------------------------------
# mutations
# ----------------------------------------------------------------------------------
#: Placeholders json.dumps cannot write, substituted into the text afterwards.
_RAW = "\u0001RAW{}\u0001"
HUGE_VALUES: tuple[Any, ...] = (
    2**63,
    2**63 - 1,
    2**64,
    2**70,
    -(2**63),
    -(2**70),
    1e308,
    -1e308,
    1e-300,
    0,
    -1,
    -1.5,
    10**400,
    "1e400",
    "-1e400",
)
ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    "",
    "x",
    "0x0",
    "12",
    [],
    {},
    [1, 2],
    {"a": 1},
    "\ud800",
    "\udcff",
    0.5,
    "@octocat #1 GH-2 \x1b]52;c;AAAA\x07\x1b[2J\r\x08",
)
FIELDS = ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args", "id", "s")
ARG_KEYS = (
    "External id",
    "correlation",
    "device",
    "stream",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "bytes",
    "Input Dims",
    "Input type",
    "Call stack",
    "Bytes",
    "Total Allocated",
    "Python id",
    "Python parent id",
    "cuda_sync_kind",
    "kernel",
    "name",
)
PROP_KEYS = (
    "numSms",
    "maxThreadsPerMultiprocessor",
    "regsPerMultiprocessor",
    "sharedMemPerMultiprocessor",
    "computeMajor",
    "computeMinor",
    "totalGlobalMem",
    "id",
    "name",
)


@dataclass
class Doc:
    """A mutable trace: the parsed JSON plus raw-text substitutions for what JSON
    libraries will not write (1e400, 10,000 levels of nesting)."""

    data: Any
    raws: dict[str, str] = field(default_factory=dict)

    def raw(self, text: str) -> str:
        key = _RAW.format(len(self.raws))
        self.raws[key] = text
        return key

    def events(self) -> list[Any]:
        if isinstance(self.data, dict) and isinstance(self.data.get("traceEvents"), list):
            return self.data["traceEvents"]  # type: ignore[no-any-return]
        if isinstance(self.data, list):
            return self.data
        return []

    def dumps(self) -> bytes:
        text = json.dumps(self.data)
        for key, value in self.raws.items():
            text = text.replace(json.dumps(key), value)
        return text.encode("utf-8", "surrogatepass")


def _value(rng: random.Random, doc: Doc) -> Any:
    v = rng.choice(HUGE_VALUES + ODD_VALUES)
    if isinstance(v, str) and v.lstrip("-") == "1e400":
        return doc.raw(v)
    if isinstance(v, int) and abs(v) > 2**80:
        return doc.raw(str(v))
    return v


def _pick(rng: random.Random, evs: list[Any], pred: Callable[[Any], bool] | None = None) -> Any:
    cands = [e for e in evs if isinstance(e, dict) and (pred is None or pred(e))]
    return rng.choice(cands) if cands else None


def m_drop(rng: random.Random, doc: Doc) -> str:
    evs = doc.events()
    frac = rng.choice((0.01, 0.1, 0.5, 0.9))
    keep = [e for e in evs if rng.random() > frac]
    evs[:] = keep
    return f"drop {frac}"


def m_duplicate(rng: random.Random, doc: Doc) -> str:
    evs = doc.events()
    if not evs:
        return "dup (none)"
    e = rng.choice(evs)
    n = rng.choice((1, 2, 50, 2000))
    evs.extend(copy.deepcopy(e) for _ in range(n))
    return f"dup x{n}"


def m_shuffle(rng: random.Random, doc: Doc) -> str:
    rng.shuffle(doc.events())
    return "shuffle"


def m_field(rng: random.Random, doc: Doc) -> str:
    e = _pick(rng, doc.events())
    if e is None:
        return "field (none)"
    key = rng.choice(FIELDS)
    if rng.random() < 0.2:
        e.pop(key, None)
        return f"del {key}"
    e[key] = _value(rng, doc)
    return f"set {key}"


def m_arg(rng: random.Random, doc: Doc) -> str:
    e = _pick(rng, doc.events(), lambda e: isinstance(e.get("args"), dict))
    if e is None:
        return "arg (none)"
    key = rng.choice(ARG_KEYS)
    e["args"][key] = _value(rng, doc)
    return f"arg {key}"


def m_kernel_device(rng: random.Random, doc: Doc) -> str:
    e = _pick(rng, doc.events(), lambda e: str(e.get("cat", "")).lower() == "kernel")
    if e is None:
        return "device (none)"
    e.setdefault("args", {})["device"] = rng.choice((2**70, 2**63, -5, "0", None))
    return "kernel device"


def m_props(rng: random.Random, doc: Doc) -> str:
    if not isinstance(doc.data, dict):
        return "props (none)"
    props = doc.data.get("deviceProperties")
    if not isinstance(props, list) or not props or not isinstance(props[0], dict):
        doc.data["deviceProperties"] = [{"name": "NVIDIA H200", "numSms": 132}]
        props = doc.data["deviceProperties"]
    key = rng.choice(PROP_KEYS)
    props[0][key] = _value(rng, doc)
    return f"prop {key}"


def m_step(rng: random.Random, doc: Doc) -> str:
    e = _pick(rng, doc.events(), lambda e: str(e.get("name", "")).startswith("ProfilerStep#"))
    if e is None:
        return "step (none)"
    e["dur"] = rng.choice((-abs(float(e.get("dur", 1) or 1)) * 100, 0, 1e15, -1))
    return "step dur"


def m_times(rng: random.Random, doc: Doc) -> str:
    evs = [e for e in doc.events() if isinstance(e, dict) and "ts" in e]
    if len(evs) < 2:
        return "times (none)"
    k = rng.choice(("swap", "neg", "zero", "big"))
    for e in rng.sample(evs, min(len(evs), rng.choice((1, 5, 50)))):
        if k == "swap":
            other = rng.choice(evs)
            e["ts"], other["ts"] = other["ts"], e["ts"]
        elif k == "neg":
            e["dur"] = -abs(float(e.get("dur", 1) or 1))
        elif k == "zero":
            e["dur"] = 0
        else:
            e["dur"] = 1e12
    return f"times {k}"


def m_correlation(rng: random.Random, doc: Doc) -> str:
    evs = [e for e in doc.events() if isinstance(e, dict) and isinstance(e.get("args"), dict)]
    ids = [e["args"]["correlation"] for e in evs if "correlation" in e["args"]]
    rng.shuffle(ids)
    it = iter(ids)
    for e in evs:
        if "correlation" in e["args"]:
            e["args"]["correlation"] = next(it)
    return "shuffle correlation"


def m_nest(rng: random.Random, doc: Doc) -> str:
    depth = rng.choice((100, 1000, 5000, 100_000))
    blob = doc.raw("[" * depth + "]" * depth)
    where = rng.choice(("top", "args", "event"))
    e = _pick(rng, doc.events(), lambda e: isinstance(e.get("args"), dict))
    if where == "top" and isinstance(doc.data, dict):
        doc.data["zz_unknown"] = blob
    elif where == "args" and e is not None:
        e["args"][rng.choice(("Input Dims", "unknown key"))] = blob
    else:
        doc.events().append(blob)
    return f"nest {depth} {where}"


def m_long(rng: random.Random, doc: Doc) -> str:
    e = _pick(rng, doc.events())
    if e is None:
        return "long (none)"
    n = rng.choice((10_000, 30_000, 70_000, 1_000_000))
    key = rng.choice(("name", "name", "cat"))
    e[key] = rng.choice(("k", "{lambda(int)#1} @a ", "\u00e9")) * (n // 10)
    return f"long {key} {n}"


def m_truncate_events(rng: random.Random, doc: Doc) -> str:
    evs = doc.events()
    evs[:] = evs[: rng.randrange(0, len(evs) + 1)]
    return "cut events"


def m_memory(rng: random.Random, doc: Doc) -> str:
    evs = doc.events()
    ts = next((e.get("ts") for e in evs if isinstance(e, dict) and isinstance(e.get("ts"), int | float)), 0)
    args = {"Bytes": _value(rng, doc), "Total Allocated": _value(rng, doc), "Addr": 2**64 - 1, "Device Id": 0}
    evs.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t", "args": args})
    return "memory event"


def m_category(rng: random.Random, doc: Doc) -> str:
    """All events of one category dropped, or all their durations zero."""
    cats = sorted({str(e.get("cat")) for e in doc.events() if isinstance(e, dict)})
    if not cats:
        return "category (none)"
    cat = rng.choice(cats)
    evs = doc.events()
    if rng.random() < 0.5:
        evs[:] = [e for e in evs if not (isinstance(e, dict) and str(e.get("cat")) == cat)]
        return f"drop cat {cat}"
    for e in evs:
        if isinstance(e, dict) and str(e.get("cat")) == cat and "dur" in e:
            e["dur"] = 0
    return f"zero dur cat {cat}"


def m_top(rng: random.Random, doc: Doc) -> str:
    """The top level: Chrome's bare-array format, or traceEvents of another type, or
    metadata keys of odd types."""
    if not isinstance(doc.data, dict):
        return "top (none)"
    k = rng.choice(("array", "events", "meta", "meta"))
    if k == "array":
        doc.data = doc.data.get("traceEvents", [])
    elif k == "events":
        doc.data["traceEvents"] = rng.choice((None, {}, "x", 5, [[]], {"ph": "X"}))
    else:
        key = rng.choice(("baseTimeNanoseconds", "deviceProperties", "distributedInfo", "displayTimeUnit", "metadata"))
        doc.data[key] = _value(rng, doc)
    return f"top {k}"


# -- structural families (issue 29): what a trace's structure can lack or get wrong as a
# whole, where the bugs were (a hang on zero durations, kernels dropped without a usable
# correlation, verdicts on traces without GPU activity) ------------------------------
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "cuda runtime", "cuda driver"})


def _cat(e: Any) -> str:
    return str(e.get("cat", "")).lower() if isinstance(e, dict) else ""


def f_zero_durations(rng: random.Random, doc: Doc) -> str:
    """Every duration zero, or those of one side (GPU or host) only."""
    which = rng.choice(("all", "gpu", "host", "steps"))
    for e in doc.events():
        if not isinstance(e, dict) or "dur" not in e:
            continue
        gpu = _cat(e) in _GPU_CATS
        step = str(e.get("name", "")).startswith("ProfilerStep#")
        if which == "all" or (which == "gpu" and gpu) or (which == "host" and not gpu) or (which == "steps" and step):
            e["dur"] = 0
    return f"zero durations {which}"


def f_correlation(rng: random.Random, doc: Doc) -> str:
    """Kernels' launch links broken: correlation removed, beyond 64 bits, args removed,
    pointing at no launch, or the launches' own ids removed."""
    how = rng.choice(("remove", "2**63", "2**64", "no args", "dangling", "launches", "duplicate"))
    evs = [e for e in doc.events() if isinstance(e, dict)]
    gpu = [e for e in evs if _cat(e) in _GPU_CATS]
    if how == "launches":
        for e in evs:
            if _cat(e) in _LAUNCH_CATS and isinstance(e.get("args"), dict):
                e["args"].pop("correlation", None)
        return "correlation: launches' ids removed"
    for e in gpu:
        if how == "no args":
            e.pop("args", None)
            continue
        args = e.setdefault("args", {})
        if not isinstance(args, dict):
            continue
        if how == "remove":
            args.pop("correlation", None)
        elif how == "2**63":
            args["correlation"] = 2**63 + rng.randrange(1000)
        elif how == "2**64":
            args["correlation"] = doc.raw(str(2**64 + rng.randrange(1000)))
        elif how == "dangling":
            args["correlation"] = 10**12 + rng.randrange(10**6)
        else:
            args["correlation"] = 1
    return f"correlation: {how}"


def f_gpu_presence(rng: random.Random, doc: Doc) -> str:
    """GPU activity without its host side, the host side without GPU activity, or the
    launches alone removed."""
    how = rng.choice(("no gpu", "gpu only", "no launches", "no host ops"))
    evs = doc.events()

    def keep(e: Any) -> bool:
        cat = _cat(e)
        if not isinstance(e, dict) or e.get("ph") == "M":
            return True
        if how == "no gpu":
            return cat not in _GPU_CATS
        if how == "gpu only":
            return cat in _GPU_CATS
        if how == "no launches":
            return cat not in _LAUNCH_CATS
        return cat not in ("cpu_op", "operator", "python_function", "user_annotation")

    evs[:] = [e for e in evs if keep(e)]
    return f"gpu presence: {how}"


FAMILIES: dict[str, Callable[[random.Random, Doc], str]] = {
    "zero durations": f_zero_durations,
    "correlation": f_correlation,
    "gpu presence": f_gpu_presence,
}


def f_combo(rng: random.Random, doc: Doc) -> str:
    """Two or three of the families together."""
    picked = rng.sample(sorted(FAMILIES), rng.choice((2, 3)))
    return " + ".join(FAMILIES[name](rng, doc) for name in picked)


FAMILIES["combos"] = f_combo
#: A long run says how far it got every this many cases.
PROGRESS_EVERY = 100
#: The share of cases that are one structural family (the rest: the field-level mutations).
FAMILY_SHARE = 0.4


STRUCTURAL: tuple[Callable[[random.Random, Doc], str], ...] = (
    m_drop,
    m_duplicate,
    m_shuffle,
    m_field,
    m_field,
    m_arg,
    m_arg,
    m_kernel_device,
    m_props,
    m_step,
    m_times,
    m_correlation,
    m_nest,
    m_long,
    m_truncate_events,
    m_memory,
    m_category,
    m_category,
    m_top,
)
ODD_TOKENS = (b"1e400", b"null", b'"\\ud800"', b"[[[[[[", b"NaN", b"\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"}", b",")


def byte_mutate(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    kind = rng.choice(("flip", "insert", "delete", "truncate", "token", "dup"))
    for _ in range(rng.choice((1, 1, 3, 20))):
        if not buf:
            break
        i = rng.randrange(len(buf))
        if kind == "flip":
            buf[i] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 64))))
        elif kind == "delete":
            del buf[i : i + rng.choice((1, 16, 1024))]
        elif kind == "truncate":
            del buf[i:]
        elif kind == "token":
            buf[i:i] = rng.choice(ODD_TOKENS)
        else:
            j = rng.randrange(len(buf))
            buf[j:j] = buf[i : i + rng.choice((8, 256, 4096))]
    return bytes(buf), f"bytes {kind}"


# ----------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------
@dataclass
class Case:
    index: int
    seed_name: str
    how: str
    data: bytes
    suffix: str
    family: str = "mutations"  # a structural family (FAMILIES), or the field/byte mutations


def load_seeds(names: tuple[str, ...] = SEED_FILES) -> dict[str, Any]:
    seeds: dict[str, Any] = {}
    for rel in names:
        p = (REPO / rel).resolve()
        if p.is_file():
            seeds[p.name] = json.loads(gzip.decompress(p.read_bytes()))
    if not seeds:
        raise SystemExit("fuzz: no seed traces found")
    return seeds


def _copied(doc: Any) -> Any:
    """A deep copy of a seed (parsed JSON: dicts, lists, strings, numbers, no shared parts)
    through pickle: the same object as copy.deepcopy gives (the same bytes for cases 0-119
    of seed 0), and making those 120 cases took 0.9 CPU s instead of 1.8."""
    return pickle.loads(pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL))


def make_case(seed: int, index: int, seeds: dict[str, Any]) -> Case:
    """Case `index` of run `seed`: the same pair always gives the same bytes."""
    rng = random.Random(seed * 1_000_003 + index)
    name = rng.choice(sorted(seeds))
    doc = Doc(_copied(seeds[name]))
    family = "mutations"
    if rng.random() < FAMILY_SHARE:
        family = rng.choice(sorted(FAMILIES))
        hows = [FAMILIES[family](rng, doc)]
    else:
        hows = [rng.choice(STRUCTURAL)(rng, doc) for _ in range(rng.choice((1, 1, 2, 3)))]
    data = doc.dumps()
    if family == "mutations" and rng.random() < 0.3:
        data, how = byte_mutate(rng, data)
        hows.append(how)
    suffix = ".json"
    if rng.random() < 0.5:
        data = gzip.compress(data, compresslevel=1, mtime=0)
        suffix = ".json.gz"
        if family == "mutations" and rng.random() < 0.1:
            data, how = byte_mutate(rng, data)
            hows.append("gz " + how)
    return Case(index, name, "; ".join(hows), data, suffix, family)


# ----------------------------------------------------------------------------------
# running one input
# ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    problem: str | None  # None: every invariant held (pending ones aside)
    code: int | None
    seconds: float
    rss_bytes: int
    stderr: str
    pending: list[str] = field(default_factory=list)  # known violations owned elsewhere
    cpu_s: float = 0.0  # the child's user + system time


def pending_label(problem: str) -> str | None:
    for pattern, label in PENDING:
        if pattern.search(problem):
            return label
    return None


def _child(trace: Path, out: Path) -> None:
    """In the forked child: run the command, fds 1/2 to files, exit with its code."""
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit is already in force
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(out / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", errors="backslashreplace")
    os.environ.pop("TRACELENS_DEBUG", None)
    code = 70
    try:
        from tracelens.cli import main

        main(
            [
                "report",
                str(trace),
                "--json",
                str(out / "r.json"),
                "--md",
                str(out / "r.md"),
                "--html",
                str(out / "r.html"),
            ]
        )
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 71
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def gpu_activity_in(data: bytes) -> int:
    """GPU kernels, copies and memsets with a finite start and a positive duration on a
    sane device in an input (-1 when it does not parse): what a report must not drop."""
    try:
        raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        doc = json.loads(raw)
    except Exception:  # any input that does not parse (zlib.error, bad UTF-8, depth): not counted
        return -1
    evs = doc.get("traceEvents") if isinstance(doc, dict) else doc
    n = 0
    for e in evs if isinstance(evs, list) else []:
        if not isinstance(e, dict) or _cat(e) not in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        ts, dur, args = e.get("ts"), e.get("dur"), e.get("args")
        dev = args.get("device", 0) if isinstance(args, dict) else 0
        ok_num = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (ts, dur))
        if ok_num and dur > 0 and isinstance(dev, int) and not isinstance(dev, bool) and 0 <= dev < 1024:
            n += 1
    return n


def run_input(data: bytes, suffix: str, workdir: Path, base_cpu_s: float | None = None) -> Outcome:
    """Run one input; `base_cpu_s` (its unmutated seed's CPU time) enables the slowness
    rule (SLOW_FACTOR)."""
    preload()
    case_dir = Path(tempfile.mkdtemp(dir=workdir))
    trace = case_dir / f"trace{suffix}"
    trace.write_bytes(data)
    before = hashlib.sha256(data).hexdigest()
    out = case_dir / "out"
    out.mkdir()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(trace, out)
    status, rss, cpu = _wait(pid, CASE_TIMEOUT_S)
    seconds = time.monotonic() - t0
    try:
        outcome = _judge(status, rss, seconds, trace, before, out, gpu_activity_in(data))
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)
    outcome.cpu_s = cpu
    if outcome.problem is None and base_cpu_s is not None and cpu > max(SLOW_FACTOR * base_cpu_s, SLOW_MIN_CPU_S):
        outcome.problem = f"slow: {cpu:.1f} s of CPU, over {SLOW_FACTOR:g}x its seed's {base_cpu_s:.2f} s"
    return outcome


def _wait(pid: int, timeout: float) -> tuple[int | None, int, float]:
    """(exit status or None on timeout, peak RSS in bytes, CPU seconds)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        got, status, usage = os.wait4(pid, os.WNOHANG)
        if got == pid:
            # ru_maxrss: KiB on Linux, bytes on macOS.
            rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
            return status, rss, usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return None, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024), usage.ru_utime + usage.ru_stime
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _judge(
    status: int | None, rss: int, seconds: float, trace: Path, before: str, out: Path, gpu_events: int = -1
) -> Outcome:
    stderr = (out / "stderr").read_text(errors="replace") if (out / "stderr").exists() else ""
    stdout = (out / "stdout").read_text(errors="replace") if (out / "stdout").exists() else ""
    code = None if status is None else (os.waitstatus_to_exitcode(status))

    def bad(problem: str) -> Outcome:
        return Outcome(problem, code, seconds, rss, stderr)

    if status is None:
        return bad(f"hang (killed after {CASE_TIMEOUT_S:.0f} s)")
    if hashlib.sha256(trace.read_bytes()).hexdigest() != before:
        return bad("the input file changed")
    if rss > MAX_RSS_BYTES:
        return bad(f"peak memory {rss / 2**30:.1f} GiB")
    if "Traceback" in stderr or "Traceback" in stdout:
        return bad("traceback: " + _last_line(stderr))
    if code == 2:
        problem = one_error_line_problem(stderr)
        if problem:
            return bad(problem)
        lines = error_lines(stderr)
        if _CONTROL.search(lines[0]):
            return bad("control character in the error line")
        if any(out.glob("r.*")):
            return bad("exit 2 but a report was written")
        return Outcome(None, code, seconds, rss, stderr)
    if code != 0:
        return bad(f"exit {code}: {_last_line(stderr)}")
    problems = _check_reports(out, stdout, gpu_events)
    known = [label for p in problems if (label := pending_label(p)) is not None]
    new = [p for p in problems if pending_label(p) is None]
    return Outcome(new[0] if new else None, code, seconds, rss, stderr, pending=known)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


#: Notes that say the loader dropped events (so that a report without them is not silent).
_DROP_NOTES = ("ignored", "dropped", "skipped", "coerced", "not readable")


def _check_reports(out: Path, stdout: str, gpu_events: int = -1) -> list[str]:
    """Every broken invariant in the reports of an exit-0 run."""
    try:
        report = json.loads((out / "r.json").read_text(), parse_constant=_reject_constant)
    except (OSError, ValueError) as exc:
        return [f"JSON report unreadable or not strict JSON: {exc}"]
    md = (out / "r.md").read_text()
    problems = check_numbers(report)
    problems += check_verdict(report, gpu_events, md)
    if len(md) > MARKDOWN_LIMIT:
        problems.append(f"Markdown is {len(md):,} characters, over GitHub's {MARKDOWN_LIMIT:,}")
    if _CONTROL.search(md):
        problems.append("control character in the Markdown")
    if _CONTROL.search(stdout.replace("\n", "")):
        problems.append("control character in the terminal summary")
    html = (out / "r.html").read_text()
    if "Content-Security-Policy" not in html:
        problems.append("HTML lost its Content-Security-Policy")
    return problems


def check_verdict(report: Any, gpu_events: int, md: str = "") -> list[str]:
    """Silent drops and misleading headers (issue 29): GPU activity in the input but none
    analysed, with no note saying events were dropped; "0.0 µs analysed" over a window
    of real length."""
    out: list[str] = []
    if not isinstance(report, dict):
        return out
    gt = (report.get("gpu_time") or {}).get("total") or {}
    window = report.get("window") or {}
    notes = " ".join(str(n) for n in (report.get("trace") or {}).get("notes", []))
    if gpu_events > 0 and not gt.get("window_us") and not any(w in notes for w in _DROP_NOTES):
        out.append(f"silent drop: the input has {gpu_events} GPU activities, the report analysed none")
    span = float(window.get("end_us", 0) or 0) - float(window.get("start_us", 0) or 0)
    header = next((line for line in md.splitlines() if " analysed" in line), "")
    if span >= 1.0 and " 0.0 µs analysed" in header:
        out.append(f"misleading: the header says 0.0 µs analysed over a {span:.0f} µs window")
    return out


def check_numbers(obj: Any, path: str = "$") -> list[str]:
    """Every number in a JSON report that breaks an invariant, as `path = value (why)`."""
    out = []
    for key, value, where in _leaves(obj, path, None):
        if value is None:
            if key is not None and key not in NULLABLE:
                out.append(f"{where} is null (a NaN?)")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            out.append(f"{where} = {value}")
        elif key in SHARE_KEYS and not 0.0 <= value <= 1.0 + 1e-9:
            out.append(f"{where} = {value} (a share outside [0, 1])")
        elif key == "roof_share" and not 0.0 <= value <= ROOF_SHARE_MAX:
            out.append(f"{where} = {value} (achieved/peak outside [0, {ROOF_SHARE_MAX}])")
        elif key is not None and key.endswith("_us") and value < -TIME_EPS:
            out.append(f"{where} = {value} (a negative time)")
    return out


def _leaves(obj: Any, path: str, key: str | None) -> Iterator[tuple[str | None, Any, str]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{path}.{k}", k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{path}[{i}]", key)
    else:
        yield key, obj, path


# ----------------------------------------------------------------------------------
# driving
# ----------------------------------------------------------------------------------
@dataclass
class Summary:
    cases: int = 0
    exit0: int = 0
    exit2: int = 0
    seconds: float = 0.0
    max_rss: int = 0
    failures: list[tuple[Case, Outcome]] = field(default_factory=list)
    pending: dict[str, int] = field(default_factory=dict)
    #: family -> [cases, exit 0, exit 2, failing, the largest CPU time over its seed's]
    families: dict[str, list[float]] = field(default_factory=dict)
    base_cpu: dict[str, float] = field(default_factory=dict)  # seed -> CPU s of its unmutated report


def preload() -> None:
    """Import what a report needs once, here, so each forked child starts with it."""
    import tracelens.assemble
    import tracelens.cli
    import tracelens.model
    import tracelens.render  # noqa: F401


def fuzz(
    seed: int,
    cases: int | None,
    seconds: float | None,
    jobs: int,
    log: Callable[[str], None],
    seed_files: tuple[str, ...] = SEED_FILES,
    first: int = 0,
) -> Summary:
    """Run cases first, first + 1, ... of `seed` until `cases` are done or `seconds`
    have passed, `jobs` children at a time (`first`: a run cut short, continued)."""
    preload()
    seeds = load_seeds(seed_files)
    summary = Summary()
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="tracelens-fuzz-"))
    try:
        # Each seed's own report, unmutated: the CPU time the slowness rule compares to
        # (the least of two runs: the first may pay for a cold page cache).
        for name, doc in sorted(seeds.items()):
            data = json.dumps(doc).encode("utf-8", "surrogatepass")
            summary.base_cpu[name] = min(run_input(data, ".json", workdir).cpu_s for _ in range(2))
        index = first
        end = None if cases is None else first + cases
        while (end is None or index < end) and (seconds is None or time.monotonic() - t0 < seconds):
            batch = [make_case(seed, index + j, seeds) for j in range(jobs)]
            if end is not None:
                batch = batch[: end - index]
            index += len(batch)
            for case, outcome in zip(batch, _run_parallel(batch, workdir, summary.base_cpu), strict=True):
                summary.cases += 1
                fam = summary.families.setdefault(case.family, [0, 0, 0, 0, 0.0])
                fam[0] += 1
                fam[1] += outcome.code == 0
                fam[2] += outcome.code == 2
                fam[3] += bool(outcome.problem)
                base = summary.base_cpu.get(case.seed_name, 0.0)
                fam[4] = max(fam[4], outcome.cpu_s / base if base > 0 else 0.0)
                summary.max_rss = max(summary.max_rss, outcome.rss_bytes)
                summary.exit0 += outcome.code == 0
                summary.exit2 += outcome.code == 2
                for label in set(outcome.pending):
                    summary.pending[label] = summary.pending.get(label, 0) + 1
                if outcome.problem:
                    summary.failures.append((case, outcome))
                    log(f"case {case.index} ({case.seed_name}: {case.how}): {outcome.problem}")
                if summary.cases % PROGRESS_EVERY == 0:
                    log(f"... {summary.cases} cases, {len(summary.failures)} failing, {time.monotonic() - t0:.0f} s")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary.seconds = time.monotonic() - t0
    return summary


def _run_parallel(batch: list[Case], workdir: Path, base_cpu: dict[str, float] | None = None) -> list[Outcome]:
    """Run a batch of cases at once (one fork each), in order of the batch."""
    base = base_cpu or {}

    def one(c: Case) -> Outcome:
        return run_input(c.data, c.suffix, workdir, base.get(c.seed_name))

    if len(batch) == 1:
        return [one(batch[0])]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(one, batch))


#: Corpus inputs named so must be refused (exit 2); every other one must be reported on.
REJECT_PREFIX = "reject_"


def replay(directory: Path) -> list[tuple[Path, Outcome]]:
    """Run every input file in `directory` (not its subfolders); return the failures:
    a broken invariant, or an exit code other than the name promises (REJECT_PREFIX)."""
    preload()
    failures = []
    workdir = Path(tempfile.mkdtemp(prefix="tracelens-replay-"))
    try:
        for p in sorted(directory.iterdir()):
            if not p.is_file() or not p.name.endswith(INPUT_SUFFIXES):
                continue
            suffix = ".json.gz" if p.name.endswith(".gz") else ".json"
            outcome = run_input(p.read_bytes(), suffix, workdir)
            expected = 2 if p.name.startswith(REJECT_PREFIX) else 0
            if not outcome.problem and outcome.code != expected:
                outcome.problem = f"exit {outcome.code}, expected {expected}: {_last_line(outcome.stderr)}"
            if outcome.problem:
                failures.append((p, outcome))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return failures


def replay_one(path: Path) -> Outcome:
    """Run one stored input."""
    workdir = Path(tempfile.mkdtemp(prefix="tracelens-replay-"))
    try:
        return run_input(path.read_bytes(), ".json.gz" if path.name.endswith(".gz") else ".json", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def minimise(case: Case, problem: str, workdir: Path, budget: int = 60) -> bytes:
    """Fewer events, same kind of failure (its first word), in at most `budget` runs.
    Byte-level cases are returned as they are."""
    try:
        raw = gzip.decompress(case.data) if case.suffix.endswith(".gz") else case.data
        data = json.loads(raw)
    except (ValueError, OSError, EOFError):
        return case.data
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list):
        return raw
    kind = problem.split()[0]
    chunk = max(len(events) // 2, 1)
    runs = 0
    while chunk >= 1 and runs < budget:
        i = 0
        while i < len(events) and runs < budget:
            trial = events[:i] + events[i + chunk :]
            data["traceEvents"] = trial
            text = json.dumps(data).encode("utf-8", "surrogatepass")
            runs += 1
            got = run_input(text, ".json", workdir).problem
            if got and got.split()[0] == kind:
                events = trial
            else:
                i += chunk
        chunk //= 2
    data["traceEvents"] = events
    return json.dumps(data).encode("utf-8", "surrogatepass")


def family_table(summary: Summary) -> str:
    """Cases per family: how many, their exits, failures, and the slowest against its seed."""
    rows = [
        "| family | cases | exit 0 | exit 2 | failing | slowest (CPU, x its seed) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, (n, e0, e2, bad, worst) in sorted(summary.families.items()):
        rows.append(f"| {name} | {n:.0f} | {e0:.0f} | {e2:.0f} | {bad:.0f} | {worst:.1f}x |")
    seeds = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(summary.base_cpu.items()))
    return "\n".join(rows) + f"\nseeds' own CPU time: {seeds}"


def _rerun_cases(args: argparse.Namespace) -> int:
    """The given cases of a run (the same seed and seed files give the same bytes), each
    judged against its seed's own CPU time; with --save, the failing ones minimised."""
    preload()
    files = tuple(str(Path(f).resolve()) for f in args.seed_files) if args.seed_files else SEED_FILES
    seeds = load_seeds(files)
    workdir = Path(tempfile.mkdtemp(prefix="tracelens-fuzz-"))
    failed = 0
    try:
        base: dict[str, float] = {}
        for name, doc in sorted(seeds.items()):
            data = json.dumps(doc).encode("utf-8", "surrogatepass")
            base[name] = min(run_input(data, ".json", workdir).cpu_s for _ in range(2))
        for index in args.case:
            case = make_case(args.seed, index, seeds)
            outcome = run_input(case.data, case.suffix, workdir, base.get(case.seed_name))
            print(f"case {index} ({case.seed_name}: {case.how}): exit {outcome.code}, {outcome.cpu_s:.2f} s CPU "
                  f"(seed {base.get(case.seed_name, 0.0):.2f} s): {outcome.problem or 'ok'}")  # fmt: skip
            if outcome.problem:
                failed += 1
                if args.save is not None:
                    args.save.mkdir(parents=True, exist_ok=True)
                    data = minimise(case, outcome.problem, workdir)
                    gz = data[:2] == b"\x1f\x8b"
                    name = f"seed{args.seed}-case{index}{'.json.gz' if gz else '.json'}"
                    (args.save / name).write_bytes(data)
                    (args.save / (name + ".txt")).write_text(f"{case.seed_name}: {case.how}\n{outcome.problem}\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (default 60 s without --cases)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--save", type=Path, default=None, help="write each failing input here, minimised")
    ap.add_argument("--replay", type=Path, default=None, help="run the inputs in this folder instead")
    ap.add_argument(
        "--seed-files", nargs="+", default=None, help="seed traces (.json.gz) instead of the small defaults"
    )
    ap.add_argument("--first", type=int, default=0, help="start at case N (a run cut short, continued)")
    ap.add_argument(
        "--case",
        type=int,
        action="append",
        default=None,
        help="run only case N of --seed (repeatable): a failure of a long run, rerun from its log line",
    )
    args = ap.parse_args(argv)
    if args.case:
        return _rerun_cases(args)
    if args.replay is not None:
        fails = replay(args.replay)
        for p, o in fails:
            print(f"{p.name}: {o.problem}")
        print(f"replayed {args.replay}: {len(fails)} failing")
        return 1 if fails else 0
    seconds = args.seconds if args.seconds is not None or args.cases is not None else 60.0
    files = tuple(str(Path(f).resolve()) for f in args.seed_files) if args.seed_files else SEED_FILES
    summary = fuzz(args.seed, args.cases, seconds, max(args.jobs, 1), lambda s: print(s, flush=True), files,
                   first=args.first)  # fmt: skip
    from_case = f" from case {args.first}" if args.first else ""
    print(
        f"fuzz seed {args.seed}{from_case}: {summary.cases} cases in {summary.seconds:.0f} s, exit 0: {summary.exit0}, "
        f"exit 2: {summary.exit2}, failing: {len(summary.failures)}, peak RSS {summary.max_rss / 2**20:.0f} MiB"
    )
    for label, n in sorted(summary.pending.items()):
        print(f"  pending (not failed on), {n} cases: {label}")
    print(family_table(summary))
    if args.save is not None and summary.failures:
        args.save.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="tracelens-min-"))
        for case, outcome in summary.failures:
            data = minimise(case, outcome.problem or "", workdir)
            gz = data[:2] == b"\x1f\x8b"
            name = f"seed{args.seed}-case{case.index}{'.json.gz' if gz else '.json'}"
            (args.save / name).write_bytes(data)
            (args.save / (name + ".txt")).write_text(f"{case.seed_name}: {case.how}\n{outcome.problem}\n")
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
