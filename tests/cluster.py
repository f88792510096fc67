"""A real multi-node Ray cluster on this one machine, for tests and benchmarks.

`ray_cluster()` starts a head and two worker nodes with Ray's own
`ray.cluster_utils.Cluster` (every node its own raylet and object store, each with its own
`num_cpus` and a custom resource naming it, all on 127.0.0.1) and yields a `LocalCluster`
at once (its `address`, what `shoal run --executor ray --address ...` takes, waits until
every node is up); the cluster is stopped on exit.

The cluster runs in a child process (`python -m tests.cluster --serve SPEC`), and nothing
here connects the calling process to it: a process can join only one Ray cluster, and a
pytest process may already be connected to the session's local instance (the `ray_session`
fixture). Simulations run on the cluster as `shoal` subprocesses (with `cluster.env`), and
`cluster.actors()` asks the serving process, which reads the cluster's own actor table,
where their shard actors ran.

Ray's `Cluster` writes the head's address to /tmp/ray/ray_current_cluster (so that a bare
`ray.init()` on this machine would join it) and deletes that file when it stops; neither
happens here, so other Ray users of this machine (other test sessions) are not diverted to
this cluster, nor lose their own file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, num_cpus): the head first. The name is also a custom resource of the node
# ({name: 1}), so a node can be told apart by its resources.
NODES = (("head", 1), ("node_a", 1), ("node_b", 1))
ANSWER = "shoal-test-cluster: "  # how the serving process's answers start


class LocalCluster:
    """A test cluster being started, then running: its address and its nodes' names,
    CPUs and ids. The first use of `address` or `nodes` waits until every node is up, so
    the caller can do other work meanwhile."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self._proc = proc
        self._log = log
        self._info: dict | None = None

    def wait(self) -> LocalCluster:
        """Block until the cluster is up (the serving process says so); itself."""
        if self._info is None:
            self._info = json.loads(_answer(self._proc, self._log))
        return self

    @property
    def address(self) -> str:
        """The head's GCS address, HOST:PORT (what `--address` takes)."""
        return self.wait()._info["address"]

    @property
    def nodes(self) -> dict[str, dict]:
        """Node name -> {cpus, node_id}; the head first."""
        return self.wait()._info["nodes"]

    @property
    def env(self) -> dict[str, str]:
        """The environment a process joining this cluster needs (`cluster_env`)."""
        return cluster_env()

    @property
    def cpus(self) -> int:
        """The CPUs of every node together."""
        return sum(n["cpus"] for n in self.nodes.values())

    def name_of(self, node_id: str) -> str | None:
        """The name of the node with this id (None: not one of this cluster's)."""
        return next((name for name, n in self.nodes.items() if n["node_id"] == node_id),
                    None)

    def actors(self, class_name: str = "_ShardActor") -> list[dict]:
        """Every actor of that class the cluster has run (alive or dead: the GCS keeps
        them), oldest first: {id, job, node (its name), node_id, state}."""
        self.wait()
        self._proc.stdin.write("actors\n")
        self._proc.stdin.flush()
        found = json.loads(_answer(self._proc, self._log))
        return [{**a, "node": self.name_of(a["node_id"])} for a in found
                if a["class"] == class_name]


def cluster_env() -> dict[str, str]:
    """The environment for the cluster's process and for every process that joins it
    (`shoal ... --address`): this repository importable, no RAY_ADDRESS pointing
    elsewhere, and Ray's node address kept on loopback. (On Linux a driver joining
    127.0.0.1:PORT has Ray rewrite it to the machine's network address, where a cluster
    whose nodes listen on 127.0.0.1 does not answer; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    makes Ray take 127.0.0.1 as this machine's node address, as it does on macOS.)"""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


