"""Payload schemas: minors read each other, majors do not, and registration keeps the rule."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

import reach
from reach import (
    InvalidPayload,
    SchemaError,
    SchemaEvolutionError,
    SchemaIncompatible,
    SchemaRef,
    SchemaRegistry,
    Severity,
    UnknownSchema,
)


class ItemV10(BaseModel):
    """item@1.0."""

    sku: str
    quantity: int


class ItemV13(BaseModel):
    """item@1.3 adds two optional fields."""

    sku: str
    quantity: int
    note: str = ""
    tags: list[str] = []


class ItemV20(BaseModel):
    """item@2.0 renames a field: a new major."""

    product: str
    quantity: int


@pytest.fixture
def schemas() -> SchemaRegistry:
    registry = SchemaRegistry()
    registry.register("item@1.0", ItemV10)
    registry.register("item@1.3", ItemV13)
    registry.register("item@2.0", ItemV20)
    return registry


# -- reading across versions -------------------------------------------------------------------


def test_a_reader_of_an_older_minor_reads_a_newer_payload_ignoring_its_extra_fields(
    schemas: SchemaRegistry,
) -> None:
    payload = {"sku": "茶-01", "quantity": 2, "note": "gift wrap 礼品包装", "tags": ["tea"]}
    item = schemas.read(payload, "item@1.3", "item@1.0")
    assert type(item) is ItemV10
    assert item.model_dump() == {"sku": "茶-01", "quantity": 2}
    assert not hasattr(item, "note")


def test_a_reader_of_a_newer_minor_reads_an_older_payload_defaulting_missing_fields(
    schemas: SchemaRegistry,
) -> None:
    item = schemas.read({"sku": "茶-01", "quantity": 2}, "item@1.0", "item@1.3")
    assert type(item) is ItemV13
    assert item.model_dump() == {"sku": "茶-01", "quantity": 2, "note": "", "tags": []}


def test_a_payload_declared_as_an_unregistered_minor_is_still_read(
    schemas: SchemaRegistry,
) -> None:
    payload = {"sku": "x", "quantity": 1, "colour": "red"}
    assert schemas.read(payload, "item@1.7", "item@1.3").model_dump()["sku"] == "x"


@pytest.mark.parametrize(
    ("declared", "reader"), [("item@2.0", "item@1.0"), ("item@1.3", "item@2.0")],
    ids=["newer_major", "older_major"],
)
def test_a_major_mismatch_is_a_fatal_schema_incompatible(
    schemas: SchemaRegistry, declared: str, reader: str
) -> None:
    with pytest.raises(SchemaIncompatible) as caught:
        schemas.read({"sku": "x", "quantity": 1}, declared, reader)
    error = caught.value
    assert error.severity is Severity.FATAL
    assert "major versions differ" in error.message
    assert declared in error.message
    assert reader in error.message
    assert error.details == {"declared": declared, "reader": reader}


def test_different_schema_names_are_schema_incompatible(schemas: SchemaRegistry) -> None:
    with pytest.raises(SchemaIncompatible, match="different schemas") as caught:
        schemas.read({"sku": "x", "quantity": 1}, "order.query@1.0", "item@1.0")
    assert caught.value.severity is Severity.FATAL


def test_an_unknown_reader_is_unknown_schema_naming_the_registered_versions(
    schemas: SchemaRegistry,
) -> None:
    with pytest.raises(UnknownSchema) as caught:
        schemas.read({"sku": "x", "quantity": 1}, "item@1.0", "item@1.5")
    assert "item@1.5" in caught.value.message
    assert "item@1.0, item@1.3, item@2.0" in caught.value.message
    assert caught.value.details == {"ref": "item@1.5"}


def test_an_unknown_name_is_unknown_schema_saying_no_version_is_registered(
    schemas: SchemaRegistry,
) -> None:
    with pytest.raises(UnknownSchema, match="no version of refund is registered"):
        schemas.model("refund@1.0")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"sku": "x", "quantity": "lots"}, "quantity"),
        ({"sku": "x"}, "quantity"),
        ({"sku": ["not", "a", "string"], "quantity": 1}, "sku"),
        ({"sku": "x", "quantity": 1, "tags": [1, "ok"]}, "tags.0"),
    ],
    ids=["wrong_type", "missing", "list_for_str", "nested"],
)
def test_an_invalid_payload_is_invalid_payload_naming_the_field(
    schemas: SchemaRegistry, payload: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidPayload) as caught:
        schemas.read(payload, "item@1.3", "item@1.3")
    assert f"{field}:" in caught.value.message
    assert "item@1.3" in caught.value.message
    assert caught.value.details["errors"] == 1


def test_can_read_tells_minor_compatibility_only_for_registered_readers(
    schemas: SchemaRegistry,
) -> None:
    assert schemas.can_read("item@1.0", "item@1.9")
    assert schemas.can_read("item@1.3", "item@1.0")
    assert not schemas.can_read("item@1.0", "item@2.0")
    assert not schemas.can_read("item@1.5", "item@1.0")
    assert not schemas.can_read("item@1.0", "order@1.0")


# -- registration keeps the minor-version rule -------------------------------------------------


class Base(BaseModel):
    sku: str
    quantity: int


class DropsQuantity(BaseModel):
    sku: str
    note: str = ""


class RetypesQuantity(BaseModel):
    sku: str
    quantity: str


class AddsRequired(BaseModel):
    sku: str
    quantity: int
    warehouse: str


class AddsOptional(BaseModel):
    sku: str
    quantity: int
    warehouse: str = "main"


EVOLUTION = [
    pytest.param(DropsQuantity, "removes field 'quantity'", id="removes"),
    pytest.param(RetypesQuantity, "retypes field 'quantity'", id="retypes"),
    pytest.param(AddsRequired, "adds required field 'warehouse'", id="adds_required"),
]


@pytest.mark.parametrize("lower_first", [True, False], ids=["lower_first", "higher_first"])
@pytest.mark.parametrize(("higher", "words"), EVOLUTION)
def test_a_minor_that_breaks_the_older_one_is_refused_in_either_registration_order(
    higher: type[BaseModel], words: str, lower_first: bool
) -> None:
    registry = SchemaRegistry()
    first, second = ("stock@1.0", Base), ("stock@1.2", higher)
    if not lower_first:
        first, second = second, first
    registry.register(*first)
    with pytest.raises(SchemaEvolutionError) as caught:
        registry.register(*second)
    assert words in caught.value.message
    assert caught.value.details["lower"] == "stock@1.0"
    assert caught.value.details["higher"] == "stock@1.2"
    assert registry.refs() == [first[0]]


def test_a_breaking_change_between_non_adjacent_minors_is_refused() -> None:
    registry = SchemaRegistry()
    registry.register("stock@1.0", Base)
    registry.register("stock@1.5", AddsOptional)
    with pytest.raises(SchemaEvolutionError, match=r"stock@1\.3 removes field 'quantity'"):
        registry.register("stock@1.3", DropsQuantity)


def test_a_minor_that_adds_an_optional_field_and_a_new_major_that_breaks_are_accepted() -> None:
    registry = SchemaRegistry()
    registry.register("stock@1.1", AddsOptional)
    registry.register("stock@1.0", Base)
    registry.register("stock@2.0", DropsQuantity)
    assert registry.refs() == ["stock@1.0", "stock@1.1", "stock@2.0"]


def test_a_model_that_forbids_extra_fields_is_refused() -> None:
    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid")
        sku: str

    with pytest.raises(SchemaError, match="forbids extra fields") as caught:
        SchemaRegistry().register("strict@1.0", Strict)
    assert type(caught.value) is SchemaError
    assert caught.value.details["rule"] == "schema_forbids_extra"


def test_registering_the_same_model_again_is_a_no_op() -> None:
    registry = SchemaRegistry()
    assert registry.register("stock@1.0", Base) is Base
    assert registry.register("stock@1.0", Base) is Base
    assert registry.refs() == ["stock@1.0"]


def test_another_model_under_a_taken_ref_is_refused() -> None:
    registry = SchemaRegistry()
    registry.register("stock@1.0", Base)
    with pytest.raises(SchemaError, match="already registered to Base") as caught:
        registry.register("stock@1.0", AddsOptional)
    assert caught.value.details == {"rule": "schema_taken", "ref": "stock@1.0"}
    assert registry.model("stock@1.0") is Base


def test_one_model_under_two_refs_keeps_its_first_ref() -> None:
    registry = SchemaRegistry()
    registry.register("stock@1.0", Base)
    registry.register("inventory@1.0", Base)
    assert registry.ref_of(Base) == "stock@1.0"
    assert registry.model("inventory@1.0") is Base


def test_the_decorator_form_registers_and_returns_the_class() -> None:
    registry = SchemaRegistry()

    @registry.schema("shipment.notice@1.0")
    class Notice(BaseModel):
        tracking: str

    assert Notice.__name__ == "Notice"
    assert registry.ref_of(Notice) == "shipment.notice@1.0"
    assert registry.model("shipment.notice@1.0") is Notice


def test_the_module_level_decorator_registers_in_the_process_registry() -> None:
    @reach.schema("test_schemas.module_decorator@3.1")
    class Tracked(BaseModel):
        tracking: str

    assert reach.schema_registry.ref_of(Tracked) == "test_schemas.module_decorator@3.1"
    assert "test_schemas.module_decorator@3.1" in reach.schema_registry.refs()


def test_ref_of_an_unregistered_model_is_unknown_schema() -> None:
    with pytest.raises(UnknownSchema, match="Base is not a registered payload schema"):
        SchemaRegistry().ref_of(Base)


# -- schema references -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [
        ("order.query@1.2", SchemaRef("order.query", 1, 2)),
        ("x@0.0", SchemaRef("x", 0, 0)),
        ("a1.b_2.c@10.999999", SchemaRef("a1.b_2.c", 10, 999999)),
    ],
)
def test_a_well_formed_ref_parses_and_prints_back(ref: str, parsed: SchemaRef) -> None:
    assert SchemaRef.parse(ref) == parsed
    assert str(parsed) == ref


@pytest.mark.parametrize(
    "ref",
    ["order", "order@1", "order@1.0.0", "Order@1.0", "order@01.0", "order@1.01", "order@-1.0",
     "@1.0", "order..query@1.0", ".order@1.0", "order.@1.0", "1order@1.0", "order@1.0 ",
     " order@1.0", "", "订单@1.0", "order@1.1234567", "order-query@1.0", "order@1.0\n"],
)
def test_a_malformed_ref_is_refused_naming_it(ref: str) -> None:
    with pytest.raises(SchemaError) as caught:
        SchemaRef.parse(ref)
    assert repr(ref) in caught.value.message
    assert caught.value.details == {"rule": "schema_ref_format", "ref": ref}
    with pytest.raises(SchemaError):
        SchemaRegistry().register(ref, Base)


@pytest.mark.parametrize("ref", [None, 12, b"order@1.0"], ids=["none", "int", "bytes"])
def test_a_ref_that_is_not_a_string_is_refused(ref: object) -> None:
    with pytest.raises(SchemaError, match="not of the form"):
        SchemaRef.parse(ref)  # type: ignore[arg-type]


def test_refs_sort_by_name_then_number_not_text() -> None:
    registry = SchemaRegistry()
    registry.register("stock@1.10", AddsOptional)
    registry.register("stock@1.9", Base)
    assert registry.refs() == ["stock@1.9", "stock@1.10"]
