"""Multi-node Ray: a real three-node cluster on this machine (tests/cluster.py: a head and
two worker nodes, each its own raylet and object store), started once for the module.

Runs go through the `shoal` command line in subprocesses joined to the cluster with
`--address` (this process never joins it: it may be connected to the session's local Ray
instance). Every table equals the same run's on the local executor, across a SIGKILL and a
`shoal resume`, and for a fork of an LLM run; with `placement: spread` the shards of a
run are on all three nodes, as the cluster's own actor table says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shoal.cli.main import main
from tests.cluster import ray_cluster
from tests.conftest import CONFIGS, ROOT, write_config
from tests.helpers import tables_differ

ROUNDS = 5
SMALL = {"rounds": ROUNDS, "population": {"size": 200, "groups": [
    {"name": "activists", "fraction": 0.1}]}}


@pytest.fixture(scope="module")
def cluster():
    """Head + node_a + node_b, one CPU each, for the whole module. It comes up in the
    background: the first use of its address waits for it."""
    with ray_cluster() as c:
        yield c


def shoal(cluster, *args: str, env: dict | None = None, cwd: Path = ROOT
          ) -> subprocess.CompletedProcess:
    """`shoal ARGS` in a fresh process that can join the cluster."""
    return subprocess.run([sys.executable, "-m", "shoal.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env={**cluster.env, **(env or {})}, timeout=300)


def on(cluster) -> list[str]:
    """The flags that run the shards on the cluster."""
    return ["--executor", "ray", "--address", cluster.address]


def only_run(folder: Path, prefix: str = "") -> Path:
    (run_dir,) = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith(prefix)]
    return run_dir


def shard_nodes(cluster, seen: set[str]) -> dict[str, set[str]]:
    """The nodes (by name) the shards of each job run since `seen` ran on, by job, in the
    order the jobs started."""
    jobs: dict[str, set[str]] = {}
    for actor in cluster.actors():
        if actor["id"] not in seen:
            jobs.setdefault(actor["job"], set()).add(actor["node"])
    return jobs


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """The quick start, smaller and shorter."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(SMALL)
    return write_config(tmp_path_factory.mktemp("cfg") / "small.yaml", data)


@pytest.fixture(scope="module")
def local(config, tmp_path_factory) -> Path:
    """The run on the local executor (its run directory)."""
    out = tmp_path_factory.mktemp("local")
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 0
    return only_run(out)


