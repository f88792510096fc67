"""Config validation: good configs resolve, bad ones name the field and the line."""

from __future__ import annotations

import copy

import pytest

from shoal.config import config_hash, load_config, parse_config, resolved_dict
from shoal.core.errors import ConfigError
from tests.conftest import CONFIGS, write_config


def _error(data: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data, source="cfg.yaml")
    return str(exc.value)


def test_quickstart_resolves_with_defaults():
    """Every default is filled in and the hash is stable across loads."""
    cfg = load_config(CONFIGS / "quickstart.yaml")
    data = resolved_dict(cfg)
    assert data["population"]["size"] == 1000
    assert data["platforms"]["reddit"]["recommender"]["pool_size"] == 100
    assert data["beliefs"]["update"]["rate"] == 0.001  # calibrated (docs/models.md)
    assert data["beliefs"]["update"]["anchor"] == 0.15
    assert data["beliefs"]["trust"]["initial"] == 0.5
    assert config_hash(cfg) == config_hash(load_config(CONFIGS / "quickstart.yaml"))
    assert len(config_hash(cfg)) == 64


def test_hash_changes_with_content(quickstart_dict):
    """A different seed is a different resolved config."""
    a = parse_config(quickstart_dict)
    b = parse_config({**quickstart_dict, "seed": 43})
    assert config_hash(a) != config_hash(b)


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"population": {"size": -3}}, "population.size: must be > 0, got -3"),
        ({"populaton": {"size": 3}}, "populaton: unknown field (did you mean 'population'?)"),
        ({"rounds": "many"}, "rounds: must be an integer, got 'many'"),
        ({"platforms": {"twitter": {"recommender": "magic"}}},
         "platforms.twitter.recommender: unknown kind 'magic'"),
        ({"platforms": {"twitter": {"feed_sise": 3}}},
         "platforms.twitter.feed_sise: unknown field (did you mean 'feed_size'?)"),
        ({"beliefs": {"update": {"rule": "bounded_confidence", "epsilonn": 0.2}}},
         "beliefs.update.epsilonn: unknown field (did you mean 'epsilon'?)"),
        ({"graph": {"kind": "small_world", "m": 3}}, "graph.m: unknown field"),
        ({"initial_stances": {"topics": {"nope": 0.3}}},
         "initial_stances.topics: unknown topics ['nope']"),
        ({"activity": {"hourly": [1.0] * 23}}, "activity.hourly: must list 24 hourly"),
        ({"population": {"size": 10, "file": "x.csv"}}, "give exactly one of 'size'"),
        ({"executor": {"kind": "ray", "shards": 0}}, "executor.shards: must be >= 1"),
    ],
)
def test_bad_values_name_the_field(quickstart_dict, patch, expected):
    """Each bad input is reported with its dotted path and what is wrong."""
    data = copy.deepcopy(quickstart_dict)
    data.update(patch)
    assert expected in _error(data)


def test_several_problems_are_all_reported(quickstart_dict):
    """Validation does not stop at the first problem."""
    data = {**quickstart_dict, "rounds": 0, "seed": -1}
    msg = _error(data)
    assert "rounds: must be > 0, got 0" in msg
    assert "seed: must be >= 0, got -1" in msg


def test_a_boolean_number_does_not_hide_the_sections_other_problems(quickstart_dict):
    """A `true` where a number belongs is reported beside the other fields' problems of
    its section, each boolean field on its own."""
    data = {**quickstart_dict, "policy": {"post_rate": float("nan"), "engage_rate": True,
                                          "reply_weight": False}}
    msg = _error(data)
    assert "policy.post_rate: must be a finite number, got nan" in msg
    assert "policy.engage_rate: must be a number, got true" in msg
    assert "policy.reply_weight: must be a number, got false" in msg


def test_the_quotes_hint_is_given_only_for_a_quoted_number(quickstart_dict):
    """`"10"` (a number in quotes) is told to lose its quotes; `ten` or `1000x` (a typo, no
    quotes in the file) is shown as it is, without a hint about quotes it does not have."""
    data = {**quickstart_dict, "policy": {"post_rate": "0.1", "engage_rate": "abc"},
            "population": {**quickstart_dict["population"], "size": "1000x"}}
    msg = _error(data)
    assert ("policy.post_rate: must be a number, got '0.1' (a quoted string: write the "
            "number without quotes)") in msg
    assert "policy.engage_rate: must be a number, got 'abc'" in msg
    assert "population.size: must be an integer, got '1000x'" in msg
    assert msg.count("quoted string") == 1, msg


