"""Every ExecuTorch program fixture, portable and XNNPACK-lowered, run through
`kiln.load(...).run(...)` with ExecuTorch's recorded inputs matches ExecuTorch's recorded
outputs (the single-operator fixtures of tests/fixtures/ops, with their documented departures
from ExecuTorch, are the Rust tests' job)."""

import numpy as np
import pytest

import kiln
from conftest import FIXTURES, as_float32_if_bfloat16, assert_matches, expected

XNNPACK = "XnnpackBackend"


def cases():
    for folder in ("pte", "xnnpack"):
        for path in sorted((FIXTURES / folder).glob("*.expected.json")):
            record = expected(path)
            if "runs" in record and "inspect" in record:
                yield pytest.param(folder, path, id=f"{folder}/{path.name[: -len('.expected.json')]}")


@pytest.mark.parametrize("folder,path", list(cases()))
def test_runs_match_executorch(folder, path):
    record = expected(path)
    files = record["files"]
    directory = path.parent
    data = files.get("ptd")
    program = kiln.load(directory / files["pte"], data=None if data is None else directory / data)
    quantized = any(d.get("quant") for d in record.get("xnnpack", []))
    for method in record["inspect"]["methods"]:
        name = method["name"]
        if name not in record["runs"]:
            continue
        foreign = [d for d in method["delegates"] if d != XNNPACK]
        runs = [record["runs"][name], *record.get("extra_runs", {}).get(name, [])]
        if foreign:
            with pytest.raises(kiln.NotSupportedError, match=f"no backend for {foreign[0]}"):
                program.run([np.load(directory / f) for f in runs[0]["inputs"]], method=name)
            continue
        out_dtypes = [o.get("dtype") for o in method["outputs"]]
        for r, run in enumerate(runs):
            inputs = [np.load(directory / f) for f in run["inputs"]]
            outputs = program.run(inputs, method=name)
            assert len(outputs) == len(run["outputs"]), f"{name} run {r}: output count"
            for i, (got, file) in enumerate(zip(outputs, run["outputs"])):
                dtype = out_dtypes[i] if i < len(out_dtypes) else None
                want = as_float32_if_bfloat16(np.load(directory / file), dtype)
                assert_matches(got, want, quantized=quantized, what=f"{name} run {r} output {i}")
