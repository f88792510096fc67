"""The population: who the agents are (personas) and their static traits.

A population is either generated from a size (seeded) or read from a profile file
(`agents.profiles`). Traits that drive the engine are numpy arrays indexed by agent id;
persona text stays as Python lists for prompts and the agents table. Each agent has a
language (a BCP 47 tag, shoal.core.language): the one its fixed texts are in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from importlib import resources

import numpy as np
import pandas as pd
import pyarrow as pa

from shoal.config import Config
from shoal.core.language import DEFAULT, templates
from shoal.core.state import State

_MBTI = [a + b + c + d for a in "EI" for b in "SN" for c in "TF" for d in "JP"]
_PROFESSIONS = [
    "teacher", "nurse", "software engineer", "farmer", "student", "journalist", "shop owner",
    "retired engineer", "economist", "electrician", "lawyer", "artist", "civil servant",
    "researcher", "truck driver", "doctor", "accountant", "chef", "union organiser",
    "small-business owner",
]
_COUNTRIES = ["US", "UK", "Germany", "France", "India", "Brazil", "Nigeria", "Japan",
              "Canada", "Australia", "Mexico", "Spain", "Italy", "Kenya", "South Korea"]
_TEMPERAMENTS = [
    "argues from data and asks for sources",
    "speaks from personal experience",
    "likes a good joke even in serious threads",
    "is blunt and impatient with spin",
    "tries to find common ground",
    "worries about how policies land on ordinary families",
    "follows the news closely and shares links often",
    "is sceptical of official statements",
]


def _names(kind: str) -> list[str]:
    text = resources.files("shoal.agents").joinpath(f"data/{kind}_names.txt").read_text("utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass
class Population:
    """Per-agent static traits. Agent ids are row indices 0..N-1."""

    name: list[str]
    username: list[str]
    bio: list[str]
    persona: list[str]
    group: np.ndarray  # int16 group index, -1 for none
    group_names: list[str]
    activity: np.ndarray  # float64 in [0, 1]
    interests: np.ndarray  # float64 [N, T], rows sum to 1
    age: np.ndarray  # int16, -1 unknown
    gender: list[str]
    mbti: list[str]
    country: list[str]
    profession: list[str]
    source_id: list[str]
    following: list[list[int]] | None = None
    hourly: np.ndarray | None = None  # optional per-agent [N, 24] activity multipliers
    stance_hint: np.ndarray | None = None  # optional [N, T] positions from profiles (nan: none)
    extra: dict[str, list] = field(default_factory=dict)
    # Per agent, its language's BCP 47 tag; None: everyone speaks the default (English),
    # so an English population's checkpoints are what they were before languages.
    language: list[str] | None = None
    _taken: int = field(default=0, init=False, repr=False, compare=False)  # agents logged
    # `language_codes`'s answer, with the list it was computed from
    _codes: tuple[list[str], tuple[str, ...], np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Number of agents."""
        return len(self.name)

    def language_of(self, agent: int) -> str:
        """The BCP 47 tag of `agent`'s language."""
        langs = self.language
        return langs[agent] if langs is not None and agent < len(langs) else DEFAULT

    def language_codes(self) -> tuple[tuple[str, ...], np.ndarray] | None:
        """Each agent's language as an index (int16 [N]) into a tuple of tags, for arrays
        sent every round; None when everyone speaks the default. Cached while `language`
        is the same list (growth and a restored state replace it)."""
        langs = self.language
        if langs is None:
            return None
        cached = self._codes
        if cached is None or cached[0] is not langs or len(cached[2]) != len(langs):
            tags = tuple(sorted(set(langs)))
            index = {t: i for i, t in enumerate(tags)}
            codes = np.fromiter((index[t] for t in langs), np.int16, len(langs))
            self._codes = cached = (langs, tags, codes)
        return cached[1], cached[2]

    def group_mask(self, names: list[str]) -> np.ndarray:
        """Boolean mask of agents in any of the named groups."""
        codes = [self.group_names.index(n) for n in names if n in self.group_names]
        return np.isin(self.group, np.asarray(codes, dtype=self.group.dtype))

    def to_frame(self, topics: list[str]) -> pd.DataFrame:
        """The agents table (one row per agent)."""
        df = pd.DataFrame({
            "agent_id": np.arange(self.size, dtype=np.int32),
            "name": self.name,
            "username": self.username,
            "bio": self.bio,
            "persona": self.persona,
            "group_name": [self.group_names[g] if g >= 0 else None for g in self.group],
            "activity": self.activity,
            "age": np.where(self.age >= 0, self.age, None),
            "gender": self.gender,
            "mbti": self.mbti,
            "country": self.country,
            "profession": self.profession,
            "source_id": self.source_id,
        })
        for t, topic in enumerate(topics):
            df[f"interest_{topic}"] = self.interests[:, t]
        return df

    # Columns that are plain per-agent lists or 1-D arrays (the rest need care below).
    _FLAT = ("name", "username", "bio", "persona", "group", "activity", "age", "gender",
             "mbti", "country", "profession", "source_id")
    _MATRICES = ("interests", "hourly", "stance_hint")

    def to_arrow(self) -> pa.Table:
        """Lossless columnar form (for checkpoints); matrices become list columns."""
        cols = {name: getattr(self, name) for name in self._FLAT}
        for name in self._MATRICES:
            m = getattr(self, name)
            if m is not None:  # one list per row, built from the flat values at once
                m = np.ascontiguousarray(m, dtype=np.float64)
                offsets = np.arange(0, m.size + 1, max(m.shape[1], 1), dtype=np.int32) \
                    if m.shape[1] else np.zeros(len(m) + 1, np.int32)
                cols[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(m.ravel()))
        if self.following is not None:
            cols["following"] = pa.array(self.following, type=pa.list_(pa.int64()))
        for key, values in self.extra.items():
            cols[f"extra.{key}"] = [json.dumps(v, default=str) for v in values]
        if self.language is not None:
            cols["language"] = pa.array(self.language, pa.string())
        meta = {"group_names": json.dumps(self.group_names)}
        return pa.table(cols).replace_schema_metadata(meta)

    @classmethod
    def from_arrow(cls, table: pa.Table) -> Population:
        """Inverse of `to_arrow`."""
        data = table.to_pydict()
        kwargs: dict = {name: data[name] for name in cls._FLAT}
        kwargs["group"] = np.asarray(data["group"], dtype=np.int16)
        kwargs["activity"] = np.asarray(data["activity"], dtype=np.float64)
        kwargs["age"] = np.asarray(data["age"], dtype=np.int16)
        for name in cls._MATRICES:
            kwargs[name] = (np.asarray(data[name], dtype=np.float64) if name in data else None)
        kwargs["following"] = data.get("following")
        kwargs["language"] = data.get("language")
        kwargs["extra"] = {k.removeprefix("extra."): [json.loads(v) for v in vals]
                           for k, vals in data.items() if k.startswith("extra.")}
        meta = table.schema.metadata or {}
        kwargs["group_names"] = json.loads(meta.get(b"group_names", b"[]"))
        return cls(**kwargs)

    def extend(self, other: Population) -> None:
        """Append another population's agents (ids continue after this one's)."""
        if other.group_names != self.group_names:
            remap = np.array([self.group_names.index(g) if g in self.group_names else -1
                              for g in other.group_names] + [-1], dtype=np.int16)
            other_group = remap[other.group]
        else:
            other_group = other.group
        for f in fields(self):
            name = f.name
            mine, theirs = getattr(self, name), getattr(other, name)
            if name == "group":
                self.group = np.concatenate([self.group, other_group])
            elif name in ("group_names", "extra"):
                continue
            elif name == "language":
                if mine is not None or theirs is not None:
                    self.language = ((mine or [DEFAULT] * (self.size - other.size))
                                     + (theirs or [DEFAULT] * other.size))
            elif isinstance(mine, list):
                setattr(self, name, mine + list(theirs if theirs is not None
                                                 else [[] for _ in range(other.size)]))
            elif isinstance(mine, np.ndarray):
                if theirs is None:
                    fill = np.nan if name in ("hourly", "stance_hint") else 0.0
                    theirs = np.full((other.size, *mine.shape[1:]), fill)
                setattr(self, name, np.concatenate([mine, theirs]))


    # ------------------------------------------------------------------ state

    def get_state(self) -> State:
        """Every agent, as the `agents` table of the state."""
        return State(tables={"agents": self.to_arrow()})

    def set_state(self, state: State) -> None:
        """Become the population of `state`; the journal starts empty."""
        self._become(Population.from_arrow(state.tables["agents"]))

    def _become(self, other: Population) -> None:
        for f in fields(self):
            if f.init:
                setattr(self, f.name, getattr(other, f.name))
        self._taken = self.size

    def take_changes(self) -> State:
        """The agents added since the previous call (the first call: all of them)."""
        if self._taken == self.size:
            return State()
        table = self.to_arrow().slice(self._taken)
        self._taken = self.size
        return State(tables={"agents": table})

    @classmethod
    def restored(cls, changes: Sequence[State]) -> Population:
        """The population logged `changes` make (see `replay`)."""
        population = cls.__new__(cls)
        population.replay(changes)
        return population

    def replay(self, changes: Sequence[State]) -> None:
        """Become the population the logged additions make."""
        parts = [Population.from_arrow(c.tables["agents"]) for c in changes
                 if "agents" in c.tables]
        if not parts:
            raise ValueError("the checkpoint logs hold no agents")
        first = parts[0]
        for part in parts[1:]:
            first.extend(part)
        self._become(first)


