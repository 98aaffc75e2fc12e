"""The outbound A2A proxy's pure mappings (card -> ID and capabilities, message -> request,
answer -> reply or stream event, failure -> typed reach error, probes -> availability), and an
agent's reported availability on the fake cluster (marked offline, kept offline through its
host's heartbeats, online again)."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import httpx
import pytest
from a2a.client.errors import A2AClientError, A2AClientTimeoutError, AgentCardResolutionError
from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    Message,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils import errors as a2a_errors
from google.protobuf.json_format import MessageToDict

import reach
from reach.a2a.client.errors import check_reply, error_for
from reach.a2a.client.mapping import (
    CARD_PATH,
    METADATA_KEY,
    Health,
    after_probe,
    agent_id_for,
    answered,
    build_request,
    capabilities_for,
    card_location,
    check_card,
    event_from,
    parse_card,
    probe_url_for,
    reply_from,
    state_of,
)
from reach.a2a.client.models import (
    A2AEvent,
    A2AEventKind,
    A2AMessage,
    A2AReply,
    A2AState,
    A2AStreamRequest,
)
from reach.a2a.client.proxy import (
    A2AProxy,
    A2AStreamingProxy,
    ProxyConfig,
    proxy_spec,
    read_card,
)
from reach.errors import (
    AgentNotFound,
    AgentUnavailable,
    AuthError,
    ConfigError,
    HandlerError,
    InvalidPayload,
    InvalidTransition,
    ProtocolError,
    ReachError,
    RequestTimeout,
    Severity,
    TaskCancelled,
    TaskNotFound,
)
from reach.records import AgentStatus
from reach.schemas import schema_registry
from reach.testing import FakeCluster, eventually, run

REMOTE = "http://remote.example/.well-known/agent-card.json"


def a_card(name: str = "Refund Agent", *skills: AgentSkill, binding: str = "JSONRPC",
           url: str = "http://remote.example:4000/a2a/jsonrpc") -> AgentCard:
    return AgentCard(name=name, description="Issues refunds.", version="1",
                     supported_interfaces=[AgentInterface(url=url, protocol_binding=binding,
                                                          protocol_version="1.0")],
                     skills=list(skills) or [AgentSkill(id="refunds.issue", name="Refund",
                                                        tags=["refunds", "payments"])])


def a_task(state: int, *artifacts: Artifact, said: str = "") -> Task:
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    if said:
        status.message.CopyFrom(Message(parts=[new_text_part(said)]))
    return Task(id="t-1", context_id="c-1", status=status, artifacts=list(artifacts))


# -- the card ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "agent_id"), [
    ("Refund Agent", "refund-agent"),
    ("  Order.Status / v2  ", "order-status-v2"),
    ("客服 Agent!", "客服-agent"),
    ("reach.host.x", "reach-host-x"),  # never one of reach's reserved prefixes
    ("???", "a2a-agent"),
])
def test_the_proxy_id_is_the_card_name_made_an_id(name: str, agent_id: str) -> None:
    assert agent_id_for(a_card(name)) == agent_id


def test_capabilities_are_skill_ids_then_tags_normalised_without_repeats() -> None:
    card = a_card("x",
                  AgentSkill(id="refunds.issue", tags=["Refunds", "payments", "refunds"]),
                  AgentSkill(id="Order Status", tags=["order-status", "*", "--"]))
    assert capabilities_for(card) == ("refunds.issue", "refunds", "payments", "order.status")


def test_a_card_without_skills_gives_no_capabilities_and_says_so() -> None:
    card = AgentCard(name="Mute")
    with pytest.raises(ConfigError) as caught:
        capabilities_for(card)
    assert caught.value.details["setting"] == "capabilities"


def test_a_card_reads_from_its_json_its_proto_and_its_bytes() -> None:
    card = a_card()
    as_json = MessageToDict(card)
    assert parse_card(as_json) == card
    assert parse_card(card.SerializeToString()) == card
    assert parse_card(card) is card


@pytest.mark.parametrize("bad", [{"name": 3, "skills": "no"}, b"\xff\x00not a card"])
def test_what_is_not_a_card_is_a_protocol_error(bad: Any) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_card(bad)
    assert caught.value.details["rule"] == "a2a_card"


def test_a_card_the_proxy_cannot_speak_to_is_refused() -> None:
    check_card(a_card())
    check_card(a_card(binding="HTTP+JSON"))
    with pytest.raises(ConfigError, match="offers no JSON-RPC or HTTP"):
        check_card(a_card(binding="GRPC"))


@pytest.mark.parametrize(("url", "where"), [
    ("http://h:1", ("http://h:1", CARD_PATH)),
    ("http://h:1/agents/x/", ("http://h:1/agents/x", CARD_PATH)),
    ("http://h:1/.well-known/agent-card.json", ("http://h:1/.well-known/agent-card.json", "/")),
    ("http://h:1/cards/refunds.json", ("http://h:1/cards/refunds.json", "/")),
])
def test_a_url_is_either_the_card_or_the_agent_base(url: str, where: tuple[str, str]) -> None:
    assert card_location(url) == where


def test_the_probe_fetches_the_card_where_it_was_read_else_at_the_interface_origin() -> None:
    assert probe_url_for(a_card(), "http://h:1/agents/x") == f"http://h:1/agents/x{CARD_PATH}"
    assert probe_url_for(a_card(), REMOTE) == REMOTE
    assert probe_url_for(a_card(), None) == f"http://remote.example:4000{CARD_PATH}"


# -- messages and replies ---------------------------------------------------------------------


def test_a_message_becomes_a_request_carrying_the_trace_and_the_caller() -> None:
    message = A2AMessage(text="refund it", data={"order_id": "A-1", "amount": 30},
                         metadata={"lang": "zh"})
    request = build_request(message, trace_id="tr-1", sender="router-1", session_id="s-9")
    sent = request.message
    assert [p.WhichOneof("content") for p in sent.parts] == ["text", "data"]
    assert sent.parts[0].text == "refund it"
    assert MessageToDict(sent.parts[1].data) == {"order_id": "A-1", "amount": 30.0}
    ours = {"trace_id": "tr-1", "sender": "router-1"}
    assert MessageToDict(sent.metadata) == {"lang": "zh", METADATA_KEY: ours}
    assert MessageToDict(request.metadata) == {METADATA_KEY: ours}
    assert sent.context_id == "s-9"  # a reach session is an A2A conversation
    assert sent.role == 1  # ROLE_USER
    assert sent.message_id


def test_an_explicit_context_and_task_continue_a_remote_conversation() -> None:
    request = build_request(A2AMessage(text="A-1", context_id="c-1", task_id="t-1"),
                            trace_id=None, sender="d", session_id="s-9")
    assert (request.message.context_id, request.message.task_id) == ("c-1", "t-1")
    assert MessageToDict(request.message.metadata)[METADATA_KEY]["trace_id"] == ""


def test_a_task_reply_reads_its_artifacts_with_integers_kept() -> None:
    task = a_task(TaskState.TASK_STATE_COMPLETED,
                  Artifact(parts=[new_text_part("refunded"), new_data_part({"amount": 30,
                                                                            "rate": 0.5})]),
                  Artifact(parts=[new_text_part("receipt sent"), new_data_part([1, 2])]),
                  said="done")
    task.metadata.update({"reach": {"trace_id": "tr-1", "attempts": 1}})
    reply = reply_from(StreamResponse(task=task))
    assert reply == A2AReply(text="refunded\nreceipt sent", data={"amount": 30, "rate": 0.5},
                             state=A2AState.COMPLETED, task_id="t-1", context_id="c-1",
                             metadata={"reach": {"trace_id": "tr-1", "attempts": 1}})
    assert type(reply.data["amount"]) is int  # type: ignore[index]


def test_a_task_without_artifacts_reads_its_status_message_and_a_message_reply_is_complete(
        ) -> None:
    asked = reply_from(a_task(TaskState.TASK_STATE_INPUT_REQUIRED, said="which order?"))
    assert (asked.text, asked.state) == ("which order?", A2AState.INPUT_REQUIRED)
    message = Message(context_id="c-2", parts=[new_data_part(["a", 1])])
    plain = reply_from(StreamResponse(message=message))
    assert plain == A2AReply(data={"value": ["a", 1]}, state=A2AState.COMPLETED,
                             context_id="c-2")


def test_a_response_that_is_neither_task_nor_message_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        reply_from(StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t")))
    with pytest.raises(ProtocolError):
        reply_from(StreamResponse())


def test_every_a2a_state_has_its_reach_name() -> None:
    assert [state_of(s) for s in range(9)] == [
        A2AState.UNKNOWN, A2AState.SUBMITTED, A2AState.WORKING, A2AState.COMPLETED,
        A2AState.FAILED, A2AState.CANCELED, A2AState.INPUT_REQUIRED, A2AState.REJECTED,
        A2AState.AUTH_REQUIRED]
    assert state_of(99) is A2AState.UNKNOWN


def test_stream_events_become_chunks_of_their_kind() -> None:
    status = TaskStatus(state=TaskState.TASK_STATE_WORKING,
                        message=Message(parts=[new_text_part("checking")]))
    chunk = Artifact(artifact_id="a-1", parts=[new_data_part({"refund_id": "R-1"})])
    events = [
        StreamResponse(task=a_task(TaskState.TASK_STATE_SUBMITTED)),
        StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t-1", context_id="c-1",
                                                           status=status)),
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(
            task_id="t-1", context_id="c-1", artifact=chunk, append=True, last_chunk=True)),
        StreamResponse(message=Message(task_id="t-1", parts=[new_text_part("bye")])),
    ]
    assert [event_from(e, A2AState.WORKING) for e in events] == [
        A2AEvent(kind=A2AEventKind.TASK, state=A2AState.SUBMITTED, task_id="t-1",
                 context_id="c-1"),
        A2AEvent(kind=A2AEventKind.STATUS, text="checking", state=A2AState.WORKING,
                 task_id="t-1", context_id="c-1"),
        A2AEvent(kind=A2AEventKind.ARTIFACT, data={"refund_id": "R-1"}, state=A2AState.WORKING,
                 task_id="t-1", context_id="c-1", artifact_id="a-1", append=True,
                 last_chunk=True),
        A2AEvent(kind=A2AEventKind.MESSAGE, text="bye", state=A2AState.COMPLETED,
                 task_id="t-1"),
    ]
    with pytest.raises(ProtocolError):
        event_from(StreamResponse(), A2AState.WORKING)


def test_the_payloads_are_registered_schemas() -> None:
    assert [schema_registry.ref_of(m) for m in (A2AMessage, A2AStreamRequest, A2AReply,
                                                A2AEvent)] == [
        "a2a.message@1.0", "a2a.stream@1.0", "a2a.reply@1.0", "a2a.event@1.0"]


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "kind", "severity"), [
    (A2AState.FAILED, HandlerError, Severity.RETRYABLE),
    (A2AState.REJECTED, HandlerError, Severity.FATAL),
    (A2AState.CANCELED, TaskCancelled, Severity.FATAL),
])
def test_a_task_that_ended_badly_is_an_error(state: A2AState, kind: type[ReachError],
                                             severity: Severity) -> None:
    with pytest.raises(kind) as caught:
        check_reply(state, "no such order", "t-1", REMOTE)
    assert caught.value.severity is severity
    assert "no such order" in caught.value.message
    assert caught.value.details == {"remote": REMOTE, "a2a_state": state.value, "task_id": "t-1"}


@pytest.mark.parametrize("state", [A2AState.COMPLETED, A2AState.INPUT_REQUIRED,
                                   A2AState.AUTH_REQUIRED])
def test_a_task_that_ended_well_or_waits_for_the_caller_is_no_error(state: A2AState) -> None:
    check_reply(state, "", "t-1", REMOTE)


@pytest.mark.parametrize(("raised", "kind", "severity", "code"), [
    (a2a_errors.InvalidParamsError("bad"), InvalidPayload, Severity.FATAL, -32602),
    (a2a_errors.ContentTypeNotSupportedError(), InvalidPayload, Severity.FATAL, -32005),
    (a2a_errors.TaskNotFoundError(), TaskNotFound, Severity.FATAL, -32001),
    (a2a_errors.TaskNotCancelableError(), InvalidTransition, Severity.FATAL, -32002),
    (a2a_errors.UnsupportedOperationError(), ProtocolError, Severity.FATAL, -32004),
    (a2a_errors.MethodNotFoundError(), ProtocolError, Severity.FATAL, -32601),
    (a2a_errors.VersionNotSupportedError(), ProtocolError, Severity.FATAL, -32009),
    (a2a_errors.InternalError(), HandlerError, Severity.RETRYABLE, -32603),
    (a2a_errors.InvalidAgentResponseError(), HandlerError, Severity.RETRYABLE, -32006),
])
def test_an_a2a_error_the_remote_answered_maps_by_its_kind(
        raised: Exception, kind: type[ReachError], severity: Severity, code: int) -> None:
    error = error_for(raised, REMOTE)
    assert type(error) is kind
    assert error.severity is severity
    assert error.details["a2a_code"] == code
    assert error.details["remote"] == REMOTE


def http_error(status: int) -> A2AClientError:
    request = httpx.Request("POST", "http://remote.example/a2a")
    cause = httpx.HTTPStatusError("no", request=request,
                                  response=httpx.Response(status, request=request))
    error = A2AClientError(f"HTTP Error {status}")
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(("status", "kind", "severity"), [
    (401, AuthError, Severity.FATAL),
    (403, AuthError, Severity.FATAL),
    (404, AgentNotFound, Severity.FATAL),
    (400, ProtocolError, Severity.FATAL),
    (413, InvalidPayload, Severity.FATAL),
    (429, AgentUnavailable, Severity.RETRYABLE),
    (500, HandlerError, Severity.RETRYABLE),
    (502, AgentUnavailable, Severity.RETRYABLE),
    (503, AgentUnavailable, Severity.RETRYABLE),
])
def test_an_http_status_maps_by_what_a_retry_could_mend(
        status: int, kind: type[ReachError], severity: Severity) -> None:
    error = error_for(http_error(status), REMOTE)
    assert (type(error), error.severity, error.details["http_status"]) == (kind, severity, status)
    card = error_for(AgentCardResolutionError("no card", status_code=status), REMOTE)
    assert (type(card), card.details["http_status"]) == (kind, status)


def test_transport_failures_and_timeouts_are_retryable() -> None:
    refused = A2AClientError("Network communication error")
    refused.__cause__ = httpx.ConnectError("refused")
    assert type(error_for(refused, REMOTE)) is AgentUnavailable
    assert type(error_for(httpx.ConnectError("refused"), REMOTE)) is AgentUnavailable
    for slow in (A2AClientTimeoutError("timed out"), httpx.ReadTimeout("slow"), TimeoutError()):
        assert type(error_for(slow, REMOTE)) is RequestTimeout


def test_an_unreadable_card_and_anything_else_have_their_own_errors() -> None:
    assert type(error_for(AgentCardResolutionError("bad JSON"), REMOTE)) is ProtocolError
    other = error_for(A2AClientError("Invalid JSON-RPC response"), REMOTE)
    assert (type(other), other.severity) == (HandlerError, Severity.RETRYABLE)
    assert other.details["type"] == "A2AClientError"
    already = AgentUnavailable("gone")
    assert error_for(already, REMOTE) is already


def test_every_mapped_error_pickles_intact() -> None:
    errors = [error_for(e, REMOTE) for e in (
        http_error(401), http_error(503), a2a_errors.InvalidParamsError("x"),
        A2AClientTimeoutError("t"), A2AClientError("?"))]
    assert [pickle.loads(pickle.dumps(e)) for e in errors] == errors


# -- availability -----------------------------------------------------------------------------


def test_any_http_answer_below_500_shows_a_live_remote() -> None:
    assert [answered(s) for s in (200, 304, 401, 404, 500, 503, None)] == [
        True, True, True, True, False, False, False]


def test_the_remote_goes_unavailable_after_its_misses_and_back_at_the_first_answer() -> None:
    health = Health()
    seen = []
    for ok in (False, True, False, False, False, True):
        health = after_probe(health, ok, misses_allowed=2)
        seen.append(health.available)
    assert seen == [True, True, True, False, False, True]
    assert after_probe(Health(), False, misses_allowed=1) == Health(False, 1)


def test_probe_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        ProxyConfig(b"", None, ("x",), probe_interval_s=0)
    with pytest.raises(ConfigError):
        ProxyConfig(b"", None, ("x",), probe_misses=0)


def test_a_proxy_takes_its_capabilities_and_description_from_its_card_not_its_class() -> None:
    card = a_card()
    proxy = A2AStreamingProxy(ProxyConfig(card.SerializeToString(), REMOTE, ("refunds.issue",)))
    assert (proxy.capabilities, proxy.description) == (("refunds.issue",), "Issues refunds.")
    assert (A2AProxy.capabilities, A2AProxy.description) == ((), "")
    assert proxy.remote == REMOTE
    assert sorted(s.reads for s in A2AStreamingProxy.handler_specs()) == [
        "a2a.message@1.0", "a2a.stream@1.0", "reach.text@1.0"]
    assert sorted(s.reads for s in A2AProxy.handler_specs()) == [
        "a2a.message@1.0", "reach.text@1.0"]
    copied = pickle.loads(pickle.dumps(proxy.config))
    assert copied == proxy.config
    assert "secret" not in repr(ProxyConfig(b"", None, ("x",), token="secret"))


def test_a_proxy_spec_is_made_from_a_card_given_and_refused_for_a_card_it_cannot_use() -> None:
    from a2a.types.a2a_pb2 import AgentCapabilities

    streaming = a_card()
    streaming.capabilities.CopyFrom(AgentCapabilities(streaming=True))
    spec = asyncio.run(proxy_spec(MessageToDict(streaming), restart=reach.RestartType.TRANSIENT))
    assert (spec.agent, spec.agent_id, spec.restart) == (
        A2AStreamingProxy, "refund-agent", reach.RestartType.TRANSIENT)
    config = spec.kwargs["config"]
    assert (config.card_url, config.capabilities) == (None, ("refunds.issue", "refunds",
                                                              "payments"))
    plain = asyncio.run(proxy_spec(a_card(), agent_id="r-2", capabilities=["x.y"]))
    assert (plain.agent, plain.agent_id, plain.kwargs["config"].capabilities) == (
        A2AProxy, "r-2", ("x.y",))
    with pytest.raises(ConfigError):
        asyncio.run(proxy_spec(a_card(binding="GRPC")))
    with pytest.raises(ConfigError):
        asyncio.run(proxy_spec(AgentCard(name="Mute", supported_interfaces=[
            AgentInterface(url="http://h/", protocol_binding="JSONRPC")])))


def test_a_card_nobody_serves_is_unavailable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again at once: nothing listens there
    with pytest.raises(AgentUnavailable) as caught:
        asyncio.run(read_card(f"http://127.0.0.1:{port}"))
    assert caught.value.details["remote"] == f"http://127.0.0.1:{port}"


# -- an agent's reported availability, on the fake cluster ------------------------------------


class Reporter(reach.Agent):
    """Stands for a remote: reports itself available or not, as a proxy's prober does."""

    capabilities = ("remote.thing",)

    def report(self, available: bool) -> None:
        self._reach_available(available)


