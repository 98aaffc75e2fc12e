"""Capability priorities, as pure rules: declaring and checking them (on an agent class, a child
spec, a remote agent's hello, an A2A proxy), the priority a holder holds a query at, the order
discovery lists holders in, and which holders a send picks."""

from __future__ import annotations

import asyncio
import pickle

import pytest
from a2a.types.a2a_pb2 import AgentCard, AgentInterface, AgentSkill
from hypothesis import given
from hypothesis import strategies as st

import reach
from policies.discovery import (
    Candidate,
    find_holders,
    holder_priority,
    pick_holders,
    pick_least_loaded,
)
from policies.priorities import (
    PRIMARY,
    aligned_priorities,
    check_priorities,
    check_priority,
    resolve_priorities,
)
from reach.a2a.client.proxy import proxy_spec
from reach.errors import CodecError, ConfigError
from reach.records import AgentRecord, AgentStatus
from reach.remote.agent_runner import declaration_of
from reach.remote.frames import Declaration, Hello


def holder(agent_id: str, caps: dict[str, int] | tuple[str, ...], *, load: int = 0,
           online: bool = True) -> Candidate:
    tags = tuple(caps)
    ranked = aligned_priorities(tags, caps) if isinstance(caps, dict) else ()
    return Candidate(agent_id, tags, online=online, load=load, priorities=ranked)


def ids(holders: list[Candidate]) -> list[str]:
    return [h.agent_id for h in holders]


PRIMARY_ONE = holder("primary", {"refund.issue": 0}, load=5)
BACKUP_ONE = holder("backup", {"refund.issue": 1})
BACKUP_TWO = holder("backup-2", {"refund.issue": 2})


# -- the priority a holder holds a query at ------------------------------------------------------


def test_a_holder_without_priorities_is_a_primary() -> None:
    assert holder_priority("refund.issue", holder("a", ("refund.issue",))) == PRIMARY == 0


def test_a_holder_holds_an_exact_tag_at_that_tags_priority() -> None:
    h = holder("a", {"refund.issue": 0, "refund.status": 1})
    assert holder_priority("refund.issue", h) == 0
    assert holder_priority("refund.status", h) == 1


def test_a_parent_query_takes_the_lowest_priority_of_the_tags_beneath_it() -> None:
    h = holder("a", {"refund.issue": 2, "refund.status": 1})
    assert holder_priority("refund", h) == 1
    assert holder_priority("refund.*", h) == 1


def test_the_best_matching_tag_decides_over_a_worse_match_of_lower_priority() -> None:
    h = holder("a", {"order_query": 0, "order.query": 3})
    assert holder_priority("order.query", h) == 3  # the exact tag, not the normalised one


def test_a_record_tells_the_priority_of_each_of_its_capabilities() -> None:
    rec = AgentRecord("a", ("refund.issue", "refund.status"), priorities=(0, 1))
    assert rec.priority_of("refund.status") == 1
    assert rec.priority_of("refund.issue") == 0
    assert rec.priority_of("order.query") == 0
    assert AgentRecord("b", ("refund.issue",)).priority_of("refund.issue") == 0
    assert holder_priority("refund.status", rec) == 1


# -- discovery's order ---------------------------------------------------------------------------


def test_discovery_lists_the_best_priority_first_even_when_it_is_busier() -> None:
    found = find_holders("refund.issue", [BACKUP_TWO, BACKUP_ONE, PRIMARY_ONE])
    assert ids(found) == ["primary", "backup", "backup-2"]


def test_discovery_ranks_by_priority_before_the_description_text() -> None:
    primary = Candidate("p", ("refund.issue",), "answers nothing useful", priorities=(0,))
    backup = Candidate("b", ("refund.issue",), "issues refunds for orders", priorities=(1,))
    assert ids(find_holders("refund.issue", [backup, primary], text="issue a refund")) == [
        "p", "b"]


def test_a_limited_discovery_keeps_the_best_priorities() -> None:
    many_backups = [holder(f"b-{i}", {"refund.issue": 1}) for i in range(10)]
    found = find_holders("refund.issue", [*many_backups, PRIMARY_ONE], limit=2)
    assert ids(found) == ["primary", "b-0"]


