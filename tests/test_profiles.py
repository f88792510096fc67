"""Tests for reading populations from profile files (agents.profiles)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shoal.agents.profiles import load_population_file
from shoal.config import Config, parse_config, resolve_paths
from shoal.core.errors import ConfigError, InputError

DATA = Path(__file__).parent / "data" / "profiles"
TOPICS = [
    {"name": "climate", "label": "climate policy",
     "keywords": ["climate", "carbon tax", "emissions"]},
    {"name": "housing", "keywords": ["housing", "rent", "zoning"]},
    {"name": "ai_regulation", "label": "AI regulation",
     "keywords": ["AI", "artificial intelligence"]},
]
NAN = np.nan


def make_cfg(path: Path, fmt: str = "auto", **extra) -> Config:
    cfg = parse_config({"rounds": 3, "population": {"file": str(path), "format": fmt},
                        "topics": TOPICS, **extra})
    return resolve_paths(cfg, path.parent)


def load(path: Path, fmt: str = "auto", seed: int = 0, **extra):
    return load_population_file(make_cfg(path, fmt, **extra), np.random.default_rng(seed))


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- twitter_csv


def test_twitter_csv_fields():
    pop = load(DATA / "twitter_profiles.csv", "twitter_csv")
    assert pop.size == 6
    # Row 2 has no name: the username stands in.
    assert pop.name == ["Maya Chen", "Tom Okafor", "rita_b", "Sam Ortiz", "Lee Park", "Ana Silva"]
    assert pop.username == ["maya_c", "tomo", "rita_b", "samo", "leep", "anas"]
    assert pop.source_id == ["101", "102", "103", "104", "105", "106"]
    assert pop.bio[0] == "Climate scientist. Sea levels, emissions, carbon pricing."
    assert pop.persona[0].startswith("Maya Chen is a climate scientist")
    # A quoted user_char spanning two physical lines stays one field.
    assert pop.persona[1] == ("Tom Okafor rents a flat in Leeds.\nHe writes about housing "
                              "costs and is sceptical of official statements.")
    assert pop.extra["previous_tweets"][3] == ["Energy bills doubled this winter."]
    assert pop.extra["previous_tweets"][1] == []
    # Twitter profiles carry no interests, groups, demographics or stances.
    np.testing.assert_allclose(pop.interests, np.full((6, 3), 1 / 3))
    assert pop.group.tolist() == [-1] * 6 and pop.group_names == []
    assert pop.age.tolist() == [-1] * 6 and pop.gender == [""] * 6
    assert pop.stance_hint is None


def test_twitter_csv_following_are_agent_rows():
    pop = load(DATA / "twitter_profiles.csv")
    # Row 3 lists "[0, 3, 3, 0]": the self-follow and the repeat are dropped.
    assert pop.following == [[1, 2], [0], [], [0], [5, 2], []]


def test_twitter_csv_activity_given_or_drawn():
    pop = load(DATA / "twitter_profiles.csv", seed=7)
    drawn = make_cfg(DATA / "twitter_profiles.csv").activity.level.sample(
        np.random.default_rng(7), 6, 0.0, 1.0)
    expected = [0.8, 0.35, drawn[2], 0.5, 1.0, 0.0]
    np.testing.assert_allclose(pop.activity, expected)
    assert pop.activity.dtype == np.float64
    assert 0.2 <= pop.activity[2] <= 0.8  # the default level distribution


def test_twitter_csv_hourly_normalised():
    pop = load(DATA / "twitter_profiles.csv")
    assert pop.hourly is not None and pop.hourly.shape == (6, 24)
    freq0 = np.array([0, 0, 0, 0, 0, 0, 1, 2, 3, 3, 2, 2, 2, 2, 2, 2, 3, 4, 4, 3, 2, 1, 0, 0.0])
    np.testing.assert_allclose(pop.hourly[0], freq0 / freq0.mean())
    np.testing.assert_allclose(pop.hourly.mean(axis=1), 1.0)
    np.testing.assert_allclose(pop.hourly[1], 1.0)
    np.testing.assert_allclose(pop.hourly[2], 1.0)  # all zeros: no data, kept flat
    assert pop.hourly[3, 6] == pytest.approx(12.0) and pop.hourly[3, 8] == 0.0


def test_oasis_twitter_csv():
    """The OASIS dataset layout: pandas index column, label lists in activity_level."""
    pop = load(DATA / "oasis_twitter.csv")
    assert pop.name == ["user_0", "user_1", "user_2"]
    assert pop.source_id == ["38210037", "36212060", "972651"]
    # following_agentid_list holds agent ids (rows), not the Twitter ids of following_list.
    assert pop.following == [[2], [2, 0], []]
    assert pop.persona[1] == "I dance on tiktok, and cry in bed"  # empty user_char -> bio
    assert pop.extra["previous_tweets"][2] == [
        "Breaking: parliament votes on the housing bill tonight."]
    assert pop.hourly is not None
    np.testing.assert_allclose(pop.hourly.mean(axis=1), 1.0)
    # Hour labels are not a level: every agent's level is drawn.
    drawn = make_cfg(DATA / "oasis_twitter.csv").activity.level.sample(
        np.random.default_rng(0), 3, 0.0, 1.0)
    np.testing.assert_allclose(pop.activity, drawn)


# --------------------------------------------------------------------------- reddit_json


def test_reddit_json_fields():
    pop = load(DATA / "reddit_profiles.json", "reddit_json")
    assert pop.size == 5
    assert pop.name == ["Maya Chen", "Tom Okafor", "City Council", "Lee Park", "Ana Silva"]
    assert pop.username[3] == "leepark"
    assert pop.source_id == ["0", "1", "2", "3", "4"]
    assert pop.age.tolist() == [38, 29, 30, 41, 33] and pop.age.dtype == np.int16
    assert pop.gender[2] == "other" and pop.mbti[1] == "ENFP"
    assert pop.country[3] == "South Korea"
    assert pop.profession == ["Researcher", "Union organiser", "", "Software engineer",
                              "Journalist"]
    assert pop.bio[0] == "Climate scientist. Data first."
    assert pop.persona[2].startswith("The official account")
    assert pop.extra["karma"] == [1520, 310, 5000, None, 870]
    assert pop.following is None and pop.hourly is None and pop.stance_hint is None


def test_reddit_json_interests_matched_on_word_boundaries():
    pop = load(DATA / "reddit_profiles.json")
    expected = [
        [1, 0, 0],  # "Climate change"; "Renewable energy" matches nothing ("rent" is no word)
        [0, 0.5, 0.5],  # "Housing affordability", "AI"
        [1 / 3, 1 / 3, 1 / 3],  # "Cooking": no match -> uniform
        [0, 0.5, 0.5],  # "Artificial Intelligence", "Zoning reform"
        [0.5, 0.5, 0],  # "Carbon tax policy", "Rent control", "Emissions"
    ]
    np.testing.assert_allclose(pop.interests, expected)
    np.testing.assert_allclose(pop.interests.sum(axis=1), 1.0)


# --------------------------------------------------------------------------- shoal


def test_shoal_yaml():
    pop = load(DATA / "shoal_profiles.yaml")
    assert pop.name == ["Maya Chen", "Tom Okafor", "City Council", "Lee Park", "Ana Silva"]
    assert pop.username == ["maya_c", "tom_okafor1", "city_council", "leepark", "ana_reports"]
    assert pop.source_id == ["u1", "u2", "u3", "u4", "u5"]
    assert pop.group_names == ["scientists", "activists", "officials"]
    assert pop.group.tolist() == [0, 1, 2, 1, -1] and pop.group.dtype == np.int16
    assert pop.group_mask(["activists"]).tolist() == [False, True, False, True, False]
    assert pop.activity[0] == 0.9 and pop.activity[2] == 0.2
    assert pop.age.tolist() == [38, -1, -1, -1, -1]
    assert pop.profession[4] == "journalist"
    # following names user_ids; Tom's self-follow is dropped; no key -> nobody.
    assert pop.following == [[1, 4], [0], [], [], []]


def test_shoal_yaml_interests():
    pop = load(DATA / "shoal_profiles.yaml")
    np.testing.assert_allclose(pop.interests, [
        [1, 0, 0],  # [climate]
        [0.25, 0.75, 0],  # {housing: 3, climate: 1}
        [1 / 3, 1 / 3, 1 / 3],  # none given
        [0, 0.5, 0.5],  # [AI regulation, Zoning]
        [1 / 3, 1 / 3, 1 / 3],
    ])


def test_shoal_yaml_stance_hints_use_miroshark_mapping():
    pop = load(DATA / "shoal_profiles.yaml")
    assert pop.stance_hint is not None and pop.stance_hint.shape == (5, 3)
    np.testing.assert_allclose(pop.stance_hint, [
        [0.9, 0.9, 0.9],  # strongly_supportive
        [0.7, -0.7, 0.1],  # stances {climate: supportive, housing: -0.8} + 0.2 * 0.5
        [0.0, 0.0, 0.0],  # observer
        [-0.5, -0.5, -0.5],  # -0.3 + 0.2 * -1
        [-0.9, -0.9, 0.4],  # "Strongly Opposing", with a per-topic override
    ])


def test_shoal_csv():
    pop = load(DATA / "shoal_profiles.csv")
    assert pop.name == ["Maya Chen", "Tom Okafor", "Rita Brown", "Lee Park"]
    assert pop.username == ["maya_c", "tom_okafor1", "rita_b", "leepark"]
    assert pop.source_id == ["0", "1", "2", "3"]  # no user_id: references are row indices
    assert pop.following == [[1, 2], [2], [], [0]]
    assert pop.group_names == ["scientists", "activists"]
    assert pop.group.tolist() == [0, 1, -1, 1]
    assert pop.age.tolist() == [38, 29, -1, 41]
    np.testing.assert_allclose(pop.activity[[0, 2, 3]], [0.9, 0.4, 0.7])
    np.testing.assert_allclose(pop.interests, [
        [1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0.5, 0.5]])
    np.testing.assert_allclose(pop.stance_hint, [
        [0.6, 0.6, 0.6],  # supportive
        [NAN, -0.5, NAN],  # one topic only
        [0.1, 0.1, 0.1],  # only sentiment_bias: 0 + 0.2 * 0.5
        [-0.6, -0.6, -0.6],  # opposing
    ])


def test_stance_hint_is_clipped(tmp_path):
    path = write(tmp_path, "p.yaml", "- {name: A, stance: strongly_supportive, "
                                     "sentiment_bias: 1}\n- {name: B}\n")
    pop = load(path)
    np.testing.assert_allclose(pop.stance_hint, [[1.0] * 3, [NAN] * 3])


def test_shoal_json_and_population_frame(tmp_path):
    path = write(tmp_path, "p.json", '[{"name": "Ann Lee", "group": "a", "persona": "x"},'
                                     ' {"name": "Bo", "user_id": 7}]')
    pop = load(path)  # `group` marks it shoal although items have `persona`
    assert pop.group_names == ["a"] and pop.source_id == ["0", "7"]
    assert pop.username == ["ann_lee0", "bo1"]
    frame = pop.to_frame([t["name"] for t in TOPICS])
    assert frame["group_name"][0] == "a" and frame["group_name"].isna()[1]
    assert frame["interest_climate"].tolist() == pytest.approx([1 / 3, 1 / 3])


def test_population_groups_with_a_profile_file_are_rejected():
    """Config groups only apply to generated populations (honest config: no silent ignore)."""
    path = DATA / "twitter_profiles.csv"
    with pytest.raises(ConfigError, match="'groups' apply to generated populations"):
        parse_config({"rounds": 3, "topics": TOPICS, "population": {
            "file": str(path), "groups": [{"name": "media", "fraction": 0.5}]}})


def test_seeded_load_is_reproducible():
    a = load(DATA / "twitter_profiles.csv", seed=3)
    b = load(DATA / "twitter_profiles.csv", seed=3)
    np.testing.assert_array_equal(a.activity, b.activity)


# --------------------------------------------------------------------------- auto-detection


@pytest.mark.parametrize(("name", "check"), [
    ("twitter_profiles.csv", lambda p: p.hourly is not None and p.following is not None),
    ("oasis_twitter.csv", lambda p: p.source_id[0] == "38210037"),
    ("reddit_profiles.json", lambda p: p.extra.get("karma") is not None),
    ("shoal_profiles.yaml", lambda p: p.group_names == ["scientists", "activists", "officials"]),
    ("shoal_profiles.csv", lambda p: p.group_names == ["scientists", "activists"]),
])
def test_auto_detects_format(name, check):
    auto = load(DATA / name)
    assert check(auto)


def test_auto_matches_explicit_format():
    for name, fmt in [("twitter_profiles.csv", "twitter_csv"),
                      ("reddit_profiles.json", "reddit_json"),
                      ("shoal_profiles.yaml", "shoal")]:
        a, b = load(DATA / name), load(DATA / name, fmt)
        assert a.name == b.name and a.following == b.following
        np.testing.assert_array_equal(a.interests, b.interests)


def test_json_with_realname_is_reddit(tmp_path):
    path = write(tmp_path, "people.json", '[{"realname": "Ann", "username": "ann", '
                                          '"interested_topics": ["housing"]}]')
    pop = load(path)
    assert pop.name == ["Ann"]
    np.testing.assert_allclose(pop.interests, [[0, 1, 0]])


# --------------------------------------------------------------------------- bad input

TW_HEAD = "user_id,name,username,user_char,description,following_agentid_list,activity_level\n"


def raises(path: Path, fmt: str = "auto") -> str:
    with pytest.raises(InputError) as info:
        load(path, fmt)
    return str(info.value)


@pytest.mark.parametrize(("name", "text", "fmt", "expected"), [
    ("empty.csv", "", "auto", ["empty.csv", "empty"]),
    ("blank.yaml", "\n  \n", "auto", ["blank.yaml", "empty"]),
    ("header.csv", TW_HEAD, "auto", ["header.csv", "no profile rows"]),
    ("empty_list.json", "[]\n", "auto", ["empty_list.json", "no profiles"]),
    ("bad.json", '[\n  {"name": "a"},\n  {"name": }\n]\n', "auto",
     ["bad.json:3:", "malformed JSON"]),
    ("object.json", '{"name": "a"}', "auto", ["object.json", "must be a list of profiles"]),
    ("scalar.json", '[{"name": "a"}, 3]', "auto", ["scalar.json: item 1", "mapping"]),
    ("bad.yaml", "- name: a\n- name: [b\n", "auto", ["bad.yaml:", "malformed YAML"]),
    ("quote.csv", TW_HEAD + '1,A,a,"unterminated,d,[],0.5\n', "auto",
     ["quote.csv:", "malformed CSV"]),
    ("fields.csv", TW_HEAD + "1,A,a,p,d,[],0.5\n2,B,b,p,d\n", "auto",
     ["fields.csv:3:", "5 fields, the header has 7"]),
    ("nochar.csv", "user_id,name,username\n1,A,a\n", "twitter_csv",
     ["nochar.csv:1:", "user_char"]),
    ("noname.csv", "username,bio\nann,hi\n", "auto", ["noname.csv:1:", "name"]),
    ("dupcol.csv", "name,name\na,b\n", "auto", ["dupcol.csv:1:", "duplicate column 'name'"]),
    ("notes.txt", "name\nA\n", "auto", ["notes.txt", "population.format"]),
])
def test_bad_files(tmp_path, name, text, fmt, expected):
    msg = raises(write(tmp_path, name, text), fmt)
    for part in expected:
        assert part in msg


def test_activity_level_not_a_number(tmp_path):
    path = write(tmp_path, "profiles.csv", TW_HEAD + "1,A,a,p,d,[],0.5\n2,B,b,p,d,[],high\n")
    assert raises(path).endswith(
        "profiles.csv:3: activity_level: must be a number in [0, 1], got 'high'")


def test_error_line_counts_physical_lines(tmp_path):
    path = write(tmp_path, "profiles.csv",
                 TW_HEAD + '1,A,a,"two\nlines",d,[],0.5\n2,B,b,p,d,[],1.5\n')
    assert "profiles.csv:4: activity_level:" in raises(path)


def test_duplicate_username_gets_a_suffix(tmp_path):
    """A repeated username (ignoring case) is not refused: the first row keeps it, later
    rows get `_2`, `_3`, ..., skipping usernames other rows give; every change is kept."""
    path = write(tmp_path, "profiles.csv", TW_HEAD + "1,A,ann,p,d,[],0.5\n2,B,ANN_2,p,d,[],0.5\n"
                                                     "3,C,Ann,p,d,[],0.5\n4,D,ann,p,d,[],0.5\n")
    pop = load(path)
    assert pop.username == ["ann", "ANN_2", "Ann_3", "ann_4"]
    assert pop.extra["original_username"] == [None, None, "Ann", "ann"]
    assert pop.extra["username_fix"] == [None, None, "duplicate", "duplicate"]


def test_suffix_keeps_usernames_to_40_characters(tmp_path):
    long = "x" * 40
    rows = f"1,A,{long},p,d,[],0.5\n2,B,{long},p,d,[],0.5\n"
    pop = load(write(tmp_path, "p.csv", TW_HEAD + rows))
    assert pop.username == [long, "x" * 38 + "_2"]


def test_repeated_user_id_is_kept_in_oasis_formats(tmp_path):
    """OASIS ignores user_id (its agent id is the row): a repeat is kept, not refused."""
    from shoal.agents.profiles import repeated_ids

    pop = load(write(tmp_path, "p.csv", TW_HEAD + "7,A,a,p,d,[],0.5\n7,B,b,p,d,[],0.5\n"))
    assert pop.source_id == ["7", "7"] and repeated_ids(pop) == {"7": [0, 1]}


def test_nan_text_in_number_and_list_fields_means_not_given(tmp_path):
    pop = load(write(tmp_path, "p.csv", TW_HEAD + "1,A,a,p,d,nan,NaN\n2,B,b,None,d,null,0.5\n"))
    assert pop.following == [[], []] and pop.activity[1] == 0.5
    assert pop.persona[1] == "None"  # free text keeps the word


def test_duplicate_user_id(tmp_path):
    path = write(tmp_path, "p.json", '[{"name": "A", "user_id": 5}, {"name": "B", "user_id": 5}]')
    msg = raises(path)
    assert "p.json: item 1: user_id:" in msg and "item 0" in msg


def test_following_unknown_agent_id(tmp_path):
    path = write(tmp_path, "profiles.csv",
                 TW_HEAD + '1,A,a,p,d,[1],0.5\n2,B,b,p,d,"[0, 9]",0.5\n')
    msg = raises(path)
    assert "profiles.csv:3: following_agentid_list: matches no agent" in msg and "9" in msg


def test_following_bad_literal(tmp_path):
    path = write(tmp_path, "profiles.csv", TW_HEAD + '1,A,a,p,d,"[1,",0.5\n')
    assert "profiles.csv:2: following_agentid_list:" in raises(path)


def test_shoal_following_unknown_user_id(tmp_path):
    path = write(tmp_path, "p.yaml", "- {user_id: a, name: A, following: [b]}\n"
                                     "- user_id: b\n  name: B\n  following: [a, zz]\n")
    msg = raises(path)
    assert "p.yaml:4: item 1: following: matches no agent: 'zz'" in msg


def test_hourly_wrong_length(tmp_path):
    path = write(tmp_path, "tw.csv", "name,user_char,activity_level_frequency\n"
                                     'A,p,"[1, 2, 3]"\n')
    assert "tw.csv:2: activity_level_frequency: must list 24 hourly values, got 3" in raises(path)


def test_hourly_negative(tmp_path):
    freq = ", ".join(["1"] * 23 + ["-1"])
    path = write(tmp_path, "tw.csv", f'name,user_char,activity_level_frequency\nA,p,"[{freq}]"\n')
    assert "tw.csv:2: activity_level_frequency: must be a number >= 0, got -1" in raises(path)


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("- name: A\n- name: B\n  activity: 1.5\n",
     "p.yaml:3: item 1: activity: must be a number in [0, 1], got 1.5"),
    ("- name: A\n  stance: lukewarm\n", "p.yaml:2: item 0: stance: must be a number in [-1, 1]"
                                        " or one of ['strongly_supportive'"),
    ("- name: A\n  stance: 2\n", "p.yaml:2: item 0: stance: must be a number in [-1, 1], got 2"),
    ("- name: A\n  stances: {climat: 0.5}\n",
     "p.yaml:2: item 0: stances.climat: unknown topic (did you mean 'climate'?)"),
    ("- name: A\n  stances: [0.5]\n", "p.yaml:2: item 0: stances: must be a mapping"),
    ("- name: A\n  sentiment_bias: strong\n", "p.yaml:2: item 0: sentiment_bias: must be a"),
    ("- name: A\n  interests: {housing: -1}\n", "item 0: interests.housing: must be a number >= 0"),
    ("- name: A\n  interests: {climate: 0}\n", "item 0: interests: interest weights must not"),
    ("- name: A\n  age: 30.5\n", "p.yaml:2: item 0: age: must be an integer in [0, 150], got 30.5"),
    ("- name: A\n  intrests: [climate]\n",
     "p.yaml:2: item 0: intrests: unknown field (did you mean 'interests'?)"),
    ("- name: A\n- bio: no name\n", "p.yaml:2: item 1: name: required field is missing"),
    ("- name: A\n  name: B\n", "p.yaml:2: item 0: duplicate field 'name'"),
    # (a repeated username gets a suffix; shoal `following` needs user_ids unique)
    ("- {name: A, user_id: 1}\n- {name: B, user_id: 1}\n",
     "p.yaml:2: item 1: user_id: '1' is also the user_id of item 0 (line 1)"),
])
def test_bad_shoal_yaml(tmp_path, yaml_text, expected):
    assert expected in raises(write(tmp_path, "p.yaml", yaml_text))


def test_bad_shoal_csv_field(tmp_path):
    path = write(tmp_path, "people.csv", "name,stances\nA,\nB,{housing: 1}\n")
    assert "people.csv:3: stances: must be a mapping" in raises(path)


def test_reddit_item_without_any_name(tmp_path):
    path = write(tmp_path, "r.json", '[{"realname": "A", "persona": "p"}, {"persona": "p"}]')
    assert "r.json: item 1: realname: missing: give realname, name or username" in raises(path)


def test_reddit_bad_age(tmp_path):
    path = write(tmp_path, "r.json", '[{"realname": "A", "persona": "p", "age": "old"}]')
    assert "r.json: item 0: age: must be a number in [0, 150], got 'old'" in raises(path)


def test_not_utf8(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("name\nJos\xe9\n".encode("latin-1"))
    assert "latin.csv: not UTF-8" in raises(path)


def test_missing_file_is_input_error(tmp_path):
    cfg = parse_config({"rounds": 1, "population": {"file": str(tmp_path / "nope.csv")},
                        "topics": TOPICS})
    with pytest.raises(InputError, match=r"nope\.csv: profile file not found"):
        load_population_file(cfg, np.random.default_rng(0))


# --------------------------------------------------------------------------- runs


def run_profiles(tmp_path: Path, profile: Path, capsys) -> tuple[Path, str]:
    """`shoal run` (in process, local executor) of a 3-round config reading `profile`;
    the trajectory file and what was printed."""
    import yaml

    from shoal.cli.main import main

    cfg = {"name": "profiles", "seed": 3, "rounds": 3, "executor": {"kind": "local"},
           "population": {"file": str(profile)}, "topics": TOPICS}
    path = write(tmp_path, "cfg.yaml", yaml.safe_dump(cfg))
    out = tmp_path / "runs"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    printed = capsys.readouterr()
    return run / "trajectory.duckdb", " ".join((printed.out + printed.err).split())


def fixes_and_usernames(db: Path) -> tuple[list[tuple], list[str]]:
    from tests.helpers import query

    fixes = query(db, "SELECT round, agent, field, original, value, fix FROM profile_fixes "
                      "ORDER BY agent")
    return fixes, [u for (u,) in query(db, "SELECT username FROM agents ORDER BY agent_id")]


def test_oasis_twitter_csv_with_repeated_usernames_runs(tmp_path, capsys):
    """An OASIS-layout CSV repeating an account (in other case), with an empty username,
    NaN cells and unread columns: it runs, and every username change is in profile_fixes."""
    db, printed = run_profiles(tmp_path, DATA / "oasis_duplicates.csv", capsys)
    fixes, usernames = fixes_and_usernames(db)
    assert usernames == ["HarborDaily", "harbordaily_3", "pia_north2", "HarborDaily_2",
                         "ines_v", "HARBORDAILY_4", "Ola_Berg_"]
    assert len({u.lower() for u in usernames}) == len(usernames)
    assert fixes == [
        (0, 1, "username", "harbordaily", "harbordaily_3", "duplicate"),
        (0, 2, "username", None, "pia_north2", "derived"),
        (0, 5, "username", "HARBORDAILY", "HARBORDAILY_4", "duplicate"),
        (0, 6, "username", "Ola Berg!", "Ola_Berg_", "normalised"),
    ]
    # One note per kind of fix, with the count and the first example.
    assert ("2 username(s) of the profile file repeated (ignoring case) an earlier row's "
            "username, so got a suffix, e.g. agent 1: 'harbordaily' -> 'harbordaily_3'") in printed
    assert "1 username(s) of the profile file were empty" in printed
    assert printed.count("profile_fixes") == 3


def test_oasis_twitter_csv_keeps_unread_fields():
    pop = load(DATA / "oasis_duplicates.csv")
    assert pop.extra["following_count"][:2] == ["2", "1"]
    assert pop.extra["following_count"][4] == "nan"  # unread fields are kept as given
    assert pop.extra["tweets_id"][0] == "[501]"
    assert pop.extra["activity_level"][0][:3] == ["active"] * 3
    assert pop.following[4] == [] and pop.hourly is not None and np.isnan(pop.hourly[4]).all()
    assert "Unnamed: 0" not in pop.extra


def test_oasis_reddit_json_with_repeated_usernames_runs(tmp_path, capsys):
    db, printed = run_profiles(tmp_path, DATA / "oasis_duplicates.json", capsys)
    fixes, usernames = fixes_and_usernames(db)
    assert usernames == ["Nina_K", "nina_k_2", "jonas_weber2", "ama.owusu", "NINA_K_3"]
    assert fixes == [
        (0, 1, "username", "nina_k", "nina_k_2", "duplicate"),
        (0, 2, "username", None, "jonas_weber2", "derived"),
        (0, 4, "username", "NINA_K", "NINA_K_3", "duplicate"),
    ]
    assert "2 username(s) of the profile file repeated" in printed
    pop = load(DATA / "oasis_duplicates.json")
    assert pop.age.tolist() == [34, 29, -1, -1, 21]  # NaN and "None" mean unknown
    assert pop.extra["flair"] == [None, "shutterbug", None, None, None]
    assert pop.extra["created_at"][3] == "2024-03-01"
