"""Read a population from a profile file instead of generating one.

Three formats (`population.format`):

- `twitter_csv`: OASIS / MiroFish / MiroShark `twitter_profiles.csv` (`user_id, name, username,
  user_char, description`, optionally `following_agentid_list`, `previous_tweets`,
  `activity_level_frequency`, `activity_level`).
- `reddit_json`: OASIS / MiroFish `reddit_profiles.json` (a list of objects with `realname` or
  `name`, `username`, `bio`, `persona`, `age`, `gender`, `mbti`, `country`, `profession`,
  `interested_topics`, `karma`, `user_id`).
- `shoal`: our own records as CSV, JSON or YAML (fields in `_SHOAL_FIELDS`; `language`, a
  BCP 47 tag, sets the agent's own language over `population.language`).

`auto` picks one by extension and content. Agent ids are the row order; the file's own id is
kept as `source_id`. Usernames are made unique rather than refused, and every change is
recorded (`_usernames`, `profile_fixes_table`); fields a format does not read are kept in
`extra`. Every problem is an `InputError` naming the file, the line (CSV, YAML) or item
index (JSON, YAML; 0-based, equal to the agent id) and the field.
"""

from __future__ import annotations

import ast
import csv
import difflib
import io
import itertools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import yaml

from shoal.agents.population import Population
from shoal.config import Config, TopicSpec
from shoal.core.errors import InputError
from shoal.core.language import DEFAULT
from shoal.core.language import check as check_language
from shoal.core.text_files import DuplicateKey, unique_keys

# MiroShark BeliefState.from_profile; unlike MiroShark, an unknown label is an error, not 0.
STANCE_LABELS: dict[str, float] = {
    "strongly_supportive": 0.9,
    "supportive": 0.6,
    "neutral": 0.0,
    "observer": 0.0,
    "opposing": -0.6,
    "strongly_opposing": -0.9,
}
SENTIMENT_WEIGHT = 0.2  # MiroShark: position = base + 0.2 * sentiment_bias

_SHOAL_FIELDS = (
    "name", "username", "bio", "persona", "group", "activity", "age", "gender", "mbti",
    "country", "profession", "interests", "stance", "stances", "sentiment_bias", "following",
    "user_id", "facts", "language",
)
_SHOAL_ONLY = {"group", "activity", "interests", "stance", "stances", "sentiment_bias",
               "following", "language"}
_REDDIT_ONLY = {"realname", "interested_topics", "karma"}
# Fields each OASIS format reads; any other field is kept as extra data, not dropped.
_TWITTER_READ = {"user_id", "name", "username", "user_char", "description",
                 "following_agentid_list", "previous_tweets", "activity_level_frequency",
                 "activity_level", "stance", "stances", "sentiment_bias"}
_REDDIT_READ = {"user_id", "realname", "name", "username", "bio", "persona", "age", "gender",
                "mbti", "country", "profession", "interested_topics", "activity_level",
                "stance", "stances", "sentiment_bias", "karma"}
# Extra keys the loader itself sets (a file column of the same name is kept as "<name> (file)").
_OWN_EXTRA = {"original_username", "username_fix"}
# Text that pandas and str() write for a missing number or list: "not given" in such fields.
_NAN_TEXT = {"nan", "none", "null"}
_YAML_EXT = {".yaml", ".yml"}


# --------------------------------------------------------------------------- locations


@dataclass(frozen=True)
class _Loc:
    """Where a record sits: a CSV/YAML line and/or a JSON/YAML item index."""

    file: str
    line: int | None = None
    item: int | None = None

    def prefix(self) -> str:
        """`file:7`, `file: item 3` or `file:12: item 3`."""
        head = f"{self.file}:{self.line}" if self.line is not None else self.file
        return head + (f": item {self.item}" if self.item is not None else "")

    def ref(self) -> str:
        """How another record's error message points at this one."""
        if self.item is None:
            return f"line {self.line}"
        return f"item {self.item}" + (f" (line {self.line})" if self.line is not None else "")