def generate_population(cfg: Config, rng: np.random.Generator, first_id: int = 0
                        ) -> Population:
    """Generate `population.size` personas, seeded, with groups by fraction. `first_id` is
    the agent id of the first one (usernames carry the id, so they stay unique). Each
    agent speaks its group's `language`, else `population.language`; its bio and persona
    are written in it (names stay as drawn; the agents table keeps the English
    profession and country)."""
    n = cfg.population.size
    assert n is not None
    topics = cfg.topics
    first, last = _names("first"), _names("last")
    fi = rng.integers(0, len(first), n)
    li = rng.integers(0, len(last), n)
    names = [f"{first[a]} {last[b]}" for a, b in zip(fi, li, strict=True)]
    usernames = [
        f"{first[a].lower()}_{last[b].lower().replace(' ', '')}{first_id + i}"
        for i, (a, b) in enumerate(zip(fi, li, strict=True))
    ]
    ages = rng.integers(18, 80, n).astype(np.int16)
    genders = rng.choice(["female", "male", "non-binary"], n, p=[0.49, 0.49, 0.02]).tolist()
    mbti = rng.choice(_MBTI, n).tolist()
    country = rng.choice(_COUNTRIES, n).tolist()
    profession = rng.choice(_PROFESSIONS, n).tolist()
    temper = rng.integers(0, len(_TEMPERAMENTS), n)
    interests = rng.dirichlet(np.ones(len(topics)), n)
    activity = cfg.activity.level.sample(rng, n, 0.0, 1.0)

    # Groups: contiguous shares of a seeded permutation, so fractions are exact.
    group = np.full(n, -1, dtype=np.int16)
    order = rng.permutation(n)
    start = 0
    for g, spec in enumerate(cfg.population.groups):
        count = round(spec.fraction * n)
        group[order[start:start + count]] = g
        start += count
    group_names = [g.name for g in cfg.population.groups]
    # the language of each group's agents, and [-1] of those in none
    tags = [g.language or cfg.population.language for g in cfg.population.groups]
    tags.append(cfg.population.language)

    bios, personas = [], []
    labels = [t.label for t in topics]
    # Plain Python values (one argmax for all rows, not one call per agent): at a million
    # agents the per-row numpy calls took most of this function's time.
    tops, groups = interests.argmax(axis=1).tolist(), group.tolist()
    ages_, tempers = ages.tolist(), temper.tolist()
    columns = (names, profession, country, mbti, ages_, tempers, [labels[k] for k in tops],
               groups)
    if len(set(tags)) == 1:  # one language (the usual case): every row at once
        bios, personas = _persona_texts(tags[0], group_names, *columns)
    else:
        bios, personas = [""] * n, [""] * n
        for tag in dict.fromkeys(tags):
            rows = [i for i in range(n) if tags[groups[i]] == tag]
            texts = _persona_texts(tag, group_names, *([c[i] for i in rows] for c in columns))
            for i, b, p in zip(rows, *texts, strict=True):
                bios[i], personas[i] = b, p
    return Population(
        name=names, username=usernames, bio=bios, persona=personas, group=group,
        group_names=group_names, activity=activity, interests=interests, age=ages,
        gender=genders, mbti=mbti, country=country, profession=profession,
        source_id=[str(first_id + i) for i in range(n)],
        language=None if all(t == DEFAULT for t in tags) else [tags[g] for g in groups],
    )


