"""The audit log's hash chain: an intact chain holds, and each kind of tampering is found where
it happened (with the one thing a chain alone cannot see: a cut-off tail)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.audit import GENESIS, canonical, chain_hash, first_broken

Row = tuple[int, str, str, Mapping[str, Any]]

AGENTS = ["客服助手", "退款代理", "路由器-北京", "agent-7", "审计员"]


def make_records(count: int = 20) -> list[dict[str, Any]]:
    return [{"agent": AGENTS[i % len(AGENTS)], "action": "调用" if i % 2 else "拒绝",
             "capability": f"refund.第{i}步", "amount": i * 1.25, "trace": f"t-{i // 4}",
             "tags": ["高优先级", "✓"] if i % 3 == 0 else []}
            for i in range(count)]


def build_chain(records: Sequence[Mapping[str, Any]]) -> list[Row]:
    """Rows (seq from 1, previous hash, hash, record), as the session store writes them."""
    rows: list[Row] = []
    prev = GENESIS
    for seq, record in enumerate(records, start=1):
        digest = chain_hash(prev, record)
        rows.append((seq, prev, digest, record))
        prev = digest
    return rows


CHAIN = build_chain(make_records())
LAST = len(CHAIN) - 1
POSITIONS = [0, 1, 9, LAST - 1, LAST]


def test_an_intact_chain_holds() -> None:
    assert len(CHAIN) == 20
    assert CHAIN[0][1] == GENESIS
    assert first_broken(CHAIN) is None


def test_an_empty_chain_holds() -> None:
    assert first_broken([]) is None


@pytest.mark.parametrize("position", POSITIONS)
def test_editing_one_field_of_a_record_is_found_at_that_record(position: int) -> None:
    rows = list(CHAIN)
    seq, prev, digest, record = rows[position]
    rows[position] = (seq, prev, digest, {**record, "agent": "冒充者"})
    assert first_broken(rows) == seq


@pytest.mark.parametrize("position", POSITIONS)
def test_adding_a_field_to_a_record_is_found_at_that_record(position: int) -> None:
    rows = list(CHAIN)
    seq, prev, digest, record = rows[position]
    rows[position] = (seq, prev, digest, {**record, "note": ""})
    assert first_broken(rows) == seq


def test_removing_a_middle_record_is_found_at_the_missing_sequence_number() -> None:
    rows = CHAIN[:9] + CHAIN[10:]
    assert first_broken(rows) == 10


def test_removing_a_middle_record_and_renumbering_is_found_at_the_gap() -> None:
    rows = CHAIN[:9] + [(seq - 1, prev, digest, record)
                        for seq, prev, digest, record in CHAIN[10:]]
    assert first_broken(rows) == 10


def test_removing_the_first_record_is_found_at_the_first_remaining_record() -> None:
    # Nothing says where the log starts, so the missing seq 1 is not named: the first stored
    # record (seq 2) is reported, because its previous hash is not GENESIS.
    assert first_broken(CHAIN[1:]) == 2


def test_removing_the_last_record_leaves_a_valid_shorter_chain() -> None:
    # A chain cannot see its own tail cut off: every remaining link still holds. Truncation must
    # be caught by comparing with a count or head hash stored elsewhere.
    assert first_broken(CHAIN[:-1]) is None
    assert first_broken(CHAIN[:5]) is None


@pytest.mark.parametrize("position", [0, 9, LAST - 1])
def test_swapping_two_adjacent_records_is_found_at_the_first_swapped_position(
        position: int) -> None:
    rows = list(CHAIN)
    here, there = rows[position], rows[position + 1]
    rows[position] = (*here[:3], there[3])
    rows[position + 1] = (*there[:3], here[3])
    assert first_broken(rows) == here[0]


@pytest.mark.parametrize(("position", "found"), [(0, 2), (9, 10), (LAST - 1, LAST)])
def test_swapping_two_adjacent_stored_rows_is_found_at_the_first_swapped_position(
        position: int, found: int) -> None:
    # In the middle, the row out of place has the wrong seq, so the expected seq is reported.
    # At the start nothing is expected yet, so the seq of the row found there (2) is reported.
    rows = list(CHAIN)
    rows[position], rows[position + 1] = rows[position + 1], rows[position]
    assert first_broken(rows) == found


@pytest.mark.parametrize("position", POSITIONS)
def test_changing_a_stored_hash_is_found_at_that_record(position: int) -> None:
    rows = list(CHAIN)
    seq, prev, digest, record = rows[position]
    rows[position] = (seq, prev, "f" * 64 if digest != "f" * 64 else "e" * 64, record)
    assert first_broken(rows) == seq


@pytest.mark.parametrize("position", POSITIONS)
def test_changing_a_stored_previous_hash_is_found_at_that_record(position: int) -> None:
    rows = list(CHAIN)
    seq, _, digest, record = rows[position]
    rows[position] = (seq, "0" * 63 + "1", digest, record)
    assert first_broken(rows) == seq


def test_an_edited_record_with_its_hash_recomputed_is_found_at_the_next_record() -> None:
    rows = list(CHAIN)
    seq, prev, _, record = rows[9]
    forged = {**record, "amount": 0}
    rows[9] = (seq, prev, chain_hash(prev, forged), forged)
    assert first_broken(rows) == seq + 1


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
records = st.dictionaries(st.text(max_size=8), json_scalars | st.lists(json_scalars, max_size=3)
                          | st.dictionaries(st.text(max_size=4), json_scalars, max_size=3),
                          max_size=8)


def reorder(value: Any) -> Any:
    """The same value with every mapping's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(value)}
    return value


@given(records)
def test_canonical_form_and_hash_do_not_depend_on_key_order(record: dict[str, Any]) -> None:
    shuffled = reorder(record)
    assert canonical(shuffled) == canonical(record)
    assert chain_hash(GENESIS, shuffled) == chain_hash(GENESIS, record)


def test_canonical_form_keeps_unicode_as_utf8_text() -> None:
    assert canonical({"agent": "客服助手", "a": 1}) == '{"a":1,"agent":"客服助手"}'.encode()