def _range(lo: float, hi: float, what: str = "a number") -> str:
    if math.isinf(hi):
        return what if math.isinf(lo) else f"{what} >= {lo:g}"
    return f"{what} in [{lo:g}, {hi:g}]"


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Item:
    """One raw profile record with typed accessors whose errors name file, line and field."""

    def __init__(self, data: dict[str, Any], loc: _Loc, key_lines: dict[str, int] | None = None):
        self.data = data
        self.loc = loc
        self.key_lines = key_lines or {}

    def fail(self, key: str, msg: str) -> InputError:
        line = self.key_lines.get(key.split(".")[0])
        loc = replace(self.loc, line=line) if line is not None else self.loc
        return InputError(f"{loc.prefix()}: {key}: {msg}")

    def get(self, key: str, data: bool = False) -> Any:
        """The value, or None when absent, null, blank or NaN (all mean "not given").
        `data`: a number/list/mapping field, where the text `nan`, `None` or `null` is
        also "not given" (free text keeps such words)."""
        value = self.data.get(key)
        if isinstance(value, str) and (not value.strip()
                                       or (data and value.strip().lower() in _NAN_TEXT)):
            return None
        if isinstance(value, float) and math.isnan(value):
            return None
        return value

    def text(self, key: str) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, dict | list):
            raise self.fail(key, f"must be text, got {_show(value)}")
        return str(value).strip()

    def number(self, key: str, lo: float, hi: float) -> float | None:
        value = self.get(key, data=True)
        return None if value is None else self.check_number(key, value, lo, hi)

    def check_number(self, key: str, value: Any, lo: float, hi: float) -> float:
        """`value` (from `key`) as a float in [lo, hi]; None is an error here."""
        bad = self.fail(key, f"must be {_range(lo, hi)}, got {_show(value)}")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad
        try:
            x = float(value)
        except ValueError:
            raise bad from None
        if not (math.isfinite(x) and lo <= x <= hi):
            raise bad
        return x

    def integer(self, key: str, lo: float, hi: float) -> int | None:
        value = self.get(key, data=True)
        x = self.number(key, lo, hi)
        if x is not None and x != int(x):
            raise self.fail(key, f"must be {_range(lo, hi, 'an integer')}, got {_show(value)}")
        return None if x is None else int(x)

    def literal(self, key: str, what: str) -> Any:
        """The value, with a string parsed as a JSON or Python literal (CSV cells)."""
        value = self.get(key, data=True)
        if not isinstance(value, str):
            return value
        text = value.strip()
        try:
            return json.loads(text)
        except ValueError:
            pass
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise self.fail(key, f"must be {what}, got {_show(value)}") from None

    def seq(self, key: str, split: bool = True) -> list[Any] | None:
        """A list; in CSV cells a `[...]` literal or, with `split`, `a; b` / `a, b` text."""
        value = self.get(key, data=True)
        if value is None:
            return None
        if split and isinstance(value, str) and not value.strip().startswith("["):
            return [p.strip() for p in re.split(r"[;,]", value) if p.strip()]
        parsed = self.literal(key, "a list like [1, 2]")
        if isinstance(parsed, list | tuple):
            return list(parsed)
        if split and not isinstance(parsed, dict):
            return [parsed]
        raise self.fail(key, f"must be a list, got {_show(value)}")

    def mapping(self, key: str, example: str) -> dict[str, Any] | None:
        value = self.get(key, data=True)
        if value is None:
            return None
        parsed = self.literal(key, f"a mapping like {example}")
        if not isinstance(parsed, dict):
            raise self.fail(key, f"must be a mapping like {example}, got {_show(value)}")
        return {str(k): v for k, v in parsed.items()}