def test_holders_without_priorities_are_listed_least_loaded_first_as_before() -> None:
    plain = [holder("c", ("x",), load=2), holder("a", ("x",), load=2), holder("b", ("x",))]
    assert ids(find_holders("x", plain)) == ["b", "a", "c"]


# -- which holders a send picks ------------------------------------------------------------------


def test_all_traffic_goes_to_the_primary_while_it_is_live() -> None:
    holders = [PRIMARY_ONE, BACKUP_ONE, BACKUP_TWO]
    picks = [pick_holders("refund.issue", holders, 1, tiebreak=t)[0] for t in range(10)]
    assert {p.agent_id for p in picks} == {"primary"}


def test_the_least_loaded_primary_is_picked_and_equal_ones_take_turns() -> None:
    holders = [holder("p1", {"x": 0}, load=3), holder("p2", {"x": 0}), holder("p3", {"x": 0}),
               holder("b", {"x": 1})]
    picks = [pick_holders("x", holders, 1, tiebreak=t)[0].agent_id for t in range(4)]
    assert set(picks) == {"p2", "p3"}
    loaded = pick_holders("x", holders, 1, local_load={"p2": 5, "p3": 5})
    assert ids(loaded) == ["p1"]


def test_a_backup_is_picked_when_no_primary_is_online() -> None:
    down = holder("primary", {"x": 0}, online=False)
    assert ids(pick_holders("x", [down, holder("backup", {"x": 1}),
                                  holder("backup-2", {"x": 2})], 1)) == ["backup"]


def test_a_primary_the_caller_found_gone_counts_as_not_live() -> None:
    holders = [holder("primary", {"x": 0}), holder("backup", {"x": 1})]
    assert ids(pick_holders("x", holders, 1, gone={"primary"})) == ["backup"]


def test_one_live_primary_is_enough_to_keep_the_traffic_at_its_priority() -> None:
    holders = [holder("p1", {"x": 0}, load=0), holder("p2", {"x": 0}, load=4),
               holder("backup", {"x": 1})]
    # p1 was found gone, p2 is live: the priority stays 0, picked among both as before.
    assert ids(pick_holders("x", holders, 1, gone={"p1"})) == ["p1"]
    assert ids(pick_holders("x", holders, 1, gone={"p1", "p2"})) == ["backup"]


def test_with_no_live_holder_at_any_priority_the_primary_is_picked_as_before() -> None:
    holders = [holder("backup", {"x": 1}), holder("primary", {"x": 0}, load=9)]
    assert ids(pick_holders("x", holders, 1, gone={"primary", "backup"})) == ["primary"]


def test_fanout_fills_from_the_best_priority_first() -> None:
    holders = [holder("b1", {"x": 1}), holder("b2", {"x": 1}, load=3), holder("b3", {"x": 2}),
               holder("p", {"x": 0}, load=7)]
    assert ids(pick_holders("x", holders, 2)) == ["p", "b1"]
    assert ids(pick_holders("x", holders, 3)) == ["p", "b1", "b2"]
    assert ids(pick_holders("x", holders, 9)) == ["p", "b1", "b2", "b3"]


def test_fanout_takes_live_priorities_before_the_ones_that_are_not() -> None:
    holders = [holder("p", {"x": 0}), holder("b1", {"x": 1}), holder("b2", {"x": 2})]
    assert ids(pick_holders("x", holders, 2, gone={"p"})) == ["b1", "b2"]
    assert ids(pick_holders("x", holders, 3, gone={"p"})) == ["b1", "b2", "p"]


def test_no_pick_for_nothing() -> None:
    assert pick_holders("x", [PRIMARY_ONE], 0) == []
    assert pick_holders("x", [], 1) == []


loads = st.lists(st.integers(0, 5), min_size=1, max_size=8)


