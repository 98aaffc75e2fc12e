"""Session rules: negotiating terms, when to compact, the default summary, pending requests.

All pure: the session store and the agents call these and do the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reach.errors import SessionRefused

#: Default compaction threshold (messages past the summary) and how many recent ones stay.
COMPACT_AFTER = 50
KEEP_LAST = 20
#: The default summary never grows past this many characters.
SUMMARY_MAX_CHARS = 4000


@dataclass(frozen=True)
class Terms:
    """What one side proposes for a session.

    Attributes:
        message_format: Wire format of the session's messages (``msgpack``).
        max_message_bytes: Largest message either side will send.
        timeout_ms: Default timeout of a request within the session.
        streaming: Whether streamed replies are used.
    """

    message_format: str = "msgpack"
    max_message_bytes: int = 1 << 20
    timeout_ms: int = 30_000
    streaming: bool = False


@dataclass(frozen=True)
class Limits:
    """What one side can accept.

    Attributes:
        formats: Message formats it reads.
        max_message_bytes: The largest message it takes.
        min_timeout_ms: The shortest request timeout it can honour.
        max_timeout_ms: The longest it will wait.
        streaming: Whether it can stream.
    """

    formats: tuple[str, ...] = ("msgpack",)
    max_message_bytes: int = 4 << 20
    min_timeout_ms: int = 1
    max_timeout_ms: int = 3_600_000
    streaming: bool = True


def negotiate(offer: Terms, limits: Limits) -> Terms:
    """The terms both sides accept: the offer, with its message size capped by the limits.

    Raises:
        SessionRefused: a setting the other side cannot accept; ``details["setting"]`` names it.
    """
    if offer.message_format not in limits.formats:
        raise _refuse("message_format", f"format {offer.message_format!r} is not one of "
                      f"{', '.join(limits.formats)}")
    if offer.max_message_bytes <= 0:
        raise _refuse("max_message_bytes", "the maximum message size must be positive")
    if not limits.min_timeout_ms <= offer.timeout_ms <= limits.max_timeout_ms:
        raise _refuse("timeout_ms", f"timeout {offer.timeout_ms} ms is outside "
                      f"{limits.min_timeout_ms}-{limits.max_timeout_ms} ms")
    if offer.streaming and not limits.streaming:
        raise _refuse("streaming", "streaming was asked for but the other side cannot stream")
    return Terms(offer.message_format, min(offer.max_message_bytes, limits.max_message_bytes),
                 offer.timeout_ms, offer.streaming)


def _refuse(setting: str, why: str) -> SessionRefused:
    return SessionRefused(f"session refused: {why}", details={"setting": setting},
                          suggestion=f"offer a {setting} the other side accepts")


def fold_count(unfolded: int, threshold: int = COMPACT_AFTER, keep_last: int = KEEP_LAST) -> int:
    """How many of the oldest unfolded messages to fold into the summary now (0: none)."""
    if unfolded <= threshold:
        return 0
    return unfolded - min(keep_last, threshold)


def default_summary(previous: str, messages: Sequence[dict[str, Any]]) -> str:
    """The deterministic summariser: one line per folded message, the newest kept when long.

    Each line is ``#seq sender: text`` (the payload's ``text`` if it has one, else its keys);
    line breaks inside a message become spaces, so no message can take (or forge) two lines.
    Past SUMMARY_MAX_CHARS the oldest whole lines are dropped; blank lines of ``previous`` are.
    """
    lines = [line for line in previous.splitlines() if line]  # a blank line carries nothing
    for m in messages:
        payload = m.get("payload") or {}
        text = payload.get("text") if isinstance(payload, dict) else None
        gist = str(text) if text is not None else ", ".join(sorted(map(str, payload)))
        lines.append(_one_line(f"#{m['seq']} {m['sender']}: {gist[:160]}"))
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + (1 if kept else 0)
        if size > SUMMARY_MAX_CHARS:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


class PendingAction(StrEnum):
    """What an agent does, after a restart, with a request it had sent and not seen answered."""

    RESEND = "resend"
    CANCEL = "cancel"


def recover(policy: PendingAction | str, deadline: float | None, now: float) -> PendingAction:
    """The action for one pending request: resend only while its deadline has not passed.

    Raises:
        SessionRefused: ``policy`` is neither resend nor cancel.
    """
    try:
        action = PendingAction(policy)
    except ValueError:
        raise SessionRefused(f"unknown pending-request policy {policy!r}: use resend or cancel",
                             details={"setting": "pending_policy"}) from None
    if action is PendingAction.RESEND and deadline is not None and deadline <= now:
        return PendingAction.CANCEL
    return action
