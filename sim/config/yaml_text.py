"""Reading YAML as Shoal reads a config file: a duplicate key, a value that cannot be
built, nesting deeper than MAX_DEPTH and an alias bomb are errors naming the source and
the line, never a last value silently kept, a RecursionError or a bare ValueError.

Kept apart from `shoal.config.loading` (which builds the config model) so that the parts
the model is made of (a selector, say) can read YAML without importing it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from shoal.core.errors import ConfigError
from shoal.core.files import not_a_file


class _ValueLoader(yaml.SafeLoader):
    """A SafeLoader whose values that cannot be built (`2026-02-30`, `!!int abc`, an
    integer of thousands of digits) are YAML errors at their line, not a bare ValueError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            if isinstance(exc, yaml.YAMLError):
                raise
            value = str(node.value) if isinstance(node, yaml.ScalarNode) else node.tag
            shown = value if len(value) <= 40 else value[:40] + "…"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {shown!r}: {str(exc).splitlines()[0]}",
                node.start_mark) from None


class _UniqueKeyLoader(_ValueLoader):
    """A SafeLoader that rejects duplicate keys instead of silently keeping the last."""


# Scalars are typed as YAML 1.2's core schema does, not PyYAML's YAML 1.1: `yes`, `no`,
# `on` and `off` are text (a topic called `no` stays one), only true/false are booleans;
# `010` and `1:30` are text (YAML 1.1 read them as 8 and 90: octal and base 60), refused
# where a number belongs; `1e3` is a number (1.1 read it as text). Kept from 1.1: `_`
# between digits (1_000_000), and timestamps.
_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_UniqueKeyLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+)$"),
    list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?
                          |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
                          |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


class Dumper(yaml.SafeDumper):
    """A SafeDumper that quotes a string which YAML 1.1 or this module's 1.2 typing would
    read as something else (`yes` for 1.1, `1e3` for 1.2), so what Shoal writes reads back
    as written both here and with a plain `yaml.safe_load`."""


Dumper.yaml_implicit_resolvers = {
    first: [*yaml.SafeDumper.yaml_implicit_resolvers.get(first, []),
            *_UniqueKeyLoader.yaml_implicit_resolvers.get(first, [])]
    for first in {*yaml.SafeDumper.yaml_implicit_resolvers,
                  *_UniqueKeyLoader.yaml_implicit_resolvers}}


def dump_yaml(data: Any, **options: Any) -> str:
    """`data` as YAML text that reads back as it is (see Dumper); options as yaml.dump's."""
    return yaml.dump(data, Dumper=options.pop("Dumper", Dumper), **options)


# An integer beyond this many bits (about 1,000 digits) is no value of a config; Python
# cannot print one of more than 4,300 digits, and 0x / 0o / 0b literals skip its bound.
MAX_INT_BITS = 3_322


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer as the resolver above admits it (decimal without a leading zero, or
    0x / 0o / 0b): PyYAML's own reads a leading 0 as octal and rejects 0o."""
    value = int(str(loader.construct_scalar(node)).replace("_", ""), 0)
    if value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"an integer of {value.bit_length():,} bits (more than 1,000 "
                         "digits) is no value of a config")
    return value


_UniqueKeyLoader.add_constructor(_INT, _construct_int)


def _refuse_tag(why: str) -> Any:
    """A constructor refusing its tag, at the node's line."""
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise yaml.constructor.ConstructorError(
            None, None, f"the YAML tag {tag} is not supported: {why}", node.start_mark)
    return construct


# A set has no order (the order of its items would follow Python's hash seed, run to run:
# topics, endpoints); `!!binary` turns base64 into text nobody reads in the file.
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:set", _refuse_tag(
    "a set has no order; write a list"))
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:binary", _refuse_tag(
    "write the text itself"))


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode,
                       deep: bool = False) -> dict[Any, Any]:
    # merge keys (`<<: *defaults`) as PyYAML does: the merged pairs are put before the
    # node's own, which override them; only a key the node itself gives twice is an error
    own = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)
    seen: set[object] = set()
    for key_node, _ in node.value[len(node.value) - own:]:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:  # `[1, 2]: x` would escape as a TypeError
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a name, not a list or a mapping",
                key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


