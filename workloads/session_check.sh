#!/usr/bin/env bash
# One device call that checks the merged tree end to end on a CUDA machine:
#  - `tracelens capture --memory` keeps the allocator's [memory] events (the all-threads
#    recording mode drops them) on two dynamism workloads, and their reports;
#  - `torchrun ... -m tracelens capture` on 2 ranks sharing the GPU over gloo (one slow on
#    the host), one trace per rank and the job report rank 0 writes;
#  - a plain transformers generate script under capture with every default output
#    (HTML, Markdown, JSON, the annotated Perfetto trace);
#  - the GPU-marked tests.
#
#   OUT=/some/dir WHEELS=.whl bash workloads/session_check.sh
#
# Everything lands in $OUT/session_check.tar (+ the log). WHEELS: a folder of wheels for
# what the device's Python lacks (msgspec, dask).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
RES="${OUT:-$PWD/session_check}"
W="$RES/work"
mkdir -p "$W"
exec > >(tee -a "$RES/session_check.log") 2>&1
if [[ -n "${WHEELS:-}" ]]; then
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" msgspec dask || echo "wheel install failed"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch, msgspec, dask; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
start=$SECONDS
step() { echo "=== $1 (t=$((SECONDS - start)) s) ==="; }

step "capture --memory"
for s in "empty_cache workloads/dynamism/empty_cache_loop.py" "kv_cat --steps 20-39 workloads/dynamism/kv_cat.py"; do
    set -- $s
    name=$1; shift
    timeout -k 10 120 "$PY" -m tracelens capture --memory --out-dir "$W/mem" -o "$W/mem/$name.pt.trace.json.gz" "$@" \
        > "$W/mem_$name.log" 2>&1
    echo "$name rc=$? $(du -h "$W/mem/$name.pt.trace.json.gz" | cut -f1)"; tail -n 25 "$W/mem_$name.log"
    "$PY" - "$W/mem/$name.pt.trace.json.gz" <<'PY'
import sys
from tracelens.model import load_trace
m = load_trace(sys.argv[1])
print("memory events:", len(m.memory), "all_threads:", m.meta.metadata.get("tracelens", {}).get("all_threads"))
PY
done

step "torchrun capture, 2 ranks over gloo"
timeout -k 10 180 torchrun --standalone --nproc-per-node 2 -m tracelens capture --steps 3-6 --no-stack \
    --out-dir "$W/torchrun" workloads/ranks/gloo_ranks.py --case host_slow --no-profile > "$W/torchrun.log" 2>&1
echo "torchrun rc=$?"; tail -n 40 "$W/torchrun.log"; find "$W/torchrun" -type f | sort

step "capture of a plain transformers generate script, default outputs"
timeout -k 10 240 "$PY" -m tracelens capture --out-dir "$W/hf" workloads/plain/hf_generate.py > "$W/hf.log" 2>&1
echo "hf rc=$?"; tail -n 40 "$W/hf.log"; ls -la "$W/hf"

step "GPU tests"
timeout -k 10 300 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -n 15

step "pack"
find "$W" \( -name '*.json.gz' -o -name '*.json' \) -size +6M -print -delete  # (what comes back is capped)
tar -C "$RES" -cf "$RES/session_check.tar" work
ls -la "$RES"
