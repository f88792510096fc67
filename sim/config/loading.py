"""Reading a config: YAML in, a validated and resolved `Config` out, and every problem as
`file:line: path.to.field: what is wrong`.

`load_config` reads a file (applying `--set` overrides), `parse_config` validates a
mapping, `resolved_dict` / `config_hash` give the form stored with a run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sim.config.base import PartOf
from sim.config.llm import check_api_keys
from sim.config.model import Config
from sim.config.platforms import PlatformsOf
from sim.core.errors import ConfigError
from sim.core.registry import REGISTRIES


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of silently keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc`, or of the deepest ancestor that exists."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            nxt = node.value[part] if part < len(node.value) else None
        else:
            nxt = None
        if nxt is None:
            break
        node, line = nxt, nxt.start_mark.line + 1
    return line


def _part_names() -> set[str]:
    """Every registered part name of the families whose configs carry a tag."""
    return {p.name for r in REGISTRIES if r.tag for p in r}


def _field_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """The user's field path for a pydantic error location.

    Pydantic puts union tags (`uniform`, `popularity`, ...) and validator names into `loc`;
    walking the input data tells them apart from real keys (a section that leaves its tag
    out, meaning the default part, has the default's name in `loc`).
    """
    path: list[Any] = []
    names = None
    for part in loc:
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if (isinstance(data, dict) and part in data) or in_list:
            path.append(part)
            data = data[part]
            continue
        if isinstance(part, str) and isinstance(data, dict) and names is None:
            names = _part_names()
        if isinstance(part, str) and (
            part.startswith("function-")
            or (isinstance(data, dict) and (part in (data.get("kind"), data.get("rule"),
                                                     data.get("dist")) or part in names))
            or isinstance(data, str | int | float)
        ):
            continue
        path.append(part)
        data = None
    return tuple(path)


def _models_in(field: Any) -> tuple[list[type[BaseModel]], str | None, str | None]:
    """The pydantic models a field (or an annotation) can hold, with the tag that tells
    them apart and the model used when the tag is left out."""
    for meta in getattr(field, "metadata", ()) or ():
        if isinstance(meta, PartOf):
            return list(meta.models().values()), meta.registry.tag, meta.registry.default
        if isinstance(meta, PlatformsOf):
            return [meta.model()], None, None
    annotation = getattr(field, "annotation", field)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], None, None
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _models_in(arg)[0]
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation and not found:
        found += _models_in(origin)[0]
    return found, None, None


def _pick(models: list[type[BaseModel]], data: Any, tag: str | None = None,
          default: str | None = None) -> type[BaseModel] | None:
    """Of a union's models, the one whose tag (kind/rule/dist) matches the input."""
    if len(models) == 1:
        return models[0]
    if isinstance(data, str) and tag:
        data = {tag: data}
    if isinstance(data, dict) and tag and tag not in data and default:
        data = {tag: default}
    if isinstance(data, dict):
        for model in models:
            for key in ((tag,) if tag else ("kind", "rule", "dist")):
                field = model.model_fields.get(key)
                if field is not None and data.get(key) in getattr(field.annotation, "__args__", ()):
                    return model
    return None


def _allowed_fields(path: tuple[Any, ...], data: Any) -> list[str]:
    """Field names valid in the mapping at `path` (for 'did you mean' hints); best effort."""
    model: type[BaseModel] | None = Config
    for part in path:
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        data = data.get(part) if isinstance(data, dict) else None
        if field is None:
            return []
        model = _pick(*_models_in(field)[:1], data, *_models_in(field)[1:])
    return list(model.model_fields) if model is not None else []


def _describe(err: dict[str, Any], path: tuple[Any, ...], data: Any) -> str:
    """Turn one pydantic error into 'must be > 0, got -3' style text."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    ops = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
           "less_than_equal": "<="}
    if kind in ops:
        bound = next(iter(ctx.values()))
        return f"must be {ops[kind]} {bound}, got {got!r}"
    if kind == "extra_forbidden":
        allowed = _allowed_fields(path[:-1], data)
        close = difflib.get_close_matches(str(path[-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field{hint}" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}, got {got!r}"
    if kind == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        return f"needs a {ctx.get('discriminator')} field"
    type_names = {"int_type": "an integer", "int_parsing": "an integer",
                  "int_from_float": "an integer", "float_type": "a number",
                  "float_parsing": "a number", "bool_type": "true or false",
                  "bool_parsing": "true or false", "string_type": "a string",
                  "list_type": "a list", "dict_type": "a mapping",
                  "model_type": "a mapping", "model_attributes_type": "a mapping",
                  "datetime_type": "a date-time", "datetime_parsing": "a date-time",
                  "datetime_from_date_parsing": "a date-time"}
    if kind in type_names:
        return f"must be {type_names[kind]}, got {got!r}"
    if kind == "finite_number":
        return f"must be a finite number, got {got!r}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def validation_problems(
    exc: ValidationError, data: Any, root: yaml.Node | None = None, source: str | None = None,
    overrides: dict[tuple[str, ...], str] | None = None,
) -> list[str]:
    """Readable 'file:line: path: problem' lines for a pydantic ValidationError. A problem
    with a field a `--set` wrote (`overrides`: its path -> the argument) names the argument
    instead of a line of the file."""
    problems = []
    for err in exc.errors():
        path = _field_path(err["loc"], data)
        text = _describe(err, path, data)
        head, sep, rest = text.partition(": ")
        if sep and _PATH.match(head):  # a model's check names the field in its message
            here = _at(data, path)
            if not path or (isinstance(here, dict) and head.split(".")[0] in here):
                path = (*path, *(int(x) if x.isdigit() else x for x in head.split(".")))
                text = rest
        dotted = ".".join(str(p) for p in path)
        blamed = _blame(path, overrides or {})
        if blamed:
            where = f"--set {blamed}: "
        else:
            line = _line_of(root, path) if root is not None else None
            where = f"{source}:{line}: " if source and line else (f"{source}: " if source
                                                                 else "")
        text = f"{where}{dotted + ': ' if dotted else ''}{text}"
        if text not in problems:
            problems.append(text)
    return problems


_PATH = re.compile(r"^[A-Za-z_][\w\-]*(\.[\w\-]+)*$")


def _at(data: Any, path: tuple) -> Any:
    for part in path:
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if (isinstance(data, dict) and part in data) or in_list:
            data = data[part]
        else:
            return None
    return data


def _blame(path: tuple, overrides: dict[tuple[str, ...], str]) -> str | None:
    """The `--set` argument that wrote `path` (or a section holding it), if any."""
    parts = tuple(str(p) for p in path)
    for key, arg in overrides.items():
        if parts[:len(key)] == key or (key[:len(parts)] == parts and parts):
            return arg
    return None


def parse_config(data: Any, root: yaml.Node | None = None, source: str | None = None,
                 overrides: dict[tuple[str, ...], str] | None = None) -> Config:
    """Validate a mapping into a Config, raising ConfigError with readable problems."""
    if not isinstance(data, dict):
        where = f"{source}: " if source else ""
        raise ConfigError([f"{where}the config must be a YAML mapping, got {type(data).__name__}"])
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, data, root, source, overrides)) from None
    except RecursionError:
        raise ConfigError([f"{source or 'config'}: nested too deeply"]) from None


# Bounds on what a YAML file may expand to: a small file of aliases can stand for an
# enormous structure (an "alias bomb"), and deep nesting exhausts the stack.
MAX_NODES = 2_000_000
MAX_DEPTH = 100


def read_yaml(path: str | Path, what: str = "config") -> tuple[Any, yaml.Node | None]:
    """A YAML file's data and its node tree, or an error naming the file: missing, not
    UTF-8 text, malformed (with the line), nested too deeply, or expanding (through
    aliases) to more than MAX_NODES values."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{path}: {what} file not found"])
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the {what} file: {exc.strerror}"]) from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        raise ConfigError([f"{path}: not a UTF-8 text file (binary, or UTF-16); save the "
                           f"{what} as UTF-8"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text (byte {exc.start} cannot be "
                           f"decoded); save the {what} as UTF-8"]) from None
    try:
        root = yaml.compose(text, Loader=_UniqueKeyLoader)
        _check_size(root, path)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError([f"{path}{line}: malformed YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: malformed YAML: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{path}: nested too deeply (more than {MAX_DEPTH} levels)"]
                          ) from None
    return data, root