# --------------------------------------------------------------------------- reading files


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise InputError(f"{path}: profile file not found")
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        raise InputError(f"{path}: not a UTF-8 text file (binary, or UTF-16); save the "
                         "profiles as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise InputError(f"{path}: the profile file is empty")
    return text


class _CsvTable(NamedTuple):
    header_line: int
    columns: list[str]
    items: list[_Item]


def _csv_items(path: Path, text: str) -> _CsvTable:
    """Rows as `_Item`s located by the physical line where each record starts."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    header_line, items = 0, []
    try:
        start = 1
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header, header_line = [c.strip() for c in row], line
                _check_header(path, line, header)
                continue
            if len(row) != len(header):
                raise InputError(
                    f"{path}:{line}: malformed CSV: {len(row)} fields, the header has {len(header)}"
                )
            data = {k: v for k, v in zip(header, row, strict=True) if _named(k)}
            items.append(_Item(data, _Loc(str(path), line=line)))
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    assert header is not None  # _read_text rejected blank files
    if not items:
        raise InputError(f"{path}: the CSV has a header but no profile rows")
    return _CsvTable(header_line, [c for c in header if _named(c)], items)


def _named(column: str) -> bool:
    # OASIS files start with pandas' unnamed index column; it is not a field.
    return bool(column) and not column.startswith("Unnamed:")


def _check_header(path: Path, line: int, header: list[str]) -> None:
    seen: set[str] = set()
    for col in header:
        if _named(col) and col in seen:
            raise InputError(f"{path}:{line}: duplicate column {col!r}")
        seen.add(col)


def _json_items(path: Path, text: str) -> list[_Item]:
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}:{exc.lineno}: malformed JSON: {exc.msg} (column {exc.colno})"
        ) from None
    except ValueError:  # (an integer Python will not read: more than 4,300 digits)
        raise InputError(f"{path}: a number of more than 4,300 digits; no field takes "
                         "one") from None
    except DuplicateKey as exc:  # (as a YAML file's duplicate field is, _key_lines)
        raise InputError(f"{path}: duplicate field {exc.args[0]!r} in an object") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    return _records(path, data, "JSON", [None] * len(data) if isinstance(data, list) else [])


def _yaml_items(path: Path, text: str) -> list[_Item]:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"{where}: malformed YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: malformed YAML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    finally:
        loader.dispose()
    nodes = root.value if isinstance(root, yaml.SequenceNode) else []
    if not isinstance(data, list) or len(nodes) != len(data):
        nodes = [None] * len(data) if isinstance(data, list) else []  # e.g. an aliased root
    return _records(path, data, "YAML", nodes)


def _records(path: Path, data: Any, kind: str, nodes: list) -> list[_Item]:
    """JSON/YAML top level: a list of mappings; YAML nodes give lines per item and per key."""
    if not isinstance(data, list):
        raise InputError(
            f"{path}: a {kind} profile file must be a list of profiles, got {type(data).__name__}"
        )
    if not data:
        raise InputError(f"{path}: the {kind} list contains no profiles")
    items = []
    for i, (record, node) in enumerate(zip(data, nodes, strict=True)):
        loc = _Loc(str(path), line=node.start_mark.line + 1 if node else None, item=i)
        if not isinstance(record, dict):
            raise InputError(f"{loc.prefix()}: a profile must be a mapping of fields, "
                             f"got {type(record).__name__}")
        items.append(_Item({str(k): v for k, v in record.items()}, loc, _key_lines(loc, node)))
    return items


def _key_lines(loc: _Loc, node: Any) -> dict[str, int]:
    lines: dict[str, int] = {}
    for key_node, _ in getattr(node, "value", None) or []:
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key in lines:  # safe_load would silently keep the last value
            raise InputError(f"{loc.file}:{line}: item {loc.item}: duplicate field {key!r}")
        lines[key] = line
    return lines


def _read_items(path: Path, text: str, fmt: str) -> tuple[str, list[_Item]]:
    """Resolve `auto` and read the records of the chosen format."""
    ext = path.suffix.lower()
    if fmt == "twitter_csv" or (fmt in ("auto", "shoal") and ext == ".csv"):
        table = _csv_items(path, text)
        if fmt == "auto":
            fmt = "twitter_csv" if "user_char" in table.columns else "shoal"
        _require_columns(path, table, fmt)
        return fmt, table.items
    if fmt == "reddit_json" or (fmt in ("auto", "shoal") and ext == ".json"):
        items = _json_items(path, text)
        if fmt == "auto":
            fmt = "reddit_json" if _looks_reddit(items) else "shoal"
        return fmt, items
    if ext in _YAML_EXT:
        return "shoal", _yaml_items(path, text)
    what = "shoal profile files must be .csv, .json, .yaml or .yml" if fmt == "shoal" else (
        "cannot tell the profile format from the extension; set population.format")
    raise InputError(f"{path}: {what} (got {ext or 'no extension'!r})")


def _require_columns(path: Path, table: _CsvTable, fmt: str) -> None:
    cols = set(table.columns)
    if fmt == "twitter_csv":
        missing = [c for c in ("user_char",) if c not in cols]
        if not cols & {"name", "username"}:
            missing.append("name (or username)")
    else:
        missing = [c for c in ("name",) if c not in cols]
    if missing:
        raise InputError(
            f"{path}:{table.header_line}: missing required column(s) {', '.join(missing)} "
            f"for format {fmt}; the header has: {', '.join(table.columns)}"
        )


def _looks_reddit(items: list[_Item]) -> bool:
    keys = set().union(*(item.data for item in items))
    if keys & _REDDIT_ONLY:
        return True
    return "persona" in keys and not keys & _SHOAL_ONLY


# --------------------------------------------------------------------------- topics


@lru_cache(maxsize=4096)
def _word(term: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", re.IGNORECASE)


class _Topics:
    """Topic names and the terms (name, label, keywords) that interests are matched against."""

    def __init__(self, specs: list[TopicSpec]):
        self.names = [t.name for t in specs]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.terms = [
            sorted({t.name, re.sub(r"[_\-]+", " ", t.name), t.label or t.name, *t.keywords})
            for t in specs
        ]

    def match(self, strings: list[str]) -> np.ndarray:
        """Equal weights on every topic some string mentions (either way round); else uniform."""
        hit = np.zeros(len(self.names), dtype=bool)
        for s in (s.strip() for s in strings):
            if not s:
                continue
            for t, terms in enumerate(self.terms):
                hit[t] |= any(_word(w).search(s) or _word(s).search(w) for w in terms)
        return _normalised(hit.astype(np.float64))

    def unknown(self, item: _Item, key: str, name: str) -> InputError:
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return item.fail(f"{key}.{name}", f"unknown topic{hint}; topics are {self.names}")


def _normalised(row: np.ndarray) -> np.ndarray:
    total = row.sum()
    return row / total if total > 0 else np.full(len(row), 1.0 / len(row))


# --------------------------------------------------------------------------- fields


@dataclass
class _Profile:
    """One agent as read from a file, before population-wide checks."""

    item: _Item
    name: str
    username: str | None = None
    bio: str = ""
    persona: str = ""
    group: str | None = None
    activity: float | None = None
    age: int = -1
    gender: str = ""
    mbti: str = ""
    country: str = ""
    profession: str = ""
    interests: np.ndarray | None = None  # [T], None = uniform
    stance: np.ndarray | None = None  # [T] with nan, None = no hint
    following: list[int] | list[str] | None = None  # row indices (twitter) or source ids
    source_id: str | None = None
    hourly: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    language: str | None = None  # a BCP 47 tag (None: the population's)


def _id_text(item: _Item, key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise item.fail(key, f"must be an id (number or text), got {_show(value)}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON/YAML 12.0 and CSV "12" name the same agent
    return str(value).strip()


def _source_id(item: _Item, key: str = "user_id") -> str | None:
    value = item.get(key)
    return None if value is None else _id_text(item, key, value)


def _demographics(item: _Item, p: _Profile) -> None:
    age = item.integer("age", 0, 150)
    p.age = -1 if age is None else age
    p.gender = item.text("gender") or ""
    p.mbti = item.text("mbti") or ""
    p.country = item.text("country") or ""
    p.profession = item.text("profession") or ""


def _stance_number(item: _Item, key: str, value: Any) -> float:
    """A MiroShark label or a number in [-1, 1]."""
    if isinstance(value, str):
        label = re.sub(r"[\s\-]+", "_", value.strip().lower())
        if label in STANCE_LABELS:
            return STANCE_LABELS[label]
        try:
            float(value)
        except ValueError:
            raise item.fail(key, f"must be a number in [-1, 1] or one of "
                                 f"{list(STANCE_LABELS)}, got {_show(value)}") from None
    return item.check_number(key, value, -1.0, 1.0)


def _stance_row(item: _Item, topics: _Topics) -> np.ndarray | None:
    """Per-topic positions: `stances` over `stance`, plus 0.2 * `sentiment_bias` (MiroShark)."""
    raw = item.get("stance", data=True)
    stance = None if raw is None else _stance_number(item, "stance", raw)
    stances = item.mapping("stances", "{climate: 0.5}") or {}
    bias = item.number("sentiment_bias", -1.0, 1.0)
    if stance is None and not stances and bias is None:
        return None
    row = np.full(len(topics.names), np.nan if stance is None else stance)
    for name, value in stances.items():
        if name not in topics.index:
            raise topics.unknown(item, "stances", name)
        row[topics.index[name]] = _stance_number(item, f"stances.{name}", value)
    if bias is not None:
        row = np.where(np.isnan(row), 0.0, row) + SENTIMENT_WEIGHT * bias
    return np.clip(row, -1.0, 1.0)


def _interests(item: _Item, key: str, topics: _Topics) -> np.ndarray | None:
    """A list of free-text topics (matched on word boundaries), or a topic -> weight mapping."""
    value = item.get(key, data=True)
    if value is None:
        return None
    if isinstance(value, dict) or (isinstance(value, str) and value.strip().startswith("{")):
        weights = np.zeros(len(topics.names))
        for name, w in (item.mapping(key, "{climate: 0.7, housing: 0.3}") or {}).items():
            if name not in topics.index:
                raise topics.unknown(item, key, name)
            weights[topics.index[name]] = item.check_number(f"{key}.{name}", w, 0.0, math.inf)
        if weights.sum() <= 0:
            raise item.fail(key, "interest weights must not all be zero")
        return weights / weights.sum()
    strings = item.seq(key) or []
    for s in strings:
        if isinstance(s, dict | list):
            raise item.fail(key, f"must list topics as text, got {_show(s)}")
    return topics.match([str(s) for s in strings])


def _activity(item: _Item, key: str) -> float | None:
    value = item.get(key, data=True)
    # OASIS stores 24 per-hour labels ('active', 'off_line', ...) here; the hourly curve
    # comes from activity_level_frequency instead, so the labels are not needed.
    if isinstance(value, list) or (isinstance(value, str) and value.strip().startswith("[")):
        return None
    return item.number(key, 0.0, 1.0)


def _hourly(item: _Item, key: str) -> np.ndarray | None:
    values = item.seq(key, split=False)
    if values is None:
        return None
    if len(values) != 24:
        raise item.fail(key, f"must list 24 hourly values, got {len(values)}")
    row = np.array([item.check_number(key, v, 0.0, math.inf) for v in values])
    # A row of zeros means "no observed activity", not "never active": keep it flat.
    return row / row.mean() if row.sum() > 0 else np.ones(24)


def _agent_ids(item: _Item, key: str) -> list[int] | None:
    """OASIS `following_agentid_list`: agent ids, i.e. 0-based row indices."""
    if item.get(key, data=True) is None:
        return None
    value = item.literal(key, "a list of agent ids like [3, 17]")
    if isinstance(value, int) and not isinstance(value, bool):
        return []  # OASIS's legacy loader treats a bare number (its "0") as "follows nobody"
    if not isinstance(value, list | tuple):
        raise item.fail(key, f"must be a list of agent ids like [3, 17], got {_show(value)}")
    ids = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float | str) or \
                not re.fullmatch(r"\d+(\.0*)?", str(v).strip()):
            raise item.fail(key, f"agent ids must be non-negative integers, got {_show(v)}")
        ids.append(int(float(v)))
    return ids


# --------------------------------------------------------------------------- formats


def _twitter_profile(item: _Item, topics: _Topics) -> _Profile:
    username = item.text("username")
    name = item.text("name") or username
    if name is None:
        raise item.fail("name", "is empty, and there is no username to fall back on")
    bio = item.text("description") or ""
    p = _Profile(item, name=name, username=username, bio=bio,
                 persona=item.text("user_char") or bio, source_id=_source_id(item))
    p.activity = _activity(item, "activity_level")
    if p.activity is None and item.get("activity_level", data=True) is not None:
        p.extra["activity_level"] = item.seq("activity_level", split=False)  # OASIS labels
    p.hourly = _hourly(item, "activity_level_frequency")
    p.following = _agent_ids(item, "following_agentid_list")
    if "previous_tweets" in item.data:
        tweets = item.seq("previous_tweets", split=False) or []
        p.extra["previous_tweets"] = [str(t) for t in tweets]
    p.stance = _stance_row(item, topics)
    _keep_unread(item, p, _TWITTER_READ)
    return p


def _reddit_profile(item: _Item, topics: _Topics) -> _Profile:
    username = item.text("username")
    name = item.text("realname") or item.text("name") or username
    if name is None:
        raise item.fail("realname", "missing: give realname, name or username")
    p = _Profile(item, name=name, username=username, bio=item.text("bio") or "",
                 persona=item.text("persona") or "", source_id=_source_id(item))
    _demographics(item, p)
    p.interests = _interests(item, "interested_topics", topics)
    p.activity = _activity(item, "activity_level")
    p.stance = _stance_row(item, topics)
    if "karma" in item.data:
        p.extra["karma"] = item.integer("karma", -math.inf, math.inf)
    _keep_unread(item, p, _REDDIT_READ)
    return p


def _keep_unread(item: _Item, p: _Profile, read: set[str]) -> None:
    """Fields the format does not read go to `extra` as given (None when blank), so a
    file's own columns (OASIS `following_count`, `tweets_id`, ...) are not lost."""
    for key in item.data:
        if key not in read:
            p.extra[f"{key} (file)" if key in _OWN_EXTRA else key] = item.get(key)


def _shoal_profile(item: _Item, topics: _Topics) -> _Profile:
    for key in item.data:
        if key not in _SHOAL_FIELDS:
            close = difflib.get_close_matches(key, _SHOAL_FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise item.fail(key, f"unknown field{hint}; allowed: {', '.join(_SHOAL_FIELDS)}")
    name = item.text("name")
    if name is None:
        raise item.fail("name", "required field is missing")
    p = _Profile(item, name=name, username=item.text("username"), bio=item.text("bio") or "",
                 persona=item.text("persona") or "", group=item.text("group"),
                 source_id=_source_id(item))
    _demographics(item, p)
    p.activity = item.number("activity", 0.0, 1.0)
    p.interests = _interests(item, "interests", topics)
    p.stance = _stance_row(item, topics)
    if "following" in item.data:
        refs = item.seq("following") or []
        p.following = [_id_text(item, "following", r) for r in refs]
    if "facts" in item.data:  # the graph facts a persona was built from (`shoal init`)
        p.extra["facts"] = item.seq("facts")
    p.language = _language(item)
    return p


def _language(item: _Item, key: str = "language") -> str | None:
    """The profile's own language (a BCP 47 tag with templates), or None."""
    value = item.text(key)
    if value is None:
        return None
    try:
        return check_language(value)
    except ValueError as exc:
        raise item.fail(key, str(exc)) from None


_PARSERS = {"twitter_csv": _twitter_profile, "reddit_json": _reddit_profile,
            "shoal": _shoal_profile}
_FOLLOW_KEY = {"twitter_csv": "following_agentid_list", "shoal": "following"}


# --------------------------------------------------------------------------- assembly


def _check_unique(profiles: list[_Profile], key: str, values: list[str | None],
                  fold: bool = False) -> None:
    first: dict[str, _Profile] = {}
    for p, value in zip(profiles, values, strict=True):
        if value is None:
            continue
        k = value.lower() if fold else value
        if k in first:
            raise p.item.fail(
                key, f"{value!r} is also the {key} of {first[k].item.loc.ref()}; it must be unique"
            )
        first[k] = p


USERNAME_CHARS = "letters, digits, _ . and -"  # and at most 40 of them (docs/config.md)
_NOT_USERNAME = re.compile(r"[^A-Za-z0-9_.\-]+")


def normalise_username(name: str) -> str:
    """A username within the documented character set: every run of other characters
    (spaces, newlines, brackets, quotes, ...) becomes one `_`, at most 40 characters, not
    starting with `.` or `-`. Usernames appear in every feed line and mention: they must
    not be able to start a line or forge an entry."""
    clean = _NOT_USERNAME.sub("_", name).lstrip(".-")[:40]
    return clean or "user"


USERNAME_FIXES = ("normalised", "duplicate", "derived")  # profile_fixes.fix (docs/store.md)
_MAX_USERNAME = 40


def _free(base: str, taken: set[str], first: str = "") -> str:
    """`base + first`, else `base + first + "_2"`, `"_3"`, ...: the first candidate not in
    `taken` (lower case), `base` shortened so the result keeps to 40 characters."""
    for k in itertools.count(1):
        tail = first if k == 1 else f"{first}_{k}"
        name = base[: _MAX_USERNAME - len(tail)] + tail
        if name and name.lower() not in taken:
            return name
    raise AssertionError("unreachable")


class _Usernames(NamedTuple):
    """One entry per agent: the username used, the file's own where it was changed (None
    elsewhere) and why it was changed (one of USERNAME_FIXES, or None)."""

    names: list[str]
    original: list[str | None]
    fix: list[str | None]


def _usernames(profiles: list[_Profile]) -> _Usernames:
    """Unique usernames (ignoring case), deterministically: a given username is normalised
    to the documented character set; the first row with it keeps it and later rows get
    `_2`, `_3`, ... (OASIS's own files repeat some accounts, and OASIS does not mind, but
    mentions and follow-by-name need one agent per name); a row without one gets
    `<name><agent id>`. Made-up names never take a username that another row gives.
    A derived username counts as a fix only when other rows do give usernames."""
    given = [normalise_username(p.username) if p.username else None for p in profiles]
    taken = {g.lower() for g in given if g}  # so no made-up name collides with a given one
    file_has_names = bool(taken)
    claimed: set[str] = set()
    out = _Usernames([], [], [])
    for i, (p, g) in enumerate(zip(profiles, given, strict=True)):
        if g is not None and g.lower() not in claimed:
            name, fix = g, ("normalised" if g != p.username else None)
            claimed.add(g.lower())
        elif g is not None:
            name, fix = _free(g, taken), "duplicate"
        else:
            name = _free(normalise_username(p.name.strip().lower()), taken, str(i))
            fix = "derived" if file_has_names else None
        taken.add(name.lower())
        out.names.append(name)
        out.original.append(p.username if fix in ("normalised", "duplicate") else None)
        out.fix.append(fix)
    return out


def _following(profiles: list[_Profile], fmt: str, ids: list[str]) -> list[list[int]]:
    """Row indices per agent; twitter lists are agent ids already, shoal lists are source ids."""
    n, key = len(profiles), _FOLLOW_KEY[fmt]
    row_of = {sid: i for i, sid in enumerate(ids)}
    out = []
    for i, p in enumerate(profiles):
        rows: list[int] = []
        seen = {i}  # self-follows mean nothing; repeats are one edge
        for ref in p.following or []:
            j = ref if isinstance(ref, int) else row_of.get(ref, -1)
            if not 0 <= j < n:
                what = (f"agent id {ref}; agent ids are row numbers 0..{n - 1}"
                        if isinstance(ref, int) else
                        f"{ref!r}; it is neither a user_id nor (without user_id) a row index")
                raise p.item.fail(key, f"matches no agent: {what}")
            if j not in seen:
                seen.add(j)
                rows.append(j)
        out.append(rows)
    return out


def _stack(rows: list[np.ndarray | None], fill: np.ndarray,
           optional: bool = False) -> np.ndarray | None:
    """Rows into a matrix, `fill` where a row is None; None if optional and all rows are."""
    if optional and all(r is None for r in rows):
        return None
    return np.vstack([fill if r is None else r for r in rows])


def _groups(profiles: list[_Profile]) -> tuple[np.ndarray, list[str]]:
    """Group index per agent (-1: none), names in order of first appearance."""
    names = list(dict.fromkeys(p.group for p in profiles if p.group is not None))
    code = {name: g for g, name in enumerate(names)}
    return np.array([code.get(p.group, -1) if p.group else -1 for p in profiles],
                    dtype=np.int16), names


def _assemble(profiles: list[_Profile], fmt: str, cfg: Config,
              rng: np.random.Generator) -> Population:
    n, t = len(profiles), len(cfg.topics)
    # Rows without their own id are known by their row index.
    ids = [p.source_id if p.source_id is not None else str(i) for i, p in enumerate(profiles)]
    if fmt == "shoal":
        # `following` names user_ids. OASIS formats follow by row and OASIS ignores user_id
        # (its agent id is the row), so a repeat there is kept and noted (_setup_notes).
        _check_unique(profiles, "user_id", ids)
    names = _usernames(profiles)

    # Draw for everyone so the stream does not depend on which rows set their own level.
    activity = np.asarray(cfg.activity.level.sample(rng, n, 0.0, 1.0), dtype=np.float64).copy()
    for i, p in enumerate(profiles):
        if p.activity is not None:
            activity[i] = p.activity

    interests = _stack([p.interests for p in profiles], np.full(t, 1.0 / t))
    stance_hint = _stack([p.stance for p in profiles], np.full(t, np.nan), optional=True)
    # Agents without their own curve follow the config's (nan rows: see sim/schedule.py).
    hourly = _stack([p.hourly for p in profiles], np.full(24, np.nan), optional=True)
    group, group_names = _groups(profiles)

    # A format/file without following data gives None (graph kind `profiles` needs it).
    has_following = fmt in _FOLLOW_KEY and any(_FOLLOW_KEY[fmt] in p.item.data for p in profiles)
    languages = [p.language or cfg.population.language for p in profiles]
    extra_keys = list(dict.fromkeys(k for p in profiles for k in p.extra))
    return Population(
        name=[p.name for p in profiles], username=names.names,
        bio=[p.bio for p in profiles], persona=[p.persona for p in profiles],
        group=group, group_names=group_names, activity=activity, interests=interests,
        age=np.array([p.age for p in profiles], dtype=np.int16),
        gender=[p.gender for p in profiles], mbti=[p.mbti for p in profiles],
        country=[p.country for p in profiles], profession=[p.profession for p in profiles],
        source_id=ids,
        following=_following(profiles, fmt, ids) if has_following else None,
        hourly=hourly, stance_hint=stance_hint,
        language=None if all(t == DEFAULT for t in languages) else languages,
        extra={**{k: [p.extra.get(k) for p in profiles] for k in extra_keys},
               **({"original_username": names.original, "username_fix": names.fix}
                  if any(names.fix) else {})},
    )


def username_fixes(population: Population) -> list[tuple[int, str | None, str, str]]:
    """(agent id, the file's username or None, the username used, fix) for every agent
    whose username the loader changed or made up (see `_usernames`)."""
    original = population.extra.get("original_username") or []
    # Checkpoints written before `username_fix` existed only recorded normalisations.
    fix = population.extra.get("username_fix") or [
        "normalised" if o else None for o in original]
    return [(i, original[i], population.username[i], f) for i, f in enumerate(fix) if f]


def profile_fixes_table(population: Population) -> pa.Table:
    """The `profile_fixes` rows (docs/store.md): one per field the loader changed, with
    the file's value (NULL: it had none) and the value used; all at round 0."""
    rows = username_fixes(population)
    return pa.table({
        "round": pa.array([0] * len(rows), pa.int32()),
        "agent": pa.array([r[0] for r in rows], pa.int32()),
        "field": pa.array(["username"] * len(rows), pa.string()),
        "original": pa.array([r[1] for r in rows], pa.string()),
        "value": pa.array([r[2] for r in rows], pa.string()),
        "fix": pa.array([r[3] for r in rows], pa.string()),
    })


def repeated_ids(population: Population) -> dict[str, list[int]]:
    """user_id values that more than one agent has (only OASIS formats allow that)."""
    counts = Counter(population.source_id)
    out: dict[str, list[int]] = {}
    for i, sid in enumerate(population.source_id):
        if counts[sid] > 1:
            out.setdefault(sid, []).append(i)
    return out


def load_population_file(cfg: Config, rng: np.random.Generator) -> Population:
    """Read `cfg.population.file` in `cfg.population.format` into a `Population`.

    Agent ids follow the file's row order; the file's own ids are kept in `source_id`.
    Activity levels the file does not give are drawn from `cfg.activity.level` (one draw for
    every agent, so the rng stream does not depend on the file). Raises `InputError` naming
    the file, line or item, and field for anything the file gets wrong.
    """
    if cfg.population.file is None:
        raise InputError("population.file: no profile file configured")
    path = Path(cfg.population.file)
    fmt, items = _read_items(path, _read_text(path), cfg.population.format)
    topics = _Topics(cfg.topics)
    profiles = [_PARSERS[fmt](item, topics) for item in items]
    return _assemble(profiles, fmt, cfg, rng)
