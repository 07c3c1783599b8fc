#!/usr/bin/env bash
# Issue 12 on a CUDA machine: `tracelens capture` on the capture_*.py workloads, the
# SIGTERM case and the overhead bench, in one go (one device call).
#
#   bash workloads/capture_check.sh        # from the repository root
#
# Results go to "$OUT" (the lent-device tool's folder) or ./capture_check when OUT is
# unset: capture_check.tar (small traces, reports' JSON/Markdown, each trace's metadata)
# and capture_check.log. Env: PYTHON (default python3), TERM_AFTER_S (default 30),
# WHEELS (a folder of wheels to install first, e.g. msgspec for the device's Python),
# CASES (default "mask_sum train_loader compile llama_generate long_loop bench").
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
RES="${OUT:-$PWD/capture_check}"
mkdir -p "$RES/work"
W="$RES/work"
exec > >(tee -a "$RES/capture_check.log") 2>&1
if [[ -n "${WHEELS:-}" ]]; then
    "$PY" -m pip install -q --no-deps --no-index "$WHEELS"/*.whl || echo "wheel install failed"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
try:
    import transformers; print("transformers", transformers.__version__)
except ImportError as e:
    print("no transformers", e)
PY
start=$SECONDS
cap() {  # cap NAME TIMEOUT [capture options] -- script [args]
    local name="$1" limit="$2"; shift 2
    echo "=== $name (t=$((SECONDS - start)) s) ==="
    local t0=$SECONDS rc=0
    timeout -k 20 "$limit" "$PY" -m tracelens capture --out-dir "$W" -o "$W/$name.pt.trace.json.gz" "$@" || rc=$?
    echo "=== $name: rc=$rc, $((SECONDS - t0)) s, $(du -h "$W/$name.pt.trace.json.gz" 2>/dev/null | cut -f1) ==="
}
CASES="${CASES:-mask_sum train_loader compile llama_generate long_loop bench}"
has() { [[ " $CASES " == *" $1 "* ]]; }
has mask_sum && cap capture_mask_sum 120 workloads/capture_mask_sum.py
has train_loader && cap capture_train_loader 180 workloads/capture_train_loader.py --steps 60
has compile && cap capture_compile 240 workloads/capture_compile.py --iters 60
has llama_generate && cap capture_llama_generate 300 workloads/capture_llama_generate.py --calls 3 --new-tokens 32
if has long_loop; then
    # SIGTERM: `timeout -s TERM` sends it to tracelens (the script runs in its process);
    # --preserve-status passes its exit code on instead of timeout's own 124.
    echo "=== capture_long_loop: SIGTERM after ${TERM_AFTER_S:-30} s (t=$((SECONDS - start)) s) ==="
    t0=$SECONDS; rc=0
    timeout --preserve-status -s TERM "${TERM_AFTER_S:-30}" "$PY" -m tracelens capture --out-dir "$W" \
        -o "$W/capture_long_loop.pt.trace.json.gz" workloads/capture_long_loop.py --seconds 300 || rc=$?
    echo "=== capture_long_loop: rc=$rc (143 expected), $((SECONDS - t0)) s, $(du -h "$W/capture_long_loop.pt.trace.json.gz" 2>/dev/null | cut -f1) ==="
fi
if has bench; then
    echo "=== bench (t=$((SECONDS - start)) s) ==="
    timeout 300 "$PY" bench/bench_capture.py --steps 60 --json "$W/bench_capture.json" | tee "$W/bench_capture.md"
fi
echo "=== metadata ==="
"$PY" - "$W" <<'PY'
import gzip, json, sys
from pathlib import Path
w = Path(sys.argv[1])
for p in sorted(w.glob("*.pt.trace.json.gz")):
    meta = json.loads(gzip.decompress(p.read_bytes()))["tracelens"]
    meta.pop("nvml", None)
    (w / (p.name.split(".")[0] + ".meta.json")).write_text(json.dumps(meta, indent=1))
    print(p.name, p.stat().st_size, meta["recorded"], meta["window"]["recorded"], meta["export_s"], meta["exit_code"])
PY
# Keep the small traces (<= 1.6 MB) for sample_traces/, and every report and metadata file.
mkdir -p "$RES/pack"
for f in "$W"/*; do
    case "$f" in
        *.pt.trace.json.gz) [[ $(stat -c %s "$f") -le 1600000 ]] && cp "$f" "$RES/pack/" ;;
        *.json|*.md|*.log) cp "$f" "$RES/pack/" ;;
    esac
done
tar -C "$RES" -cf "$RES/capture_check.tar" pack
rm -rf "$RES/pack" "$W"
echo "=== done in $((SECONDS - start)) s ==="
