"""Reading YAML as Shoal reads a config file: a duplicate key, a value that cannot be
built, nesting deeper than MAX_DEPTH and an alias bomb are errors naming the source and
the line, never a last value silently kept, a RecursionError or a bare ValueError.

Kept apart from `shoal.config.loading` (which builds the config model) so that the parts
the model is made of (a selector, say) can read YAML without importing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from shoal.core.errors import ConfigError


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


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode,
                       deep: bool = False) -> dict[Any, Any]:
    seen: set[object] = set()
    for key_node, _ in node.value:
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
        raise ConfigError([f"{source}{line}: malformed YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: malformed YAML: {exc}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: nested too deeply (more than {MAX_DEPTH} levels)"]
                          ) from None
    return data, root


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
