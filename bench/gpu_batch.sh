#!/usr/bin/env bash
# Issues 29, 33 (and 31) on the H200 box. Run from the tree's root (the lead's
# .gpu/robust/tree):
#
#   OUT=/some/dir bash bench/gpu_batch.sh all   # one call (<= 8 min): parts 1 and 2 at once
#   OUT=/some/dir bash bench/gpu_batch.sh 1     # issue 29 alone
#   OUT=/some/dir bash bench/gpu_batch.sh 2     # issue 33 alone, then issue 31's rows
#
# Part 1 (a loaded machine on purpose): the 22 capture scenarios of
# bench/capture_scenarios.py, round after round until its start budget is spent (up to 50
# runs each, counted per scenario), and tests/fuzz.py with >= 3,000 cases (the structural
# families are in every run: FAMILY_SHARE of the cases). Part 2: bench/torchrun_runs.py,
# 50 runs of `torchrun --nproc-per-node 2 -m tracelens capture workloads/ranks/ddp_cpu.py
# --device cuda` (both gloo ranks on the one GPU, a stale rank 1 trace planted in each
# run's folder, each run bounded); alone (PART=2), then workloads/programs/gpu_run.sh for
# issue 31's missing rows (accelerate bf16, the Trainer probe, timm torch.compile
# reduce-overhead) with the time left. "all" runs the scenarios, the fuzz run and the
# torchrun runs at once under one deadline, without the programs. Each part writes
# $OUT/partN/summary.md (machine, load, versions, counts) and the failing cases beside
# it; every result file is appended as it goes, so a run cut short keeps what it did.
#
# Env: OUT (default ./gpu_out), PY (python3), SCALE (1; CPU smoke test: SCALE=small),
# PART_S (the whole call's own limit in seconds, pip included: 470 for all, else 530),
# SCEN_JOBS (16), FUZZ_JOBS (6), TORCHRUN_JOBS (5), DEVICE (cuda: ddp_cpu.py's --device),
# SCEN_RUNS and TORCHRUN_RUNS (50 each: the runs of each scenario / torchrun runs in this
# call; two calls of 25 make the 50 when one call's budget cannot), FUZZ (1; 0 skips the
# fuzz run, e.g. once its 3,000 cases are done).
set -uo pipefail
PART="${1:?usage: bash bench/gpu_batch.sh 1|2|all}"
PY="${PY:-python3}"
ROOT="$PWD"
OUT="${OUT:-$ROOT/gpu_out}"
D="$OUT/logs"  # pip's log and the versions (copied into each part's folder)
mkdir -p "$D"
if [[ "$PART" == all ]]; then PART_S="${PART_S:-470}"; else PART_S="${PART_S:-530}"; fi
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

# The fuzz seeds: the repository's small sample traces (the public ones of the dev
# machine's shared folder are not in the tree); the same list reproduces a case anywhere:
# python tests/fuzz.py --seed 29 --seed-files <these> (case N is always the same bytes).
SEEDS=(sample_traces/elementwise_fp32.pt.trace.json.gz sample_traces/gemm_bf16.pt.trace.json.gz
       sample_traces/gemm_misaligned.pt.trace.json.gz sample_traces/roofline_cases.pt.trace.json.gz
       sample_traces/matmul_sweep.pt.trace.json.gz sample_traces/host_sync_static.pt.trace.json.gz)
