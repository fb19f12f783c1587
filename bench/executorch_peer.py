#!/usr/bin/env python3
"""Time ExecuTorch's own runtime on a .pte, the peer of `kiln bench`.

Run with the peers venv: ~/peers/bin/python bench/executorch_peer.py MODEL.pte [--input x.npy ...]

Loads the program once through `executorch.runtime` (the pybindings, `_C` linked against
`libexecutorch_kernels_optimized.so`: ExecuTorch's optimized CPU kernels where they exist,
portable kernels for every other operator), runs `--warmup` untimed executes, then `--iters`
timed ones, and prints median/min/p90 in milliseconds (the same statistics as `kiln bench`).
XNNPACK-delegated programs run through the XnnpackBackend the pybindings register; `--threads`
resizes the threadpool that backend (and the optimized kernels) use.
Only `method.execute(...)` is timed; the inputs are converted to tensors once, beforehand.

The JSON also holds what the program costs before its first output: `load_ms` (`load_program` +
`load_method`), `first_ms` (the first execute, before the warmup ones) and `rss_growth_mb`, the
peak resident memory of the process past what it held after its imports and inputs (VmHWM -
VmRSS then; torch alone holds hundreds of MB, which a process running only ExecuTorch would not).
"""

import argparse
import json
import statistics
import sys
import time
import warnings

import numpy as np


def percentile(sorted_ms, q):
    """Nearest-rank percentile, the same rule `kiln bench` uses."""
    if not sorted_ms:
        return float("nan")
    rank = max(1, int(np.ceil(q / 100.0 * len(sorted_ms))))
    return sorted_ms[rank - 1]


def status_kb(field):
    """A field of /proc/self/status in kB (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--input", action="append", default=[], help="input .npy, in order")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--threads",
        type=int,
        help="ExecuTorch threadpool size (default: ExecuTorch's own, one thread per core)",
    )
    args = ap.parse_args()

    warnings.simplefilter("ignore")
    import torch
    from executorch.runtime import Runtime, Verification

    from executorch.extension.pybindings import portable_lib

    torch.set_num_threads(1)
    if args.threads is not None:
        portable_lib._unsafe_reset_threadpool(args.threads)
    runtime = Runtime.get()
    inputs = [torch.from_numpy(np.load(p)) for p in args.input]
    baseline_kb = status_kb("VmRSS")
    start = time.perf_counter_ns()
    program = runtime.load_program(args.model, verification=Verification.Minimal)
    method = program.load_method(args.method)
    load_ms = (time.perf_counter_ns() - start) / 1e6
    if not inputs:
        meta = method.metadata
        for i in range(meta.num_inputs()):
            t = meta.input_tensor_meta(i)
            inputs.append(torch.zeros(tuple(t.sizes()), dtype=torch.float32))

    start = time.perf_counter_ns()
    method.execute(inputs)
    first_ms = (time.perf_counter_ns() - start) / 1e6
    for _ in range(args.warmup):
        method.execute(inputs)
    times = []
    for _ in range(args.iters):
        start = time.perf_counter_ns()
        method.execute(inputs)
        times.append((time.perf_counter_ns() - start) / 1e6)
    ordered = sorted(times)
    result = {
        "runtime": "executorch",
        "model": args.model,
        "method": args.method,
        "warmup": args.warmup,
        "iters": args.iters,
        "threads": portable_lib._threadpool_get_thread_count(),
        "median_ms": statistics.median(ordered),
        "min_ms": ordered[0],
        "p90_ms": percentile(ordered, 90),
        "load_ms": load_ms,
        "first_ms": first_ms,
        "rss_growth_mb": (status_kb("VmHWM") - baseline_kb) / 1024,
    }
    if args.json:
        json.dump(result, sys.stdout)
        print()
    else:
        print(
            f"{args.model} {args.method}: median {result['median_ms']:.3f} ms, "
            f"min {result['min_ms']:.3f} ms, p90 {result['p90_ms']:.3f} ms "
            f"({args.iters} iters, {args.warmup} warmup)"
        )


if __name__ == "__main__":
    main()
