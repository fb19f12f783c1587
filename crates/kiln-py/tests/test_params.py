"""`kiln.params`: archives written by IREE and safetensors files written by the `safetensors`
package load as the arrays those tools were given, and saving those arrays writes the same
bytes the tools wrote (tools/fixtures/irpa/make_typed_fixtures.py and make_irpa_fixtures.py)."""

import json

import numpy as np
import pytest

import kiln
from kiln import params

IRPA = __import__("conftest").FIXTURES / "irpa"


def typed_arrays():
    """The arrays IREE's `parameter_index_add_numpy_ndarray` stored in typed.irpa, in order
    (the script saved each beside the archive)."""
    args = json.loads((IRPA / "typed.manifest.json").read_text())["kiln_create"]
    pairs = [a.split("=", 1) for a in args if a != "--data"]
    return {name: np.load(IRPA / file) for name, file in pairs}


# The arrays make_irpa_fixtures.py gave safetensors.numpy.save_file for small.safetensors.
SMALL = {
    "b.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
    "a.bias": np.arange(3, dtype=np.float16),
    "c.idx": np.asarray([1, -2, 3], dtype=np.int64),
    "d.mask": np.asarray([True, False, True]),
    "e.bytes": np.arange(7, dtype=np.uint8),
}
SMALL_METADATA = {"format": "np", "origin": "kiln fixtures"}


def assert_same_arrays(got, want):
    assert sorted(got) == sorted(want)
    for key, array in want.items():
        assert got[key].dtype == array.dtype, key
        assert got[key].shape == array.shape, key
        assert np.array_equal(got[key], array), key


def test_an_iree_archive_loads_as_the_arrays_iree_stored():
    got = params.load(IRPA / "typed.irpa")
    want = typed_arrays()
    assert list(got) == list(want)
    assert_same_arrays(got, want)


def test_saving_those_arrays_writes_irees_bytes(tmp_path):
    out = tmp_path / "typed.irpa"
    params.save(out, typed_arrays())
    assert out.read_bytes() == (IRPA / "typed.irpa").read_bytes()


def test_a_safetensors_file_loads_as_the_arrays_given_to_safetensors():
    assert_same_arrays(params.load(IRPA / "small.safetensors"), SMALL)


def test_saving_those_arrays_writes_the_safetensors_packages_bytes(tmp_path):
    out = tmp_path / "small.safetensors"
    params.save(out, SMALL, metadata=SMALL_METADATA)
    got, want = out.read_bytes(), (IRPA / "small.safetensors").read_bytes()
    # The same bytes but for the order of the __metadata__ keys, which the reference writer
    # keeps in a hash map (its order differs from run to run, in the package as in kiln).
    assert len(got) == len(want) and got[:8] == want[:8]
    n = 8 + int.from_bytes(want[:8], "little")
    assert json.loads(got[8:n]) == json.loads(want[8:n])
    assert got[n:] == want[n:]


def test_gguf_typed_tensors_and_raw_blocks():
    got = params.load(IRPA / "small.gguf")
    # make_irpa_fixtures.py: gguf-py's writer was given these arrays (GGUF stores dimensions
    # innermost first; the reader gives them outermost first, as NumPy's shape).
    assert np.array_equal(got["tok_embd.weight"], np.linspace(0, 1, 24, dtype=np.float32).reshape(4, 6))
    assert np.array_equal(got["norm.weight"], np.ones(6, dtype=np.float16))
    # Two Q8_0 blocks: NumPy has no such type, so the raw bytes.
    assert got["blk.0.q8"].dtype == np.uint8 and bytes(got["blk.0.q8"]) == bytes(range(68))


def test_untyped_entries_are_their_bytes_and_splats_are_expanded():
    # data_metadata.irpa: written by IREE's Python API from the entries its manifest lists.
    for case in ("data_metadata", "splats", "many"):
        manifest = json.loads((IRPA / f"{case}.manifest.json").read_text())
        got = params.load(IRPA / f"{case}.irpa")
        for entry in manifest["entries"]:
            if entry["kind"] == "data":
                want = bytes.fromhex(entry["hex"])
            else:
                pattern = bytes.fromhex(entry["pattern"])
                want = (pattern * (entry["length"] // len(pattern)))[: entry["length"]]
            assert got[entry["name"]].dtype == np.uint8, (case, entry["name"])
            assert bytes(got[entry["name"]]) == want, (case, entry["name"])
    with pytest.raises(kiln.MemoryLimitError, match="`p1` is a splat of 64 bytes"):
        params.load(IRPA / "splats.irpa", max_bytes=32)


def test_round_trip_through_both_formats(tmp_path):
    arrays = {
        "w": np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32),
        "big_endian": np.arange(4, dtype=">i4"),
        "strided": np.arange(20, dtype=np.int16).reshape(4, 5)[:, ::2],
        "scalar": np.array(7, dtype=np.int64),
    }
    for suffix in ("irpa", "safetensors"):
        path = tmp_path / f"a.{suffix}"
        params.save(path, arrays)
        back = params.load(path)
        for key, array in arrays.items():
            assert back[key].shape == array.shape, (suffix, key)
            assert np.array_equal(back[key], array), (suffix, key)
        assert kiln.verify(path) == suffix


def test_bad_saves_write_nothing(tmp_path):
    with pytest.raises(kiln.InputError, match="writes .irpa and .safetensors"):
        params.save(tmp_path / "a.bin", {"x": np.zeros(2)})
    with pytest.raises(kiln.InputError, match="no file metadata"):
        params.save(tmp_path / "a.irpa", {"x": np.zeros(2)}, metadata={"k": "v"})
    with pytest.raises(kiln.InputError, match="no type for"):
        params.save(tmp_path / "a.safetensors", {"x": np.zeros(2, dtype="datetime64[s]")})
    assert list(tmp_path.iterdir()) == []


def test_files_that_are_not_parameter_files(tmp_path):
    with pytest.raises(kiln.InputError, match="not a parameter source"):
        params.load(IRPA / "npy" / "typed.w.npy")
    with pytest.raises(kiln.FileError):
        params.load(tmp_path / "missing.irpa")
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes((IRPA / "small.safetensors").read_bytes()[:-3])
    with pytest.raises(kiln.InvalidFileError, match="broken.safetensors"):
        params.load(broken)
