#!/usr/bin/env bash
# Capture every workload in workloads/dynamism/ with `tracelens capture` as a user would,
# each with profile_memory (--memory). Traces go to $OUT (or ./dyn_traces) as
# dyn_<name>.pt.trace.json.gz. The compiled ones record without Python stacks (Dynamo's
# and Inductor's own frames would make the trace tens of MB).
set -u
out=${OUT:-dyn_traces}
mkdir -p "$out"
py=${PYTHON:-python3}
d=workloads/dynamism
cap() {  # name, timeout, capture options..., --, script args
  local name=$1 limit=$2; shift 2
  local t0 rc
  t0=$SECONDS
  timeout "$limit" "$py" -m tracelens capture --no-report -o "$out/dyn_$name.pt.trace.json.gz" "$@" \
    > "$out/dyn_$name.log" 2>&1
  rc=$?
  printf '%-22s rc=%s %4ss %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(stat -c %s "$out/dyn_$name.pt.trace.json.gz" 2>/dev/null)"
  tail -n 2 "$out/dyn_$name.log"
}
cap empty_cache         60 --memory "$d/empty_cache_loop.py"
cap empty_cache_fixed   60 --memory "$d/empty_cache_loop.py" --fixed
cap kv_cat              60 --memory --steps 20-39 "$d/kv_cat.py"
cap kv_static           60 --memory --steps 20-39 "$d/kv_cat.py" --static
cap ragged              60 --memory "$d/ragged_eager.py"
cap ragged_fixed        60 --memory "$d/ragged_eager.py" --fixed
cap recompile           120 --no-stack --memory --steps 1-7 "$d/compile_recompile.py"
cap recompile_fixed     90 --no-stack --memory --steps 1-7 "$d/compile_recompile.py" --fixed
cap graph_break         90 --no-stack --memory "$d/compile_graph_break.py"
cap graph_break_fixed   90 --no-stack --memory "$d/compile_graph_break.py" --fixed
