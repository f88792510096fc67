"""Turn a MiroShark or MiroFish simulation folder into a Shoal scenario folder.

The source folder is what their backends write before a run (`simulation_config.json` from
`SimulationConfigGenerator`, `twitter_profiles.csv` / `reddit_profiles.json` /
`polymarket_profiles.json` from `OasisProfileGenerator.save_profiles`). The scenario folder
gets:

- `profiles.csv`: the population in Shoal's `twitter_csv` profile format, the one format
  that carries a per-agent hourly activity curve (MiroShark's `active_hours`) next to the
  activity level and the stance hints;
- `stances.csv`: initial position and confidence per agent and topic (MiroShark's
  `BeliefState.from_profile` without its random noise);
- `follows.csv`: the initial follow graph that stands in for `influence_weight`;
- `config.yaml`: rule-based, runnable as it is (`shoal check`, `shoal run`); personas
  written in Chinese or Japanese (MiroFish writes Chinese ones) set `population.language`,
  so the agents are spoken to in the language of their personas, which are kept as given;
- `IMPORT.md`: every key path of `simulation_config.json` and every profile column, and
  what the importer did with it (used, approximated, dropped, and why): `FIELD_LEDGER`.

The scenario is built in a hidden sibling folder of `--out` and renamed into place, so an
import that fails (or is interrupted) leaves `--out` as it was; nothing is written through
a symbolic link. The work is linear in the number of profiles (bench/import.py).

Nothing here prints: `import_simulation` returns an `ImportReport` and the CLI shows it.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import json
import math
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from shoal.agents.profiles import SENTIMENT_WEIGHT, STANCE_LABELS
from shoal.config import load_config, validation_problems
from shoal.config.yaml_text import MAX_DEPTH, Dumper
from shoal.core.errors import InputError
from shoal.core.files import not_a_file
from shoal.core.language import DEFAULT, Templates, detect_cjk, templates
from shoal.core.text_files import DuplicateKey, read_user_text, unique_keys
from shoal.store.run_dir import is_run_dir

Source = Literal["miroshark", "mirofish"]
SOURCES: tuple[str, ...] = ("miroshark", "mirofish")

CONFIG_FILE = "simulation_config.json"
TWITTER_FILE = "twitter_profiles.csv"
REDDIT_FILE = "reddit_profiles.json"
POLYMARKET_FILE = "polymarket_profiles.json"
SOURCE_FILES = (CONFIG_FILE, TWITTER_FILE, REDDIT_FILE, POLYMARKET_FILE)
OUT_FILES = ("config.yaml", "profiles.csv", "stances.csv", "follows.csv", "IMPORT.md")

START_TIME = "2026-01-05T00:00:00"  # their round 0 starts at simulated hour 0 of day 1
FOLLOW_DEGREE = 20  # mean out-degree of the influence-weighted follow graph
# MiroShark's defaults (AgentActivityConfig, TimeSimulationConfig) for absent fields.
DEFAULT_ACTIVITY = 0.5
DEFAULT_HOURS = list(range(8, 23))
DEFAULT_INFLUENCE = 1.0
MAX_HOURS = 1_000_000  # bounds on times, so rounds stay an integer (not an overflow)
MAX_PROBLEMS = 10  # problems of simulation_config.json shown at once


# --------------------------------------------------------------------------- the ledger

Verdict = Literal["used", "approximated", "dropped"]


@dataclass(frozen=True)
class FieldRule:
    """What the import does with one source field, as IMPORT.md says it.

    `path` is a key path of `simulation_config.json` (`a.b`, `a[].b` for the objects of a
    list) or a profile column; one ending in `*` matches every path that starts with the
    rest. `how` may name `{rounds}`, `{minutes}`, `{degree}` and `{source}`: the import's
    own numbers and names, never source data. `when` is a condition the importer decides
    (`twitter on`, `reddit off`, `no hot topics`); empty means always. The first rule of a
    file that matches a path and whose condition holds is the one used.
    """

    file: str
    path: str
    verdict: Verdict
    how: str
    when: str = ""


def _ledger() -> list[FieldRule]:
    """The field ledger: the data file beside this module, in order."""
    text = resources.files("shoal.runs").joinpath("import_ledger.yaml").read_text("utf-8")
    return [FieldRule(**row) for row in yaml.safe_load(text)]


FIELD_LEDGER: list[FieldRule] = _ledger()


def field_rule(file: str, path: str, conditions: frozenset[str] = frozenset()) -> FieldRule:
    """The rule of `FIELD_LEDGER` for `path` of `file` (see `FieldRule`)."""
    for rule in FIELD_LEDGER:
        if rule.file != file or (rule.when and rule.when not in conditions):
            continue
        if rule.path == path or (rule.path.endswith("*") and path.startswith(rule.path[:-1])):
            return rule
    raise KeyError(f"{file}: no rule for {path!r}")  # every file ends with a `*` rule


@dataclass
class Ledger:
    """What happened to each source field: `(file, path) -> (verdict, how)`, and notes."""

    rows: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, file: str, path: str, verdict: str, how: str) -> None:
        """Record a field; the first word of `verdict` is used / approximated / dropped."""
        self.rows.setdefault((file, path), (verdict, how))

    def note(self, text: str) -> None:
        """Add a note once (an agent's value may be looked at more than once)."""
        if text not in self.notes:
            self.notes.append(text)

    def section(self, file: str) -> list[tuple[str, str, str]]:
        """(path, verdict, how) of the fields of `file`, in the order they were put."""
        return [(p, v, h) for (f, p), (v, h) in self.rows.items() if f == file]


@dataclass
class ImportReport:
    """What `import_simulation` wrote."""

    out: Path
    agents: int
    rounds: int
    platforms: list[str]
    topics: list[str]
    interventions: int
    files: list[str]
    notes: list[str]


# --------------------------------------------------------------------------- reading


def _depth_ok(value: Any, limit: int) -> bool:
    """Whether a JSON value nests at most `limit` lists/objects deep (iteratively)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        for v in item.values() if isinstance(item, dict) else item:
            if isinstance(v, dict | list):
                stack.append((v, depth + 1))
    return True


def _read_json(path: Path) -> Any:
    text = read_user_text(path, "JSON file", f"save {path.name} as UTF-8 JSON")
    deep = InputError(f"{path}: nested too deeply (more than {MAX_DEPTH} levels)")
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg} "
                         f"(column {exc.colno})") from None
    except ValueError:  # (an integer Python will not read: more than 4,300 digits)
        raise InputError(f"{path}: a number of more than 4,300 digits; no field takes "
                         "one") from None
    except DuplicateKey as exc:
        raise InputError(f"{path}: an object gives the key {exc.args[0]!r} twice; keep "
                         "one (only the last would count)") from None
    except RecursionError:
        raise deep from None
    if not _depth_ok(data, MAX_DEPTH):
        raise deep
    return data


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    text = read_user_text(path, "CSV file", f"save {path.name} as UTF-8 CSV")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        rows = [r for r in reader if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    if not rows:
        raise InputError(f"{path}: the CSV is empty")
    header = [c.strip() for c in rows[0]]
    twice = sorted({c for c in header if c and header.count(c) > 1})
    if twice:  # (a row's dict would keep the last column of the name)
        raise InputError(f"{path}: row 1: column {twice[0]!r} appears twice")
    out = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {i}: malformed CSV: {len(row)} fields, the "
                             f"header has {len(header)}")
        out.append({k: v for k, v in zip(header, row, strict=True)
                    if k and not k.startswith("Unnamed:")})  # pandas' index column
    return [c for c in header if c and not c.startswith("Unnamed:")], out


def _records(path: Path, data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path}: must be a JSON list of profile objects")
    return data


def key_paths(value: Any, prefix: str = "") -> list[str]:
    """Leaf key paths of a JSON value, each once, in order: `a.b`, list items of objects
    as `a[].b`."""
    out: dict[str, None] = {}
    _collect_paths(value, prefix, out)
    return list(out)


def _collect_paths(value: Any, prefix: str, out: dict[str, None]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict | list):
                _collect_paths(v, path, out)
            else:
                out[path] = None
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for item in value:
            if isinstance(item, dict):
                _collect_paths(item, f"{prefix}[]", out)
    elif prefix:
        out[prefix] = None


def _num(path: Path, where: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{path}: {where}: must be a number, got {_show(value)}")
    return float(value)


def _show(value: Any, limit: int = 80) -> str:
    """A value as a message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _uid_value(value: Any) -> int:
    """A user id: an integer >= 0, also written as "12" or 12.0 (OASIS, pandas). Read
    exactly where it is written as an integer: a 64-bit id (Twitter's) is beyond a
    float's 53 bits, and two ids must not become one."""
    text = str(value).strip()
    try:
        x: float = int(text)
    except ValueError:  # ("12.0", a word, or more digits than int() reads)
        try:
            x = float(text)
        except ValueError:
            raise ValueError(f"user id must be an integer, got {_show(value)}") from None
    if (isinstance(x, float) and not x.is_integer()) or x < 0:
        raise ValueError(f"user id must be an integer >= 0, got {_show(value)}")
    return int(x)


def _uid(path: Path, where: str, value: Any) -> int:
    try:
        return _uid_value(value)
    except ValueError as exc:
        raise InputError(f"{path}: {where}: {exc}") from None


# --------------------------------------------------------------------------- the schema

# The parts of simulation_config.json the import reads, typed: a value of the wrong type
# is one "file: field: must be ..." line, never a crash later. Unknown keys are allowed
# (IMPORT.md accounts for them); absent or null ones take MiroShark's defaults.
Num = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Weight = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
Hours = list[Annotated[int, Field(strict=True)]]
Uid = Annotated[int, BeforeValidator(_uid_value)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")


class _TimeConfig(_Section):
    total_simulation_hours: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0,
                                                   le=MAX_HOURS)] | None = None
    minutes_per_round: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=1,
                                              le=MAX_HOURS * 60)] | None = None
    agents_per_hour_max: Num | None = None
    peak_hours: Hours | None = None
    off_peak_hours: Hours | None = None
    morning_hours: Hours | None = None
    work_hours: Hours | None = None
    peak_activity_multiplier: Num | None = None
    off_peak_activity_multiplier: Num | None = None
    morning_activity_multiplier: Num | None = None
    work_activity_multiplier: Num | None = None