@given(loads, st.integers(1, 9), st.integers(0, 20), st.sets(st.integers(0, 7)))
def test_holders_of_one_priority_are_picked_exactly_as_the_least_loaded(
    counts: list[int], k: int, tiebreak: int, gone: set[int],
) -> None:
    for caps in (("x",), {"x": 2}):  # no priorities, or the same one for all
        holders = [holder(f"a-{i}", caps, load=n) for i, n in enumerate(counts)]
        assert pick_holders("x", holders, k, tiebreak=tiebreak,
                            gone={f"a-{i}" for i in gone}) == pick_least_loaded(
            holders, k, tiebreak=tiebreak)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.booleans()),
                min_size=1, max_size=8), st.integers(1, 9))
def test_a_pick_never_skips_a_better_live_priority(
    spec: list[tuple[int, int, bool]], k: int,
) -> None:
    holders = [holder(f"a-{i}", {"x": p}, load=n, online=up) for i, (p, n, up) in enumerate(spec)]
    picked = pick_holders("x", holders, k)
    assert len(picked) == min(k, len(holders))
    assert len({h.agent_id for h in picked}) == len(picked)
    live = sorted({p for p, _, up in spec if up})
    if live:
        assert holder_priority("x", picked[0]) == live[0]
    left_out = [h for h in holders if h not in picked]
    for h in left_out:  # nothing left out is live and better than a live one picked
        if h.online:
            assert all(holder_priority("x", h) >= holder_priority("x", p)
                       for p in picked if p.online)


# -- declaring and checking priorities ----------------------------------------------------------


def test_one_priority_applies_to_every_tag_and_a_mapping_to_those_it_names() -> None:
    tags = ("refund.issue", "refund.status")
    assert check_priorities(tags, 1) == {"refund.issue": 1, "refund.status": 1}
    assert check_priorities(tags, {"refund.status": 2}) == {"refund.status": 2}
    assert resolve_priorities(tags, {"refund.issue": 1}) == {"refund.issue": 1,
                                                             "refund.status": 0}
    assert resolve_priorities(tags, {"refund.issue": 1}, {"refund.status": 3}) == {
        "refund.issue": 1, "refund.status": 3}
    assert resolve_priorities(tags, {"refund.issue": 1}, 0) == {"refund.issue": 0,
                                                                "refund.status": 0}


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1", None])
def test_a_priority_that_is_not_a_non_negative_int_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="must be an int of at least 0") as err:
        check_priorities(("refund.issue",), {"refund.issue": bad})  # type: ignore[dict-item]
    assert err.value.details["capability"] == "refund.issue"
    assert err.value.details["setting"] == "priority"
    assert pickle.loads(pickle.dumps(err.value)).details == err.value.details


def test_a_priority_for_a_capability_the_agent_does_not_hold_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not one of the agent's capabilities") as err:
        resolve_priorities(("refund.issue",), {}, {"refund.isue": 1})
    assert err.value.details["capability"] == "refund.isue"


def test_records_carry_priorities_in_the_tags_order_and_none_when_all_are_primaries() -> None:
    tags = ("a", "b", "c")
    assert aligned_priorities(tags, {"b": 2}) == (0, 2, 0)
    assert aligned_priorities(tags, {"a": 0}) == ()
    assert aligned_priorities(tags, [0, 1, 2]) == (0, 1, 2)
    assert aligned_priorities(tags, [0, 0, 0]) == ()
    for malformed in ([1, 2], [0, -1, 2], [0, True, 1], ["0", "1", "2"], "012"):
        assert aligned_priorities(tags, malformed) == ()


# -- on the Agent class and a child spec ---------------------------------------------------------


class Refunds(reach.Agent):
    capabilities = {"refund.issue": 0, "refund.status": 1}  # noqa: RUF012 - read once, as defined


class PlainRefunds(Refunds):
    capabilities = ("refund.issue",)


class SameRefunds(Refunds):
    description = "inherits its capabilities"


def test_an_agent_declaring_priorities_holds_its_tags_as_a_tuple_and_their_priorities() -> None:
    assert Refunds.capabilities == ("refund.issue", "refund.status")
    assert dict(Refunds.capability_priorities) == {"refund.issue": 0, "refund.status": 1}
    assert SameRefunds.capabilities == Refunds.capabilities
    assert dict(SameRefunds.capability_priorities) == dict(Refunds.capability_priorities)
    assert PlainRefunds.capabilities == ("refund.issue",)
    assert dict(PlainRefunds.capability_priorities) == {}


