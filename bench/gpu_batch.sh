#!/usr/bin/env bash
# Issues 29, 33, 31 on the H200 box, in two device calls of at most 9 minutes each.
# Run from the tree's root (the lead's .gpu/robust/tree):
#
#   OUT=/some/dir bash bench/gpu_batch.sh 1     # issue 29: capture scenarios + fuzz
#   OUT=/some/dir bash bench/gpu_batch.sh 2     # issue 33: torchrun x50; then issue 31's rows
#
# Part 1 (parallel over the cores, a loaded machine on purpose): the 22 capture scenarios
# of bench/capture_scenarios.py, round after round until its start budget is spent (up
# to 50 runs each), and tests/fuzz.py with >= 3,000 cases (the structural families are in
# every run: FAMILY_SHARE of the cases). Part 2: bench/torchrun_runs.py, 50 runs of
# `torchrun --nproc-per-node 2 -m tracelens capture workloads/ranks/ddp_cpu.py --device
# cuda` (both gloo ranks on the one GPU, a stale rank 1 trace planted in each run's
# folder, each run bounded), then workloads/programs/gpu_run.sh for issue 31's missing
# rows (accelerate bf16, the Trainer probe, timm torch.compile reduce-overhead) with the
# time left. Each part writes $OUT/partN/summary.md (machine, load, versions, counts) and
# the failing cases beside it; every result file is appended as it goes, so a part cut
# short keeps what it finished.
#
# Env: OUT (default ./gpu_out), PY (python3), SCALE (1; CPU smoke test: SCALE=small),
# PART_S (530: the part's own hard limit in seconds).
set -uo pipefail
PART="${1:?usage: bash bench/gpu_batch.sh 1|2}"
PY="${PY:-python3}"
ROOT="$PWD"
OUT="${OUT:-$ROOT/gpu_out}"
D="$OUT/part$PART"
mkdir -p "$D"
PART_S="${PART_S:-530}"
SCALE="${SCALE:-1}"
start=$SECONDS
left() { echo $((PART_S - (SECONDS - start))); }
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# The wheels (msgspec, dask, ...): the lead puts them in .whl at its repository's root;
# the tree is .gpu/robust/tree inside it.
WHL=""
for w in ../../.whl ../../../.whl "$ROOT/.whl"; do
    if compgen -G "$w/*.whl" > /dev/null; then WHL="$w"; break; fi
done
if [[ -n "$WHL" ]]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHL"/*.whl \
        > "$D/pip.log" 2>&1 || echo "pip install failed (rc $?): see pip.log" | tee -a "$D/pip.log"
else
    echo "no .whl folder found (../../.whl, ../../../.whl, ./.whl)" | tee "$D/pip.log"
fi
export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

versions() {
    {
        echo "date: $(date -u '+%F %T UTC'), part $PART, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
        "$PY" - <<'PY' 2>&1
import importlib.metadata as md, platform
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", gpu)
except Exception as e:
    print("torch import failed:", e)
for m in ["msgspec", "dask", "hta", "HolisticTraceAnalysis", "transformers", "accelerate", "timm", "lightning"]:
    try:
        print(" ", m, md.version(m))
    except Exception:
        pass
PY
        nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null
    } > "$D/versions.txt"
}
versions
cat "$D/versions.txt"