def _persona_texts(language: str, group_names: list[str], names: list[str],
                   professions: list[str], countries: list[str], mbti: list[str],
                   ages: list[int], tempers: list[int], tops: list[str], groups: list[int]
                   ) -> tuple[list[str], list[str]]:
    """Bios and personas of generated agents in `language` (the `persona.*` templates;
    professions and countries are the engine's English values, looked up in the
    language's lists)."""
    t = templates(language)
    profession_words = dict(zip(_PROFESSIONS, t.items("persona.professions"), strict=True))
    country_words = dict(zip(_COUNTRIES, t.items("persona.countries"), strict=True))
    temperaments = t.items("persona.temperaments")
    crowd = [t("persona.crowd", group=name) for name in group_names] + [""]  # [-1]: none
    bio_text, persona_text = t.text("persona.bio"), t.text("persona.text")
    bios, personas = [], []
    for i in range(len(names)):
        job, where = profession_words[professions[i]], country_words[countries[i]]
        # (the first letter up, not str.capitalize: "Pensionierter Ingenieur" stays so)
        bios.append(bio_text.format(profession=job[:1].upper() + job[1:], country=where,
                                    topic=tops[i], group=crowd[groups[i]]))
        personas.append(persona_text.format(
            name=names[i], age=ages[i], profession=job, country=where, mbti=mbti[i],
            temperament=temperaments[tempers[i]], topic=tops[i]))
    return bios, personas
