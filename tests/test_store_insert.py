"""TrajectoryStore.insert: columns that hold one value go in as SQL literals; the rows
read back are the rows sent, whatever the batch's chunks and dictionaries."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from shoal.agents.observation import PlatformView
from shoal.core.workers import SERIAL, Workers
from shoal.engine.round_log import PlatformEnum, exposures_table
from shoal.platforms.spec import spec as platform_spec
from shoal.store.schema import enum_array, schema
from shoal.store.tables import file_tables
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


# ---------------------------------------------------------------------- listed tables
# `exposures` is kept listed (one row per feed, its post ids by rank): the rows read back
# through its view are the feed items shown, whichever shape a batch comes in and whether
# the file keeps the table listed or, written before, as rows.

FEED = np.array([[5, 3, 8], [-1, -1, -1], [7, -1, 2], [-1, 4, -1], [1, 6, -1]])
AGENTS = np.array([0, 2, 3, 7, 9])


def _view() -> PlatformView:
    a, k = FEED.shape
    zeros = np.zeros((a, k), np.int32)
    return PlatformView(
        platform=platform_spec("twitter").code, name="twitter", agents=AGENTS, feed=FEED,
        author=zeros.astype(np.int64), kind=zeros.astype(np.int8),
        stance=np.zeros((a, k, 1)), up=zeros, down=zeros, follows_author=zeros.astype(bool),
        trust=zeros.astype(float), voted=zeros.astype(bool), reposted=zeros.astype(bool))


SHOWN = [(3, "twitter", int(AGENTS[r]), int(FEED[r, k]), k)
         for r, k in zip(*np.nonzero(FEED >= 0), strict=True)]


@pytest.mark.parametrize("workers", [SERIAL, Workers(3, min_rows=1)])
def test_feeds_with_empty_slots_read_back_as_shown(tmp_path, workers) -> None:
    penum = PlatformEnum(("twitter",), np.array([0, -1, -1, -1], np.int8))
    listed = exposures_table(3, [_view()], penum, workers)
    # agents shown nothing have no row; a list ends at its last item, NULL for a gap
    assert listed.column("post_id").to_pylist() == [[5, 3, 8], [7, None, 2], [None, 4],
                                                    [1, 6]]
    store = TrajectoryStore(tmp_path / "t.duckdb", ["twitter"])
    store.insert("exposures", listed)
    assert _read(store, "exposures ORDER BY agent, rank") == SHOWN
    store.close()


def test_rows_with_gaps_are_kept_listed(tmp_path) -> None:
    rows = pa.table({"round": pa.array([3] * len(SHOWN), pa.int32()),
                     "platform": pa.array([s[1] for s in SHOWN]),
                     "agent": pa.array([s[2] for s in SHOWN], pa.int32()),
                     "post_id": pa.array([s[3] for s in SHOWN], pa.int64()),
                     "rank": pa.array([s[4] for s in SHOWN], pa.int16())})
    store = TrajectoryStore(tmp_path / "t.duckdb", ["twitter"])
    store.insert("exposures", rows)  # a fork's copy of its parent's rows comes so
    assert _read(store, "exposures_listed") == [
        (3, "twitter", 0, [5, 3, 8]), (3, "twitter", 3, [7, None, 2]),
        (3, "twitter", 7, [None, 4]), (3, "twitter", 9, [1, 6])]
    assert _read(store, "exposures ORDER BY agent, rank") == SHOWN
    assert file_tables(store.con)["exposures"].listed == ("post_id", "rank")
    store.close()


def test_a_file_that_keeps_rows_gets_rows(tmp_path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(schema(["twitter"], plain=True))  # `exposures` as a table, as files had it
    con.close()
    penum = PlatformEnum(("twitter",), np.array([0, -1, -1, -1], np.int8))
    store = TrajectoryStore(path)
    store.insert("exposures", exposures_table(3, [_view()], penum))
    assert _read(store, "exposures") == SHOWN
    spec = file_tables(store.con)["exposures"]
    assert spec.listed is None and spec.stored == "exposures"
    store.close()
