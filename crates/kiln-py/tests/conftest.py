"""Shared paths and comparisons. Expected values are the real tools' outputs committed under
tests/fixtures (ExecuTorch 1.5.1 runs, IREE- and safetensors-written files); kiln's own code
never computes them."""

import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"


def expected(path: Path) -> dict:
    return json.loads(path.read_text())


def as_float32_if_bfloat16(array: np.ndarray, dtype: str) -> np.ndarray:
    """ExecuTorch's bfloat16 outputs are stored as their uint16 bits; kiln returns float32."""
    if dtype == "bfloat16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array


def assert_matches(got, want: np.ndarray, *, quantized: bool, what: str) -> None:
    """kiln's output against ExecuTorch's (the bar of crates/kiln-runtime/tests/fixtures.rs):
    float32 within 1e-4; float16 within one float16 ulp of the largest output (XNNPACK rounds
    every float16 operation, kiln computes in float32); programs with quantized graphs within
    1% of the output's range; everything else exactly, dtype included."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind != "f":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
        assert np.array_equal(got, want), f"{what}: values differ"
        return
    w = want.astype(np.float64)
    g = got.astype(np.float64)
    if quantized:
        finite = w[np.isfinite(w)]
        tol = 0.01 * float(finite.max() - finite.min()) if finite.size else 0.0
    elif want.dtype == np.float16:
        tol = max(float(np.abs(w).max(initial=0)) * 2.0**-10, 1e-4)
    else:
        tol = 1e-4
    both_nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore"):
        diff = np.where((g == w) | both_nan, 0.0, np.abs(g - w))
    bad = np.isnan(diff) | (diff > tol)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        raise AssertionError(f"{what}: at {i}: kiln {g[i]}, ExecuTorch {w[i]} (tolerance {tol})")
