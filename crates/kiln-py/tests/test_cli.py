"""The wheel's `kiln` command is the binary's: same arguments, output and exit codes."""

import json
import shutil
import subprocess
import sys

import pytest

import kiln
from conftest import FIXTURES

PTE = FIXTURES / "pte"


def kiln_command(*args):
    # The console script pip installed beside this interpreter, else the module it runs.
    script = shutil.which("kiln", path=str(__import__("pathlib").Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "kiln._cli"]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True)


def test_version():
    result = kiln_command("--version")
    assert result.returncode == 0
    assert result.stdout.startswith(f"kiln {kiln.__version__} (commit ")


def test_run_checks_executorchs_outputs():
    result = kiln_command(
        "run", PTE / "mobilenet_v2_xnnpack.pte",
        "--input", PTE / "mobilenet_v2_xnnpack.forward.in0.npy",
        "--expect", PTE / "mobilenet_v2_xnnpack.forward.out0.npy", "--atol", "1e-4", "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["outputs"][0]["shape"] == [1, 1000]


@pytest.mark.parametrize(
    "args,code,stderr",
    [
        (["bogus"], 2, "unrecognized subcommand"),
        (["run"], 2, "required"),
        (["verify", "/nonexistent.pte"], 1, "No such file"),
    ],
)
def test_exit_codes(args, code, stderr):
    result = kiln_command(*args)
    assert result.returncode == code
    assert stderr in result.stderr
