"""The `platforms:` section: one entry per registered platform, each validated by the
config model its platform registered (shoal.platforms). Shoal's own platforms are on unless
switched off; a plug-in's platform is off unless the config names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import (
    Field,
    GetCoreSchemaHandler,
    SerializerFunctionWrapHandler,
    create_model,
    model_serializer,
    model_validator,
)
from pydantic_core import core_schema

from shoal.config.base import PartOf, Strict
from shoal.config.selector import Selector
from shoal.core.registry import PLATFORMS, RECOMMENDERS


class PlatformConfig(Strict):
    """One platform: who is a member, feed size and recommender, per-round participation,
    actions per agent and round. A platform's own model may add fields and defaults."""

    enabled: bool = True
    members: Selector = Field(default_factory=Selector)
    participation: float = Field(default=1.0, ge=0, le=1)
    feed_size: int = Field(default=10, gt=0, le=200)
    recommender: Annotated[Any, PartOf(RECOMMENDERS)] = Field(default="following",
                                                              validate_default=True)
    max_actions_per_round: int = Field(default=1, ge=1, le=10)


# Fields a `set` intervention or a fork may change on a running platform (the rest shaped
# round 0: membership, whether it exists). A platform's config model may list its own in a
# `mutable_fields` class attribute.
MUTABLE_FIELDS = ("recommender", "participation", "feed_size", "max_actions_per_round")


def mutable_fields(platform: str) -> tuple[str, ...]:
    """The fields of platform `platform` that may change mid-run."""
    config = PLATFORMS.get(platform).config if platform in PLATFORMS else None
    return tuple(getattr(config, "mutable_fields", MUTABLE_FIELDS))


class PlatformsConfig(Strict):
    """The configured platforms (attributes by name; a platform not configured is None)."""

    def names(self) -> list[str]:
        """Platforms present in this config (enabled or not), in canonical order."""
        return [n for n in _order() if getattr(self, n, None) is not None]

    def enabled(self) -> list[str]:
        """Names of enabled social platforms (feeds, follows), in canonical order (by
        platform code)."""
        return [n for n in self.names() if getattr(self, n).enabled and _social(n)]

    def engines(self) -> list[str]:
        """Names of enabled platforms that run their own engine (the market), in order."""
        return [n for n in self.names() if getattr(self, n).enabled and not _social(n)]

    def get(self, name: str) -> PlatformConfig:
        """The config of platform `name`."""
        return getattr(self, name)

    def items(self) -> list[tuple[str, PlatformConfig]]:
        """(name, config) of the platforms present, in canonical order."""
        return [(n, getattr(self, n)) for n in self.names()]

    def social_items(self) -> list[tuple[str, PlatformConfig]]:
        """(name, config) of the social platforms present, in canonical order."""
        return [(n, c) for n, c in self.items() if _social(n)]

    @model_validator(mode="after")
    def _one(self) -> Self:
        if not self.enabled():
            raise ValueError("at least one social platform must be enabled (the market "
                             "trades beside them)" if self.engines() else
                             "at least one platform must be enabled")
        return self

    @model_serializer(mode="wrap")
    def _present_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


def _social(name: str) -> bool:
    return PLATFORMS.get(name).impl.social


def _order() -> list[str]:
    return [p.name for p in sorted(PLATFORMS, key=lambda p: p.impl.code)]


class PlatformsOf:
    """Field metadata: the platforms section, a model built from the platform registry
    (one optional field per registered platform)."""

    _model: type[PlatformsConfig] | None = None

    def model(self) -> type[PlatformsConfig]:
        """The section's model (built once, after the registries loaded)."""
        if PlatformsOf._model is None:
            fields: dict[str, Any] = {}
            for p in sorted(PLATFORMS, key=lambda p: p.impl.code):
                model = p.config or PlatformConfig
                if p.impl.enabled_by_default:
                    fields[p.name] = (model, Field(default_factory=model))
                else:
                    fields[p.name] = (model | None, None)
            PlatformsOf._model = create_model("PlatformsConfig", __base__=PlatformsConfig,
                                              **fields)
        return PlatformsOf._model

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        return handler.generate_schema(self.model())


Platforms = Annotated[Any, PlatformsOf()]  # the type of the config's `platforms` field
