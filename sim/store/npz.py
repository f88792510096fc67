"""Writing `.npz` archives without holding the GIL for the bytes.

`np.savez` writes each array into its zip member with `fp.write(chunk.tobytes())`: a copy
of every byte made while holding the GIL (a zip member is not a real file, so numpy's
`tofile` path does not apply). A checkpoint is written on the writer thread while the next
round runs on the others, so that copy stalled them: measured with py-spy, `np.savez`
of 96 MB held the GIL for about a third of its time. Here each array's buffer is handed to
the zip member as it is: zlib's CRC and the file write both release the GIL. The archive
is a standard one (the same members, headers and bytes `np.savez` writes), read by
`np.load`.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from typing import IO

import numpy as np
from numpy.lib import format as npy_format


def write_npz(file: IO[bytes], arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` (name -> array, no Python objects) to the open binary `file` as an
    uncompressed `.npz` archive, as `np.savez(file, **arrays)` would."""
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED,
                         allowZip64=True) as archive:
        for name, value in arrays.items():
            array = np.asanyarray(value)
            if array.dtype.hasobject:
                raise TypeError(f"array {name!r} holds Python objects, which an .npz "
                                "is not allowed to pickle here; store them encoded")
            # (numpy forces zip64 on every member: gh-10776)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                _write_npy(member, array)


def _write_npy(member: IO[bytes], array: np.ndarray) -> None:
    header = npy_format.header_data_from_array_1_0(array)
    try:
        npy_format.write_array_header_1_0(member, header)
    except ValueError:  # a header over 64 KiB (a huge structured dtype): format 2.0
        npy_format.write_array_header_2_0(member, header)
    if not array.size or not array.itemsize:
        return
    # the bytes in the order the header says: Fortran order is kept as numpy keeps it
    flat = array.T if header["fortran_order"] else np.ascontiguousarray(array)
    member.write(flat.reshape(-1).view(np.uint8).data)
