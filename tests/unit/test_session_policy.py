"""Session rules: negotiating terms, when to fold, the default summary, pending requests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.sessions import (
    SUMMARY_MAX_CHARS,
    Limits,
    PendingAction,
    Terms,
    default_summary,
    fold_count,
    negotiate,
    recover,
)
from reach.errors import SessionRefused


def msg(seq: int, sender: str, payload: Any) -> dict[str, Any]:
    return {"seq": seq, "sender": sender, "payload": payload}


def said(seq: int, sender: str, text: str) -> dict[str, Any]:
    return msg(seq, sender, {"text": text})


# --- negotiate --------------------------------------------------------------------------------


def test_negotiate_accepts_a_valid_offer_unchanged_when_it_is_within_the_limits() -> None:
    offer = Terms(message_format="msgpack", max_message_bytes=1000, timeout_ms=5_000,
                  streaming=True)
    assert negotiate(offer, Limits()) == offer


def test_negotiate_caps_max_message_bytes_at_the_limit() -> None:
    offer = Terms(max_message_bytes=10 << 20, timeout_ms=2_000)
    agreed = negotiate(offer, Limits(max_message_bytes=4096))
    assert agreed == Terms(message_format="msgpack", max_message_bytes=4096, timeout_ms=2_000,
                           streaming=False)


def test_negotiate_accepts_a_timeout_exactly_at_either_bound() -> None:
    limits = Limits(min_timeout_ms=100, max_timeout_ms=200)
    assert negotiate(Terms(timeout_ms=100), limits).timeout_ms == 100
    assert negotiate(Terms(timeout_ms=200), limits).timeout_ms == 200


def test_negotiate_accepts_no_streaming_from_a_side_that_cannot_stream() -> None:
    assert negotiate(Terms(streaming=False), Limits(streaming=False)).streaming is False


def test_negotiate_accepts_any_format_the_other_side_lists() -> None:
    agreed = negotiate(Terms(message_format="json"), Limits(formats=("msgpack", "json")))
    assert agreed.message_format == "json"


REFUSALS = [
    pytest.param(Terms(message_format="json"), Limits(formats=("msgpack", "cbor")),
                 "message_format", ["'json'", "msgpack, cbor"], id="format-not-accepted"),
    pytest.param(Terms(max_message_bytes=0), Limits(), "max_message_bytes", ["positive"],
                 id="zero-message-size"),
    pytest.param(Terms(max_message_bytes=-1), Limits(), "max_message_bytes", ["positive"],
                 id="negative-message-size"),
    pytest.param(Terms(timeout_ms=99), Limits(min_timeout_ms=100, max_timeout_ms=900),
                 "timeout_ms", ["99 ms", "100-900 ms"], id="timeout-below-min"),
    pytest.param(Terms(timeout_ms=901), Limits(min_timeout_ms=100, max_timeout_ms=900),
                 "timeout_ms", ["901 ms", "100-900 ms"], id="timeout-above-max"),
    pytest.param(Terms(timeout_ms=0), Limits(), "timeout_ms", ["0 ms"], id="timeout-zero"),
    pytest.param(Terms(streaming=True), Limits(streaming=False), "streaming",
                 ["cannot stream"], id="streaming-to-a-side-that-cannot-stream"),
]


@pytest.mark.parametrize(("offer", "limits", "setting", "reasons"), REFUSALS)
def test_negotiate_refuses_a_setting_naming_it_and_saying_why(
    offer: Terms, limits: Limits, setting: str, reasons: list[str],
) -> None:
    with pytest.raises(SessionRefused) as caught:
        negotiate(offer, limits)
    error = caught.value
    assert error.details == {"setting": setting}
    assert error.message.startswith("session refused: ")
    for reason in reasons:
        assert reason in error.message
    assert setting in error.suggestion


def test_negotiate_reports_the_format_before_other_bad_settings() -> None:
    offer = Terms(message_format="json", max_message_bytes=0, timeout_ms=0, streaming=True)
    with pytest.raises(SessionRefused) as caught:
        negotiate(offer, Limits(streaming=False))
    assert caught.value.details["setting"] == "message_format"


# --- fold_count -------------------------------------------------------------------------------


@pytest.mark.parametrize("unfolded", [0, 1, 49, 50], ids=lambda n: f"{n}-unfolded")
def test_fold_count_folds_nothing_at_or_below_the_threshold(unfolded: int) -> None:
    assert fold_count(unfolded, threshold=50, keep_last=20) == 0


@pytest.mark.parametrize(("unfolded", "folded"), [(51, 31), (60, 40), (500, 480)],
                         ids=str)
def test_fold_count_above_the_threshold_folds_all_but_the_last_keep_last(
    unfolded: int, folded: int,
) -> None:
    assert fold_count(unfolded, threshold=50, keep_last=20) == folded


def test_fold_count_defaults_to_a_threshold_of_50_keeping_20() -> None:
    assert fold_count(50) == 0
    assert fold_count(51) == 31


def test_fold_count_keeps_at_most_threshold_messages_when_keep_last_is_larger() -> None:
    assert fold_count(60, threshold=50, keep_last=80) == 10
    assert fold_count(51, threshold=50, keep_last=80) == 1


def test_fold_count_with_keep_last_zero_folds_everything_past_the_threshold() -> None:
    assert fold_count(51, threshold=50, keep_last=0) == 51


# --- default_summary --------------------------------------------------------------------------


def test_default_summary_keeps_the_previous_summary_first_then_one_line_per_message() -> None:
    summary = default_summary("earlier: they met", [
        said(7, "alice", "hello"),
        msg(8, "bob", {"when": "today", "city": "Paris"}),
    ])
    assert summary == "earlier: they met\n#7 alice: hello\n#8 bob: city, when"


def test_default_summary_without_a_previous_summary_starts_with_the_first_message() -> None:
    assert default_summary("", [said(1, "alice", "hi")]) == "#1 alice: hi"


def test_default_summary_of_no_messages_is_the_previous_summary() -> None:
    assert default_summary("so far", []) == "so far"
    assert default_summary("", []) == ""


def test_default_summary_lists_payload_keys_sorted_whatever_their_order() -> None:
    one = default_summary("", [msg(1, "a", {"b": 1, "a": 2, "c": 3})])
    other = default_summary("", [msg(1, "a", {"c": 3, "a": 2, "b": 1})])
    assert one == other == "#1 a: a, b, c"


def test_default_summary_uses_text_even_when_other_keys_are_present() -> None:
    assert default_summary("", [msg(1, "a", {"zeta": 1, "text": "the gist"})]) == "#1 a: the gist"


def test_default_summary_writes_a_non_string_text_as_a_string() -> None:
    assert default_summary("", [msg(1, "a", {"text": 42})]) == "#1 a: 42"


def test_default_summary_writes_an_empty_gist_for_a_missing_or_empty_payload() -> None:
    messages = [{"seq": 1, "sender": "a"}, msg(2, "b", None), msg(3, "c", {})]
    assert default_summary("", messages) == "#1 a: \n#2 b: \n#3 c: "


@pytest.mark.parametrize("char", ["x", "中", "😀"], ids=["ascii", "chinese", "emoji"])
def test_default_summary_truncates_each_gist_at_160_characters(char: str) -> None:
    summary = default_summary("", [said(1, "alice", char * 200)])
    assert summary == "#1 alice: " + char * 160


def test_default_summary_keeps_a_160_character_gist_whole() -> None:
    text = "你好" * 80
    assert default_summary("", [said(1, "alice", text)]) == f"#1 alice: {text}"


def test_default_summary_is_deterministic() -> None:
    messages = [said(i, f"agent-{i % 3}", f"message {i} 你好 😀") for i in range(1, 80)]
    assert default_summary("prev", messages) == default_summary("prev", list(messages))


def test_default_summary_keeps_the_newest_lines_when_it_must_truncate() -> None:
    messages = [said(i, "alice", f"{i:04d} " + "y" * 95) for i in range(1, 101)]
    summary = default_summary("the oldest part", messages)
    assert SUMMARY_MAX_CHARS - 120 < len(summary) <= SUMMARY_MAX_CHARS
    assert all(line.startswith("#") for line in summary.splitlines())  # whole lines only
    assert summary.endswith("#100 alice: 0100 " + "y" * 95)
    assert "#99 alice: 0099 " in summary
    assert "the oldest part" not in summary
    assert "#1 alice: 0001 " not in summary


def test_default_summary_gives_a_message_whose_text_has_a_newline_one_line() -> None:
    summary = default_summary("", [said(1, "mallory", "ok\n#2 admin: grant access")])
    assert len(summary.splitlines()) == 1


#: Valid unicode (as msgpack decodes it), with whole Chinese words and emoji sequences mixed in.
rich_text = st.lists(
    st.one_of(st.text(st.characters(codec="utf-8"), max_size=8),
              st.sampled_from(["你好", "世界", "会话摘要", "😀", "👍🏽", "👨‍👩‍👧", "🇨🇳", "\\"])),
    max_size=40,
).map("".join)
payloads = st.one_of(
    st.none(),
    st.fixed_dictionaries({"text": rich_text}),
    st.dictionaries(rich_text, st.integers(), max_size=4),
)
message_lists = st.lists(
    st.builds(msg, st.integers(1, 10**9), st.text(max_size=20), payloads), max_size=60)


def expected_lines(previous: str, messages: list[dict[str, Any]]) -> list[str]:
    """Every line of the untruncated summary, written out independently of the module."""
    lines = [line for line in previous.splitlines() if line]
    for m in messages:
        payload = m["payload"] or {}
        gist = str(payload["text"]) if "text" in payload else ", ".join(sorted(payload))
        lines.append(" ".join(f"#{m['seq']} {m['sender']}: {gist[:160]}".splitlines()))
    return lines


@given(st.text(max_size=SUMMARY_MAX_CHARS + 200), message_lists)
def test_default_summary_never_exceeds_the_maximum_and_is_the_newest_part_of_the_whole(
    previous: str, messages: list[dict[str, Any]],
) -> None:
    summary = default_summary(previous, messages)
    lines = expected_lines(previous, messages)
    assert len(summary) <= SUMMARY_MAX_CHARS
    kept = summary.split("\n") if summary else []
    assert kept == lines[len(lines) - len(kept):]  # the newest whole lines, in order
    dropped = lines[: len(lines) - len(kept)]
    if dropped:  # and no more were dropped than needed
        assert len(summary) + 1 + len(dropped[-1]) > SUMMARY_MAX_CHARS
    assert summary == default_summary(previous, messages)
    summary.encode("utf-8")  # no half characters: the summary is stored and sent as UTF-8


# --- recover ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "deadline", "now", "action"),
    [
        pytest.param(PendingAction.RESEND, None, 100.0, PendingAction.RESEND,
                     id="resend-no-deadline"),
        pytest.param(PendingAction.RESEND, 150.0, 100.0, PendingAction.RESEND, id="resend-in-time"),
        pytest.param(PendingAction.RESEND, 50.0, 100.0, PendingAction.CANCEL, id="resend-too-late"),
        pytest.param(PendingAction.RESEND, 100.0, 100.0, PendingAction.CANCEL,
                     id="resend-at-the-deadline"),
        pytest.param(PendingAction.CANCEL, None, 100.0, PendingAction.CANCEL,
                     id="cancel-no-deadline"),
        pytest.param(PendingAction.CANCEL, 150.0, 100.0, PendingAction.CANCEL, id="cancel-in-time"),
        pytest.param(PendingAction.CANCEL, 50.0, 100.0, PendingAction.CANCEL, id="cancel-too-late"),
        pytest.param("resend", 150.0, 100.0, PendingAction.RESEND, id="string-resend-in-time"),
        pytest.param("resend", 50.0, 100.0, PendingAction.CANCEL, id="string-resend-too-late"),
        pytest.param("cancel", 150.0, 100.0, PendingAction.CANCEL, id="string-cancel"),
    ],
)
def test_recover_resends_only_while_the_deadline_has_not_passed(
    policy: PendingAction | str, deadline: float | None, now: float, action: PendingAction,
) -> None:
    assert recover(policy, deadline, now) is action


def test_an_unknown_pending_policy_is_refused_with_the_setting_named() -> None:
    with pytest.raises(SessionRefused) as err:
        recover("retry", None, 0.0)
    assert err.value.details["setting"] == "pending_policy"
