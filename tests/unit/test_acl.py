"""Capability access control: rules in order, the first match decides, else the default."""

from __future__ import annotations

import pytest

from policies.acl import Acl, AclDecision, Rule, check

REFUNDS = ("refund.issue", "refund.lookup")


def test_with_no_rules_the_default_allows() -> None:
    decision = check(Acl(), "anyone", (), REFUNDS)
    assert decision == AclDecision(True, None, decision.reason)
    assert "allows" in decision.reason


def test_with_no_rules_a_default_deny_refuses() -> None:
    decision = check(Acl(default_allow=False), "anyone", (), REFUNDS)
    assert not decision.allowed
    assert decision.rule is None
    assert "refuses" in decision.reason


def test_an_allow_before_a_deny_wins() -> None:
    acl = Acl((Rule(("router-1",), ("refund.*",), allow=True),
               Rule(("router-1",), ("refund.*",), allow=False)), default_allow=False)
    decision = check(acl, "router-1", (), REFUNDS)
    assert decision.allowed
    assert decision.rule == 0


def test_a_deny_before_an_allow_wins() -> None:
    acl = Acl((Rule(("router-1",), ("refund.*",), allow=False),
               Rule(("router-1",), ("refund.*",), allow=True)))
    decision = check(acl, "router-1", (), REFUNDS)
    assert not decision.allowed
    assert decision.rule == 0


@pytest.mark.parametrize(("caller", "matched"), [
    ("router-1", True), ("router-eu-7", True), ("router", False), ("xrouter-1", False),
])
def test_a_caller_is_matched_by_an_id_glob(caller: str, matched: bool) -> None:
    acl = Acl((Rule(("router-*",), ("refund.*",), allow=False),))
    decision = check(acl, caller, (), REFUNDS)
    assert decision.allowed is not matched
    assert decision.rule == (0 if matched else None)


@pytest.mark.parametrize(("caller_caps", "matched"), [
    (("billing.admin",), True),
    (("search", "billing.read"), True),
    (("search",), False),
    ((), False),
])
def test_a_caller_is_matched_by_a_capability_glob(
        caller_caps: tuple[str, ...], matched: bool) -> None:
    acl = Acl((Rule(("cap:billing.*",), ("refund.*",)),), default_allow=False)
    decision = check(acl, "agent-42", caller_caps, REFUNDS)
    assert decision.allowed is matched
    assert decision.rule == (0 if matched else None)


def test_a_cap_pattern_does_not_match_the_caller_id() -> None:
    acl = Acl((Rule(("cap:billing-*",), ("refund.*",)),), default_allow=False)
    assert not check(acl, "billing-1", (), REFUNDS).allowed


@pytest.mark.parametrize(("callee_caps", "matched"), [
    (("refund.issue",), True),
    (("search", "refund.lookup"), True),
    (("refund",), False),
    (("refunds.issue",), False),
    ((), False),
])
def test_a_callee_is_matched_by_a_capability_glob(
        callee_caps: tuple[str, ...], matched: bool) -> None:
    acl = Acl((Rule(("*",), ("refund.*",), allow=False),))
    decision = check(acl, "router-1", (), callee_caps)
    assert decision.allowed is not matched
    assert decision.rule == (0 if matched else None)


def test_a_rule_whose_callers_match_but_capabilities_do_not_is_skipped() -> None:
    acl = Acl((Rule(("router-*",), ("search.*",), allow=False),
               Rule(("router-*",), ("refund.*",), allow=True)), default_allow=False)
    decision = check(acl, "router-1", (), REFUNDS)
    assert decision.allowed
    assert decision.rule == 1


def test_a_rule_whose_capabilities_match_but_callers_do_not_is_skipped() -> None:
    acl = Acl((Rule(("auditor-*",), ("refund.*",), allow=False),
               Rule(("*",), ("refund.*",), allow=True)), default_allow=False)
    decision = check(acl, "router-1", (), REFUNDS)
    assert decision.allowed
    assert decision.rule == 1


def test_the_decision_names_the_index_of_the_deciding_rule() -> None:
    acl = Acl((Rule(("a",), ("x",)), Rule(("b",), ("x",)), Rule(("c",), ("x",), allow=False)))
    assert [check(acl, who, (), ("x",)).rule for who in ("a", "b", "c", "d")] == [0, 1, 2, None]


@pytest.mark.parametrize("allow", [True, False])
def test_the_reason_names_the_caller_and_the_matched_capability(allow: bool) -> None:
    acl = Acl((Rule(("router-*",), ("refund.lookup",), allow=allow),))
    decision = check(acl, "router-1", (), ("search", "refund.lookup"))
    assert decision.allowed is allow
    assert "router-1" in decision.reason
    assert "refund.lookup" in decision.reason
    assert "search" not in decision.reason
    assert ("may not" in decision.reason) is not allow


def test_the_default_decision_names_the_caller_and_the_capabilities() -> None:
    decision = check(Acl(default_allow=False), "mallory", (), ("refund.issue",))
    assert "mallory" in decision.reason
    assert "refund.issue" in decision.reason
