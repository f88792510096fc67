"""The languages agents are spoken to in: BCP 47 tags and the text templates of each.

Every fixed text an agent reads (section headings, the rules, beliefs in words, memory,
digest and notification lines, feed labels, the interview and survey wording, tool
descriptions, generated personas) and the loopback server's canned answers come from one
data file per language, `languages/<tag>.yaml` beside this module (shipped as package
data). English is the reference: every other file has exactly its keys, the same
`{placeholders}` in each text and lists of the same length (tests/test_language.py).

A tag is checked for BCP 47 form (`zh`, `zh-Hans`, `de-CH`, `es-419`), then resolved to
the most specific file it names: `zh-Hant-TW`, then `zh-Hant`, then `zh`. So a regional
or script variant without a file of its own falls back to its base language, and a
language without a file (`ko`) is an error that lists the available ones.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import yaml

DEFAULT = "en"

# RFC 5646 `langtag` (irregular grandfathered tags and bare private-use tags are not
# languages anyone has templates for): language[-extlang], script, region, variants,
# extensions, private use.
_TAG = re.compile(r"""
    ^(?P<language>[a-z]{2,3}(?:-[a-z]{3}){0,3}|[a-z]{4}|[a-z]{5,8})
    (?:-(?P<script>[a-z]{4}))?
    (?:-(?P<region>[a-z]{2}|[0-9]{3}))?
    (?P<rest>(?:-(?:[a-z0-9]{5,8}|[0-9][a-z0-9]{3}))*
             (?:-[a-wyz0-9](?:-[a-z0-9]{2,8})+)*
             (?:-x(?:-[a-z0-9]{1,8})+)?)$
""", re.IGNORECASE | re.VERBOSE)

# Names people write instead of a tag, for the hint of an error (not accepted as tags).
_NAMES = {"english": "en", "chinese": "zh", "mandarin": "zh", "spanish": "es",
          "espanol": "es", "español": "es", "german": "de", "deutsch": "de", "french": "fr",
          "francais": "fr", "français": "fr", "japanese": "ja", "中文": "zh", "日本語": "ja",
          "cn": "zh", "jp": "ja"}
_EXAMPLES = "like en, zh, zh-Hans, es-419 or de-CH"


def canonical(tag: str) -> str:
    """`tag` checked for BCP 47 form and in its canonical case (`zh-hant-tw` ->
    `zh-Hant-TW`); ValueError saying what is wrong otherwise."""
    if not isinstance(tag, str):
        raise ValueError(f"must be a BCP 47 language tag ({_EXAMPLES}), got {tag!r}")
    m = _TAG.match(tag.strip()) if tag.strip() == tag else None
    if m is None:
        hint = _hint(tag)
        raise ValueError(f"{tag!r} is not a BCP 47 language tag ({_EXAMPLES}){hint}")
    out = m["language"].lower()
    if m["script"]:
        out += "-" + m["script"].title()
    if m["region"]:
        out += "-" + m["region"].upper()
    return out + m["rest"].lower()


def _hint(tag: str) -> str:
    """' (did you mean ...?)' for a language's name or a tag written with `_`, else ''."""
    guess = _NAMES.get(tag.strip().lower())
    if guess is None and "_" in tag and _TAG.match(tag.strip().replace("_", "-")):
        guess = canonical(tag.strip().replace("_", "-"))
    return f" (did you mean {guess!r}?)" if guess else ""


@cache
def available() -> tuple[str, ...]:
    """The tags that have templates (the data files' names), sorted."""
    folder = resources.files("shoal.core").joinpath("languages")
    return tuple(sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                        if p.name.endswith(".yaml")))


def resolve(tag: str) -> str:
    """The templates' tag for `tag` (canonical case): its own file, else the file of its
    longest prefix of whole subtags (`de-CH` -> `de`, `zh-Hant-TW` -> `zh`); ValueError
    naming the available languages when even its base language has none."""
    tag = canonical(tag)
    have = {t.lower(): t for t in available()}
    parts = tag.split("-")
    for n in range(len(parts), 0, -1):
        found = have.get("-".join(parts[:n]).lower())
        if found is not None:
            return found
    hint = f" (did you mean {_NAMES[parts[0]]!r}?)" if parts[0] in _NAMES else ""
    raise ValueError(f"no templates for the language {tag!r}{hint}; available: "
                     f"{', '.join(available())} (a regional or script variant of one of "
                     "them, such as de-CH or zh-Hant, uses its base language)")


def check(tag: str) -> str:
    """A config's language tag: canonical, and with templates (ValueError otherwise)."""
    tag = canonical(tag)
    resolve(tag)
    return tag


_FORMATTER = string.Formatter()


def placeholders(text: str) -> set[str]:
    """The `{names}` a template text fills in (`{{`/`}}` are literal braces)."""
    return {name for _, name, _, _ in _FORMATTER.parse(text) if name is not None}