def test_an_agent_reported_unavailable_is_offline_through_heartbeats_until_reported_back(
        ) -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        record = await rt.spawn(Reporter, "remote-1", placement=reach.Packed())
        agent: Reporter = fake.process(record.host).runners["remote-1"].agent
        registry = rt.cluster.registry()

        async def status() -> AgentStatus:
            return (await registry.lookup("remote-1")).status

        agent.report(False)
        await eventually(lambda: _is(status(), AgentStatus.OFFLINE))
        assert await registry.discover("remote.thing", None, None) == ([], [])
        await asyncio.sleep(10)  # ten heartbeat intervals of its host, on virtual time
        assert await status() is AgentStatus.OFFLINE
        agent.report(False)  # reported again: nothing changes
        agent.report(True)
        await eventually(lambda: _is(status(), AgentStatus.ONLINE))
        await asyncio.sleep(10)
        assert await status() is AgentStatus.ONLINE
        assert [r.agent_id for r in (await registry.discover("remote.thing", None, None))[0]] == [
            "remote-1"]

    run(scenario)


async def _is(status: Any, expected: AgentStatus) -> bool:
    return bool(await status is expected)


def test_a_host_may_not_mark_the_agents_of_another_host() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        mine = await rt.spawn(Reporter, "mine-1", placement=reach.Packed(pool="a", size=1))
        other = await rt.spawn(Reporter, "other-1", placement=reach.Packed(pool="b", size=1))
        host = fake.process(mine.host)
        with pytest.raises(reach.AuthError):
            await host._registry_call("mark", [["other-1"], "offline"])
        with pytest.raises(reach.AuthError):  # nor mark its own restarting: supervisors do
            await host._registry_call("mark", [["mine-1"], "restarting"])
        assert (await rt.cluster.registry().lookup(other.agent_id)).status is AgentStatus.ONLINE

    run(scenario, security=_signed())


def _signed() -> Any:
    import tempfile
    from pathlib import Path

    from reach.security.guard import SecurityConfig, resolve_keyring

    folder = Path(tempfile.mkdtemp())
    return SecurityConfig(keyring=resolve_keyring(folder / "keyring.json", create=True))