def _check_size(root: yaml.Node | None, path: Path) -> None:
    """Refuse a node tree deeper than MAX_DEPTH, or whose aliases expand it beyond
    MAX_NODES values (counted without expanding: each node's size once)."""
    if root is None:
        return
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError([f"{path}: nested too deeply (more than {MAX_DEPTH} levels)"])
        kids = ([v for kv in node.value for v in kv] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            if size[id(node)] > MAX_NODES:
                raise ConfigError([f"{path}: expands to more than {MAX_NODES:,} values "
                                   "(through aliases); write the values out"])
        elif id(node) not in size:
            stack.append((node, depth, True))
            stack.extend((k, depth + 1, False) for k in kids if id(k) not in size)


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, parse and validate a YAML config file; relative paths resolve against its folder.

    `overrides` are `a.b=value` strings applied to the YAML before validation; a problem
    with what one of them wrote names it.
    """
    path = Path(path)
    data, root = read_yaml(path)
    blame: dict[tuple[str, ...], str] = {}
    if overrides:
        if not isinstance(data, dict):
            raise ConfigError([f"{path}: the config must be a YAML mapping"])
        data = apply_overrides(data, overrides, blame)
    cfg = parse_config(data, root, str(path), blame)
    check_api_keys(cfg)  # a key variable that is not set is found before anything runs
    return resolve_paths(cfg, path.parent)


def resolve_paths(cfg: Config, base: Path) -> Config:
    """Make the file fields absolute (relative to the config's folder) and check they exist."""
    problems = []
    for owner, field, dotted in (
        (cfg.population, "file", "population.file"),
        (cfg.initial_stances, "file", "initial_stances.file"),
        (cfg.graph, "file", "graph.file"),
    ):
        value = getattr(owner, field, None)
        if value is None:
            continue
        resolved = Path(value) if Path(value).is_absolute() else (base / value)
        if not resolved.is_file():
            problems.append(f"{dotted}: file not found: {value} (looked at {resolved})")
        else:
            setattr(owner, field, str(resolved.resolve()))
    if problems:
        raise ConfigError(problems)
    return cfg


def resolved_dict(cfg: Config) -> dict[str, Any]:
    """The config with every default filled in, as plain JSON-able data."""
    return cfg.model_dump(mode="json")


def config_hash(cfg: Config) -> str:
    """A stable sha256 of the resolved config (canonical JSON)."""
    blob = json.dumps(resolved_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def apply_overrides(data: dict[str, Any], overrides: list[str],
                    written: dict[tuple[str, ...], str] | None = None) -> dict[str, Any]:
    """Apply `a.b.c=value` overrides (value parsed as YAML) to a raw config mapping. A
    numeric part indexes an existing list (`llm.providers.0.model=gpt-4o-mini`).
    `written`, if given, gets the path each override wrote and the override."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not key.strip() or not all(parts):
            raise ConfigError([f"--set {item!r}: expected key=value, e.g. "
                               "population.size=500"])
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError([f"--set {item!r}: the value is not valid YAML ({problem}); "
                               "quote it"]) from None
        cur: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(cur, list):
                if not part.isdigit() or int(part) >= len(cur):
                    raise ConfigError([f"--set {item!r}: {'.'.join(parts[:i]) or key} is a "
                                       f"list of {len(cur)}; index it with 0..{len(cur) - 1}"])
                part = int(part)
                if last:
                    cur[part] = value
                elif not isinstance(cur[part], dict | list):
                    cur[part] = {}
            elif not isinstance(cur, dict):
                raise ConfigError([f"--set {item!r}: {'.'.join(parts[:i])} is not a "
                                   "section"])
            elif last:
                cur[part] = value
            elif not isinstance(cur.get(part), dict | list):
                cur[part] = {}
            if not last:
                cur = cur[part]
        if written is not None:
            written[tuple(parts)] = item
    return data
