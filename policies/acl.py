"""Capability access control: which agents (or holders of which capabilities) may call which
capabilities. Pure: the hosts enforce it, the audit log records refusals.

A rule matches a call when one of its callers matches the caller (an agent-ID glob such as
``router-*``, or ``cap:<glob>`` for any caller holding a matching capability) and one of its
capabilities matches a capability of the callee. The first matching rule decides; with none,
the ACL's default does (allow, so the quick start stays quick).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Rule:
    """One rule: these callers may (or may not) call these capabilities."""

    callers: tuple[str, ...]
    capabilities: tuple[str, ...]
    allow: bool = True


@dataclass(frozen=True)
class Acl:
    """Rules in order, and what applies when none matches."""

    rules: tuple[Rule, ...] = ()
    default_allow: bool = True


@dataclass(frozen=True)
class AclDecision:
    """Whether a call may go ahead, and which rule said so (None: the default)."""

    allowed: bool
    rule: int | None
    reason: str


def _caller_matches(patterns: Sequence[str], caller: str, caller_caps: Sequence[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("cap:"):
            if any(fnmatchcase(c, pattern[4:]) for c in caller_caps):
                return True
        elif fnmatchcase(caller, pattern):
            return True
    return False


def check(acl: Acl, caller: str, caller_caps: Sequence[str],
          callee_caps: Sequence[str]) -> AclDecision:
    """Decides whether ``caller`` may call an agent holding ``callee_caps``."""
    for index, rule in enumerate(acl.rules):
        if not _caller_matches(rule.callers, caller, caller_caps):
            continue
        hit = next((c for c in callee_caps
                    if any(fnmatchcase(c, p) for p in rule.capabilities)), None)
        if hit is not None:
            verb = "may" if rule.allow else "may not"
            return AclDecision(rule.allow, index, f"rule {index}: {caller} {verb} call {hit}")
    verb = "allows" if acl.default_allow else "refuses"
    what = ", ".join(callee_caps) or "an agent with no capability"
    return AclDecision(acl.default_allow, None,
                       f"no rule matched {caller} calling {what}; the default {verb}")


#: The right a rule grants by naming it among its capabilities, literally (a glob such as ``*``
#: does not grant it): to cancel requests that other callers sent.
CANCEL_RIGHT = "reach.cancel"


def may_cancel(acl: Acl, canceller: str, canceller_caps: Sequence[str],
               requester: str) -> AclDecision:
    """Decides whether ``canceller`` may cancel a request that ``requester`` sent.

    A request's own sender may always cancel it (a supervisor or gateway replica owning a task
    is the sender of the task's requests). Anyone else needs a rule that names
    :data:`CANCEL_RIGHT` among its capabilities and matches the canceller; the first such rule
    decides, and with none the cancel is refused, whatever the ACL's default: a cancel ends
    someone else's work, so it is never allowed by default.
    """
    if canceller == requester:
        return AclDecision(True, None, f"{canceller} sent the request")
    for index, rule in enumerate(acl.rules):
        if CANCEL_RIGHT in rule.capabilities and _caller_matches(rule.callers, canceller,
                                                                 canceller_caps):
            verb = "may" if rule.allow else "may not"
            return AclDecision(rule.allow, index,
                               f"rule {index}: {canceller} {verb} cancel others' requests")
    return AclDecision(False, None, f"{canceller} did not send the request (its sender is "
                                    f"{requester}) and no rule grants it {CANCEL_RIGHT}")
