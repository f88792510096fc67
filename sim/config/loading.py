"""Reading a config: YAML in, a validated and resolved `Config` out, and every problem as
`file:line: path.to.field: what is wrong`.

`load_config` reads a file (applying `--set` overrides), `parse_config` validates a
mapping, `resolved_dict` / `config_hash` give the form stored with a run.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from shoal.config.base import PartOf
from shoal.config.llm import check_api_keys, is_secret_name, key_fields, secret_fields
from shoal.config.model import Config
from shoal.config.platforms import PlatformsOf
from shoal.config.yaml_text import read_yaml, yaml_value
from shoal.core.errors import ConfigError, InputError
from shoal.core.files import not_a_file
from shoal.core.registry import REGISTRIES


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the field at `loc` (its key's line: a section's problem points at
    `population:`, not at its first entry), or of the deepest ancestor that exists."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value
                         if getattr(k, "value", None) == str(part)), None)
            nxt, mark = (pair[1], pair[0].start_mark) if pair else (None, None)
        elif isinstance(node, yaml.SequenceNode) and str(part).isdigit():
            i = int(part)
            nxt = node.value[i] if i < len(node.value) else None
            mark = nxt.start_mark if nxt is not None else None
        else:
            nxt = None
        if nxt is None:
            break
        assert mark is not None  # both branches that set nxt set its mark with it
        node, line = nxt, mark.line + 1
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
        if isinstance(part, str) and isinstance(data, str) and part == data:
            data = {}  # a shorthand (`graph: edgelist`) made a mapping: its fields follow
            continue
        if isinstance(part, str) and isinstance(data, dict) and names is None:
            names = _part_names()
        if isinstance(part, str) and (
            part.startswith("function-") or part == "[key]"  # (a dict key's own check)
            or (isinstance(data, dict) and (part in (data.get("kind"), data.get("rule"),
                                                     data.get("dist"))
                                            # (names is set above whenever data is a dict)
                                            or (names is not None and part in names)))
            or isinstance(data, str | int | float)
        ):
            continue
        path.append(part)
        data = None
    return tuple(path)


def _models_in(field: Any) -> tuple[list[type[BaseModel]], str | None, str | None]:
    """The pydantic models a field (or an annotation) can hold, with the tag that tells
    them apart and the model used when the tag is left out."""
    # (a FieldInfo's metadata, or an `Annotated[...]` inside a list's item type)
    metas = getattr(field, "metadata", None) or getattr(field, "__metadata__", None) or ()
    for meta in metas:
        if isinstance(meta, PartOf):
            return list(meta.models().values()), meta.registry.tag, meta.registry.default
        if isinstance(meta, PlatformsOf):
            return [meta.model()], None, None
    annotation = getattr(field, "annotation", field)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], None, None
    found: list[type[BaseModel]] = []
    tag = default = None
    for arg in getattr(annotation, "__args__", ()) or ():
        models, arg_tag, arg_default = _models_in(arg)
        found += models
        tag, default = tag or arg_tag, default or arg_default
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation and not found:
        found += _models_in(origin)[0]
    return found, tag, default


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
    listed = None  # a list field's item models, until its index picks one
    for part in path:
        if listed is not None:
            if not (isinstance(data, list) and str(part).isdigit() and int(part) < len(data)):
                return []
            data = data[int(part)]
            model, listed = _pick(listed[0], data, *listed[1:]), None
            continue
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        data = data.get(part) if isinstance(data, dict) else None
        if field is None:
            return []
        found = _models_in(field)
        if isinstance(data, list):
            listed, model = found, None
        else:
            model = _pick(found[0], data, *found[1:])
    return list(model.model_fields) if model is not None else []


def _describe(err: ErrorDetails, path: tuple[Any, ...], data: Any) -> str:
    """Turn one pydantic error into 'must be > 0, got -3' style text."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    if _may_hold_a_secret(path, got):
        got = _Hidden()
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
    if kind == "string_too_long":
        return f"must have at most {ctx.get('max_length')} characters, got {len(str(got))}"
    if kind == "string_too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else \
            f"must have at least {ctx.get('min_length')} characters"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


class _Hidden:
    """Stands in for a value that is not shown."""

    def __repr__(self) -> str:
        return "(a value that may hold a credential, not shown)"