pids=()
start_part1() {  # issue 29: the capture scenarios (CPU) and the fuzz run, in the background
    D1="$OUT/part1"; mkdir -p "$D1"; cp "$D/versions.txt" "$D1/" 2>/dev/null
    local l; l=$(left)
    if [[ "$SCALE" == small ]]; then RUNS=1; JOBS=2; FCASES=12; FJOBS=1; SBUDGET=40; SONLY=(--only raise,exit_code,sigterm_12s)
    else RUNS="${SCEN_RUNS:-50}"; JOBS="${SCEN_JOBS:-16}"; FCASES=3000; FJOBS="${FUZZ_JOBS:-6}"; SBUDGET=$((l - 130)); SONLY=(); fi
    if [[ "${FUZZ:-1}" == 1 ]]; then
        timeout -k 5 $((l - 15)) "$PY" tests/fuzz.py --seed 29 --cases "$FCASES" --seconds $((l - 70)) \
            --jobs "$FJOBS" --seed-files "${SEEDS[@]}" > "$D1/fuzz.log" 2>&1 &
        pids+=($!)
    else
        echo "fuzz: not run (FUZZ=0)" > "$D1/fuzz.log"
    fi
    # OMP_NUM_THREADS left as torch sets it; the scenarios' script runs on the CPU
    # (issue 29's "done when" is CPU capture).
    timeout -k 5 $((l - 15)) "$PY" bench/capture_scenarios.py --runs "$RUNS" --jobs "$JOBS" --nice 0 \
        --budget-s "$SBUDGET" --run-timeout 100 --out "$D1/scenarios.jsonl" "${SONLY[@]}" > "$D1/scenarios.log" 2>&1 &
    pids+=($!)
}
summary_part1() {
    {
        echo "# part 1: issue 29 on $(sed -n 2p "$D1/versions.txt")"
        echo; echo '```'; cat "$D1/versions.txt"; echo "ran with: $WITH"; echo '```'
        echo; echo "## capture scenarios ($JOBS at a time, start budget $SBUDGET s, run timeout 100 s)"; echo
        "$PY" bench/capture_scenarios.py --table "$D1/scenarios.jsonl" 2>&1
        echo; echo "## fuzz (seed 29, $FJOBS jobs, seeds: ${SEEDS[*]})"; echo; echo '```'
        grep -E "^fuzz seed|pending|^case |^\.\.\. " "$D1/fuzz.log" | tail -n 80; echo '```'
        sed -n '/^| family/,$p' "$D1/fuzz.log"
    } > "$D1/summary.md"
    # The failing cases: the scenario runs' JSON lines (stderr tails included), the fuzz cases' lines.
    grep '"ok": false' "$D1/scenarios.jsonl" > "$D1/scenarios_failed.jsonl" 2>/dev/null
    grep -E "^case " "$D1/fuzz.log" > "$D1/fuzz_failed.txt" 2>/dev/null
    xz -0 -f "$D1/scenarios.jsonl"  # ~4 kB a run (the stderr tails): 1,100 runs are ~5 MB raw
}
start_part2() {  # issue 33: the torchrun runs, in the background
    D2="$OUT/part2"; mkdir -p "$D2"; cp "$D/versions.txt" "$D2/" 2>/dev/null
    local l; l=$(left)
    if [[ "$SCALE" == small ]]; then TRUNS=2; TJOBS=2; TBUDGET=30; DEV=cpu; TSTEPS=(--steps 8)
    else TRUNS="${TORCHRUN_RUNS:-50}"; TJOBS="${TORCHRUN_JOBS:-5}"; TBUDGET=$((l - 140)); DEV=cuda; TSTEPS=(); fi
    DEV="${DEVICE:-$DEV}"
    timeout -k 5 $((l - 15)) "$PY" bench/torchrun_runs.py --runs "$TRUNS" --jobs "$TJOBS" --device "$DEV" \
        "${TSTEPS[@]}" --nice 0 --budget-s "$TBUDGET" --run-timeout "${TORCHRUN_TIMEOUT:-120}" --out "$D2/torchrun.jsonl" --keep "$D2/kept" \
        > "$D2/torchrun.log" 2>&1 &
    pids+=($!)
}
programs() {  # issue 31's rows with the time left (part 2 alone)
    local PB=$(( $(left) - 25 ))
    [[ "$SCALE" == small ]] && (( PB > 150 )) && PB=150
    local QUICK=0; [[ "$SCALE" == small ]] && QUICK=1
    if (( PB > 40 )); then
        # Each program's timeout x3: accelerate's bf16 variant and timm's reduce-overhead
        # were cut by the x1 caps before.
        ONLY="accelerate trainer_probe timm_compile" LIMIT_SCALE=3 PACK_MAX=4000000 BUDGET_S=$PB QUICK=$QUICK PY="$PY" \
            RESULT="$D2/programs.tar.xz" timeout -k 5 $((PB + 10)) bash workloads/programs/gpu_run.sh \
            > "$D2/programs.log" 2>&1
        echo "programs: rc=$? at t=$((SECONDS - start)) s"
    else
        echo "programs: skipped, $PB s left" | tee "$D2/programs.log"
    fi
}
summary_part2() {
    {
        echo "# part 2: issue 33 on $(sed -n 2p "$D2/versions.txt")"
        echo; echo '```'; cat "$D2/versions.txt"; echo "ran with: $WITH"; echo '```'
        echo; echo "## torchrun: 2 gloo ranks on $DEV, $TJOBS runs at a time, start budget $TBUDGET s, run timeout ${TORCHRUN_TIMEOUT:-120} s"
        echo; "$PY" bench/torchrun_runs.py --table "$D2/torchrun.jsonl" 2>&1
        if [[ -f "$D2/programs.log" ]]; then
            echo; echo "## issue 31 programs (workloads/programs/gpu_run.sh, results in programs.tar.xz)"; echo; echo '```'
            grep -E "^===|^\[time_steps\]|^\[probe\]|rror" "$D2/programs.log" | head -n 60; echo '```'
        fi
    } > "$D2/summary.md"
    grep '"ok": false' "$D2/torchrun.jsonl" > "$D2/torchrun_failed.jsonl" 2>/dev/null
}
case "$PART" in
    1) WITH="part 1 alone"; start_part1 ;;
    2) WITH="part 2 alone"; start_part2 ;;
    all) WITH="parts 1 and 2 at once (scenarios, fuzz and torchrun runs share the machine)"; start_part1; start_part2 ;;
    *) echo "PART must be 1, 2 or all" >&2; exit 2 ;;
esac
for p in "${pids[@]}"; do wait "$p"; echo "pid $p: rc=$? at t=$((SECONDS - start)) s"; done
[[ "$PART" == 2 ]] && programs
[[ "$PART" != 2 ]] && summary_part1
[[ "$PART" != 1 ]] && summary_part2
echo "part $PART done at t=$((SECONDS - start)) s"
du -sh "$OUT"/part*
cat "$OUT"/part*/summary.md
