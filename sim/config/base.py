"""What every config model shares: the strict base class, names, and the field type of a
registered part (a belief rule, a recommender, a platform's settings, ...).

A part field is validated by the config model its part registered with
(shoal.core.registry): a belief rule's parameters are checked by the rule's own model,
whether the rule ships with Shoal or comes from a plug-in. Models build their validation
schema on first use (`defer_build`), so the registries load then, not at import.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    model_validator,
)
from pydantic_core import core_schema

from shoal.core.distributions import Distribution, as_distribution
from shoal.core.registry import Registry

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


def _check_name(v: str) -> str:
    if not _NAME.match(v):
        raise ValueError(f"must start with a letter and use letters, digits, _ or -, got {v!r}")
    return v


Name = Annotated[str, AfterValidator(_check_name)]  # a topic's, a run's or a group's name
Dist = Annotated[Distribution, BeforeValidator(as_distribution)]


class Strict(BaseModel):
    """Base for config sections: unknown keys are errors, values are validated on
    assignment, numbers must be finite, and true/false is not a number."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True,
                              allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # YAML reads `yes`/`true` as True, and pydantic would take it as 1. The value is
        # swapped for one no number type accepts (rather than raising here), so the
        # field's error is reported together with every other field's.
        if isinstance(data, dict):
            swapped = {key: NotANumber(value) for key, value in data.items()
                       if isinstance(value, bool) and isinstance(key, str)
                       and (field := cls.model_fields.get(key)) is not None
                       and _numeric(field.annotation) and not _admits(field.annotation, bool)}
            if swapped:
                return {**data, **swapped}
        return data


class NotANumber:
    """A YAML boolean given where a number belongs: fails the field's validation and shows
    as the YAML spelled it (`must be a number, got true`)."""

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:
        return str(self.value).lower()


def _admits(annotation: Any, kind: type) -> bool:
    """Whether a type annotation (unions, Annotated, Optional unwrapped) includes `kind`."""
    if annotation is kind:
        return True
    return any(_admits(a, kind) for a in getattr(annotation, "__args__", ()) or ())


def _numeric(annotation: Any) -> bool:
    return _admits(annotation, int) or _admits(annotation, float)


class PartOf:
    """Field metadata: the value is the config of one part of `registry`, chosen by the
    registry's tag (`rule: deffuant`); a bare string names a part with its defaults, and a
    section without the tag is the registry's default part."""

    def __init__(self, registry: Registry):
        self.registry = registry

    def models(self) -> dict[str, type[BaseModel]]:
        """The registered config models by part name."""
        return {p.name: p.config for p in self.registry if p.config is not None}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        tag = self.registry.tag
        if tag is None:  # a part is chosen by its registry's tag: a registry without one
            raise TypeError(f"{self.registry.family}: a part field needs a registry with a tag")
        choices = {name: handler.generate_schema(model) for name, model in self.models().items()}
        union = core_schema.tagged_union_schema(choices, discriminator=tag)
        return core_schema.no_info_before_validator_function(self._tagged, union)

    def _tagged(self, value: Any) -> Any:
        tag, default = self.registry.tag, self.registry.default
        if isinstance(value, str):
            return {tag: value}
        if isinstance(value, dict) and tag not in value and default is not None:
            return {tag: default, **value}
        return value


def part(registry: Registry) -> Any:
    """The type of a config field holding one part of `registry`."""
    return Annotated[Any, PartOf(registry)]