def _may_hold_a_secret(path: tuple[Any, ...], value: Any) -> bool:
    """Whether a field's value must stay out of messages: its path names a credential,
    it is a mapping or list with a field that does (`--set name.token=...`), or it holds
    something key-shaped (`model: [sk-...]`)."""
    return secret_path([str(p) for p in path]) or bool(
        isinstance(value, dict | list) and secret_fields(value)) or bool(key_fields(value))


def secret_path(parts: list[str]) -> bool:
    """Whether a dotted config path may hold a credential: a part named like one
    (api_key, key, token, secret, password, ...) or anything under `extra_body`."""
    return any(p == "extra_body" or is_secret_name(p) for p in parts)


def validation_problems(
    exc: ValidationError, data: Any, root: yaml.Node | None = None, source: str | None = None,
    overrides: dict[tuple[str, ...], str] | None = None,
) -> list[str]:
    """Readable 'file:line: path: problem' lines for a pydantic ValidationError. A problem
    with a field a `--set` (or a flag) wrote (`overrides`: its path -> how the argument is
    shown, e.g. `--set rounds=0`) names the argument instead of a line of the file."""
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
            where = f"{blamed}: "
        else:
            line = _line_of(root, path) if root is not None else None
            where = f"{source}:{line}: " if source and line else (f"{source}: " if source
                                                                 else "")
        text = f"{where}{dotted + ': ' if dotted else ''}{text}"
        if text not in problems:
            problems.append(text)
    return _merge_alternatives(problems)


_MUST = re.compile(r"^(?P<field>.*?: )must be (?P<what>.+), got (?P<got>.+)$")


def _merge_alternatives(problems: list[str]) -> list[str]:
    """One line for a value a union refused on each of its branches: `hourly: must be one
    of 'flat' or 'diurnal', or a list, got 'weekly'` (not one line per branch)."""
    out: list[str] = []
    merged: dict[tuple[str, str], int] = {}
    for text in problems:
        m = _MUST.match(text)
        key = (m["field"], m["got"]) if m else None
        if key in merged:
            assert m is not None  # key is None when m is, and None is never in merged
            i = merged[key]
            head, _, _ = out[i].rpartition(", got ")
            out[i] = f"{head}, or {m['what']}, got {m['got']}"
            continue
        if key is not None:
            merged[key] = len(out)
        out.append(text)
    return out


_PATH = re.compile(r"^[A-Za-z_][\w\-]*(\.[\w\-]+)*$")


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if (isinstance(data, dict) and part in data) or in_list:
            data = data[part]
        else:
            return None
    return data


def _blame(path: tuple[Any, ...], overrides: dict[tuple[str, ...], str]) -> str | None:
    """The argument (`--set ...`, a flag) that wrote `path` (or a section holding it)."""
    parts = tuple(str(p) for p in path)
    for key, arg in overrides.items():
        if parts[:len(key)] == key or (key[:len(parts)] == parts and parts):
            return arg
    return None


def parse_config(data: Any, root: yaml.Node | None = None, source: str | None = None,
                 overrides: dict[tuple[str, ...], str] | None = None) -> Config:
    """Validate a mapping into a Config, raising ConfigError with readable problems."""
    if not isinstance(data, dict):
        raise ConfigError([_not_a_mapping(data, source)])
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, data, root, source, overrides)) from None
    except RecursionError:
        raise ConfigError([f"{source or 'config'}: nested too deeply"]) from None


def _not_a_mapping(data: Any, source: str | None) -> str:
    where = f"{source}: " if source else ""
    if data is None:
        return f"{where}the config file is empty (or only comments); it must be a YAML mapping"
    return f"{where}the config must be a YAML mapping, got {type(data).__name__}"


def load_config(path: str | Path, overrides: list[str] | None = None,
                labels: dict[str, str] | None = None, base: Path | None = None,
                vet: Callable[[Config], None] | None = None) -> Config:
    """Read, parse and validate a YAML config file; relative paths resolve against its
    folder (or `base`).

    `overrides` are `a.b=value` strings applied to the YAML before validation; a problem
    with what one of them wrote names it (as `labels` shows it: a CLI flag turned into an
    override is named as the flag, e.g. `--rounds 0`). The config remembers where its
    fields are (`locate` puts file:line on problems found later, against the population).
    `vet`, if given, sees the validated config before any file it names is looked at (the
    web server refuses paths outside its folder there, whether they exist or not).
    """
    path = Path(path)
    data, root = read_yaml(path)
    blame: dict[tuple[str, ...], str] = {}
    if overrides:
        if not isinstance(data, dict):
            raise ConfigError([_not_a_mapping(data, str(path))])
        data = apply_overrides(data, overrides, blame, labels)
    cfg = parse_config(data, root, str(path), blame)
    cfg._origin = Origin(str(path), _field_lines(root), blame)
    try:
        if vet is not None:
            vet(cfg)
        check_api_keys(cfg)  # a key variable that is not set is found before anything runs
        return resolve_paths(cfg, base if base is not None else path.parent)
    except InputError as exc:
        raise locate(cfg, exc) from None


