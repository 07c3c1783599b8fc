"""A stand-in for Nsight Compute's CLI, for testing `capture --counters` without a GPU.

`--version` and `--query-metrics` print what ncu prints (shortened); a profiling call runs
the application after the options, then writes a `--csv --page raw` report of two kernels
with every metric asked for into `--log-file`, as ncu does after the application exits.
FAKE_NCU_MODE=perm prints Nsight Compute's permission error instead; FAKE_NCU_MODE=badmetric
refuses the first call's metrics. Run as `python fake_ncu.py ...` through a wrapper script.
"""

from __future__ import annotations

import os
import subprocess
import sys

TAKES_VALUE = {
    "--profile-from-start",
    "--target-processes",
    "--clock-control",
    "--metrics",
    "--page",
    "--launch-count",
    "--log-file",
    "--cache-control",
    "--replay-mode",
}
QUERY = """Device NVIDIA H200 (GH100)
------------------------------------------------------------ ------------------------------------------
Metric Name                                                  Metric Description
------------------------------------------------------------ ------------------------------------------
dram__bytes_read                                             # of bytes read from DRAM
dram__bytes_write                                            # of bytes written to DRAM
gpu__time_duration                                           total duration in nanoseconds
sm__inst_executed_pipe_tensor                                # of warp instructions executed by tensor pipe
sm__ops_path_tensor_src_bf16_dst_fp32                        # of math ops executed in tensor path
sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on            # of math ops executed in tensor path
smsp__inst_executed                                          # of warp instructions executed
"""


def main() -> int:
    args = sys.argv[1:]
    mode = os.environ.get("FAKE_NCU_MODE", "")
    if args == ["--version"]:
        print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 0) (public-release)")
        return 0
    if args == ["--query-metrics"]:
        sass = "".join(
            f"smsp__sass_thread_inst_executed_op_{p}{o}_pred_on   # of thread instructions\n"
            for p in "dfh"
            for o in ("add", "mul", "fma")
        )
        print(QUERY + sass)
        return 0
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("--"):
        if args[i] in TAKES_VALUE:
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            opts[args[i]] = ""
            i += 1
    app = args[i:]
    log = opts.get("--log-file")
    metrics = opts.get("--metrics", "").split(",")
    if mode == "perm":
        text = (
            "==PROF== Connected to process\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission "
            "to access NVIDIA GPU Performance Counters on the target device 0.\n"
        )
        rc = subprocess.call(app)
        if log:
            with open(log, "w") as f:
                f.write(text)
        return rc
    if mode == "badmetric" and "sm__inst_executed_pipe_tensor.sum" in metrics:
        if log:
            with open(log, "w") as f:
                f.write("==ERROR== Failed to find metric sm__inst_executed_pipe_tensor.sum\n")
        return 1
    rc = subprocess.call(app)
    header = [
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
        *metrics,
    ]
    units = [
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
        *("Kbyte" if m.startswith("dram") else "nsecond" if "duration" in m else "" for m in metrics),
    ]
    rows = []
    for k, (name, grid) in enumerate(
        (
            ("void at::native::vectorized_elementwise_kernel<4, Fn>(int, Fn)", "(2048, 1, 1)"),
            ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT", "(132, 1, 1)"),
        )
    ):
        vals = [f"{(k + 1) * 1000 + j:,}" for j in range(len(metrics))]
        rows.append([str(k), "1", "python3", "host", name, "1", "7", "(128, 1, 1)", grid, "0", "9.0", *vals])
    lines = ["==PROF== Disconnected from process"]
    lines += [",".join(f'"{c}"' for c in r) for r in (header, units, *rows)]
    if log:
        with open(log, "w") as f:
            f.write("\n".join(lines) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
