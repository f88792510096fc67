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
- `config.yaml`: rule-based, runnable as it is (`shoal check`, `shoal run`);
- `IMPORT.md`: every key path of `simulation_config.json` and every profile column, and
  what the importer did with it (used, approximated, dropped, and why).

Nothing here prints: `import_simulation` returns an `ImportReport` and the CLI shows it.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sim.config import load_config
from sim.core.errors import InputError

Source = Literal["miroshark", "mirofish"]
SOURCES: tuple[str, ...] = ("miroshark", "mirofish")

CONFIG_FILE = "simulation_config.json"
TWITTER_FILE = "twitter_profiles.csv"
REDDIT_FILE = "reddit_profiles.json"
POLYMARKET_FILE = "polymarket_profiles.json"
OUT_FILES = ("config.yaml", "profiles.csv", "stances.csv", "follows.csv", "IMPORT.md")

# MiroShark BeliefState.from_profile: stance label -> base position; unknown labels count 0.
STANCE_POSITIONS = {
    "strongly_supportive": 0.9, "supportive": 0.6, "neutral": 0.0, "observer": 0.0,
    "opposing": -0.6, "strongly_opposing": -0.9,
}
SENTIMENT_WEIGHT = 0.2  # position = base + 0.2 * sentiment_bias
START_TIME = "2026-01-05T00:00:00"  # their round 0 starts at simulated hour 0 of day 1
FOLLOW_DEGREE = 20  # mean out-degree of the influence-weighted follow graph
# MiroShark's defaults (AgentActivityConfig, TimeSimulationConfig) for absent fields.
DEFAULT_ACTIVITY = 0.5
DEFAULT_HOURS = list(range(8, 23))
DEFAULT_INFLUENCE = 1.0


# --------------------------------------------------------------------------- the ledger


