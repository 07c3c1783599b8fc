"""The words of the host_bound finding."""

from __future__ import annotations

from dataclasses import replace

from tracelens.analyzers.base import Found, Place
from tracelens.analyzers.host_bound import (
    PAGEABLE_ADVICE_SHARE,
    PER_OP_GAP_US,
    PER_OP_MIN_GAPS,
    HostBoundFacts,
    HostWork,
)
from tracelens.domain import DDP_BUFFER_OPS, PerUnit, pct, per_unit
from tracelens.explain.base import Words, where

LABELS = {
    "host_bound_us": "host-bound idle",
    "gaps": "gaps",
    "median_gap_us": "median gap",
    "longest_gap_us": "longest gap",
    "after_sync_us": "of it after a sync returned",
    "data_loading_us": "of it in data loading ops",
    "untraced_us": "of it outside any recorded op",
    "pageable_copies": "pageable host-to-device copies",
    "pageable_bytes": "pageable copy bytes",
    "pageable_host_us": "host time in pageable copy calls",
    "pageable_gpu_us": "GPU time of pageable copies",
    "sleep_us": "of it asleep in time.sleep (the program's own wait)",
}
#: The sleep leads the advice, and the generic host-work line is left out, when it holds
#: at least this share of the idle (light_idle: the whole gap is the program's sleep).
SLEEP_ADVICE_SHARE = 0.2
SLEEP_ONLY_SHARE = 0.5
#: The part of a gap not covered by any recorded op on the launching thread.
UNTRACED = "(Python or other host work outside any op)"
#: DDP's buffer broadcast leads the advice when its flatten/unflatten hold at least this
#: share of the idle (nccl_data: 85.1 ms of 265.4 ms, 32%).
DDP_BUFFER_ADVICE_SHARE = 0.2
#: The data loader, DDP's buffers or a sleep get their own advice from this share of the
#: idle (the loader's and DDP's thresholds), and the generic lead then steps aside.
OWN_ADVICE_SHARE = 0.2
#: The name the flatten/unflatten parts of DDP's buffer broadcast are shown under.
DDP_BUFFER_PART = "DDP's buffer broadcast (flatten/unflatten_dense_tensors)"


def work_text(w: HostWork) -> str:
    if w.kind == "untraced":
        return UNTRACED
    if w.kind == "between_ops":
        return f"between ops inside {w.name}"
    if w.kind == "python":
        return f"Python code in {w.name}()" + (f" inside {w.inside}" if w.inside else "")
    if w.kind == "sleep":
        return f"time.sleep() in {w.name}()" if w.name else "time.sleep()"
    return "host work in " + w.name