@contextmanager
def ray_cluster(nodes: tuple[tuple[str, int], ...] = NODES,
                object_store_mb: int = 100) -> Iterator[LocalCluster]:
    """Start a Ray cluster of `nodes` (the first is the head) on this machine and yield it
    at once (it comes up in the background: `LocalCluster.wait`); stop it (every node's
    processes) on exit. The serving process's output goes to a log file, quoted if it
    fails."""
    spec = json.dumps({"nodes": [list(n) for n in nodes], "object_store_mb": object_store_mb})
    with tempfile.TemporaryDirectory(prefix="shoal-test-cluster-") as tmp:
        log = Path(tmp) / "serve.log"
        with open(log, "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tests.cluster", "--serve", spec],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, text=True, cwd=ROOT, env=cluster_env())
        try:
            yield LocalCluster(proc, log)
        finally:
            _stop(proc)


def _answer(proc: subprocess.Popen, log: Path) -> str:
    """The next answer of the serving process (a line after ANSWER; anything else it may
    print is skipped)."""
    while True:
        line = proc.stdout.readline()  # (blocks until it answers or dies)
        if not line:
            proc.wait(10)
            raise RuntimeError(f"the test cluster's process ended (exit {proc.returncode}):"
                               f"\n{log.read_text()[-3000:]}")
        if line.startswith(ANSWER):
            return line.removeprefix(ANSWER)


def _stop(proc: subprocess.Popen) -> None:
    """Ask the serving process to stop the cluster (its stdin closes), wait for it; kill
    it (its nodes' reaper then stops their processes) if it does not end in time."""
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


# ------------------------------------------------------------------ the serving process


def _serve(spec: dict) -> int:
    """Start the cluster, print its address and nodes (one JSON line), block until stdin
    closes, then remove every node."""
    import ray._common.utils as common_utils
    import ray._private.utils as private_utils
    from ray.cluster_utils import Cluster

    private_utils.write_ray_address = lambda *a, **k: None  # see the module's docstring
    common_utils.reset_ray_address = lambda *a, **k: None
    mb = spec["object_store_mb"] * 1024 * 1024
    (head_name, head_cpus), *workers = spec["nodes"]

    def node_args(name: str, cpus: int) -> dict:
        return {"num_cpus": cpus, "resources": {name: 1}, "node_ip_address": "127.0.0.1",
                "object_store_memory": mb}

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={**node_args(head_name, head_cpus),
                                      "include_dashboard": False})
    try:
        for name, cpus in workers:  # started together, then waited for
            cluster.add_node(wait=False, **node_args(name, cpus))
        cluster.wait_for_nodes(timeout=120)
        ids = _node_ids(cluster, {name for name, _ in spec["nodes"]})
        nodes = {name: {"cpus": cpus, "node_id": ids[name]} for name, cpus in spec["nodes"]}
        print(ANSWER + json.dumps({"address": cluster.address, "nodes": nodes}), flush=True)
        for line in sys.stdin:  # until the parent closes it (or dies)
            if line.strip() == "actors":
                print(ANSWER + json.dumps(_actors(cluster)), flush=True)
    finally:
        for node in list(cluster.worker_nodes):
            cluster.remove_node(node)
        if cluster.head_node is not None:
            cluster.remove_node(cluster.head_node)
    return 0


def _actors(cluster) -> list[dict]:
    """The cluster's actor table (alive and dead actors), oldest first."""
    table = sorted(cluster.global_state.actor_table(None).values(),
                   key=lambda a: a["StartTime"])
    return [{"id": a["ActorID"], "class": a["ActorClassName"], "job": a["JobID"],
             "node_id": a["Address"]["NodeID"], "state": a["State"]} for a in table]


def _node_ids(cluster, names: set[str], timeout: float = 30.0) -> dict[str, str]:
    """Node id by node name (its custom resource), from the cluster's node table."""
    deadline = time.monotonic() + timeout
    while True:
        found = {}
        for node in cluster.global_state.node_table():
            if node.get("Alive"):
                for name in names & set(node.get("Resources", {})):
                    found[name] = node["NodeID"]
        if len(found) == len(names) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--serve"] or len(sys.argv) != 3:
        raise SystemExit(f"usage: python -m tests.cluster --serve SPEC; got {sys.argv[1:]}")
    raise SystemExit(_serve(json.loads(sys.argv[2])))
