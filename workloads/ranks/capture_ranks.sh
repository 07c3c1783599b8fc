#!/usr/bin/env bash
# On the H200: the three gloo cases (3 ranks sharing the one GPU), then the same
# host_slow job under `torchrun ... -m tracelens capture` (one trace per rank, named by
# rank, rank 0 reports on the set). Results under $OUT (or ./ranks_out).
set -x
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-ranks_out}
mkdir -p "$OUT"
WORLD=${WORLD:-3}
python -c "import msgspec" 2>/dev/null || pip install -q --no-deps .whl/*.whl
python -c "import dask" 2>/dev/null || pip install -q --no-deps wheels/*-none-any.whl
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv
i=0
for case in balanced host_slow gpu_heavy; do
  i=$((i+1))
  timeout 120 python workloads/ranks/gloo_ranks.py --case $case --world $WORLD --out "$OUT/ranks_$case" --port $((29560+i)) \
    > "$OUT/log_$case.txt" 2>&1
  echo "case $case rc=$?"; tail -3 "$OUT/log_$case.txt"
done
ls -la "$OUT"/ranks_*
# torchrun: every worker runs tracelens capture; the script marks steps with tracelens.capture.step().
timeout 150 torchrun --standalone --nproc-per-node 2 -m tracelens capture --steps 3-6 --no-stack --out-dir "$OUT/torchrun" \
  workloads/ranks/gloo_ranks.py --case host_slow --no-profile > "$OUT/log_torchrun.txt" 2>&1
echo "torchrun rc=$?"; tail -30 "$OUT/log_torchrun.txt"
find "$OUT/torchrun" -type f | head -20
