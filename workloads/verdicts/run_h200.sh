#!/usr/bin/env bash
# The H200 request of helper "verdicts": every trace of workloads/verdicts/ in one run.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl
export PYTHONPATH=$PWD:/tmp/site
work=$(mktemp -d)
mkdir -p "$work/traces"
log="$work/run.log"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  t0=$(date +%s)
  timeout 240 python3 workloads/verdicts/cases.py --out "$work/traces"; echo "cases rc=$?"
  t1=$(date +%s)
  timeout 150 python3 workloads/verdicts/frameworks.py --out "$work/traces"; echo "frameworks rc=$?"
  t2=$(date +%s)
  echo "cases $((t1 - t0)) s, frameworks $((t2 - t1)) s"
  ls -la "$work/traces"
} > "$log" 2>&1
cat "$log" | grep -v "USDT\|UserWarning\|warnings.warn" | tail -40
tar -C "$work" -cJf "$RESULT" traces run.log
ls -la "$RESULT"
