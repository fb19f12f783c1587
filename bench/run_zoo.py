#!/usr/bin/env python3
"""kiln against ExecuTorch on the broad zoo of float models (issue 36's measure).

Run with the peers venv: ~/peers/bin/python bench/run_zoo.py [options] [MODEL ...]

MODELs (default: the zoo below) are bench/export_models.py's names; their XNNPACK exports
(xnnpack.pte, exported into bench/.models/ when missing or out of date) are what both runtimes
run, with the model's seeded input:

  mobilenet_v3_large regnet_y_400mf shufflenet_v2_x1_0 efficientnet_b0 resnet50 (torchvision,
  224x224), vit_b_16 (torchvision), bert (transformers BertModel, 4 layers, 128 tokens),
  wav2letter (1 s of 16 kHz audio), mobilenet_v2 (the model kiln was tuned on).

The int8 zoo (issue 37's measure; --int8 times it): mobilenet_v2_q8,
mobilenet_v3_large_q8, resnet50_q8, shufflenet_v2_x1_0_q8 (PT2E with ExecuTorch's
XNNPACKQuantizer, static, per-channel) and bert_qd8 (the BERT encoder quantized dynamically).

--rounds rounds (default 5) run every contender once per model, in an order that rotates from
round to round, on the machine as it is (run it idle; the load average is printed at the start
and the end):

  kiln     `kiln bench` with kiln's default thread count (KILN_THREADS is not passed on)
  et       ExecuTorch 1.5.1's runtime (bench/executorch_peer.py), its default threadpool
  kiln-1   `kiln bench --threads 1`
  et-1     ExecuTorch with a threadpool of one thread

Every run is a fresh process that loads the program, runs --warmup untimed and --iters timed
executes and reports their median; a contender's figure is the median of its runs over the
rounds, with its worst round beside it. The ratios kiln/et and kiln-1/et-1 (below 1: kiln is
faster) are followed by their geometric means over the models timed.

Before timing, kiln's outputs for each model must match ExecuTorch's (recorded at export) within
1e-4 of the largest output magnitude (static int8 models, `*_q8`: bit for bit; dynamic int8,
`*_qd8`: or as close as ExecuTorch's portable and XNNPACK programs are to each other); a model
that does not is reported and left out. --json
prints one JSON document with every run on stdout (the table then goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Dict, List

from run_busy import ROOT, Contenders, load, say, summarize, timeable, timing_options

ZOO = [
    "mobilenet_v3_large",
    "efficientnet_b0",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
    "vit_b_16",
    "bert",
    "wav2letter",
    "resnet50",
    "mobilenet_v2",
]
INT8_ZOO = [
    "mobilenet_v2_q8",
    "mobilenet_v3_large_q8",
    "resnet50_q8",
    "shufflenet_v2_x1_0_q8",
    "bert_qd8",
]
NAMES = ["kiln", "et", "kiln-1", "et-1"]


def geomean(xs: List[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help="models to time (default: the float zoo)")
    ap.add_argument("--int8", action="store_true", help="time the int8 zoo (without MODELs)")
    timing_options(ap, rounds=5, iters=20, warmup=3)
    args = ap.parse_args()
    # Contenders reads these of run_busy's options: no older binary here.
    args.base = None
    if args.rounds < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--rounds and --iters must be positive, --warmup not negative")
    if not os.access(args.kiln, os.X_OK):
        ap.error(f"{args.kiln} is not an executable (cargo build --release -p kiln-cli)")
    models = timeable(args, args.models or (INT8_ZOO if args.int8 else ZOO))
    if not models:
        say(args, "no model to time")
        return 1
    start = load()
    say(args, f"kiln: {args.kiln}; rounds {args.rounds}, iters {args.iters}, warmup "
        f"{args.warmup}; figures: median ms of the rounds (worst round); load average at "
        f"start: {start}")
    contenders = {m: Contenders(args, ROOT / "bench/.models" / m) for m in models}
    runs: Dict[str, Dict[str, List[dict]]] = {m: {n: [] for n in NAMES} for m in models}
    for r in range(args.rounds):
        for m in models:
            k = r % len(NAMES)
            for name in NAMES[k:] + NAMES[:k]:
                runs[m][name].append(contenders[m].run(name))
    end = load()
    say(args, f"load average at end: {end}")
    say(args, f"{'model':20s}" + "".join(f"{n:>20s}" for n in NAMES)
        + f"{'kiln/et':>9s}{'kiln-1/et-1':>13s}")
    rows = []
    for m in models:
        s = summarize(runs[m])
        row = {
            "model": m,
            "contenders": s,
            "kiln_over_et": s["kiln"]["median_ms"] / s["et"]["median_ms"],
            "kiln1_over_et1": s["kiln-1"]["median_ms"] / s["et-1"]["median_ms"],
        }
        rows.append(row)
        cells = "".join(f"{s[n]['median_ms']:9.3f} ({s[n]['worst_ms']:7.3f})" for n in NAMES)
        say(args, f"{m:20s}{cells}{row['kiln_over_et']:9.2f}{row['kiln1_over_et1']:13.2f}")
    gm = geomean([r["kiln_over_et"] for r in rows])
    gm1 = geomean([r["kiln1_over_et1"] for r in rows])
    say(args, f"{'geometric mean':20s}{'':80s}{gm:9.2f}{gm1:13.2f}")
    threads = {n: (v["threads"], v["threads_reason"]) for n, v in summarize(runs[models[0]]).items()}
    say(args, "threads: " + "; ".join(
        f"{n} {t}" + (f" ({why})" if why else "") for n, (t, why) in threads.items()))
    if args.json:
        doc = {"models": models, "rounds": args.rounds, "iters": args.iters,
               "load_start": start, "load_end": end, "rows": rows,
               "geomean_kiln_over_et": gm, "geomean_kiln1_over_et1": gm1}
        json.dump(doc, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
