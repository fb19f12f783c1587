#!/usr/bin/env python3
"""Per-layer times of ExecuTorch's own runtime on a .pte, the peer of `kiln bench --profile`.

Run with the peers venv:
    ~/peers/bin/python bench/executorch_layers.py MODEL.pte INPUT.npy [--iters N] [--threads N]

Loads the program through the pybindings with ETDump enabled, runs `--iters` executes, and
prints the median time of every profiled event in execution order: for an XNNPACK-delegated
program, one row per XNNPACK operator (e.g. `Convolution (NHWC, F32) DWConv #3`), which
is how kiln's per-step profile of the portable export is compared layer by layer.
"""

import argparse
import os
import statistics
import sys
import tempfile
import warnings


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("input", help="the method's one input, .npy")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, help="XNNPACK's thread pool size (default: ExecuTorch's)")
    args = ap.parse_args()

    warnings.simplefilter("ignore")
    import numpy as np
    import torch
    from executorch.devtools import Inspector
    from executorch.extension.pybindings import portable_lib

    if args.threads is not None:
        portable_lib._unsafe_reset_threadpool(args.threads)
    module = portable_lib._load_for_executorch(args.model, enable_etdump=True, debug_buffer_size=0)
    x = torch.from_numpy(np.load(args.input))
    for _ in range(args.iters):
        module.forward([x])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.etdp")
        module.write_etdump_result_to_file(path)
        inspector = Inspector(etdump_path=path)
    print(f"{'event':60} {'runs':>5} {'median us':>10}")
    for block in inspector.event_blocks:
        for event in block.events:
            if event.perf_data is None or len(event.perf_data.raw) < args.iters:
                continue  # one-off events (loading)
            median_ms = statistics.median(event.perf_data.raw)
            print(f"{event.name:60} {len(event.perf_data.raw):5} {median_ms * 1000:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
