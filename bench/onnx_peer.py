#!/usr/bin/env python3
"""Time ONNX Runtime or OpenVINO on an ONNX model, the peers of `kiln bench`.

Run with the peers venv:
  ~/peers/bin/python bench/onnx_peer.py {ort,ov} MODEL.onnx --input x.npy [--threads N]

Loads the model once in a fresh session (ONNX Runtime: every graph optimization,
`intra_op_num_threads`, one inter-op thread, sequential execution; OpenVINO: the CPU plugin
with `INFERENCE_PRECISION_HINT=f32` (no bf16 or f16 arithmetic, as kiln and XNNPACK's f32
path), `PERFORMANCE_HINT=LATENCY`, `INFERENCE_NUM_THREADS`), runs `--warmup` untimed then
`--iters` timed inferences on the inputs, and prints median/min/p90 in milliseconds, the
statistics `kiln bench` and bench/executorch_peer.py print. Without --threads each runtime
picks its own count. --out FILE.npy saves the first output (to check it against another
runtime's).
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np


def percentile(sorted_ms, q):
    """Nearest-rank percentile, the same rule `kiln bench` uses."""
    rank = max(1, int(np.ceil(q / 100.0 * len(sorted_ms))))
    return sorted_ms[rank - 1]


def ort_runner(model, inputs, threads):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.inter_op_num_threads = 1
    if threads is not None:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return lambda: sess.run(None, feed)[0]


def ov_runner(model, inputs, threads):
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = threads
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()

    def run():
        request.infer(inputs)
        return request.get_output_tensor(0).data

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runtime", choices=["ort", "ov"])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], help="input .npy, in order")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", help="save the first output here (.npy)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.iters < 1 or args.warmup < 0 or (args.threads is not None and args.threads < 1):
        ap.error("--iters and --threads must be positive, --warmup not negative")
    inputs = [np.load(p) for p in args.input]
    make = ort_runner if args.runtime == "ort" else ov_runner
    run = make(args.model, inputs, args.threads)
    for _ in range(args.warmup):
        run()
    times = []
    for _ in range(args.iters):
        start = time.perf_counter_ns()
        out = run()
        times.append((time.perf_counter_ns() - start) / 1e6)
    if args.out:
        np.save(args.out, np.array(out))
    ordered = sorted(times)
    result = {
        "runtime": {"ort": "onnxruntime", "ov": "openvino"}[args.runtime],
        "model": args.model,
        "iters": args.iters,
        "warmup": args.warmup,
        "threads": args.threads,
        "median_ms": statistics.median(times),
        "min_ms": ordered[0],
        "p90_ms": percentile(ordered, 90),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['runtime']} {args.model}: median {result['median_ms']:.3f} ms, "
            f"min {result['min_ms']:.3f} ms, p90 {result['p90_ms']:.3f} ms "
            f"({args.iters} iters, {args.warmup} warmup)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
