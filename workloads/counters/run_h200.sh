#!/usr/bin/env bash
# Issue 35 (helper "counters"): one device call. From the repository root:
#
#   RESULT=/tmp/counters.tar.xz bash workloads/counters/run_h200.sh
#   DEVICE=cpu RESULT=/tmp/c.tar.xz bash workloads/counters/run_h200.sh   # smoke test, no GPU
#
# 1. probe: does torch's experimental config record CUPTI range-profiler counters here?
#    (workloads/counters/probe.py; prints its answers first)
# 2. ncu --query-metrics (which tensor-path counters this GPU offers)
# 3. `tracelens capture --counters --steps 3-4` of workloads/ncu_cases.py CASE --mode loop
#    for gemm, elementwise, attention (then train, last, if time is left)
# 4. Nsight Compute's Speed Of Light on the same step of the same cases (--mode ncu: 3
#    warm-up steps, then the 4th, i.e. step 3), as bench/ncu_compare_capture.sh does
# Every step runs under `timeout`; a failure is logged and the next step still runs.
# $RESULT (a .tar.xz) is rewritten after every step, so a run stopped by the outer budget
# still returns everything done until then.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCHINDUCTOR_COMPILE_THREADS=1
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # tracelens from this tree
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
RESULT="${RESULT:-$PWD/counters_result.tar.xz}"
CASES="${CASES:-gemm elementwise attention}"
LAST_CASES="${LAST_CASES-train}"
D="$(mktemp -d /tmp/counters_out.XXXX)"
mkdir -p "$D/traces" "$D/ncu"
exec > >(tee -a "$D/run.log") 2>&1
t0=$SECONDS
pack() { tar -C "$D" -cJf "$RESULT.tmp" . && mv -f "$RESULT.tmp" "$RESULT"; }
mark() { echo "=== $* at $((SECONDS - t0)) s"; }

mark start
if [[ "$DEVICE" == cuda ]]; then
    timeout 30 nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv || true
    grep -E "RmProfilingAdminOnly" /proc/driver/nvidia/params || echo "(no RmProfilingAdminOnly line)"
fi
command -v ncu && timeout 60 ncu --version || echo "!!! no ncu"
timeout 60 "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || true

mark "1 probe"
timeout -k 5 90 "$PY" workloads/counters/probe.py --out "$D/probe" --device "$DEVICE" || echo "!!! probe rc=$?"
pack

mark "2 query-metrics"
if command -v ncu >/dev/null; then
    timeout -k 5 60 ncu --query-metrics >"$D/ncu/query_metrics.txt" 2>&1 || echo "!!! query rc=$?"
    grep -icE "^[a-z]" "$D/ncu/query_metrics.txt" || true
    grep -iE "tensor|ops_path|sass_thread_inst_executed_op_[dfh](add|mul|fma)_pred_on |dram__bytes_(read|write) " \
        "$D/ncu/query_metrics.txt" | head -60
fi
pack

capture() {  # CASE: tracelens capture --counters, the timing pass recording steps 3-4
    local c=$1
    mark "3 capture --counters $c"
    timeout -k 10 "${2:-150}" "$PY" -m tracelens capture --counters --steps 3-4 --no-report \
        -o "$D/traces/counters_$c.pt.trace.json.gz" \
        workloads/ncu_cases.py "$c" --mode loop --steps 6 --device "$DEVICE" || echo "!!! capture $c rc=$?"
    ls -la "$D/traces" | grep "_$c\." || true
    "$PY" - "$D/traces/counters_$c.pt.trace.json.gz" <<'EOF' || echo "!!! summary $c failed"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
c = d.get("tracelens_counters")
print("tracelens_counters:", None if c is None else {k: v for k, v in c.items() if k != "kernels"})
for k in (c or {}).get("kernels", [])[:4]:
    print("  ", k["name"][:80], k["grid"], k["block"], {m: v for m, v in k["values"].items() if v})
print("kernels in trace:", sum(1 for e in d["traceEvents"] if e.get("cat") == "kernel"))
EOF
    pack
}

sol() {  # CASE: Nsight Compute's Speed Of Light on step 3
    local c=$1
    command -v ncu >/dev/null || return 0
    mark "4 ncu SpeedOfLight $c"
    timeout -k 10 "${2:-120}" ncu --clock-control none --section SpeedOfLight --section LaunchStats --csv \
        --page details --profile-from-start off --target-processes application-only --launch-count 400 \
        "$PY" workloads/ncu_cases.py "$c" --mode ncu --device "$DEVICE" >"$D/ncu/$c.csv" 2>"$D/ncu/$c.err" \
        || echo "!!! ncu $c rc=$?"
    echo "ncu $c: $(grep -c '"Duration"' "$D/ncu/$c.csv") kernels"
    gzip -f "$D/ncu/$c.csv"
    pack
}

for c in $CASES; do capture "$c" 120; done
for c in $CASES; do sol "$c" 90; done
for c in $LAST_CASES; do capture "$c" 200; sol "$c" 150; done
mark done
pack
ls -l "$RESULT"
