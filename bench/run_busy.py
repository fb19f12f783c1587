#!/usr/bin/env python3
"""kiln and ExecuTorch on an idle and on a busy machine (issue 34's measure).

Run with the peers venv: ~/peers/bin/python bench/run_busy.py [options] [MODEL ...]

MODELs (default mobilenet_v2 efficientnet_b0 resnet50) are bench/export_models.py's names; their
XNNPACK exports (xnnpack.pte, exported into bench/.models/ when missing) are what both runtimes
run, with the model's seeded input.

For each condition of --busy (default 0,1,2: nothing else running, then one, then two CPU-bound
processes beside the contenders; the script starts them, prints their process ids and stops them
by those ids when the condition's rounds are done, also on Ctrl-C), --rounds rounds (default 7)
run every contender once per model, in an order that rotates from round to round:

  kiln     `kiln bench` with kiln's default thread count (KILN_THREADS is not passed on)
  kiln-1   `kiln bench --threads 1`
  et       ExecuTorch 1.5.1's runtime (bench/executorch_peer.py), its default threadpool
  et-1     the same with a threadpool of one thread
  base     (with --base OLD_KILN) an older kiln binary, default threads: old against new

Every run is a fresh process that loads the program, runs --warmup untimed and --iters timed
executes and reports their median; a contender's figure is the median of its runs over the
rounds, with its worst (slowest) round beside it. Busy-machine timings are bimodal (a round
either meets a descheduled thread or not), hence the worst round. Ratios: kiln/kiln-1 (the
ratio of the medians, and the worst of the per-round ratios), kiln/et, base/kiln.

--throughput adds a run of `kiln bench --callers N` (N of --callers, default 1,2,4: N threads
each executing the first model from one loaded program) and of `kiln bench --callers 1
--threads 1`, interleaved over the same number of rounds on the idle machine: executes per
second, and their ratio to one caller on one thread.

Before timing, kiln's outputs for each model must match ExecuTorch's (recorded at export) within
1e-4 of the largest output magnitude; a model that does not is reported and left out. Load
averages are printed at the start and the end of every condition. --json prints one JSON
document with every run on stdout (the tables then go to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "bench/executorch_peer.py"
MODELS = ["mobilenet_v2", "efficientnet_b0", "resnet50"]


def timing_options(ap, rounds: int, iters: int, warmup: int) -> None:
    """The options every interleaved benchmark here takes, with its defaults: rounds,
    executes per run, the kiln binary, the Python of the peers, JSON output."""
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--python", default=sys.executable, help="the Python with the peers")
    ap.add_argument("--json", action="store_true")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def say(args, *parts) -> None:
    print(*parts, file=sys.stderr if args.json else sys.stdout, flush=True)


def run_json(cmd: List[str], env: Optional[Dict[str, str]] = None) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    try:
        return json.loads(out.stdout)
    except ValueError:
        # ExecuTorch's peer may print log lines before its one-line document.
        return json.loads(out.stdout.strip().splitlines()[-1])


class Contenders:
    """The commands of one model's contenders."""

    def __init__(self, args, model_dir: Path):
        self.args = args
        self.pte = str(model_dir / "xnnpack.pte")
        self.inputs = []
        for name in json.loads((model_dir / "manifest.json").read_text())["inputs"]:
            self.inputs += ["--input", str(model_dir / name)]
        # kiln's default must be kiln's own choice, not an inherited KILN_THREADS.
        self.env = {k: v for k, v in os.environ.items() if k != "KILN_THREADS"}

    def names(self) -> List[str]:
        return ["kiln", "kiln-1", "et", "et-1"] + (["base"] if self.args.base else [])

    def run(self, name: str) -> dict:
        a = self.args
        timing = ["--iters", str(a.iters), "--warmup", str(a.warmup), "--json"]
        if name in ("kiln", "kiln-1", "base"):
            binary = a.base if name == "base" else a.kiln
            threads = ["--threads", "1"] if name == "kiln-1" else []
            cmd = [binary, "bench", self.pte, *self.inputs, *threads, *timing]
        else:
            threads = ["--threads", "1"] if name == "et-1" else []
            cmd = [a.python, str(PEER), self.pte, *self.inputs, *threads, *timing]
        return run_json(cmd, self.env)


