#!/usr/bin/env bash
# The default recording window on real programs, as users run them (no --steps): one
# `tracelens capture PROGRAM` each, bounded, the Markdown report and the capture's own
# lines kept. Checks that the window (warm-up, step marks, the time cap counted from the
# profiler's start) records whole steps of each program.
#
#   OUT=/tmp/dc bash workloads/programs/default_capture.sh        (repository root, a GPU)
#
# Env: OUT (the results folder), PY (python3), EACH_S (each program's bound, 150),
# ONLY (the programs, default "timm_train lightning_fit hf_trainer").
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY="${PY:-python3}"; OUT="${OUT:-$PWD/default_capture}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
for p in ${ONLY:-timm_train lightning_fit hf_trainer}; do
    t0=$SECONDS
    timeout -k 10 "${EACH_S:-150}" "$PY" -m tracelens capture --out-dir "$OUT" \
        "workloads/programs/$p.py" > "$OUT/$p.log" 2>&1
    echo "$p: rc=$? in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
    grep -E "^tracelens: (recorded|trace written|recording)" "$OUT/$p.log" | tee -a "$OUT/summary.txt"
done
