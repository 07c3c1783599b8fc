#!/usr/bin/env bash
# One device call: the instructions ATen's elementwise, softmax and norm kernels execute per
# element (Nsight Compute's InstructionStats and ComputeWorkloadAnalysis), for the roofline's
# instruction-issue roof (issue 10). Profiles workloads/ncu_cases.py's `instructions` case
# (one kernel per op, fp32 and bf16, sizes unlike the comparison cases) and, to check the
# counts on the comparison kernels, the `attention` and `compiled` cases. The second call
# (fp32 attention's shared-memory traffic) was
#   TRACES="onchip encoder" CASES="onchip encoder" bash bench/ncu_compare_instructions.sh
#
#   bash bench/ncu_compare_instructions.sh     # from the repository root, on a CUDA machine
#
# Results: "$OUT/instructions.tar.gz" (the case's trace, raw and details CSVs per case).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_COMPILE_THREADS=1
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${OUT:-ncu_out}"
mkdir -p "$DEST/work"
exec > >(tee -a "$DEST/instructions.log") 2>&1
set -x
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
for c in ${TRACES:-instructions}; do
    timeout 100 "$PY" workloads/ncu_cases.py "$c" --mode trace --out "$DEST/work" || echo "!!! trace $c failed"
done
for c in ${CASES:-instructions attention compiled}; do
    timeout 150 ncu --clock-control none --section SpeedOfLight --section InstructionStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --profile-from-start off --target-processes application-only \
        --launch-count 400 -f -o "$DEST/work/$c" "$PY" workloads/ncu_cases.py "$c" --mode ncu \
        || echo "!!! ncu $c failed (rc=$?)"
    ncu -i "$DEST/work/$c.ncu-rep" --page raw --csv >"$DEST/work/${c}_raw.csv"
    ncu -i "$DEST/work/$c.ncu-rep" --page details --csv >"$DEST/work/${c}_details.csv"
    rm -f "$DEST/work/$c.ncu-rep"
    echo "ncu $c at $((SECONDS - start))s"
done
ls -l "$DEST/work"
tar -C "$DEST/work" -czf "$DEST/instructions.tar.gz" . && rm -rf "$DEST/work"
echo "total $((SECONDS - start))s"
