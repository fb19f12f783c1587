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

With --llm PTE (repeatable), LLM exports (bench/run_llm.sh's, tools/fixtures/export_llama.py)
are measured too (only they when no MODEL is named), from a seeded prompt of --prompt tokens (default 8): kiln's `kiln generate
--max-new-tokens 1 --json` against bench/executorch_llm_peer.py `--new-tokens 1`, the first
output being the prefill (the first token's logits). A row's name is the export's file name.

With --base OLD_KILN, an older kiln binary runs the same way beside them (old against new).

The table gives medians over the rounds: the file size, both peaks and their ratio, kiln's
prediction and its error against kiln's measured peak, and the time to the first output (load
plus first execute) of each with their ratio. The program file is read through before each run, so
loads read the page cache, not the disk. Load averages are printed at the start and end.
--json prints every run as one JSON document on stdout (the table then goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from run_busy import PEER, ROOT, load, say, timeable

LLM_PEER = ROOT / "bench/executorch_llm_peer.py"

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


def llm_prompt(pte: Path, n: int) -> str:
    """`n` seeded token ids inside the export's vocabulary (its `.expected.json`'s
    params.vocab_size, which tools/fixtures/export_llama.py writes beside it)."""
    expected = pte.with_name(pte.stem + ".expected.json")
    vocab = json.loads(expected.read_text())["params"]["vocab_size"]
    rng = random.Random(12)
    return ",".join(str(rng.randrange(vocab)) for _ in range(n))


def commands(args, target) -> Tuple[Path, Dict[str, List[str]]]:
    """The program of `target` (a bench model's name, or ("llm", path)) and, per contender,
    the command that loads it and computes its first output once."""
    if isinstance(target, tuple):
        pte = Path(target[1])
        prompt = llm_prompt(pte, args.prompt)
        kiln = lambda b: [b, "generate", str(pte), "--prompt-tokens", prompt, "--max-new-tokens", "1", "--json"]
        et = [args.python, str(LLM_PEER), str(pte), "--prompt-tokens", prompt, "--new-tokens", "1"]
    else:
        d = ROOT / "bench/.models" / target
        pte = d / "xnnpack.pte"
        inputs: List[str] = []
        for name in json.loads((d / "manifest.json").read_text())["inputs"]:
            inputs += ["--input", str(d / name)]
        kiln = lambda b: [b, "bench", str(pte), *inputs, "--iters", "1", "--warmup", "0", "--json"]
        et = [args.python, str(PEER), str(pte), *inputs, "--iters", "1", "--warmup", "0", "--json"]
    cmds = {"kiln": kiln(args.kiln), "et": et}
    if args.base:
        cmds["base"] = kiln(args.base)
    return pte, cmds


def warm(pte: Path) -> None:
    """Reads the program file through once, so a load reads it from the page cache and not
    the disk (this host gives the cache up between runs: a 200 MB file read from disk took a
    load from 50 to 290 ms)."""
    with open(pte, "rb") as f:
        while f.read(1 << 20):
            pass


def first_ms(doc: dict) -> float:
    """The first output's compute time in a contender's document: an LLM's prefill, else the
    one execute (kiln bench's median of one, ExecuTorch's peer's first)."""
    for key in ("prefill_ms", "first_ms", "median_ms"):
        if key in doc:
            return doc[key]
    raise KeyError(f"no first-output time in {sorted(doc)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=None)
    ap.add_argument("--llm", action="append", default=[], metavar="PTE",
                    help="an LLM export to measure as well (repeatable)")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens of the LLM runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kiln", default=str(ROOT / "target/release/kiln"))
    ap.add_argument("--base", help="an older kiln binary to measure beside")
    ap.add_argument("--python", default=sys.executable, help="the Python with the peers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "KILN_THREADS"}

    say(args, f"kiln: {args.kiln}; rounds {args.rounds}; load average at start: {load()}")
    names = args.models or ([] if args.llm else MODELS)
    targets = list(timeable(args, names) if names else []) + [("llm", p) for p in args.llm]
    report = {"load_start": load(), "models": {}}
    rows = []
    for target in targets:
        pte, cmds = commands(args, target)
        m = pte.name if isinstance(target, tuple) else target
        names = list(cmds)
        runs: Dict[str, list] = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for who in order:
                warm(pte)
                doc, peak = run_with_peak(cmds[who], env)
                if who == "et":
                    runs["et"].append({
                        "peak_bytes": doc["rss_growth_mb"] * (1 << 20),
                        "load_ms": doc["load_ms"],
                        "first_ms": first_ms(doc),
                        "doc": doc,
                    })
                else:
                    memory = doc.get("memory") or {}
                    runs[who].append({
                        "peak_bytes": peak,
                        "load_ms": doc["load_ms"],
                        "first_ms": first_ms(doc),
                        "predicted_bytes": memory.get("predicted_peak_bytes"),
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
