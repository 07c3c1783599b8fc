#!/usr/bin/env bash
# Issue 32, second H200 run: the graph-captured training step again, now with its
# all_reduce in a 1-rank NCCL group captured into the graph (the first run's NCCL init
# wanted a device index). Everything comes back in "$RESULT".
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/../.."
RESULT="${RESULT:-$PWD/inputs_h200_comm.tar.xz}"
W=/tmp/inputs_h200_comm; rm -rf "$W"; mkdir -p "$W/out"
exec > >(tee -a "$W/out/run.log") 2>&1
python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())" || true
timeout -k 10 60 python3 workloads/inputs/graph_train.py --out "$W/out/graph_train_comm"; echo "rc=$?"
ls -l "$W/out/graph_train_comm"
tar -C "$W" -cJf "$RESULT" out
