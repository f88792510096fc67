"""The checkpoints' .npz writer: the archive np.savez writes, without its copies."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from shoal.store.npz import write_npz


def _arrays() -> dict[str, np.ndarray]:
    r = np.random.default_rng(0)
    return {
        "floats": r.random(1000),
        "fortran": np.asfortranarray(r.random((30, 7))),
        "strided": r.random((9, 4))[:, ::2],
        "reversed": np.arange(10)[::-1],
        "empty": np.empty(0, np.int64),
        "empty_2d": np.empty((0, 3)),
        "scalar": np.array(3.5, np.float32),
        "dates": np.array(["2020-01-01", "2021-06-30"], "datetime64[s]"),
        "unicode": np.array(["héllo", "x"]),
        "flags": r.random(5) < 0.5,
        "big_endian": np.arange(10, dtype=">i4"),
        "records": np.zeros(3, [("x", "<i4"), ("y", "<f8")]),
        "bytes": np.frombuffer(b"\x00\x01\xff", np.uint8),
    }


def test_members_are_np_savez_s_bytes_and_load_back() -> None:
    arrays = _arrays()
    ours, numpys = io.BytesIO(), io.BytesIO()
    write_npz(ours, arrays)
    np.savez(numpys, **arrays)  # type: ignore[arg-type]
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(numpys) as b:
        assert a.namelist() == b.namelist() == [f"{k}.npy" for k in arrays]
        for name in a.namelist():
            assert a.read(name) == b.read(name), name
            assert a.getinfo(name).compress_type == zipfile.ZIP_STORED
    ours.seek(0)
    with np.load(ours) as loaded:
        for key, value in arrays.items():
            assert loaded[key].dtype == value.dtype, key
            assert loaded[key].shape == value.shape, key
            assert np.array_equal(loaded[key], value), key
            assert np.isfortran(loaded[key]) == np.isfortran(value), key


def test_python_objects_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="'texts' holds Python objects"):
        write_npz(io.BytesIO(), {"ok": np.arange(3), "texts": np.array(["a", 1], object)})