@dataclass
class Ledger:
    """What happened to each source field: `(file, path) -> (verdict, how)`."""

    rows: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, file: str, path: str, verdict: str, how: str) -> None:
        """Record a field; the first word of `verdict` is used / approximated / dropped."""
        self.rows.setdefault((file, path), (verdict, how))

    def section(self, file: str) -> list[tuple[str, str, str]]:
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


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg} "
                         f"(column {exc.colno})") from None


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        rows = [r for r in reader if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    if not rows:
        raise InputError(f"{path}: the CSV is empty")
    header = [c.strip() for c in rows[0]]
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


def key_paths(value: Any, prefix: str = "") -> Iterator[str]:
    """Leaf key paths of a JSON value: `a.b`, list items of objects as `a[].b`."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from key_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        seen: dict[str, None] = {}
        for item in value:
            for p in key_paths(item, f"{prefix}[]") if isinstance(item, dict) else ():
                seen.setdefault(p)
        yield from seen
    elif prefix:
        yield prefix


def _num(path: Path, where: str, value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{path}: {where}: must be a number, got {value!r}")
    return float(value)


def _uid(path: Path, where: str, value: Any) -> int:
    try:
        x = float(str(value).strip())
    except ValueError:
        raise InputError(f"{path}: {where}: user id must be an integer, got {value!r}") from None
    if not x.is_integer() or x < 0:
        raise InputError(f"{path}: {where}: user id must be an integer >= 0, got {value!r}")
    return int(x)


def _hours(path: Path, where: str, value: Any, default: list[int]) -> list[int]:
    if value is None:
        return default
    if not isinstance(value, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise InputError(f"{path}: {where}: must be a list of hours 0-23, got {value!r}")
    return sorted({h % 24 for h in value})


class _Dumper(yaml.SafeDumper):
    """YAML for people: no anchors, short lists of numbers on one line."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _flow_numbers(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flow = bool(data) and all(isinstance(x, int | float) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _flow_numbers)


# --------------------------------------------------------------------------- the import


@dataclass
class _Agent:
    """One agent as assembled from the profile files and its `agent_configs` entry."""

    uid: int
    name: str = ""
    username: str = ""
    bio: str = ""
    persona: str = ""
    about: list[str] = field(default_factory=list)  # demographics for the persona text
    cfg: dict[str, Any] | None = None
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


class _Importer:
    """One import: reads the source folder, fills the ledger, writes the scenario."""

    def __init__(self, source: Source, src: Path):
        self.source = source
        self.src = src
        self.ledger = Ledger()
        self.cfg_path = src / CONFIG_FILE
        self.sim: dict[str, Any] = {}

    # ----------------------------------------------------------------- inputs

    def read(self) -> None:
        src = self.src
        if not src.exists():
            raise InputError(f"{src}: no such folder")
        if not src.is_dir():
            raise InputError(f"{src}: not a folder (give the {self.source} simulation folder)")
        if not self.cfg_path.is_file():
            raise InputError(f"{self.cfg_path}: not found; a {self.source} simulation folder "
                             f"holds {CONFIG_FILE} and {TWITTER_FILE} and/or {REDDIT_FILE}")
        if not (src / TWITTER_FILE).is_file() and not (src / REDDIT_FILE).is_file():
            raise InputError(f"{src / TWITTER_FILE}: not found, and neither is {REDDIT_FILE}; "
                             "at least one profile file is needed")
        sim = _read_json(self.cfg_path)
        if not isinstance(sim, dict):
            raise InputError(f"{self.cfg_path}: must be a JSON object")
        self.sim = sim
        self.agents: dict[int, _Agent] = {}
        self.twitter_cols: list[str] = []
        self.reddit_keys: list[str] = []
        self.poly_keys: list[str] = []
        if (src / TWITTER_FILE).is_file():
            self._read_twitter(src / TWITTER_FILE)
        if (src / REDDIT_FILE).is_file():
            self._read_reddit(src / REDDIT_FILE)
        if (src / POLYMARKET_FILE).is_file():
            records = _records(src / POLYMARKET_FILE, _read_json(src / POLYMARKET_FILE))
            self.poly_keys = list(dict.fromkeys(k for r in records for k in r))
        self._read_agent_configs()
        if not self.agents:
            raise InputError(f"{src}: the profile files hold no profiles")

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
            a.about = self._about(row)
            a.previous_tweets = row.get("previous_tweets") or ""
            a.oasis_activity = (row.get("activity_level") or "").strip()
            a.oasis_hourly = (row.get("activity_level_frequency") or "").strip()
            follows = (row.get("following_agentid_list") or "").strip()
            if follows.startswith("["):
                try:
                    a.following = [int(x) for x in json.loads(follows)]
                except (ValueError, TypeError):
                    raise InputError(f"{path}: row {i + 2}: following_agentid_list: must be "
                                     f"a list of agent ids, got {follows!r}") from None

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
            a.about = self._about(r) or a.about

    @staticmethod
    def _about(r: dict[str, Any]) -> list[str]:
        parts = []
        if r.get("age") not in (None, ""):
            parts.append(f"age {r['age']}")
        for key in ("gender", "mbti", "country", "profession"):
            if r.get(key) not in (None, ""):
                parts.append(str(r[key]))
        topics = r.get("interested_topics")
        if isinstance(topics, str) and topics.strip().startswith("["):
            with contextlib.suppress(ValueError):
                topics = json.loads(topics)
        text = ", ".join(parts)
        out = [text[:1].upper() + text[1:] + "."] if parts else []
        if isinstance(topics, list) and topics:
            out.append("Interests: " + ", ".join(str(t) for t in topics) + ".")
        elif isinstance(topics, str) and topics.strip():
            out.append(f"Interests: {topics.strip()}.")
        return out

    def _read_agent_configs(self) -> None:
        configs = self.sim.get("agent_configs") or []
        if not isinstance(configs, list):
            raise InputError(f"{self.cfg_path}: agent_configs: must be a list")
        for i, c in enumerate(configs):
            if not isinstance(c, dict):
                raise InputError(f"{self.cfg_path}: agent_configs[{i}]: must be an object")
            uid = _uid(self.cfg_path, f"agent_configs[{i}].agent_id", c.get("agent_id", i))
            if uid in self.agents and self.agents[uid].cfg is not None:
                raise InputError(f"{self.cfg_path}: agent_configs[{i}]: agent_id {uid} "
                                 "repeats an earlier entry")
            a = self._agent(uid)
            a.cfg = c
            if not a.name:
                a.name = str(c.get("entity_name") or "").strip()

    # ----------------------------------------------------------------- mapping

    def build(self) -> None:
        sim, p = self.sim, self.cfg_path
        time_cfg = sim.get("time_config") or {}
        if not isinstance(time_cfg, dict):
            raise InputError(f"{p}: time_config: must be an object")
        hours = _num(p, "time_config.total_simulation_hours",
                     time_cfg.get("total_simulation_hours"), 72)
        self.mpr = int(_num(p, "time_config.minutes_per_round",
                            time_cfg.get("minutes_per_round"), 60))
        if self.mpr <= 0 or hours <= 0:
            raise InputError(f"{p}: time_config: total_simulation_hours and "
                             "minutes_per_round must be > 0")
        self.rounds = max(1, int(hours * 60) // self.mpr)  # their runner's formula
        self.curve = self._time_curve(time_cfg)

        # Agent order: the twitter rows as they are (OASIS follow lists are row numbers),
        # then agents only the reddit file or only agent_configs know.
        self.order = sorted(self.agents, key=lambda u: (not self.agents[u].twitter,
                                                        not self.agents[u].reddit, u))
        self.row_of = {uid: i for i, uid in enumerate(self.order)}
        self._platforms()
        self._topics()
        self._usernames()

    def _time_curve(self, t: dict[str, Any]) -> list[float]:
        """24 hourly multipliers: their four hour bands, 1.0 for hours in none of them."""
        curve = [1.0] * 24
        p = self.cfg_path
        for band, default_mult, default_hours in (
                ("work", 0.7, list(range(9, 19))), ("morning", 0.4, [6, 7, 8]),
                ("off_peak", 0.05, [0, 1, 2, 3, 4, 5]), ("peak", 1.5, [19, 20, 21, 22])):
            mult = _num(p, f"time_config.{band}_activity_multiplier",
                        t.get(f"{band}_activity_multiplier"), default_mult)
            for h in _hours(p, f"time_config.{band}_hours", t.get(f"{band}_hours"),
                            default_hours):
                curve[h] = max(mult, 0.0)
        return curve

    def _platforms(self) -> None:
        sim = self.sim
        has = {"twitter": any(a.twitter for a in self.agents.values()),
               "reddit": any(a.reddit for a in self.agents.values())}
        given = {n: sim.get(f"{n}_config") for n in ("twitter", "reddit")}
        for n, c in given.items():
            if c is not None and not isinstance(c, dict):
                raise InputError(f"{self.cfg_path}: {n}_config: must be an object or null")
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
        hot = (self.sim.get("event_config") or {}).get("hot_topics") or []
        if not isinstance(hot, list):
            raise InputError(f"{self.cfg_path}: event_config.hot_topics: must be a list")
        taken: set[str] = set()
        self.topics: list[dict[str, Any]] = []
        for h in hot:
            label = " ".join(str(h).split())
            if label:
                self.topics.append({"name": _slug(label, taken), "label": label,
                                    "keywords": [label]})
        if not self.topics:
            req = " ".join(str(self.sim.get("simulation_requirement") or "").split())
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
                self.ledger.notes.append(f"username {u!r} of user {uid} is taken by an "
                                         f"earlier profile: renamed {new!r}")
                a.username = u = new
            if u:
                seen.add(u.lower())

    # ----------------------------------------------------------------- per agent

    def _position(self, a: _Agent) -> tuple[float, float] | None:
        """MiroShark BeliefState.from_profile without its noise: (position, confidence)."""
        if a.cfg is None:
            return None
        label = str(a.cfg.get("stance") or "neutral").strip().lower().replace(" ", "_")
        if label not in STANCE_POSITIONS:
            self.ledger.notes.append(f"agent_configs (agent_id {a.uid}): stance {label!r} is "
                                     "not a MiroShark label; counted as neutral (0), as "
                                     "MiroShark does")
        bias = self._bias(a)
        pos = STANCE_POSITIONS.get(label, 0.0) + SENTIMENT_WEIGHT * bias
        conf = 0.4 + abs(bias) * 0.4
        return min(1.0, max(-1.0, pos)), min(1.0, max(0.1, conf))

    def _bias(self, a: _Agent) -> float:
        """sentiment_bias, clipped to the documented [-1, 1] (a note says when)."""
        assert a.cfg is not None
        bias = _num(self.cfg_path, f"agent_configs (agent_id {a.uid}).sentiment_bias",
                    a.cfg.get("sentiment_bias"), 0.0)
        if not -1 <= bias <= 1:
            self.ledger.notes.append(f"agent_configs (agent_id {a.uid}): sentiment_bias "
                                     f"{bias:g} is outside [-1, 1]; clipped")
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
        where = f"agent_configs (agent_id {a.uid})"
        level = _num(self.cfg_path, f"{where}.activity_level", a.cfg.get("activity_level"),
                     DEFAULT_ACTIVITY)
        hours = _hours(self.cfg_path, f"{where}.active_hours", a.cfg.get("active_hours"),
                       DEFAULT_HOURS)
        raw = [self.curve[h] if h in hours else 0.0 for h in range(24)]
        mean = sum(raw) / 24
        if mean <= 0:  # no active hour: never active (an all-zero curve would mean "flat")
            return "0", ""
        scaled = min(1.0, max(0.0, level * mean))
        return f"{scaled:.6g}", json.dumps([round(x, 6) for x in raw])

    # ----------------------------------------------------------------- outputs

    def write(self, out: Path) -> ImportReport:
        out.mkdir(parents=True, exist_ok=True)
        files = ["profiles.csv"]
        self._write_profiles(out / "profiles.csv")
        if self._write_stances(out / "stances.csv"):
            files.append("stances.csv")
        follows = self._write_follows(out / "follows.csv")
        if follows:
            files.append("follows.csv")
        config = self._config(bool(follows), "stances.csv" in files)
        header = (f"# Imported from a {self.source} simulation folder by `shoal import "
                  f"{self.source}`.\n# What each source field became: IMPORT.md.\n")
        (out / "config.yaml").write_text(
            header + yaml.dump(config, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                               width=100),
            encoding="utf-8")
        files.insert(0, "config.yaml")
        self._account()
        (out / "IMPORT.md").write_text(self._markdown(config, files), encoding="utf-8")
        files.append("IMPORT.md")
        load_config(out / "config.yaml")  # what we wrote must be a valid Shoal config
        return ImportReport(out=out, agents=len(self.order), rounds=self.rounds,
                            platforms=self.enabled, topics=[t["name"] for t in self.topics],
                            interventions=len(config.get("interventions", [])), files=files,
                            notes=list(self.ledger.notes))

    def _write_profiles(self, path: Path) -> None:
        cols = ["user_id", "name", "username", "user_char", "description", "activity_level",
                "activity_level_frequency", "stance", "sentiment_bias", "previous_tweets"]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for uid in self.order:
            a = self.agents[uid]
            kind = f"[{a.cfg['entity_type']}] " if a.cfg and a.cfg.get("entity_type") else ""
            persona = " ".join([kind + (a.persona or a.bio), *a.about]).strip()
            level, hourly = self._activity(a)
            stance = bias = ""
            if a.cfg is not None:
                label = str(a.cfg.get("stance") or "neutral").strip().lower().replace(" ", "_")
                stance = label if label in STANCE_POSITIONS else "0"
                bias = f"{self._bias(a):g}"
            w.writerow([uid, a.name, a.username, persona, a.bio, level, hourly, stance, bias,
                        a.previous_tweets])
        path.write_text(buf.getvalue(), encoding="utf-8")

    def _write_stances(self, path: Path) -> bool:
        rows = []
        for uid in self.order:
            pc = self._position(self.agents[uid])
            if pc is not None:
                rows += [(self.row_of[uid], t["name"], f"{pc[0]:.6g}", f"{pc[1]:.6g}")
                         for t in self.topics]
        if not rows:
            return False
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["agent_id", "topic", "position", "confidence"])
        w.writerows(rows)
        path.write_text(buf.getvalue(), encoding="utf-8")
        return True

    def _influence(self, a: _Agent) -> float:
        if a.cfg is None:
            return DEFAULT_INFLUENCE
        w = _num(self.cfg_path, f"agent_configs (agent_id {a.uid}).influence_weight",
                 a.cfg.get("influence_weight"), DEFAULT_INFLUENCE)
        return max(w, 0.0)

    def _write_follows(self, path: Path) -> int:
        """Follows from OASIS lists plus an influence-weighted graph (seeded, fixed)."""
        n = len(self.order)
        edges: set[tuple[int, int]] = set()
        for i, uid in enumerate(self.order):
            for j in self.agents[uid].following:
                if 0 <= j < n and j != i:
                    edges.add((i, j))
        weights = [self._influence(self.agents[u]) for u in self.order]
        total = sum(weights)
        rng = random.Random(0)  # the import is deterministic: same folder, same graph
        degree = min(FOLLOW_DEGREE, n - 1)
        for i in range(n):
            rest = total - weights[i]
            for j in range(n):
                if j != i and rest > 0 and rng.random() < min(1.0, degree * weights[j] / rest):
                    edges.add((i, j))
        if not edges:
            return 0
        lines = ["follower,followee"] + [f"{i},{j}" for i, j in sorted(edges)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return len(edges)

    def _platform_section(self, name: str) -> dict[str, Any]:
        c = self.platform_cfg.get(name) or {}
        p = self.cfg_path
        if name not in self.enabled:
            return {"enabled": False}
        section: dict[str, Any] = {}
        members = [self.row_of[u] for u in self.order if getattr(self.agents[u], name)]
        if self.has_profiles[name] and len(members) < len(self.order):
            section["members"] = {"ids": members}
        rec = {"kind": "personalized"}
        if c:
            rec.update({
                "recency_weight": _num(p, f"{name}_config.recency_weight",
                                       c.get("recency_weight"), 0.4),
                "popularity_weight": _num(p, f"{name}_config.popularity_weight",
                                          c.get("popularity_weight"), 0.3),
                "interest_weight": _num(p, f"{name}_config.relevance_weight",
                                        c.get("relevance_weight"), 0.3),
                "stance_weight": _num(p, f"{name}_config.echo_chamber_strength",
                                      c.get("echo_chamber_strength"), 0.5),
            })
            for k in ("recency_weight", "popularity_weight", "interest_weight",
                      "stance_weight"):
                if rec[k] < 0:
                    raise InputError(f"{p}: {name}_config: weights must be >= 0, got "
                                     f"{k}={rec[k]}")
        section["recommender"] = rec
        return section

    def _post_rate(self) -> float | None:
        shares = []
        for a in self.agents.values():
            if a.cfg is None:
                continue
            where = f"agent_configs (agent_id {a.uid})"
            posts = _num(self.cfg_path, f"{where}.posts_per_hour", a.cfg.get("posts_per_hour"),
                         1.0)
            comments = _num(self.cfg_path, f"{where}.comments_per_hour",
                            a.cfg.get("comments_per_hour"), 2.0)
            if posts + comments > 0:
                shares.append(max(posts, 0.0) / (max(posts, 0.0) + max(comments, 0.0)))
        return round(sum(shares) / len(shares), 4) if shares else None

    def _max_active(self) -> int | None:
        t = self.sim.get("time_config") or {}
        top = t.get("agents_per_hour_max")
        if top is None:
            return None
        top = _num(self.cfg_path, "time_config.agents_per_hour_max", top, 20)
        cap = math.ceil(top * max(self.curve))
        return max(1, min(cap, len(self.order))) if cap > 0 else None

    def _interventions(self) -> list[dict[str, Any]]:
        ev = self.sim.get("event_config") or {}
        if not isinstance(ev, dict):
            raise InputError(f"{self.cfg_path}: event_config: must be an object")
        out: list[dict[str, Any]] = []
        items = []
        for i, post in enumerate(ev.get("initial_posts") or []):
            if not isinstance(post, dict) or not str(post.get("content") or "").strip():
                self.ledger.notes.append(f"event_config.initial_posts[{i}]: no content; "
                                         "skipped")
                continue
            raw = post.get("poster_agent_id")
            uid = None if raw is None else _uid(
                self.cfg_path, f"event_config.initial_posts[{i}].poster_agent_id", raw)
            author = self.row_of.get(uid) if uid is not None else None
            if uid is not None and author is None:
                self.ledger.notes.append(f"event_config.initial_posts[{i}]: poster_agent_id "
                                         f"{uid} has no profile; posted by the news account")
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
        for i, e in enumerate(ev.get("scheduled_events") or []):
            entry = self._event(i, e)
            if entry is not None:
                out.append(entry)
        return out

    def _event(self, i: int, e: Any) -> dict[str, Any] | None:
        """A scheduled event as `kind: event`. Their generator writes the list empty and
        defines no schema, so the usual names for a time and a text are accepted."""
        where = f"event_config.scheduled_events[{i}]"
        if not isinstance(e, dict):
            self.ledger.notes.append(f"{where}: not an object; skipped")
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
        rnd = None
        for k in ("round", "trigger_round"):
            if e.get(k) is not None:
                rnd = int(_num(self.cfg_path, f"{where}.{k}", e[k], 0)) + 1  # theirs: 0-based
        if rnd is None and minutes is not None:
            rnd = int(minutes) // self.mpr + 1
        if not text.strip() or rnd is None:
            self.ledger.notes.append(f"{where}: needs a text and a time; skipped")
            return None
        if not 1 <= rnd <= self.rounds:
            self.ledger.notes.append(f"{where}: fires at round {rnd}, outside 1..{self.rounds};"
                                     " skipped")
            return None
        entry: dict[str, Any] = {"kind": "event", "name": f"event-{i}", "round": rnd,
                                 "text": " ".join(text.split())}
        plats = e.get("platforms") or ([e["platform"]] if e.get("platform") else None)
        if plats:
            entry["platforms"] = [p for p in plats if p in self.enabled] or None
        if e.get("duration_hours") is not None:
            hours = _num(self.cfg_path, f"{where}.duration_hours", e["duration_hours"], 1)
            entry["duration"] = max(1, math.ceil(hours * 60 / self.mpr))
        return {k: v for k, v in entry.items() if v is not None}

    def _config(self, follows: bool, stances: bool) -> dict[str, Any]:
        sim_id = str(self.sim.get("simulation_id") or "")
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
            "population": {"file": "profiles.csv", "format": "twitter_csv"},
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

    def _account(self) -> None:
        """Fill the ledger: every key path of the config and every profile column."""
        L, C = self.ledger, CONFIG_FILE
        used, approx, dropped = "used", "approximated", "dropped"
        rules = {
            "simulation_id": (used, "config `name` (made a valid Shoal name)"),
            "project_id": (dropped, "their project bookkeeping; no meaning in a run"),
            "graph_id": (dropped, "the id of their knowledge graph (Neo4j/Zep), which Shoal "
                                  "does not have; the profiles already hold what was drawn "
                                  "from it"),
            "simulation_requirement": (approx, "no config field holds a scenario brief; it "
                                       "labels the single topic when there are no "
                                       "`hot_topics`, and is quoted at the top of this file"),
            "time_config.total_simulation_hours": (used, f"`rounds` = hours · 60 // "
                                                   f"minutes_per_round = {self.rounds} "
                                                   "(their runner's formula)"),
            "time_config.minutes_per_round": (used, f"`minutes_per_round: {self.mpr}`"),
            "time_config.agents_per_hour_max": (approx, "`activity.max_active` = ceil(max · "
                                                "the largest hour multiplier): the most "
                                                "agents their runner activates in a round"),
            "time_config.agents_per_hour_min": (dropped, "the low end of their per-hour "
                                                "draw, not a floor (it is multiplied by "
                                                "0.05 at night); `activity.min_active` would "
                                                "force agents awake at 3 am"),
            "generated_at": (dropped, "when their generator ran; provenance only"),
            "generation_reasoning": (dropped, "their LLM's explanation; provenance only"),
            "llm_model": (dropped, "the config is rule-based (no LLM needed); the `llm:` "
                          "snippet below uses it"),
            "llm_base_url": (dropped, "as `llm_model`: in the `llm:` snippet below"),
            "agent_configs[].agent_id": (used, "joins the entry to the profile with the same "
                                         "`user_id`"),
            "agent_configs[].entity_uuid": (dropped, "a node id in their knowledge graph"),
            "agent_configs[].entity_name": (used, "the name of an agent with no profile row"),
            "agent_configs[].entity_type": (approx, "prefixed to the persona as "
                                            "`[Type]` (profile files of format twitter_csv "
                                            "have no group column); the agents of each type "
                                            "are listed below for `ids:` selectors"),
            "agent_configs[].activity_level": (used, "profile `activity_level`, rescaled so "
                                               "that P(active) in an active hour equals it "
                                               "times the hour's multiplier"),
            "agent_configs[].active_hours": (used, "profile `activity_level_frequency`: the "
                                             "agent's own 24-hour curve, 0 outside these "
                                             "hours (so they never act then)"),
            "agent_configs[].posts_per_hour": (approx, "`policy.post_rate` = the mean of "
                                               "posts / (posts + comments) per hour: the "
                                               "share of posting among an agent's actions. "
                                               "Their runner ignores both rates and gives "
                                               "an active agent one action per round; so "
                                               "does this config (`max_actions_per_round: "
                                               "1`)"),
            "agent_configs[].comments_per_hour": (approx, "with `posts_per_hour`, in "
                                                  "`policy.post_rate` (see there)"),
            "agent_configs[].response_delay_min": (dropped, "Shoal agents see a post in the "
                                                   "round after it is made (snapshot "
                                                   "rounds); there is no per-agent delay"),
            "agent_configs[].response_delay_max": (dropped, "as `response_delay_min`"),
            "agent_configs[].sentiment_bias": (used, "profile `sentiment_bias` (position "
                                               "+0.2 · bias, MiroShark's formula) and, in "
                                               "`stances.csv`, confidence 0.4 + 0.4 · abs(bias)"),
            "agent_configs[].stance": (used, "profile `stance` (supportive 0.6, opposing "
                                       "-0.6, neutral/observer 0, ...) on every topic, and "
                                       "the positions in `stances.csv`"),
            "agent_configs[].influence_weight": (approx, "Shoal has no per-author "
                                                 "visibility weight: the initial follow "
                                                 "graph (`follows.csv`) gives agent j each "
                                                 "other agent as a follower with probability "
                                                 f"min(1, {FOLLOW_DEGREE} · w_j / Σw) (seeded), "
                                                 "so influential agents reach more feeds"),
            "event_config.initial_posts[].content": (used, "`interventions` entry "
                                                     "`initial-posts` (kind `posts`, round 0) "
                                                     "on every enabled platform"),
            "event_config.initial_posts[].poster_agent_id": (used, "the post's `author` (the "
                                                             "agent with that user_id; the "
                                                             "news account if it has no "
                                                             "profile or is not on that "
                                                             "platform); the post carries "
                                                             "the author's stance"),
            "event_config.initial_posts[].poster_type": (dropped, "only used by their "
                                                         "generator to pick "
                                                         "`poster_agent_id`"),
            "event_config.scheduled_events": (used, "each entry becomes an `interventions` "
                                              "entry of kind `event` (none here: the list "
                                              "is empty)"),
            "event_config.hot_topics": (used, "`topics`: one per hot topic (label and "
                                        "keyword = the text); every agent's stance applies "
                                        "to each, as in MiroShark's belief state"),
            "event_config.narrative_direction": (dropped, "guidance for their LLM about how "
                                                 "the story should go; a Shoal run lets the "
                                                 "story emerge, and forks test directions"),
            "event_config.initial_markets": (dropped, "prediction markets need the market "
                                             "platform, which Shoal does not have yet; "
                                             "kept for it (see polymarket_profiles.json)"),
        }
        for plat in ("twitter", "reddit"):
            on = plat in self.enabled
            rules[f"{plat}_config"] = (used, f"null: the `{plat}` platform is "
                                       + ("on, because both sections are null and its profile "
                                          "file exists" if on else "off"))
        if not (self.sim.get("event_config") or {}).get("hot_topics"):
            rules["event_config.hot_topics"] = (used, "empty: one topic, `scenario`, labelled "
                                                "with `simulation_requirement`")
        ev_keys = {
            "round": (used, "the event's `round` (theirs + 1: their rounds count from 0)"),
            "trigger_round": (used, "as `round`"),
            "trigger_hour": (used, "`round` = hour · 60 // minutes_per_round + 1"),
            "hour": (used, "as `trigger_hour`"), "time_hours": (used, "as `trigger_hour`"),
            "at_hour": (used, "as `trigger_hour`"),
            "trigger_minute": (used, "`round` = minute // minutes_per_round + 1"),
            "minute": (used, "as `trigger_minute`"),
            "title": (used, "the event `text` (title, then content)"),
            "content": (used, "the event `text`"), "text": (used, "the event `text`"),
            "description": (used, "the event `text` when there is no title or content"),
            "headline": (used, "the event `text` (as `description`)"),
            "event": (used, "the event `text` (as `description`)"),
            "platforms": (used, "the event's `platforms` (enabled ones)"),
            "platform": (used, "the event's `platforms`"),
            "duration_hours": (used, "`duration` in rounds (rounded up)"),
        }
        for plat in ("twitter", "reddit"):
            base = f"{plat}_config"
            rules.update({
                f"{base}.platform": (used, f"the `{plat}` platform is on"),
                f"{base}.recency_weight": (used, f"`platforms.{plat}.recommender` "
                                           "(personalized) `recency_weight`"),
                f"{base}.popularity_weight": (used, f"`platforms.{plat}.recommender` "
                                              "`popularity_weight`"),
                f"{base}.relevance_weight": (used, f"`platforms.{plat}.recommender` "
                                             "`interest_weight` (match of the post's topics "
                                             "with the reader's interests)"),
                f"{base}.echo_chamber_strength": (approx, f"`platforms.{plat}.recommender` "
                                                  "`stance_weight`: how much feeds favour "
                                                  "posts close to the reader's own stance"),
                f"{base}.viral_threshold": (dropped, "their runner does not read it either; "
                                            "Shoal's feeds already rank by votes "
                                            "(`popularity_weight`) with no threshold"),
            })
        for band in ("peak", "off_peak", "morning", "work"):
            how = ("their runner reads only peak and off-peak; Shoal uses all four bands"
                   if band in ("morning", "work") else "as in their runner")
            rules[f"time_config.{band}_hours"] = (used, f"`activity.hourly` ({how}) and "
                                                  "every agent's hourly curve")
            rules[f"time_config.{band}_activity_multiplier"] = (
                approx, "the multiplier of those hours in `activity.hourly` and in every "
                "agent's curve: it scales each agent's chance to act, where their runner "
                "scales how many agents are drawn")
        for path in key_paths(self.sim):
            if path in rules:
                L.put(C, path, *rules[path])
            elif path.startswith("event_config.scheduled_events[]."):
                key = path.rsplit(".", 1)[1]
                L.put(C, path, *ev_keys.get(key, (dropped, "not a time, text, platform or "
                                                  "duration")))
            elif path.startswith("event_config.initial_markets"):
                L.put(C, path, *rules["event_config.initial_markets"])
            else:
                L.put(C, path, dropped, f"not part of the {self.source} schema the importer "
                      "knows")
        self._account_profiles()

    def _account_profiles(self) -> None:
        L = self.ledger
        used, approx, dropped = "used", "approximated", "dropped"
        about = (approx, "appended to the persona text (`user_char`): the twitter_csv "
                 "profile format has no column for it, and the persona is what an LLM agent "
                 "reads")
        common = {
            "user_id": (used, "kept as the agent's `source_id` (`user_id` column); joins "
                        "`agent_configs` and `poster_agent_id`"),
            "name": (used, "`name`"), "username": (used, "`username` (a repeat gets "
                                                   "`_<user_id>` appended)"),
            "age": about, "gender": about, "mbti": about, "country": about,
            "profession": about,
            "interested_topics": (approx, "appended to the persona text as `Interests: ...`; "
                                  "topic interest weights stay uniform (the twitter_csv "
                                  "format has no interests column)"),
            "created_at": (dropped, "the account's creation date; Shoal accounts have no "
                           "age"),
        }
        twitter = {
            **common,
            "user_char": (used, "`user_char` (the persona)"),
            "description": (used, "`description` (the bio)"),
            "bio": (used, "`description` when there is no `description` column"),
            "persona": (used, "`user_char` when there is no `user_char` column"),
            "friend_count": (dropped, "a number of an imagined past; Shoal's follow graph "
                             "is `follows.csv`"),
            "follower_count": (dropped, "as `friend_count` (influence comes from "
                               "`influence_weight`)"),
            "statuses_count": (dropped, "past posts that do not exist in the run"),
            "following_agentid_list": (used, "edges of `follows.csv` (graph kind edgelist)"),
            "previous_tweets": (used, "`previous_tweets` (kept as the agent's extra data)"),
            "activity_level": (used, "`activity_level` of agents without an "
                               "`agent_configs` entry"),
            "activity_level_frequency": (used, "`activity_level_frequency` of agents "
                                         "without an `agent_configs` entry"),
        }
        reddit = {
            **common,
            "user_id": (used, "joins the reddit profile to the twitter row and the "
                        "`agent_configs` entry with the same id; an agent only in this file "
                        "is added"),
            "realname": (used, "`name` of an agent not in twitter_profiles.csv"),
            "name": (used, "`name` of an agent not in twitter_profiles.csv (the same "
                     "entity's twitter row wins otherwise)"),
            "username": (used, "`username` of an agent not in twitter_profiles.csv"),
            "bio": (used, "`description` of an agent not in twitter_profiles.csv"),
            "persona": (used, "`user_char` of an agent not in twitter_profiles.csv"),
            "karma": (dropped, "Shoal's forum has no account karma (posts start at 0 "
                      "votes)"),
        }
        for col in self.twitter_cols:
            L.put(TWITTER_FILE, col, *twitter.get(col, (dropped, "not a column Shoal's "
                                                        "twitter_csv format reads")))
        for key in self.reddit_keys:
            L.put(REDDIT_FILE, key, *reddit.get(key, (dropped, "not a field the importer "
                                                      "knows")))
        for key in self.poly_keys:
            L.put(POLYMARKET_FILE, key, dropped, "Polymarket traders need a market "
                  "platform, which Shoal does not have yet; the file is left for it")

    def _markdown(self, config: dict[str, Any], files: list[str]) -> str:
        req = " ".join(str(self.sim.get("simulation_requirement") or "").split())
        lines = [
            f"# Imported from {self.source}",
            "",
            f"Source: `{self.src}`. Written by `shoal import {self.source}`: "
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
        for file in (CONFIG_FILE, TWITTER_FILE, REDDIT_FILE, POLYMARKET_FILE):
            rows = self.ledger.section(file)
            if not rows:
                continue
            what = "key path" if file == CONFIG_FILE else "column"
            lines += [f"## {file}", "", f"| {what} | verdict | what Shoal did |", "|---|---|---|"]
            lines += [f"| `{p}` | {v} | {h} |" for p, v, h in rows]
            lines.append("")
        types: dict[str, list[int]] = {}
        for uid in self.order:
            a = self.agents[uid]
            if a.cfg and a.cfg.get("entity_type"):
                types.setdefault(str(a.cfg["entity_type"]), []).append(self.row_of[uid])
        if types:
            lines += ["## Agents by entity type", "",
                      "Shoal agent ids (row order of `profiles.csv`), for selectors such as "
                      "`target: {ids: [...]}`:", "", "| entity type | agent ids |", "|---|---|"]
            lines += [f"| {t} | {ids} |" for t, ids in types.items()]
            lines.append("")
        model, url = self.sim.get("llm_model"), self.sim.get("llm_base_url")
        lines += ["## LLM agents", "",
                  "The config is rule-based. To let a model drive agents (docs/llm.md), add:",
                  "", "```yaml", "llm:", "  providers:",
                  f"    - base_urls: [{url or 'https://api.openai.com/v1'}]",
                  f"      model: {model or 'gpt-4o-mini'}",
                  "      api_key_env: LLM_API_KEY   # the NAME of the variable holding the key",
                  "  agents: {fraction: 1.0}", "```", ""]
        others = sorted(p.name for p in self.src.iterdir()
                        if p.name not in (CONFIG_FILE, TWITTER_FILE, REDDIT_FILE,
                                          POLYMARKET_FILE))
        if others:
            lines += ["## Other files in the folder", "",
                      "Not read (a run's outputs and state, not its inputs): "
                      + ", ".join(f"`{o}`" for o in others) + ".", ""]
        if self.ledger.notes:
            lines += ["## Notes", ""] + [f"- {n}" for n in self.ledger.notes] + [""]
        return "\n".join(lines)


def import_simulation(source: str, src: str | Path, out: str | Path,
                      force: bool = False) -> ImportReport:
    """Import the `source` ("miroshark" or "mirofish") folder `src` into the scenario
    folder `out`. A non-empty `out` is refused unless `force` (then the importer's own
    files in it are replaced). Raises `InputError` naming the file for bad input."""
    if source not in SOURCES:
        raise InputError(f"unknown source {source!r}; sources: {', '.join(SOURCES)}")
    src, out = Path(src), Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"--out {out}: the folder exists and is not empty; choose another "
                         "or pass --force to overwrite the imported files")
    imp = _Importer(source, src)  # type: ignore[arg-type]
    imp.read()
    imp.build()
    if force:
        for name in OUT_FILES:  # a stale follows.csv must not outlive a new import
            if (out / name).is_file():
                (out / name).unlink()
            elif (out / name).is_dir():
                shutil.rmtree(out / name)
    return imp.write(out)
