"""The A2A gateway on a real Ray, as Ray Serve runs it, driven by the official Python SDK's
client (a2a-sdk: card resolver, client factory, auth interceptor); raw HTTP only where a client
would not send it (malformed JSON, an oversize body, no token)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    Client,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.client.client import ClientCallContext
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from gateway_agents import GwOrders, GwTeller
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from ray_helpers import start_gateway, wait_until

import reach
from reach.web.auth import SCHEME_NAME, token_for

pytestmark = pytest.mark.integration

COMPLETED = TaskState.TASK_STATE_COMPLETED
NAME = "gw-test"
MAX_BODY = 64 * 1024



class Token(CredentialService):
    """Hands the SDK's auth interceptor one bearer token for the card's scheme."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self.token if security_scheme_name == SCHEME_NAME else None


class Gateway:
    """The gateway under test and SDK clients of it."""

    def __init__(self, url: str, token: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self.token = token
        self.http = http

    async def card(self, agent: str | None = None) -> AgentCard:
        path = ("/.well-known/agent-card.json" if agent is None
                else f"/agents/{agent}/.well-known/agent-card.json")
        return await A2ACardResolver(self.http, self.url).get_agent_card(
            relative_card_path=path)

    async def client(self, agent: str | None = None, *, streaming: bool = False,
                     token: str | None = None) -> Client:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=self.http))
        return factory.create(await self.card(agent),
                              interceptors=[AuthInterceptor(Token(token or self.token))])


@pytest.fixture(scope="module")
async def gw(rt: Any) -> AsyncIterator[Gateway]:
    ids = ["gw-orders-1", "gw-orders-2"]
    await rt.spawn_many(GwOrders, ids, placement=reach.Packed(pool="gw", size=1))
    await rt.spawn(GwTeller, "gw-teller", placement=reach.Packed(pool="gw", size=1))
    url = start_gateway(rt, name=NAME, max_body_bytes=MAX_BODY)
    guard = rt.cluster.guard()
    async with httpx.AsyncClient(timeout=30.0) as http:
        try:
            yield Gateway(url, token_for(guard.keyring, "partner"), http)
        finally:
            rt.stop_gateway(NAME)
            for agent in [*ids, "gw-teller"]:
                await rt.stop(agent)


def message(*parts: Part, **metadata: Any) -> Message:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts))
    if metadata:
        msg.metadata.update(metadata)
    return msg


def data(value: dict[str, Any]) -> Part:
    return Part(data=ParseDict(value, Value()))


def request(msg: Message, *, immediately: bool = False) -> SendMessageRequest:
    return SendMessageRequest(message=msg, configuration=SendMessageConfiguration(
        return_immediately=immediately))