class Origin(NamedTuple):
    """Where a loaded config's fields came from: the file, the line of each field (dotted
    path -> line), and the arguments that wrote fields (path -> how they are shown)."""

    source: str
    lines: dict[str, int]
    overrides: dict[tuple[str, ...], str]


def _field_lines(root: yaml.Node | None) -> dict[str, int]:
    """Dotted path -> 1-based line of every field of a YAML tree (keys' lines; each
    aliased node once)."""
    lines: dict[str, int] = {}
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")] if root is not None else []
    while stack:
        node, prefix = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            pairs = [(str(getattr(k, "value", "")), k, v) for k, v in node.value]
        elif isinstance(node, yaml.SequenceNode):
            pairs = [(str(i), v, v) for i, v in enumerate(node.value)]
        else:
            continue
        for name, at, value in pairs:
            dotted = f"{prefix}.{name}" if prefix else name
            lines.setdefault(dotted, at.start_mark.line + 1)
            stack.append((value, dotted))
    return lines


def locate(cfg: Config, exc: InputError) -> InputError:
    """`exc` with the place of the field it starts with: the argument that wrote it, or
    `file:line` in the config it was loaded from (a problem found after validation, e.g.
    `llm.agents.ids: no agent 500`, against the population). Unchanged when the config
    was not read from a file or the message names no field of it."""
    origin: Origin | None = getattr(cfg, "_origin", None)
    head, sep, _ = str(exc).partition(": ")
    if origin is None or not sep or not _PATH.match(head):
        return exc
    parts = head.split(".")
    blamed = _blame(tuple(parts), origin.overrides)
    if blamed:
        return InputError(f"{blamed}: {exc}")
    for k in range(len(parts), 0, -1):  # the field, or the deepest section holding it
        line = origin.lines.get(".".join(parts[:k]))
        if line is not None:
            return InputError(f"{origin.source}:{line}: {exc}")
    return exc


def _where(origin: Origin | None, dotted: str) -> str:
    """`file:line: ` of a field, when the config came from a file that set it."""
    line = origin.lines.get(dotted) if origin else None
    return f"{origin.source}:{line}: " if origin and line else ""


def resolve_paths(cfg: Config, base: Path) -> Config:
    """Make the file fields absolute (relative to the config's folder) and check they exist."""
    problems = []
    origin: Origin | None = getattr(cfg, "_origin", None)
    for owner, field, dotted in (
        (cfg.population, "file", "population.file"),
        (cfg.initial_stances, "file", "initial_stances.file"),
        (cfg.graph, "file", "graph.file"),
    ):
        value = getattr(owner, field, None)
        if value is None:
            continue
        resolved = Path(value) if Path(value).is_absolute() else (base / value)
        if (missing := not_a_file(resolved)) is not None:
            problems.append(f"{_where(origin, dotted)}{dotted}: {missing}: {value} (looked "
                            f"at {resolved})")
        else:
            setattr(owner, field, str(resolved.resolve()))
    g = cfg.memory.graph
    docs = []
    for i, value in enumerate(g.documents):
        resolved = Path(value) if Path(value).is_absolute() else (base / value)
        if (missing := not_a_file(resolved)) is not None:
            dotted = f"memory.graph.documents.{i}"
            problems.append(f"{_where(origin, dotted)}{dotted}: {missing}: {value} (looked "
                            f"at {resolved})")
        else:  # (resolving a loop of links raises: its problem is recorded above)
            docs.append(str(resolved.resolve()))
    if g.scenario is not None:
        folder = Path(g.scenario) if Path(g.scenario).is_absolute() else base / g.scenario
        if not (folder / "graph").is_dir():
            problems.append(f"memory.graph.scenario: {g.scenario}: no graph/ folder there "
                            f"(looked at {folder / 'graph'}); make one with `shoal init` or "
                            "`shoal graph add`")
        else:
            g.scenario = str(folder.resolve())
    g.documents = docs
    if problems:
        raise ConfigError(problems)
    return cfg


