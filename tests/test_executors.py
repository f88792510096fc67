"""Joining a Ray cluster that is not there fails within seconds (exit 2, nothing written)
instead of Ray retrying the GCS for minutes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from shoal.cli.main import main
from tests.conftest import write_config
from tests.helpers import closed_port as held_closed_port

SMALL = ["--set", "population.size=100", "--rounds", "2"]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on, for the whole test (`tests.helpers`)."""
    with held_closed_port() as port:
        yield port


@pytest.fixture
def no_ray(monkeypatch):
    """This process not yet connected to Ray (another test may have started the session's
    instance), no cluster to be found on the machine (other Ray instances may run here),
    and `ray.init` out of reach: should the probe ever let an address through, the test
    fails at once instead of waiting for Ray's own timeout."""
    import ray
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init reached: the address was not probed")

    monkeypatch.setattr(ray, "init", refuse)
    return services


def _run(tmp_path, quickstart_dict, address: str) -> int:
    path = write_config(tmp_path / "c.yaml", quickstart_dict)
    return main(["run", str(path), *SMALL, "--executor", "ray", "--address", address,
                 "--out", str(tmp_path / "out")])


def test_an_address_where_nothing_listens_exits_2(tmp_path, quickstart_dict, no_ray, capsys,
                                                  closed_port):
    """host:port with nothing listening: exit 2 naming the address and how to get a
    cluster (or run on this machine); no run directory, not even the --out folder."""
    address = f"127.0.0.1:{closed_port}"
    assert _run(tmp_path, quickstart_dict, address) == 2
    err = capsys.readouterr().err
    assert f"--address {address}: no Ray cluster answers there" in err
    assert "ray start --head" in err and "leave --address out" in err
    assert not (tmp_path / "out").exists()


def test_a_sweep_to_an_address_where_nothing_listens_exits_2(tmp_path, quickstart_dict,
                                                             no_ray, capsys, closed_port):
    """`shoal sweep --address` is probed before the sweep is announced or its folder made,
    and the advice names only flags the command has."""
    address = f"127.0.0.1:{closed_port}"
    path = write_config(tmp_path / "c.yaml", quickstart_dict)
    assert main(["sweep", str(path), "--seeds", "2", "--address", address,
                 "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert f"--address {address}: no Ray cluster answers there" in captured.err
    assert "--executor" not in captured.err and "grid point" not in captured.err
    assert not (tmp_path / "out").exists()


def test_auto_without_a_cluster_exits_2(tmp_path, quickstart_dict, no_ray, capsys):
    """'auto' when no cluster runs on this machine: exit 2, nothing written."""
    assert _run(tmp_path, quickstart_dict, "auto") == 2
    err = capsys.readouterr().err
    assert "--address auto: no Ray cluster answers there" in err
    assert "none is running on this machine" in err and "ray start --head" in err
    assert not (tmp_path / "out").exists()


def test_auto_with_a_stale_cluster_file_exits_2(tmp_path, quickstart_dict, no_ray,
                                                 monkeypatch, capsys, closed_port):
    """'auto' finding the address of a cluster that has since stopped (Ray's
    ray_current_cluster file outlives it): the address it resolves to is probed too."""
    stale = f"127.0.0.1:{closed_port}"
    monkeypatch.setattr(no_ray, "find_bootstrap_address", lambda temp_dir: stale)
    assert _run(tmp_path, quickstart_dict, "auto") == 2
    err = capsys.readouterr().err
    assert "--address auto: no Ray cluster answers there" in err
    assert f":{stale.rpartition(':')[2]}" in err
    assert not (tmp_path / "out").exists()


def test_a_malformed_address_exits_2(tmp_path, quickstart_dict, no_ray, capsys):
    """Something that is not HOST:PORT is an input error, not a Ray traceback."""
    assert _run(tmp_path, quickstart_dict, "no-port-here") == 2
    assert "not a Ray address" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_address_that_answers_but_cannot_be_joined_says_so(tmp_path, quickstart_dict,
                                                              no_ray, monkeypatch, capsys):
    """Something listens at the address but Ray cannot join it (seen with a cluster using
    token authentication): the message does not claim that nothing answers there."""
    import ray

    def fail(*args, **kwargs):
        raise ConnectionError("Failed to connect to Ray cluster at the address")

    monkeypatch.setattr(ray, "init", fail)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("", 0))  # every address: Ray dials 127.0.0.1 as the node's own IP
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        assert _run(tmp_path, quickstart_dict, address) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no Ray cluster answers there" not in err
    assert f"--address {address}: something answers there, but joining it" in err
    assert "Failed to connect to Ray cluster" in err
    assert not (tmp_path / "out").exists()
