"""The table registry (sim/store/tables.py): every table is declared once, the declaration
travels in the file, and no list of table names is kept by hand anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import duckdb
import pytest

from shoal.core.registry import load_plugins
from shoal.store.schema import schema
from shoal.store.tables import TABLES, TableRegistry, TableSpec, file_tables, inferred
from shoal.store.trajectory import TrajectoryStore
from tests.conftest import ROOT

# Where tables are declared (each module declares the tables of the component it serves).
DECLARING = {"sim/store/tables.py", "sim/store/schema.py", "sim/store/knowledge.py",
             "sim/store/traces.py", "sim/market/tables.py"}


def _hand_lists(path: Path, names: set[str]) -> list[tuple[int, list[str]]]:
    """Literal tuples, lists and sets of three or more table names (and nothing else)
    that code iterates over or keeps under a module-level name: a hand-kept list."""
    tree = ast.parse(path.read_text())
    kept = [n.value for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)]
    walked = [n.iter for n in ast.walk(tree) if isinstance(n, ast.For | ast.comprehension)]
    out = []
    for node in kept + walked:
        if not isinstance(node, ast.Tuple | ast.List | ast.Set):
            continue
        values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        if len(set(values)) >= 3 and all(isinstance(v, str) and v in names for v in values):
            out.append((node.lineno, values))
    return out


def test_no_hand_written_list_of_table_names_outside_the_declarations():
    load_plugins()
    names = {s.name for s in TABLES}
    found = {}
    for folder in ("sim", "agents", "memory", "beliefs", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in DECLARING and (hits := _hand_lists(path, names)):
                found[rel] = hits
    assert found == {}
    # the check does find one
    sample = ROOT / "tests" / "data" / "hand_list_sample.py"
    sample.write_text('TRUNCATED = ("prices", "trades", "positions")\n')
    try:
        assert _hand_lists(sample, names) == [(1, ["prices", "trades", "positions"])]
    finally:
        sample.unlink()


def test_every_layer_declares_its_tables_with_an_owner():
    load_plugins()
    owners = {s.owner for s in TABLES}
    assert {"engine", "market", "knowledge", "analyst", "interviews", "surveys"} <= owners
    for spec in TABLES:
        assert spec.doc, spec.name
        assert (spec.round_key or spec.post_key or spec.lineage != "inherit"), spec.name
        for column in (*spec.volatile, *filter(None, (spec.round_key, spec.post_key,
                                                      spec.as_of))):
            assert column in spec.column_names, (spec.name, column)


def test_a_file_keeps_each_tables_declaration():
    """A new file's tables carry their declarations as comments; read back, they are the
    registry's (columns aside, which the file renders in its own words)."""
    con = duckdb.connect()
    con.execute(schema(["twitter", "reddit", "market"]))
    found = file_tables(con)
    assert set(found) == {s.name for s in TABLES.with_run()}
    for name, spec in found.items():
        declared = TABLES.get(name)
        assert (spec.owner, spec.round_key, spec.post_key, spec.lineage, spec.volatile,
                spec.order, spec.kept) == (declared.owner, declared.round_key,
                                           declared.post_key, declared.lineage,
                                           declared.volatile, declared.order, declared.kept)


def test_an_old_file_without_declarations_is_read_by_name_or_by_its_columns(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE beliefs (round INTEGER, agent INTEGER, topic VARCHAR, "
                "position DOUBLE, confidence DOUBLE)")
    con.execute("CREATE TABLE mystery (round INTEGER, x DOUBLE)")
    con.execute("CREATE TABLE notes (text VARCHAR)")
    found = file_tables(con)
    con.close()
    assert found["beliefs"] == TABLES.get("beliefs")
    assert (found["mystery"].round_key, found["mystery"].lineage) == ("round", "inherit")
    assert (found["notes"].round_key, found["notes"].lineage) == (None, "none")
    assert found["notes"] == inferred("notes", "text VARCHAR")


def test_a_resumed_old_file_gets_the_tables_it_lacks(tmp_path):
    """Opening a file for writing (a resume) creates the declared tables it does not have,
    so the rows of layers added since fit."""
    db = tmp_path / "t.duckdb"
    TrajectoryStore(db, ["twitter"]).close()
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE prices")
    con.close()
    store = TrajectoryStore(db)
    assert "prices" in file_tables(store.con)
    store.close()


def test_declarations_are_checked():
    registry = TableRegistry()
    spec = registry.declare(TableSpec("toy", "round INTEGER", owner="a", doc="x"))
    assert registry.declare(spec) is spec  # the same again: nothing changes
    with pytest.raises(Exception, match="declared twice"):
        registry.declare(TableSpec("toy", "round INTEGER, y INTEGER", owner="b"))
    with pytest.raises(Exception, match="not both"):
        TableSpec("t", "round INTEGER, post_id BIGINT", "a", round_key="round",
                  post_key="post_id")
    with pytest.raises(Exception, match="lower-case identifier"):
        TableSpec("Bad Name", "x INTEGER", "a")
    assert spec.upto(3, 10) == "round <= 3"
    assert TableSpec("p", "post_id BIGINT", "a", round_key=None,
                     post_key="post_id").upto(3, 10) == "post_id < 10"
    assert TableSpec.from_comment("toy", "round INTEGER", "not json") is None


def test_a_table_declared_twice_says_what_differs():
    """Two declarations of one table by the same owner (a plug-in edited, or two modules
    of it) say which fields differ, not only the owner twice."""
    registry = TableRegistry()
    registry.declare(TableSpec("tally", "round INTEGER, n INTEGER", owner="toy"))
    with pytest.raises(Exception, match=r"by toy and by toy, with different columns$"):
        registry.declare(TableSpec("tally", "round INTEGER, n BIGINT", owner="toy"))
    with pytest.raises(Exception, match=r"different columns, listed$"):
        registry.declare(TableSpec("tally", "round INTEGER, n INTEGER, k INTEGER",
                                   owner="toy", listed=("n", "k")))


@pytest.mark.parametrize("listed", ["nk", ["n", "k"], ("n", "k", "round"), ("n", 1)])
def test_listed_must_be_a_pair_of_column_names(listed):
    """`listed` is a (value, position) pair: a string of two letters, a list or a triple
    is an error naming the table, not a declaration that happens to unpack."""
    with pytest.raises(Exception, match="is not a pair of column names"):
        TableSpec("t", "round INTEGER, n INTEGER, k INTEGER", owner="a", listed=listed)
