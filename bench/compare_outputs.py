#!/usr/bin/env python3
"""kiln's outputs against ExecuTorch's, for bench/run_vs_xnnpack.sh.

Usage: ~/peers/bin/python bench/compare_outputs.py MODEL_DIR KILN_OUT_DIR

MODEL_DIR is one model of bench/export_models.py's cache (its manifest.json lists ExecuTorch's
outputs per program); KILN_OUT_DIR holds `kiln run --out-dir`'s output0.npy, output1.npy, ...
Prints two numbers: the largest |kiln - ExecuTorch| over all outputs against the portable
program's outputs, then against the XNNPACK program's (fixturelib.max_abs_diff: NaN equals NaN;
`inf` for a shape mismatch or a missing output).
"""

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools/fixtures"))
from fixturelib import max_abs_diff  # noqa: E402


def worst_diff(kiln_out: Path, model_dir: Path, refs) -> float:
    worst = 0.0
    for i, ref in enumerate(refs):
        got = kiln_out / f"output{i}.npy"
        if not got.exists():
            return math.inf
        worst = max(worst, max_abs_diff(np.load(got), np.load(model_dir / ref)))
    return worst


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    model_dir, kiln_out = Path(sys.argv[1]), Path(sys.argv[2])
    outputs = json.loads((model_dir / "manifest.json").read_text())["outputs"]
    diffs = [worst_diff(kiln_out, model_dir, outputs[v]) for v in ("portable", "xnnpack")]
    print(" ".join(f"{d:.3g}" for d in diffs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
