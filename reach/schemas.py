"""Versioned payload schemas: pydantic models registered under ``name@MAJOR.MINOR``.

Minor versions only add optional fields and never change a field's meaning, so a reader of any
minor version of a major reads every other minor of it: fields it does not know are ignored and
fields the sender did not know are defaulted. A major mismatch is :class:`SchemaIncompatible`
(fatal). The registry enforces the minor-version rule when a model is registered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from reach.errors import (
    InvalidPayload,
    SchemaError,
    SchemaEvolutionError,
    SchemaIncompatible,
    UnknownSchema,
)

_NAME = r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*"
_NUM = r"0|[1-9][0-9]{0,5}"
_REF = re.compile(rf"^({_NAME})@({_NUM})\.({_NUM})\Z")

M = TypeVar("M", bound=type[BaseModel])


@dataclass(frozen=True, order=True)
class SchemaRef:
    """A parsed schema reference such as ``order.query@1.2``."""

    name: str
    major: int
    minor: int

    @classmethod
    def parse(cls, ref: str) -> SchemaRef:
        """Parses ``name@MAJOR.MINOR``.

        Raises:
            SchemaError: ``ref`` is not of the form ``dotted.name@MAJOR.MINOR``.
        """
        match = _REF.match(ref) if isinstance(ref, str) else None
        if match is None:
            raise SchemaError(
                f"schema reference {ref!r} is not of the form 'dotted.name@MAJOR.MINOR'",
                suggestion="declare the payload schema as e.g. 'order.query@1.0'",
                details={"rule": "schema_ref_format", "ref": str(ref)},
            )
        return cls(match[1], int(match[2]), int(match[3]))

    def __str__(self) -> str:
        return f"{self.name}@{self.major}.{self.minor}"


def is_schema_ref(ref: object) -> bool:
    """Tells whether ``ref`` is a well-formed ``name@MAJOR.MINOR`` string."""
    return isinstance(ref, str) and _REF.match(ref) is not None


class SchemaRegistry:
    """Payload models keyed by name and version.

    A process normally uses the module-level :data:`schema_registry`; tests make their own.
    """

    def __init__(self) -> None:
        # Invariant: for each name and major, the minors registered form a chain in which each
        # higher minor has every field of each lower one, with the same type.
        self._models: dict[SchemaRef, type[BaseModel]] = {}
        self._refs: dict[type[BaseModel], SchemaRef] = {}

    def register(self, ref: str, model: type[BaseModel]) -> type[BaseModel]:
        """Registers ``model`` as the schema ``ref``.

        Registering the same model under the same ref again is a no-op.

        Raises:
            SchemaError: ``ref`` is malformed, already taken by another model, or the model
                forbids extra fields (a reader must be able to ignore newer minors' fields).
            SchemaEvolutionError: another minor of the same major disagrees with this one: a
                field removed or retyped, or a field added without a default.
        """
        parsed = SchemaRef.parse(ref)
        existing = self._models.get(parsed)
        if existing is model:
            return model
        if existing is not None:
            raise SchemaError(
                f"schema {parsed} is already registered to {existing.__qualname__}",
                details={"rule": "schema_taken", "ref": str(parsed)},
            )
        if model.model_config.get("extra") == "forbid":
            raise SchemaError(
                f"{model.__qualname__} forbids extra fields, so it could not read a newer minor "
                f"version of {parsed.name}",
                suggestion="leave model_config extra at 'ignore'",
                details={"rule": "schema_forbids_extra", "ref": str(parsed)},
            )
        for other_ref, other in self._models.items():
            if other_ref.name == parsed.name and other_ref.major == parsed.major:
                lower, higher = sorted([(other_ref, other), (parsed, model)], key=lambda p: p[0])
                _check_minor_evolution(lower, higher)
        self._models[parsed] = model
        self._refs.setdefault(model, parsed)
        return model

    def schema(self, ref: str) -> Callable[[M], M]:
        """Class decorator form of :meth:`register`: ``@reg.schema("order.query@1.0")``."""

        def decorate(model: M) -> M:
            self.register(ref, model)
            return model

        return decorate

    def model(self, ref: str) -> type[BaseModel]:
        """Returns the model registered under exactly ``ref``.

        Raises:
            SchemaError: ``ref`` is malformed.
            UnknownSchema: nothing is registered under ``ref``.
        """
        parsed = SchemaRef.parse(ref)
        try:
            return self._models[parsed]
        except KeyError:
            raise self._unknown(parsed) from None

    def ref_of(self, model: type[BaseModel]) -> str:
        """Returns the ref a model was (first) registered under.

        Raises:
            UnknownSchema: the model was never registered.
        """
        try:
            return str(self._refs[model])
        except KeyError:
            raise UnknownSchema(
                f"{model.__qualname__} is not a registered payload schema",
                suggestion="register it with reach.schema('name@1.0')",
                details={"model": model.__qualname__},
            ) from None

    def refs(self) -> list[str]:
        """Every registered ref, sorted."""
        return [str(r) for r in sorted(self._models)]

    def read(self, payload: Mapping[str, Any], declared: str, reader: str) -> BaseModel:
        """Validates a payload declared as ``declared`` with the model registered as ``reader``.

        Any minor version reads any other minor of its major: unknown fields are ignored, missing
        optional ones take their defaults.

        Raises:
            SchemaError: either ref is malformed.
            SchemaIncompatible: the names differ or the majors differ (fatal).
            UnknownSchema: ``reader`` is not registered.
            InvalidPayload: the payload does not validate (fields named in the message).
        """
        got, want = SchemaRef.parse(declared), SchemaRef.parse(reader)
        if got.name != want.name or got.major != want.major:
            raise SchemaIncompatible(
                f"payload is {got} but the reader reads {want}: "
                + ("different schemas" if got.name != want.name else "major versions differ"),
                suggestion=f"send {want.name}@{want.major}.x, or register a reader for {got}",
                details={"declared": str(got), "reader": str(want)},
            )
        model = self.model(reader)
        try:
            return model.model_validate(payload)
        except ValidationError as exc:
            raise InvalidPayload(
                f"payload does not match {got}: {_describe(exc)}",
                details={"declared": str(got), "reader": str(want), "errors": exc.error_count()},
            ) from exc

    def can_read(self, reader: str, declared: str) -> bool:
        """Tells whether a reader of ``reader`` accepts payloads declared as ``declared``."""
        got, want = SchemaRef.parse(declared), SchemaRef.parse(reader)
        return got.name == want.name and got.major == want.major and want in self._models

    def _unknown(self, ref: SchemaRef) -> UnknownSchema:
        known = sorted(str(r) for r in self._models if r.name == ref.name)
        hint = f"registered versions of {ref.name}: {', '.join(known)}" if known else (
            f"no version of {ref.name} is registered"
        )
        return UnknownSchema(
            f"unknown schema {ref}; {hint}",
            suggestion="register the model with reach.schema(...) before using it",
            details={"ref": str(ref)},
        )


def _check_minor_evolution(
    lower: tuple[SchemaRef, type[BaseModel]], higher: tuple[SchemaRef, type[BaseModel]]
) -> None:
    (low_ref, low), (high_ref, high) = lower, higher
    low_fields, high_fields = low.model_fields, high.model_fields
    for name, field in low_fields.items():
        if name not in high_fields:
            raise SchemaEvolutionError(
                f"{high_ref} removes field {name!r} that {low_ref} has; a minor version may only "
                "add optional fields",
                suggestion=f"keep {name!r}, or publish the change as {high_ref.name}@"
                f"{high_ref.major + 1}.0",
                details={"field": name, "lower": str(low_ref), "higher": str(high_ref)},
            )
        if high_fields[name].annotation != field.annotation:
            raise SchemaEvolutionError(
                f"{high_ref} retypes field {name!r} from {field.annotation!r} to "
                f"{high_fields[name].annotation!r}; a minor version may not change a field",
                details={"field": name, "lower": str(low_ref), "higher": str(high_ref)},
            )
    for name, field in high_fields.items():
        if name not in low_fields and field.is_required():
            raise SchemaEvolutionError(
                f"{high_ref} adds required field {name!r}; fields added in a minor version "
                f"need a default so that {low_ref} payloads still read",
                details={"field": name, "lower": str(low_ref), "higher": str(high_ref)},
            )


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "(payload)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


#: The process-wide schema registry used by envelopes and agents.
schema_registry = SchemaRegistry()


#: A payload as a sender gives it: a registered model, or a mapping (its schema named beside it).
PayloadLike = BaseModel | Mapping[str, Any]


def payload_body(payload: PayloadLike, schema: str | None = None) -> tuple[dict[str, Any], str]:
    """A payload as an envelope carries it: its body (a model dumped to Python data, or a copy
    of the mapping) and its schema ref (``schema``, else a model's registered ref, else empty).

    Raises:
        UnknownSchema: ``payload`` is a model that is not registered and no ``schema`` is given.
    """
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="python"), schema or schema_registry.ref_of(type(payload))
    return dict(payload), schema or ""


def schema(ref: str) -> Callable[[M], M]:
    """Registers a payload model in the process-wide registry.

    Example::

        @reach.schema("order.query@1.0")
        class OrderQuery(BaseModel):
            order_id: str

    Raises:
        SchemaError: see :meth:`SchemaRegistry.register`.
        SchemaEvolutionError: see :meth:`SchemaRegistry.register`.
    """
    return schema_registry.schema(ref)


__all__ = ["PayloadLike", "SchemaRef", "SchemaRegistry", "is_schema_ref", "payload_body",
           "schema", "schema_registry"]
