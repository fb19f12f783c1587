"""`kiln.load`, `Program.run`, `signature`, `inspect`, `kiln.verify`, and the errors they
raise, on ExecuTorch fixtures with ExecuTorch's recorded inputs and outputs."""

import json
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import kiln
from conftest import FIXTURES, as_float32_if_bfloat16, assert_matches, expected

PTE = FIXTURES / "pte"


def recorded(name, method="forward"):
    record = expected(PTE / f"{name}.expected.json")
    run = record["runs"][method]
    inputs = [np.load(PTE / f) for f in run["inputs"]]
    outputs = [np.load(PTE / f) for f in run["outputs"]]
    return inputs, outputs


def test_methods_and_signature_are_executorchs():
    program = kiln.load(PTE / "multi_method.pte")
    record = expected(PTE / "multi_method.expected.json")["inspect"]["methods"]
    assert program.methods == [m["name"] for m in record]
    inputs, outputs = program.signature("encode")
    assert [s.shape for s in inputs] == [tuple(i["shape"]) for i in record[1]["inputs"]]
    assert [s.shape for s in outputs] == [tuple(o["shape"]) for o in record[1]["outputs"]]
    assert inputs[0] == kiln.ValueSpec("tensor", "float32", (2, 16), False)


def test_every_method_of_a_program_runs():
    program = kiln.load(PTE / "multi_method.pte")
    for method in ("forward", "encode", "decode"):
        inputs, outputs = recorded("multi_method", method)
        for got, want in zip(program.run(inputs, method=method), outputs):
            assert_matches(got, want, quantized=False, what=method)


def test_outputs_are_arrays_of_their_own():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], [want] = recorded("tiny_cnn")
    [first] = program.run([x])
    [second] = program.run([np.zeros_like(x)])
    # The first result is not a view of the method's memory, which the second run rewrote.
    assert_matches(first, want, quantized=False, what="first output")
    assert not np.array_equal(first, second)
    assert first.dtype == np.float32 and first.flags.writeable


def test_inputs_are_taken_in_any_layout():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], [want] = recorded("tiny_cnn")
    # A single array, a Fortran-ordered copy, a strided view and nested lists.
    fortran = np.asfortranarray(x)
    strided = np.repeat(x, 2, axis=3)[..., ::2]
    for given in (x, [fortran], [strided], [x.tolist()]):
        [got] = program.run(given)
        assert_matches(got, want, quantized=False, what=type(given).__name__)


def test_float64_is_cast_with_a_warning():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], [want] = recorded("tiny_cnn")
    with pytest.warns(UserWarning, match="float64 array given for a float32 input"):
        [got] = program.run([x.astype(np.float64)])
    assert_matches(got, want, quantized=False, what="cast input")


def test_scalar_inputs_and_outputs():
    # const_methods: methods returning an int, a double and a bool, as ExecuTorch recorded.
    program = kiln.load(PTE / "const_methods.pte")
    record = expected(PTE / "const_methods.expected.json")
    for method, run in record["runs"].items():
        outputs = program.run([np.load(PTE / f) for f in run["inputs"]], method=method)
        for got, file in zip(outputs, run["outputs"]):
            want = np.load(PTE / file)
            assert_matches(got, want, quantized=False, what=method)
            if want.ndim == 0 and method != "get_tensor":
                assert isinstance(got, (int, float, bool)), f"{method}: {type(got)}"


def test_bfloat16_inputs_and_outputs():
    ops = FIXTURES / "ops"
    record = expected(ops / "dtypes.expected.json")
    program = kiln.load(ops / record["files"]["pte"])
    run = record["runs"]["add_bfloat16"]
    # ExecuTorch's inputs and outputs are stored as bfloat16 bits (uint16).
    bits = [np.load(ops / f) for f in run["inputs"]]
    want = as_float32_if_bfloat16(np.load(ops / run["outputs"][0]), "bfloat16")
    for inputs in (bits, [as_float32_if_bfloat16(b, "bfloat16") for b in bits]):
        [got] = program.run(inputs, method="add_bfloat16")
        assert got.dtype == np.float32
        assert np.array_equal(got, want)


