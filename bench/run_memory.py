#!/usr/bin/env python3
"""kiln's memory and time to the first output against ExecuTorch's (issue 39's measure).

Run with the peers venv: ~/peers/bin/python bench/run_memory.py [options] [MODEL ...]

MODELs (default: resnet50 vit_b_16 mobilenet_v3_large resnet50_q8 efficientnet_b0 bert
mobilenet_v2) are bench/export_models.py's names; their XNNPACK exports (exported into
bench/.models/ when missing) run with the model's seeded input. Per model, --rounds rounds
(default 3) run, interleaved, one fresh process of each runtime that loads the program and
executes it once:

  kiln  `kiln bench --iters 1 --warmup 0 --json`: its whole-process peak resident memory
        (the child's ru_maxrss, from wait4), its `load_ms` (program and method loaded: mapped,
        verified, decoded, compiled, weights packed) and the one execute (`median_ms`), and
        its prediction of the peak (`memory.predicted_peak_bytes`, when the build reports it)
  et    ExecuTorch 1.5.1 (bench/executorch_peer.py): its peak resident memory past what the
        process held after its imports (torch's own hundreds of MB are not counted), its
        `load_program` + `load_method` time and its first execute

With --base OLD_KILN, an older kiln binary runs the same way beside them (old against new).

The table gives medians over the rounds: the file size, both peaks and their ratio, kiln's
prediction and its error against kiln's measured peak, and the time to the first output (load
plus first execute) of each with their ratio. Load averages are printed at the start and end.
--json prints every run as one JSON document on stdout (the table then goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from run_busy import PEER, ROOT, load, say, timeable

MODELS = [
    "resnet50",
    "vit_b_16",
    "mobilenet_v3_large",
    "resnet50_q8",
    "efficientnet_b0",
    "bert",
    "mobilenet_v2",
]


def run_with_peak(cmd: List[str], env: Dict[str, str]) -> Tuple[dict, int]:
    """Runs `cmd` and returns its JSON document (its standard output, or the last line of it) and the
    child's peak resident memory in bytes (ru_maxrss of wait4, in kB on Linux)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            tail = err.read().decode(errors="replace").strip()[-500:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {tail}")
        text = out.read().decode().strip()
        try:
            doc = json.loads(text)
        except ValueError:
            # ExecuTorch's peer may print log lines before its one-line document.
            doc = json.loads(text.splitlines()[-1])
    return doc, usage.ru_maxrss * 1024


def mb(b: float) -> float:
    return b / (1 << 20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--base", help="an older kiln binary to measure beside")
    ap.add_argument("--python", default=sys.executable, help="the Python with the peers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "KILN_THREADS"}

    say(args, f"kiln: {args.kiln}; rounds {args.rounds}; load average at start: {load()}")
    models = timeable(args, args.models)
    report = {"load_start": load(), "models": {}}
    rows = []
    for m in models:
        d = ROOT / "bench/.models" / m
        pte = d / "xnnpack.pte"
        inputs: List[str] = []
        for name in json.loads((d / "manifest.json").read_text())["inputs"]:
            inputs += ["--input", str(d / name)]
        names = ["kiln", "et"] + (["base"] if args.base else [])
        runs: Dict[str, list] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for who in order:
                if who in ("kiln", "base"):
                    binary = args.base if who == "base" else args.kiln
                    cmd = [binary, "bench", str(pte), *inputs, "--iters", "1", "--warmup", "0", "--json"]
                    doc, peak = run_with_peak(cmd, env)
                    memory = doc.get("memory") or {}
                    runs[who].append({
                        "peak_bytes": peak,
                        "load_ms": doc["load_ms"],
                        "first_ms": doc["median_ms"],
                        "predicted_bytes": memory.get("predicted_peak_bytes"),
                        "doc": doc,
                    })
                else:
                    cmd = [args.python, str(PEER), str(pte), *inputs, "--iters", "1", "--warmup", "0", "--json"]
                    doc, _ = run_with_peak(cmd, env)
                    runs["et"].append({
                        "peak_bytes": doc["rss_growth_mb"] * (1 << 20),
                        "load_ms": doc["load_ms"],
                        "first_ms": doc["first_ms"],
                        "doc": doc,
                    })
        med = {
            who: {
                k: statistics.median(x[k] for x in rs)
                for k in ("peak_bytes", "load_ms", "first_ms")
            }
            for who, rs in runs.items()
        }
        predicted = [x["predicted_bytes"] for x in runs["kiln"] if x["predicted_bytes"]]
        pred = statistics.median(predicted) if predicted else None
        k, e = med["kiln"], med["et"]
        first_k, first_e = k["load_ms"] + k["first_ms"], e["load_ms"] + e["first_ms"]
        row = {
            "model": m,
            "file_mb": mb(pte.stat().st_size),
            "kiln_peak_mb": mb(k["peak_bytes"]),
            "base_peak_mb": mb(med["base"]["peak_bytes"]) if args.base else None,
            "base_first_output_ms": (med["base"]["load_ms"] + med["base"]["first_ms"]) if args.base else None,
            "et_growth_mb": mb(e["peak_bytes"]),
            "peak_ratio": k["peak_bytes"] / max(e["peak_bytes"], 1),
            "predicted_mb": mb(pred) if pred else None,
            "prediction_error": (pred / k["peak_bytes"] - 1) if pred else None,
            "kiln_load_ms": k["load_ms"],
            "et_load_ms": e["load_ms"],
            "kiln_first_output_ms": first_k,
            "et_first_output_ms": first_e,
            "first_output_ratio": first_k / first_e,
        }
        rows.append(row)
        report["models"][m] = {"row": row, "runs": runs}
        say(args, f"{m}: done, load average {load()}")
    report["load_end"] = load()

    say(args, "")
    say(args, "| model | file MB | kiln peak MB | ExecuTorch growth MB | kiln/ET | kiln predicted MB (error) "
              "| kiln load ms | ET load ms | kiln first output ms | ET first output ms | kiln/ET |"
              + (" base peak MB | base first output ms |" if args.base else ""))
    say(args, "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.base else ""))
    for r in rows:
        pred = (f"{r['predicted_mb']:.0f} ({r['prediction_error'] * 100:+.0f}%)"
                if r["predicted_mb"] else "-")
        say(args, f"| {r['model']} | {r['file_mb']:.1f} | {r['kiln_peak_mb']:.0f} | {r['et_growth_mb']:.0f} "
                  f"| {r['peak_ratio']:.2f} | {pred} | {r['kiln_load_ms']:.1f} | {r['et_load_ms']:.1f} "
                  f"| {r['kiln_first_output_ms']:.1f} | {r['et_first_output_ms']:.1f} | {r['first_output_ratio']:.2f} |"
                  + (f" {r['base_peak_mb']:.0f} | {r['base_first_output_ms']:.1f} |" if args.base else ""))
    say(args, f"load average: {report['load_start']} -> {report['load_end']}")
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
