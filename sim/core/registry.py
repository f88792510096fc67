"""Plug-in registries: every family of parts has one, and they all have the same shape.

A part is a name, the pydantic model of its config section, and its implementation (a
class or a function, as the family defines). Shoal's own parts register themselves when
their module is imported, exactly as a third-party package's do: the modules of the
built-in parts are listed in `BUILTINS`, third-party modules are found through the Python
entry-point group `shoal.plugins`:

    # a plug-in package's pyproject.toml
    [project.entry-points."shoal.plugins"]
    my_parts = "my_package.shoal_parts"      # a module that registers on import

    # my_package/shoal_parts.py
    from shoal.core.registry import BELIEF_RULES
    @BELIEF_RULES.register("my_rule", config=MyRuleConfig)
    class MyRule(UpdateRule): ...

Registries load lazily, the first time one is asked for a part, so importing a module of
Shoal never imports the parts of another layer.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from shoal.core.errors import InputError

ENTRY_POINT_GROUP = "shoal.plugins"
# Modules holding Shoal's own parts (imported first, in this order). The store's modules
# declare the trajectory's tables (sim/store/tables.py); the market declares its own.
BUILTINS = (
    "shoal.store.schema",
    "shoal.store.knowledge",
    "shoal.store.traces",
    "shoal.platforms.twitter",
    "shoal.platforms.reddit",
    "shoal.beliefs.rules",
    "shoal.engine.recommenders",
    "shoal.engine.interventions",
    "shoal.memory.compaction",
    "shoal.memory.llm_summarizer",
    "shoal.agents.rule_policy",
    "shoal.llm.openai",
    "shoal.market.makers",
    "shoal.market.platform",
    "shoal.memory.knowledge.extractors",
)


class PluginError(InputError):
    """A plug-in that cannot be loaded or registers something invalid (exit 2: it is the
    environment the user set up, not Shoal, that needs fixing)."""


def from_shoal(obj: Any) -> bool:
    """Whether a part's implementation (a class, an instance, a function) is Shoal's own."""
    module = getattr(obj, "__module__", None) or ""
    return module == "shoal" or module.startswith("shoal.")


@contextmanager
def calling(what: str, obj: Any, round_: int | None = None, during: str = ""
            ) -> Iterator[None]:
    """Around a call into the part `obj` (`what` names it: "belief rule 'x'"): an error a
    plug-in's part raises, `sys.exit` included, becomes a PluginError naming the part and
    the round. Shoal's own parts' errors pass unchanged (they are Shoal's bugs, and show
    as such)."""
    if from_shoal(obj):
        yield
        return
    try:
        yield
    except InputError:
        raise
    except (Exception, SystemExit) as exc:
        said = str(exc).strip().splitlines()
        when = f"round {round_}: " if round_ is not None else ""
        kept = f". Nothing of round {round_} was kept" if round_ is not None else ""
        raise PluginError(f"{when}the {what} (from {getattr(obj, '__module__', '?')}) raised "
                          f"{type(exc).__name__}{during}" + (f": {said[0]}" if said else "")
                          + kept) from exc


@dataclass(frozen=True)
class Part:
    """One registered part: its name, config model (or None) and implementation."""

    name: str
    config: type | None
    impl: Any
    module: str  # where it was registered from (shown when two parts clash)
    meta: dict[str, Any]


class Registry:
    """The parts of one family, by name. `tag` is the config field naming the part (e.g.
    `rule` for belief rules); `default` the part used when a config leaves it out."""

    def __init__(self, family: str, tag: str | None = None, default: str | None = None):
        self.family = family
        self.tag = tag
        self.default = default
        self.config_base: type | None = None  # what every part's config model derives from
        self._parts: dict[str, Part] = {}

    def register(self, name: str, config: type | None = None, impl: Any = None,
                 module: str | None = None, **meta: Any) -> Any:
        """Register `impl` (or, used as a decorator, the decorated object) as `name`;
        `module` is where it comes from (default: the implementation's module). `meta`
        carries family-specific facts (e.g. a recommender's feed description)."""
        if impl is None:
            return lambda obj: self.register(name, config, obj, module, **meta) or obj
        module = module or getattr(impl, "__module__", None) or "?"
        old = self._parts.get(name)
        if old is not None and (old.impl is not impl or old.config is not config):
            raise PluginError(f"{self.family} {name!r} is registered twice: by {old.module} "
                              f"and by {module}")
        if config is None and self.tag is not None:
            raise PluginError(f"{self.family} {name!r} (from {module}): needs a config model "
                              f"(a config names its part by `{self.tag}: {name}`)")
        if config is not None:
            _check_config(self, name, config, module)
        self._parts[name] = Part(name, config, impl, module, dict(meta))
        return impl

    def get(self, name: str) -> Part:
        """The part called `name` (InputError listing the known ones if there is none)."""
        load_plugins()
        part = self._parts.get(name)
        if part is None:
            raise InputError(f"unknown {self.family} {name!r}; known: "
                             f"{', '.join(sorted(self._parts)) or 'none'}")
        return part

    def create(self, config: Any, *args: Any, **kwargs: Any) -> Any:
        """Build the part a config section names (by its tag): `impl(config, ...)`."""
        if self.tag is None:  # same TypeError getattr(config, None) raised before
            raise TypeError(f"{self.family} registry has no tag: create() needs one")
        part = self.get(getattr(config, self.tag))
        with calling(f"{self.family} {part.name!r}", part.impl, during=" while being built"):
            return part.impl(config, *args, **kwargs)

    def registered(self) -> list[Part]:
        """The parts registered so far, without loading the plug-ins (for checks made
        while they register)."""
        return list(self._parts.values())

    def names(self) -> list[str]:
        """Registered names, sorted."""
        load_plugins()
        return sorted(self._parts)

    def __iter__(self) -> Iterator[Part]:
        load_plugins()
        return iter([self._parts[n] for n in sorted(self._parts)])

    def __contains__(self, name: str) -> bool:
        load_plugins()
        return name in self._parts


def _check_config(registry: Registry, name: str, config: type, module: str) -> None:
    """A part's config model refuses unknown fields (a misspelt parameter is an error, not
    a default silently used), derives from the family's base model where it has one, and
    carries the family's tag."""
    where = f"{registry.family} {name!r} (from {module}): its config model"
    if getattr(config, "model_config", {}).get("extra") != "forbid":
        raise PluginError(f"{where} {getattr(config, '__name__', config)} must refuse "
                          "unknown fields: derive it from shoal.config.base.Strict")
    base = registry.config_base
    if base is not None and not (isinstance(config, type) and issubclass(config, base)):
        raise PluginError(f"{where} {config.__name__} must derive from "
                          f"{base.__module__}.{base.__name__}")
    if registry.tag is not None:
        _check_tag(registry, name, config)


def _check_tag(registry: Registry, name: str, config: type) -> None:
    """A part's config model must carry the family's tag with the part's name as its only
    value, so that a config names its part unambiguously."""
    field = getattr(config, "model_fields", {}).get(registry.tag)
    values = getattr(getattr(field, "annotation", None), "__args__", ())
    if field is None or tuple(values) != (name,):
        raise PluginError(f"{registry.family} {name!r}: its config model {config.__name__} "
                          f"needs the field `{registry.tag}: Literal[{name!r}]`")


BELIEF_RULES = Registry("belief rule", tag="rule", default="social_influence")
RECOMMENDERS = Registry("recommender", tag="kind")
PLATFORMS = Registry("platform")
POLICIES = Registry("policy", tag="kind", default="rule")
CHAT_MODELS = Registry("chat model", tag="kind", default="openai")
SUMMARIZERS = Registry("summarizer", tag="kind", default="extractive")
INTERVENTIONS = Registry("intervention kind", tag="kind")
MARKET_MAKERS = Registry("market maker", tag="kind", default="lmsr")
EXTRACTORS = Registry("extractor", tag="kind", default="offline")
REGISTRIES = (PLATFORMS, BELIEF_RULES, RECOMMENDERS, POLICIES, CHAT_MODELS, SUMMARIZERS,
              INTERVENTIONS, MARKET_MAKERS, EXTRACTORS)

_LOCK = threading.RLock()
_LOADED: list[str] = []  # modules and entry points loaded, in order
_STATE = {"loading": False, "done": False}


def load_plugins() -> list[str]:
    """Import Shoal's built-in parts and every installed `shoal.plugins` entry point (once
    per process); returns what was loaded. An entry point may name a module (importing it
    registers its parts) or a function (called with no arguments)."""
    if _STATE["done"]:
        return list(_LOADED)
    with _LOCK:  # re-entrant: a built-in module's import may ask a registry for a part
        if _STATE["done"] or _STATE["loading"]:
            return list(_LOADED)
        _STATE["loading"] = True
        try:
            for module in BUILTINS:
                importlib.import_module(module)
                _LOADED.append(module)
            for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                _load_entry_point(ep)
            _STATE["done"] = True
        finally:
            _STATE["loading"] = False
    return list(_LOADED)


def _load_entry_point(ep: EntryPoint) -> None:
    try:
        obj = ep.load()
        if callable(obj) and not isinstance(obj, type):
            obj()
    except PluginError:
        raise
    except (Exception, SystemExit) as exc:  # (a module calling sys.exit() on import too)
        raise PluginError(f"plug-in {ep.name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}") from exc
    _LOADED.append(f"{ep.name} = {ep.value}")