def _advice(f: HostBoundFacts, total: float, unit: PerUnit, sleep_at: str = "", lead: str = "") -> str:
    """`lead`: the place that holds most of the idle, worded ("Python code in make_batch()
    (_data.py:18)"), when the advice is to start from it (see _lead)."""
    parts = []
    if f.ddp_buffer_us > DDP_BUFFER_ADVICE_SHARE * total:
        parts.append(
            f"{per_unit(f.ddp_buffer_us, unit)} of the idle is DistributedDataParallel flattening and unflattening the "
            "model's buffers around their broadcast from rank 0 before every forward: when the buffers need no "
            "sync each step (BatchNorm running stats each rank may keep, or no buffers that change), construct "
            "DistributedDataParallel(..., broadcast_buffers=False); use SyncBatchNorm where the statistics must agree."
        )
    if f.sleep_us > SLEEP_ADVICE_SHARE * total:
        # A sleep is the program's own wait: no host work to speed up, no data to load.
        parts.append(
            f"The host sleeps {per_unit(f.sleep_us, unit)} of the idle in time.sleep(){sleep_at}: the program waits on "
            "purpose while the GPU has nothing queued, which is neither slow host work nor data loading. Remove "
            "the sleep from the loop if nothing needs it; if it paces the loop (polling, rate limiting, a "
            "simulated delay), queue the next step's GPU work before sleeping so the GPU runs while the host waits."
        )
    if f.loader_us > 0.2 * total and f.loader_workers:
        # With workers the loop waits for them: the advice is about the workers.
        parts.append(
            f"The loop waits {per_unit(f.loader_us, unit)} for the DataLoader's worker processes: they do not keep up. "
            "Make __getitem__ and collate cheaper (decode and augment less on the CPU, or on the GPU), add "
            "workers if the host has idle cores, and keep them warm (persistent_workers=True, "
            "prefetch_factor>=2, pin_memory=True)."
        )
    elif f.loader_us > 0.2 * total and f.training:
        parts.append(
            f"Data loading runs on the training thread ({per_unit(f.loader_us, unit)} of the idle): use "
            "DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, prefetch_factor>=2) so "
            "batches are ready before the GPU needs them."
        )
    elif f.loader_us > 0.2 * total:
        # Inference (no backward, no optimizer): a pipeline preparing its next inputs.
        parts.append(
            "The next inputs are prepared on the main thread between inference batches "
            f"({per_unit(f.loader_us, unit)} of "
            "the idle, in the DataLoader's __next__): prepare them in worker processes (DataLoader(num_workers>0), "
            "or a transformers pipeline's num_workers), or make the preprocessing cheaper (a GPU or fast image "
            "processor), so the next batch is ready when the GPU finishes this one."
        )
    if f.pageable_copies and f.pageable_host_us > PAGEABLE_ADVICE_SHARE * total:
        parts.append(
            f"{f.pageable_copies} host-to-device copies come from pageable memory ({f.pageable_bytes / 1e6:.1f} MB, "
            f"{per_unit(f.pageable_host_us, unit)} of host time): pin the source (pin_memory=True or t.pin_memory()) "
            "and copy with non_blocking=True so the host can run ahead."
        )
    if f.after_sync_untraced_us > 0.2 * total:
        parts.append(
            f"{per_unit(f.after_sync_untraced_us, unit)} of it follows a sync: the host waits for a result, "
            "then works on it while the GPU has nothing queued. Overlap the two: queue the next batch's GPU "
            "work before processing this one's results on the host (or process them on the GPU)."
        )
    if f.gaps >= PER_OP_MIN_GAPS and f.median_gap_us <= PER_OP_GAP_US:
        parts.append(
            f"The idle comes in {f.gaps:,} short gaps (median {f.median_gap_us:.0f} µs): the host spends it "
            "dispatching ops one by one (Python, framework and dispatcher overhead), not in one big task. Replaying "
            "the steady-state step from a CUDA graph (torch.compile(mode='reduce-overhead'), torch.cuda.graphs, or "
            "the serving engine's graph mode) removes that per-op host time."
        )
    if lead:
        # The gap belongs to the op that covers it (issue 24 §3): the advice starts there.
        parts.insert(
            0,
            f"{lead} runs while the GPU has nothing queued: make that work cheaper or move it off the critical "
            "path (precompute it, vectorise it, do it in DataLoader workers or on the GPU, or run it for the next "
            "step while this step's GPU work is queued).",
        )
    elif f.sleep_us < SLEEP_ONLY_SHARE * total:
        parts.append(
            "Move per-step host work off the critical path: precompute, vectorise Python loops, do "
            "preprocessing in DataLoader workers or on the GPU, and keep the GPU's queue full by "
            "launching the next step's work before host-side bookkeeping."
        )
    return "\n".join(parts)


def _sleep_at(places: tuple[Place[HostWork], ...]) -> str:
    """ " in main() (workloads/light_idle.py:30)": where the costliest sleep is called."""
    p = next((p for p in places if p.facts.kind == "sleep"), None)
    if p is None:
        return ""
    return (f" in {p.facts.name}()" if p.facts.name else "") + (f" ({p.source.call_label})" if p.source else "")


def _where(main: Place[HostWork] | None) -> str:
    if main is None or main.source is None:
        return ""
    # "Python code in f()" already names the function: add only the file and line.
    if main.facts.kind == "sleep":
        return f" ({main.source.call_label})"  # the line that sleeps, where the source says
    return f" ({main.source.label})" if main.facts.kind == "python" else f" {where(main.source)}"


