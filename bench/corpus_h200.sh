#!/usr/bin/env bash
# Issue 30's bench corpus made and measured on the H200 box, where no transfer limit
# applies (a device run brings back ~15 MB; the corpus is ~830 MB of JSON). Two calls on
# one warm machine, from the repository root, with the wheels of msgspec, isal, dask, HTA
# and plotly carried in .whl:
#
#   CORPUS=.gpu/corpus bash bench/corpus_h200.sh make    # the five traces (~5 min)
#   CORPUS=.gpu/corpus RUNS=3 bash bench/corpus_h200.sh bench   # bench_scale on them
#
# `make` writes large_{train,generate,compile,streams} (workloads/capture_large.py) and
# capture_generate (`tracelens capture` of a Llama generate, its defaults: stacks) into
# $CORPUS, skipping those already there; `bench` runs bench/bench_scale.py --corpus on
# them (HTA's load and the floor beside each row, the load average printed) into
# $OUT/bench_scale.txt. Machine-relative goals (x HTA, x floor, memory / JSON) carry over
# to the development machine; absolute seconds do not (16 cores here vs 2).
set -uo pipefail
WHAT="${1:?usage: bash bench/corpus_h200.sh make|bench}"
CORPUS="${CORPUS:-.gpu/corpus}"
OUT="${OUT:-./gpu_out}"
RUNS="${RUNS:-3}"
mkdir -p "$CORPUS" "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [[ -d .whl ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
case "$WHAT" in
  make)
    want() { [[ ! -s "$CORPUS/$1.pt.trace.json.gz" ]]; }
    want large_train && timeout 200 python3 workloads/capture_large.py --what train --out "$CORPUS" --steps 40
    want large_generate && timeout 200 python3 workloads/capture_large.py --what generate --out "$CORPUS" --new-tokens 256
    want large_compile && timeout 200 python3 workloads/capture_large.py --what compile --out "$CORPUS" --steps 30
    want large_streams && timeout 150 python3 workloads/capture_large.py --what streams --out "$CORPUS" --steps 20
    want capture_generate && timeout 200 python3 -m tracelens capture --no-report \
      -o "$CORPUS/capture_generate.pt.trace.json.gz" workloads/capture_llama_generate.py --calls 2 --new-tokens 64
    ls -la "$CORPUS" | tee "$OUT/corpus_ls.txt"
    ;;
  bench)
    nice -n 0 python3 bench/bench_scale.py --factors 1 --hta 1 --corpus "$CORPUS" --runs "$RUNS" 2>&1 | tee "$OUT/bench_scale.txt"
    ;;
esac