def run_on_threads(program, x, threads, runs):
    """`runs` runs of `program` on `x` from each of `threads` Python threads at once: the
    first output of every run."""
    results, errors = [], []

    def work():
        try:
            for _ in range(runs):
                results.append(program.run([x])[0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    started = [threading.Thread(target=work) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    assert not errors and len(results) == threads * runs, errors
    return results


def test_threads_share_a_program():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], [want] = recorded("tiny_cnn")
    results = run_on_threads(program, x, threads=3, runs=20)
    for got in results:
        assert_matches(got, want, quantized=False, what="threaded run")


def test_concurrent_runs_give_a_lone_runs_bits():
    # Four Python threads on one program whose layers split over a pool of two threads: each
    # run takes its own execution state (no lock held across a run), and gets the bits one
    # run alone gets, which match ExecuTorch's output.
    program = kiln.load(PTE / "mobilenet_v2_xnnpack.pte", threads=2)
    [x], [want] = recorded("mobilenet_v2_xnnpack")
    [alone] = program.run([x])
    assert_matches(alone, want, quantized=False, what="a lone run")
    for got in run_on_threads(program, x, threads=4, runs=5):
        assert np.array_equal(got.view(np.uint32), alone.view(np.uint32))


def test_external_data():
    inputs, outputs = recorded("external_constants")
    with pytest.raises(kiln.KilnError, match="external"):
        kiln.load(PTE / "external_constants.pte").run(inputs)
    program = kiln.load(PTE / "external_constants.pte", data=PTE / "external_constants.ptd")
    assert_matches(program.run(inputs)[0], outputs[0], quantized=False, what="with .ptd")


def test_load_options():
    [x], [want] = recorded("mobilenet_v2_xnnpack")
    for options in ({"threads": 1}, {"compile": False}, {"threads": 2, "max_memory": 1 << 30}):
        program = kiln.load(PTE / "mobilenet_v2_xnnpack.pte", **options)
        assert_matches(program.run([x])[0], want, quantized=False, what=str(options))
    with pytest.raises(kiln.MemoryLimitError, match="over the memory limit of 4096 bytes"):
        kiln.load(PTE / "mobilenet_v2_xnnpack.pte", max_memory=4096).run([x])


def test_bad_arguments_raise_input_errors():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], _ = recorded("tiny_cnn")
    with pytest.raises(kiln.InputError, match="expected 1 inputs, got 2"):
        program.run([x, x])
    with pytest.raises(kiln.InputError, match=r"expected a float32 array\[1, 3, 16, 16\], got int32"):
        program.run([x.astype(np.int32)])
    with pytest.raises(kiln.InputError, match=r"input 0: expected float32\[1, 3, 16, 16\], got float32\[1, 3, 8, 8\]"):
        program.run([x[:, :, :8, :8]])
    with pytest.raises(kiln.InputError, match=r"no method \"nope\" in the program \(methods: forward\)"):
        program.run([x], method="nope")
    multi = kiln.load(PTE / "multi_method.pte")
    with pytest.raises(kiln.InputError, match=r"no method \"forward\"|expected"):
        multi.run([])


def test_files_kiln_cannot_use_raise_file_errors(tmp_path):
    with pytest.raises(kiln.FileError, match="No such file"):
        kiln.load(tmp_path / "missing.pte")
    with pytest.raises(kiln.FileError):
        kiln.load(tmp_path)
    truncated = tmp_path / "truncated.pte"
    truncated.write_bytes((PTE / "tiny_cnn.pte").read_bytes()[:3000])
    with pytest.raises(kiln.InvalidFileError, match="truncated.pte"):
        kiln.load(truncated)
    assert issubclass(kiln.InvalidFileError, kiln.KilnError)


def test_inspect_is_the_commands_document():
    path = PTE / "mobilenet_v2_xnnpack.pte"
    document = kiln.load(path).inspect()
    printed = subprocess.run(
        [sys.executable, "-m", "kiln._cli", "inspect", "--json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout
    assert document == json.loads(printed)
    record = expected(PTE / "mobilenet_v2_xnnpack.expected.json")["inspect"]
    assert [m["name"] for m in document["methods"]] == [m["name"] for m in record["methods"]]
    assert kiln.inspect(FIXTURES / "irpa" / "typed.irpa")["entries"] == 5


def test_verify(tmp_path):
    assert kiln.verify(PTE / "tiny_cnn.pte") == "pte"
    assert kiln.verify(FIXTURES / "irpa" / "typed.irpa") == "irpa"
    bad = tmp_path / "bad.pte"
    data = bytearray((PTE / "tiny_cnn.pte").read_bytes())
    bad.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(kiln.InvalidFileError, match="bad.pte: "):
        kiln.verify(bad)
    (tmp_path / "unknown.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(kiln.FileError, match="unknown.bin"):
        kiln.verify(tmp_path / "unknown.bin")


def test_no_warnings_on_the_plain_path():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], _ = recorded("tiny_cnn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program.run([x])


def test_the_extension_checks_what_it_is_given():
    # The module under the Python layer never trusts its caller: sizes that do not match the
    # bytes, unknown dtypes and bad options are errors, not crashes.
    program = kiln.load(PTE / "tiny_cnn.pte")
    native = program._native
    with pytest.raises(kiln.InputError):
        native.run("forward", [("float32", [1, 3, 16, 16000], np.zeros(10, np.uint8))])
    with pytest.raises(kiln.InputError):
        native.run("forward", [("float32", [2**62, 2**62, 4], np.zeros(16, np.uint8))])
    with pytest.raises(kiln.InputError, match="unknown dtype"):
        native.run("forward", [("float99", [1], np.zeros(4, np.uint8))])
    with pytest.raises(kiln.InputError, match="not an array"):
        native.run("forward", [object()])
    for bad in ({"threads": 0}, {"threads": 1000}, {"max_memory": 0}):
        with pytest.raises(kiln.InputError):
            kiln.load(PTE / "tiny_cnn.pte", **bad)


def test_contiguous_inputs_are_not_copied():
    program = kiln.load(PTE / "tiny_cnn.pte")
    [x], _ = recorded("tiny_cnn")
    [spec], _ = program.signature()
    # What the extension reads is the caller's own memory, unless the layout needs a copy.
    assert np.shares_memory(kiln._argument(0, x, spec)[2], x)
    assert not np.shares_memory(kiln._argument(0, np.asfortranarray(x), spec)[2], x)


def test_memory_counts_the_packed_weights_once():
    path = PTE / "mobilenet_v2_xnnpack.pte"
    program = kiln.load(path)
    memory = program.memory()
    size = path.stat().st_size
    # mobilenet_v2's weights are nearly all of its file, and every one is packed at load.
    assert 0.8 * size < memory["packed_weights"] < 1.3 * size, memory
    assert memory["total"] == sum(
        memory[k] for k in ("packed_weights", "activations", "constants_made", "mapped_in_place")
    )
    # The file's pages that stay are the few constants runs read in place.
    assert memory["mapped_in_place"] < 0.05 * size, memory
    program.run([np.zeros((1, 3, 224, 224), np.float32)])
    # The process holds at least the prediction (its interpreter and numpy besides).
    assert memory["peak"] is None or program.memory()["peak"] >= memory["total"]


def test_load_times_add_up():
    program = kiln.load(PTE / "mobilenet_v2_xnnpack.pte")
    times = program.load_times()
    stages = ("map", "verify", "decode", "compile", "pack")
    assert all(times[k] >= 0 for k in stages), times
    assert abs(times["total"] - sum(times[k] for k in stages)) < 1e-6
    # Packing mobilenet_v2's weights is real work.
    assert times["pack"] > 0, times
