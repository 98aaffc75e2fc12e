"""The A2A gateway on the fake cluster: its HTTP application driven in-process (httpx's ASGI
transport), on virtual time. The official SDK client against a real gateway on Ray is in
tests/integration/test_gateway_on_ray.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, ClassVar

import httpx
import pytest
from a2a.types.a2a_pb2 import TaskState
from pydantic import BaseModel

import reach
from reach.errors import AgentUnavailable, ConfigError, Severity
from reach.gateway.deploy import start_gateway
from reach.gateway.server import GatewayServer
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.testing import FakeCluster, eventually, run
from reach.web.auth import token_for
from reach.web.options import GatewayOptions

V1 = {"A2A-Version": "1.0"}


@reach.schema("gwtest.order@1.0")
class Order(BaseModel):
    order_id: int
    sleep_s: float = 0.0
    fail: str = ""  # a severity to fail with


@reach.schema("gwtest.status@1.0")
class Status(BaseModel):
    order_id: int
    status: str


class Orders(reach.Agent):
    capabilities = ("order.query",)
    description = "Looks up orders by ID."
    cancelled: ClassVar[list[int]] = []

    @reach.handler(Order, returns=Status)
    async def query(self, ctx: reach.Context, m: Order) -> Status:
        try:
            await asyncio.sleep(m.sleep_s)
        except asyncio.CancelledError:
            Orders.cancelled.append(m.order_id)
            raise
        if m.fail:
            raise reach.ReachError(f"order {m.order_id} failed", severity=Severity(m.fail),
                                   suggestion="try another order",
                                   partial={"order_id": m.order_id, "status": "unknown"})
        return Status(order_id=m.order_id, status="shipped")

    @reach.handler(reach.Text, returns=reach.Text)
    async def chat(self, ctx: reach.Context, m: reach.Text) -> reach.Text:
        return reach.Text(text=m.text.upper())


class Teller(reach.Agent):
    capabilities = ("story.tell",)
    description = "Tells a story word by word."

    @reach.handler(reach.Text, returns=reach.Text)
    async def tell(self, ctx: reach.Context, m: reach.Text) -> AsyncIterator[reach.Text]:
        for word in m.text.split():
            if word == "boom":
                raise reach.ReachError("the story broke", severity=Severity.FATAL)
            if word == "pause":
                await asyncio.sleep(10)
            yield reach.Text(text=word)


Scenario = Callable[[FakeCluster, httpx.AsyncClient], Coroutine[Any, Any, None]]


def on_gateway(scenario: Scenario, *, security: SecurityConfig | None = None,
               token: str | None = None, **options: Any) -> None:
    """Runs ``scenario`` with two order agents and a teller, and a gateway client."""

    async def main(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn_many(Orders, ["orders-1", "orders-2"], placement=reach.Packed())
        await rt.spawn(Teller, "teller", placement=reach.Packed())
        start_gateway(fake, GatewayOptions(**{"auth": security is not None, **options}))
        server: GatewayServer = fake.services["reach-gateway"]
        headers = dict(V1)
        if token is not None:
            guard = fake.guard()
            assert guard is not None
            headers["Authorization"] = f"Bearer {token_for(guard.keyring, token)}"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(server.app),
                                     base_url="http://gw", headers=headers) as client:
            await scenario(fake, client)
        await server.close()

    Orders.cancelled.clear()
    run(main, security=security)


def send(parts: list[dict[str, Any]], *, method: str = "SendMessage", rid: int = 1,
         metadata: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{rid}", "role": "ROLE_USER", "parts": parts}
    if metadata:
        message["metadata"] = metadata
    params: dict[str, Any] = {"message": message}
    if config:
        params["configuration"] = config
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def call(method: str, rid: int = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


async def rpc(client: httpx.AsyncClient, body: dict[str, Any],
              path: str = "/agents/orders-1") -> dict[str, Any]:
    reply = await client.post(path, json=body)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()
    return result


async def sse(client: httpx.AsyncClient, body: dict[str, Any],
              path: str = "/agents/teller") -> list[dict[str, Any]]:
    events = []
    async with client.stream("POST", path, json=body) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        async for line in reply.aiter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    return events


def order(order_id: int, **fields: Any) -> list[dict[str, Any]]:
    return [{"data": {"order_id": order_id, **fields}}]


def test_cards_follow_the_registry() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        router = (await client.get("/.well-known/agent-card.json")).json()
        assert [s["id"] for s in router["skills"]] == ["order.query", "story.tell"]
        assert router["supportedInterfaces"][0]["url"] == "http://127.0.0.1:8000/"
        card = (await client.get("/agents/teller/.well-known/agent-card.json")).json()
        assert card["capabilities"]["streaming"] is True
        assert card["supportedInterfaces"][0]["url"] == "http://127.0.0.1:8000/agents/teller"
        missing = await client.get("/agents/nobody/.well-known/agent-card.json")
        assert missing.status_code == 404
        assert "nobody" in missing.json()["message"]

        rt = fake.runtime()
        await rt.spawn(Orders, "orders-3", placement=reach.Packed())
        await rt.stop("teller")

        async def updated() -> bool:
            new = await client.get("/agents/orders-3/.well-known/agent-card.json")
            gone = await client.get("/agents/teller/.well-known/agent-card.json")
            return new.status_code == 200 and gone.status_code == 404

        await eventually(updated)
        router = (await client.get("/.well-known/agent-card.json")).json()
        assert [s["id"] for s in router["skills"]] == ["order.query"]
        assert "orders-3" in router["skills"][0]["description"]

    on_gateway(scenario)


def test_a_data_part_completes_a_task_whose_id_is_the_trace_id() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send(order(7))))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        (artifact,) = task["artifacts"]
        (part,) = artifact["parts"]
        assert part["data"] == {"order_id": 7, "status": "shipped"}
        assert part["metadata"] == {"schema": "gwtest.status@1.0"}
        reach_meta = task["metadata"]["reach"]
        assert reach_meta["trace_id"] == task["id"]
        assert reach_meta["target"] == "orders-1"
        assert task["history"][0]["messageId"] == "m-1"

        got = (await rpc(client, call("GetTask", id=task["id"])))["result"]
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = (await rpc(client, call("ListTasks", includeArtifacts=True)))["result"]
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]

    on_gateway(scenario, auth=False)


def test_text_parts_go_to_the_text_handler_and_text_comes_back_as_text() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send([{"text": "hello"}, {"text": "你好"}])))["result"]["task"]
        text, data = task["artifacts"][0]["parts"]
        assert text == {"text": "HELLO\n你好", "mediaType": "text/plain"}
        assert data["data"] == {"text": "HELLO\n你好"}

    on_gateway(scenario, auth=False)


def test_a_stream_is_one_artifact_update_per_chunk_the_last_one_marked() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        events = [e["result"] for e in await sse(client, send(
            [{"text": "once upon a time"}], method="SendStreamingMessage"))]
        assert events[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
        updates = [e["artifactUpdate"] for e in events[1:-1]]
        assert [u["artifact"]["parts"][0]["text"] for u in updates] == [
            "once", "upon", "a", "time"]
        assert [u.get("append", False) for u in updates] == [False, True, True, True]
        assert [u.get("lastChunk", False) for u in updates] == [False, False, False, True]
        final = events[-1]["statusUpdate"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED"
        task_id = events[0]["task"]["id"]
        got = (await rpc(client, call("GetTask", id=task_id), "/agents/teller"))["result"]
        assert len(got["artifacts"][0]["parts"]) == 8  # a text and a data part per chunk

    on_gateway(scenario, auth=False)


def test_a_stream_asked_for_by_send_message_comes_whole_in_one_task() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send([{"text": "a b"}]), "/agents/teller"))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [p.get("text") for p in task["artifacts"][0]["parts"]] == ["a", None, "b", None]

    on_gateway(scenario, auth=False)


def test_a_reply_that_is_no_stream_streams_as_one_last_chunk() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        events = [e["result"] for e in await sse(client, send(
            order(3), method="SendStreamingMessage"), "/agents/orders-1")]
        assert [next(iter(e)) for e in events] == ["task", "artifactUpdate", "statusUpdate"]
        assert events[1]["artifactUpdate"]["lastChunk"] is True

    on_gateway(scenario, auth=False)


def test_the_router_sends_by_the_capability_named_in_the_metadata() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send(order(5), metadata={"capability": "order.query"}),
                          "/"))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["metadata"]["reach"]["target"] == "order.query"
        assert task["metadata"]["reach"]["by_capability"] is True
        missing = (await rpc(client, send(order(5)), "/"))["error"]
        assert missing["code"] == -32602
        assert '"capability"' in missing["message"]
        unknown = (await rpc(client, send(order(5), metadata={"capability": "order.cancel"}),
                             "/"))["error"]
        assert unknown["code"] == -32602
        assert unknown["data"][0]["metadata"]["reach_code"] == "no_capable_agent"

    on_gateway(scenario, auth=False)


def test_requests_that_cannot_be_sent_are_refused_and_leave_no_task() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        unknown = (await rpc(client, send(order(1)), "/agents/nobody"))["error"]
        assert unknown["code"] == -32602
        assert unknown["data"][0]["metadata"]["reach_code"] == "agent_not_found"
        invalid = (await rpc(client, send(order(1, sleep_s="long"))))["error"]
        assert invalid["code"] == -32602
        assert "sleep_s" in invalid["message"]
        assert invalid["data"][0]["metadata"]["severity"] == "fatal"
        files = (await rpc(client, send([{"url": "https://x/a.png"}])))["error"]
        assert files["code"] == -32005
        follow_up = send(order(1))
        follow_up["params"]["message"]["taskId"] = "abc"
        assert (await rpc(client, follow_up))["error"]["code"] == -32004
        listed = (await rpc(client, call("ListTasks")))["result"]
        assert listed["tasks"] == []

    on_gateway(scenario, auth=False)


class Numbers(reach.Agent):
    capabilities = ("numbers",)

    @reach.handler(Order, returns=Status)
    async def query(self, ctx: reach.Context, m: Order) -> Status:
        return Status(order_id=m.order_id, status="ok")


def test_text_for_an_agent_that_reads_none_is_content_type_not_supported() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        await fake.runtime().spawn(Numbers, "numbers", placement=reach.Packed())
        error = (await rpc(client, send([{"text": "seven"}]), "/agents/numbers"))["error"]
        assert error["code"] == -32005
        assert "gwtest.order@1.0" in error["message"]

    on_gateway(scenario, auth=False)


def test_malformed_requests_get_json_rpc_errors_and_the_gateway_stays_up() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        bad_json = await client.post("/agents/orders-1", content=b'{"jsonrpc": "2.0", "id":')
        assert bad_json.json()["error"]["code"] == -32700
        not_rpc = await client.post("/agents/orders-1", json={"hello": "world"})
        assert not_rpc.json()["error"]["code"] == -32600
        assert (await rpc(client, call("NoSuchMethod")))["error"]["code"] == -32601
        bad_params = await rpc(client, call("GetTask", id=7, historyLength="many"))
        assert bad_params["error"]["code"] == -32602
        assert (await rpc(client, call("GetTask", id="nope")))["error"]["code"] == -32001
        done = (await rpc(client, send(order(2))))["result"]["task"]
        not_cancelable = await rpc(client, call("CancelTask", id=done["id"]))
        assert not_cancelable["error"]["code"] == -32002
        assert (await rpc(client, send(order(3))))["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED")

    on_gateway(scenario, auth=False)


def test_agent_errors_end_tasks_by_severity() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        fatal = (await rpc(client, send(order(1, fail="fatal"))))["result"]["task"]
        assert fatal["status"]["state"] == "TASK_STATE_FAILED"
        text, data = fatal["status"]["message"]["parts"]
        assert "order 1 failed" in text["text"]
        assert "try another order" in text["text"]
        assert data["data"]["severity"] == "fatal"
        assert fatal["metadata"]["reach"]["error"]["code"] == "reach_error"

        degraded = (await rpc(client, send(order(2, fail="degradable"))))["result"]["task"]
        assert degraded["status"]["state"] == "TASK_STATE_COMPLETED"
        assert degraded["metadata"]["reach"]["degraded"] is True
        assert degraded["artifacts"][0]["parts"][0]["data"] == {"order_id": 2,
                                                                "status": "unknown"}
        assert "partial" in degraded["status"]["message"]["parts"][0]["text"]

        retried = (await rpc(client, send(order(3, fail="retryable"))))["result"]["task"]
        assert retried["status"]["state"] == "TASK_STATE_FAILED"
        assert retried["metadata"]["reach"]["attempts"] == 3  # retry_limit 2

    on_gateway(scenario, auth=False, retry_limit=2)


def test_a_fatal_error_mid_stream_fails_the_task_after_the_chunks_sent() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        events = [e["result"] for e in await sse(client, send(
            [{"text": "one two boom"}], method="SendStreamingMessage"))]
        updates = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
        assert [u["artifact"]["parts"][0]["text"] for u in updates] == ["one", "two"]
        assert updates[-1]["lastChunk"] is True
        final = events[-1]["statusUpdate"]
        assert final["status"]["state"] == "TASK_STATE_FAILED"
        assert final["metadata"]["reach"]["error"]["reason"] == "the story broke"

    on_gateway(scenario, auth=False)


def test_cancel_task_cancels_the_handler_under_its_trace() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        started = (await rpc(client, send(order(9, sleep_s=60),
                                          returnImmediately=True)))["result"]["task"]
        assert started["status"]["state"] == "TASK_STATE_WORKING"

        async def running() -> bool:
            host = fake.process((await fake.registry().lookup("orders-1")).host)
            return bool(host.runners["orders-1"].inflight)

        await eventually(running)
        cancelled = (await rpc(client, call("CancelTask", id=started["id"])))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        await eventually(lambda: _true(Orders.cancelled == [9]))
        got = (await rpc(client, call("GetTask", id=started["id"])))["result"]
        assert got["status"]["state"] == "TASK_STATE_CANCELED"
        again = await rpc(client, call("CancelTask", id=started["id"]))
        assert again["error"]["code"] == -32002

    on_gateway(scenario, auth=False)


def test_a_slow_blocking_send_is_announced_and_can_be_listed_while_it_runs() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        sending = asyncio.ensure_future(rpc(client, send(order(4, sleep_s=5))))

        async def working() -> list[Any]:
            listed = (await rpc(client, call("ListTasks")))["result"]["tasks"]
            return [t for t in listed if t["status"]["state"] == "TASK_STATE_WORKING"]

        (task,) = await eventually(working)
        done = (await sending)["result"]["task"]
        assert done["id"] == task["id"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["artifacts"][0]["parts"][0]["data"]["order_id"] == 4

    on_gateway(scenario, auth=False)


def test_subscribe_to_task_follows_a_running_stream_to_its_end() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        started = (await rpc(client, send([{"text": "wait pause done"}], returnImmediately=True),
                             "/agents/teller"))["result"]["task"]
        events = [e["result"] for e in await sse(
            client, call("SubscribeToTask", id=started["id"]))]
        assert events[0]["task"]["id"] == started["id"]
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        texts = [p["text"] for e in events if "artifactUpdate" in e
                 for p in e["artifactUpdate"]["artifact"]["parts"] if "text" in p]
        assert texts[-1] == "done"
        finished = await rpc(client, call("SubscribeToTask", id=started["id"]),
                             "/agents/teller")
        assert finished["error"]["code"] == -32004

    on_gateway(scenario, auth=False)


def test_oversize_bodies_are_refused_before_they_are_read() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        big = send(order(1, note="x" * 5000))
        declared = await client.post("/agents/orders-1", json=big)
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == -32600
        assert "4096 bytes" in declared.json()["error"]["message"]

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 1000

        undeclared = await client.post("/agents/orders-1", content=chunks())
        assert undeclared.status_code == 413
        small = await rpc(client, send(order(1)))
        assert small["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    on_gateway(scenario, auth=False, max_body_bytes=4096)


def test_a_chunked_body_within_the_limit_is_read_whole() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        body = json.dumps(send(order(6))).encode()

        async def chunks() -> AsyncIterator[bytes]:
            yield body[:10]
            yield body[10:]

        reply = await client.post("/agents/orders-1", content=chunks())
        assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    on_gateway(scenario, auth=False)


@pytest.fixture
def signed(tmp_path: Any) -> SecurityConfig:
    return SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                             create=True))


def test_calls_need_a_valid_token_but_cards_do_not(signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        client.headers.pop("Authorization", None)
        card = (await client.get("/.well-known/agent-card.json")).json()
        assert "reachBearer" in card["securitySchemes"]
        missing = await client.post("/agents/orders-1", json=send(order(1)))
        assert missing.status_code == 401
        assert missing.json()["reason"] == "missing_token"
        assert missing.headers["www-authenticate"].startswith("Bearer")
        forged = await client.post("/agents/orders-1", json=send(order(1)),
                                   headers={"Authorization": "Bearer mallory." + "0" * 64})
        assert (forged.status_code, forged.json()["reason"]) == (401, "invalid_token")
        basic = await client.post("/", json=send(order(1)),
                                  headers={"Authorization": "Basic YWxhZGRpbjo="})
        assert (basic.status_code, basic.json()["reason"]) == (401, "not_bearer")

    on_gateway(scenario, security=signed)


def test_a_token_enters_reach_as_its_principal_and_tasks_are_its_own(
        signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send(order(1))))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        host = fake.process((await fake.registry().lookup("orders-1")).host)
        await host.flush_audit()
        records = await fake.audit_log().audit_records(task["id"], None, 10)
        assert {r["caller"] for r in records} == {"a2a:partner"}

        guard = fake.guard()
        assert guard is not None
        other = {"Authorization": f"Bearer {token_for(guard.keyring, 'rival')}"}
        peek = await client.post("/agents/orders-1", json=call("GetTask", id=task["id"]),
                                 headers=other)
        assert peek.json()["error"]["code"] == -32001

    on_gateway(scenario, security=signed, token="partner")


def test_the_acl_covers_calls_through_the_gateway(signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        rt = fake.runtime()
        await rt.set_acl(reach.Acl((reach.Rule(callers=("a2a:*",), capabilities=("order.*",),
                                               allow=False),)))

        async def refused() -> dict[str, Any] | None:
            task = (await rpc(client, send(order(1))))["result"]["task"]
            return task if task["status"]["state"] == "TASK_STATE_FAILED" else None

        task = await eventually(refused)
        assert task["metadata"]["reach"]["error"]["code"] == "auth_error"
        assert "access denied" in task["status"]["message"]["parts"][0]["text"]

    on_gateway(scenario, security=signed, token="partner")


def test_auth_without_a_keyring_refuses_to_start() -> None:
    async def scenario(fake: FakeCluster) -> None:
        with pytest.raises(ConfigError, match="needs a keyring"):
            start_gateway(fake, GatewayOptions(auth=True))

    run(scenario)


def test_health_fails_once_the_replicas_inbox_is_gone() -> None:
    async def scenario(fake: FakeCluster) -> None:
        start_gateway(fake, GatewayOptions(auth=False))
        server: GatewayServer = fake.services["reach-gateway"]
        await server.health()
        (inbox,) = fake.names("reach.inbox.")
        fake.crash(inbox)

        async def unhealthy() -> bool:
            try:
                await server.health()
            except AgentUnavailable:
                return True
            return False

        await eventually(unhealthy)
        await server.close()

    run(scenario)


def _anonymous() -> Any:
    """The call context of an unauthenticated caller (a gateway without auth)."""
    from a2a.server.context import ServerCallContext

    from reach.a2a.server.handler import Caller
    from reach.web.auth import ANONYMOUS

    return ServerCallContext(user=Caller(ANONYMOUS))


async def _true(value: bool) -> bool:
    return value


def test_another_replica_follows_and_cancels_a_task_through_the_shared_store() -> None:
    async def main(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Orders, "orders-1", placement=reach.Packed())
        await rt.spawn(Teller, "teller", placement=reach.Packed())
        servers = []
        for name in ("gw-a", "gw-b"):
            start_gateway(fake, GatewayOptions(auth=False, name=name))
            servers.append(fake.services[name])
        a, b = (httpx.AsyncClient(transport=httpx.ASGITransport(s.app), base_url="http://gw",
                                  headers=V1) for s in servers)
        async with a, b:
            story = (await rpc(a, send([{"text": "wait pause done"}], returnImmediately=True),
                               "/agents/teller"))["result"]["task"]
            followed = [e["result"]["task"] for e in await sse(
                b, call("SubscribeToTask", id=story["id"]))]
            assert followed[0]["status"]["state"] == "TASK_STATE_WORKING"
            assert followed[-1]["status"]["state"] == "TASK_STATE_COMPLETED"
            assert followed[-1]["artifacts"][0]["parts"][-2]["text"] == "done"

            slow = (await rpc(a, send(order(9, sleep_s=60), returnImmediately=True)))
            task_id = slow["result"]["task"]["id"]
            assert not servers[1].executor.runs(task_id)
            cancelled = (await rpc(b, call("CancelTask", id=task_id)))["result"]
            assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
            await eventually(lambda: _true(Orders.cancelled == [9]))
            await eventually(lambda: _true(not servers[0].executor.runs(task_id)))
            final = (await rpc(a, call("GetTask", id=task_id)))["result"]
            assert final["status"]["state"] == "TASK_STATE_CANCELED"
        for server in servers:
            await server.close()

    Orders.cancelled.clear()
    run(main)


def test_a_host_describes_the_handlers_of_its_agents() -> None:
    async def main(fake: FakeCluster) -> None:
        record = await fake.runtime().spawn(Orders, "orders-1", placement=reach.Packed())
        described = await fake.host(record.host).describe(["orders-1", "elsewhere"])
        assert list(described) == ["orders-1"]
        by_schema = {h["schema"]: h for h in described["orders-1"]}
        assert set(by_schema) == {"gwtest.order@1.0", "reach.text@1.0"}
        query, chat = by_schema["gwtest.order@1.0"], by_schema["reach.text@1.0"]
        assert (query["returns"], query["streaming"], query["reads_text"]) == (
            "gwtest.status@1.0", False, False)
        assert query["json_schema"]["required"] == ["order_id"]
        assert chat["reads_text"] is True

    run(main)


def test_cancel_task_cancels_a_running_stream() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        started = (await rpc(client, send([{"text": "one pause two"}], returnImmediately=True),
                             "/agents/teller"))["result"]["task"]
        cancelled = (await rpc(client, call("CancelTask", id=started["id"]),
                               "/agents/teller"))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        got = (await rpc(client, call("GetTask", id=started["id"])))["result"]
        assert got["status"]["state"] == "TASK_STATE_CANCELED"
        assert "two" not in json.dumps(got.get("artifacts", []))
        host = fake.process((await fake.registry().lookup("teller")).host)
        await eventually(lambda: _true(not host.runners["teller"].inflight))

    on_gateway(scenario, auth=False)


def test_a_quick_blocking_send_is_written_once_already_finished() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        server: GatewayServer = fake.services["reach-gateway"]
        saves: list[str] = []
        inner = server.store.inner.save

        async def counted(task: Any, context: Any) -> None:
            saves.append(task.status.state)
            await inner(task, context)

        server.store.inner.save = counted  # type: ignore[method-assign]
        done = (await rpc(client, send(order(3))))["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["artifacts"][0]["parts"][0]["data"] == {"order_id": 3, "status": "shipped"}
        assert len(saves) == 1  # no SUBMITTED or WORKING write before the final one
        got = (await rpc(client, call("GetTask", id=done["id"])))["result"]
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"

    on_gateway(scenario, auth=False)


def test_a_slow_blocking_send_is_written_working_and_can_be_got_and_cancelled_meanwhile(
) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        waiting = asyncio.ensure_future(rpc(client, send(order(11, sleep_s=60))))

        async def announced() -> dict[str, Any] | None:  # written WORKING after a second
            tasks = (await rpc(client, call("ListTasks")))["result"].get("tasks", [])
            return tasks[0] if tasks else None

        task = await eventually(announced)
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        assert not waiting.done()  # the caller still waits for the end
        got = (await rpc(client, call("GetTask", id=task["id"])))["result"]
        assert got["status"]["state"] == "TASK_STATE_WORKING"
        cancelled = (await rpc(client, call("CancelTask", id=task["id"])))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        assert cancelled["metadata"]["reach"]["cancelled"] is True
        answered = (await waiting)["result"]["task"]
        assert (answered["id"], answered["status"]["state"]) == (task["id"],
                                                                 "TASK_STATE_CANCELED")
        await eventually(lambda: _true(Orders.cancelled == [11]))
        again = await rpc(client, call("CancelTask", id=task["id"]))
        assert again["error"]["code"] == -32002

    on_gateway(scenario, auth=False)


def test_a_task_whose_replica_died_is_ended_failed_by_the_replica_that_reads_it_next() -> None:
    async def main(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Orders, "orders-1", placement=reach.Packed())
        servers = []
        for name in ("gw-a", "gw-b"):
            start_gateway(fake, GatewayOptions(auth=False, name=name))
            servers.append(fake.services[name])
        a, b = (httpx.AsyncClient(transport=httpx.ASGITransport(s.app), base_url="http://gw",
                                  headers=V1) for s in servers)
        async with a, b:
            waiting = asyncio.ensure_future(rpc(a, send(order(12, sleep_s=600))))

            async def announced() -> dict[str, Any] | None:
                tasks = (await rpc(b, call("ListTasks")))["result"].get("tasks", [])
                return tasks[0] if tasks else None

            task = await eventually(announced)
            assert task["metadata"]["reach"]["replica"] == servers[0].executor.replica
            alive = (await rpc(b, call("GetTask", id=task["id"])))["result"]
            assert alive["status"]["state"] == "TASK_STATE_WORKING"  # its replica lives

            # Replica a's process dies: its inbox goes, and its call stops where it is (here it
            # is cancelled, so that nothing of a writes to the task again, as a dead one could not).
            fake.crash(servers[0].executor.replica)
            waiting.cancel()
            still = await servers[1].store.get(task["id"], _anonymous())
            assert still is not None
            assert still.status.state == TaskState.TASK_STATE_WORKING  # nobody ended it yet

            async def failed() -> dict[str, Any] | None:  # once b's liveness answer expires
                got: dict[str, Any] = (await rpc(b, call("GetTask", id=task["id"])))["result"]
                return got if got["status"]["state"] == "TASK_STATE_FAILED" else None

            ended = await eventually(failed, within_s=30)
            assert ended["metadata"]["reach"]["error"]["severity"] == "retryable"
            said = ended["status"]["message"]["parts"][0]["text"]
            assert "the gateway replica running this task" in said
            again = (await rpc(b, call("GetTask", id=task["id"])))["result"]
            assert again["status"]["state"] == "TASK_STATE_FAILED"  # written, not recomputed
        for server in servers:
            await server.close()

    Orders.cancelled.clear()
    run(main)


@pytest.mark.parametrize("observers", ["observer", ("observer", ""), (1,)])
def test_observers_that_are_not_a_tuple_of_token_names_are_refused(observers: Any) -> None:
    with pytest.raises(ConfigError, match="observers must be a tuple of token names"):
        GatewayOptions(observers=observers)
