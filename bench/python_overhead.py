#!/usr/bin/env python3
"""What running a program through Python costs over `kiln bench` (issue 16's measure).

Usage (with the Python of a virtual environment the package is installed in, whose `kiln`
command is therefore the same build):

    VENV/bin/python bench/python_overhead.py [--rounds K] [--iters N] [--warmup W]
        [MODEL.pte [INPUT.npy]]

Defaults: bench/.models/mobilenet_v2/xnnpack.pte and its in0.npy (bench/export_models.py),
K=7, N=50, W=5. Each round times both contenders once, in alternating order: `kiln bench
--json` (the median of N timed executes after W untimed ones, in its own process) and, in this
process, a freshly loaded `kiln.load(MODEL)` whose `run([x])` is called W times untimed and N
times timed (the median, `time.perf_counter` around each call: input conversion, the run,
and the outputs' conversion to NumPy arrays). Prints each round, the median of the per-round
medians and the ratio Python / bench, and the load average at the start and the end: record
results only from an otherwise idle machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import kiln

ROOT = Path(__file__).resolve().parents[1]


def bench_median(command: str, model: Path, x: Path, iters: int, warmup: int) -> float:
    out = subprocess.run(
        [command, "bench", str(model), "--input", str(x), "--iters", str(iters),
         "--warmup", str(warmup), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["median_ms"]


def python_median(model: Path, x: np.ndarray, iters: int, warmup: int) -> float:
    program = kiln.load(model)
    for _ in range(warmup):
        program.run([x])
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        program.run([x])
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=Path,
                        default=ROOT / "bench/.models/mobilenet_v2/xnnpack.pte")
    parser.add_argument("input", nargs="?", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    x_path = args.input or args.model.parent / "in0.npy"
    command = str(Path(sys.executable).parent / "kiln")
    x = np.load(x_path)
    print(f"load average at start: {os.getloadavg()}; kiln {kiln.__version__}; {args.model}")
    benches, pythons = [], []
    for r in range(args.rounds):
        order = ["bench", "python"] if r % 2 == 0 else ["python", "bench"]
        for who in order:
            if who == "bench":
                benches.append(bench_median(command, args.model, x_path, args.iters, args.warmup))
            else:
                pythons.append(python_median(args.model, x, args.iters, args.warmup))
        print(f"round {r + 1}: kiln bench {benches[-1]:.3f} ms, Python {pythons[-1]:.3f} ms, "
              f"ratio {pythons[-1] / benches[-1]:.3f}")
    b, p = statistics.median(benches), statistics.median(pythons)
    ratios = [py / be for py, be in zip(pythons, benches)]
    print(f"median of medians: kiln bench {b:.3f} ms, Python {p:.3f} ms, ratio {p / b:.3f} "
          f"(median per-round ratio {statistics.median(ratios):.3f})")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