def check_outputs(args, model: str, model_dir: Path) -> Optional[str]:
    """Why kiln's outputs differ from ExecuTorch's recorded ones, or None when they match."""
    man = json.loads((model_dir / "manifest.json").read_text())
    with tempfile.TemporaryDirectory() as out:
        inputs = []
        for name in man["inputs"]:
            inputs += ["--input", str(model_dir / name)]
        res = subprocess.run(
            [args.kiln, "run", str(model_dir / "xnnpack.pte"), *inputs, "--out-dir", out],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            return f"kiln run failed: {res.stderr.strip()[-300:]}"
        for i, ref in enumerate(man["outputs"]["xnnpack"]):
            want = np.load(model_dir / ref)
            got = np.load(Path(out) / f"output{i}.npy")
            if got.shape != want.shape:
                return f"output {i}: shape {got.shape}, ExecuTorch {want.shape}"
            diff = float(np.max(np.abs(got.astype(np.float64) - want)))
            tol = 1e-4 * float(np.max(np.abs(want))) + 1e-6
            if model.endswith("_q8"):
                # Static int8: XNNPACK's integer arithmetic, bit for bit.
                tol = 0.0
            elif model.endswith("_qd8"):
                # Dynamic int8 quantizes activations per call: a last-bit difference in a
                # float before rounding moves a quantized value. ExecuTorch's own two
                # programs (portable, XNNPACK) differ by this much; kiln may too.
                tol = max(tol, float(man["et_portable_vs_xnnpack_max_abs_diff"]))
            if not diff <= tol:
                return f"output {i}: max abs diff {diff:.3g} above {tol:.3g}"
    return None


def timeable(args, names: List[str]) -> List[str]:
    """The models of `names` to time: exported (bench/export_models.py, which skips models
    already in the cache) and run by kiln with ExecuTorch's outputs; each other one is
    reported with why it is left out."""
    export = subprocess.run(
        [args.python, str(ROOT / "bench/export_models.py"), *names],
        capture_output=True, text=True,
    )
    models = []
    for m in names:
        d = ROOT / "bench/.models" / m
        if not (d / "manifest.json").exists():
            say(args, f"{m}: not exported ({export.stderr.strip()[-300:]})")
            continue
        why = check_outputs(args, m, d)
        if why:
            say(args, f"{m}: left out, kiln's outputs differ from ExecuTorch's: {why}")
            continue
        models.append(m)
    return models


class Busy:
    """`n` CPU-bound processes (plain busy loops), stopped by their process ids."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def pids(self) -> List[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def summarize(runs: Dict[str, List[dict]]) -> Dict[str, dict]:
    out = {}
    for name, rs in runs.items():
        ms = [r["median_ms"] for r in rs]
        out[name] = {
            "median_ms": statistics.median(ms),
            "worst_ms": max(ms),
            "runs_ms": ms,
            "threads": rs[0].get("threads"),
            "threads_reason": rs[0].get("threads_reason"),
        }
    return out


def latency(args, models: List[str]) -> List[dict]:
    results = []
    for busy in args.busy:
        procs = Busy(busy)
        try:
            time.sleep(0.5)
            start = load()
            say(args, f"\n== beside {busy} CPU-bound process(es) (pids {procs.pids() or '-'}); "
                f"load average at start: {start}")
            runs: Dict[str, Dict[str, List[dict]]] = {m: {} for m in models}
            contenders = {m: Contenders(args, ROOT / "bench/.models" / m) for m in models}
            for r in range(args.rounds):
                for m in models:
                    names = contenders[m].names()
                    k = r % len(names)
                    for name in names[k:] + names[:k]:
                        runs[m].setdefault(name, []).append(contenders[m].run(name))
            end = load()
        finally:
            procs.stop()
        say(args, f"load average at end: {end}")
        header = f"{'model':16s}" + "".join(f"{n:>20s}" for n in contenders[models[0]].names())
        say(args, header + f"{'kiln/kiln-1':>13s}{'worst round':>12s}{'kiln/et':>9s}"
            + (f"{'base/kiln':>10s}" if args.base else ""))
        for m in models:
            s = summarize(runs[m])
            per_round = [a["median_ms"] / b["median_ms"] for a, b in zip(runs[m]["kiln"], runs[m]["kiln-1"])]
            row = {
                "busy": busy,
                "model": m,
                "load_start": start,
                "load_end": end,
                "contenders": s,
                "kiln_over_kiln1": s["kiln"]["median_ms"] / s["kiln-1"]["median_ms"],
                "kiln_over_kiln1_worst_round": max(per_round),
                "kiln_over_et": s["kiln"]["median_ms"] / s["et"]["median_ms"],
            }
            if args.base:
                row["base_over_kiln"] = s["base"]["median_ms"] / s["kiln"]["median_ms"]
            results.append(row)
            cells = "".join(
                f"{s[n]['median_ms']:9.3f} ({s[n]['worst_ms']:7.3f})" for n in contenders[m].names()
            )
            line = (f"{m:16s}{cells}{row['kiln_over_kiln1']:13.2f}"
                    f"{row['kiln_over_kiln1_worst_round']:12.2f}{row['kiln_over_et']:9.2f}")
            if args.base:
                line += f"{row['base_over_kiln']:10.3f}"
            say(args, line)
        threads = {n: (v["threads"], v["threads_reason"]) for n, v in summarize(runs[models[0]]).items()}
        say(args, "threads: " + "; ".join(
            f"{n} {t}" + (f" ({why})" if why else "") for n, (t, why) in threads.items()))
    return results


def throughput(args, model: str) -> List[dict]:
    d = ROOT / "bench/.models" / model
    c = Contenders(args, d)
    variants = [("1 caller, 1 thread", ["--callers", "1", "--threads", "1"])] + [
        (f"{n} caller{'s' if n > 1 else ''}", ["--callers", str(n)]) for n in args.callers
    ]
    runs: Dict[str, List[dict]] = {label: [] for label, _ in variants}
    start = load()
    say(args, f"\n== throughput: {model}, callers each executing from one loaded program; "
        f"load average at start: {start}")
    for r in range(args.rounds):
        k = r % len(variants)
        for label, flags in variants[k:] + variants[:k]:
            cmd = [args.kiln, "bench", c.pte, *c.inputs, *flags,
                   "--iters", str(args.iters), "--warmup", str(args.warmup), "--json"]
            runs[label].append(run_json(cmd, c.env))
    end = load()
    say(args, f"load average at end: {end}")
    ref = statistics.median(r["executes_per_s"] for r in runs[variants[0][0]])
    out = []
    say(args, f"{'':22s}{'executes/s':>12s}{'worst':>10s}{'vs 1 caller, 1 thread':>24s}")
    for label, _ in variants:
        eps = [r["executes_per_s"] for r in runs[label]]
        med = statistics.median(eps)
        out.append({"variant": label, "executes_per_s": med, "worst": min(eps), "runs": eps,
                    "ratio": med / ref, "threads": runs[label][0].get("threads"),
                    "load_start": start, "load_end": end})
        say(args, f"{label:22s}{med:12.1f}{min(eps):10.1f}{med / ref:24.2f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    timing_options(ap, rounds=7, iters=30, warmup=3)
    ap.add_argument("--busy", default="0,1,2", help="CPU-bound processes beside, per condition")
    ap.add_argument("--base", help="an older kiln binary, timed with default threads")
    ap.add_argument("--throughput", action="store_true", help="also time --callers runs")
    ap.add_argument("--callers", default="1,2,4")
    args = ap.parse_args()
    try:
        args.busy = [int(b) for b in args.busy.split(",")]
        args.callers = [int(c) for c in args.callers.split(",")]
    except ValueError:
        ap.error("--busy and --callers take comma-separated whole numbers")
    if args.rounds < 1 or args.iters < 1 or min(args.busy) < 0 or min(args.callers) < 1:
        ap.error("--rounds, --iters and --callers must be positive, --busy not negative")
    for binary in filter(None, [args.kiln, args.base]):
        if not os.access(binary, os.X_OK):
            ap.error(f"{binary} is not an executable (cargo build --release -p kiln-cli)")
    models = timeable(args, args.models)
    if not models:
        say(args, "no model to time")
        return 1
    say(args, f"kiln: {args.kiln}; rounds {args.rounds}, iters {args.iters}, warmup {args.warmup}; "
        f"figures: median ms of the rounds (worst round)")
    doc = {"models": models, "rounds": args.rounds, "iters": args.iters,
           "latency": latency(args, models)}
    if args.throughput:
        doc["throughput"] = throughput(args, models[0])
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