def resolved_dict(cfg: Config) -> dict[str, Any]:
    """The config with every default filled in, as plain JSON-able data (without an
    `experiment` section when it has none, so configs that never had one keep their
    form and hash; the same for surveys and for an English population's languages)."""
    data = cfg.model_dump(mode="json")
    if data.get("experiment") is None:
        data.pop("experiment", None)
    if not data.get("surveys"):  # the same for surveys
        data.pop("surveys", None)
    population = data["population"]
    if population.get("language") == "en":  # and for languages
        population.pop("language")
    for group in population.get("groups") or []:
        if group.get("language") is None:
            group.pop("language", None)
    return data


def config_hash(cfg: Config) -> str:
    """A stable sha256 of the resolved config (canonical JSON)."""
    blob = json.dumps(resolved_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def override_value(value: Any) -> str:
    """A value as the right side of a `--set key=value` override: JSON, which YAML reads
    back as the same value (a string stays a string: `--out 2024`), with characters
    beyond U+FFFF written as they are (YAML would read JSON's surrogate-pair escapes
    back as two broken halves)."""
    return json.dumps(value, ensure_ascii=False)


def shown_override(item: str) -> str:
    """A `--set` argument as messages show it: its value hidden when the key may hold a
    credential (`llm.providers.0.extra_body.api_key=...`) or the value looks like a key
    (`llm.providers.0.model=sk-...`)."""
    key, sep, value = item.partition("=")
    if sep and (secret_path(key.strip().split(".")) or key_fields(value)):
        return f"{key}=(value hidden)"
    return item


def apply_overrides(data: dict[str, Any], overrides: list[str],
                    written: dict[tuple[str, ...], str] | None = None,
                    labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Apply `a.b.c=value` overrides (value parsed as YAML) to a raw config mapping. A
    numeric part indexes an existing list (`llm.providers.0.model=gpt-4o-mini`).
    `written`, if given, gets the path each override wrote and how messages name the
    override: `labels[item]` (a CLI flag, e.g. `--rounds 0`), else `--set key=value`
    (the value hidden when the key may hold a credential)."""
    for item in overrides:
        label = (labels or {}).get(item) or f"--set {shown_override(item)}"
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not key.strip() or not all(parts):
            raise ConfigError([f"{_quoted(label)}: expected key=value, e.g. "
                               "population.size=500"])
        try:
            value = yaml_value(raw)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError([f"{_quoted(label)}: the value is not valid YAML ({problem}); "
                               "quote it"]) from None
        cur: Any = data
        part: str | int  # a key, or (in a list) the index it names
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(cur, list):
                if not part.isdigit() or int(part) >= len(cur):
                    raise ConfigError([f"{_quoted(label)}: {'.'.join(parts[:i]) or key} is a "
                                       f"list of {len(cur)}; index it with 0..{len(cur) - 1}"])
                part = int(part)
                if last:
                    cur[part] = value
                elif not isinstance(cur[part], dict | list):
                    cur[part] = {}
            elif not isinstance(cur, dict):
                raise ConfigError([f"{_quoted(label)}: {'.'.join(parts[:i])} is not a "
                                   "section"])
            elif last:
                cur[part] = value
            elif not isinstance(cur.get(part), dict | list):
                cur[part] = {}
            if not last:
                cur = cur[part]
        if written is not None:
            written[tuple(parts)] = label
    return data


def _quoted(label: str) -> str:
    """`--set 'a=[x'`: the argument quoted as a shell would need it (flags stay bare)."""
    flag, _, arg = label.partition(" ")
    return f"{flag} {arg!r}" if flag == "--set" else label


def upgrade_saved(data: dict[str, Any]) -> dict[str, Any]:
    """A resolved config saved by an earlier release (in a checkpoint or run.json), with
    the fields added since set to the values that reproduce its behaviour: a saved config
    holds every field its release knew, so a missing one means "written before it existed",
    not "use today's default". Resuming or forking an old run continues it as it was."""
    update = (data.get("beliefs") or {}).get("update")
    if isinstance(update, dict) and update.get("rule") == "social_influence" \
            and "anchor" not in update:
        data = copy.deepcopy(data)
        data["beliefs"]["update"]["anchor"] = 0.0  # the pull back came with calibration
    return data
