"""What every config model shares: the strict base class, names, and the field type of a
registered part (a belief rule, a recommender, a platform's settings, ...).

A part field is validated by the config model its part registered with
(shoal.core.registry): a belief rule's parameters are checked by the rule's own model,
whether the rule ships with Shoal or comes from a plug-in. Models build their validation
schema on first use (`defer_build`), so the registries load then, not at import.
"""

from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

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
        # (names become folder names, SQL identifiers and prompt keys: ASCII only)
        raise ValueError("must start with an ASCII letter (A-Z, a-z) and use only ASCII "
                         f"letters, digits, _ or -, got {v!r}")
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
    def _no_lax_numbers(cls, data: Any) -> Any:
        # YAML reads `yes`/`true` as True, and pydantic would take it as 1; a quoted "10"
        # is a string, which pydantic would read as 10 without a word. Either value is
        # swapped for one no number type accepts (rather than raising here), so the
        # field's error is reported together with every other field's.
        if isinstance(data, dict):
            swapped = {key: NotANumber(value) for key, value in data.items()
                       if isinstance(key, str) and isinstance(value, bool | str)
                       and (field := cls.model_fields.get(key)) is not None
                       and _lax_number(field.annotation, value)}
            if swapped:
                return {**data, **swapped}
        return data


class NotANumber:
    """A YAML boolean, or a quoted string, given where a number belongs: fails the field's
    validation and shows as the YAML spelled it (`must be a number, got true`)."""

    def __init__(self, value: bool | str):
        self.value = value

    def __repr__(self) -> str:
        if isinstance(self.value, bool):
            return str(self.value).lower()
        try:
            float(self.value)
        except ValueError:  # not a number at all (`ten`, `1000x`): no quotes to take off
            return repr(self.value)
        if re.fullmatch(r"[-+]?0[0-9_]+", self.value.strip()):
            # unquoted, YAML 1.2 reads it as text (YAML 1.1 as octal): say what to write
            return f"{self.value!r} (a leading zero makes it text: write {float(self.value):g})"
        return f"{self.value!r} (a quoted string: write the number without quotes)"


def _lax_number(annotation: Any, value: bool | str) -> bool:
    """Whether pydantic would quietly read `value` as a number for a field of this type:
    a boolean where the field is numeric and takes no booleans, a string where the field
    takes numbers (or nothing) only."""
    if isinstance(value, bool):
        return _numeric(annotation) and not _admits(annotation, bool)
    kinds = _alternatives(annotation)
    return bool(kinds & {int, float}) and kinds <= {int, float, type(None)}


def _alternatives(annotation: Any) -> set[Any]:
    """The types a union (or a lone type) admits; Annotated and Optional unwrapped."""
    if get_origin(annotation) is Annotated:
        return _alternatives(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return set().union(*(_alternatives(a) for a in get_args(annotation)))
    return {annotation}


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
