#!/usr/bin/env bash
# Issue 32's inputs on the H200, in one device call: the CUDA-graph annotation API check
# and a graph-captured training step (eager, capture and replay traces), a serving-style
# decode loop in graph mode (capture traces + SGLang step annotations), memory snapshots
# of a training step and a generate loop, and an Inductor + user-Triton run.
#
#   RESULT=/tmp/inputs.tar.xz bash workloads/inputs/run_h200.sh     # from the repository root
#
# Everything comes back in "$RESULT" (a .tar.xz with the traces, snapshots, the compiled
# modules Inductor wrote, and run.log). WHEELS, when set, is a folder of wheels to install.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/../.."
RESULT="${RESULT:-$PWD/inputs_h200.tar.xz}"
W=/tmp/inputs_h200; rm -rf "$W"
mkdir -p "$W/out"
exec > >(tee -a "$W/out/run.log") 2>&1
if [[ -n "${WHEELS:-}" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl || echo "wheel install failed"
    export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
start=$SECONDS
part() {  # part NAME TIMEOUT cmd...
    local name="$1" limit="$2"; shift 2
    echo "=== $name (t=$((SECONDS - start)) s) ==="
    local t0=$SECONDS rc=0
    timeout -k 10 "$limit" "$@" || rc=$?
    echo "=== $name: rc=$rc, $((SECONDS - t0)) s ==="
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
part graph_train 60 python3 workloads/inputs/graph_train.py --out "$W/out/graph_train"
part serve_decode 45 python3 workloads/inputs/serve_decode.py --out "$W/out/serve_decode"
part memory 60 python3 workloads/inputs/memory_snapshots.py --out "$W/out/memory"
export TORCHINDUCTOR_CACHE_DIR="$W/out/inductor/cache"
part inductor 90 python3 workloads/inputs/inductor_kernels.py --out "$W/out/inductor"
# Keep only the compiled Python modules of the Inductor cache (the kernels' sources).
if [[ -d "$W/out/inductor/cache" ]]; then
    (cd "$W/out/inductor" && find cache -name '*.py' -size -400k | tar -cf code.tar -T - && rm -rf cache)
fi
echo "paths: W=$W"
du -ah "$W/out" | sort -h | tail -40
echo "total $((SECONDS - start)) s"
tar -C "$W" -cJf "$RESULT" out
ls -l "$RESULT"