async def events(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [event async for event in stream]


async def sent(client: Client, msg: Message, *, immediately: bool = False) -> Task:
    (response,) = await events(client.send_message(request(msg, immediately=immediately)))
    return response.task


async def test_cards_resolve_through_the_sdk(gw: Gateway) -> None:
    router = await gw.card()
    assert router.name == NAME
    assert {"gw.order.query", "gw.story.tell"} <= {s.id for s in router.skills}
    assert router.supported_interfaces[0].url == gw.url + "/"
    assert router.security_schemes[SCHEME_NAME].http_auth_security_scheme.scheme == "bearer"
    orders = await gw.card("gw-orders-1")
    assert orders.supported_interfaces[0].url == f"{gw.url}/agents/gw-orders-1"
    assert orders.supported_interfaces[0].protocol_version == "1.0"
    assert not orders.capabilities.streaming
    assert set(orders.default_input_modes) == {"application/json", "text/plain"}
    assert (await gw.card("gw-teller")).capabilities.streaming


async def test_send_message_completes_a_task_got_and_listed(gw: Gateway) -> None:
    client = await gw.client("gw-orders-1")
    task = await sent(client, message(data({"order_id": 11})))
    assert task.status.state == COMPLETED
    reply = MessageToDict(task.artifacts[0].parts[0].data)
    assert reply == {"order_id": 11.0, "status": "shipped", "by": "gw-orders-1"}
    assert MessageToDict(task.metadata)["reach"]["trace_id"] == task.id

    text = await sent(client, message(Part(text="where is order 11?")))
    assert text.artifacts[0].parts[0].text == "gw-orders-1 heard: where is order 11?"

    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == COMPLETED
    listed = await client.list_tasks(ListTasksRequest())
    assert {task.id, text.id} <= {t.id for t in listed.tasks}


async def test_the_router_sends_by_capability(gw: Gateway) -> None:
    client = await gw.client()
    task = await sent(client, message(data({"order_id": 12}), capability="gw.order.query"))
    assert task.status.state == COMPLETED
    assert MessageToDict(task.artifacts[0].parts[0].data)["by"] in {"gw-orders-1",
                                                                    "gw-orders-2"}
    with pytest.raises(InvalidParamsError, match="capability"):
        await sent(client, message(data({"order_id": 12})))


async def test_a_stream_arrives_chunk_by_chunk(gw: Gateway) -> None:
    client = await gw.client("gw-teller", streaming=True)
    got = await events(client.send_message(request(message(Part(text="once upon a time")))))
    assert got[0].task.status.state == TaskState.TASK_STATE_WORKING
    updates = [e.artifact_update for e in got if e.HasField("artifact_update")]
    assert [u.artifact.parts[0].text for u in updates] == ["once", "upon", "a", "time"]
    assert [u.append for u in updates] == [False, True, True, True]
    assert [u.last_chunk for u in updates] == [False, False, False, True]
    assert got[-1].status_update.status.state == COMPLETED


async def test_cancel_task_cancels_the_handler_under_its_trace(gw: Gateway, rt: Any) -> None:
    client = await gw.client("gw-orders-2")
    task = await sent(client, message(data({"order_id": 13, "sleep_s": 120})),
                      immediately=True)
    assert task.status.state == TaskState.TASK_STATE_WORKING
    cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == (
        TaskState.TASK_STATE_CANCELED)

    async def handler_cancelled() -> bool:  # the host audits the handler's end
        for host in await rt.cluster.registry().hosts():
            with contextlib.suppress(reach.AgentUnavailable):  # a host ended since it was listed
                await rt.cluster.host(host).flush_audit()
        records = await rt.cluster.audit_log().audit_records(task.id, None, 20)
        return any("task_cancelled" in r["outcome"] for r in records)

    await wait_until(handler_cancelled)
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=task.id))


async def test_subscribe_to_task_follows_a_running_stream(gw: Gateway) -> None:
    client = await gw.client("gw-teller", streaming=True)
    sender = await gw.client("gw-teller")
    task = await sent(sender, message(Part(text="one pause two")), immediately=True)
    got = await events(client.subscribe(SubscribeToTaskRequest(id=task.id)))
    assert got[0].task.id == task.id
    assert got[-1].status_update.status.state == COMPLETED
    final = await client.get_task(GetTaskRequest(id=task.id))
    assert [p.text for p in final.artifacts[0].parts if p.text] == ["one", "pause", "two"]


async def test_a2a_errors_reach_the_sdk_client_typed(gw: Gateway) -> None:
    client = await gw.client("gw-orders-1")
    with pytest.raises(TaskNotFoundError):
        await client.get_task(GetTaskRequest(id="no-such-task"))
    done = await sent(client, message(data({"order_id": 14})))
    with pytest.raises(TaskNotCancelableError):
        await client.cancel_task(CancelTaskRequest(id=done.id))
    follow_up = message(data({"order_id": 14}))
    follow_up.task_id = done.id
    with pytest.raises(UnsupportedOperationError, match="one message"):
        await sent(client, follow_up)
    with pytest.raises(ContentTypeNotSupportedError):
        await sent(client, message(Part(url="https://example.com/order.pdf")))
    with pytest.raises(InvalidParamsError, match="order_id") as invalid:
        await sent(client, message(data({"order_id": "fourteen"})))
    assert invalid.value.data is not None
    assert invalid.value.data["reach_code"] == "invalid_payload"
    assert invalid.value.data["severity"] == "fatal"


