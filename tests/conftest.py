"""Shared fixtures: one real Ray instance per test session, small configs, run helpers."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def pytest_addoption(parser):
    parser.addoption("--real-llm", action="store_true",
                     help="run the tests marked real_llm: llama-server with SmolLM2-135M, "
                          "built once into the cache (about 5 minutes on 2 cores)")


def pytest_collection_modifyitems(config, items):
    """Tests marked `real_llm` skip, saying why, unless asked for with --real-llm."""
    if config.getoption("--real-llm"):
        return
    skip = pytest.mark.skip(reason="real_llm: run with --real-llm (builds llama-server "
                                   "once into the cache; .ci/run does, after the suite)")
    for item in items:
        if "real_llm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real llama-server with SmolLM2-135M-Instruct on 127.0.0.1, for the session: built
    (or found) in the cache; the tests skip, printing why, when it cannot be had."""
    from shoal.llm.llama_cpp import LlamaServer, Unavailable, build_server, fetch_model

    try:
        server = LlamaServer(build_server(), fetch_model(), threads=2, slots=2, ctx=4096,
                             log_path=tmp_path_factory.mktemp("llama") / "server.log").start()
    except Unavailable as exc:
        pytest.skip(f"real_llm: no llama-server: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray instance, started once for the whole session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1")  # tests talk over loopback only
    yield ray
    ray.shutdown()


@pytest.fixture
def quickstart_dict() -> dict:
    """The quick-start config as a raw mapping (tests shrink and tweak it)."""
    return yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())


def write_config(path: Path, data: dict) -> Path:
    """Write a config mapping as YAML and return its path."""
    path.write_text(yaml.safe_dump(copy.deepcopy(data), sort_keys=False))
    return path


@pytest.fixture(scope="module")
def module_server():
    """A loopback LLM server (seed 0, no faults) shared by a test module."""
    from shoal.llm.server import serve_in_thread

    s = serve_in_thread(seed=0)
    yield s
    s.stop()