if [[ "$PART" == 1 ]]; then
    if [[ "$SCALE" == small ]]; then RUNS=1; JOBS=2; FCASES=12; FJOBS=1; BUDGET=60; ONLY="--only raise,exit_code,sigterm_12s"
    else RUNS=50; JOBS=24; FCASES=3000; FJOBS=6; BUDGET=$(( $(left) - 150 )); ONLY=""; fi
    # The fuzz seeds: the repository's small sample traces (the public ones of the dev
    # machine's shared folder are not in the tree); the same list reproduces a case
    # anywhere: python tests/fuzz.py --seed 29 --seed-files <these> (case N is always the
    # same bytes).
    SEEDS=(sample_traces/elementwise_fp32.pt.trace.json.gz sample_traces/gemm_bf16.pt.trace.json.gz
           sample_traces/gemm_misaligned.pt.trace.json.gz sample_traces/roofline_cases.pt.trace.json.gz
           sample_traces/matmul_sweep.pt.trace.json.gz sample_traces/host_sync_static.pt.trace.json.gz)
    timeout -k 5 $(( $(left) - 25 )) "$PY" tests/fuzz.py --seed 29 --cases "$FCASES" --seconds $(( $(left) - 60 )) \
        --jobs "$FJOBS" --seed-files "${SEEDS[@]}" > "$D/fuzz.log" 2>&1 &
    fuzz_pid=$!
    # The scenarios on the CPU (issue 29's "done when" is CPU capture), OMP_NUM_THREADS
    # left as torch sets it.
    timeout -k 5 $(( $(left) - 20 )) "$PY" bench/capture_scenarios.py --runs "$RUNS" --jobs "$JOBS" --nice 0 \
        --budget-s "$BUDGET" --run-timeout 110 --out "$D/scenarios.jsonl" $ONLY > "$D/scenarios.log" 2>&1
    echo "scenarios: rc=$? at t=$((SECONDS - start)) s"
    wait "$fuzz_pid"; echo "fuzz: rc=$? at t=$((SECONDS - start)) s"
    {
        echo "# part 1: issue 29 on $(sed -n 2p "$D/versions.txt")"
        echo; echo '```'; cat "$D/versions.txt"; echo '```'
        echo; echo "## capture scenarios ($JOBS at a time, start budget $BUDGET s, run timeout 110 s)"; echo
        "$PY" bench/capture_scenarios.py --table "$D/scenarios.jsonl" 2>&1
        echo; echo "## fuzz (seed 29, $FJOBS jobs, seeds: ${SEEDS[*]})"; echo; echo '```'
        grep -E "^fuzz seed|pending|^case " "$D/fuzz.log" | head -n 80; echo '```'
        sed -n '/^| family/,$p' "$D/fuzz.log"
    } > "$D/summary.md"
    # The failing cases: the scenario runs' JSON lines (stderr tails included), the fuzz cases' lines.
    grep '"ok": false' "$D/scenarios.jsonl" > "$D/scenarios_failed.jsonl" 2>/dev/null
    grep -E "^case " "$D/fuzz.log" > "$D/fuzz_failed.txt" 2>/dev/null
    xz -0 -f "$D/scenarios.jsonl"  # ~4 kB a run (the stderr tails): 1,100 runs are ~5 MB raw
elif [[ "$PART" == 2 ]]; then
    if [[ "$SCALE" == small ]]; then RUNS=2; JOBS=2; BUDGET=30; DEV=cpu; TSTEPS=(--steps 8); QUICK=1
    else RUNS=50; JOBS=6; BUDGET=200; DEV=cuda; TSTEPS=(); QUICK=0; fi
    DEV="${DEVICE:-$DEV}"
    timeout -k 5 $(( $(left) - 20 )) "$PY" bench/torchrun_runs.py --runs "$RUNS" --jobs "$JOBS" --device "$DEV" \
        "${TSTEPS[@]}" --nice 0 --budget-s "$BUDGET" --run-timeout 150 --out "$D/torchrun.jsonl" --keep "$D/kept" \
        > "$D/torchrun.log" 2>&1
    echo "torchrun runs: rc=$? at t=$((SECONDS - start)) s"
    # Issue 31's rows with the time left (each program's timeout x3: accelerate's bf16
    # variant and timm's reduce-overhead were cut by the x1 caps before).
    PB=$(( $(left) - 25 ))
    [[ "$SCALE" == small ]] && (( PB > 150 )) && PB=150
    if (( PB > 40 )); then
        ONLY="accelerate trainer_probe timm_compile" LIMIT_SCALE=3 PACK_MAX=4000000 BUDGET_S=$PB QUICK=$QUICK PY="$PY" \
            RESULT="$D/programs.tar.xz" timeout -k 5 $((PB + 10)) bash workloads/programs/gpu_run.sh \
            > "$D/programs.log" 2>&1
        echo "programs: rc=$? at t=$((SECONDS - start)) s"
    else
        echo "programs: skipped, $PB s left" | tee "$D/programs.log"
    fi
    {
        echo "# part 2: issues 33 and 31 on $(sed -n 2p "$D/versions.txt")"
        echo; echo '```'; cat "$D/versions.txt"; echo '```'
        echo; echo "## torchrun: 2 gloo ranks on $DEV, $JOBS runs at a time, start budget $BUDGET s, run timeout 150 s"
        echo; "$PY" bench/torchrun_runs.py --table "$D/torchrun.jsonl" 2>&1
        echo; echo "## issue 31 programs (workloads/programs/gpu_run.sh, results in programs.tar.xz)"; echo; echo '```'
        grep -E "^===|^\[time_steps\]|^\[probe\]|rror" "$D/programs.log" | head -n 60; echo '```'
    } > "$D/summary.md"
    grep '"ok": false' "$D/torchrun.jsonl" > "$D/torchrun_failed.jsonl" 2>/dev/null
else
    echo "PART must be 1 or 2" >&2; exit 2
fi
echo "part $PART done at t=$((SECONDS - start)) s"
du -sh "$D"
cat "$D/summary.md"