#: What an annotation holds between its ops (HostBoundFacts.main_parts' "").
BETWEEN_ITS_OPS = "host time between its ops"
#: "Most in X" only when X holds at least this share of the idle; else the top parts.
MOST_SHARE = 0.5
#: Parts of the main annotation under this share of its time are not named.
MIN_PART_SHARE = 0.01


def _merged_parts(parts: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """DDP's flatten and unflatten of its buffers as one part, the most first."""
    ddp = sum(t for name, t in parts if name in DDP_BUFFER_OPS)
    if ddp <= 0:
        return parts
    rest = [(name, t) for name, t in parts if name not in DDP_BUFFER_OPS]
    return tuple(sorted([(DDP_BUFFER_PART, ddp), *rest], key=lambda kv: -kv[1]))


def _with_parts(what: str, main: Place[HostWork], parts: tuple[tuple[str, float], ...], unit: PerUnit) -> str:
    """ "host work in [param|clear_cache] (aten::zeros 1.2 ms, aten::mul 0.8 ms)": the ops
    of the annotation that holds most of the idle."""
    parts = _merged_parts(parts)
    shown = [(name or BETWEEN_ITS_OPS, t) for name, t in parts[:3] if t >= MIN_PART_SHARE * main.time_us]
    if len(shown) > 1 or (shown and shown[0][0] != BETWEEN_ITS_OPS):
        what += " (" + ", ".join(f"{name} {per_unit(t, unit)}" for name, t in shown) + ")"
    return what


def _where_words(what: str, places: tuple[Place[HostWork], ...], total: float) -> str:
    """ "most in X (85%)" when the first place holds most of the idle, else its top parts
    with their shares (issue 24 §3)."""
    if not places or total <= 0:
        return f"most in {what}"
    if places[0].time_us >= MOST_SHARE * total:
        return f"most in {what} ({pct(places[0].time_us / total)})"
    return "in " + ", ".join(f"{work_text(p.facts)} ({pct(p.time_us / total)})" for p in places[:3])


def _lead(found: Found[HostBoundFacts, HostWork], what: str, unit: PerUnit) -> str:
    """ "55.5 ms of the idle (94%) is Python code in make_batch() (_data.py:18)" when one
    place that is host work (an op or the program's code, not the loader, DDP's buffers
    or a sleep, which have their own advice) holds most of the idle; else ""."""
    f, total = found.facts, found.time_us
    main = found.places[0] if found.places else None
    if main is None or total <= 0 or main.time_us < MOST_SHARE * total or main.facts.kind not in ("op", "python"):
        return ""
    if max(f.loader_us, f.ddp_buffer_us, f.sleep_us) > OWN_ADVICE_SHARE * total:
        return ""
    return f"{per_unit(main.time_us, unit)} of the idle ({pct(main.time_us / total)}) is {what}, which"


def words(found: Found[HostBoundFacts, HostWork], share: float, unit: PerUnit) -> Words:
    main = found.places[0] if found.places else None
    what = work_text(replace(main.facts, inside="")) if main else "host work"
    short = what + _where(main)  # without the parts, for the advice's lead
    if main is not None:
        what = _with_parts(what, main, found.facts.main_parts, unit) + _where(main)
        what += f" inside {main.facts.inside}" if main.facts.inside else ""
    return Words(
        title=(
            f"GPU idles {per_unit(found.time_us, unit)} ({pct(share)} of the analysed time) while the host works; "
            + _where_words(what, found.places, found.time_us)
        ),
        advice=_advice(found.facts, found.time_us, unit, _sleep_at(found.places), _lead(found, short, unit)),
        gain_note=(
            "at best all of it, if the host work overlaps GPU work instead of alternating with it; "
            "the step then takes max(host, GPU) instead of their sum"
        ),
        labels=LABELS,
        places=[work_text(p.facts) for p in found.places],
    )
