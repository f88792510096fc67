"""What makes a platform: its spec. The engine, the policies, prompts and the store read
everything platform-specific from here, so a new platform is a new spec registered in
`shoal.core.registry.PLATFORMS` (with its config model), and no edit elsewhere.

`code` is the platform's number in arrays, random-stream keys and the trajectory's
platform enum; it is fixed per platform (Shoal's own: 0, 1 and 2) and must be below 10.

Most platforms are social: feeds of posts, follows, votes, all run by the engine's own
phases. A platform that is not (the prediction market) names its `engine`, a class
("module:Class") the world builds from the platform's config section; it owns the
platform's state and takes part in the round through the hooks of
`shoal.world.platform_engine.PlatformEngine`.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any

from shoal.core.errors import InputError
from shoal.core.posts import PostKind
from shoal.core.registry import PLATFORMS, PluginError
from shoal.core.vocabulary import ActionType

MAX_CODE = 9  # random-stream keys are purpose + 100·code + 1000·slot
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class PlatformSpec:
    """A platform kind."""

    name: str
    code: int
    label: str  # how agents and reports call it ("Twitter")
    actions: tuple[ActionType, ...]  # what an agent may do there, in the order tools list them
    engagements: tuple[ActionType, ...]  # what the rule policy may do with a feed item
    feed_kinds: tuple[PostKind, ...]  # the kinds of post its feeds show
    action_help: tuple[str, ...]  # one phrase per action, for the agent's instructions
    votes_as_score: bool = False  # feeds show up − down as a score (else a like count)
    enabled_by_default: bool = False  # on in every config that does not switch it off
    social: bool = True  # feeds, posts and follows, run by the engine's own phases
    engine: str | None = None  # "module:Class" of a non-social platform's engine

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InputError(f"platform {self.name!r}: a platform's name is a lowercase "
                             "letter, then lowercase letters, digits or _ (it names "
                             "columns, tables and config sections)")
        if not 0 <= self.code <= MAX_CODE:
            raise InputError(f"platform {self.name!r}: code {self.code} must be in "
                             f"0..{MAX_CODE}")
        if ActionType.DO_NOTHING not in self.actions:
            raise InputError(f"platform {self.name!r}: its actions must include do_nothing")
        if stray := [a.name.lower() for a in self.engagements if a not in self.actions]:
            raise InputError(f"platform {self.name!r}: engagements {stray} are not among "
                             "its actions")
        if not self.social and not self.engine:
            raise InputError(f"platform {self.name!r}: a platform that is not social needs "
                             "an engine")

    def engine_class(self) -> Any:
        """The class of this platform's engine (imported on first use)."""
        module, _, name = (self.engine or "").partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"platform {self.name!r}: cannot load its engine "
                             f"{self.engine!r}: {exc}") from exc


def spec(name: str) -> PlatformSpec:
    """The spec of platform `name`."""
    return PLATFORMS.get(name).impl


def by_code() -> dict[int, PlatformSpec]:
    """Every registered platform's spec, by code (checked unique)."""
    out: dict[int, PlatformSpec] = {}
    for part in PLATFORMS:
        s = part.impl
        if s.code in out:
            raise InputError(f"platforms {out[s.code].name!r} and {s.name!r} share the "
                             f"code {s.code}")
        out[s.code] = s
    return dict(sorted(out.items()))


def platform_slots() -> int:
    """How many platform codes arrays indexed by code need room for."""
    return max(by_code()) + 1


def label(name: str) -> str:
    """How agents are told the platform's name (the name itself if unknown)."""
    return spec(name).label if name in PLATFORMS else name


def register(platform: PlatformSpec, config: type, example: dict | None = None
             ) -> PlatformSpec:
    """Register a platform spec with its config model (`example`: a config section that
    uses it, for the conformance kit, where its defaults are not enough)."""
    meta = {"example": example} if example is not None else {}
    # (named by the module that called: the spec object itself is of this module)
    caller = sys._getframe(1).f_globals.get("__name__", "?")
    for other in PLATFORMS.registered():  # (codes key stored rows: one per platform)
        if other.impl.code == platform.code and other.name != platform.name:
            raise PluginError(f"platform {platform.name!r} (from {caller}): code "
                              f"{platform.code} is platform {other.name!r}'s (from "
                              f"{other.module}); choose a free code in 0..{MAX_CODE}")
    if all(p.name != platform.name for p in PLATFORMS.registered()):  # (a clash says so)
        _check_common_fields(platform, config, caller)
    PLATFORMS.register(platform.name, config=config, impl=platform, module=caller, **meta)
    return platform


def _check_common_fields(platform: PlatformSpec, config: type, caller: str) -> None:
    """A platform's config model has the fields every platform's section is read by, with
    their types (`members` an agent selector: the config checks every selector's groups)."""
    from shoal.config.selector import Selector

    needed = {"enabled": bool, "members": Selector, "participation": float,
              "max_actions_per_round": int}
    have = getattr(config, "model_fields", {})
    wrong = [f"{n}: {t.__name__}" for n, t in needed.items()
             if n not in have or have[n].annotation is not t]
    if wrong:
        raise PluginError(f"platform {platform.name!r} (from {caller}): its config model "
                          f"{getattr(config, '__name__', config)} needs the fields "
                          f"{', '.join(wrong)} (shoal.config.selector.Selector; or derive it "
                          "from shoal.config.platforms.PlatformConfig)")
