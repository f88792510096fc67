"""Shared fixtures: one real Ray instance per test session, small configs, run helpers."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


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
