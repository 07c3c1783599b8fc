#!/usr/bin/env bash
# Issue 32, a collective replayed from a CUDA graph: the graph-captured training step of
# graph_train.py on 2 H200s (device kind nvidia-h200-x2), its head's gradients
# all-reduced by NCCL inside the graph. One GPU cannot show this (a 1-rank all_reduce
# launches no kernel: tests/data/inputs/README.md). Run from the repository root:
#
#   bash workloads/inputs/run_h200x2_graph_comm.sh       # writes "$OUT/graph_comm/rank{0,1}/"
#
# Each rank's folder: graph_train_replay.pt.trace.json.gz with capture_traces/ beside it,
# graph_train_eager.pt.trace.json.gz, graph_train_api.json; run.log in graph_comm/.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/../.."
DEST="${OUT:-$PWD/out}/graph_comm"
mkdir -p "$DEST"
exec > >(tee -a "$DEST/run.log") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version(), torch.cuda.device_count())" || true
t0=$SECONDS
timeout -k 5 55 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
    workloads/inputs/graph_train.py --out "$DEST"
echo "rc=$? in $((SECONDS - t0)) s"
ls -lR "$DEST"
