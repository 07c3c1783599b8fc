#!/usr/bin/env bash
# Both large traces of bench/bench_scale.py on the lent GPU, each gzipped and split into
# parts of at most 15 MiB (what a device run may bring back): rejoin with
#   cat large_train.pt.trace.json.gz.part* > large_train.pt.trace.json.gz
# Usage (repository root): OUT=/some/dir bash workloads/capture_large.sh
set -x
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/large}
mkdir -p /tmp/large "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
timeout 200 python workloads/capture_large.py --what train --out /tmp/large --steps "${STEPS:-40}"
timeout 150 python workloads/capture_large.py --what generate --out /tmp/large --new-tokens "${TOKENS:-256}"
ls -la /tmp/large
cd /tmp/large && for f in *.json.gz; do split -b 15M -d "$f" "$OUT/$f.part"; done
ls -la "$OUT"
