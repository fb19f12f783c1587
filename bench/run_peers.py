#!/usr/bin/env python3
"""kiln against every CPU peer on one model: ExecuTorch + XNNPACK, ONNX Runtime and OpenVINO.

Run with the peers venv: ~/peers/bin/python bench/run_peers.py [MODEL] [options]

MODEL (default mobilenet_v2) is one of bench/export_models.py's names. The same seeded model is
what every runtime runs: its XNNPACK export (xnnpack.pte, through bench/export_models.py) for
kiln and ExecuTorch, and an ONNX export made here from the same weights
(`torch.onnx.export(..., dynamo=False)`, cached as model.onnx beside the .pte) for ONNX Runtime
and OpenVINO (bench/onnx_peer.py: OpenVINO with INFERENCE_PRECISION_HINT=f32). Before timing,
kiln's output and each ONNX runtime's must match ExecuTorch's recorded one within 1e-4 of its
largest magnitude; a runtime that does not is reported and left out.

For the int8 models (`*_q8`, static, and `bert_qd8`, dynamic) the ONNX runtimes run the same
float model quantized by ONNX Runtime's own quantizer (`onnxruntime.quantization`, after its
`quant_pre_process`): `quantize_static` in QDQ form with per-channel int8 weights and uint8
activations (ONNX Runtime's fast form on x86: 1.8x faster than int8 activations on
mobilenet_v2 here) calibrated on four seeded inputs shaped like the model's, or `quantize_dynamic`
with per-channel int8 weights for `bert_qd8` (cached as model_int8.onnx beside the .pte; the
float model's ONNX export is made in its own directory first). Two quantizers round
differently, so their outputs are not compared for equality: the largest difference from
ExecuTorch's int8 output, relative to its largest magnitude, is printed beside the timings.

For each thread count of --threads (default 1 and 2), --rounds rounds (default 7) run every
contender once, in an order that rotates from round to round, each a fresh process that loads the
model, runs --warmup untimed and --iters timed inferences and reports their median; a contender's
figure is the median over the rounds, its worst round beside it. The last column is kiln's
figure over the best peer's (below 1: kiln is faster). Run it on an idle machine: the load
average is printed at the start and the end. --json prints every run as one JSON document on
stdout (the table then goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from run_busy import ROOT, load, run_json, say, summarize, timeable, timing_options

BENCH = ROOT / "bench"
PEERS = ["et", "ort", "ov"]
NAMES = ["kiln"] + PEERS


def export_onnx(args, model: str, d: Path) -> Path:
    """`model.onnx` in `d`, exported from the seeded model of bench/export_models.py unless a
    copy newer than the model's manifest is there."""
    onnx = d / "model.onnx"
    if onnx.exists() and onnx.stat().st_mtime >= (d / "manifest.json").stat().st_mtime:
        return onnx
    script = f"""
import sys, warnings
sys.path.insert(0, {str(BENCH)!r})
warnings.simplefilter("ignore")
import torch
import export_models, fixturelib
fixturelib.seed_everything(export_models.SEED)
m, inputs = export_models.MODELS[{model!r}]()
m.eval()
torch.onnx.export(m, inputs, {str(onnx) + '.part'!r}, dynamo=False, opset_version=17)
"""
    res = subprocess.run([args.python, "-c", script], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"ONNX export of {model} failed: {res.stderr.strip()[-500:]}")
    os.replace(str(onnx) + ".part", onnx)
    return onnx


# Each int8 export of bench/export_models.py and the float model it quantizes (same weights).
QUANTIZED_FROM = {
    "mobilenet_v2_q8": "mobilenet_v2",
    "mobilenet_v3_large_q8": "mobilenet_v3_large",
    "resnet50_q8": "resnet50",
    "shufflenet_v2_x1_0_q8": "shufflenet_v2_x1_0",
    "bert_qd8": "bert",
}


def quantize_onnx(args, model: str, d: Path) -> Path:
    """`model_int8.onnx` in `d`: the float model of `model` exported to ONNX and quantized by
    ONNX Runtime's quantizer, unless a copy newer than the float ONNX is there."""
    base = QUANTIZED_FROM[model]
    float_onnx = export_onnx(args, base, ROOT / "bench/.models" / base)
    out = d / "model_int8.onnx"
    if out.exists() and out.stat().st_mtime >= float_onnx.stat().st_mtime:
        return out
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quant_pre_process, quantize_dynamic, quantize_static)

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        part = Path(tmp) / "int8.onnx"
        quant_pre_process(str(float_onnx), str(pre))
        if model.endswith("_qd8"):
            quantize_dynamic(str(pre), str(part), per_channel=True, weight_type=QuantType.QInt8)
        else:
            import onnxruntime as ort

            sess = ort.InferenceSession(str(pre), providers=["CPUExecutionProvider"])
            spec = sess.get_inputs()[0]
            man = json.loads((d / "manifest.json").read_text())
            shape = np.load(d / man["inputs"][0]).shape
            rng = np.random.default_rng(7)
            calib = [{spec.name: rng.standard_normal(shape, dtype=np.float32)} for _ in range(4)]

            class Reader(CalibrationDataReader):
                def get_next(self):
                    return calib.pop() if calib else None

            quantize_static(str(pre), str(part), Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=True, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8)
        os.replace(part, out)
    return out


