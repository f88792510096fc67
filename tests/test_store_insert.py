"""TrajectoryStore.insert: columns that hold one value go in as SQL literals; the rows
read back are the rows sent, whatever the batch's chunks and dictionaries."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shoal.store.schema import enum_array
from shoal.store.trajectory import TrajectoryStore, sql_constant

N = 5000  # above the size where constants are looked for


def _exposures(n: int, round_: int, platform: int, start: int = 0) -> pa.Table:
    return pa.table({
        "round": pa.array(np.full(n, round_, np.int32)),
        "platform": enum_array(np.full(n, platform), ("twitter", "reddit")),
        "agent": pa.array(np.arange(start, start + n, dtype=np.int32) // 3),
        "post_id": pa.array(np.arange(start, start + n, dtype=np.int64) * 7),
        "rank": pa.array((np.arange(start, start + n) % 3).astype(np.int16)),
    })


def _read(store: TrajectoryStore, table: str) -> list[tuple]:
    return store.con.execute(f"SELECT * FROM {table}").fetchall()


@pytest.mark.parametrize("chunks", [
    # one platform throughout: round and platform become literals
    [(0, 0, N)],
    # two chunks, one value, separate dictionaries: still one literal
    [(0, 1, N), (N, 1, N)],
    # platforms differ between chunks: the column is sent as it is
    [(0, 0, N), (N, 1, N)],
])
def test_rows_read_back_as_sent(tmp_path, chunks) -> None:
    data = pa.concat_tables([_exposures(n, 4, plat, start) for start, plat, n in chunks])
    store = TrajectoryStore(tmp_path / "t.duckdb", ["twitter", "reddit"])
    store.insert("exposures", data)
    names = ("twitter", "reddit")
    want = [(4, names[plat], a, p, r) for start, plat, n in chunks
            for a, p, r in zip(np.arange(start, start + n) // 3,
                               np.arange(start, start + n) * 7,
                               np.arange(start, start + n) % 3, strict=True)]
    assert _read(store, "exposures") == want
    store.close()


def test_a_batch_of_constants_keeps_its_rows_and_quotes(tmp_path) -> None:
    store = TrajectoryStore(tmp_path / "t.duckdb", ["twitter"])
    topic = pa.DictionaryArray.from_arrays(pa.array(np.zeros(N, np.int8)), pa.array(["it's"]))
    store.insert("beliefs", pa.table({
        "round": pa.array(np.full(N, 2, np.int32)), "agent": pa.array(np.full(N, 9, np.int32)),
        "topic": topic, "position": pa.array(np.full(N, 0.5)),
        "confidence": pa.array(np.full(N, 0.25))}))
    rows = _read(store, "beliefs")
    assert len(rows) == N and set(rows) == {(2, 9, "it's", 0.5, 0.25)}
    store.close()


def test_sql_constant() -> None:
    one = pa.chunked_array([pa.array([3, 3], pa.int32()), pa.array([3], pa.int32())])
    assert sql_constant(one) == "3"
    assert sql_constant(pa.chunked_array([pa.array([3, 4])])) is None
    assert sql_constant(pa.chunked_array([pa.array([3, None])])) is None
    assert sql_constant(pa.chunked_array([pa.array([0.5, 0.5])])) is None  # floats: as sent
    names = pa.DictionaryArray.from_arrays(pa.array([1, 1], pa.int8()), pa.array(["a", "o'k"]))
    assert sql_constant(pa.chunked_array([names])) == "'o''k'"