def test_an_agent_class_declaring_a_negative_priority_is_refused_as_it_is_defined() -> None:
    with pytest.raises(ConfigError, match=r"'refund\.issue' must be an int of at least 0"):
        type("Bad", (reach.Agent,), {"capabilities": {"refund.issue": -1}})


def test_a_child_spec_with_a_bad_priority_is_refused_when_it_is_made() -> None:
    assert reach.ChildSpec(Refunds, "r-1", priority=2).priority == 2
    assert reach.ChildSpec(Refunds, "r-1", priority={"refund.status": 0}).priority == {
        "refund.status": 0}
    with pytest.raises(ConfigError, match="every capability must be an int of at least 0"):
        reach.ChildSpec(Refunds, "r-1", priority=-2)
    with pytest.raises(ConfigError, match="not one of the agent's capabilities"):
        reach.ChildSpec(Refunds, "r-1", priority={"order.query": 1})


class Tagless(reach.Agent):
    """An agent whose instances hold their own tags (as an A2A proxy does)."""


def test_a_priority_for_an_agent_whose_class_declares_no_tags_is_checked_for_its_values_only(
) -> None:
    check_priority({"any.tag": 1})  # the tags are the instance's: checked where it starts
    check_priority(3)
    assert reach.ChildSpec(Tagless, "t-1", priority={"remote.skill": 1}).priority == {
        "remote.skill": 1}
    with pytest.raises(ConfigError, match=r"'any\.tag' must be an int"):
        check_priority({"any.tag": -1})
    with pytest.raises(ConfigError):
        reach.ChildSpec(Tagless, "t-1", priority=True)


def test_a_record_with_priorities_stays_a_plain_frozen_record() -> None:
    rec = AgentRecord("a", ("x", "y"), status=AgentStatus.RESTARTING, priorities=(0, 1))
    assert pickle.loads(pickle.dumps(rec)) == rec
    assert hash(rec) == hash(AgentRecord("a", ("x", "y"), status=AgentStatus.RESTARTING,
                                         priorities=(0, 1)))


# -- in a remote agent's hello ------------------------------------------------------------------


class RemoteRefunds(reach.Agent):
    capabilities = {"refund.issue": 1, "refund.status": 0}  # noqa: RUF012 - read once, as defined


def test_a_remote_agents_declaration_carries_its_priorities_other_than_0() -> None:
    declared = declaration_of(RemoteRefunds)
    assert declared.capabilities == ("refund.issue", "refund.status")
    assert declared.priorities == {"refund.issue": 1}
    assert aligned_priorities(declared.capabilities, declared.priorities) == (1, 0)
    assert Declaration.model_validate_json('{"capabilities": ["a"]}').priorities == {}


@pytest.mark.parametrize("priorities", ['{"a": -1}', '{"a": true}', '{"a": 1.5}', '{"b": 1}'])
def test_a_remote_agent_declaring_a_bad_priority_is_refused_as_a_malformed_declaration(
    priorities: str,
) -> None:
    text = f'{{"capabilities": ["a"], "priorities": {priorities}}}'
    hello = Hello(agent_id="r-1", ts=0, nonce="ab" * 16, declaration=text, sig="")
    with pytest.raises(CodecError) as err:
        hello.declared()
    assert err.value.details["rule"] == "declaration"


def test_a_remote_a2a_agents_proxy_takes_a_priority_for_its_cards_capabilities() -> None:
    card = AgentCard(name="Refund Agent", description="Issues refunds.", version="1",
                     supported_interfaces=[AgentInterface(url="http://remote.example/a2a",
                                                          protocol_binding="JSONRPC",
                                                          protocol_version="1.0")],
                     skills=[AgentSkill(id="refunds.issue", name="Refund")])
    spec = asyncio.run(proxy_spec(card, priority={"refunds.issue": 1}))
    assert spec.priority == {"refunds.issue": 1}
    assert asyncio.run(proxy_spec(card, priority=2)).priority == 2
    with pytest.raises(ConfigError, match="not one of the agent's capabilities"):
        asyncio.run(proxy_spec(card, priority={"orders.query": 1}))