@pytest.mark.slow
def test_killed_and_resumed_on_the_cluster_the_tables_equal_the_local_run(
        cluster, config, local, tmp_path):  # (cluster first: it starts while local runs)
    """Run on the cluster (shards: auto = one per CPU = 3, spread: one per node), SIGKILL
    after round 3 is committed, `shoal resume` on the cluster with 2 shards: every table
    equals the local run's; the first run's shards ran on all three nodes, the resumed
    run's on two."""
    seen = {a["id"] for a in cluster.actors()}
    killed = shoal(cluster, "run", str(config), *on(cluster), "--out", str(tmp_path),
                   "--quiet", env={"SHOAL_FAULT": "after_commit:3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    run_dir = only_run(tmp_path)
    assert json.loads((run_dir / "run.json").read_text())["shards"] == cluster.cpus
    resumed = shoal(cluster, "resume", str(run_dir), *on(cluster), "--shards", "2",
                    "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "finished" and meta["executor"] == "ray"
    assert tables_differ(local / "trajectory.duckdb", run_dir / "trajectory.duckdb") == []
    jobs = shard_nodes(cluster, seen)  # the killed run's, then the resumed run's
    assert [len(nodes) for nodes in jobs.values()] == [3, 2], jobs
    assert set(next(iter(jobs.values()))) == set(cluster.nodes)


@pytest.fixture(scope="module")
def llm_local(tmp_path_factory) -> tuple[Path, Path]:
    """The LLM quick start, small, against the loopback server the run starts, its answers
    recorded in the run's LLM cache, run locally; and its fork (a new seed after round 1)
    run locally too: (run dir, fork dir)."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=3, population={"size": 60})
    data["llm"]["cache"] = "record"
    data["llm"]["agents"]["fraction"] = 0.5
    data["interventions"][0]["round"] = 2
    out = tmp_path_factory.mktemp("llm")
    assert main(["run", str(write_config(out / "llm.yaml", data)), "--out", str(out / "runs"),
                 "--quiet"]) == 0
    parent = only_run(out / "runs")
    assert main(["fork", str(parent), "--round", "1", "--seed", "11", "--name", "fork",
                 "--quiet"]) == 0
    return parent, only_run(out / "runs", "fork")


def cache_entries(run_dir: Path) -> dict[str, int]:
    """Lines of each writer's LLM cache file in a run directory, by writer (s0, s1...)."""
    found: dict[str, int] = {}
    for path in (run_dir / "llm_cache").glob("*.jsonl"):
        writer = path.name.split(".")[1]
        found[writer] = found.get(writer, 0) + len(path.read_bytes().splitlines())
    return found


@pytest.mark.slow
def test_an_llm_fork_on_the_cluster_equals_the_local_fork(cluster, llm_local, tmp_path):
    """The local LLM run, forked and run on the cluster: one shard per node
    (`shards: per_node`), placement `pack` (Ray's default scheduler), started with a
    relative --out in another working directory. Every table equals the fork made and run
    locally. The shards found the parent's answers and wrote new ones, as many as the
    local fork did, into the fork's own run directory (the shards got absolute folders)
    and nowhere else."""
    parent, local_fork = llm_local
    work = tmp_path / "elsewhere"
    work.mkdir()
    forked = shoal(cluster, "fork", str(parent), "--round", "1", "--seed", "11",
                   "--name", "fork", "--out", "runs", "--quiet",
                   "--set", "executor.kind=ray",
                   "--set", f"executor.address={json.dumps(cluster.address)}",
                   "--set", "executor.placement=pack", "--set", "executor.shards=per_node",
                   cwd=work)
    assert forked.returncode == 0, forked.stderr
    fork_dir = only_run(work / "runs", "fork")
    assert json.loads((fork_dir / "run.json").read_text())["shards"] == len(cluster.nodes)
    assert tables_differ(local_fork / "trajectory.duckdb",
                         fork_dir / "trajectory.duckdb") == []
    entries = cache_entries(fork_dir)
    assert set(entries) <= {f"s{s}" for s in range(len(cluster.nodes))}
    assert sum(entries.values()) == sum(cache_entries(local_fork).values()) > 0
    assert not (ROOT / "runs" / fork_dir.name).exists()


@pytest.mark.slow
def test_the_cluster_helper_leaves_ray_s_address_file_alone(cluster):
    """A bare `ray.init()` elsewhere on this machine is not pointed at the test cluster
    (Ray's Cluster would write its address to /tmp/ray/ray_current_cluster)."""
    from ray._common.utils import get_ray_address_file

    path = Path(get_ray_address_file(None))
    assert not path.exists() or cluster.address not in path.read_text()
    assert "RAY_ADDRESS" not in os.environ or os.environ["RAY_ADDRESS"] != cluster.address


# ------------------------------------------------------------------ without a cluster


def test_placement_and_shards_are_validated_naming_the_field(tmp_path, capsys):
    """A placement or shard count that does not exist: exit 2 naming `executor.placement`
    / `executor.shards` and the values that do."""
    config = CONFIGS / "quickstart.yaml"
    assert main(["check", str(config), "--set", "executor.placement=wide"]) == 2
    assert ("executor.placement: must be one of 'spread' or 'pack', got 'wide'"
            in capsys.readouterr().err)
    assert main(["check", str(config), "--set", "executor.shards=per_cpu"]) == 2
    assert "executor.shards: must be a whole number >= 1, 'auto' or 'per_node'" in (
        capsys.readouterr().err)
    assert main(["check", str(config), "--set", "executor.shards=per_node"]) == 0


def test_spread_goes_round_robin_by_cpus_and_auto_counts_cpus():
    """`spread` visits the nodes in passes (a node with c CPUs in the first c passes), the
    driver's node first; `auto` is the CPUs of the nodes with CPUs, `per_node` their
    number; a node without CPUs is left out unless every node is."""
    from shoal.engine.executors import resolve_shards, spread_over, worker_nodes

    def node(i, cpus, alive=True):
        return {"NodeID": i, "NodeManagerAddress": "10.0.0.1", "Alive": alive,
                "Resources": {"CPU": cpus} if cpus else {}}

    nodes = worker_nodes([node("a", 4), node("b", 1), node("head", 0), node("gone", 8, False)])
    assert [n["NodeID"] for n in nodes] == ["a", "b"]
    assert resolve_shards("ray", "auto", nodes) == 5
    assert resolve_shards("ray", "per_node", nodes) == 2
    assert resolve_shards("local", "per_node", nodes) == resolve_shards("local", "auto") == 1
    assert spread_over(nodes, 5, first="b") == ["b", "a", "a", "a", "a"]
    assert spread_over(nodes, 7) == ["a", "b", "a", "a", "a", "a", "b"]
    assert spread_over([node("x", 1), node("y", 1), node("z", 1)], 4) == ["x", "y", "z", "x"]
    assert [n["NodeID"] for n in worker_nodes([node("h", 0), node("w", 0)])] == ["h", "w"]


def test_update_puts_the_world_once_for_all_actors():
    """After an intervention the new config and population go to the object store once
    (two puts, whatever the shard count), each actor getting the references."""
    from shoal.engine.executors import RayExecutor

    class Method:
        def __init__(self, calls):
            self.calls = calls

        def remote(self, *args):
            self.calls.append(args)
            return len(self.calls)

    class FakeRay:
        def __init__(self):
            self.puts = []

        def put(self, value):
            self.puts.append(value)
            return f"ref{len(self.puts)}"

        def get(self, refs):
            return refs

    class Actor:
        def __init__(self):
            self.update = Method([])

    executor = RayExecutor.__new__(RayExecutor)
    executor._ray, executor.actors = FakeRay(), [Actor() for _ in range(5)]
    executor.update("cfg", "population")
    assert executor._ray.puts == ["cfg", "population"]
    assert all(a.update.calls == [("ref1", "ref2")] for a in executor.actors)