def test_line_numbers_point_into_the_file(tmp_path, quickstart_dict):
    """The message carries file:line of the offending key."""
    data = copy.deepcopy(quickstart_dict)
    data["platforms"]["reddit"]["feed_size"] = 0
    path = write_config(tmp_path / "c.yaml", data)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if "feed_size: 0" in text)
    assert f"c.yaml:{line}: platforms.reddit.feed_size: must be > 0, got 0" in str(exc.value)


def test_malformed_yaml_and_duplicate_keys(tmp_path):
    """YAML syntax errors and duplicate keys name the line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("rounds: 3\npopulation: {size: 10\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: malformed YAML"):
        load_config(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("rounds: 3\nrounds: 4\npopulation: {size: 5}\ntopics: [a]\n")
    with pytest.raises(ConfigError, match=r"dup.yaml:2: malformed YAML: .*duplicate key 'rounds'"):
        load_config(dup)


def test_missing_files_are_errors(tmp_path, quickstart_dict):
    """A profile or edge-list file that does not exist is named with where we looked."""
    data = {**quickstart_dict, "population": {"file": "nowhere.csv"}}
    path = write_config(tmp_path / "c.yaml", data)
    with pytest.raises(ConfigError, match=r"population\.file: file not found: nowhere\.csv"):
        load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.yaml")


def test_relative_paths_resolve_against_the_config(tmp_path, quickstart_dict):
    """Files are found next to the config, whatever the working directory."""
    (tmp_path / "edges.csv").write_text("0,1\n1,2\n")
    data = {**quickstart_dict, "graph": {"kind": "edgelist", "file": "edges.csv"}}
    cfg = load_config(write_config(tmp_path / "c.yaml", data))
    assert cfg.graph.file == str((tmp_path / "edges.csv").resolve())


def test_overrides_validate_like_yaml(tmp_path, quickstart_dict):
    """--set values are parsed as YAML and validated with their path."""
    path = write_config(tmp_path / "c.yaml", quickstart_dict)
    cfg = load_config(path, ["population.size=50", "platforms.twitter.recommender=random"])
    assert cfg.population.size == 50
    assert cfg.platforms.twitter.recommender.kind == "random"
    with pytest.raises(ConfigError, match=r"population\.size: must be > 0, got -1"):
        load_config(path, ["population.size=-1"])
    # A number indexes a list; out of range it says how long the list is.
    cfg = load_config(path, ["topics.1.label=atomic energy", "topics.0.keywords=[CO2 tax]"])
    assert cfg.topics[1].label == "atomic energy" and cfg.topics[0].keywords == ["CO2 tax"]
    with pytest.raises(ConfigError, match=r"topics is a list of 2; index it with 0\.\.1"):
        load_config(path, ["topics.2.label=x"])


def test_shorthands(quickstart_dict):
    """Bare numbers are constant distributions; bare strings select kinds and rules."""
    data = {**quickstart_dict, "initial_stances": {"default": 0.25},
            "graph": "none", "beliefs": {"update": "bounded_confidence"},
            "topics": ["tax", {"name": "wind_power", "keywords": ["wind farms"]}]}
    cfg = parse_config(data)
    assert cfg.initial_stances.default.dist == "constant"
    assert cfg.graph.kind == "none"
    assert cfg.beliefs.update.epsilon == 0.3
    assert cfg.topics[1].label == "wind power"
    assert cfg.topics[0].keywords == ["tax"]


def test_the_name_of_a_keys_variable_is_shown_but_a_key_is_not():
    """`api_key_env` names the variable holding the key: a message shows that name; a
    key given there by mistake, or a field that holds a credential, stays hidden."""
    from shoal.config.loading import shown_override

    assert shown_override("llm.providers.0.api_key_env=NOPE_KEY") == \
        "llm.providers.0.api_key_env=NOPE_KEY"
    assert shown_override("llm.providers.0.api_key_env=sk-abcdefghijklmnopqrstuvwxyz1234") \
        == "llm.providers.0.api_key_env=(value hidden)"
    assert shown_override("llm.providers.0.extra_body.token=zzz") == \
        "llm.providers.0.extra_body.token=(value hidden)"


def test_plain_values_are_typed_as_yaml_1_2_types_them(tmp_path):
    """`yes`/`no` are text (two topics here), `1e3` a number, `010` and `1:30` text (YAML
    1.1, PyYAML's default, read 8 and 90), `0x10` and `1_000` numbers; dates as before."""
    import datetime

    from shoal.config.yaml_text import load_yaml_text

    data, _ = load_yaml_text("a: [yes, no, on, off, true, False]\nb: [1e3, 010, 1:30, 0x10, "
                             "1_000, .5, -.inf]\nc: 2026-01-05T08:00:00\n", "x.yaml")
    assert data["a"] == ["yes", "no", "on", "off", True, False]
    assert data["b"] == [1000.0, "010", "1:30", 16, 1000, 0.5, float("-inf")]
    assert data["c"] == datetime.datetime(2026, 1, 5, 8)
    path = tmp_path / "c.yaml"
    path.write_text("rounds: 2\npopulation: {size: 20}\ntopics: [yes, no]\n")
    assert [t.name for t in load_config(path).topics] == ["yes", "no"]


def test_what_shoal_writes_reads_back_as_written():
    """Text that either YAML 1.1 or Shoal's YAML 1.2 typing would read as something else
    is quoted when written, so a resolved config (or a scenario) reads back the same here
    and with a plain yaml.safe_load."""
    import yaml

    from shoal.config.yaml_text import dump_yaml, load_yaml_text

    data = {"label": "1e3", "words": ["yes", "010", "0o7", "1:30", "1_0", "plain"],
            "n": 10, "x": 1e-05, "on": True, "none": None}
    text = dump_yaml(data, sort_keys=False)
    assert load_yaml_text(text, "x.yaml")[0] == data
    assert yaml.safe_load(text) == data


def test_a_pipe_is_named_as_one_not_as_missing(tmp_path):
    """A config, or a file it names, that is a pipe exists: 'not found' would mislead
    (and reading one is a read of something gone, or a wait for a writer)."""
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="the config file is not a regular file "
                                          r"\(a pipe or device\); save it to a file"):
        load_config(fifo)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("rounds: 2\npopulation: {size: 20}\ntopics: [a]\n"
                   "graph: {kind: edgelist, file: fifo.yaml}\n")
    with pytest.raises(ConfigError, match=r"c.yaml:4: graph.file: not a regular file "
                                          r"\(a pipe or device\): fifo.yaml"):
        load_config(cfg)