class Contenders:
    """The commands of one model's contenders at one thread count."""

    def __init__(self, args, d: Path, onnx: Path):
        self.args, self.d, self.onnx = args, d, onnx
        man = json.loads((d / "manifest.json").read_text())
        self.inputs: List[str] = []
        for name in man["inputs"]:
            self.inputs += ["--input", str(d / name)]
        self.env = {k: v for k, v in os.environ.items() if k != "KILN_THREADS"}

    def command(self, name: str, threads: int, extra: List[str]) -> List[str]:
        a = self.args
        timing = ["--iters", str(a.iters), "--warmup", str(a.warmup), "--json"]
        t = ["--threads", str(threads)]
        pte = str(self.d / "xnnpack.pte")
        if name == "kiln":
            return [a.kiln, "bench", pte, *self.inputs, *t, *timing]
        if name == "et":
            return [a.python, str(BENCH / "executorch_peer.py"), pte, *self.inputs, *t, *timing]
        peer = [a.python, str(BENCH / "onnx_peer.py"), name, str(self.onnx)]
        return [*peer, *self.inputs, *t, *timing, *extra]

    def run(self, name: str, threads: int) -> dict:
        return run_json(self.command(name, threads, []), self.env)

    def output_gap(self, name: str):
        """An ONNX runtime's largest difference from ExecuTorch's first output relative to its
        largest magnitude, or why there is none (a failed run, another shape)."""
        man = json.loads((self.d / "manifest.json").read_text())
        want = np.load(self.d / man["outputs"]["xnnpack"][0])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.npy"
            cmd = self.command(name, 1, ["--out", str(out)])
            cmd[cmd.index("--iters") + 1] = "1"
            try:
                run_json(cmd, self.env)
            except RuntimeError as e:
                return str(e)[-300:]
            got = np.load(out)
        if got.size != want.size:
            return f"output shape {got.shape}, ExecuTorch {want.shape}"
        diff = float(np.max(np.abs(got.astype(np.float64).ravel() - want.ravel())))
        return diff / (float(np.max(np.abs(want))) + 1e-6)

    def mismatch(self, name: str) -> Optional[str]:
        """Why an ONNX runtime's first output differs from ExecuTorch's, or None. An int8
        model's gap is printed, never a reason to leave a runtime out."""
        gap = self.output_gap(name)
        if isinstance(gap, str):
            return gap
        if self.onnx.name == "model_int8.onnx":
            say(self.args, f"{name}: largest difference from ExecuTorch's int8 output "
                f"{gap:.3g} of its largest magnitude (another quantizer)")
            return None
        return None if gap <= 1e-4 else f"max abs diff {gap:.3g} of the largest magnitude"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="mobilenet_v2")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    timing_options(ap, rounds=7, iters=50, warmup=5)
    args = ap.parse_args()
    try:
        counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        ap.error("--threads takes comma-separated thread counts")
    if args.rounds < 1 or args.iters < 1 or args.warmup < 0 or min(counts) < 1:
        ap.error("--rounds, --iters and thread counts must be positive, --warmup not negative")
    if not os.access(args.kiln, os.X_OK):
        ap.error(f"{args.kiln} is not an executable (cargo build --release -p kiln-cli)")
    base = QUANTIZED_FROM.get(args.model)
    needed = [args.model] + ([base] if base else [])
    if len(timeable(args, needed)) < len(needed):
        return 1
    d = ROOT / "bench/.models" / args.model
    onnx = quantize_onnx(args, args.model, d) if base else export_onnx(args, args.model, d)
    contenders = Contenders(args, d, onnx)
    names = ["kiln", "et"]
    for peer in ("ort", "ov"):
        why = contenders.mismatch(peer)
        if why:
            say(args, f"{peer}: left out, its output differs from ExecuTorch's: {why}")
        else:
            names.append(peer)
    start = load()
    say(args, f"{args.model}; kiln: {args.kiln}; rounds {args.rounds}, iters {args.iters}, "
        f"warmup {args.warmup}; median ms of the rounds (worst round); load average at "
        f"start: {start}")
    runs: Dict[int, Dict[str, List[dict]]] = {t: {n: [] for n in names} for t in counts}
    for r in range(args.rounds):
        for t in counts:
            k = r % len(names)
            for name in names[k:] + names[:k]:
                runs[t][name].append(contenders.run(name, t))
    end = load()
    say(args, f"load average at end: {end}")
    say(args, f"{'threads':8s}" + "".join(f"{n:>20s}" for n in names) + f"{'kiln/best':>11s}")
    rows = []
    for t in counts:
        s = summarize(runs[t])
        best = min((n for n in names if n != "kiln"), key=lambda n: s[n]["median_ms"])
        ratio = s["kiln"]["median_ms"] / s[best]["median_ms"]
        rows.append({"threads": t, "contenders": s, "best_peer": best, "kiln_over_best": ratio})
        cells = "".join(f"{s[n]['median_ms']:9.3f} ({s[n]['worst_ms']:7.3f})" for n in names)
        say(args, f"{t:<8d}{cells}{ratio:9.2f} ({best})")
    if args.json:
        doc = {"model": args.model, "rounds": args.rounds, "iters": args.iters,
               "load_start": start, "load_end": end, "contenders": names, "rows": rows}
        json.dump(doc, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
