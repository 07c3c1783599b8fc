#!/usr/bin/env bash
# One device call for issue 10's third pass: what each kernel moves through DRAM and L2, and
# the instructions of ATen's non-vectorised elementwise path.
#   - DRAM bytes read and written, L2 bytes/sectors (read, write) and their peaks per kernel,
#     on the train, attention, encoder and elementwise cases (same step, same kernel order as
#     their SpeedOfLight CSVs), to test whether writes that fit in L2 reach DRAM during the
#     kernel; the train case again with --cache-control none (no flush between kernels);
#   - the `legacy` case (elementwise_kernel<128, 4>: broadcast copies, strided adds) with
#     SpeedOfLight and InstructionStats, and its torch.profiler trace;
#   - the `onchip` case's L2 bytes for the fp32 memory-efficient attention.
#
#   bash bench/ncu_compare_memory.sh     # from the repository root, on a CUDA machine
#
# Results: "$OUT/memory.tar.gz" (<case>_mem.csv raw pages, legacy_raw.csv, the legacy trace).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_COMPILE_THREADS=1
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${OUT:-ncu_out}"
W="$DEST/work"
mkdir -p "$W"
exec > >(tee -a "$DEST/memory.log") 2>&1
set -x
start=$SECONDS
BUDGET="${BUDGET:-400}"  # seconds: later steps are skipped past this
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
MEM="dram__bytes_read.sum,dram__bytes_write.sum,dram__bytes.sum.peak_sustained,dram__cycles_elapsed.avg.per_second"
MEM="$MEM,lts__t_bytes.sum,lts__t_sectors.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum"
MEM="$MEM,lts__t_bytes.sum.peak_sustained,lts__cycles_elapsed.avg.per_second,gpu__time_duration.sum"
MEM="$MEM,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"
MEM="$MEM,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__grid_size"
MIN="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum"
prof() {  # prof NAME CASE TIMEOUT EXTRA-ARGS...
    local name=$1 case=$2 t=$3; shift 3
    if (( SECONDS - start > BUDGET )); then echo "!!! skip $name (budget)"; return; fi
    timeout "$t" ncu --clock-control none "$@" --profile-from-start off --target-processes application-only \
        --launch-count 400 -f -o "$W/$name" "$PY" workloads/ncu_cases.py "$case" --mode ncu \
        || echo "!!! ncu $name failed (rc=$?)"
    if [[ -f "$W/$name.ncu-rep" ]]; then
        ncu -i "$W/$name.ncu-rep" --page raw --csv >"$W/${name}.csv"
        rm -f "$W/$name.ncu-rep"
    fi
    echo "ncu $name at $((SECONDS - start))s"
}
timeout 60 "$PY" workloads/ncu_cases.py legacy --mode trace --out "$W" || echo "!!! trace legacy failed"
prof legacy_raw legacy 60 --section SpeedOfLight --section InstructionStats --metrics "$MEM"
if [[ ! -s "$W/legacy_raw.csv" ]]; then
    MEM="$MIN"; echo "!!! falling back to $MEM"
    prof legacy_raw legacy 60 --section SpeedOfLight --section InstructionStats --metrics "$MEM"
fi
prof train_mem train 120 --metrics "$MEM"
prof attention_mem attention 60 --metrics "$MEM"
prof encoder_mem encoder 60 --metrics "$MEM"
prof elementwise_mem elementwise 45 --metrics "$MEM"
prof onchip_mem onchip 30 --metrics "$MEM"
prof train_nocache train 120 --cache-control none --metrics "$MEM"
ls -l "$W"
for f in "$W"/*.csv; do gzip -9 "$f"; done
tar -C "$W" -czf "$DEST/memory.tar.gz" . && rm -rf "$W"
echo "total $((SECONDS - start))s"
