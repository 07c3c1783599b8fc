#!/usr/bin/env bash
# Capture every sample trace of tracelens on a CUDA machine.
#
#   bash workloads/capture_all.sh            # from the repository root
#
# Traces go to "$OUT/traces" (OUT is set by the lent-device tool) or to ./sample_traces
# when OUT is unset. With OUT set, everything is then packed into "$OUT/sample_traces.tar"
# (split into <=15 MiB parts if larger) and the loose files are removed, so that only a
# few files have to come back; the whole log is kept in "$OUT/capture.log".
# Env: PYTHON (default python3), DEVICE (default cuda), EXTRA_BUDGET_S, PER_SCRIPT_TIMEOUT_S. A failing script is reported and the others still run.
set -euo pipefail
export PYTHONUNBUFFERED=1

cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [[ -n "${OUT:-}" ]]; then
    TRACES="$OUT/traces"
else
    TRACES="sample_traces"
fi
mkdir -p "$TRACES"
DEVICE="${DEVICE:-cuda}"   # DEVICE=cpu for a local smoke test of this script
if [[ -n "${OUT:-}" ]]; then
    exec > >(tee -a "$OUT/capture.log") 2>&1   # full log comes back too
fi

# issue-2 cases first, then the extra cases (skipped if the run is already long)
MAIN=(host_sync_mask host_sync_static launch_bound host_bound_pageable host_bound_pinned train_step)
EXTRA=(gemm_bf16 gemm_misaligned elementwise_fp32)
EXTRA_BUDGET_S="${EXTRA_BUDGET_S:-240}"   # start no extra case after this many seconds
PER_SCRIPT_TIMEOUT_S="${PER_SCRIPT_TIMEOUT_S:-90}"

start=$SECONDS
failed=()
skipped=()

run_one() {
    local name="$1" t0=$SECONDS rc=0
    echo "=== $name (t=$((SECONDS - start))s) ==="
    timeout "$PER_SCRIPT_TIMEOUT_S" "$PY" "workloads/$name.py" --out "$TRACES" --device "$DEVICE" || rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "!!! $name FAILED (rc=$rc)"
        failed+=("$name")
    fi
    echo "=== $name done in $((SECONDS - t0))s ==="
}

for s in "${MAIN[@]}"; do run_one "$s"; done
for s in "${EXTRA[@]}"; do
    if (( SECONDS - start > EXTRA_BUDGET_S )); then
        echo "--- skipping $s: ${EXTRA_BUDGET_S}s budget used"
        skipped+=("$s")
    else
        run_one "$s"
    fi
done

echo "=== trace sizes ==="
ls -l "$TRACES"
du -b "$TRACES"/*.pt.trace.json.gz 2>/dev/null || true

echo "=== environment ==="
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv || echo "nvidia-smi failed"
"$PY" -c 'import torch;print(torch.__version__, torch.version.cuda)'

if [[ -n "${OUT:-}" ]]; then
    tar -C "$OUT" -cf "$OUT/sample_traces.tar" traces
    size=$(stat -c %s "$OUT/sample_traces.tar")
    if (( size > 15 * 1024 * 1024 )); then
        echo "tar is $size bytes: splitting into 15 MiB parts (cat sample_traces.tar.part-* > sample_traces.tar)"
        split -b 15M "$OUT/sample_traces.tar" "$OUT/sample_traces.tar.part-"
        rm "$OUT/sample_traces.tar"
    fi
    rm -rf "$TRACES"
    ls -l "$OUT"
fi

echo "total: $((SECONDS - start))s"
echo "failed: ${failed[*]:-none}"
echo "skipped: ${skipped[*]:-none}"
if (( ${#failed[@]} > 0 )); then exit 1; fi
