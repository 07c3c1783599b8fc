#!/usr/bin/env bash
# One device call: held-out checks of the L2 spill model of fp32 memory-efficient attention
# (tracelens/derive/kernel_models.py L2_SPILL_MODELS, fitted on the `onchip` case): the
# `spill` case of workloads/ncu_cases.py (head dims 32/64/128, cross-attention, partial tiles,
# 2048 tokens) traced with torch.profiler, then under Nsight Compute with Speed Of Light and
# the L2 traffic metrics, exported as the details page (its verdict) and the raw page.
#
#   bash bench/ncu_spill_check.sh     # from the repository root, on a CUDA machine
#
# Results: "$OUT/spill.tar.gz" (ncu_spill.pt.trace.json.gz, spill.csv, spill_raw.csv).
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${OUT:-ncu_out}"
W="$DEST/work"
mkdir -p "$W"
exec > >(tee -a "$DEST/spill.log") 2>&1
set -x
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
timeout 90 "$PY" workloads/ncu_cases.py spill --mode trace --out "$W" || echo "!!! trace spill failed"
M="lts__t_sectors_op_write.sum,lts__t_sectors_op_read.sum,lts__t_bytes.sum,gpu__time_duration.sum"
M="$M,lts__xbar2lts_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed"
M="$M,lts__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread"
M="$M,launch__grid_size"
timeout 240 ncu --clock-control none --section SpeedOfLight --section LaunchStats --metrics "$M" \
    --profile-from-start off --target-processes application-only --launch-count 100 -f -o "$W/spill" \
    "$PY" workloads/ncu_cases.py spill --mode ncu || echo "!!! ncu spill failed (rc=$?)"
ncu -i "$W/spill.ncu-rep" --page details --csv >"$W/spill.csv"
ncu -i "$W/spill.ncu-rep" --page raw --csv >"$W/spill_raw.csv"
rm -f "$W/spill.ncu-rep"
ls -l "$W"
for f in "$W"/*.csv; do gzip -9 "$f"; done
tar -C "$W" -czf "$DEST/spill.tar.gz" . && rm -rf "$W"
echo "total $((SECONDS - start))s"
