#!/usr/bin/env bash
# Capture every plain script in workloads/plain/ with `tracelens capture` as a user would
# (whole script, no step marks, today's defaults). Traces go to $OUT (or ./plain_traces).
set -u
out=${OUT:-plain_traces}
mkdir -p "$out"
py=${PYTHON:-python3}
for s in tiny_loop mask_sum gemm_loop gloo_wait hf_generate; do
  t0=$(date +%s.%N)
  timeout 240 "$py" -m tracelens capture --no-report -o "$out/plain_$s.pt.trace.json.gz" "workloads/plain/$s.py" \
    > "$out/plain_$s.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%-12s rc=%s %6.1fs %s\n' "$s" "$rc" "$(echo "$t1 - $t0" | bc)" "$(ls -la "$out/plain_$s.pt.trace.json.gz" 2>/dev/null | awk '{print $5}')"
  tail -n 3 "$out/plain_$s.log"
done
