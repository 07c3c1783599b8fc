#!/usr/bin/env bash
# One device call for issue 10: the wave sweep, a torch.profiler trace of every
# workloads/ncu_cases.py case, and Nsight Compute's Speed Of Light on one step of each.
#
#   bash bench/ncu_compare_capture.sh          # from the repository root, on a CUDA machine
#   DEVICE=cpu bash bench/ncu_compare_capture.sh   # smoke test of the trace half (no ncu)
#
# Results go to "$OUT" (or ./ncu_out): traces/, ncu/<case>.csv, wave_sweep.*, all packed into
# "$OUT/ncu_capture.tar" with the log beside it. bench/ncu_compare.py reads them.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_COMPILE_THREADS=1
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${OUT:-ncu_out}"
DEVICE="${DEVICE:-cuda}"
CASES="${CASES:-gemm elementwise attention encoder train compiled}"
mkdir -p "$DEST/work/traces" "$DEST/work/ncu"
exec > >(tee -a "$DEST/capture.log") 2>&1
set -x
start=$SECONDS
if [[ "$DEVICE" == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
    ncu --version
    timeout 120 "$PY" workloads/wave_sweep.py --out "$DEST/work" || echo "!!! wave_sweep failed"
fi
for c in $CASES; do
    timeout 120 "$PY" workloads/ncu_cases.py "$c" --mode trace --device "$DEVICE" --out "$DEST/work/traces" \
        || echo "!!! trace $c failed"
done
echo "traces done at $((SECONDS - start))s"
if [[ "$DEVICE" == cuda ]]; then
    for c in $CASES; do
        timeout 150 ncu --clock-control none --section SpeedOfLight --section LaunchStats --csv --page details \
            --profile-from-start off --target-processes application-only --launch-count 400 \
            "$PY" workloads/ncu_cases.py "$c" --mode ncu >"$DEST/work/ncu/$c.csv" 2>"$DEST/work/ncu/$c.err" \
            || echo "!!! ncu $c failed (rc=$?)"
        echo "ncu $c: $(grep -c '"Duration"' "$DEST/work/ncu/$c.csv") kernels at $((SECONDS - start))s"
    done
fi
ls -lR "$DEST/work"
tar -C "$DEST/work" -czf "$DEST/ncu_capture.tar.gz" . && rm -rf "$DEST/work"
echo "total $((SECONDS - start))s"