# Bounds on what a YAML file may expand to: a small file of aliases can stand for an
# enormous structure (an "alias bomb"), and deep nesting exhausts the stack.
MAX_NODES = 2_000_000
MAX_DEPTH = 100


def read_yaml(path: str | Path, what: str = "config") -> tuple[Any, yaml.Node | None]:
    """A YAML file's data and its node tree, or an error naming the file: missing, not
    UTF-8 text, malformed (with the line), nested too deeply, or expanding (through
    aliases) to more than MAX_NODES values."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError([f"{path}: is a folder; give the {what} file"])
    if not path.is_file():
        raise ConfigError([f"{path}: {what} file not found" if not path.exists() else
                           f"{path}: the {what} file is {not_a_file(path)}; save it to a file"])
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
    return load_yaml_text(text, str(path))


def load_yaml_text(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """YAML text's data and node tree, read as a config file is (duplicate keys, values
    that cannot be built, nesting deeper than MAX_DEPTH and alias bombs refused), or a
    ConfigError naming `source` (a file, `--intervene -`) and the line when there is one."""
    try:
        root = yaml.compose(text, Loader=_UniqueKeyLoader)
        _check_size(root, source)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError([f"{source}{line}: malformed YAML: {exc.problem or exc}"
                           + _long_key_hint(exc, text)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: malformed YAML: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: nested too deeply (more than {MAX_DEPTH} levels)"]
                          ) from None
    return data, root


def _long_key_hint(exc: yaml.MarkedYAMLError, text: str) -> str:
    """Why a line that has its ':' was refused, when the reason is YAML's limit of 1,024
    characters on a plain key (the parser says only that it found no ':')."""
    mark = exc.context_mark
    if exc.context != "while scanning a simple key" or mark is None:
        return ""
    line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
    if ":" not in line[mark.column + 1024:]:
        return ""
    return (" (the key on this line is longer than 1,024 characters, the most YAML "
            "allows a plain key)")


def yaml_value(text: str) -> Any:
    """A YAML value given on the command line (a `--set` or `--grid` value, a
    selector), read as a config file's values are: a duplicate key, a value that cannot
    be built, nesting deeper than MAX_DEPTH or an alias bomb is a yaml.YAMLError (whose
    message names the problem) rather than a last value silently kept or a RecursionError."""
    try:
        root = yaml.compose(text, Loader=_UniqueKeyLoader)
        problem = _size_problem(root)
        if problem:
            raise yaml.YAMLError(problem)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise yaml.YAMLError(f"nested too deeply (more than {MAX_DEPTH} levels)") from None


def _check_size(root: yaml.Node | None, source: str) -> None:
    """Refuse a node tree deeper than MAX_DEPTH, or whose aliases expand it beyond
    MAX_NODES values: a ConfigError naming `source`."""
    problem = _size_problem(root)
    if problem:
        raise ConfigError([f"{source}: {problem}"])


def _size_problem(root: yaml.Node | None) -> str | None:
    """What is wrong with a node tree deeper than MAX_DEPTH, or whose aliases expand it
    beyond MAX_NODES values (counted without expanding: each node's size once); None if
    nothing is."""
    if root is None:
        return None
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested too deeply (more than {MAX_DEPTH} levels)"
        kids = ([v for kv in node.value for v in kv] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            size[id(node)] = 1 + sum(size[id(k)] for k in kids)
            if size[id(node)] > MAX_NODES:
                return (f"expands to more than {MAX_NODES:,} values (through aliases); "
                        "write the values out")
        elif id(node) not in size:
            stack.append((node, depth, True))
            stack.extend((k, depth + 1, False) for k in kids if id(k) not in size)
    return None