def positional(text: str, names: tuple[str, ...]) -> Callable[..., str]:
    """`text.format`, taking the values of `names` by position: a keyword `format` costs
    twice as much, and feed lines format several texts each."""
    out = []
    for literal, name, spec, conversion in _FORMATTER.parse(text):
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if name is not None:
            out.append("{" + str(names.index(name)) + (f"!{conversion}" if conversion else "")
                       + (f":{spec}" if spec else "") + "}")
    return "".join(out).format


def _flatten(data: Mapping[str, Any], prefix: str, out: dict[str, str | tuple[str, ...]],
             where: str) -> None:
    for key, value in data.items():
        if not isinstance(key, str):  # YAML reads a bare on/off/yes/no key as a boolean
            raise ValueError(f"{where}: {prefix}{key}: a key must be text (quote it)")
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, f"{path}.", out, where)
        elif isinstance(value, str):
            out[path] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[path] = tuple(value)
        else:
            raise ValueError(f"{where}: {path}: a text or a list of texts, got "
                             f"{type(value).__name__}")


def read_file(tag: str) -> dict[str, str | tuple[str, ...]]:
    """The texts of `languages/<tag>.yaml`, by dotted key (nested mappings flattened)."""
    where = f"languages/{tag}.yaml"
    text = resources.files("shoal.core").joinpath(where).read_text("utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a mapping of texts is expected")
    out: dict[str, str | tuple[str, ...]] = {}
    _flatten(data, "", out, where)
    return out


@dataclass(frozen=True)
class Templates:
    """The texts of one language, by dotted key (`prompt.persona.title`)."""

    tag: str  # the file's tag (`zh` for a `zh-Hant` population)
    texts: Mapping[str, str | tuple[str, ...]]
    # the texts that are not lists, and those without placeholders filled in already:
    # every context line looks them up
    _strings: dict[str, str] = field(init=False, repr=False, compare=False)
    _fixed: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        strings = {k: v for k, v in self.texts.items() if isinstance(v, str)}
        object.__setattr__(self, "_strings", strings)
        object.__setattr__(self, "_fixed", {k: v.format() for k, v in strings.items()
                                            if not placeholders(v)})

    def __call__(self, key: str, /, **fields: Any) -> str:
        """The text of `key` with `fields` filled in."""
        if not fields:
            fixed = self._fixed.get(key)
            if fixed is not None:
                return fixed
        return self._strings[key].format(**fields)

    def text(self, key: str) -> str:
        """The text of `key` as written (placeholders not filled in)."""
        value = self._strings.get(key)
        if value is None:
            raise KeyError(f"{key}: a list, not a text" if key in self.texts else key)
        return value

    def items(self, key: str) -> tuple[str, ...]:
        """The list of texts of `key`."""
        value = self.texts[key]
        if isinstance(value, str):
            raise KeyError(f"{key}: a text, not a list")
        return value

    def plural(self, key: str, n: int, /, **fields: Any) -> str:
        """`key.one` for n == 1, else `key.other`, with `n` and `fields` filled in."""
        return self(f"{key}.{'one' if n == 1 else 'other'}", n=n, **fields)

    def get(self, key: str, default: str) -> str:
        """The text of `key`, or `default` when the language has none (a plug-in's
        platform, a recommender's own phrase)."""
        return self._strings.get(key, default)

    def get_items(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """The list of `key`, or `default` when the language has none."""
        value = self.texts.get(key)
        return value if isinstance(value, tuple) else default


@lru_cache(maxsize=256)
def templates(tag: str = DEFAULT) -> Templates:
    """The templates for the language `tag` (resolved as `resolve` does; cached, and
    `zh-Hans` and `zh` share one `Templates`)."""
    return _load(resolve(tag))


@cache
def _load(tag: str) -> Templates:
    return Templates(tag, read_file(tag))


def is_default(tag: str | None) -> bool:
    """Whether `tag` is the default language (None counts as the default)."""
    return tag is None or tag == DEFAULT


# Scripts by their Unicode ranges: kana says Japanese (which also writes Han characters),
# Han alone says Chinese.
_KANA = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def _cjk(text: str) -> str | None:
    """`zh` or `ja` when at least a third of `text`'s letters are Chinese or Japanese
    characters (kana among them: Japanese), else None: an English persona that names a
    Chinese city stays English."""
    letters = sum(1 for c in text if c.isalpha())
    han, kana = len(_HAN.findall(text)), len(_KANA.findall(text))
    if not letters or 3 * (han + kana) < letters:
        return None
    return "ja" if 10 * kana > han + kana else "zh"


def detect_cjk(texts: list[str]) -> str | None:
    """`zh` or `ja` when most of the non-empty `texts` are written in Chinese or Japanese,
    else None. For imported personas and briefs, whose language no field states."""
    found = [_cjk(t) for t in texts if t and t.strip()]
    cjk = [f for f in found if f is not None]
    if not found or 2 * len(cjk) <= len(found):
        return None
    return "ja" if 2 * cjk.count("ja") > len(cjk) else "zh"