class _AgentConfig(_Section):
    agent_id: Uid | None = None
    entity_name: Any = None
    entity_type: Any = None
    activity_level: Num | None = None
    active_hours: Hours | None = None
    posts_per_hour: Num | None = None
    comments_per_hour: Num | None = None
    sentiment_bias: Num | None = None
    stance: Any = None
    influence_weight: Num | None = None


class _EventConfig(_Section):
    initial_posts: list[Any] | None = None
    scheduled_events: list[Any] | None = None
    hot_topics: list[Any] | None = None
    initial_markets: list[Any] | None = None


class _PlatformConfig(_Section):
    recency_weight: Weight | None = None
    popularity_weight: Weight | None = None
    relevance_weight: Weight | None = None
    echo_chamber_strength: Weight | None = None


class _SimConfig(_Section):
    simulation_id: Any = None
    simulation_requirement: Any = None
    time_config: _TimeConfig | None = None
    agent_configs: list[_AgentConfig] | None = None
    event_config: _EventConfig | None = None
    twitter_config: _PlatformConfig | None = None
    reddit_config: _PlatformConfig | None = None
    llm_model: Any = None
    llm_base_url: Any = None


def _parse_sim(path: Path, data: Any) -> _SimConfig:
    """simulation_config.json as typed data, or an InputError listing its problems (each
    naming the file and the field)."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: must be a JSON object (MiroShark's simulation config), "
                         f"got a {type(data).__name__}")
    try:
        return _SimConfig.model_validate(data)
    except ValidationError as exc:
        problems = [p.replace("must be a mapping", "must be a JSON object")
                    for p in validation_problems(exc, data, None, str(path))]
    problems = [p if len(p) <= 300 else p[:300] + "…" for p in problems]
    if len(problems) == 1:
        raise InputError(problems[0])
    more = len(problems) - MAX_PROBLEMS
    raise InputError(f"{len(problems)} problems in {path}:\n"
                     + "\n".join(f"  {p}" for p in problems[:MAX_PROBLEMS])
                     + (f"\n  ... and {more} more" if more > 0 else ""))


class _Dumper(Dumper):
    """YAML for people: no anchors, short lists of numbers on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _flow_numbers(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = bool(data) and all(isinstance(x, int | float) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _flow_numbers)


def _yaml(data: Any) -> str:
    """Data as YAML text (source data goes through the emitter, never into a template)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    """Text as a Markdown code span in a table cell."""
    t = _cell(text)
    return f"`` {t} ``" if "`" in t else f"`{t}`"


# --------------------------------------------------------------------------- follow graph


def influence_follows(weights: np.ndarray, degree: int, rng: np.random.Generator
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(followers, followees): agent i follows j != i independently with probability
    min(1, degree · w_j / (Σw − w_i)), so each agent follows about `degree` others and
    heavy agents gather followers. Work is linear in agents + edges, not in pairs.

    Pairs are drawn per band of followee weights within a factor of 2: every pair of the
    band is a candidate with one probability q at least each pair's own (a binomial
    count of uniformly chosen pairs, which is the same as a coin per pair), and a
    candidate is kept with its own probability / q. Within a band that ratio is at least
    3/8, so the candidates are a constant multiple of the edges. The few followers with
    more than a quarter of all weight (at most three) are drawn pair by pair.
    """
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    n = len(w)
    empty = np.empty(0, np.int64)
    if n < 2 or degree <= 0 or not (w > 0).any():
        return empty, empty
    w = w / w.max()  # only ratios matter; keeps the sum finite
    total = float(w.sum())
    rest = total - w
    c = np.divide(degree, rest, out=np.zeros(n), where=rest > 0)  # p_ij = min(1, c_i w_j)
    src, dst = [], []
    heavy = w > total / 4
    for i in np.flatnonzero(heavy):
        hit = rng.random(n) < np.minimum(1.0, c[i] * w)
        hit[i] = False
        dst.append(np.flatnonzero(hit))
        src.append(np.full(len(dst[-1]), i, np.int64))
    light = np.flatnonzero(~heavy & (rest > 0))
    c_max = degree / (0.75 * total)  # >= c_i of every light follower
    positive = np.flatnonzero(w > 0)
    bands = np.floor(np.log2(w[positive])).astype(np.int64)
    order = np.argsort(bands, kind="stable")
    cuts = np.flatnonzero(np.diff(bands[order])) + 1
    for members in np.split(positive[order], cuts):
        q = min(1.0, c_max * float(w[members].max()))
        pos = _bernoulli_positions(len(light) * len(members), q, rng)
        f, t = light[pos // len(members)], members[pos % len(members)]
        keep = (f != t) & (rng.random(len(pos)) * q < np.minimum(1.0, c[f] * w[t]))
        src.append(f[keep])
        dst.append(t[keep])
    if not src:
        return empty, empty
    return np.concatenate(src).astype(np.int64), np.concatenate(dst).astype(np.int64)


def _bernoulli_positions(length: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """The positions of the successes of `length` coins of probability `q`, in order."""
    if length <= 0 or q <= 0:
        return np.empty(0, np.int64)
    if q >= 0.5:  # enumerating costs at most twice the expected successes
        hit = rng.random(length) < q
        return np.flatnonzero(hit).astype(np.int64)
    k = int(rng.binomial(length, q))
    keys = _unique(rng.integers(0, length, k))
    while len(keys) < k:  # a uniform k-subset: redraw the repeats
        keys = _unique(np.concatenate([keys, rng.integers(0, length, k - len(keys))]))
    return keys


def _unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of an int64 array, sorted (a sort: faster than hashing)."""
    s = np.sort(np.asarray(a, dtype=np.int64))
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


# --------------------------------------------------------------------------- the import


@dataclass
class _Agent:
    """One agent as assembled from the profile files and its `agent_configs` entry."""

    uid: int
    name: str = ""
    username: str = ""
    bio: str = ""
    persona: str = ""
    about: dict[str, Any] | None = None  # the record whose demographics join the persona
    cfg: _AgentConfig | None = None
    twitter: bool = False
    reddit: bool = False
    following: list[int] = field(default_factory=list)
    previous_tweets: str = ""
    oasis_activity: str = ""
    oasis_hourly: str = ""


def _slug(text: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "topic"
    if not base[0].isalpha():
        base = f"t_{base}"
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _stance_label(value: Any) -> str:
    """A stance as the profile loader reads it (agents/profiles.py: case, spaces and
    hyphens do not matter); a missing stance is neutral."""
    return re.sub(r"[\s\-]+", "_", str(value or "neutral").strip().lower())


class _Importer:
    """One import: reads the source folder, fills the ledger, writes the scenario."""

    def __init__(self, source: Source, src: Path):
        self.source = source
        self.src = src
        self.ledger = Ledger()
        self.cfg_path = src / CONFIG_FILE
        self.raw: dict[str, Any] = {}
        self.sim = _SimConfig()

    # ----------------------------------------------------------------- inputs

    def read(self) -> None:
        """Read and check every input; nothing is written."""
        src = self.src
        if not src.exists():
            raise InputError(f"{src}: no such folder")
        if not src.is_dir():
            raise InputError(f"{src}: not a folder (give the {self.source} simulation folder)")
        if not self._present(self.cfg_path):
            raise InputError(f"{self.cfg_path}: not found; a {self.source} simulation folder "
                             f"holds {CONFIG_FILE} and {TWITTER_FILE} and/or {REDDIT_FILE}")
        raw = _read_json(self.cfg_path)
        self.sim = _parse_sim(self.cfg_path, raw)
        self.raw = raw
        twitter, reddit, poly = src / TWITTER_FILE, src / REDDIT_FILE, src / POLYMARKET_FILE
        has_twitter, has_reddit = self._present(twitter), self._present(reddit)
        if not has_twitter and not has_reddit:
            raise InputError(f"{twitter}: not found, and neither is {REDDIT_FILE}; "
                             "at least one profile file is needed")
        self.agents: dict[int, _Agent] = {}
        self.twitter_cols: list[str] = []
        self.reddit_keys: list[str] = []
        self.poly_keys: list[str] = []
        if has_twitter:
            self._read_twitter(twitter)
        if has_reddit:
            self._read_reddit(reddit)
        if self._present(poly):
            records = _records(poly, _read_json(poly))
            self.poly_keys = list(dict.fromkeys(k for r in records for k in r))
        self._read_agent_configs()
        if not self.agents:
            raise InputError(f"{src}: the profile files hold no profiles")

    def _present(self, path: Path) -> bool:
        """Whether an input file is there. A link is followed (reading through one is
        safe), with a note when it leads out of the folder; a broken one is an error."""
        if path.is_symlink():
            target = Path(os.path.realpath(path))
            if not target.exists():
                raise InputError(f"{path}: a symbolic link to {os.readlink(path)}, which "
                                 "does not exist")
            if target.parent != Path(os.path.realpath(self.src)):
                self.ledger.note(f"{path.name} is a symbolic link to {target}, outside "
                                 f"{self.src}; imported from there")
        if path.exists() and (problem := not_a_file(path)) is not None:
            # (a folder or a pipe by an input's name is a mistake, not a missing input)
            raise InputError(f"{path}: {problem}; an input file is expected there")
        return path.is_file()

    def _agent(self, uid: int) -> _Agent:
        return self.agents.setdefault(uid, _Agent(uid))

    def _read_twitter(self, path: Path) -> None:
        self.twitter_cols, rows = _read_csv(path)
        if not rows:
            raise InputError(f"{path}: the CSV has a header but no profile rows")
        for i, row in enumerate(rows):
            uid = _uid(path, f"row {i + 2}: user_id", row.get("user_id") or i)
            if uid in self.agents:
                raise InputError(f"{path}: row {i + 2}: user_id {uid} repeats an earlier row; "
                                 "agent_configs and initial posts refer to agents by it")
            a = self._agent(uid)
            a.twitter = True
            a.name = (row.get("name") or "").strip()
            a.username = (row.get("username") or "").strip()
            # OASIS writes user_char/description; the generator's live file bio/persona.
            a.bio = (row.get("description") or row.get("bio") or "").strip()
            a.persona = (row.get("user_char") or row.get("persona") or "").strip()
            a.about = row
            a.previous_tweets = row.get("previous_tweets") or ""
            a.oasis_activity = (row.get("activity_level") or "").strip()
            a.oasis_hourly = (row.get("activity_level_frequency") or "").strip()
            follows = (row.get("following_agentid_list") or "").strip()
            if follows.startswith("["):
                try:
                    a.following = [int(x) for x in json.loads(follows)]
                except (ValueError, TypeError, OverflowError, RecursionError):
                    raise InputError(f"{path}: row {i + 2}: following_agentid_list: must be "
                                     f"a list of agent ids, got {_show(follows)}") from None

    def _read_reddit(self, path: Path) -> None:
        records = _records(path, _read_json(path))
        if not records:
            raise InputError(f"{path}: the JSON list contains no profiles")
        self.reddit_keys = list(dict.fromkeys(k for r in records for k in r))
        for i, r in enumerate(records):
            uid = _uid(path, f"item {i}: user_id", r.get("user_id", i))
            if uid in self.agents and self.agents[uid].reddit:
                raise InputError(f"{path}: item {i}: user_id {uid} repeats an earlier item")
            a = self._agent(uid)
            a.reddit = True
            if not a.twitter:  # same entity, same text: the twitter row already has it
                a.name = str(r.get("realname") or r.get("name") or "").strip()
                a.username = str(r.get("username") or "").strip()
                a.bio = str(r.get("bio") or "").strip()
                a.persona = str(r.get("persona") or "").strip()
            a.about = r if self._about(r) else a.about

    @staticmethod
    def _about(r: dict[str, Any] | None, words: Templates | None = None) -> list[str]:
        """A record's demographics and interests as sentences of the personas' language
        (`words`; English by default), to follow the persona."""
        if r is None:
            return []
        words = words or templates()
        parts = []
        if r.get("age") not in (None, ""):
            parts.append(words("profile.age", age=r["age"]))
        for key in ("gender", "mbti", "country", "profession"):
            if r.get(key) not in (None, ""):
                parts.append(str(r[key]))
        topics = r.get("interested_topics")
        if isinstance(topics, str) and topics.strip().startswith("["):
            with contextlib.suppress(ValueError, RecursionError):
                topics = json.loads(topics)
        sep = words.text("language.sep")
        text = sep.join(parts)
        out = [words("profile.about", about=text[:1].upper() + text[1:])] if parts else []
        if isinstance(topics, list) and topics:
            out.append(words("profile.interests", topics=sep.join(str(t) for t in topics)))
        elif isinstance(topics, str) and topics.strip():
            out.append(words("profile.interests", topics=topics.strip()))
        return out

    def _read_agent_configs(self) -> None:
        for i, c in enumerate(self.sim.agent_configs or []):
            uid = i if c.agent_id is None else c.agent_id
            if uid in self.agents and self.agents[uid].cfg is not None:
                raise InputError(f"{self.cfg_path}: agent_configs[{i}]: agent_id {uid} "
                                 "repeats an earlier entry")
            a = self._agent(uid)
            a.cfg = c
            if not a.name:
                a.name = str(c.entity_name or "").strip()

    # ----------------------------------------------------------------- mapping

    def build(self) -> None:
        """Decide rounds, the activity curve, agent order, platforms, topics, usernames."""
        t = self.sim.time_config or _TimeConfig()
        hours = 72.0 if t.total_simulation_hours is None else t.total_simulation_hours
        self.mpr = 60 if t.minutes_per_round is None else int(t.minutes_per_round)
        self.rounds = max(1, int(hours * 60) // self.mpr)  # their runner's formula
        self.curve = self._time_curve(t)

        # Agent order: the twitter rows as they are (OASIS follow lists are row numbers),
        # then agents only the reddit file or only agent_configs know.
        self.order = sorted(self.agents, key=lambda u: (not self.agents[u].twitter,
                                                        not self.agents[u].reddit, u))
        self.row_of = {uid: i for i, uid in enumerate(self.order)}
        # MiroFish writes its personas in Chinese: the agents are then spoken to in the
        # language of their personas (kept as given).
        self.language = detect_cjk([a.persona or a.bio for a in self.agents.values()]) \
            or DEFAULT
        if self.language != DEFAULT:
            name = templates(self.language)("language.name")
            self.ledger.note(f"the personas are written in {name}: population.language is "
                             f"{self.language}, so the agents are spoken to in it (the "
                             "personas are kept as given)")
        self._platforms()
        self._topics()
        self._usernames()

    @staticmethod
    def _time_curve(t: _TimeConfig) -> list[float]:
        """24 hourly multipliers: their four hour bands, 1.0 for hours in none of them."""
        curve = [1.0] * 24
        for band, default_mult, default_hours in (
                ("work", 0.7, list(range(9, 19))), ("morning", 0.4, [6, 7, 8]),
                ("off_peak", 0.05, [0, 1, 2, 3, 4, 5]), ("peak", 1.5, [19, 20, 21, 22])):
            mult = getattr(t, f"{band}_activity_multiplier")
            hours = getattr(t, f"{band}_hours")
            for h in {h % 24 for h in (default_hours if hours is None else hours)}:
                curve[h] = max(default_mult if mult is None else mult, 0.0)
        return curve

    def _platforms(self) -> None:
        has = {"twitter": any(a.twitter for a in self.agents.values()),
               "reddit": any(a.reddit for a in self.agents.values())}
        given = {"twitter": self.sim.twitter_config, "reddit": self.sim.reddit_config}
        if any(c is not None for c in given.values()):
            self.enabled = [n for n in ("twitter", "reddit") if given[n] is not None]
        else:  # an older file without platform sections: the profile files decide
            self.enabled = [n for n in ("twitter", "reddit") if has[n]]
        if not self.enabled:
            raise InputError(f"{self.cfg_path}: twitter_config and reddit_config are both "
                             "null: no platform to simulate")
        self.platform_cfg = given
        self.has_profiles = has

    def _topics(self) -> None:
        hot = (self.sim.event_config or _EventConfig()).hot_topics or []
        taken: set[str] = set()
        self.topics: list[dict[str, Any]] = []
        for h in hot:
            label = " ".join(str(h).split())
            if label:
                self.topics.append({"name": _slug(label, taken), "label": label,
                                    "keywords": [label]})
        self.no_hot_topics = not self.topics
        if not self.topics:
            req = " ".join(str(self.sim.simulation_requirement or "").split())
            self.topics = [{"name": "scenario", "label": (req[:80] or "the scenario")}]

    def _usernames(self) -> None:
        seen: set[str] = set()
        for uid in self.order:
            a = self.agents[uid]
            if not a.name and not a.username:
                a.name = f"agent {uid}"
            u = a.username
            if u and u.lower() in seen:
                new = f"{u}_{uid}"
                self.ledger.note(f"username {u!r} of user {uid} is taken by an earlier "
                                 f"profile: renamed {new!r}")
                a.username = u = new
            if u:
                seen.add(u.lower())

    # ----------------------------------------------------------------- per agent

    def _position(self, a: _Agent) -> tuple[float, float] | None:
        """MiroShark BeliefState.from_profile without its noise: (position, confidence)."""
        if a.cfg is None:
            return None
        label = _stance_label(a.cfg.stance)
        if label not in STANCE_LABELS:
            self.ledger.note(f"agent_configs (agent_id {a.uid}): stance {label!r} is not a "
                             "MiroShark label; counted as neutral (0), as MiroShark does")
        bias = self._bias(a)
        pos = STANCE_LABELS.get(label, 0.0) + SENTIMENT_WEIGHT * bias
        conf = 0.4 + abs(bias) * 0.4
        return min(1.0, max(-1.0, pos)), min(1.0, max(0.1, conf))

    def _bias(self, a: _Agent) -> float:
        """sentiment_bias, clipped to the documented [-1, 1] (a note says when)."""
        assert a.cfg is not None
        bias = a.cfg.sentiment_bias or 0.0
        if not -1 <= bias <= 1:
            self.ledger.note(f"agent_configs (agent_id {a.uid}): sentiment_bias {bias:g} is "
                             "outside [-1, 1]; clipped")
        return min(1.0, max(-1.0, bias))

    def _activity(self, a: _Agent) -> tuple[str, str]:
        """(activity_level, activity_level_frequency) cells for the profile row.

        MiroShark: an agent is a candidate at hour h iff h is in active_hours, with
        probability activity_level, and the hour band's multiplier scales how many are
        drawn. Shoal: P = level * curve[h], the curve normalised to mean 1. With
        curve = indicator * multiplier and level = activity_level * mean(indicator *
        multiplier), P = activity_level * multiplier in the active hours and 0 outside.
        """
        if a.cfg is None:
            return a.oasis_activity, a.oasis_hourly
        level = DEFAULT_ACTIVITY if a.cfg.activity_level is None else a.cfg.activity_level
        hours = set(DEFAULT_HOURS if a.cfg.active_hours is None
                    else (h % 24 for h in a.cfg.active_hours))
        raw = [self.curve[h] if h in hours else 0.0 for h in range(24)]
        mean = sum(raw) / 24
        if mean <= 0:  # no active hour: never active (an all-zero curve would mean "flat")
            return "0", ""
        scaled = min(1.0, max(0.0, level * mean))
        return f"{scaled:.6g}", json.dumps([round(x, 6) for x in raw])

    # ----------------------------------------------------------------- outputs

    def write(self, out: Path) -> ImportReport:
        """Write the scenario into the new, empty folder `out` and check its config."""
        files = ["profiles.csv"]
        _write_new(out / "profiles.csv", self._profiles_csv())
        stances = self._stances_csv()
        if stances:
            _write_new(out / "stances.csv", stances)
            files.append("stances.csv")
        follows = self._follows_csv()
        if follows:
            _write_new(out / "follows.csv", follows)
            files.append("follows.csv")
        config = self._config(bool(follows), bool(stances))
        header = (f"# Imported from a {self.source} simulation folder by `shoal import "
                  f"{self.source}`.\n# What each source field became: IMPORT.md.\n")
        _write_new(out / "config.yaml", header + _yaml(config))
        files.insert(0, "config.yaml")
        self._account()
        files.append("IMPORT.md")
        _write_new(out / "IMPORT.md", self._markdown(config, files))
        load_config(out / "config.yaml")  # what we wrote must be a valid Shoal config
        return ImportReport(out=out, agents=len(self.order), rounds=self.rounds,
                            platforms=self.enabled, topics=[t["name"] for t in self.topics],
                            interventions=len(config.get("interventions", [])), files=files,
                            notes=list(self.ledger.notes))

    def _profiles_csv(self) -> str:
        cols = ["user_id", "name", "username", "user_char", "description", "activity_level",
                "activity_level_frequency", "stance", "sentiment_bias", "previous_tweets"]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        words = templates(self.language)
        for uid in self.order:
            a = self.agents[uid]
            kind = f"[{a.cfg.entity_type}] " if a.cfg and a.cfg.entity_type else ""
            persona = " ".join([kind + (a.persona or a.bio),
                                *self._about(a.about, words)]).strip()
            level, hourly = self._activity(a)
            stance = bias = ""
            if a.cfg is not None:
                label = _stance_label(a.cfg.stance)
                stance = label if label in STANCE_LABELS else "0"
                bias = f"{self._bias(a):g}"
            w.writerow([uid, a.name, a.username, persona, a.bio, level, hourly, stance, bias,
                        a.previous_tweets])
        return buf.getvalue()

    def _stances_csv(self) -> str:
        rows = []
        for uid in self.order:
            pc = self._position(self.agents[uid])
            if pc is not None:
                rows += [(self.row_of[uid], t["name"], f"{pc[0]:.6g}", f"{pc[1]:.6g}")
                         for t in self.topics]
        if not rows:
            return ""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["agent_id", "topic", "position", "confidence"])
        w.writerows(rows)
        return buf.getvalue()

    def _influence(self, a: _Agent) -> float:
        w = a.cfg.influence_weight if a.cfg is not None else None
        return DEFAULT_INFLUENCE if w is None else max(w, 0.0)

    def _follows_csv(self) -> str:
        """Follows from OASIS lists plus an influence-weighted graph (seeded, fixed)."""
        n = len(self.order)
        listed = [(i, j) for i, uid in enumerate(self.order)
                  for j in self.agents[uid].following if 0 <= j < n and j != i]
        src = np.array([i for i, _ in listed], dtype=np.int64)
        dst = np.array([j for _, j in listed], dtype=np.int64)
        weights = np.array([self._influence(self.agents[u]) for u in self.order])
        # The import is deterministic: same folder, same graph.
        i, j = influence_follows(weights, min(FOLLOW_DEGREE, n - 1), np.random.default_rng(0))
        keys = _unique(np.concatenate([src * n + dst, i * n + j]))
        if not len(keys):
            return ""
        pairs = zip((keys // n).tolist(), (keys % n).tolist(), strict=True)
        return "follower,followee\n" + "".join(f"{a},{b}\n" for a, b in pairs)

    def _platform_section(self, name: str) -> dict[str, Any]:
        if name not in self.enabled:
            return {"enabled": False}
        c = self.platform_cfg.get(name)
        section: dict[str, Any] = {}
        members = [self.row_of[u] for u in self.order if getattr(self.agents[u], name)]
        if self.has_profiles[name] and len(members) < len(self.order):
            section["members"] = {"ids": members}
        rec: dict[str, Any] = {"kind": "personalized"}
        if c is not None and (c.model_fields_set or c.model_extra):
            for key, theirs, default in (("recency_weight", c.recency_weight, 0.4),
                                         ("popularity_weight", c.popularity_weight, 0.3),
                                         ("interest_weight", c.relevance_weight, 0.3),
                                         ("stance_weight", c.echo_chamber_strength, 0.5)):
                rec[key] = default if theirs is None else theirs
        section["recommender"] = rec
        return section

    def _post_rate(self) -> float | None:
        shares = []
        for a in self.agents.values():
            if a.cfg is None:
                continue
            posts = 1.0 if a.cfg.posts_per_hour is None else a.cfg.posts_per_hour
            comments = 2.0 if a.cfg.comments_per_hour is None else a.cfg.comments_per_hour
            if posts + comments > 0:
                shares.append(max(posts, 0.0) / (max(posts, 0.0) + max(comments, 0.0)))
        return round(sum(shares) / len(shares), 4) if shares else None

    def _max_active(self) -> int | None:
        top = (self.sim.time_config or _TimeConfig()).agents_per_hour_max
        if top is None:
            return None
        cap = min(top * max(self.curve), len(self.order))  # (min first: no inf to ceil)
        return max(1, math.ceil(cap)) if cap > 0 else None

    def _interventions(self) -> list[dict[str, Any]]:
        ev = self.sim.event_config or _EventConfig()
        out: list[dict[str, Any]] = []
        items = []
        for i, post in enumerate(ev.initial_posts or []):
            if not isinstance(post, dict) or not str(post.get("content") or "").strip():
                self.ledger.note(f"event_config.initial_posts[{i}]: no content; skipped")
                continue
            raw = post.get("poster_agent_id")
            uid = None if raw is None else _uid(
                self.cfg_path, f"event_config.initial_posts[{i}].poster_agent_id", raw)
            author = self.row_of.get(uid) if uid is not None else None
            if uid is not None and author is None:
                self.ledger.note(f"event_config.initial_posts[{i}]: poster_agent_id {uid} "
                                 "has no profile; posted by the news account")
            pc = self._position(self.agents[uid]) if author is not None else None
            stance = {t["name"]: round(pc[0], 4) for t in self.topics} if pc else {}
            for name in self.enabled:
                member = uid is not None and author is not None and (
                    not self.has_profiles[name] or getattr(self.agents[uid], name))
                items.append({"platform": name, "author": author if member else None,
                              "text": " ".join(str(post["content"]).split()),
                              **({"stance": dict(stance)} if stance else {})})
        if items:
            out.append({"kind": "posts", "name": "initial-posts", "round": 0, "items": items})
        for i, e in enumerate(ev.scheduled_events or []):
            entry = self._event(i, e)
            if entry is not None:
                out.append(entry)
        return out

    def _event(self, i: int, e: Any) -> dict[str, Any] | None:
        """A scheduled event as `kind: event`. Their generator writes the list empty and
        defines no schema, so the usual names for a time and a text are accepted."""
        where = f"event_config.scheduled_events[{i}]"
        if not isinstance(e, dict):
            self.ledger.note(f"{where}: not an object; skipped")
            return None
        text = ": ".join(str(e.get(k)).strip() for k in ("title", "content") if e.get(k))
        text = text or next((str(e[k]) for k in ("text", "description", "headline", "event")
                             if e.get(k)), "")
        minutes = None
        for k, scale in (("trigger_minute", 1), ("minute", 1), ("trigger_hour", 60),
                         ("hour", 60), ("time_hours", 60), ("at_hour", 60)):
            if e.get(k) is not None:
                minutes = _num(self.cfg_path, f"{where}.{k}", e[k], 0) * scale
                break
        rnd: float | None = None
        for k in ("round", "trigger_round"):
            if e.get(k) is not None:
                rnd = math.floor(_num(self.cfg_path, f"{where}.{k}", e[k], 0)) + 1  # 0-based
        if rnd is None and minutes is not None:
            rnd = minutes // self.mpr + 1  # (a float: an hour of 1e308 is no overflow)
        if not text.strip() or rnd is None:
            self.ledger.note(f"{where}: needs a text and a time; skipped")
            return None
        if not 1 <= rnd <= self.rounds:
            self.ledger.note(f"{where}: fires at round {rnd:g}, outside 1..{self.rounds}; "
                             "skipped")
            return None
        entry: dict[str, Any] = {"kind": "event", "name": f"event-{i}", "round": int(rnd),
                                 "text": " ".join(text.split())}
        plats = e.get("platforms") if e.get("platforms") is not None else e.get("platform")
        if isinstance(plats, str):
            plats = [plats]
        if plats is not None and (not isinstance(plats, list)
                                  or not all(isinstance(p, str) for p in plats)):
            raise InputError(f"{self.cfg_path}: {where}.platforms: must be a platform name "
                             f"or a list of them, got {_show(plats)}")
        if plats:
            entry["platforms"] = [p for p in plats if p in self.enabled] or None
        if e.get("duration_hours") is not None:
            hours = _num(self.cfg_path, f"{where}.duration_hours", e["duration_hours"], 1)
            entry["duration"] = max(1, math.ceil(min(hours * 60 / self.mpr, self.rounds)))
        return {k: v for k, v in entry.items() if v is not None}

    def _config(self, follows: bool, stances: bool) -> dict[str, Any]:
        sim_id = str(self.sim.simulation_id or "")
        name = re.sub(r"[^A-Za-z0-9_-]+", "_", sim_id).strip("_-") or self.source
        if not name[0].isalpha():
            name = f"{self.source}_{name}"
        activity: dict[str, Any] = {"level": DEFAULT_ACTIVITY, "hourly": self.curve}
        cap = self._max_active()
        if cap is not None:
            activity["max_active"] = cap
        cfg: dict[str, Any] = {
            "name": name[:60], "seed": 0, "rounds": self.rounds,
            "minutes_per_round": self.mpr, "start_time": START_TIME,
            "population": {"file": "profiles.csv", "format": "twitter_csv",
                           **({"language": self.language} if self.language != DEFAULT
                              else {})},
            "topics": self.topics,
            "initial_stances": {"default": {"dist": "normal", "mean": 0.0, "std": 0.15},
                                "confidence": 0.4, "from_profiles": True,
                                **({"file": "stances.csv"} if stances else {})},
            "activity": activity,
            "platforms": {n: self._platform_section(n) for n in ("twitter", "reddit")},
            "graph": {"kind": "edgelist", "file": "follows.csv"} if follows else "none",
        }
        rate = self._post_rate()
        if rate is not None:
            cfg["policy"] = {"kind": "rule", "post_rate": rate}
        interventions = self._interventions()
        if interventions:
            cfg["interventions"] = interventions
        return cfg

    # ----------------------------------------------------------------- IMPORT.md

    def _conditions(self) -> frozenset[str]:
        """The `when` conditions of FIELD_LEDGER that hold for this import."""
        on = {f"{p} {'on' if p in self.enabled else 'off'}" for p in ("twitter", "reddit")}
        return frozenset(on | ({"no hot topics"} if self.no_hot_topics else set()))

    def _account(self) -> None:
        """Fill the ledger from FIELD_LEDGER: every key path of the config and every
        profile column."""
        conditions = self._conditions()
        numbers = {"rounds": self.rounds, "minutes": self.mpr, "degree": FOLLOW_DEGREE,
                   "source": self.source}
        fields = [(CONFIG_FILE, p) for p in key_paths(self.raw)]
        fields += [(TWITTER_FILE, c) for c in self.twitter_cols]
        fields += [(REDDIT_FILE, k) for k in self.reddit_keys]
        fields += [(POLYMARKET_FILE, k) for k in self.poly_keys]
        for file, path in fields:
            rule = field_rule(file, path, conditions)
            self.ledger.put(file, path, rule.verdict, rule.how.format(**numbers))

    def _markdown(self, config: dict[str, Any], files: list[str]) -> str:
        req = " ".join(str(self.sim.simulation_requirement or "").split())
        lines = [
            f"# Imported from {self.source}",
            "",
            f"Source: {_code(str(self.src))}. Written by `shoal import {self.source}`: "
            + ", ".join(f"`{f}`" for f in files) + ".",
            "",
            f"{len(self.order)} agents, {self.rounds} rounds of {self.mpr} minutes, "
            f"platforms {', '.join(self.enabled)}, topics "
            f"{', '.join(t['name'] for t in self.topics)}, "
            f"{len(config.get('interventions', []))} interventions. Rule-based: "
            "`shoal run config.yaml` needs no LLM.",
            "",
        ]
        if req:
            lines += [f"> {req}", ""]
        lines += ["Verdicts: **used** (as the named Shoal field), **approximated** (how is "
                  "said), **dropped** (why is said).", ""]
        for file in SOURCE_FILES:
            rows = self.ledger.section(file)
            if not rows:
                continue
            what = "key path" if file == CONFIG_FILE else "column"
            lines += [f"## {file}", "", f"| {what} | verdict | what Shoal did |", "|---|---|---|"]
            lines += [f"| {_code(p)} | {v} | {_cell(h)} |" for p, v, h in rows]
            lines.append("")
        types: dict[str, list[int]] = {}
        for uid in self.order:
            a = self.agents[uid]
            if a.cfg and a.cfg.entity_type:
                types.setdefault(str(a.cfg.entity_type), []).append(self.row_of[uid])
        if types:
            lines += ["## Agents by entity type", "",
                      "Shoal agent ids (row order of `profiles.csv`), for selectors such as "
                      "`target: {ids: [...]}`:", "", "| entity type | agent ids |", "|---|---|"]
            lines += [f"| {_cell(t)} | {ids} |" for t, ids in types.items()]
            lines.append("")
        lines += self._markets_md()
        llm = {"llm": {"providers": [{
            "base_urls": [str(self.sim.llm_base_url or "https://api.openai.com/v1")],
            "model": str(self.sim.llm_model or "gpt-4o-mini"),
            "api_key_env": "LLM_API_KEY"}], "agents": {"fraction": 1.0}}}
        lines += ["## LLM agents", "",
                  "The config is rule-based. To let a model drive agents (docs/llm.md), add "
                  "the section below; `api_key_env` is the NAME of the variable holding the "
                  "key, never the key:", "", "```yaml", _yaml(llm).rstrip(), "```", ""]
        others = sorted(p.name for p in self.src.iterdir() if p.name not in SOURCE_FILES)
        if others:
            lines += ["## Other files in the folder", "",
                      "Not read (a run's outputs and state, not its inputs): "
                      + ", ".join(_code(o) for o in others) + ".", ""]
        if self.ledger.notes:
            lines += ["## Notes", ""] + [f"- {_cell(n)}" for n in self.ledger.notes] + [""]
        return "\n".join(lines)

    def _markets_md(self) -> list[str]:
        """Their prediction markets as a `platforms.market` section to finish by hand."""
        markets = []
        for i, m in enumerate((self.sim.event_config or _EventConfig()).initial_markets or []):
            if not isinstance(m, dict) or not str(m.get("question") or "").strip():
                continue
            entry: dict[str, Any] = {
                "id": f"market_{i}", "question": " ".join(str(m["question"]).split()),
                "topic": self.topics[0]["name"],
                "outcomes": [str(m.get("outcome_a") or "yes"), str(m.get("outcome_b") or "no")]}
            p = m.get("initial_probability")
            if isinstance(p, int | float) and not isinstance(p, bool) and 0 < p < 1:
                entry["initial_prices"] = [round(p, 4), round(1 - p, 4)]
            entry["resolution"] = {"rule": {"topic": self.topics[0]["name"],
                                            "metric": "mean_position", "op": ">", "value": 0}}
            markets.append(entry)
        if not markets:
            return []
        section = {"platforms": {"market": {"members": {"fraction": 1.0}, "markets": markets}}}
        return ["## Prediction markets", "",
                f"Shoal has a prediction-market platform (docs/markets.md); the import leaves "
                f"it off, because a {self.source} market names no topic for rule traders to "
                "read and no rule that resolves it. To trade these markets, add the section "
                "below to `config.yaml` after checking each `topic` and `resolution` (here: "
                "the first topic, resolved by the mean position at the last round) and who "
                "trades (`members`):", "", "```yaml", _yaml(section).rstrip(), "```", ""]


# --------------------------------------------------------------------------- writing safely


def _write_new(path: Path, text: str) -> None:
    """Create `path` and write `text`; never opens an existing file or a link."""
    with open(path, "x", encoding="utf-8", newline="") as f:
        f.write(text)


def _link_target(path: Path) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(path)
    return "?"


def _check_out(out: Path, force: bool) -> None:
    """Refuse an `--out` the import may not write: a link, a file, a folder that holds a
    link, or a non-empty folder without `force`."""
    if out.is_symlink():
        raise InputError(f"--out {out}: is a symbolic link (to {_link_target(out)}); the "
                         "import never writes through a link: give the folder itself")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if not out.is_dir():
        return
    if is_run_dir(out):  # --force overwrites imported files, never a run's
        raise InputError(f"--out {out}: is a run directory; an import never writes into a "
                         "run: give a new folder")
    entries = sorted(out.iterdir())
    if entries and not force:
        raise InputError(f"--out {out}: the folder exists and is not empty; choose another "
                         "or pass --force to overwrite the imported files")
    for entry in entries:
        if entry.is_symlink():
            raise InputError(f"--out {out}: {entry.name} is a symbolic link (to "
                             f"{_link_target(entry)}); the import never writes through a "
                             "link and does not write into a folder that holds one: remove "
                             "it, or choose another folder")


def _hidden_sibling(out: Path, what: str) -> Path:
    """A new, empty, hidden folder next to `out` (same file system: renames are atomic)."""
    for _ in range(100):
        path = out.parent / f".{out.name}.{secrets.token_hex(4)}.{what}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"--out {out}: cannot write in {out.parent}: "
                             f"{exc.strerror or exc}") from None
    raise InputError(f"--out {out}: cannot make a temporary folder next to it")


def _commit(tmp: Path, out: Path, files: list[str], force: bool) -> None:
    """Put the finished scenario `tmp` in place as `out`.

    A new `out` is one rename of the whole folder. An existing one (empty, or with
    `--force`) keeps its own identity and the user's files: the earlier import's files are
    moved aside to a hidden folder and the new ones moved in, all by renames (no copying,
    so the window between them is tiny); a failure moves everything back, so `out` holds
    one import or the other, never a mixture.
    """
    _check_out(out, force)  # again: the folder may have changed while we wrote
    if not out.exists():
        try:
            os.rename(tmp, out)
        except OSError as exc:
            raise InputError(f"--out {out}: cannot put the scenario there: "
                             f"{exc.strerror or exc}") from None
        return
    old = _hidden_sibling(out, "replaced")
    moved_old: list[str] = []
    moved_new: list[str] = []
    try:
        for name in OUT_FILES:
            if (out / name).is_symlink() or (out / name).exists():
                os.rename(out / name, old / name)  # (renames a link itself, never its target)
                moved_old.append(name)
        for name in files:
            os.rename(tmp / name, out / name)
            moved_new.append(name)
    except BaseException:
        for name in reversed(moved_new):
            with contextlib.suppress(OSError):
                os.rename(out / name, tmp / name)
        for name in reversed(moved_old):
            with contextlib.suppress(OSError):
                os.rename(old / name, out / name)
        with contextlib.suppress(OSError):
            old.rmdir()  # (only if everything went back: never the earlier files)
        raise
    shutil.rmtree(old, ignore_errors=True)
    tmp.rmdir()


class _Terminated(BaseException):
    """SIGTERM while writing (`timeout`, a job scheduler): clean up, then exit 143."""


@contextlib.contextmanager
def _cleanup_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into an exception while the scenario is written, so the temporary
    folder is removed (only in the main thread, where signal handlers live)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, raise_)
    try:
        yield
    except _Terminated:
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def import_simulation(source: str, src: str | Path, out: str | Path,
                      force: bool = False) -> ImportReport:
    """Import the `source` ("miroshark" or "mirofish") folder `src` into the scenario
    folder `out`. A non-empty `out` is refused unless `force` (then the importer's own
    files in it are replaced, and nothing else). The scenario is built in a hidden sibling
    folder and renamed into place: a failure leaves `out` as it was. Raises `InputError`
    naming the file (and field) for bad input."""
    if source not in SOURCES:
        raise InputError(f"unknown source {source!r}; sources: {', '.join(SOURCES)}")
    src, out = Path(src), Path(out)
    _check_out(out, force)
    with _no_gc():
        return _import(_Importer(source, src), out, force)  # type: ignore[arg-type]


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cycle collector off while the import builds its many small objects (none in
    cycles): its full passes over them cost a third of a 100k-profile import."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _import(imp: _Importer, out: Path, force: bool) -> ImportReport:
    """Read, build, write into a hidden sibling of `out`, and move it into place."""
    imp.read()
    imp.build()
    made: list[Path] = []  # parent folders this import creates (removed again on failure)
    for parent in reversed(out.absolute().parents):
        if not parent.exists():
            try:
                parent.mkdir()
            except OSError as exc:
                raise InputError(f"--out {out}: cannot create {parent}: "
                                 f"{exc.strerror or exc}") from None
            made.append(parent)
    target = Path(os.path.abspath(out))  # (`--out .` has a name and a parent)
    tmp: Path | None = None
    try:
        with _cleanup_on_sigterm():
            tmp = _hidden_sibling(target, "importing")
            report = imp.write(tmp)
            _commit(tmp, target, report.files, force)
    except BaseException as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for parent in reversed(made):
            with contextlib.suppress(OSError):
                parent.rmdir()
        if isinstance(exc, InputError) and tmp is not None and str(tmp) in str(exc):
            # (the written config failed its check: name where it was meant to go)
            raise InputError(str(exc).replace(str(tmp), str(out))) from None
        raise
    report.out = out
    return report
