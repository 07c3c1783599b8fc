#!/usr/bin/env bash
# Issue 31 on the H200, in one device call: `tracelens capture` of every program in
# workloads/programs/ as its users run it (--no-report: the reports are made afterwards
# from the traces), the frameworks' own profiler integrations (Lightning's
# PyTorchProfiler, the Trainer's documented profiler callback, accelerate's ProfileKwargs),
# and the unprofiled step times of each program's configuration variants
# (time_steps.py: CUDA events at the step ends, warm-up skipped).
#
#   RESULT=/tmp/programs.tar.xz bash workloads/programs/gpu_run.sh      (repository root)
#
# Env: RESULT (the .tar.xz to write), WHEELS (wheels to install first), PY (python3),
# QUICK=1 (CPU smoke test: tiny sizes, few steps), BUDGET_S (230), ONLY="lightning timm ..." (a subset).
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY="${PY:-python3}"
ROOT="$PWD"
W="$(mktemp -d /tmp/programs-XXXX)"
mkdir -p "$W/traces" "$W/times" "$W/logs" "$W/fw" "$W/reports"
exec > >(tee -a "$W/logs/run.log") 2>&1
if [[ -n "${WHEELS:-}" ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl || echo "wheel install failed"
    export PYTHONPATH="$ROOT:/tmp/site"
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
QUICK="${QUICK:-0}"
ONLY="${ONLY:-lightning timm detection st pyg accelerate trainer}"
start=$SECONDS
"$PY" - <<'PY' 2>&1 | tee "$W/logs/versions.txt"
import importlib, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for m in ["lightning", "timm", "torchvision", "transformers", "accelerate", "sentence_transformers", "torch_geometric"]:
    try:
        print(m, importlib.import_module(m).__version__)
    except Exception as e:
        print(m, "MISSING", type(e).__name__, e)
PY
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>/dev/null | tee -a "$W/logs/versions.txt"
nproc | sed 's/^/cores /' | tee -a "$W/logs/versions.txt"

want() { [[ " $ONLY " == *" $1 "* ]]; }
BUDGET_S="${BUDGET_S:-230}"  # no step starts after this (the archive is still made)
step() {  # step NAME LIMIT_S COMMAND...: one logged, timed step
    local name="$1" limit="$2"; shift 2
    if (( SECONDS - start > BUDGET_S )); then echo "=== $name: skipped (past ${BUDGET_S} s) ==="; return; fi
    echo "=== $name (t=$((SECONDS - start)) s) ==="
    local t0=$SECONDS rc=0
    timeout -k 10 "$limit" "$@" > "$W/logs/$name.log" 2>&1 || rc=$?
    tail -n 15 "$W/logs/$name.log"
    echo "=== $name: rc=$rc, $((SECONDS - t0)) s ==="
}
cap() {  # cap NAME LIMIT_S [capture options] -- SCRIPT ARGS
    local name="$1" limit="$2"; shift 2
    step "capture_$name" "$limit" "$PY" -m tracelens capture --no-report -o "$W/traces/prog_$name.pt.trace.json.gz" "$@"
}
times() {  # times NAME LIMIT_S [time_steps options] -- SCRIPT ARGS
    local name="$1" limit="$2"; shift 2
    step "times_$name" "$limit" "$PY" workloads/programs/time_steps.py --name "$name" --out "$W/times/$name.json" "$@"
}
P=workloads/programs
if [[ "$QUICK" == 1 ]]; then  # CPU smoke sizes
    LF=(--size 32 --width 8 --batch-size 8); TM=(--model resnet18 --batch-size 2 --img-size 64)
    DT=(--batch-size 1 --size 160 --model fasterrcnn_mobilenet_v3_large_320_fpn); ST=(--chunk 64)
    PG=(--graphs 1200 --hidden 32); AC=(--batch-size 2 --seq-len 64 --layers 2 --hidden 128)
    HT=(--seq_len 64 --layers 2 --hidden 128 --per_device_train_batch_size 2)
else
    LF=(); TM=(); DT=(); ST=(); PG=(); AC=(); HT=()
fi

# --- captures, as users run them (tracelens's default window: steps 5-24) ------------
want lightning && cap lightning 60 $P/lightning_fit.py "${LF[@]}" --max-steps 30
want timm && cap timm 60 $P/timm_train.py "${TM[@]}" --steps 30
# Detection: ~25k events a step with Python stacks; 8 steps keep the trace small.
want detection && cap detection 60 --steps 5-12 $P/detection_train.py "${DT[@]}" --steps 16
want st && cap st 60 $P/st_encode.py "${ST[@]}" --chunks 4
want pyg && cap pyg 60 $P/pyg_train.py "${PG[@]}"
if want accelerate; then
    if command -v accelerate > /dev/null; then LAUNCH=(accelerate launch); else LAUNCH=("$PY" -m accelerate.commands.launch); fi
    step capture_accelerate 60 "${LAUNCH[@]}" --num_processes 1 --num_machines 1 \
        --mixed_precision no --dynamo_backend no -m tracelens capture --no-report \
        -o "$W/traces/prog_accelerate.pt.trace.json.gz" $P/accelerate_train.py "${AC[@]}" --steps 30
fi
want trainer && cap trainer 60 $P/hf_trainer.py "${HT[@]}" --max_steps 30

# --- unprofiled step times of the configuration variants ------------------------------
if want lightning; then
    times lightning 90 --variant "baseline:" --variant "workers8:--workers 8" --variant "workers8_pin:--workers 8 --pin-memory" \
        --variant "bf16:--precision bf16-mixed" --variant "workers8_pin_bf16:--workers 8 --pin-memory --precision bf16-mixed" \
        -- $P/lightning_fit.py "${LF[@]}" --max-steps 40
fi
if want timm; then
    times timm 90 --variant "baseline:" --variant "channels_last:--channels-last" --variant "bf16:--amp-dtype bfloat16" \
        --variant "channels_last_bf16:--channels-last --amp-dtype bfloat16" --variant "batch128:--batch-size 128" \
        -- $P/timm_train.py "${TM[@]}" --steps 40
fi
if want detection; then
    times detection 90 --warmup 5 --variant "baseline:" --variant "workers4:--workers 4" --variant "amp:--amp" \
        --variant "workers4_amp:--workers 4 --amp" --variant "batch8_workers4:--batch-size 8 --workers 4" \
        -- $P/detection_train.py "${DT[@]}" --steps 25
fi
if want st; then
    times st 90 --mark module:BertModel --variant "baseline:" --variant "batch128:--batch-size 128" --variant "fp16:--fp16" \
        --variant "to_tensor:--to-tensor" --variant "batch128_fp16:--batch-size 128 --fp16" \
        -- $P/st_encode.py "${ST[@]}" --chunks 6
fi
if want pyg; then
    times pyg 90 --variant "baseline:" --variant "workers4:--workers 4" --variant "batch256:--batch-size 256" \
        --variant "workers4_batch256:--workers 4 --batch-size 256" -- $P/pyg_train.py "${PG[@]}" --graphs 6000
fi
if want accelerate; then
    times accelerate 90 --variant "baseline:@ACCELERATE_MIXED_PRECISION=no" --variant "bf16:@ACCELERATE_MIXED_PRECISION=bf16" \
        --variant "batch16_bf16:@ACCELERATE_MIXED_PRECISION=bf16 --batch-size 16" -- $P/accelerate_train.py "${AC[@]}" --steps 40
fi
if want trainer; then
    times trainer 90 --variant "baseline:" --variant "tf32:--tf32 True" --variant "bf16:--bf16 True" \
        --variant "bf16_batch16:--bf16 True --per_device_train_batch_size 16" \
        --variant "workers4:--dataloader_num_workers 4" -- $P/hf_trainer.py "${HT[@]}" --max_steps 40
fi
# --- the frameworks' own profiler integrations (no tracelens in the run) ------------
want lightning && step fw_lightning 45 "$PY" $P/lightning_fit.py "${LF[@]}" --max-steps 10 --profile-dir "$W/fw/lightning"
want trainer && step fw_trainer 45 "$PY" $P/hf_trainer.py "${HT[@]}" --max_steps 10 --torch_profile "$W/fw/trainer"
want accelerate && step fw_accelerate 45 "$PY" $P/accelerate_train.py "${AC[@]}" --steps 10 --profile "$W/fw/accelerate"

echo "=== all steps done (t=$((SECONDS - start)) s) ==="

# --- pack: everything small; traces by size while the archive stays under ~12.5 MB ----
find "$W/fw" -type f | head -50
ls -la "$W/traces"
budget=$((12500 * 1024)); used=0
for f in $(ls -S -r "$W/traces"/*.gz 2>/dev/null); do
    sz=$(stat -c %s "$f")
    if (( used + sz > budget )); then
        # Too large to bring back: its report comes back instead.
        echo "left out (archive budget): $f ($sz bytes); reporting on it here"
        b=$(basename "$f" .pt.trace.json.gz)
        timeout 120 "$PY" -m tracelens report "$f" --json "$W/reports/$b.json" --markdown "$W/reports/$b.md" -q \
            > "$W/logs/report_$b.log" 2>&1 || echo "report failed: $b"
        rm -f "$f"
    else
        used=$((used + sz))
    fi
done
for f in $(find "$W/fw" -type f); do
    sz=$(stat -c %s "$f")
    if (( used + sz > budget + 1024 * 1024 )); then echo "left out: $f"; rm -f "$f"; else used=$((used + sz)); fi
done
tar -C "$W" -cJf "${RESULT:-$ROOT/programs.tar.xz}" traces times logs fw reports
ls -la "${RESULT:-$ROOT/programs.tar.xz}"