async def test_an_unknown_agent_is_a_clear_error(gw: Gateway) -> None:
    card = await gw.card("gw-orders-1")
    card.supported_interfaces[0].url = f"{gw.url}/agents/gw-nobody"
    client = ClientFactory(ClientConfig(streaming=False, httpx_client=gw.http)).create(
        card, interceptors=[AuthInterceptor(Token(gw.token))])
    with pytest.raises(InvalidParamsError, match="gw-nobody") as caught:
        await sent(client, message(data({"order_id": 1})))
    assert caught.value.data is not None
    assert caught.value.data["reach_code"] == "agent_not_found"
    missing = await gw.http.get(f"{gw.url}/agents/gw-nobody/.well-known/agent-card.json")
    assert missing.status_code == 404


async def test_agent_errors_end_tasks_failed_or_degraded(gw: Gateway) -> None:
    client = await gw.client("gw-orders-1")
    failed = await sent(client, message(data({"order_id": 15, "fail": "fatal"})))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert "order 15 failed" in failed.status.message.parts[0].text
    assert MessageToDict(failed.metadata)["reach"]["error"]["severity"] == "fatal"
    degraded = await sent(client, message(data({"order_id": 16, "fail": "degradable"})))
    assert degraded.status.state == COMPLETED
    assert MessageToDict(degraded.metadata)["reach"]["degraded"] is True
    assert MessageToDict(degraded.artifacts[0].parts[0].data)["status"] == "unknown"


async def test_calls_enter_reach_as_the_tokens_principal(gw: Gateway, rt: Any) -> None:
    client = await gw.client("gw-orders-1")
    task = await sent(client, message(data({"order_id": 17})))

    async def audited() -> list[dict[str, Any]]:
        for host in await rt.cluster.registry().hosts():
            # A host listed may have ended since (a warm spare that retired): nothing to flush.
            with contextlib.suppress(reach.AgentUnavailable):
                await rt.cluster.host(host).flush_audit()
        return list(await rt.cluster.audit_log().audit_records(task.id, None, 20))

    records = await wait_until(audited)
    assert {r["caller"] for r in records} == {"a2a:partner"}
    rival = await gw.client("gw-orders-1", token=token_for(rt.cluster.guard().keyring, "rival"))
    with pytest.raises(TaskNotFoundError):  # another principal's task is not there for it
        await rival.get_task(GetTaskRequest(id=task.id))


async def test_raw_http_malformed_oversize_and_unauthenticated(gw: Gateway) -> None:
    v1 = {"A2A-Version": "1.0", "Authorization": f"Bearer {gw.token}"}
    endpoint = f"{gw.url}/agents/gw-orders-1"
    malformed = await gw.http.post(endpoint, content=b'{"jsonrpc": "2.0", "id": 1,',
                                   headers=v1)
    assert malformed.json()["error"]["code"] == -32700
    big = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
           "params": {"message": {"messageId": "m", "role": "ROLE_USER",
                                  "parts": [{"text": "x" * (MAX_BODY + 1)}]}}}
    oversize = await gw.http.post(endpoint, json=big, headers=v1)
    assert oversize.status_code == 413
    assert oversize.json()["error"]["code"] == -32600
    anonymous = await gw.http.post(endpoint, json=big, headers={"A2A-Version": "1.0"})
    assert anonymous.status_code == 401
    assert anonymous.json()["reason"] == "missing_token"
    forged = await gw.http.post(endpoint, json=big, headers={
        "A2A-Version": "1.0", "Authorization": "Bearer partner." + "0" * 64})
    assert (forged.status_code, forged.json()["reason"]) == (401, "invalid_token")
    client = await gw.client("gw-orders-1")  # still up
    assert (await sent(client, message(data({"order_id": 18})))).status.state == COMPLETED
