"""One way to pick agents, wherever a config picks some: a platform's members, the LLM
agents, an intervention's target, a market's traders.

A selector names explicit `ids`, and/or `groups`, and/or a seeded `fraction` of those;
every field left out means "no restriction", so an empty selector picks everyone. It is
resolved against the population by `shoal.world.selection.select`, with one rule for every
user: an id outside the population or an unknown group is an error naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from shoal.config.base import Strict


class Selector(Strict):
    """Which agents: everyone (no field), explicit `ids`, named `groups`, and/or a seeded
    `fraction` of those."""

    ids: list[Annotated[int, Field(ge=0)]] | None = None
    groups: list[str] | None = None
    fraction: float | None = Field(default=None, gt=0, le=1)

    @property
    def everyone(self) -> bool:
        """Whether the selector restricts nothing."""
        return self.ids is None and self.groups is None and self.fraction is None


_ID_PART = re.compile(r"\d+(?:-\d+)?")  # an id, or a range of ids: 7, 0-199


def id_ranges(text: str) -> list[tuple[int, int]] | None:
    """The (first, last) id ranges of a list of ids and ranges (`0-199,250`); None for
    text that is not one (`0-`, `-5` and `5--7` are not)."""
    parts = [p.strip() for p in text.strip().split(",")]
    if not all(_ID_PART.fullmatch(p) for p in parts):
        return None
    return [(int(lo), int(hi or lo)) for lo, _, hi in (p.partition("-") for p in parts)]


def parse_selector(text: str, flag: str = "--agents") -> Selector:
    """A selector from the command line: `all`, ids and ranges (`0-199,250`),
    `group:NAME[,NAME]`, or a YAML mapping (`{groups: [a], fraction: 0.5}`); an
    InputError naming `flag` otherwise."""
    import yaml
    from pydantic import ValidationError

    from shoal.config.yaml_text import yaml_value
    from shoal.core.errors import InputError

    text = text.strip()
    if text == "all":
        return Selector()
    if text.startswith("group:"):
        names = [g.strip() for g in text.split(":", 1)[1].split(",") if g.strip()]
        if not names:
            raise InputError(f"{flag} {text}: name at least one group")
        return Selector(groups=names)
    ranges = id_ranges(text)
    if ranges is not None:
        ids: list[int] = []
        for lo, hi in ranges:
            if hi < lo:
                raise InputError(f"{flag} {text}: the range {lo}-{hi} is empty")
            ids.extend(range(lo, hi + 1))
        return Selector(ids=ids)
    try:
        data = yaml_value(text)
        if not isinstance(data, dict):
            raise ValueError
        return Selector(**data)
    except (yaml.YAMLError, ValueError, TypeError, ValidationError) as exc:
        detail = ""
        if isinstance(exc, ValidationError):
            detail = "; " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                      for e in exc.errors())
        elif isinstance(exc, yaml.YAMLError):  # (a duplicate key, nesting beyond reason)
            detail = "; " + (getattr(exc, "problem", None) or str(exc).splitlines()[0])
        raise InputError(f"{flag} {text!r}: not a selector (all, 0-199,250, group:NAME, or "
                         f"a YAML mapping of ids, groups, fraction){detail}") from None