def test_a_group_that_rounds_to_no_agent_is_warned_of(tmp_path, capsys):
    """0.1 of 4 agents rounds to 0: what names the group would silently reach nobody, so
    `shoal check` and the run both say so, naming the field (a hostile-input sweep found
    the run's intervention reported `{"agents": 0}` and nothing else)."""
    from shoal.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text("rounds: 1\npopulation: {size: 4, groups: [{name: activists, fraction: "
                    "0.1}, {name: others, fraction: 0.5}]}\ntopics: [a]\n")
    note = ("population.groups.0.fraction: 0.1 of 4 agents rounds to 0: group activists has "
            "no agents")
    assert [n for n in load_config(path).notes() if "rounds to 0" in n] == [
        note + ", so interventions, selectors and surveys that name it reach nobody"]
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    captured = capsys.readouterr()
    shown = " ".join((captured.out + captured.err).split())
    assert note in shown and "group others" not in shown


def test_a_loop_of_links_as_a_graph_document_is_named(tmp_path):
    """A graph document that is a loop of symbolic links is an error naming the field,
    as for every other file field (it escaped as a RuntimeError)."""
    (tmp_path / "a.md").symlink_to(tmp_path / "b.md")
    (tmp_path / "b.md").symlink_to(tmp_path / "a.md")
    path = write_config(tmp_path / "c.yaml", {
        "rounds": 2, "population": {"size": 5}, "topics": ["a"],
        "memory": {"graph": {"enabled": True, "documents": ["a.md"]}}})
    with pytest.raises(ConfigError, match=r"memory\.graph\.documents\.0: .*a\.md"):
        load_config(path)


def test_merge_keys_are_read_and_own_keys_override_them(tmp_path):
    """`<<: *anchor` merges a mapping as YAML defines it (the node's own keys win); a key
    the mapping itself gives twice is still an error (merge keys were refused as an
    unknown tag)."""
    path = tmp_path / "c.yaml"
    path.write_text("rounds: 2\ntopics: [{name: a, label: A}]\npopulation:\n"
                    "  <<: {size: 50, groups: [{name: g, fraction: 0.5}]}\n  size: 60\n")
    cfg = load_config(path)
    assert cfg.population.size == 60 and [g.name for g in cfg.population.groups] == ["g"]
    path.write_text("rounds: 2\ntopics: [a]\npopulation:\n  <<: {size: 50}\n  size: 60\n"
                    "  size: 70\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:6: malformed YAML: duplicate key 'size'"):
        load_config(path)
