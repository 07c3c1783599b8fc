#!/usr/bin/env bash
# Issue 31 on the H200, in one lean device call. For each program in workloads/programs/,
# one process (time_steps.py): the baseline configuration timed without the profiler,
# then `tracelens capture --steps N-M` of that same configuration (the command's own
# runner, in-process: no second Python start, import and CUDA initialisation), then the
# configuration variants timed without the profiler. The archive is rewritten after every
# program, so a run cut short keeps what it finished.
#
#   RESULT=/tmp/programs.tar.xz bash workloads/programs/gpu_run.sh      (repository root)
#
# Env: RESULT (the .tar.xz to write), PY (python3), QUICK=1 (CPU smoke test: tiny sizes),
# LIMIT_SCALE (1; multiplies each program's timeout, for slow CPUs),
# ONLY="timm trainer ..." (a subset), BUDGET_S (140: the whole run's hard limit; each
# program's timeout is cut to what is left of it), PACK_MAX (12500000: bytes of traces kept in the archive).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY="${PY:-python3}"
ROOT="$PWD"
RESULT="${RESULT:-$ROOT/programs.tar.xz}"
W="$(mktemp -d /tmp/programs-XXXX)"
mkdir -p "$W/traces" "$W/times" "$W/logs"
exec > >(tee -a "$W/logs/run.log") 2>&1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
QUICK="${QUICK:-0}"
ONLY="${ONLY:-lightning trainer pyg st detection timm accelerate}"
BUDGET_S="${BUDGET_S:-140}"
start=$SECONDS
pack() {  # the archive so far (the traces are gzip already: a fast xz of the tar); traces
    # smallest first while they fit 12.5 MB (the archive's limit is 14 MB), the rest listed
    local used=0 keep=() f sz
    for f in $(cd "$W" && ls -S -r traces/*.gz 2>/dev/null); do
        sz=$(stat -c %s "$W/$f")
        if (( used + sz <= ${PACK_MAX:-12500000} )); then keep+=("$f"); used=$((used + sz)); else echo "$f $sz" >> "$W/logs/left_out.txt"; fi
    done
    tar -C "$W" -cf - "${keep[@]}" $(cd "$W" && ls traces/*.log 2>/dev/null) times logs | xz -0 -T0 > "$RESULT.tmp" && mv "$RESULT.tmp" "$RESULT"
}
"$PY" - <<'PY' > "$W/logs/versions.txt" 2>&1
import importlib, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for m in ["lightning", "timm", "torchvision", "transformers", "accelerate", "sentence_transformers", "torch_geometric"]:
    try:
        print(m, importlib.metadata.version(m.replace("_", "-")))
    except Exception as e:
        print(m, "MISSING", type(e).__name__, e)
PY
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> "$W/logs/versions.txt" 2>&1
echo "cores $(nproc)" >> "$W/logs/versions.txt"
cat "$W/logs/versions.txt"

want() { [[ " $ONLY " == *" $1 "* ]]; }
prog() {  # prog NAME LIMIT_S [time_steps options] -- SCRIPT ARGS
    local name="$1" limit=$(( $2 * ${LIMIT_SCALE:-1} )); shift 2
    local cap=(--capture "$W/traces/prog_$name.pt.trace.json.gz")
    if [[ "${1:-}" == "--no-capture" ]]; then cap=(); shift; fi
    local left=$((BUDGET_S - (SECONDS - start)))
    if (( left < 8 )); then echo "=== $name: skipped (budget spent) ==="; return; fi
    (( limit > left )) && limit=$left
    echo "=== $name (t=$((SECONDS - start)) s, limit $limit s) ==="
    local t0=$SECONDS rc=0
    timeout -k 3 "$limit" "$PY" workloads/programs/time_steps.py --name "$name" --out "$W/times/$name.json" \
        "${cap[@]}" "$@" > "$W/logs/$name.log" 2>&1 || rc=$?
    grep -E "^\[time_steps\]|Error|error:" "$W/logs/$name.log" | tail -n 12
    echo "=== $name: rc=$rc, $((SECONDS - t0)) s ==="
    pack
}
P=workloads/programs
if [[ "$QUICK" == 1 ]]; then  # CPU smoke sizes
    LF=(--size 32 --width 8 --batch-size 8); TM=(--model resnet18 --batch-size 2 --img-size 64)
    DT=(--batch-size 1 --size 160 --model fasterrcnn_mobilenet_v3_large_320_fpn); ST=(--chunk 64)
    PG=(--hidden 32); AC=(--batch-size 2 --seq-len 64 --layers 2 --hidden 128)
    HT=(--seq_len 64 --layers 2 --hidden 128 --per_device_train_batch_size 2)
    TP=(--layers 2 --hidden 128 --seq-len 64 --batch-size 2 --calls 5)
else
    LF=(); TM=(); DT=(); ST=(); PG=(); AC=(); HT=(); TP=()
fi

# Each program: 14-16 steps a variant (4-5 warm-up skipped); captures record steps 5-9
# (detection and pyg 5-7: ~50k events a step with Python stacks; encode 5-14).
# --capture-first: the first variant is captured, not timed (a later one times it).
want lightning && prog lightning 40 --warmup 4 --variant "baseline:" --variant "workers8_pin:--workers 8 --pin-memory" \
    -- $P/lightning_fit.py "${LF[@]}" --max-steps 16
want trainer && prog trainer 30 --warmup 4 --capture-first --variant "capture:" --variant "baseline:" \
    --variant "bf16:--bf16 True" -- $P/hf_trainer.py "${HT[@]}" --max_steps 16
want pyg && prog pyg 30 --warmup 3 --capture-steps 5-7 --capture-first --variant "capture:" --variant "baseline:" \
    --variant "workers4:--workers 4" -- $P/pyg_train.py "${PG[@]}" --graphs 1664
want st && prog st 30 --warmup 5 --mark module:SentenceTransformer,Transformer,BertModel --capture-steps 5-14 --capture-first --variant "capture:" \
    --variant "baseline:" --variant "batch128:--batch-size 128 --chunks 6" -- $P/st_encode.py "${ST[@]}" --chunks 2
# detection and timm were captured in programs-main2 (their baselines timed there too);
# detection's fixed-shape variant is captured (prog_detection_fixed: the after of a diff pair).
want detection && prog detection_fixed 25 --warmup 4 --capture-steps 5-7 --variant "jitter0:--jitter 0" --variant "baseline:" \
    --variant "workers4:--workers 4" -- $P/detection_train.py "${DT[@]}" --steps 14
want timm && prog timm 15 --no-capture --warmup 4 --variant "channels_last:--channels-last" --variant "batch128:--batch-size 128" \
    -- $P/timm_train.py "${TM[@]}" --steps 16
want accelerate && prog accelerate 25 --warmup 4 --capture-first --variant "capture:@ACCELERATE_MIXED_PRECISION=no" \
    --variant "baseline:@ACCELERATE_MIXED_PRECISION=no" --variant "bf16:@ACCELERATE_MIXED_PRECISION=bf16" \
    -- $P/accelerate_train.py "${AC[@]}" --steps 16
# programs-main4 (the rows programs-main3 left open): encode timed with a mark that fires
# (sentence-transformers calls its BertModel's forward() directly), the Trainer's per-step
# helpers unprofiled vs profiled, timm with torch.compile (eager timed first in the same
# process; the compiled run captured for a diff against prog_timm; then reduce-overhead).
want st_time && prog st_time 20 --no-capture --warmup 5 --mark module:SentenceTransformer,Transformer,BertModel \
    --variant "baseline:" --variant "batch128:--batch-size 128 --chunks 6" -- $P/st_encode.py "${ST[@]}" --chunks 2
if want trainer_probe; then
    left=$((BUDGET_S - (SECONDS - start))); lim=$(( 15 * ${LIMIT_SCALE:-1} )); (( lim > left )) && lim=$left
    echo "=== trainer_probe (t=$((SECONDS - start)) s, limit $lim s) ==="
    timeout -k 3 "$lim" "$PY" $P/trainer_host_probe.py --out "$W/times/trainer_probe.json" "${TP[@]}" \
        > "$W/logs/trainer_probe.log" 2>&1; echo "=== trainer_probe: rc=$? ==="
    grep "^\[probe\]" "$W/logs/trainer_probe.log"; pack
fi
want timm_compile && prog timm_compile 80 --warmup 5 --capture-variant compile --capture-steps 8-12 \
    --variant "eager:" --variant "compile:--compile" --variant "compile_ro:--compile --compile-mode reduce-overhead" \
    -- $P/timm_train.py "${TM[@]}" --steps 18
echo "=== done (t=$((SECONDS - start)) s) ==="
ls -la "$W/traces"
pack
ls -la "$RESULT"
